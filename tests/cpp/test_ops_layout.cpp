// SPDX-License-Identifier: Apache-2.0
// Inference and validation rules of reshape, transpose, slice, concatenate.
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "opendnn/graph.h"
#include "support/rule_test.h"

using namespace opendnn;
using namespace opendnn::test;

TEST(OpsLayout, ReshapeFromAttributeWithInferredDim) {
  Graph g;
  g.set_io_data_type(DataType::FLOAT).set_intermediate_data_type(DataType::FLOAT);
  auto y = g.reshape(input(g, "x", {2, 3, 4}, DataType::HALF), NodeAttrs().set_name("r").set("dims", {6, -1}));
  EXPECT_VALID(g);
  EXPECT_EQ(y->get_dim(), (Dims{6, 4}));
  EXPECT_EQ(y->get_stride(), (Dims{4, 1}));
  EXPECT_EQ(y->get_data_type(), DataType::HALF);  // layout ops keep X's type
}

TEST(OpsLayout, ReshapeFromUserDimsAndVolumeMismatch) {
  Graph g;
  auto y = g.reshape(input(g, "x", {2, 3, 4}), NodeAttrs().set_name("r"));
  y->set_dim({4, 6});
  EXPECT_VALID(g);
  EXPECT_EQ(y->get_stride(), (Dims{6, 1}));

  Graph bad;
  bad.reshape(input(bad, "x", {2, 3, 4}), NodeAttrs().set_name("r").set("dims", {5, 5}));
  expect_fail(bad, ErrorCode::SHAPE_DEDUCTION_FAILED, "reshape \"r\"", {"24 elements", "[5,5]"});

  Graph unset;
  unset.reshape(input(unset, "x", {2, 3, 4}), NodeAttrs().set_name("r"));
  expect_fail(unset, ErrorCode::ATTRIBUTE_NOT_SET, "reshape \"r\"", {"dims"});
}

TEST(OpsLayout, ReshapeViewOnlyDerivesStrides) {
  Graph g;
  auto x = g.tensor(TensorAttr().set_name("x").set_dim({2, 3, 4}).set_stride({24, 8, 1}).set_data_type(DataType::FLOAT));
  auto y = g.reshape(x, NodeAttrs().set_name("r").set("reshape_mode", "VIEW_ONLY").set("dims", {6, 4}));
  EXPECT_VALID(g);
  EXPECT_EQ(y->get_stride(), (Dims{8, 1}));

  Graph bad;
  auto xt = bad.tensor(TensorAttr().set_name("x").set_dim({3, 4}).set_stride({1, 3}).set_data_type(DataType::FLOAT));
  bad.reshape(xt, NodeAttrs().set_name("r").set("reshape_mode", "VIEW_ONLY").set("dims", {12}));
  expect_fail(bad, ErrorCode::GRAPH_NOT_SUPPORTED, "reshape \"r\"", {"needs a copy"});
}

TEST(OpsLayout, TransposePermutesDimsWithPackedStrides) {
  Graph g;
  g.set_io_data_type(DataType::FLOAT);
  auto y = g.transpose(input(g, "x", {2, 3, 4}, DataType::BFLOAT16), NodeAttrs().set_name("t").set("permutation", {2, 0, 1}));
  y->set_output(true);
  EXPECT_VALID(g);
  EXPECT_EQ(y->get_dim(), (Dims{4, 2, 3}));
  EXPECT_EQ(y->get_stride(), (Dims{6, 3, 1}));
  EXPECT_EQ(y->get_data_type(), DataType::BFLOAT16);
}

TEST(OpsLayout, TransposeRejectsBadPermutation) {
  Graph g;
  g.transpose(input(g, "x", {2, 3, 4}), NodeAttrs().set_name("t").set("permutation", {0, 0, 1}));
  expect_fail(g, ErrorCode::INVALID_VALUE, "transpose \"t\"", {"not a permutation of 0..2"});
  Graph g2;
  g2.transpose(input(g2, "x", {2, 3, 4}), NodeAttrs().set_name("t").set("permutation", {1, 0}));
  expect_fail(g2, ErrorCode::INVALID_VALUE, "transpose \"t\"", {"has 2 entries"});
  Graph g3;
  g3.transpose(input(g3, "x", {2, 3, 4}), NodeAttrs().set_name("t"));
  expect_fail(g3, ErrorCode::ATTRIBUTE_NOT_SET, "transpose \"t\"", {"permutation"});
}

TEST(OpsLayout, SliceFollowsPythonSemantics) {
  constexpr int64_t kEnd = std::numeric_limits<int64_t>::max();
  Graph g;
  auto y = g.slice(input(g, "x", {10, 8, 6}),
                   NodeAttrs().set_name("s").set("start", {2, -3}).set("end", {kEnd, 100}).set("stride", {3}));
  auto empty = g.slice(input(g, "x2", {10, 8}), NodeAttrs().set_name("e").set("start", {5}).set("end", {2}));
  auto neg = g.slice(input(g, "x3", {10}), NodeAttrs().set_name("n").set("start", {-100}).set("end", {-1}));
  EXPECT_VALID(g);
  EXPECT_EQ(y->get_dim(), (Dims{3, 3, 6}));
  EXPECT_EQ(y->get_stride(), (Dims{18, 6, 1}));
  EXPECT_EQ(empty->get_dim(), (Dims{0, 8}));
  EXPECT_EQ(neg->get_dim(), (Dims{9}));
}

TEST(OpsLayout, SliceRejectsBadStride) {
  Graph g;
  g.slice(input(g, "x", {10, 8}), NodeAttrs().set_name("s").set("stride", {1, 0}));
  expect_fail(g, ErrorCode::INVALID_VALUE, "slice \"s\"", {"stride 0 on axis 1"});
  Graph g2;
  g2.slice(input(g2, "x", {10}), NodeAttrs().set_name("s").set("start", {1, 2}));
  expect_fail(g2, ErrorCode::INVALID_VALUE, "slice \"s\"", {"start"});
}

TEST(OpsLayout, ConcatenateSumsTheAxis) {
  Graph g;
  g.set_io_data_type(DataType::FLOAT);
  auto y = g.concatenate({input(g, "a", {2, 3, 4}, DataType::HALF), input(g, "b", {2, 5, 4}, DataType::HALF)},
                         NodeAttrs().set_name("c").set("axis", -2).set("in_place_index", 1));
  y->set_output(true);
  EXPECT_VALID(g);
  EXPECT_EQ(y->get_dim(), (Dims{2, 8, 4}));
  EXPECT_EQ(y->get_stride(), (Dims{32, 4, 1}));
  EXPECT_EQ(y->get_data_type(), DataType::HALF);
}

TEST(OpsLayout, ConcatenateRejectsMismatches) {
  {
    Graph g;
    g.concatenate({input(g, "a", {2, 3, 4}), input(g, "b", {2, 5, 5})}, NodeAttrs().set_name("c").set("axis", 1));
    expect_fail(g, ErrorCode::SHAPE_DEDUCTION_FAILED, "concatenate \"c\"", {"input 1 [2,5,5]", "axis 2"});
  }
  {
    Graph g;
    g.concatenate({input(g, "a", {2, 3}), input(g, "b", {2, 3}, DataType::HALF)}, NodeAttrs().set_name("c").set("axis", 0));
    expect_fail(g, ErrorCode::INVALID_VALUE, "concatenate \"c\"", {"data type HALF"});
  }
  {
    Graph g;
    g.concatenate({input(g, "a", {2, 3}), input(g, "b", {2, 3})}, NodeAttrs().set_name("c").set("axis", 0).set("in_place_index", 2));
    expect_fail(g, ErrorCode::INVALID_VALUE, "concatenate \"c\"", {"in_place_index 2"});
  }
  {
    Graph g;
    g.concatenate({input(g, "a", {2, 3}), input(g, "b", {2, 3})}, NodeAttrs().set_name("c").set("axis", 2));
    expect_fail(g, ErrorCode::INVALID_VALUE, "concatenate \"c\"", {"axis 2 is out of range"});
  }
  {
    Graph g;
    g.concatenate({input(g, "a", {2, 3}), input(g, "b", {2, 3})}, NodeAttrs().set_name("c"));
    expect_fail(g, ErrorCode::ATTRIBUTE_NOT_SET, "concatenate \"c\"", {"axis"});
  }
}
