// SPDX-License-Identifier: Apache-2.0
// Reference REDUCTION and GENSTATS kernels.
#include <gtest/gtest.h>

#include <cmath>

#include "support/ref_harness.h"

using namespace opendnn;

namespace {
std::vector<double> reduce(const char* mode, std::vector<int64_t> ydims, const std::vector<double>& xv,
                           std::vector<int64_t> xstrides = {}) {
  Graph g;
  std::vector<int64_t> xd = {2, 3};
  if (xstrides.empty()) xstrides = row_major_strides(xd);
  auto x = g.tensor(TensorAttr().set_dim(xd).set_stride(xstrides).set_data_type(DataType::HALF));
  auto y = g.reduction(x, NodeAttrs().set("mode", mode).set("dims", ydims));
  y->set_output(true).set_data_type(DataType::DOUBLE);
  test::RefRunner r(g);
  r.set(x, xv);
  Status s = r.run_all();
  EXPECT_TRUE(s.is_good()) << s.get_message();
  return r.get(y);
}
}  // namespace

TEST(RefReduction, Modes) {
  std::vector<double> x = {1, -2, 3, 0, 5, -6};
  EXPECT_EQ(reduce("ADD", {2, 1}, x), (std::vector<double>{2, -1}));
  EXPECT_EQ(reduce("ADD", {1, 3}, x), (std::vector<double>{1, 3, -3}));
  EXPECT_EQ(reduce("ADD", {1, 1}, x), (std::vector<double>{1}));
  EXPECT_EQ(reduce("ADD", {2, 3}, x), x);
  EXPECT_EQ(reduce("MUL", {2, 1}, x), (std::vector<double>{-6, 0}));
  EXPECT_EQ(reduce("MUL_NO_ZEROS", {2, 1}, x), (std::vector<double>{-6, -30}));
  EXPECT_EQ(reduce("MIN", {2, 1}, x), (std::vector<double>{-2, -6}));
  EXPECT_EQ(reduce("MAX", {1, 3}, x), (std::vector<double>{1, 5, 3}));
  EXPECT_EQ(reduce("AMAX", {2, 1}, x), (std::vector<double>{3, 6}));
  EXPECT_EQ(reduce("AVG", {1, 3}, x), (std::vector<double>{0.5, 1.5, -1.5}));
  EXPECT_EQ(reduce("NORM1", {2, 1}, x), (std::vector<double>{6, 11}));
  EXPECT_EQ(reduce("NORM2", {1, 3}, x), (std::vector<double>{1, std::sqrt(29.0), std::sqrt(45.0)}));
  // Column-major storage of the same logical X.
  EXPECT_EQ(reduce("ADD", {2, 1}, x, {1, 2}), (std::vector<double>{2, -1}));
}

TEST(RefReduction, Genstats) {
  Graph g;
  auto x = g.tensor(TensorAttr().set_dim({2, 2, 2}).set_stride({4, 1, 2}).set_data_type(DataType::FLOAT));
  auto [s, sq] = g.genstats(x);
  s->set_output(true);
  sq->set_output(true);
  test::RefRunner r(g);
  r.set(x, {1, 2, 3, 4, 5, 6, 7, 8});
  Status st = r.run_all();
  ASSERT_TRUE(st.is_good()) << st.get_message();
  EXPECT_EQ(r.get(s), (std::vector<double>{1 + 2 + 5 + 6, 3 + 4 + 7 + 8}));
  EXPECT_EQ(r.get(sq), (std::vector<double>{1 + 4 + 25 + 36, 9 + 16 + 49 + 64}));
}
