// SPDX-License-Identifier: Apache-2.0
// Reference kernel for POINTWISE: every mode of pointwise_modes.def.
//
// Conventions
//   Inputs IN_0..IN_2 broadcast numpy-style (right-aligned, a dim of 1 repeats) to OUT_0's dims.
//   Every value is read as double, the mode is evaluated in double, and the result is rounded once to
//   OUT_0's type (the reference rounds only at tensor boundaries, whatever the compute type).
//   Comparisons and logical ops give 1.0 / 0.0 (x != 0 is true). MOD is fmod (sign of the dividend).
//   ADD_SQUARE is a + b*b. BINARY_SELECT(a, b, mask) is mask != 0 ? a : b.
//   Backward activations take (dY = IN_0, X = IN_1) and give dX = dY * f'(X).
//   RELU_FWD with lower clip L (default 0), upper clip U (default +inf), slope s (default 0):
//     y = x <= L ? L + s*(x - L) : min(x, U);   RELU_BWD: f' = x <= L ? s : (x < U ? 1 : 0).
//   ELU (alpha, default 1): x > 0 ? x : alpha*(e^x - 1).   SOFTPLUS (beta, default 1): log(1+e^(bx))/b.
//   SWISH (beta, default 1): x * sigmoid(b x).   GELU: x Phi(x).   GELU_APPROX_TANH: the tanh form.
//   GEN_INDEX: OUT_0 = the index along attribute `axis` of OUT_0's dims (IN_0 only gives the shape).
//
// Edge values (IEEE arithmetic everywhere else):
//   At +-inf an activation and its derivative take their limits where the formula would give inf * 0:
//   gelu, gelu_approx_tanh and swish give -0.0 at -inf (the sign of the limit from below, and what large
//   finite negatives give) and +inf at +inf; their derivatives give 0 and 1. relu (slope 0) gives its
//   lower clip at -inf. NaN in X gives NaN out of every forward mode and every formula-based backward;
//   the selection-based backwards follow torch: RELU_BWD passes dY through at NaN (dY * slope with a
//   nonzero slope, as leaky_relu), ELU_BWD passes dY through. A zero derivative gives 0 even for an
//   infinite or NaN dY (relu below its clip, as torch's threshold backward).
#include <cmath>
#include <limits>

#include "engines/reference/kern_util.h"

namespace opendnn::ref {
namespace {

using Params = PointwiseParams;

double sigmoid(double x) { return x >= 0 ? 1.0 / (1.0 + std::exp(-x)) : std::exp(x) / (1.0 + std::exp(x)); }
// x * g where g -> 0 faster than x grows (g is 0 exactly at the limit): 0 with x's sign, not inf * 0.
double times_vanishing(double x, double g) { return g == 0.0 && !std::isnan(x) ? std::copysign(0.0, x) : x * g; }
double softplus1(double x) { return x > 0 ? x + std::log1p(std::exp(-x)) : std::log1p(std::exp(x)); }

constexpr double kSqrt2OverPi = 0.79788456080286535587989211986876;
constexpr double kInvSqrt2 = 0.70710678118654752440084436210485;
constexpr double kInvSqrt2Pi = 0.39894228040143267793994605993438;
constexpr double kGeluC = 0.044715;
constexpr double kInf = std::numeric_limits<double>::infinity();

inline double apply(PointwiseMode m, const Params& p, double a, double b, double c) {
  using M = PointwiseMode;
  switch (m) {
    case M::ADD: return a + b;
    case M::MUL: return a * b;
    case M::SUB: return a - b;
    case M::DIV: return a / b;
    case M::ADD_SQUARE: return a + b * b;
    case M::MAX: return std::isnan(a) || std::isnan(b) ? std::numeric_limits<double>::quiet_NaN() : std::max(a, b);
    case M::MIN: return std::isnan(a) || std::isnan(b) ? std::numeric_limits<double>::quiet_NaN() : std::min(a, b);
    case M::MOD: return std::fmod(a, b);
    case M::POW: return std::pow(a, b);
    case M::NEG: return -a;
    case M::ABS: return std::fabs(a);
    case M::RECIPROCAL: return 1.0 / a;
    case M::IDENTITY: return a;
    case M::SQRT: return std::sqrt(a);
    case M::RSQRT: return 1.0 / std::sqrt(a);
    case M::EXP: return std::exp(a);
    case M::LOG: return std::log(a);
    case M::ERF: return std::erf(a);
    case M::SIN: return std::sin(a);
    case M::COS: return std::cos(a);
    case M::TAN: return std::tan(a);
    case M::CEIL: return std::ceil(a);
    case M::FLOOR: return std::floor(a);
    case M::RELU_FWD:
      if (std::isnan(a)) return a;
      if (a <= p.lower) return p.slope == 0.0 || a == p.lower ? p.lower : p.lower + p.slope * (a - p.lower);
      return std::min(a, p.upper);
    case M::RELU_BWD:
      if (b <= p.lower || (std::isnan(b) && p.slope != 0.0)) return p.slope == 0.0 ? 0.0 : a * p.slope;
      return b >= p.upper && p.upper < kInf ? 0.0 : a;  // no upper clip: slope 1 up to +inf
    case M::TANH_FWD: return std::tanh(a);
    case M::TANH_BWD: {
      double t = std::tanh(b);
      return a * (1.0 - t * t);
    }
    case M::SIGMOID_FWD: return sigmoid(a);
    case M::SIGMOID_BWD: {
      double s = sigmoid(b);
      return a * s * (1.0 - s);
    }
    case M::ELU_FWD: return a > 0 ? a : p.elu_alpha * std::expm1(a);
    case M::ELU_BWD: return a * (b <= 0 ? p.elu_alpha * std::exp(b) : 1.0);
    case M::GELU_FWD: return 0.5 * times_vanishing(a, 1.0 + std::erf(a * kInvSqrt2));
    case M::GELU_BWD:
      return a * (0.5 * (1.0 + std::erf(b * kInvSqrt2)) + times_vanishing(b, kInvSqrt2Pi * std::exp(-0.5 * b * b)));
    case M::GELU_APPROX_TANH_FWD:
      return 0.5 * times_vanishing(a, 1.0 + std::tanh(kSqrt2OverPi * (a + kGeluC * a * a * a)));
    case M::GELU_APPROX_TANH_BWD: {
      double t = std::tanh(kSqrt2OverPi * (b + kGeluC * b * b * b));
      double sech2 = 1.0 - t * t;  // 0 exactly once |b| is large: the second term's limit is 0
      double d = 0.5 * (1.0 + t) + (sech2 == 0.0 && !std::isnan(b)
                                        ? 0.0
                                        : 0.5 * b * sech2 * kSqrt2OverPi * (1.0 + 3.0 * kGeluC * b * b));
      return a * d;
    }
    case M::SOFTPLUS_FWD: return softplus1(p.softplus_beta * a) / p.softplus_beta;
    case M::SOFTPLUS_BWD: return a * sigmoid(p.softplus_beta * b);
    case M::SWISH_FWD: return times_vanishing(a, sigmoid(p.swish_beta * a));
    case M::SWISH_BWD: {
      double s = sigmoid(p.swish_beta * b);
      double ss = s * (1.0 - s);  // 0 exactly at the limits: beta * b * ss -> 0
      return a * (s + (p.swish_beta == 0.0 || (ss == 0.0 && !std::isnan(b)) ? 0.0 : p.swish_beta * b * ss));
    }
    case M::CMP_EQ: return a == b ? 1.0 : 0.0;
    case M::CMP_NEQ: return a != b ? 1.0 : 0.0;
    case M::CMP_GT: return a > b ? 1.0 : 0.0;
    case M::CMP_GE: return a >= b ? 1.0 : 0.0;
    case M::CMP_LT: return a < b ? 1.0 : 0.0;
    case M::CMP_LE: return a <= b ? 1.0 : 0.0;
    case M::LOGICAL_AND: return (a != 0.0 && b != 0.0) ? 1.0 : 0.0;
    case M::LOGICAL_OR: return (a != 0.0 || b != 0.0) ? 1.0 : 0.0;
    case M::LOGICAL_NOT: return a == 0.0 ? 1.0 : 0.0;
    case M::GEN_INDEX: return 0.0;  // handled by the caller
    case M::BINARY_SELECT: return c != 0.0 ? a : b;
  }
  return std::numeric_limits<double>::quiet_NaN();
}

Status check(const Node& n) { return ku::check_rank(n); }

Status run(const Node& n, const Args& args) {
  const View* y = ku::out(n, args, "OUT_0");
  if (!y) return {};
  const PointwiseMode mode = n.pointwise_mode();
  const int arity = pointwise_arity(mode);
  const Params p = pointwise_params(n);

  const std::vector<int64_t>& dims = y->dims;
  const size_t r = dims.size();
  const View* x[3] = {nullptr, nullptr, nullptr};
  std::vector<int64_t> xs[3];
  static const char* kPorts[3] = {"IN_0", "IN_1", "IN_2"};
  for (int i = 0; i < arity; ++i) {
    x[i] = ku::in(n, args, kPorts[i]);
    if (!x[i]) {
      if (mode == PointwiseMode::GEN_INDEX) continue;
      return n.fail(ErrorCode::INVALID_VARIANT_PACK, std::string("input ") + kPorts[i] + " has no data");
    }
    xs[i] = ku::bcast_strides(*x[i], dims);
  }
  const int64_t inner = r ? dims[r - 1] : 1;
  const int64_t ys_last = r ? y->strides[r - 1] : 0;
  if (mode == PointwiseMode::GEN_INDEX) {
    const size_t ax = size_t(p.axis);
    ku::parallel_rows(dims, [&](const int64_t* idx, int64_t) {
      int64_t yo = ku::dot(idx, y->strides);
      for (int64_t j = 0; j < inner; ++j) y->set(yo + j * ys_last, double(ax + 1 == r ? j : idx[ax]));
    });
    return {};
  }
  ku::parallel_rows(dims, [&](const int64_t* idx, int64_t) {
    int64_t o[3] = {0, 0, 0}, step[3] = {0, 0, 0};
    for (int i = 0; i < arity; ++i) {
      o[i] = ku::dot(idx, xs[i]);
      step[i] = r ? xs[i][r - 1] : 0;
    }
    int64_t yo = ku::dot(idx, y->strides);
    for (int64_t j = 0; j < inner; ++j) {
      double a = x[0]->get(o[0] + j * step[0]);
      double b = arity > 1 ? x[1]->get(o[1] + j * step[1]) : 0.0;
      double c = arity > 2 ? x[2]->get(o[2] + j * step[2]) : 0.0;
      y->set(yo + j * ys_last, apply(mode, p, a, b, c));
    }
  });
  return {};
}

}  // namespace

PointwiseParams pointwise_params(const Node& n) {
  PointwiseParams p;
  if (n.has("relu_lower_clip")) p.lower = n.attr_float("relu_lower_clip");
  if (n.has("relu_upper_clip")) p.upper = n.attr_float("relu_upper_clip");
  if (n.has("relu_lower_clip_slope")) p.slope = n.attr_float("relu_lower_clip_slope");
  if (n.has("swish_beta")) p.swish_beta = n.attr_float("swish_beta");
  if (n.has("elu_alpha")) p.elu_alpha = n.attr_float("elu_alpha");
  if (n.has("softplus_beta")) p.softplus_beta = n.attr_float("softplus_beta");
  if (n.has("axis")) p.axis = n.attr_int("axis");
  return p;
}

double pointwise_value(PointwiseMode m, const PointwiseParams& p, double a, double b, double c) { return apply(m, p, a, b, c); }

extern const Kernel kernel_POINTWISE;
const Kernel kernel_POINTWISE = {check, nullptr, run};

}  // namespace opendnn::ref
