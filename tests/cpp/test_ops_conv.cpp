// SPDX-License-Identifier: Apache-2.0
// Inference and validation rules of conv_fprop, conv_dgrad, conv_wgrad.
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "opendnn/graph.h"
#include "support/rule_test.h"

using namespace opendnn;
using namespace opendnn::test;

TEST(OpsConv, FpropInfersGroupedStridedPaddedOutput) {
  Graph g;
  g.set_io_data_type(DataType::HALF).set_intermediate_data_type(DataType::FLOAT);
  auto x = input(g, "x", {2, 8, 10, 12}, DataType::HALF);
  auto w = input(g, "w", {16, 4, 3, 3}, DataType::HALF);
  auto y = g.conv_fprop(x, w, NodeAttrs().set_name("c1").set_compute_data_type(DataType::DOUBLE)
                                  .set("pre_padding", {1, 1}).set("post_padding", {1, 1}).set("stride", {2, 2}));
  y->set_output(true);
  EXPECT_VALID(g);
  EXPECT_EQ(y->get_dim(), (Dims{2, 16, 5, 6}));
  EXPECT_EQ(y->get_stride(), (Dims{480, 30, 6, 1}));
  EXPECT_EQ(y->get_data_type(), DataType::HALF);
}

TEST(OpsConv, Fprop1DDilatedAnd3D) {
  Graph g;
  g.set_io_data_type(DataType::FLOAT);
  auto y1 = g.conv_fprop(input(g, "x", {1, 3, 20}), input(g, "w", {5, 3, 3}), NodeAttrs().set("dilation", {2}));
  auto y3 = g.conv_fprop(input(g, "x3", {1, 2, 4, 5, 6}), input(g, "w3", {3, 2, 1, 2, 3}));
  EXPECT_VALID(g);
  EXPECT_EQ(y1->get_dim(), (Dims{1, 5, 16}));
  EXPECT_EQ(y3->get_dim(), (Dims{1, 3, 4, 4, 4}));
  EXPECT_EQ(y1->get_data_type(), DataType::FLOAT);
}

TEST(OpsConv, FpropRejectsChannelMismatch) {
  Graph g;
  g.conv_fprop(input(g, "x", {2, 8, 6, 6}), input(g, "w", {6, 3, 3, 3}), NodeAttrs().set_name("c1"));
  expect_fail(g, ErrorCode::SHAPE_DEDUCTION_FAILED, "conv_fprop \"c1\"", {"W has 3 input channels per group", "8 channels of X"});
}

TEST(OpsConv, FpropRejectsOutputChannelsNotMultipleOfGroups) {
  Graph g;
  g.conv_fprop(input(g, "x", {2, 8, 6, 6}), input(g, "w", {5, 4, 3, 3}), NodeAttrs().set_name("c1"));
  expect_fail(g, ErrorCode::SHAPE_DEDUCTION_FAILED, "conv_fprop \"c1\"", {"not a multiple of the 2 groups"});
}

TEST(OpsConv, FpropRejectsBadAttributes) {
  {
    Graph g;
    g.conv_fprop(input(g, "x", {2, 4, 6, 6}), input(g, "w", {4, 4, 3, 3}), NodeAttrs().set_name("c1").set("stride", {1}));
    expect_fail(g, ErrorCode::INVALID_VALUE, "conv_fprop \"c1\"", {"stride", "2 spatial dims"});
  }
  {
    Graph g;
    g.conv_fprop(input(g, "x", {2, 4, 6, 6}), input(g, "w", {4, 4, 3, 3}), NodeAttrs().set_name("c1").set("dilation", {1, 0}));
    expect_fail(g, ErrorCode::INVALID_VALUE, "conv_fprop \"c1\"", {"dilation"});
  }
  {
    Graph g;
    g.conv_fprop(input(g, "x", {1, 1, 2, 2}), input(g, "w", {1, 1, 3, 3}), NodeAttrs().set_name("c1"));
    expect_fail(g, ErrorCode::SHAPE_DEDUCTION_FAILED, "conv_fprop \"c1\"", {"smaller than the dilated kernel 3"});
  }
  {
    Graph g;
    g.conv_fprop(input(g, "x", {2, 4, 6, 6}), input(g, "w", {4, 4, 3}), NodeAttrs().set_name("c1"));
    expect_fail(g, ErrorCode::SHAPE_DEDUCTION_FAILED, "conv_fprop \"c1\"", {"W [4,4,3] must have 4 dims"});
  }
  {
    Graph g;
    g.conv_fprop(input(g, "x", {2, 4, 6, 6}), input(g, "w", {4, 4, 3, 3}),
                 NodeAttrs().set_name("c1").set_compute_data_type(DataType::FP8_E4M3));
    expect_fail(g, ErrorCode::GRAPH_NOT_SUPPORTED, "conv_fprop \"c1\"", {"compute data type FP8_E4M3"});
  }
  {
    Graph g;
    g.conv_fprop(input(g, "x", {2, 4}), input(g, "w", {4, 4}), NodeAttrs().set_name("c1"));
    expect_fail(g, ErrorCode::SHAPE_DEDUCTION_FAILED, "conv_fprop \"c1\"", {"3 to 5 dims"});
  }
}

TEST(OpsConv, FpropChecksUserSetOutputDims) {
  Graph g;
  auto y = g.conv_fprop(input(g, "x", {2, 4, 6, 6}), input(g, "w", {4, 4, 3, 3}), NodeAttrs().set_name("c1"));
  y->set_dim({2, 4, 6, 6});
  expect_fail(g, ErrorCode::SHAPE_DEDUCTION_FAILED, "conv_fprop \"c1\"", {"output Y"});
}

TEST(OpsConv, DgradInfersMinimalInput) {
  Graph g;
  g.set_io_data_type(DataType::FLOAT);
  auto dx = g.conv_dgrad(input(g, "dy", {2, 16, 5, 6}), input(g, "w", {16, 4, 3, 3}),
                         NodeAttrs().set_name("d1").set("pre_padding", {1, 1}).set("post_padding", {1, 1}).set("stride", {2, 2}));
  dx->set_output(true);
  EXPECT_VALID(g);
  EXPECT_EQ(dx->get_dim(), (Dims{2, 4, 9, 11}));
  EXPECT_EQ(dx->get_stride(), (Dims{396, 99, 11, 1}));
  EXPECT_EQ(dx->get_data_type(), DataType::FLOAT);
}

TEST(OpsConv, DgradAcceptsConsistentUserDimsWithGroups) {
  Graph g;
  g.set_io_data_type(DataType::FLOAT);
  auto dx = g.conv_dgrad(input(g, "dy", {2, 16, 5, 6}), input(g, "w", {16, 4, 3, 3}),
                         NodeAttrs().set_name("d1").set("pre_padding", {1, 1}).set("post_padding", {1, 1}).set("stride", {2, 2}));
  dx->set_dim({2, 8, 10, 12}).set_output(true);
  EXPECT_VALID(g);
  EXPECT_EQ(dx->get_stride(), (Dims{960, 120, 12, 1}));
}

TEST(OpsConv, DgradRejectsInconsistentUserDims) {
  Graph g;
  auto dx = g.conv_dgrad(input(g, "dy", {2, 16, 5, 6}), input(g, "w", {16, 4, 3, 3}), NodeAttrs().set_name("d1"));
  dx->set_dim({2, 4, 10, 12});
  expect_fail(g, ErrorCode::SHAPE_DEDUCTION_FAILED, "conv_dgrad \"d1\"", {"output DX", "DY [2,16,5,6]"});
  Graph g2;
  g2.conv_dgrad(input(g2, "dy", {2, 15, 5, 6}), input(g2, "w", {16, 4, 3, 3}), NodeAttrs().set_name("d2"));
  expect_fail(g2, ErrorCode::SHAPE_DEDUCTION_FAILED, "conv_dgrad \"d2\"", {"15 channels"});
}

TEST(OpsConv, WgradChecksUserDims) {
  Graph g;
  g.set_io_data_type(DataType::FLOAT);
  auto dw = g.conv_wgrad(input(g, "x", {2, 8, 10, 12}), input(g, "dy", {2, 16, 5, 6}),
                         NodeAttrs().set_name("w1").set("pre_padding", {1, 1}).set("post_padding", {1, 1}).set("stride", {2, 2}));
  dw->set_dim({16, 4, 3, 3}).set_output(true);
  EXPECT_VALID(g);
  EXPECT_EQ(dw->get_stride(), (Dims{36, 9, 3, 1}));
  EXPECT_EQ(dw->get_data_type(), DataType::FLOAT);
}

TEST(OpsConv, WgradRequiresDwDims) {
  Graph g;
  g.conv_wgrad(input(g, "x", {2, 8, 10, 12}), input(g, "dy", {2, 16, 5, 6}), NodeAttrs().set_name("w1"));
  expect_fail(g, ErrorCode::ATTRIBUTE_NOT_SET, "conv_wgrad \"w1\"", {"output DW"});
  Graph g2;
  auto dw = g2.conv_wgrad(input(g2, "x", {2, 8, 10, 12}), input(g2, "dy", {2, 16, 5, 6}), NodeAttrs().set_name("w2"));
  dw->set_dim({16, 4, 5, 5});
  expect_fail(g2, ErrorCode::SHAPE_DEDUCTION_FAILED, "conv_wgrad \"w2\"", {"DW [16,4,5,5]"});
}
