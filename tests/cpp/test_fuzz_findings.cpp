// SPDX-License-Identifier: Apache-2.0
// Regressions for what tests/fuzz/fuzz_graph_exec found: each graph here once crashed or hit
// undefined behaviour (the fuzz build runs ASan and UBSan; these run in the sanitized ctest too).
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <memory>
#include <unordered_map>
#include <vector>

#include "opendnn/opendnn.h"

using namespace opendnn;

namespace {

TEST(FuzzFindings, StorageOfASpanEndingAtInt64MaxIsUnrepresentable) {
  TensorAttr t;
  t.set_dim({2}).set_stride({std::numeric_limits<int64_t>::max()});
  EXPECT_EQ(t.storage_elements(), -1);  // last offset INT64_MAX: the count does not fit
  t.set_dim({1}).set_stride({1});
  EXPECT_EQ(t.storage_elements(), 1);
}

TEST(FuzzFindings, InferredStridesOfHugeDimsSaturateAndAreRejected) {
  const int64_t big = std::numeric_limits<int64_t>::max();
  EXPECT_EQ(row_major_strides({4, big, 2}), (std::vector<int64_t>{big, 2, 1}));
  Graph g;
  g.set_io_data_type(DataType::FLOAT).set_compute_data_type(DataType::FLOAT);
  auto x = g.tensor(TensorAttr().set_name("x").set_dim({4, big, 2}).set_data_type(DataType::FLOAT));
  g.relu(x, NodeAttrs().set_name("act"))->set_output(true);
  Status s = g.validate();
  EXPECT_TRUE(s.is_bad());
}

TEST(FuzzFindings, ConvolutionOfAnInputWithoutChannelsIsRejected) {
  Graph g;
  g.set_io_data_type(DataType::FLOAT).set_compute_data_type(DataType::FLOAT);
  auto x = g.tensor(TensorAttr().set_name("x").set_dim({1, 0, 4, 4}).set_data_type(DataType::FLOAT));
  auto w = g.tensor(TensorAttr().set_name("w").set_dim({2, 1, 3, 3}).set_data_type(DataType::FLOAT));
  NodeAttrs a;
  a.set_name("conv");
  g.add_node(OpKind::CONV_FPROP, {x, w}, a)[0]->set_output(true);
  Status s = g.validate();  // divided by the zero group count
  EXPECT_TRUE(s.is_bad());
  EXPECT_NE(s.message().find("has 0 channels"), std::string::npos) << s.to_string();
}

TEST(FuzzFindings, DgradFromAnEmptyGradientAxisIsNotInferred) {
  // DY [1,1,0,2]: DX was inferred as [1,1,1,3], which the forward rule (checked when DX's dims are
  // given, e.g. after a JSON round trip) then refused.
  Graph g;
  g.set_io_data_type(DataType::FLOAT).set_compute_data_type(DataType::FLOAT);
  auto dy = g.tensor(TensorAttr().set_name("dy").set_dim({1, 1, 0, 2}).set_data_type(DataType::FLOAT));
  auto w = g.tensor(TensorAttr().set_name("w").set_dim({1, 1, 2, 2}).set_data_type(DataType::FLOAT));
  g.add_node(OpKind::CONV_DGRAD, {dy, w}, NodeAttrs().set_name("dgrad"))[0]->set_output(true);
  Status s = g.validate();
  EXPECT_EQ(s.code(), ErrorCode::SHAPE_DEDUCTION_FAILED) << s.to_string();
  EXPECT_NE(s.message().find("spatial dim 0 of DY [1,1,0,2] is empty"), std::string::npos) << s.message();
}

// Builds g on the reference engine and executes it on buffers of each tensor's span.
Status run_reference(Graph& g) {
  OPENDNN_RETURN_IF_ERROR(g.build({HeurMode::FALLBACK}));
  std::vector<std::vector<std::byte>> storage;
  std::unordered_map<int64_t, void*> pack;
  for (int64_t uid : g.variant_uids()) {
    storage.emplace_back(size_t(std::max<int64_t>(g.find_tensor(uid)->storage_bytes(), 1)) + 64);
    pack[uid] = storage.back().data();
  }
  std::vector<std::byte> ws(size_t(g.get_workspace_size()) + 64);
  return g.execute(pack, ws.data());
}

TEST(FuzzFindings, ZeroSizeMatmulWithAHugeBatchDoesNothing) {
  // C [2^40, 0, 0]: the kernel sized a per-batch table of 2^40 entries before noticing there is no work.
  Graph g;
  g.set_io_data_type(DataType::FLOAT).set_compute_data_type(DataType::FLOAT);
  const std::vector<int64_t> dims = {int64_t(1) << 40, 0, 0};
  auto a = g.tensor(TensorAttr().set_name("a").set_dim(dims).set_stride({1, 1, 1}).set_data_type(DataType::FLOAT));
  auto b = g.tensor(TensorAttr().set_name("b").set_dim(dims).set_stride({1, 1, 1}).set_data_type(DataType::FLOAT));
  g.matmul(a, b, NodeAttrs().set_name("mm"))->set_output(true).set_data_type(DataType::FLOAT);
  ASSERT_TRUE(g.validate().is_good());
  Status s = run_reference(g);
  EXPECT_TRUE(s.is_good()) << s.to_string();
}

TEST(FuzzFindings, MatmulOverridesMustHoldAValueForEveryBatch) {
  // K_override [3] for 16 batches: the kernel read values 3..15 past the tensor.
  auto make = [](std::vector<int64_t> kdims) {
    auto g = std::make_unique<Graph>();
    g->set_io_data_type(DataType::FLOAT).set_compute_data_type(DataType::FLOAT);
    auto a = g->tensor(TensorAttr().set_name("a").set_dim({16, 4, 4}).set_data_type(DataType::FLOAT));
    auto b = g->tensor(TensorAttr().set_name("b").set_dim({16, 4, 4}).set_data_type(DataType::FLOAT));
    auto k = g->tensor(TensorAttr().set_name("k").set_dim(kdims).set_data_type(DataType::INT32));
    g->matmul(a, b, NodeAttrs().set_name("mm").input("K_override", k))->set_output(true).set_data_type(DataType::FLOAT);
    return g;
  };
  Status s = make({3})->validate();
  EXPECT_EQ(s.code(), ErrorCode::SHAPE_DEDUCTION_FAILED) << s.to_string();
  EXPECT_NE(s.message().find("K_override [3] must hold one value, one per batch ([16])"), std::string::npos) << s.message();
  EXPECT_TRUE(make({2, 8})->validate().is_bad());
  for (auto ok : {std::vector<int64_t>{1}, {16}, {16, 1, 1}, {1, 1, 1}}) {
    auto g = make(ok);
    ASSERT_TRUE(g->validate().is_good()) << ok.size();
    s = run_reference(*g);
    EXPECT_TRUE(s.is_good()) << s.to_string();
  }
}

TEST(FuzzFindings, LayerNormOfAZeroSizeTensorRunsOnTheReferenceEngine) {
  // X [1,4,3,3,0]: the normalised axes hold no element (the reference kernel divided by the zero dim).
  Graph g;
  g.set_io_data_type(DataType::FLOAT).set_intermediate_data_type(DataType::FLOAT).set_compute_data_type(DataType::FLOAT);
  const std::vector<int64_t> dims = {1, 4, 3, 3, 0};
  auto x = g.tensor(TensorAttr().set_name("x").set_dim(dims).set_data_type(DataType::FLOAT));
  auto scale = g.tensor(TensorAttr().set_name("scale").set_dim({1, 4, 3, 3, 0}).set_data_type(DataType::FLOAT));
  auto bias = g.tensor(TensorAttr().set_name("bias").set_dim({1, 4, 3, 3, 0}).set_data_type(DataType::FLOAT));
  auto eps = g.tensor(Scalar::of_float(1e-5f));
  NodeAttrs a;
  a.set_name("ln").set("forward_phase", "TRAINING");
  auto outs = g.add_node(OpKind::LAYERNORM, {x, scale, bias, eps}, a);
  for (const auto& o : outs)
    if (o) o->set_output(true);
  Status s = g.validate();
  ASSERT_TRUE(s.is_good()) << s.to_string();
  s = run_reference(g);
  EXPECT_TRUE(s.is_good()) << s.to_string();
}

TEST(FuzzFindings, SliceWithAHugeStrideHasOneElementPerAxis) {
  Graph g;
  g.set_io_data_type(DataType::FLOAT).set_compute_data_type(DataType::FLOAT);
  auto x = g.tensor(TensorAttr().set_name("x").set_dim({4, 6}).set_data_type(DataType::FLOAT));
  NodeAttrs a;
  a.set_name("sl").set("start", std::vector<int64_t>{1, 0}).set("end", std::vector<int64_t>{4, 6})
      .set("stride", std::vector<int64_t>{std::numeric_limits<int64_t>::max(), 2});
  auto y = g.add_node(OpKind::SLICE, {x}, a)[0];
  y->set_output(true);
  Status s = g.validate();  // (e - b + stride - 1) overflowed
  ASSERT_TRUE(s.is_good()) << s.to_string();
  EXPECT_EQ(y->get_dim(), (std::vector<int64_t>{1, 3}));
  s = run_reference(g);  // and the kernel multiplied the huge stride by X's
  EXPECT_TRUE(s.is_good()) << s.to_string();
}

TEST(FuzzFindings, ReshapeTargetWhoseVolumeOverflowsIsRejected) {
  Graph g;
  g.set_io_data_type(DataType::FLOAT).set_compute_data_type(DataType::FLOAT);
  auto x = g.tensor(TensorAttr().set_name("x").set_dim({4, 6}).set_data_type(DataType::FLOAT));
  NodeAttrs a;
  a.set_name("rs").set("dims", std::vector<int64_t>{-1, std::numeric_limits<int64_t>::max(), int64_t(1) << 40});
  g.add_node(OpKind::RESHAPE, {x}, a)[0]->set_output(true);
  Status s = g.validate();
  EXPECT_TRUE(s.is_bad());
  EXPECT_NE(s.message().find("overflow"), std::string::npos) << s.to_string();
}

}  // namespace
