// SPDX-License-Identifier: Apache-2.0
// Inference and validation rules of reduction and genstats.
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "opendnn/graph.h"
#include "support/rule_test.h"

using namespace opendnn;
using namespace opendnn::test;

TEST(OpsReduction, ReductionFromAttributeOrUserDims) {
  Graph g;
  g.set_io_data_type(DataType::HALF).set_intermediate_data_type(DataType::FLOAT);
  auto x = input(g, "x", {4, 8, 16}, DataType::HALF);
  auto y = g.reduction(x, NodeAttrs().set_name("r").set("mode", "ADD").set("dims", {4, 1, 1}));
  auto z = g.reduction(x, NodeAttrs().set_name("r2").set("mode", "AMAX"));
  z->set_dim({1, 8, 1}).set_data_type(DataType::FLOAT).set_output(true);
  EXPECT_VALID(g);
  EXPECT_EQ(y->get_dim(), (Dims{4, 1, 1}));
  EXPECT_EQ(y->get_stride(), (Dims{1, 1, 1}));
  EXPECT_EQ(y->get_data_type(), DataType::FLOAT);
  EXPECT_EQ(z->get_stride(), (Dims{8, 1, 1}));
}

TEST(OpsReduction, ReductionRejectsBadShapesAndMissingMode) {
  {
    Graph g;
    g.reduction(input(g, "x", {4, 8, 16}), NodeAttrs().set_name("r").set("mode", "ADD").set("dims", {4, 2, 1}));
    expect_fail(g, ErrorCode::SHAPE_DEDUCTION_FAILED, "reduction \"r\"", {"dim 1 must be 1 (reduced) or X's 8"});
  }
  {
    Graph g;
    g.reduction(input(g, "x", {4, 8, 16}), NodeAttrs().set_name("r").set("dims", {4, 1, 1}));
    expect_fail(g, ErrorCode::ATTRIBUTE_NOT_SET, "reduction \"r\"", {"mode"});
  }
  {
    Graph g;
    g.reduction(input(g, "x", {4, 8, 16}), NodeAttrs().set_name("r").set("mode", "MAX"));
    expect_fail(g, ErrorCode::ATTRIBUTE_NOT_SET, "reduction \"r\"", {"output shape"});
  }
  {
    Graph g;
    g.reduction(input(g, "x", {4, 8, 16}), NodeAttrs().set_name("r").set("mode", "MAX").set("dims", {4, 1}));
    expect_fail(g, ErrorCode::SHAPE_DEDUCTION_FAILED, "reduction \"r\"", {"rank of X"});
  }
}

TEST(OpsReduction, GenstatsIsPerChannelFloat) {
  Graph g;
  g.set_io_data_type(DataType::HALF).set_intermediate_data_type(DataType::HALF);
  auto [sum, sq] = g.genstats(input(g, "x", {2, 8, 4, 4}, DataType::HALF), NodeAttrs().set_name("gs"));
  sum->set_output(true);
  EXPECT_VALID(g);
  EXPECT_EQ(sum->get_dim(), (Dims{1, 8, 1, 1}));
  EXPECT_EQ(sq->get_dim(), (Dims{1, 8, 1, 1}));
  EXPECT_EQ(sum->get_stride(), (Dims{8, 1, 1, 1}));
  EXPECT_EQ(sum->get_data_type(), DataType::FLOAT);
  EXPECT_EQ(sq->get_data_type(), DataType::FLOAT);
}

TEST(OpsReduction, GenstatsRejectsRankOne) {
  Graph g;
  g.genstats(input(g, "x", {8}), NodeAttrs().set_name("gs"));
  expect_fail(g, ErrorCode::SHAPE_DEDUCTION_FAILED, "genstats \"gs\"", {"at least 2 dims"});
}
