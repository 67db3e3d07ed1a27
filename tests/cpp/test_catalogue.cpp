// SPDX-License-Identifier: Apache-2.0
// The catalogue is consistent with ops.def, and builders wire ports as declared.
#include <gtest/gtest.h>

#include <set>

#include "opendnn/graph.h"

using namespace opendnn;

TEST(Catalogue, EveryOpIsDeclaredConsistently) {
  std::set<std::string> tags, methods;
  for (const OpSpec& s : all_op_specs()) {
    EXPECT_TRUE(tags.insert(s.tag).second) << s.tag;
    EXPECT_TRUE(methods.insert(s.method).second) << s.method;
    EXPECT_EQ(size_t(s.num_outputs), s.def->outputs.size()) << s.method;
    if (!s.variadic()) {
      ASSERT_LE(size_t(s.positional), s.def->inputs.size()) << s.method;
      for (int i = 0; i < s.positional; ++i) EXPECT_TRUE(s.def->inputs[size_t(i)].required) << s.method << " port " << i;
    }
    std::set<std::string> names;
    for (const auto& a : s.def->attrs) EXPECT_TRUE(names.insert(a.name).second) << s.method << "." << a.name;
  }
  EXPECT_EQ(all_op_specs().size(), size_t(kNumOps));
}

TEST(Catalogue, MatmulInfersShapeAndNamesErrors) {
  Graph g;
  g.set_io_data_type(DataType::HALF).set_intermediate_data_type(DataType::FLOAT).set_compute_data_type(DataType::FLOAT);
  auto a = g.tensor(TensorAttr().set_name("a").set_dim({2, 16, 32}));
  auto b = g.tensor(TensorAttr().set_name("b").set_dim({1, 32, 8}));
  auto c = g.matmul(a, b, NodeAttrs().set_name("mm"));
  c->set_output(true);
  ASSERT_TRUE(g.validate().is_good());
  EXPECT_EQ(c->get_dim(), (std::vector<int64_t>{2, 16, 8}));
  EXPECT_EQ(c->get_stride(), (std::vector<int64_t>{128, 8, 1}));
  EXPECT_EQ(c->get_data_type(), DataType::HALF);

  Graph bad;
  auto x = bad.tensor(TensorAttr().set_name("x").set_dim({4, 5}).set_data_type(DataType::FLOAT));
  auto y = bad.tensor(TensorAttr().set_name("y").set_dim({6, 7}).set_data_type(DataType::FLOAT));
  bad.matmul(x, y, NodeAttrs().set_name("mm"));
  Status s = bad.validate();
  EXPECT_EQ(s.code(), ErrorCode::SHAPE_DEDUCTION_FAILED);
  EXPECT_NE(s.message().find("matmul \"mm\""), std::string::npos) << s.message();
}

TEST(Catalogue, PointwiseBuildersSetTheMode) {
  Graph g;
  g.set_io_data_type(DataType::FLOAT);
  auto a = g.tensor(TensorAttr().set_dim({2, 3}));
  auto b = g.tensor(TensorAttr().set_dim({1, 3}));
  auto y = g.add(a, b);
  auto z = g.binary_select(a, y, g.cmp_lt(a, b));
  z->set_output(true);
  ASSERT_TRUE(g.validate().is_good()) << g.validate().to_string();
  EXPECT_EQ(g.nodes()[0]->attr_str("mode"), "ADD");
  EXPECT_EQ(z->get_dim(), (std::vector<int64_t>{2, 3}));
}

TEST(Catalogue, UnknownAttributeIsReportedByValidate) {
  Graph g;
  auto a = g.tensor(TensorAttr().set_dim({2, 3}).set_data_type(DataType::FLOAT));
  g.relu(a, NodeAttrs().set_name("act").set("no_such_attr", 1));
  Status s = g.validate();
  EXPECT_TRUE(s.is_bad());
  EXPECT_NE(s.message().find("no_such_attr"), std::string::npos);
  EXPECT_NE(s.message().find("\"act\""), std::string::npos);
}

TEST(Graph, CycleIsRejectedAndLongChainsValidate) {
  Graph g;
  g.set_io_data_type(DataType::FLOAT);
  auto a = g.tensor(TensorAttr().set_name("a").set_dim({4}));
  auto y = g.relu(a, NodeAttrs().set_name("r0"));
  auto z = g.relu(y, NodeAttrs().set_name("r1"));
  g.mutable_nodes()[0]->inputs()[0] = z;  // r0 now reads r1's output: a cycle
  Status s = g.validate();
  EXPECT_EQ(s.code(), ErrorCode::INVALID_VALUE);
  EXPECT_NE(s.message().find("cycle"), std::string::npos) << s.message();

  Graph chain;
  chain.set_io_data_type(DataType::FLOAT);
  auto t = chain.tensor(TensorAttr().set_dim({2}));
  for (int i = 0; i < 200000; ++i) t = chain.neg(t);
  t->set_output(true);
  EXPECT_TRUE(chain.validate().is_good());
}
