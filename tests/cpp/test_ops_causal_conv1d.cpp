// SPDX-License-Identifier: Apache-2.0
// CAUSAL_CONV1D and CAUSAL_CONV1D_BWD: inference of dims/strides/types and every rule.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "opendnn/graph.h"
#include "support/rule_test.h"

using namespace opendnn;
using namespace opendnn::test;

namespace {

const std::string kFwd = "causal_conv1d \"conv\"";
const std::string kBwd = "causal_conv1d_backward \"conv_bwd\"";

Graph make_graph() {
  Graph g;
  g.set_io_data_type(DataType::BFLOAT16).set_intermediate_data_type(DataType::FLOAT).set_compute_data_type(DataType::FLOAT);
  return g;
}

TEST(CausalConv1dInfer, NcwWithBiasAndStates) {
  Graph g = make_graph();
  auto x = input(g, "x", {2, 64, 100}, DataType::BFLOAT16);
  auto w = input(g, "w", {64, 4}, DataType::FLOAT);
  auto out = g.causal_conv1d(x, w,
                             NodeAttrs()
                                 .set_name("conv")
                                 .set("activation", "SILU")
                                 .input("bias", input(g, "b", {64}, DataType::FLOAT))
                                 .input("initial_states", input(g, "s0", {2, 64, 3}, DataType::FLOAT)));
  out[0]->set_output(true);
  out[1]->set_output(true);
  ASSERT_TRUE(g.validate().is_good()) << g.validate().to_string();
  EXPECT_EQ(out[0]->get_dim(), (Dims{2, 64, 100}));
  EXPECT_EQ(out[0]->get_stride(), (Dims{6400, 100, 1}));
  EXPECT_EQ(out[0]->get_data_type(), DataType::BFLOAT16);
  EXPECT_EQ(out[1]->get_dim(), (Dims{2, 64, 3}));
  EXPECT_EQ(out[1]->get_data_type(), DataType::FLOAT);  // follows initial_states
}

TEST(CausalConv1dInfer, NwhKeepsChannelsLastStrides) {
  Graph g = make_graph();
  auto x = input(g, "x", {2, 100, 64}, DataType::HALF);
  auto w = input(g, "w", {64, 128}, DataType::HALF);
  auto out = g.causal_conv1d(x, w, NodeAttrs().set_name("conv").set("layout", "NWH"));
  ASSERT_TRUE(g.validate().is_good()) << g.validate().to_string();
  EXPECT_EQ(out[0]->get_dim(), (Dims{2, 100, 64}));
  EXPECT_EQ(out[0]->get_data_type(), DataType::HALF);
  EXPECT_EQ(out[1]->get_dim(), (Dims{2, 64, 127}));
  EXPECT_EQ(out[1]->get_data_type(), DataType::HALF);  // no initial_states: X's type

  // X given as a channels-last view of [B,C,L] in NCW: Y keeps those strides.
  Graph g2 = make_graph();
  auto x2 = input(g2, "x", {2, 64, 100}, DataType::BFLOAT16, {6400, 1, 64});
  auto w2 = input(g2, "w", {64, 4}, DataType::BFLOAT16);
  auto out2 = g2.causal_conv1d(x2, w2, NodeAttrs().set_name("conv"));
  ASSERT_TRUE(g2.validate().is_good()) << g2.validate().to_string();
  EXPECT_EQ(out2[0]->get_stride(), (Dims{6400, 1, 64}));
}

TEST(CausalConv1dReject, Rules) {
  auto run = [](Dims xd, Dims wd, const char* layout, ErrorCode code, const std::string& what, NodeAttrs extra = {}) {
    Graph g = make_graph();
    auto x = input(g, "x", xd, DataType::BFLOAT16);
    auto w = input(g, "w", wd, DataType::BFLOAT16);
    extra.set_name("conv").set("layout", layout);
    g.causal_conv1d(x, w, extra);
    expect_fail(g, code, kFwd, what);
  };
  run({2, 64}, {64, 4}, "NCW", ErrorCode::SHAPE_DEDUCTION_FAILED, "input X must have 3 dims");
  run({2, 64, 100}, {64, 4, 1}, "NCW", ErrorCode::SHAPE_DEDUCTION_FAILED, "input W must have 2 dims");
  run({2, 64, 100}, {32, 4}, "NCW", ErrorCode::SHAPE_DEDUCTION_FAILED, "must be [C,Kw] with C = 64");
  run({2, 100, 64}, {100, 4}, "NWH", ErrorCode::SHAPE_DEDUCTION_FAILED, "must be [C,Kw] with C = 64");
  run({2, 64, 100}, {64, 1}, "NCW", ErrorCode::GRAPH_NOT_SUPPORTED, "kernel width 1 of W is outside 2..256");
  run({2, 64, 100}, {64, 257}, "NCW", ErrorCode::GRAPH_NOT_SUPPORTED, "kernel width 257 of W is outside 2..256");
  run({2, 100, 64}, {64, 129}, "NWH", ErrorCode::GRAPH_NOT_SUPPORTED, "kernel width 129 of W is outside 2..128 for layout NWH");
  run({2, 64, 100}, {64, 0}, "NCW", ErrorCode::SHAPE_DEDUCTION_FAILED, "must be >= 1");
  run({2, 64, 100}, {64, 4}, "NCHW", ErrorCode::INVALID_VALUE, "layout");
  {
    Graph g = make_graph();  // holds the extra tensor only
    run({2, 64, 100}, {64, 4}, "NCW", ErrorCode::SHAPE_DEDUCTION_FAILED, "input bias has dims [32] but must be [64]",
        NodeAttrs().input("bias", input(g, "b", {32}, DataType::FLOAT)));
  }
  {
    Graph g = make_graph();
    run({2, 64, 100}, {64, 4}, "NCW", ErrorCode::SHAPE_DEDUCTION_FAILED, "input initial_states has dims [2,64,4] but must be [2,64,3]",
        NodeAttrs().input("initial_states", input(g, "s0", {2, 64, 4}, DataType::FLOAT)));
  }
  {
    Graph g = make_graph();
    auto x = input(g, "x", {2, 64, 100}, DataType::INT8);
    auto w = input(g, "w", {64, 4}, DataType::BFLOAT16);
    g.causal_conv1d(x, w, NodeAttrs().set_name("conv"));
    expect_fail(g, ErrorCode::GRAPH_NOT_SUPPORTED, kFwd, "input X has data type INT8");
  }
}

TEST(CausalConv1dBwdInfer, GradientsFollowInputs) {
  Graph g = make_graph();
  auto x = input(g, "x", {2, 64, 100}, DataType::BFLOAT16);
  auto w = input(g, "w", {64, 4}, DataType::FLOAT);
  auto dy = input(g, "dy", {2, 64, 100}, DataType::BFLOAT16);
  auto out = g.causal_conv1d_backward(x, w, dy,
                                      NodeAttrs()
                                          .set_name("conv_bwd")
                                          .input("bias", input(g, "b", {64}, DataType::FLOAT))
                                          .input("initial_states", input(g, "s0", {2, 64, 3}, DataType::BFLOAT16))
                                          .input("d_final_states", input(g, "dsT", {2, 64, 3}, DataType::BFLOAT16)));
  for (auto& o : out) o->set_output(true);
  ASSERT_TRUE(g.validate().is_good()) << g.validate().to_string();
  EXPECT_EQ(out[0]->get_dim(), (Dims{2, 64, 100}));
  EXPECT_EQ(out[0]->get_data_type(), DataType::BFLOAT16);
  EXPECT_EQ(out[1]->get_dim(), (Dims{64, 4}));
  EXPECT_EQ(out[1]->get_stride(), (Dims{4, 1}));
  EXPECT_EQ(out[1]->get_data_type(), DataType::FLOAT);
  EXPECT_EQ(out[2]->get_dim(), (Dims{64}));
  EXPECT_EQ(out[3]->get_dim(), (Dims{2, 64, 3}));
  EXPECT_EQ(out[3]->get_data_type(), DataType::BFLOAT16);

  Graph g2 = make_graph();
  auto out2 = g2.causal_conv1d_backward(input(g2, "x", {2, 64, 100}, DataType::BFLOAT16), input(g2, "w", {64, 4}, DataType::BFLOAT16),
                                        input(g2, "dy", {2, 64, 100}, DataType::BFLOAT16), NodeAttrs().set_name("conv_bwd"));
  ASSERT_TRUE(g2.validate().is_good()) << g2.validate().to_string();
  EXPECT_EQ(out2[2]->get_dim(), (Dims{0}));
  EXPECT_EQ(out2[3]->get_dim(), (Dims{0, 0, 0}));
}

TEST(CausalConv1dBwdReject, Rules) {
  {
    Graph g = make_graph();
    g.causal_conv1d_backward(input(g, "x", {2, 64, 100}, DataType::BFLOAT16), input(g, "w", {64, 4}, DataType::BFLOAT16),
                             input(g, "dy", {2, 64, 99}, DataType::BFLOAT16), NodeAttrs().set_name("conv_bwd"));
    expect_fail(g, ErrorCode::SHAPE_DEDUCTION_FAILED, kBwd, "input DY has dims [2,64,99] but must be [2,64,100]");
  }
  {
    Graph g = make_graph();
    auto out = g.causal_conv1d_backward(input(g, "x", {2, 64, 100}, DataType::BFLOAT16), input(g, "w", {64, 4}, DataType::BFLOAT16),
                                        input(g, "dy", {2, 64, 100}, DataType::BFLOAT16), NodeAttrs().set_name("conv_bwd"));
    out[2]->set_output(true);
    expect_fail(g, ErrorCode::ATTRIBUTE_NOT_SET, kBwd, "output dbias is marked as a graph output but input bias is not set");
  }
  {
    Graph g = make_graph();
    g.causal_conv1d_backward(input(g, "x", {2, 100, 64}, DataType::BFLOAT16), input(g, "w", {64, 200}, DataType::BFLOAT16),
                             input(g, "dy", {2, 100, 64}, DataType::BFLOAT16), NodeAttrs().set_name("conv_bwd").set("layout", "NWH"));
    expect_fail(g, ErrorCode::GRAPH_NOT_SUPPORTED, kBwd, "kernel width 200 of W is outside 2..128");
  }
  {
    Graph g = make_graph();
    g.causal_conv1d_backward(input(g, "x", {2, 64, 100}, DataType::BFLOAT16), input(g, "w", {64, 4}, DataType::BFLOAT16),
                             input(g, "dy", {2, 64, 100}, DataType::BFLOAT16),
                             NodeAttrs().set_name("conv_bwd").input("d_final_states", input(g, "d", {2, 64, 4}, DataType::FLOAT)));
    expect_fail(g, ErrorCode::SHAPE_DEDUCTION_FAILED, kBwd, "input d_final_states has dims [2,64,4] but must be [2,64,3]");
  }
}

}  // namespace
