// SPDX-License-Identifier: Apache-2.0
// Reference POINTWISE kernel against hand-computed values.
#include <gtest/gtest.h>

#include <cmath>

#include "support/ref_harness.h"

using namespace opendnn;

namespace {

TensorPtr t(Graph& g, std::vector<int64_t> dims, DataType dt = DataType::FLOAT, std::vector<int64_t> strides = {}) {
  if (strides.empty()) strides = row_major_strides(dims);
  return g.tensor(TensorAttr().set_dim(std::move(dims)).set_stride(std::move(strides)).set_data_type(dt));
}

// Runs a unary mode on values and returns the outputs (DOUBLE in and out).
std::vector<double> unary(const char* mode, const std::vector<double>& x, NodeAttrs extra = {}) {
  Graph g;
  auto a = t(g, {int64_t(x.size())}, DataType::DOUBLE);
  extra.set("mode", mode);
  auto y = g.pointwise(a, extra);
  y->set_output(true).set_data_type(DataType::DOUBLE);
  test::RefRunner r(g);
  r.set(a, x);
  EXPECT_TRUE(r.run_all().is_good());
  return r.get(y);
}

std::vector<double> binary(const char* mode, const std::vector<double>& x, const std::vector<double>& z, NodeAttrs extra = {}) {
  Graph g;
  auto a = t(g, {int64_t(x.size())}, DataType::DOUBLE);
  auto b = t(g, {int64_t(z.size())}, DataType::DOUBLE);
  extra.set("mode", mode).input("IN_1", b);
  auto y = g.pointwise(a, extra);
  y->set_output(true).set_data_type(DataType::DOUBLE);
  test::RefRunner r(g);
  r.set(a, x);
  r.set(b, z);
  Status s = r.run_all();
  EXPECT_TRUE(s.is_good()) << s.get_message();
  return r.get(y);
}

}  // namespace

TEST(RefPointwise, BroadcastAddNonContiguous) {
  Graph g;
  // a: [2,3] stored transposed (column-major); b: [1,3] broadcast over rows.
  auto a = t(g, {2, 3}, DataType::FLOAT, {1, 2});
  auto b = t(g, {1, 3}, DataType::FLOAT);
  auto y = g.add(a, b);
  y->set_output(true).set_data_type(DataType::FLOAT);
  test::RefRunner r(g);
  r.set(a, {1, 2, 3, 4, 5, 6});
  r.set(b, {10, 20, 30});
  ASSERT_TRUE(r.run_all().is_good());
  EXPECT_EQ(r.get(y), (std::vector<double>{11, 22, 33, 14, 25, 36}));
  // Storage of a is column-major: element (1,0)=4 sits at offset 1.
  EXPECT_EQ(load_element(DataType::FLOAT, r.bytes(a).data(), 1), 4.0);
}

TEST(RefPointwise, Arithmetic) {
  std::vector<double> a = {1.5, -2, 7, 9}, b = {2, 4, -3, 0.5};
  EXPECT_EQ(binary("SUB", a, b), (std::vector<double>{-0.5, -6, 10, 8.5}));
  EXPECT_EQ(binary("MUL", a, b), (std::vector<double>{3, -8, -21, 4.5}));
  EXPECT_EQ(binary("DIV", a, b), (std::vector<double>{0.75, -0.5, 7.0 / -3.0, 18}));
  EXPECT_EQ(binary("ADD_SQUARE", a, b), (std::vector<double>{5.5, 14, 16, 9.25}));
  EXPECT_EQ(binary("MAX", a, b), (std::vector<double>{2, 4, 7, 9}));
  EXPECT_EQ(binary("MIN", a, b), (std::vector<double>{1.5, -2, -3, 0.5}));
  EXPECT_EQ(binary("MOD", {7, -7, 5.5, 1}, {3, 3, 2, 4}), (std::vector<double>{1, -1, 1.5, 1}));
  EXPECT_EQ(binary("POW", {2, 9, 4, 1}, {3, 0.5, -1, 7}), (std::vector<double>{8, 3, 0.25, 1}));
  EXPECT_EQ(binary("CMP_LT", a, b), (std::vector<double>{1, 1, 0, 0}));
  EXPECT_EQ(binary("CMP_GE", {1, 2, 3, 4}, {1, 3, 2, 4}), (std::vector<double>{1, 0, 1, 1}));
  EXPECT_EQ(binary("CMP_EQ", {1, 2, 3, 4}, {1, 3, 2, 4}), (std::vector<double>{1, 0, 0, 1}));
  EXPECT_EQ(binary("CMP_NEQ", {1, 2, 3, 4}, {1, 3, 2, 4}), (std::vector<double>{0, 1, 1, 0}));
  EXPECT_EQ(binary("CMP_GT", {1, 2, 3, 4}, {1, 3, 2, 4}), (std::vector<double>{0, 0, 1, 0}));
  EXPECT_EQ(binary("CMP_LE", {1, 2, 3, 4}, {1, 3, 2, 4}), (std::vector<double>{1, 1, 0, 1}));
  EXPECT_EQ(binary("LOGICAL_AND", {0, 1, 2, 0}, {0, 0, 3, 5}), (std::vector<double>{0, 0, 1, 0}));
  EXPECT_EQ(binary("LOGICAL_OR", {0, 1, 2, 0}, {0, 0, 3, 5}), (std::vector<double>{0, 1, 1, 1}));
  EXPECT_EQ(unary("LOGICAL_NOT", {0, 1, -2}), (std::vector<double>{1, 0, 0}));
}

TEST(RefPointwise, UnaryMath) {
  std::vector<double> x = {0.25, 1, 4, 2.5};
  EXPECT_EQ(unary("NEG", x), (std::vector<double>{-0.25, -1, -4, -2.5}));
  EXPECT_EQ(unary("ABS", {-3, 2}), (std::vector<double>{3, 2}));
  EXPECT_EQ(unary("RECIPROCAL", x), (std::vector<double>{4, 1, 0.25, 0.4}));
  EXPECT_EQ(unary("IDENTITY", x), x);
  EXPECT_EQ(unary("SQRT", x), (std::vector<double>{0.5, 1, 2, std::sqrt(2.5)}));
  EXPECT_EQ(unary("RSQRT", x), (std::vector<double>{2, 1, 0.5, 1 / std::sqrt(2.5)}));
  EXPECT_EQ(unary("CEIL", {1.2, -1.2}), (std::vector<double>{2, -1}));
  EXPECT_EQ(unary("FLOOR", {1.2, -1.2}), (std::vector<double>{1, -2}));
  EXPECT_ALL_NEAR(unary("EXP", {0, 1}), (std::vector<double>{1, 2.718281828459045}), 1e-15, 1e-15);
  EXPECT_ALL_NEAR(unary("LOG", {1, 2.718281828459045}), (std::vector<double>{0, 1}), 1e-15, 1e-15);
  EXPECT_ALL_NEAR(unary("ERF", {0, 1}), (std::vector<double>{0, 0.8427007929497149}), 1e-15, 1e-15);
  EXPECT_ALL_NEAR(unary("SIN", {0, M_PI / 2}), (std::vector<double>{0, 1}), 1e-15, 1e-15);
  EXPECT_ALL_NEAR(unary("COS", {0, M_PI}), (std::vector<double>{1, -1}), 1e-15, 1e-15);
  EXPECT_ALL_NEAR(unary("TAN", {M_PI / 4}), (std::vector<double>{1}), 1e-15, 1e-15);
}

TEST(RefPointwise, Activations) {
  std::vector<double> x = {-2, -0.5, 0.5, 3};
  EXPECT_EQ(unary("RELU_FWD", x), (std::vector<double>{0, 0, 0.5, 3}));
  EXPECT_EQ(unary("RELU_FWD", x, NodeAttrs().set("relu_lower_clip_slope", 0.1)), (std::vector<double>{-0.2, -0.05, 0.5, 3}));
  EXPECT_EQ(unary("RELU_FWD", x, NodeAttrs().set("relu_upper_clip", 1.0).set("relu_lower_clip", -1.0)),
            (std::vector<double>{-1, -0.5, 0.5, 1}));
  EXPECT_ALL_NEAR(unary("TANH_FWD", {0.5}), (std::vector<double>{0.46211715726000974}), 1e-15, 1e-15);
  EXPECT_ALL_NEAR(unary("SIGMOID_FWD", {0, 2, -40}), (std::vector<double>{0.5, 0.8807970779778823, 4.248354255291589e-18}), 0, 1e-14);
  EXPECT_ALL_NEAR(unary("ELU_FWD", {-1, 2}, NodeAttrs().set("elu_alpha", 2.0)), (std::vector<double>{2 * (std::exp(-1.0) - 1), 2}), 0, 1e-15);
  // GELU(1) = 0.5 * (1 + erf(1/sqrt2)) = 0.8413447460685429
  EXPECT_ALL_NEAR(unary("GELU_FWD", {1, -1}), (std::vector<double>{0.8413447460685429, -0.15865525393145707}), 0, 1e-14);
  EXPECT_ALL_NEAR(unary("GELU_APPROX_TANH_FWD", {1}), (std::vector<double>{0.8411919906082768}), 0, 1e-14);
  EXPECT_ALL_NEAR(unary("SOFTPLUS_FWD", {0, 50}, NodeAttrs().set("softplus_beta", 2.0)), (std::vector<double>{std::log(2.0) / 2, 50}), 0, 1e-15);
  EXPECT_ALL_NEAR(unary("SWISH_FWD", {1}, NodeAttrs().set("swish_beta", 2.0)), (std::vector<double>{1 / (1 + std::exp(-2.0))}), 0, 1e-15);
}

TEST(RefPointwise, BackwardMatchesFiniteDifferences) {
  const char* pairs[][2] = {{"RELU_FWD", "RELU_BWD"},   {"TANH_FWD", "TANH_BWD"},
                            {"SIGMOID_FWD", "SIGMOID_BWD"}, {"ELU_FWD", "ELU_BWD"},
                            {"GELU_FWD", "GELU_BWD"},   {"GELU_APPROX_TANH_FWD", "GELU_APPROX_TANH_BWD"},
                            {"SOFTPLUS_FWD", "SOFTPLUS_BWD"}, {"SWISH_FWD", "SWISH_BWD"}};
  std::vector<double> x = {-2.1, -0.7, 0.3, 1.9};
  const double h = 1e-6;
  for (auto& pr : pairs) {
    NodeAttrs extra;
    if (std::string(pr[0]) == "SWISH_FWD") extra.set("swish_beta", 1.5);
    if (std::string(pr[0]) == "ELU_FWD") extra.set("elu_alpha", 0.7);
    if (std::string(pr[0]) == "SOFTPLUS_FWD") extra.set("softplus_beta", 3.0);
    if (std::string(pr[0]) == "RELU_FWD") extra.set("relu_lower_clip_slope", 0.2);
    std::vector<double> xp = x, xm = x;
    for (auto& v : xp) v += h;
    for (auto& v : xm) v -= h;
    auto fp = unary(pr[0], xp, extra), fm = unary(pr[0], xm, extra);
    std::vector<double> want(x.size());
    for (size_t i = 0; i < x.size(); ++i) want[i] = 3.0 * (fp[i] - fm[i]) / (2 * h);
    auto got = binary(pr[1], {3, 3, 3, 3}, x, extra);
    EXPECT_ALL_NEAR(got, want, 1e-7, 1e-6);
    if (::testing::Test::HasFailure()) ADD_FAILURE() << pr[1];
  }
}

TEST(RefPointwise, GenIndexAndSelect) {
  Graph g;
  auto a = t(g, {2, 3});
  auto i0 = g.gen_index(a, NodeAttrs().set("axis", 0));
  auto i1 = g.gen_index(a, NodeAttrs().set("axis", 1));
  i0->set_output(true).set_data_type(DataType::INT32);
  i1->set_output(true).set_data_type(DataType::INT32);
  auto x = t(g, {2, 3}), z = t(g, {1, 1});
  auto m = t(g, {2, 1}, DataType::BOOLEAN);
  auto sel = g.binary_select(x, z, m);
  sel->set_output(true).set_data_type(DataType::FLOAT);
  test::RefRunner r(g);
  r.set(x, {1, 2, 3, 4, 5, 6});
  r.set(z, {-1});
  r.set(m, {0, 1});
  Status s = r.run_all();
  ASSERT_TRUE(s.is_good()) << s.get_message();
  EXPECT_EQ(r.get(i0), (std::vector<double>{0, 0, 0, 1, 1, 1}));
  EXPECT_EQ(r.get(i1), (std::vector<double>{0, 1, 2, 0, 1, 2}));
  EXPECT_EQ(r.get(sel), (std::vector<double>{-1, -1, -1, 4, 5, 6}));
}

TEST(RefPointwise, LowPrecisionRoundsOnceAtTheOutput) {
  Graph g;
  auto a = t(g, {4}, DataType::HALF);
  auto b = t(g, {4}, DataType::BFLOAT16);
  auto y = g.mul(a, b);
  y->set_output(true).set_data_type(DataType::FP8_E4M3);
  auto y2 = g.add(a, b);
  y2->set_output(true).set_data_type(DataType::HALF);
  test::RefRunner r(g);
  r.set(a, {1.5, 3, 100, -0.25});
  r.set(b, {1.5, 1.25, 10, 3});
  ASSERT_TRUE(r.run_all().is_good());
  // 2.25 -> 2.25; 3.75 -> 3.75; 1000 -> saturates 448; -0.75 exact
  EXPECT_EQ(r.get(y), (std::vector<double>{2.25, 3.75, 448, -0.75}));
  EXPECT_EQ(r.get(y2), (std::vector<double>{3, 4.25, 110, 2.75}));
  // Input read in fp8 and output in fp16: 1 + 2^-11 computed exactly then rounded once (tie -> 1).
  Graph g2;
  auto c = t(g2, {1}, DataType::FLOAT), d = t(g2, {1}, DataType::FLOAT);
  auto e = g2.add(c, d);
  e->set_output(true).set_data_type(DataType::HALF);
  test::RefRunner r2(g2);
  r2.set(c, {1.0});
  r2.set(d, {std::ldexp(1.0, -11) + std::ldexp(1.0, -20)});
  ASSERT_TRUE(r2.run_all().is_good());
  EXPECT_EQ(r2.get(e), (std::vector<double>{1.0 + std::ldexp(1.0, -10)}));
}
