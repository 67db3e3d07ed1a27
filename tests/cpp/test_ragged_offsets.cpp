// SPDX-License-Identifier: Apache-2.0
// Ragged offsets are range-checked by the reference engine before any kernel reads them: an offset
// that would address outside its tensor is a clear INVALID_VARIANT_PACK error, never a stray access.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "engines/reference/ragged_check.h"
#include "opendnn/opendnn.h"

using namespace opendnn;

namespace {

TEST(RaggedOffsets, LimitIsTheLastStartWhereOneBatchEntryFits) {
  // [2,2,4,16] with BSHD strides: 256 elements, one batch entry spans 128.
  EXPECT_EQ(ref::max_batch_start({2, 2, 4, 16}, {128, 16, 32, 1}), 128);
  EXPECT_EQ(ref::max_batch_start({2, 2, 4, 16}, {1, 16, 32, 1}), 1);
  EXPECT_EQ(ref::max_batch_start({0, 2}, {2, 1}), -1);
  std::vector<int32_t> ok = {0, 128, 256}, bad = {0, 129, 0}, neg = {-1, 0, 0};
  EXPECT_EQ(ref::batch_offsets_error({2, 2, 4, 16}, {128, 16, 32, 1}, "Q", ok.data(), DataType::INT32, 2), "");
  EXPECT_EQ(ref::batch_offsets_error({2, 2, 4, 16}, {128, 16, 32, 1}, "Q", bad.data(), DataType::INT32, 2),
            "offset 129 of batch 1 is out of range: batch entries of Q start in [0, 128]");
  EXPECT_NE(ref::batch_offsets_error({2, 2, 4, 16}, {128, 16, 32, 1}, "Q", neg.data(), DataType::INT32, 2), "");
  std::vector<int64_t> huge = {0, INT64_MAX / 2};
  EXPECT_NE(ref::batch_offsets_error({2, 2, 4, 16}, {128, 16, 32, 1}, "Q", huge.data(), DataType::INT64, 2, 32), "");
}

TEST(RaggedOffsets, ReferenceEngineRefusesOffsetsOutsideTheTensor) {
  std::ifstream in("tests/cli/graphs/sdpa_ragged.json");
  ASSERT_TRUE(in) << "run from the source tree";
  std::stringstream text;
  text << in.rdbuf();
  Graph g;
  ASSERT_TRUE(g.deserialize(text.str()).is_good());
  ASSERT_TRUE(g.validate().is_good());
  ASSERT_TRUE(g.build({HeurMode::FALLBACK}).is_good());
  std::vector<std::vector<std::byte>> storage;
  std::unordered_map<int64_t, void*> pack;
  for (int64_t uid : g.variant_uids()) {
    storage.emplace_back(size_t(g.find_tensor(uid)->storage_bytes()) + 64, std::byte{0});
    pack[uid] = storage.back().data();
  }
  auto set = [&](int64_t uid, std::vector<int32_t> v) { std::memcpy(pack.at(uid), v.data(), v.size() * 4); };
  set(5, {8, 8});       // seq_len_q
  set(6, {4, 4});       // seq_len_kv
  set(11, {0, 128, 256});  // ragged_kv: in range
  int64_t ws_size = 0;
  ASSERT_TRUE(g.get_workspace_size(ws_size).is_good());
  std::vector<std::byte> ws(size_t(ws_size) + 64);

  set(10, {0, 256, 512});  // ragged_q: in range
  Status s = g.execute(pack, ws.data());
  EXPECT_TRUE(s.is_good()) << s.to_string();

  set(10, {0, 100000, 0});
  s = g.execute(pack, ws.data());
  EXPECT_EQ(s.code(), ErrorCode::INVALID_VARIANT_PACK);
  EXPECT_NE(s.message().find("offset 100000 of batch 1 is out of range"), std::string::npos) << s.message();

  set(10, {-4096, 0, 0});
  s = g.execute(pack, ws.data());
  EXPECT_EQ(s.code(), ErrorCode::INVALID_VARIANT_PACK) << s.to_string();
}

}  // namespace

namespace {

TEST(RaggedOffsets, OpsThatDoNotReadThemAreDeclinedByTheReferenceEngine) {
  // A concatenate whose input has a ragged offset: its kernel would take the offsets for a second
  // input and read past them.
  Graph g;
  g.set_io_data_type(DataType::FLOAT).set_compute_data_type(DataType::FLOAT);
  auto r = g.tensor(TensorAttr().set_name("r").set_dim({4, 1, 1, 1}).set_stride({1, 1, 1, 1}).set_data_type(DataType::INT32));
  auto x = g.tensor(TensorAttr().set_name("x").set_dim({3}).set_stride({1}).set_data_type(DataType::FLOAT));
  x->set_ragged_offset(r);
  g.concatenate({x}, NodeAttrs().set_name("cat").set("axis", int64_t(0)))->set_output(true);
  ASSERT_TRUE(g.validate().is_good());
  Status s = g.build({HeurMode::FALLBACK});
  ASSERT_TRUE(s.is_bad());
  EXPECT_NE(s.message().find("tensor \"x\" has a ragged offset, which only the SDPA ops read"), std::string::npos)
      << s.message();
}

}  // namespace
