// SPDX-License-Identifier: Apache-2.0
// Reference POINTWISE kernel against hand-computed values.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <map>
#include <string>

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

// ---------------------------------------------------------------- edge values, every mode

namespace {

const double kInf = std::numeric_limits<double>::infinity();
const double kNaN = std::numeric_limits<double>::quiet_NaN();

// Equal as IEEE values with the sign of zero, NaN equal to NaN; finite values to 1e-12 relative.
bool same_value(double got, double want) {
  if (std::isnan(want)) return std::isnan(got);
  if (want == 0.0) return got == 0.0 && std::signbit(got) == std::signbit(want);
  if (std::isinf(want)) return got == want;
  return std::fabs(got - want) <= 1e-12 * std::fabs(want);
}

double sig(double x) { return 1.0 / (1.0 + std::exp(-x)); }
double gelu_ref(double x) { return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0))); }
double gelu_tanh_ref(double x) {
  return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
}
double gelu_d(double x) { return 0.5 * (1.0 + std::erf(x / std::sqrt(2.0))) + x * std::exp(-0.5 * x * x) / std::sqrt(2.0 * M_PI); }
double gelu_tanh_d(double x) {
  const double k = std::sqrt(2.0 / M_PI), t = std::tanh(k * (x + 0.044715 * x * x * x));
  return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * k * (1.0 + 3.0 * 0.044715 * x * x);
}

}  // namespace

// Every mode of pointwise_modes.def at -inf, -huge, -1, -0, +0, 1, huge, +inf and NaN (unary), or on
// pairs of them (binary; backward modes take dY = 1), against a table: IEEE results, and for the
// activations the limits at +-inf (no inf * 0 = NaN) and torch's rules at NaN.
TEST(RefPointwise, EdgeValuesOfEveryModeMatchTheTable) {
  const std::vector<double> x = {-kInf, -1e300, -1.0, -0.0, 0.0, 1.0, 1e300, kInf, kNaN};
  const double s1 = sig(1.0), sm1 = sig(-1.0), e = std::exp(1.0);
  std::map<std::string, std::vector<double>> unary_table = {
      {"NEG", {kInf, 1e300, 1, 0.0, -0.0, -1, -1e300, -kInf, kNaN}},
      {"ABS", {kInf, 1e300, 1, 0.0, 0.0, 1, 1e300, kInf, kNaN}},
      {"RECIPROCAL", {-0.0, -1e-300, -1, -kInf, kInf, 1, 1e-300, 0.0, kNaN}},
      {"IDENTITY", x},
      {"SQRT", {kNaN, kNaN, kNaN, -0.0, 0.0, 1, 1e150, kInf, kNaN}},
      {"RSQRT", {kNaN, kNaN, kNaN, -kInf, kInf, 1, 1e-150, 0.0, kNaN}},
      {"EXP", {0.0, 0.0, 1 / e, 1, 1, e, kInf, kInf, kNaN}},
      {"LOG", {kNaN, kNaN, kNaN, -kInf, -kInf, 0.0, std::log(1e300), kInf, kNaN}},
      {"ERF", {-1, -1, std::erf(-1.0), -0.0, 0.0, std::erf(1.0), 1, 1, kNaN}},
      {"SIN", {kNaN, std::sin(-1e300), std::sin(-1.0), -0.0, 0.0, std::sin(1.0), std::sin(1e300), kNaN, kNaN}},
      {"COS", {kNaN, std::cos(-1e300), std::cos(-1.0), 1, 1, std::cos(1.0), std::cos(1e300), kNaN, kNaN}},
      {"TAN", {kNaN, std::tan(-1e300), std::tan(-1.0), -0.0, 0.0, std::tan(1.0), std::tan(1e300), kNaN, kNaN}},
      {"CEIL", x},
      {"FLOOR", x},
      {"RELU_FWD", {0.0, 0.0, 0.0, 0.0, 0.0, 1, 1e300, kInf, kNaN}},
      {"TANH_FWD", {-1, -1, std::tanh(-1.0), -0.0, 0.0, std::tanh(1.0), 1, 1, kNaN}},
      {"SIGMOID_FWD", {0.0, 0.0, sm1, 0.5, 0.5, s1, 1, 1, kNaN}},
      {"ELU_FWD", {-1, -1, std::expm1(-1.0), -0.0, 0.0, 1, 1e300, kInf, kNaN}},
      {"GELU_FWD", {-0.0, -0.0, gelu_ref(-1), -0.0, 0.0, gelu_ref(1), 1e300, kInf, kNaN}},
      {"GELU_APPROX_TANH_FWD", {-0.0, -0.0, gelu_tanh_ref(-1), -0.0, 0.0, gelu_tanh_ref(1), 1e300, kInf, kNaN}},
      {"SOFTPLUS_FWD", {0.0, 0.0, std::log1p(1 / e), std::log(2.0), std::log(2.0), 1 + std::log1p(1 / e), 1e300, kInf, kNaN}},
      {"SWISH_FWD", {-0.0, -0.0, -sm1, -0.0, 0.0, s1, 1e300, kInf, kNaN}},
      {"LOGICAL_NOT", {0, 0, 0, 1, 1, 0, 0, 0, 0}},
      // Backward modes: dY = 1 against X = the row above.
      {"RELU_BWD", {0, 0, 0, 0, 0, 1, 1, 1, 1}},
      {"TANH_BWD", {0, 0, 1 - std::pow(std::tanh(1.0), 2), 1, 1, 1 - std::pow(std::tanh(1.0), 2), 0, 0, kNaN}},
      {"SIGMOID_BWD", {0, 0, sm1 * (1 - sm1), 0.25, 0.25, s1 * (1 - s1), 0, 0, kNaN}},
      {"ELU_BWD", {0, 0, 1 / e, 1, 1, 1, 1, 1, 1}},
      {"GELU_BWD", {0, 0, gelu_d(-1), 0.5, 0.5, gelu_d(1), 1, 1, kNaN}},
      {"GELU_APPROX_TANH_BWD", {0, 0, gelu_tanh_d(-1), 0.5, 0.5, gelu_tanh_d(1), 1, 1, kNaN}},
      {"SOFTPLUS_BWD", {0, 0, sm1, 0.5, 0.5, s1, 1, 1, kNaN}},
      {"SWISH_BWD", {0, 0, sm1 - sm1 * (1 - sm1), 0.5, 0.5, s1 + s1 * (1 - s1), 1, 1, kNaN}},
  };
  // (a, b) pairs for the binary modes.
  const std::vector<double> pa = {kInf, kInf, -kInf, 0.0, 1, -1, kNaN, 1, 1e308, -0.0};
  const std::vector<double> pb = {kInf, -kInf, kInf, -0.0, 0.0, 0.0, 1, kNaN, 1e308, -0.0};
  std::map<std::string, std::vector<double>> binary_table = {
      {"ADD", {kInf, kNaN, kNaN, 0.0, 1, -1, kNaN, kNaN, kInf, -0.0}},
      {"SUB", {kNaN, kInf, -kInf, 0.0, 1, -1, kNaN, kNaN, 0.0, 0.0}},
      {"MUL", {kInf, -kInf, -kInf, -0.0, 0.0, -0.0, kNaN, kNaN, kInf, 0.0}},
      {"DIV", {kNaN, kNaN, kNaN, kNaN, kInf, -kInf, kNaN, kNaN, 1, kNaN}},
      {"ADD_SQUARE", {kInf, kInf, kNaN, 0.0, 1, -1, kNaN, kNaN, kInf, 0.0}},
      {"MAX", {kInf, kInf, kInf, 0.0, 1, 0.0, kNaN, kNaN, 1e308, -0.0}},
      {"MIN", {kInf, -kInf, -kInf, 0.0, 0.0, -1, kNaN, kNaN, 1e308, -0.0}},
      {"MOD", {kNaN, kNaN, kNaN, kNaN, kNaN, kNaN, kNaN, kNaN, 0.0, kNaN}},
      {"POW", {kInf, 0.0, kInf, 1, 1, 1, kNaN, 1, kInf, 1}},
      {"CMP_EQ", {1, 0, 0, 1, 0, 0, 0, 0, 1, 1}},
      {"CMP_NEQ", {0, 1, 1, 0, 1, 1, 1, 1, 0, 0}},
      {"CMP_GT", {0, 1, 0, 0, 1, 0, 0, 0, 0, 0}},
      {"CMP_GE", {1, 1, 0, 1, 1, 0, 0, 0, 1, 1}},
      {"CMP_LT", {0, 0, 1, 0, 0, 1, 0, 0, 0, 0}},
      {"CMP_LE", {1, 0, 1, 1, 0, 1, 0, 0, 1, 1}},
      {"LOGICAL_AND", {1, 1, 1, 0, 0, 0, 1, 1, 1, 0}},
      {"LOGICAL_OR", {1, 1, 1, 0, 1, 1, 1, 1, 1, 0}},
  };
  auto check = [](const std::string& mode, const std::vector<double>& got, const std::vector<double>& want,
                  const std::vector<double>& in) {
    ASSERT_EQ(got.size(), want.size()) << mode;
    for (size_t i = 0; i < want.size(); ++i)
      EXPECT_TRUE(same_value(got[i], want[i])) << mode << " at input " << in[i] << ": got " << got[i] << ", want " << want[i];
  };
  size_t covered = 0;
#define OPENDNN_PW(E, m, arity)                                                                    \
  {                                                                                                \
    const std::string mode = #E;                                                                   \
    if (unary_table.count(mode)) {                                                                 \
      auto got = arity == 1 ? unary(#E, x) : binary(#E, std::vector<double>(x.size(), 1.0), x);    \
      check(mode, got, unary_table[mode], x);                                                      \
      ++covered;                                                                                   \
    } else if (binary_table.count(mode)) {                                                         \
      check(mode, binary(#E, pa, pb), binary_table[mode], pa);                                     \
      ++covered;                                                                                   \
    } else {                                                                                       \
      EXPECT_TRUE(mode == "GEN_INDEX" || mode == "BINARY_SELECT") << mode << " has no edge table"; \
    }                                                                                              \
  }
#include "opendnn/pointwise_modes.def"
#undef OPENDNN_PW
  EXPECT_EQ(covered, unary_table.size() + binary_table.size());

  // BINARY_SELECT: a NaN mask is nonzero (selects a); infinities pass through untouched.
  Graph g;
  auto a = t(g, {3}, DataType::DOUBLE), b = t(g, {3}, DataType::DOUBLE), m = t(g, {3}, DataType::DOUBLE);
  auto y = g.binary_select(a, b, m);
  y->set_output(true).set_data_type(DataType::DOUBLE);
  test::RefRunner r(g);
  r.set(a, {kInf, kNaN, 1});
  r.set(b, {2, 3, -kInf});
  r.set(m, {kNaN, 0.0, -0.0});
  ASSERT_TRUE(r.run_all().is_good());
  check("BINARY_SELECT", r.get(y), {kInf, 3, -kInf}, {kInf, kNaN, 1});
}

// Relu's upper clip stops the gradient at the clip; with none, the slope is 1 up to +inf. Leaky relu
// passes dY * slope below the clip, at -inf too.
TEST(RefPointwise, ReluClipEdges) {
  const std::vector<double> x = {-kInf, -1, 2, 6, kInf};
  auto clipped = NodeAttrs().set("relu_upper_clip", 6.0);
  EXPECT_EQ(unary("RELU_FWD", x, clipped), (std::vector<double>{0, 0, 2, 6, 6}));
  EXPECT_EQ(binary("RELU_BWD", {1, 1, 1, 1, 1}, x, clipped), (std::vector<double>{0, 0, 1, 0, 0}));
  auto leaky = NodeAttrs().set("relu_lower_clip_slope", 0.5);
  EXPECT_EQ(unary("RELU_FWD", x, leaky), (std::vector<double>{-kInf, -0.5, 2, 6, kInf}));
  EXPECT_EQ(binary("RELU_BWD", {1, 1, 1, 1, 1}, x, leaky), (std::vector<double>{0.5, 0.5, 1, 1, 1}));
  // A zero gradient stays 0 for an infinite dY (as torch's threshold backward).
  EXPECT_EQ(binary("RELU_BWD", {kInf, kInf}, {-1, -kInf}), (std::vector<double>{0, 0}));
}

// Every backward mode against central differences of its forward, with default attributes, over a
// range that reaches the tails (where cancellation or the limits matter).
TEST(RefPointwise, BackwardMatchesFiniteDifferencesOverTheRange) {
  const char* pairs[][2] = {{"RELU_FWD", "RELU_BWD"},       {"TANH_FWD", "TANH_BWD"},
                            {"SIGMOID_FWD", "SIGMOID_BWD"}, {"ELU_FWD", "ELU_BWD"},
                            {"GELU_FWD", "GELU_BWD"},       {"GELU_APPROX_TANH_FWD", "GELU_APPROX_TANH_BWD"},
                            {"SOFTPLUS_FWD", "SOFTPLUS_BWD"}, {"SWISH_FWD", "SWISH_BWD"}};
  std::vector<double> x = {-30.5, -12.25, -6.5, -3.1, -1.3, -0.45, 0.2, 0.9, 2.6, 5.3, 11.7, 29.9};
  const double h = 1e-5;
  for (auto& pr : pairs) {
    for (NodeAttrs extra : {NodeAttrs(), NodeAttrs().set("swish_beta", -0.75).set("elu_alpha", 2.5).set("softplus_beta", 0.5)
                                             .set("relu_lower_clip", -1.0).set("relu_upper_clip", 4.0)}) {
      std::vector<double> xp = x, xm = x;
      for (auto& v : xp) v += h;
      for (auto& v : xm) v -= h;
      auto fp = unary(pr[0], xp, extra), fm = unary(pr[0], xm, extra);
      std::vector<double> want(x.size());
      for (size_t i = 0; i < x.size(); ++i) want[i] = -2.0 * (fp[i] - fm[i]) / (2 * h);
      auto got = binary(pr[1], std::vector<double>(x.size(), -2.0), x, extra);
      EXPECT_ALL_NEAR(got, want, 1e-6, 1e-6);
      if (::testing::Test::HasFailure()) ADD_FAILURE() << pr[1];
    }
  }
}
