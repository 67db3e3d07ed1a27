// SPDX-License-Identifier: Apache-2.0
// Reference kernels for MATMUL and MATMUL_FP8 on the blocked GEMM (gemm.h).
//
// Conventions
//   C[..., M, N] = A[..., M, K] · B[..., K, N]; batch dims broadcast numpy-style (a batch dim of 1
//   repeats); any strides. Every data type is read exactly, products are accumulated in double
//   whatever the compute type, and C is rounded once (the reference rounds only at tensor boundaries).
//   M_override / N_override / K_override (optional, INT32/INT64, broadcast over the batch dims like A):
//     per batch, only the leading M rows, N columns and K inner terms take part; the other elements of
//     C are set to attribute `padding`.
//   MATMUL_FP8: D = (A · B) * descale_A * descale_B;  amax_C = max |D| (before scaling, as Transformer
//     Engine records it; FLOAT);  C = round(D * scale_C).
#include <algorithm>
#include <cmath>
#include <vector>

#include "engines/reference/gemm.h"
#include "engines/reference/kern_util.h"

namespace opendnn::ref {
namespace {

struct Shape {
  int64_t M = 0, N = 0, K = 0, batch = 1;
  std::vector<int64_t> bdims;  // C's batch dims
};

Shape shape_of(const Node& n) {
  Shape s;
  const auto& a = n.in("A")->get_dim();
  const auto& b = n.in("B")->get_dim();
  const auto& c = n.out("C")->get_dim();
  size_t r = c.size();
  s.M = c[r - 2];
  s.N = c[r - 1];
  s.K = a[a.size() - 1];
  (void)b;
  s.bdims.assign(c.begin(), c.end() - 2);
  s.batch = ku::volume(s.bdims);
  return s;
}

Status check(const Node& n) {
  OPENDNN_RETURN_IF_ERROR(ku::check_rank(n));
  const auto& c = n.out("C")->get_dim();
  if (c.size() < 2) return n.fail(ErrorCode::GRAPH_NOT_SUPPORTED, "C must have rank >= 2");
  return {};
}

int64_t scratch(const Node& n) {
  Shape s = shape_of(n);
  return gemm::scratch_bytes(s.M, s.N, s.K);
}

// Batch offsets of a view broadcast over the batch dims.
std::vector<int64_t> batch_offsets(const View& v, const Shape& s) {
  std::vector<int64_t> bd(v.dims.begin(), v.dims.end() - 2), bs(v.strides.begin(), v.strides.end() - 2);
  View tmp;
  tmp.dims = bd;
  tmp.strides = bs;
  std::vector<int64_t> st = ku::bcast_strides(tmp, s.bdims);
  std::vector<int64_t> out(size_t(s.batch));
  int64_t idx[ku::kMaxRank] = {};
  for (int64_t b = 0; b < s.batch; ++b) {
    ku::unravel(b, s.bdims.data(), s.bdims.size(), idx);
    out[size_t(b)] = ku::dot(idx, st);
  }
  return out;
}

std::vector<int64_t> lin(int64_t n, int64_t stride) {
  std::vector<int64_t> v(size_t(std::max<int64_t>(n, 0)));
  for (int64_t i = 0; i < n; ++i) v[size_t(i)] = i * stride;
  return v;
}

struct Prepared {
  Shape s;
  std::vector<int64_t> a_rows, a_cols, b_rows, b_cols, c_rows, c_cols, a_b, b_b, c_b;
  gemm::Problem p;
};

void prepare(const Node& n, const View& A, const View& B, const View& C, Prepared& q) {
  q.s = shape_of(n);
  const Shape& s = q.s;
  size_t ra = A.rank(), rb = B.rank(), rc = C.rank();
  q.a_rows = lin(s.M, A.strides[ra - 2]);
  q.a_cols = lin(s.K, A.strides[ra - 1]);
  q.b_rows = lin(s.K, B.strides[rb - 2]);
  q.b_cols = lin(s.N, B.strides[rb - 1]);
  q.c_rows = lin(s.M, C.strides[rc - 2]);
  q.c_cols = lin(s.N, C.strides[rc - 1]);
  q.a_b = batch_offsets(A, s);
  q.b_b = batch_offsets(B, s);
  q.c_b = batch_offsets(C, s);
  gemm::Problem& p = q.p;
  p.batch = s.batch;
  p.M = s.M;
  p.N = s.N;
  p.K = s.K;
  p.a = {A.dtype, A.data, q.a_rows.data(), q.a_cols.data(), q.a_b.data(), nullptr, nullptr};
  p.b = {B.dtype, B.data, q.b_rows.data(), q.b_cols.data(), q.b_b.data(), nullptr, nullptr};
  p.c = {C.dtype, C.data, q.c_rows.data(), q.c_cols.data(), q.c_b.data()};
}

// Element offsets, per batch, of an override tensor: broadcast like A when it has C's rank, else
// one value (volume 1) or one value per batch (linear).
std::vector<int64_t> override_offsets(const View* v, const Shape& s) {
  if (!v) return {};
  if (v->rank() == s.bdims.size() + 2) return batch_offsets(*v, s);
  std::vector<int64_t> out(size_t(s.batch), 0);
  if (v->volume() > 1)
    for (int64_t b = 0; b < s.batch; ++b) out[size_t(b)] = b * v->strides.back();
  return out;
}

Status run_matmul(const Node& n, const Args& args) {
  const View* C = ku::out(n, args, "C");
  if (!C || C->volume() == 0) return {};  // nothing to write (a zero-size C may still have a huge batch)
  const View* A = ku::in(n, args, "A");
  const View* B = ku::in(n, args, "B");
  if (!A || !B) return n.fail(ErrorCode::INVALID_VARIANT_PACK, "A and B need data");
  Prepared q;
  prepare(n, *A, *B, *C, q);
  const View* mo = ku::in(n, args, "M_override");
  const View* no = ku::in(n, args, "N_override");
  const View* ko = ku::in(n, args, "K_override");
  if (!mo && !no && !ko) {
    gemm::run(q.p, args.scratch);
    return {};
  }
  // Overrides: one GEMM per batch on the leading block, padding elsewhere.
  const double pad = n.attr_float("padding");
  const Shape& s = q.s;
  const auto mof = override_offsets(mo, s), nof = override_offsets(no, s), kof = override_offsets(ko, s);
  for (int64_t b = 0; b < s.batch; ++b) {
    int64_t m = mo ? std::clamp<int64_t>(int64_t(mo->get(mof[size_t(b)])), 0, s.M) : s.M;
    int64_t nn = no ? std::clamp<int64_t>(int64_t(no->get(nof[size_t(b)])), 0, s.N) : s.N;
    int64_t k = ko ? std::clamp<int64_t>(int64_t(ko->get(kof[size_t(b)])), 0, s.K) : s.K;
    for (int64_t i = 0; i < s.M; ++i)
      for (int64_t j = 0; j < s.N; ++j)
        if (i >= m || j >= nn) C->set(q.c_b[size_t(b)] + q.c_rows[size_t(i)] + q.c_cols[size_t(j)], pad);
    gemm::Problem p = q.p;
    p.batch = 1;
    p.M = m;
    p.N = nn;
    p.K = k;
    p.a.batch_off = q.a_b.data() + b;
    p.b.batch_off = q.b_b.data() + b;
    p.c.batch_off = q.c_b.data() + b;
    gemm::run(p, args.scratch);
  }
  return {};
}

Status run_matmul_fp8(const Node& n, const Args& args) {
  const View* C = ku::out(n, args, "C");
  const View* amax = ku::out(n, args, "amax_C");
  const View* A = ku::in(n, args, "A");
  const View* B = ku::in(n, args, "B");
  if (!A || !B) return n.fail(ErrorCode::INVALID_VARIANT_PACK, "A and B need data");
  if (!C && !amax) return {};
  const double da = ku::scalar(n, args, "descale_A", 1.0);
  const double db = ku::scalar(n, args, "descale_B", 1.0);
  const double sc = ku::scalar(n, args, "scale_C", 1.0);
  Prepared q;
  if (!C) return n.fail(ErrorCode::INVALID_VARIANT_PACK, "MATMUL_FP8 needs C's memory to compute amax_C");
  prepare(n, *A, *B, *C, q);
  double m = 0.0;
  q.p.alpha = da * db;
  q.p.out_scale = sc;
  q.p.amax = &m;
  gemm::run(q.p, args.scratch);
  if (amax) amax->set(0, m);
  return {};
}

int64_t scratch_fp8(const Node& n) { return scratch(n); }

}  // namespace

extern const Kernel kernel_MATMUL;
extern const Kernel kernel_MATMUL_FP8;
const Kernel kernel_MATMUL = {check, scratch, run_matmul};
const Kernel kernel_MATMUL_FP8 = {check, scratch_fp8, run_matmul_fp8};

}  // namespace opendnn::ref
