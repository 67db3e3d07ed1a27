// SPDX-License-Identifier: Apache-2.0
// Reference kernels for REDUCTION and GENSTATS.
//
// Conventions (src/ops/reduction.cpp): Y has X's rank, each dim kept (= X's) or reduced (1).
//   ADD sum, MUL product, MIN / MAX (a NaN propagates), AMAX max |x|, AVG sum / count, NORM1 sum |x|,
//   NORM2 sqrt(sum x^2), MUL_NO_ZEROS product of the non-zero elements (1 if all are zero).
//   Accumulation in double, one rounding into Y. An empty reduction gives the mode's identity
//   (ADD/NORM*: 0, MUL: 1, MIN: +inf, MAX/AMAX: -inf / 0, AVG: NaN).
//   GENSTATS: X [N, C, ...] -> sum[1, C, 1...] = sum of X over all dims but 1, sq_sum likewise of x^2.
#include <cmath>
#include <limits>
#include <string>

#include "engines/reference/kern_util.h"

namespace opendnn::ref {
namespace {

enum class Mode { ADD, MUL, MIN, MAX, AMAX, AVG, NORM1, NORM2, MUL_NO_ZEROS };

bool parse(const std::string& s, Mode& m) {
  static const std::pair<const char*, Mode> kModes[] = {
      {"ADD", Mode::ADD},   {"MUL", Mode::MUL},     {"MIN", Mode::MIN},     {"MAX", Mode::MAX},
      {"AMAX", Mode::AMAX}, {"AVG", Mode::AVG},     {"NORM1", Mode::NORM1}, {"NORM2", Mode::NORM2},
      {"MUL_NO_ZEROS", Mode::MUL_NO_ZEROS}};
  for (auto& [name, mode] : kModes)
    if (s == name) {
      m = mode;
      return true;
    }
  return false;
}

Status check_reduction(const Node& n) {
  OPENDNN_RETURN_IF_ERROR(ku::check_rank(n));
  Mode m;
  if (!n.has("mode") || !parse(n.attr_str("mode"), m))
    return n.fail(ErrorCode::GRAPH_NOT_SUPPORTED, "unknown reduction mode");
  return {};
}

// Reduces x over the axes where y's dim is 1 and x's is not; f(acc, v) folds, fin finishes.
template <class Init, class Fold, class Fin>
void reduce(const View& x, const View& y, Init init, Fold fold, Fin fin) {
  const size_t r = x.rank();
  std::vector<int64_t> red_dims, red_strides;
  for (size_t i = 0; i < r; ++i)
    if (y.dims[i] == 1 && x.dims[i] != 1) {
      red_dims.push_back(x.dims[i]);
      red_strides.push_back(x.strides[i]);
    }
  std::vector<int64_t> kept_x(r);
  for (size_t i = 0; i < r; ++i) kept_x[i] = (y.dims[i] == 1) ? 0 : x.strides[i];
  const int64_t count = ku::volume(red_dims);
  const int64_t total = y.volume();
#pragma omp parallel for schedule(static) if (ku::parallel_worth(ku::work_of({total, count})))
  for (int64_t lin = 0; lin < total; ++lin) {
    int64_t yi[ku::kMaxRank] = {}, ri[ku::kMaxRank] = {};
    ku::unravel(lin, y.dims.data(), r, yi);
    const int64_t xb = ku::dot(yi, kept_x);
    double acc = init();
    for (int64_t k = 0; k < count; ++k) {
      ku::unravel(k, red_dims.data(), red_dims.size(), ri);
      acc = fold(acc, x.get(xb + ku::dot(ri, red_strides)));
    }
    y.set(ku::dot(yi, y.strides), fin(acc, count));
  }
}

Status run_reduction(const Node& n, const Args& args) {
  const View* y = ku::out(n, args, "Y");
  const View* x = ku::in(n, args, "X");
  if (!y) return {};
  if (!x) return n.fail(ErrorCode::INVALID_VARIANT_PACK, "X needs data");
  Mode m = Mode::ADD;
  (void)parse(n.attr_str("mode"), m);
  constexpr double kInf = std::numeric_limits<double>::infinity();
  auto id = [](double a, int64_t) { return a; };
  auto nan_max = [](double a, double v) { return (std::isnan(a) || std::isnan(v)) ? std::numeric_limits<double>::quiet_NaN() : std::max(a, v); };
  auto nan_min = [](double a, double v) { return (std::isnan(a) || std::isnan(v)) ? std::numeric_limits<double>::quiet_NaN() : std::min(a, v); };
  switch (m) {
    case Mode::ADD: reduce(*x, *y, [] { return 0.0; }, [](double a, double v) { return a + v; }, id); break;
    case Mode::MUL: reduce(*x, *y, [] { return 1.0; }, [](double a, double v) { return a * v; }, id); break;
    case Mode::MIN: reduce(*x, *y, [] { return kInf; }, nan_min, id); break;
    case Mode::MAX: reduce(*x, *y, [] { return -kInf; }, nan_max, id); break;
    case Mode::AMAX: reduce(*x, *y, [] { return 0.0; }, [&](double a, double v) { return nan_max(a, std::fabs(v)); }, id); break;
    case Mode::AVG:
      reduce(*x, *y, [] { return 0.0; }, [](double a, double v) { return a + v; },
             [](double a, int64_t c) { return c ? a / double(c) : std::numeric_limits<double>::quiet_NaN(); });
      break;
    case Mode::NORM1: reduce(*x, *y, [] { return 0.0; }, [](double a, double v) { return a + std::fabs(v); }, id); break;
    case Mode::NORM2:
      reduce(*x, *y, [] { return 0.0; }, [](double a, double v) { return a + v * v; }, [](double a, int64_t) { return std::sqrt(a); });
      break;
    case Mode::MUL_NO_ZEROS:
      reduce(*x, *y, [] { return 1.0; }, [](double a, double v) { return v == 0.0 ? a : a * v; }, id);
      break;
  }
  return {};
}

Status run_genstats(const Node& n, const Args& args) {
  const View* x = ku::in(n, args, "X");
  const View* sum = ku::out(n, args, "sum");
  const View* sq = ku::out(n, args, "sq_sum");
  if (!x) return n.fail(ErrorCode::INVALID_VARIANT_PACK, "X needs data");
  auto add = [](double a, double v) { return a + v; };
  auto add_sq = [](double a, double v) { return a + v * v; };
  auto id = [](double a, int64_t) { return a; };
  if (sum) reduce(*x, *sum, [] { return 0.0; }, add, id);
  if (sq) reduce(*x, *sq, [] { return 0.0; }, add_sq, id);
  return {};
}

Status check_genstats(const Node& n) { return ku::check_rank(n); }

}  // namespace

extern const Kernel kernel_REDUCTION;
extern const Kernel kernel_GENSTATS;
const Kernel kernel_REDUCTION = {check_reduction, nullptr, run_reduction};
const Kernel kernel_GENSTATS = {check_genstats, nullptr, run_genstats};

}  // namespace opendnn::ref
