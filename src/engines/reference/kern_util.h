// SPDX-License-Identifier: Apache-2.0
// Private helpers of the reference kernels: port lookup, scalar reads, broadcast strides, parallel
// row iteration (pointwise/matmul/conv/reduction/layout/misc.cpp), and the OpenMP work threshold
// that every kernel family's parallel regions use.
#pragma once

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <vector>

#include "engines/reference/ref_kernel.h"

namespace opendnn::ref::ku {

inline constexpr size_t kMaxRank = 16;

// ---- When to go parallel.
// Starting an OpenMP team costs microseconds when the pool is idle and milliseconds when the machine
// is oversubscribed (a 6-element add+relu took 24 ms with 2 threads vs 8 us with 1). Every parallel
// region in the reference kernels therefore carries `if(ku::parallel_worth(work))`, where `work`
// counts roughly the element operations of the loop (elements touched, or multiply-adds): below
// the threshold the region runs on the calling thread without waking the pool. This never changes
// results: iterations are independent and reductions are order-free (max) or in a fixed order, so
// outputs are bitwise the same for any thread count.
inline constexpr int64_t kParallelMinWork = int64_t(1) << 15;
// The threshold in force (kParallelMinWork unless a test lowered it to exercise threading).
int64_t parallel_min_work();
// Sets the threshold; 0 parallelises every region. For tests of thread-count independence.
void set_parallel_min_work(int64_t w);
inline bool parallel_worth(int64_t work) { return work >= parallel_min_work(); }
// The product of non-negative factors, saturating at INT64_MAX (work estimates of huge problems).
inline int64_t work_of(std::initializer_list<int64_t> factors) {
  int64_t w = 1;
  for (int64_t f : factors) {
    if (f <= 0) return 0;
    if (w > INT64_MAX / f) w = INT64_MAX;
    else w *= f;
  }
  return w;
}

// The view on a port, or null when the port is absent or carries no data.
inline const View* in(const Node& n, const Args& a, const char* port) {
  int i = n.spec().input_index(port);
  if (i < 0 || size_t(i) >= a.in.size() || !a.in[size_t(i)].present()) return nullptr;
  return &a.in[size_t(i)];
}
inline const View* out(const Node& n, const Args& a, const char* port) {
  int i = n.spec().output_index(port);
  if (i < 0 || size_t(i) >= a.out.size() || !a.out[size_t(i)].present()) return nullptr;
  return &a.out[size_t(i)];
}

// A scalar input: element 0 of the view, else the port tensor's pass-by-value value, else dflt.
inline double scalar(const Node& n, const Args& a, const char* port, double dflt) {
  if (const View* v = in(n, a, port)) return v->get(0);
  const TensorPtr& t = n.in(port);
  if (t && t->get_is_pass_by_value() && t->get_value().is_set()) return t->get_value().as_double();
  return dflt;
}
// An integer scalar input at full int64 precision.
inline int64_t int_scalar(const Node& n, const Args& a, const char* port, int64_t dflt) {
  if (const View* v = in(n, a, port)) {
    if (v->dtype == DataType::INT64) return static_cast<const int64_t*>(v->data)[0];
    if (v->dtype == DataType::INT32) return static_cast<const int32_t*>(v->data)[0];
    return int64_t(v->get(0));
  }
  const TensorPtr& t = n.in(port);
  if (t && t->get_is_pass_by_value() && t->get_value().is_set()) {
    const Scalar& s = t->get_value();
    return is_integer(s.type) ? s.i : int64_t(s.f);
  }
  return dflt;
}

// Strides that read `v` broadcast to `dims`: right-aligned, a dim of 1 (or a missing leading dim)
// gets stride 0.
inline std::vector<int64_t> bcast_strides(const View& v, const std::vector<int64_t>& dims) {
  std::vector<int64_t> s(dims.size(), 0);
  for (size_t i = 0; i < dims.size() && i < v.dims.size(); ++i) {
    size_t di = dims.size() - 1 - i, vi = v.dims.size() - 1 - i;
    s[di] = v.dims[vi] == 1 ? 0 : v.strides[vi];
  }
  return s;
}

// Decomposes a row-major linear index over dims[0..r) into idx.
inline void unravel(int64_t lin, const int64_t* dims, size_t r, int64_t* idx) {
  for (size_t i = r; i-- > 0;) {
    idx[i] = dims[i] ? lin % dims[i] : 0;
    lin = dims[i] ? lin / dims[i] : 0;
  }
}

inline int64_t volume(const std::vector<int64_t>& d) {
  int64_t v = 1;
  for (int64_t x : d) v *= x;
  return v;
}

inline int64_t dot(const int64_t* idx, const std::vector<int64_t>& strides) {
  int64_t o = 0;
  for (size_t i = 0; i < strides.size(); ++i) o += idx[i] * strides[i];
  return o;
}

// Calls f(idx, row) in parallel for every row of `dims` (all indices of the leading rank-1 dims);
// idx holds the full index with the last entry 0. f iterates the last dim itself.
template <class F>
void parallel_rows(const std::vector<int64_t>& dims, F&& f) {
  const size_t r = dims.size();
  if (r == 0) {
    int64_t idx[1] = {0};
    f(static_cast<const int64_t*>(idx), int64_t(0));
    return;
  }
  int64_t rows = 1;
  for (size_t i = 0; i + 1 < r; ++i) rows *= dims[i];
  if (dims[r - 1] == 0) return;
#pragma omp parallel for schedule(static) if (parallel_worth(work_of({rows, dims[r - 1]})))
  for (int64_t row = 0; row < rows; ++row) {
    int64_t idx[kMaxRank] = {};
    unravel(row, dims.data(), r - 1, idx);
    f(static_cast<const int64_t*>(idx), row);
  }
}

inline Status check_rank(const Node& n) {
  for (const auto& t : n.inputs())
    if (t && t->get_dim().size() > kMaxRank)
      return n.fail(ErrorCode::GRAPH_NOT_SUPPORTED, "the reference engine supports tensors of rank <= 16");
  for (const auto& t : n.outputs())
    if (t && t->get_dim().size() > kMaxRank)
      return n.fail(ErrorCode::GRAPH_NOT_SUPPORTED, "the reference engine supports tensors of rank <= 16");
  return {};
}

}  // namespace opendnn::ref::ku
