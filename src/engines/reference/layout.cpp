// SPDX-License-Identifier: Apache-2.0
// Reference kernels for RESHAPE, TRANSPOSE, SLICE and CONCATENATE (conventions: src/ops/layout.cpp).
//   RESHAPE: Y's logical row-major element i = X's logical row-major element i (both modes; for
//     VIEW_ONLY, when Y's memory is X's, the copy is skipped).
//   TRANSPOSE: Y[j] = X[i] with i[perm[k]] = j[k].
//   SLICE: Y[j] = X[start + j * stride] per axis, start clamped with Python semantics.
//   CONCATENATE: inputs placed one after the other along `axis`. An input whose memory already is
//     its place inside Y (in_place_index) is copied onto itself, which is harmless.
//   A data type change between X and Y rounds once (RNE), like every reference store.
#include <algorithm>

#include "engines/reference/kern_util.h"

namespace opendnn::ref {
namespace {

Status check(const Node& n) { return ku::check_rank(n); }

// y[idx] = x[map(idx)] over y's dims, where x_strides_for_y maps a y index to x's offset.
void copy_mapped(const View& x, int64_t x_base, const std::vector<int64_t>& x_strides_for_y, const View& y,
                 int64_t y_base, const std::vector<int64_t>& y_dims) {
  const size_t r = y_dims.size();
  const int64_t inner = r ? y_dims[r - 1] : 1;
  const int64_t xs = r ? x_strides_for_y[r - 1] : 0, ys = r ? y.strides[r - 1] : 0;
  std::vector<int64_t> yst(y.strides.begin(), y.strides.begin() + int64_t(r));
  ku::parallel_rows(y_dims, [&](const int64_t* idx, int64_t) {
    const int64_t xo = x_base + ku::dot(idx, x_strides_for_y), yo = y_base + ku::dot(idx, yst);
    if (x.dtype == y.dtype && x.dtype == DataType::FLOAT) {
      const float* xp = static_cast<const float*>(x.data);
      float* yp = static_cast<float*>(y.data);
      for (int64_t j = 0; j < inner; ++j) yp[yo + j * ys] = xp[xo + j * xs];
      return;
    }
    for (int64_t j = 0; j < inner; ++j) y.set(yo + j * ys, x.get(xo + j * xs));
  });
}

Status run_reshape(const Node& n, const Args& args) {
  const View* y = ku::out(n, args, "Y");
  const View* x = ku::in(n, args, "X");
  if (!y) return {};
  if (!x) return n.fail(ErrorCode::INVALID_VARIANT_PACK, "X needs data");
  if (x->data == y->data && n.attr_str("reshape_mode") == "VIEW_ONLY" && x->dtype == y->dtype) return {};
  const int64_t total = y->volume();
  const size_t rx = x->rank(), ry = y->rank();
#pragma omp parallel for schedule(static) if (ku::parallel_worth(total))
  for (int64_t lin = 0; lin < total; ++lin) {
    int64_t xi[ku::kMaxRank] = {}, yi[ku::kMaxRank] = {};
    ku::unravel(lin, x->dims.data(), rx, xi);
    ku::unravel(lin, y->dims.data(), ry, yi);
    y->set(ku::dot(yi, y->strides), x->get(ku::dot(xi, x->strides)));
  }
  return {};
}

Status run_transpose(const Node& n, const Args& args) {
  const View* y = ku::out(n, args, "Y");
  const View* x = ku::in(n, args, "X");
  if (!y) return {};
  if (!x) return n.fail(ErrorCode::INVALID_VARIANT_PACK, "X needs data");
  const auto& perm = n.attr_ints("permutation");
  std::vector<int64_t> xs(y->rank());
  for (size_t k = 0; k < perm.size() && k < xs.size(); ++k) xs[k] = x->strides[size_t(perm[k])];
  copy_mapped(*x, 0, xs, *y, 0, y->dims);
  return {};
}

Status run_slice(const Node& n, const Args& args) {
  const View* y = ku::out(n, args, "Y");
  const View* x = ku::in(n, args, "X");
  if (!y) return {};
  if (!x) return n.fail(ErrorCode::INVALID_VARIANT_PACK, "X needs data");
  const auto& start = n.attr_ints("start");
  const auto& stride = n.attr_ints("stride");
  int64_t base = 0;
  std::vector<int64_t> xs(x->rank());
  for (size_t i = 0; i < x->rank(); ++i) {
    const int64_t d = x->dims[i];
    int64_t b = i < start.size() ? start[i] : 0;
    if (b < 0) b = b < -d ? 0 : b + d;
    b = std::min(b, d);
    const int64_t st = i < stride.size() ? stride[i] : 1;
    base += b * x->strides[i];
    // An axis with one output element never steps (its stride may be huge: st * stride would overflow).
    xs[i] = i < y->rank() && y->dims[i] <= 1 ? 0 : st * x->strides[i];
  }
  copy_mapped(*x, base, xs, *y, 0, y->dims);
  return {};
}

Status run_concatenate(const Node& n, const Args& args) {
  if (args.out.empty() || !args.out[0].present()) return {};
  const View& y = args.out[0];
  const int64_t rank = int64_t(y.rank());
  int64_t axis = n.attr_int("axis");
  if (axis < 0) axis += rank;
  int64_t pos = 0;
  for (const View& x : args.in) {
    if (!x.present()) return n.fail(ErrorCode::INVALID_VARIANT_PACK, "every concatenated input needs data");
    if (!(x.data == y.data && x.dtype == y.dtype && x.strides == y.strides && pos == 0))
      copy_mapped(x, 0, x.strides, y, pos * y.strides[size_t(axis)], x.dims);
    pos += x.dims[size_t(axis)];
  }
  return {};
}

}  // namespace

extern const Kernel kernel_RESHAPE;
extern const Kernel kernel_TRANSPOSE;
extern const Kernel kernel_SLICE;
extern const Kernel kernel_CONCATENATE;
const Kernel kernel_RESHAPE = {check, nullptr, run_reshape};
const Kernel kernel_TRANSPOSE = {check, nullptr, run_transpose};
const Kernel kernel_SLICE = {check, nullptr, run_slice};
const Kernel kernel_CONCATENATE = {check, nullptr, run_concatenate};

}  // namespace opendnn::ref
