// SPDX-License-Identifier: Apache-2.0
// The reference engine end to end: graphs built, planned, executed on host memory and checked
// against hand-computed values.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "common/dtype_convert.h"
#include "engines/reference/ref_kernel.h"
#include "opendnn/opendnn.h"

using namespace opendnn;

namespace {

// Reference plans only: other engines (GPU ones) may be registered in this build.
Status build_reference(Graph& g) {
  OPENDNN_RETURN_IF_ERROR(g.validate());
  OPENDNN_RETURN_IF_ERROR(g.create_execution_plans({HeurMode::FALLBACK}));
  OPENDNN_RETURN_IF_ERROR(g.check_support());
  return g.build_plans();
}

std::vector<std::byte> workspace_for(const Graph& g) {
  return std::vector<std::byte>(size_t(std::max<int64_t>(g.get_workspace_size(), 1)));
}

}  // namespace

TEST(ReferenceEngine, AddReluWithAConstant) {
  if (!ref::kernel_for(OpKind::POINTWISE)) GTEST_SKIP() << "no POINTWISE reference kernel yet";
  Graph g;
  g.set_io_data_type(DataType::FLOAT).set_intermediate_data_type(DataType::FLOAT).set_compute_data_type(DataType::FLOAT);
  auto x = g.tensor(TensorAttr().set_name("x").set_dim({2, 3}));
  auto y = g.tensor(TensorAttr().set_name("y").set_dim({1, 3}));  // broadcast over rows
  auto half = g.tensor(TensorAttr().set_dim({1, 1}).set_stride({1, 1}).set_value(Scalar::of_float(0.5f)));
  auto s = g.add(x, y, NodeAttrs().set_name("sum"));
  auto r = g.relu(s, NodeAttrs().set_name("act"));
  auto o = g.mul(r, half, NodeAttrs().set_name("scale"));
  o->set_output(true).set_name("o");
  ASSERT_TRUE(build_reference(g).is_good());
  std::string name;
  ASSERT_TRUE(g.get_plan_name_at_index(0, name).is_good());
  EXPECT_EQ(name, "reference:reference");
  // Two virtual intermediates, 64-byte aligned, plus alignment slack.
  EXPECT_GE(g.get_workspace_size(), 128);
  ASSERT_EQ(g.variant_uids().size(), 3u);

  std::vector<float> xv{1, -2, 3, -4, 5, -6}, yv{0.5f, 1, -1}, ov(6, -99.f);
  auto ws = workspace_for(g);
  ASSERT_TRUE(g.execute({{x, xv.data()}, {y, yv.data()}, {o, ov.data()}}, ws.data()).is_good());
  std::vector<float> want{0.75f, 0.f, 1.f, 0.f, 3.f, 0.f};
  for (size_t i = 0; i < 6; ++i) EXPECT_FLOAT_EQ(ov[i], want[i]) << i;

  // The hot path with the slots in variant_uids() order gives the same result.
  std::fill(ov.begin(), ov.end(), -99.f);
  std::vector<void*> slots;
  for (int64_t uid : g.variant_uids())
    slots.push_back(uid == x->get_uid() ? (void*)xv.data() : uid == y->get_uid() ? (void*)yv.data() : (void*)ov.data());
  ASSERT_TRUE(g.execute(slots.data(), ws.data()).is_good());
  for (size_t i = 0; i < 6; ++i) EXPECT_FLOAT_EQ(ov[i], want[i]) << i;

  // An unaligned workspace works too (the plan aligns it).
  std::vector<std::byte> ws2(ws.size() + 8);
  ASSERT_TRUE(g.execute(slots.data(), ws2.data() + 3).is_good());
  for (size_t i = 0; i < 6; ++i) EXPECT_FLOAT_EQ(ov[i], want[i]) << i;
}

TEST(ReferenceEngine, HalfOutputAndHostScalarSlot) {
  if (!ref::kernel_for(OpKind::POINTWISE)) GTEST_SKIP() << "no POINTWISE reference kernel yet";
  Graph g;
  g.set_io_data_type(DataType::HALF).set_intermediate_data_type(DataType::FLOAT).set_compute_data_type(DataType::FLOAT);
  auto x = g.tensor(TensorAttr().set_name("x").set_dim({4}));
  // A pass-by-value tensor without a value: a slot pointing at a host scalar.
  auto k = g.tensor(TensorAttr().set_name("k").set_dim({1}).set_data_type(DataType::FLOAT).set_is_pass_by_value(true));
  auto o = g.mul(x, k, NodeAttrs().set_name("scale"));
  o->set_output(true).set_name("o");
  ASSERT_TRUE(build_reference(g).is_good());
  ASSERT_EQ(g.variant_uids().size(), 3u);
  std::vector<uint16_t> xv(4), ov(4);
  for (int i = 0; i < 4; ++i) xv[size_t(i)] = double_to_half(i + 0.5);
  float kv = 2.0f;
  auto ws = workspace_for(g);
  ASSERT_TRUE(g.execute({{x->get_uid(), xv.data()}, {k->get_uid(), &kv}, {o->get_uid(), ov.data()}}, ws.data()).is_good());
  for (int i = 0; i < 4; ++i) EXPECT_DOUBLE_EQ(half_to_double(ov[size_t(i)]), 2.0 * (i + 0.5));
}

TEST(ReferenceEngine, UnusedVirtualOutputsAreSkipped) {
  if (!ref::kernel_for(OpKind::RMSNORM)) GTEST_SKIP() << "no RMSNORM reference kernel yet";
  Graph g;
  g.set_io_data_type(DataType::FLOAT).set_intermediate_data_type(DataType::FLOAT).set_compute_data_type(DataType::FLOAT);
  auto x = g.tensor(TensorAttr().set_name("x").set_dim({2, 4}));
  auto w = g.tensor(TensorAttr().set_name("w").set_dim({1, 4}));
  auto eps = g.tensor(Scalar::of_float(0.0f));
  auto [y, inv] = g.rmsnorm(x, w, eps, NodeAttrs().set_name("norm").set("forward_phase", "INFERENCE"));
  y->set_output(true).set_name("y");
  Status s = build_reference(g);
  if (s.is_bad()) GTEST_SKIP() << s.message();
  EXPECT_EQ(g.get_workspace_size(), 0);  // inv_variance is virtual and nobody reads it
  std::vector<float> xv{1, 1, 1, 1, 3, -3, 3, -3}, wv{1, 2, 3, 4}, yv(8);
  ASSERT_TRUE(g.execute({{x, xv.data()}, {w, wv.data()}, {y, yv.data()}}, nullptr).is_good());
  std::vector<float> want{1, 2, 3, 4, 1, -2, 3, -4};
  for (size_t i = 0; i < 8; ++i) EXPECT_NEAR(yv[i], want[i], 1e-6) << i;
}

TEST(ReferenceEngine, Matmul) {
  if (!ref::kernel_for(OpKind::MATMUL)) GTEST_SKIP() << "no MATMUL reference kernel yet";
  Graph g;
  g.set_io_data_type(DataType::FLOAT).set_intermediate_data_type(DataType::FLOAT).set_compute_data_type(DataType::FLOAT);
  auto a = g.tensor(TensorAttr().set_name("a").set_dim({1, 2, 3}));
  auto b = g.tensor(TensorAttr().set_name("b").set_dim({1, 3, 2}));
  auto c = g.matmul(a, b, NodeAttrs().set_name("mm"));
  c->set_output(true).set_name("c");
  ASSERT_TRUE(build_reference(g).is_good());
  std::vector<float> av{1, 2, 3, 4, 5, 6}, bv{7, 8, 9, 10, 11, 12}, cv(4);
  auto ws = workspace_for(g);
  ASSERT_TRUE(g.execute({{a, av.data()}, {b, bv.data()}, {c, cv.data()}}, ws.data()).is_good());
  EXPECT_FLOAT_EQ(cv[0], 58);
  EXPECT_FLOAT_EQ(cv[1], 64);
  EXPECT_FLOAT_EQ(cv[2], 139);
  EXPECT_FLOAT_EQ(cv[3], 154);
}

TEST(ReferenceEngine, DeclinesNameTheNode) {
  // The pointwise kernel's check() rejects ranks above its limit: the decline names the node.
  if (!ref::kernel_for(OpKind::POINTWISE)) GTEST_SKIP() << "no POINTWISE reference kernel yet";
  Graph g;
  g.set_io_data_type(DataType::FLOAT).set_intermediate_data_type(DataType::FLOAT).set_compute_data_type(DataType::FLOAT);
  std::vector<int64_t> dims(40, 1);
  auto x = g.tensor(TensorAttr().set_name("x").set_dim(dims));
  auto o = g.neg(x, NodeAttrs().set_name("deep"));
  o->set_output(true);
  if (g.validate().is_bad()) GTEST_SKIP() << "rank-40 tensors do not validate";
  ASSERT_TRUE(g.create_execution_plans({HeurMode::FALLBACK}).is_good());
  if (g.get_execution_plan_count() > 0) GTEST_SKIP() << "the pointwise kernel accepts rank 40";
  Status s = g.check_support();
  EXPECT_EQ(s.code(), ErrorCode::GRAPH_NOT_SUPPORTED);
  EXPECT_NE(s.message().find("reference: pointwise \"deep\""), std::string::npos) << s.message();
}
