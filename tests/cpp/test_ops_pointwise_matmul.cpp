// SPDX-License-Identifier: Apache-2.0
// POINTWISE, MATMUL and MATMUL_FP8: inference of dims/strides/types and every rule.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "opendnn/graph.h"
#include "support/rule_test.h"

using namespace opendnn;
using namespace opendnn::test;

namespace {

Graph make_graph() {
  Graph g;
  g.set_io_data_type(DataType::HALF).set_intermediate_data_type(DataType::FLOAT).set_compute_data_type(DataType::FLOAT);
  return g;
}

// ---- pointwise

TEST(PointwiseInfer, BroadcastDimsStridesTypes) {
  Graph g = make_graph();
  auto a = input(g, "a", {4, 1, 8}, DataType::HALF);
  auto b = input(g, "b", {1, 3, 8}, DataType::HALF);
  auto c = input(g, "c", {4, 3, 1}, DataType::HALF);
  auto s = g.add(a, b, NodeAttrs().set_name("add"));
  s->set_output(true);
  auto sel = g.binary_select(s, c, g.cmp_gt(a, b), NodeAttrs().set_name("sel"));
  sel->set_output(true);
  auto r = g.relu(a, NodeAttrs().set_name("relu").set("relu_lower_clip_slope", 0.01));
  ASSERT_TRUE(g.validate().is_good()) << g.validate().to_string();
  EXPECT_EQ(s->get_dim(), (Dims{4, 3, 8}));
  EXPECT_EQ(s->get_stride(), (Dims{24, 8, 1}));
  EXPECT_EQ(s->get_data_type(), DataType::HALF);  // graph output: io type
  EXPECT_EQ(sel->get_dim(), (Dims{4, 3, 8}));
  EXPECT_EQ(r->get_dim(), (Dims{4, 1, 8}));
  EXPECT_EQ(r->get_data_type(), DataType::FLOAT);  // virtual: intermediate type
}

TEST(PointwiseInfer, GenIndex) {
  Graph g = make_graph();
  auto a = input(g, "a", {2, 5, 7}, DataType::HALF);
  auto idx = g.gen_index(a, NodeAttrs().set_name("gi").set("axis", 2));
  ASSERT_TRUE(g.validate().is_good()) << g.validate().to_string();
  EXPECT_EQ(idx->get_dim(), (Dims{2, 5, 7}));
  EXPECT_EQ(idx->get_stride(), (Dims{35, 7, 1}));
  EXPECT_EQ(idx->get_data_type(), DataType::INT32);
}

TEST(PointwiseReject, Arity) {
  {
    Graph g = make_graph();
    auto a = input(g, "a", {2, 3}, DataType::HALF);
    g.pointwise(a, NodeAttrs().set_name("pw").set("mode", "ADD"));
    expect_fail(g, ErrorCode::ATTRIBUTE_NOT_SET, "pointwise \"pw\"", "mode ADD needs input IN_1");
  }
  {
    Graph g = make_graph();
    auto a = input(g, "a", {2, 3}, DataType::HALF);
    g.relu(a, NodeAttrs().set_name("pw").input("IN_1", input(g, "b", {2, 3}, DataType::HALF)));
    expect_fail(g, ErrorCode::INVALID_VALUE, "pointwise \"pw\"", "mode RELU_FWD takes 1 input(s) but IN_1 is set");
  }
  {
    Graph g = make_graph();
    auto a = input(g, "a", {2, 3}, DataType::HALF);
    g.pointwise(a, NodeAttrs().set_name("pw"));
    expect_fail(g, ErrorCode::ATTRIBUTE_NOT_SET, "pointwise \"pw\"", "attribute mode is not set");
  }
  {
    Graph g = make_graph();
    auto a = input(g, "a", {2, 3}, DataType::HALF);
    g.pointwise(a, NodeAttrs().set_name("pw").set("mode", "NOT_A_MODE"));
    expect_fail(g, ErrorCode::INVALID_VALUE, "pointwise \"pw\"", "NOT_A_MODE");
  }
}

TEST(PointwiseReject, Broadcast) {
  {
    Graph g = make_graph();
    g.mul(input(g, "a", {2, 3}, DataType::HALF), input(g, "b", {4, 3}, DataType::HALF), NodeAttrs().set_name("pw"));
    expect_fail(g, ErrorCode::SHAPE_DEDUCTION_FAILED, "pointwise \"pw\"", "input IN_1 [4,3] does not broadcast with [2,3]");
  }
  {
    Graph g = make_graph();
    g.mul(input(g, "a", {2, 3}, DataType::HALF), input(g, "b", {3}, DataType::HALF), NodeAttrs().set_name("pw"));
    expect_fail(g, ErrorCode::SHAPE_DEDUCTION_FAILED, "pointwise \"pw\"", "does not broadcast");
  }
  {
    Graph g = make_graph();
    auto a = input(g, "a", {2, 3}, DataType::HALF);
    g.binary_select(a, a, input(g, "m", {2, 2}, DataType::BOOLEAN), NodeAttrs().set_name("pw"));
    expect_fail(g, ErrorCode::SHAPE_DEDUCTION_FAILED, "pointwise \"pw\"", "input IN_2 [2,2]");
  }
  {
    Graph g = make_graph();  // a user-given output shape must match
    auto y = g.add(input(g, "a", {2, 3}, DataType::HALF), input(g, "b", {2, 3}, DataType::HALF), NodeAttrs().set_name("pw"));
    y->set_dim({3, 2});
    expect_fail(g, ErrorCode::SHAPE_DEDUCTION_FAILED, "pointwise \"pw\"", "output OUT_0 was given dims [3,2]");
  }
}

TEST(PointwiseReject, GenIndexAxis) {
  {
    Graph g = make_graph();
    g.gen_index(input(g, "a", {2, 3}, DataType::HALF), NodeAttrs().set_name("gi"));
    expect_fail(g, ErrorCode::ATTRIBUTE_NOT_SET, "pointwise \"gi\"", "GEN_INDEX needs attribute axis");
  }
  for (int64_t axis : {-1, 2}) {
    Graph g = make_graph();
    g.gen_index(input(g, "a", {2, 3}, DataType::HALF), NodeAttrs().set_name("gi").set("axis", axis));
    expect_fail(g, ErrorCode::INVALID_VALUE, "pointwise \"gi\"", "axis " + std::to_string(axis) + " is out of range for [2,3]");
  }
  {
    Graph g = make_graph();
    g.gen_index(input(g, "a", {2, 3}, DataType::HALF), NodeAttrs().set_name("gi").set("axis", 1.5));
    expect_fail(g, ErrorCode::INVALID_VALUE, "pointwise \"gi\"", "attribute axis must be of type");
  }
}

// ---- matmul

TEST(MatmulInfer, BatchBroadcastAndOverrides) {
  Graph g = make_graph();
  auto a = input(g, "a", {1, 3, 16, 32}, DataType::BFLOAT16);
  auto b = input(g, "b", {2, 1, 32, 8}, DataType::BFLOAT16);
  auto c = g.matmul(a, b, NodeAttrs().set_name("mm").input("M_override", input(g, "m", {2, 3, 1, 1}, DataType::INT64)));
  c->set_output(true);
  ASSERT_TRUE(g.validate().is_good()) << g.validate().to_string();
  EXPECT_EQ(c->get_dim(), (Dims{2, 3, 16, 8}));
  EXPECT_EQ(c->get_stride(), (Dims{384, 128, 8, 1}));
  EXPECT_EQ(c->get_data_type(), DataType::HALF);
}

TEST(MatmulReject, Rules) {
  auto run = [](Dims ad, Dims bd, ErrorCode code, const std::string& what) {
    Graph g = make_graph();
    g.matmul(input(g, "a", ad, DataType::HALF), input(g, "b", bd, DataType::HALF), NodeAttrs().set_name("mm"));
    expect_fail(g, code, "matmul \"mm\"", what);
  };
  run({16, 32}, {2, 32, 8}, ErrorCode::SHAPE_DEDUCTION_FAILED, "must have the same rank, at least 2");
  run({16}, {16}, ErrorCode::SHAPE_DEDUCTION_FAILED, "must have the same rank, at least 2");
  run({2, 16, 32}, {2, 31, 8}, ErrorCode::SHAPE_DEDUCTION_FAILED, "inner dims differ");
  run({2, 16, 32}, {3, 32, 8}, ErrorCode::SHAPE_DEDUCTION_FAILED, "do not broadcast");
  {
    Graph g = make_graph();
    g.matmul(input(g, "a", {16, 32}, DataType::HALF), input(g, "b", {32, 8}, DataType::HALF),
             NodeAttrs().set_name("mm").input("K_override", input(g, "k", {1, 1}, DataType::FLOAT)));
    expect_fail(g, ErrorCode::GRAPH_NOT_SUPPORTED, "matmul \"mm\"", "input K_override has data type FLOAT");
  }
  {
    Graph g = make_graph();
    g.matmul(input(g, "a", {16, 32}, DataType::HALF), nullptr, NodeAttrs().set_name("mm"));
    expect_fail(g, ErrorCode::ATTRIBUTE_NOT_SET, "matmul \"mm\"", "input B is not set");
  }
}

TEST(MatmulFp8Infer, DimsAndAmax) {
  Graph g = make_graph();
  auto a = input(g, "a", {2, 16, 32}, DataType::FP8_E4M3);
  auto b = input(g, "b", {2, 32, 8}, DataType::FP8_E5M2);
  auto one = [&](const char* n) { return input(g, n, {1, 1, 1}, DataType::FLOAT); };
  auto out = g.matmul_fp8(a, b, one("da"), one("db"), one("sc"), NodeAttrs().set_name("mm8"));
  out[0]->set_output(true).set_data_type(DataType::FP8_E4M3);
  out[1]->set_output(true);
  ASSERT_TRUE(g.validate().is_good()) << g.validate().to_string();
  EXPECT_EQ(out[0]->get_dim(), (Dims{2, 16, 8}));
  EXPECT_EQ(out[0]->get_data_type(), DataType::FP8_E4M3);
  EXPECT_EQ(out[1]->get_dim(), (Dims{1, 1, 1}));
  EXPECT_EQ(out[1]->get_data_type(), DataType::FLOAT);
}

TEST(MatmulFp8Reject, Rules) {
  auto run = [](DataType at, Dims sd, DataType st, ErrorCode code, const std::string& what) {
    Graph g = make_graph();
    auto a = input(g, "a", {16, 32}, at);
    auto b = input(g, "b", {32, 8}, DataType::FP8_E4M3);
    g.matmul_fp8(a, b, input(g, "da", sd, st), input(g, "db", {1, 1}, DataType::FLOAT), input(g, "sc", {1, 1}, DataType::FLOAT),
                 NodeAttrs().set_name("mm8"));
    expect_fail(g, code, "matmul_fp8 \"mm8\"", what);
  };
  run(DataType::HALF, {1, 1}, DataType::FLOAT, ErrorCode::GRAPH_NOT_SUPPORTED, "input A has data type HALF");
  run(DataType::FP8_E4M3, {2, 1}, DataType::FLOAT, ErrorCode::SHAPE_DEDUCTION_FAILED, "descale_A must hold one value");
  run(DataType::FP8_E4M3, {1, 1}, DataType::HALF, ErrorCode::GRAPH_NOT_SUPPORTED, "input descale_A has data type HALF");
}

}  // namespace
