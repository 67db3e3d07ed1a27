// SPDX-License-Identifier: Apache-2.0
// Reference RESHAPE / TRANSPOSE / SLICE / CONCATENATE kernels.
#include <gtest/gtest.h>

#include "support/ref_harness.h"

using namespace opendnn;

namespace {
TensorPtr t(Graph& g, std::vector<int64_t> dims, DataType dt = DataType::FLOAT, std::vector<int64_t> strides = {}) {
  if (strides.empty()) strides = row_major_strides(dims);
  return g.tensor(TensorAttr().set_dim(std::move(dims)).set_stride(std::move(strides)).set_data_type(dt));
}
std::vector<double> iota(size_t n) {
  std::vector<double> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = double(i);
  return v;
}
}  // namespace

TEST(RefLayout, ReshapeFromStridedInput) {
  Graph g;
  auto x = t(g, {2, 3}, DataType::FLOAT, {1, 2});  // column-major storage
  auto y = g.reshape(x, NodeAttrs().set("dims", {3, 2}));
  y->set_output(true).set_data_type(DataType::HALF);
  test::RefRunner r(g);
  r.set(x, iota(6));
  Status s = r.run_all();
  ASSERT_TRUE(s.is_good()) << s.get_message();
  EXPECT_EQ(r.get(y), iota(6));
}

TEST(RefLayout, Transpose) {
  Graph g;
  auto x = t(g, {2, 3, 4});
  auto y = g.transpose(x, NodeAttrs().set("permutation", {2, 0, 1}));
  y->set_output(true);
  test::RefRunner r(g);
  r.set(x, iota(24));
  ASSERT_TRUE(r.run_all().is_good());
  EXPECT_EQ(y->get_dim(), (std::vector<int64_t>{4, 2, 3}));
  std::vector<double> want;
  for (int k = 0; k < 4; ++k)
    for (int i = 0; i < 2; ++i)
      for (int j = 0; j < 3; ++j) want.push_back(i * 12 + j * 4 + k);
  EXPECT_EQ(r.get(y), want);
}

TEST(RefLayout, Slice) {
  Graph g;
  auto x = t(g, {4, 6}, DataType::BFLOAT16);
  auto y = g.slice(x, NodeAttrs().set("start", {-3, 1}).set("end", {4, 100}).set("stride", {2, 2}));
  y->set_output(true);
  test::RefRunner r(g);
  r.set(x, iota(24));
  ASSERT_TRUE(r.run_all().is_good());
  EXPECT_EQ(y->get_dim(), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(r.get(y), (std::vector<double>{7, 9, 11, 19, 21, 23}));
}

TEST(RefLayout, Concatenate) {
  Graph g;
  auto a = t(g, {2, 1}), b = t(g, {2, 2}, DataType::FLOAT, {1, 2});
  auto y = g.concatenate({a, b}, NodeAttrs().set("axis", -1));
  y->set_output(true);
  test::RefRunner r(g);
  r.set(a, {1, 2});
  r.set(b, {3, 4, 5, 6});
  ASSERT_TRUE(r.run_all().is_good());
  EXPECT_EQ(r.get(y), (std::vector<double>{1, 3, 4, 2, 5, 6}));
}
