// SPDX-License-Identifier: Apache-2.0
// Gated delta net backward, chunked (WY/UT form, chunk size 64; shared/reference/gated_delta_net.md 1.3).
// The default GDN backward for K, V in {64, 128} (OPENDNN_GDN_BWD_CHUNKED=0 withholds it), checked on the
// H200 by test_cuda_gdn's Chunked cases.
//
// Per chunk (rows r < L, S the state entering it, K x V in the math; stored V x K):
//   Vn = U - W S,  O = Qg S + P Vn,  S' = e^gL S + Kd^T Vn,
//   Qg = diag(scale e^gamma) Q,  Kd = diag(e^(gL - gamma)) K,  P = scale (Q K^T o Gamma) lower (Aqk),
//   W = T diag(beta e^gamma) K,  U = T diag(beta) V,  T = (I + A)^-1,  A = diag(beta) (K K^T o Gamma) strictly lower.
// Backward, given dO and dS' (the gradient of the state leaving the chunk):
//   dVn = P^T dO + Kd dS',  dS = e^gL dS' + Qg^T dO - W^T dVn   (the sequential part, in reverse)
//   dW = -dVn S^T, dU = dVn, dT = dW Bk^T + dU Bv^T (Bk = diag(beta e^gamma) K, Bv = diag(beta) V),
//   dA = -T^T dT T^T (strictly lower), and the gates through gamma, whose gradient is summed in reverse
//   within the chunk to give dg (g enters only through its within-chunk cumsum).
//
// Kernels, in stream order:
//   forward recompute (gdn_kernels.cu with FwdArgs::keep): chunk table, l2 rows, chunk_prep_mma (also
//                 keeping T), the register-state pass in kStates mode (the state entering every chunk and v').
//   state_bwd     per (sequence, output head, V slice): walks the chunks backwards with dS^T (bv x K) in
//                 fp32 mma.sync accumulators, the mirror of state_pass_mma; writes dS' per chunk and dVn.
//                 three chunk stages here and in the recompute's pass where they fit (BwdArgs::v3, the default; OPENDNN_GDN_BWD_V3=0: two).
//   chunk_bwd_v2  per (chunk, output head), in parallel: dq~, dk~, dv per output head (fp32 scratch), dg, dbeta;
//                 112 KB of shared memory, two CTAs an SM.
//   post          (gdn_bwd_kernels.cu) the GVA head sums and the l2norm backward (v3: the lean post).
// exp(gamma_i - gamma_j) is evaluated only under the causal mask (strong gates underflow to 0, never inf * 0).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <type_traits>

#include "engines/cuda/gdn/gdn_device.cuh"
#include "engines/cuda/gdn/gdn_kernels.h"

namespace opendnn::cuda::gdn {
namespace {

constexpr int C = kChunk;
constexpr int kPad16 = 8;  // 16 bytes of row padding: ldmatrix rows on distinct banks

size_t align_up(size_t x) { return (x + 255) & ~size_t(255); }

// Each value head is one output head (HV >= H): chunk_bwd_v2 writes dv itself, with no fp32 round trip
// through the scratch (at H16 HV64 32k tokens that trip was 1 GB of writes and 1 GB of reads).
__host__ __device__ bool dv_direct(const BwdArgs& a) { return a.hv == a.ho; }

FwdArgs forward_args(const BwdArgs& b) {
  FwdArgs f;
  f.io = b.io, f.g_type = b.g_type, f.beta_type = b.beta_type, f.cu_int64 = b.cu_int64, f.init_type = b.init_type;
  f.t = b.t, f.n = b.n, f.h = b.h, f.hv = b.hv, f.ho = b.ho, f.k = b.k, f.v = b.v;
  f.scale = b.scale, f.l2norm = b.l2norm, f.bv = b.bv;
  f.mma_pass = true, f.mma_prep = true, f.keep = true;
  // v3: the kStates pass with three chunk stages, only where every CTA has an SM to itself anyway (at two
  // stages, K = 128 bv = 64 takes 90 KB: two CTAs an SM would fit, and three stages (135 KB) would halve that).
  f.stages = b.v3 && b.n * b.ho * (b.v / b.bv) <= b.grid ? 3 : 2;
  f.q = b.q, f.kk = b.kk, f.vv = b.vv, f.g = b.g, f.beta = b.beta, f.cu = b.cu, f.init = b.init;
  for (int i = 0; i < 4; ++i) f.init_stride[i] = b.init_stride[i];
  f.split = b.split && choose_split(f, b.grid);  // its own slice width and segment length
  return f;
}

// After the forward's workspace: dS' per chunk (io type, the layout of FwdSaved::states), dVn [T, HO, V]
// (io type), and the per-output-head gradients for post: dq~, dk~ in the io type (as fla keeps them; half
// the traffic of fp32), dv fp32 and only when value heads are summed (HV < HO).
struct Scratch {
  void* dstates;
  void* dvn;
  void *dqs, *dks;
  float* des;
  size_t bytes;
};
Scratch carve(const BwdArgs& a, char* base) {
  Scratch w{};
  size_t off = align_up(size_t(forward_workspace_bytes(forward_args(a))));
  auto take = [&](size_t bytes) {
    char* p = base ? base + off : nullptr;
    off += align_up(bytes);
    return p;
  };
  const size_t rows = size_t(a.t) * size_t(a.ho), bound = size_t(a.t / C + a.n);
  w.dstates = take(bound * size_t(a.ho) * size_t(a.v) * size_t(a.k) * 2);
  w.dvn = take(rows * size_t(a.v) * 2);
  w.dqs = take(rows * size_t(a.k) * 2);
  w.dks = take(rows * size_t(a.k) * 2);
  w.des = reinterpret_cast<float*>(take(dv_direct(a) ? 0 : rows * size_t(a.v) * 4));
  w.bytes = off;
  return w;
}

struct Params {
  BwdArgs a;
  FwdSaved f;
  Scratch w;
};

// acc[n] (16 rows from m0, 8 columns each from n0) += A B over k in [k0, k1) (multiples of 16), NT even.
// A is read from [m][k] rows, or from [k][m] rows when TA; B from [k][n] rows, or from [n][k] rows when TB.
// U > 0 caps the k loop's unrolling (chunk_bwd_v2 at 128 registers a thread); 0 leaves it to the compiler.
template <class T, int NT, bool TA, bool TB, int U = 0>
__device__ __forceinline__ void warp_mma(float (&acc)[NT][4], const T* A, int lda, const T* B, int ldb, int m0, int n0,
                                         int k0, int k1) {
  const int lane = threadIdx.x % 32;
  const int r8 = lane & 7, b3 = (lane >> 3) & 1, b4 = lane >> 4;
  auto step = [&](int k) {
    uint32_t af[4];
    if constexpr (TA) ldsm4t(af, A + (k + r8 + 8 * b4) * lda + m0 + 8 * b3);
    else ldsm4(af, A + (m0 + r8 + 8 * b3) * lda + k + 8 * b4);
#pragma unroll
    for (int n = 0; n < NT; n += 2) {
      uint32_t bf[4];
      if constexpr (TB) ldsm4(bf, B + (n0 + 8 * n + r8 + 8 * b4) * ldb + k + 8 * b3);
      else ldsm4t(bf, B + (k + r8 + 8 * b3) * ldb + n0 + 8 * n + 8 * b4);
      mma16816<T>(acc[n], af, bf[0], bf[1]);
      mma16816<T>(acc[n + 1], af, bf[2], bf[3]);
    }
  };
  if constexpr (U == 0) {
    for (int k = k0; k < k1; k += 16) step(k);
  } else {
#pragma unroll U
    for (int k = k0; k < k1; k += 16) step(k);
  }
}
template <int NT>
__device__ __forceinline__ void zero(float (&acc)[NT][4]) {
#pragma unroll
  for (int n = 0; n < NT; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e) acc[n][e] = 0.f;
}
// Sum over the four lanes sharing a row (the accumulator's column owners).
__device__ __forceinline__ float row_sum(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

// ------------------------------------------------------------------------------------------------
// state_bwd: grid N * HO * (V / bv), bv / 16 warps. Warp w owns dS^T rows v0 + 16w .. +15 over all of K
// (the forward pass's state layout), so dVn^T = dS'^T Kd^T + dO^T P and the update
// dS^T <- e^gL dS^T + dO^T Qg - dVn^T W read only the chunk tiles from shared memory. Chunk c - 1 streams
// in with cp.async while chunk c computes; NS = 3 (the backward's v3, the default where it fits) queues chunk
// c - 2 as well, the forward pass's deeper ring. Why [arithmetic, H16 HV64 K=V=128 32k tokens, bv = 64]:
// 128 CTAs of 4 warps, one an SM (two stages already take 139 KB), walk 512 chunks in ~2.1 ms = ~4.1 us a
// step. A CTA's step reads 64 KB (K, Q, W 48; Aqk 8; dO 8) and writes 24 KB (dS' 16, dVn 8); across the
// grid, with K and Q shared by 8 CTAs and W/Aqk by 2 through L2, ~3 MB a step come from HBM and ~3 MB go
// back (dS' 2, dVn 1): ~1.7 us at 3.5 TB/s. A warp's products are ~212 mma.sync (dVn 64 + 20, update 128)
// = ~1500 clk at ~7 clk each = ~0.8 us. Floors of the pass: bandwidth ~3.1 GB (dS' 1.07 GB, dVn 0.5, W
// 0.5, dO 0.5, Aqk 0.27, q/k 0.27) = ~0.9 ms; products 512 x 0.8 us = ~0.4 ms. With one chunk in flight
// a step pays most of its loads' latency after the products; the same change in the recompute's pass
// (kStates, session 7) took it from ~1.87 to 1.56 ms. Expected: ~1.6-1.8 ms (from ~2.1).
__host__ __device__ constexpr size_t bstage_bytes(int k, int bv) {
  return size_t(C * (bv + kPad16) + C * (C + kPad16) + 3 * C * (k + kPad16)) * 2 + C * sizeof(float);
}

// The split (BwdArgs::split, with the recompute's segments): per chunk the update is affine in dS^T,
//   D_c = D_{c+1} A_c + R_c   (D = dS^T, V x K; A_c the forward's K x K chunk transfer; R_c from dO),
// so over a segment D_left = D_right M + R, M the product of the A_c. kBwdSummary runs each segment (but a
// sequence's first) from D_right = 0 (from dFinal in its last segment) on the V rows, and from the identity
// with dO = 0 on K more rows (M, but in the last segment); split_combine<K, true> turns the slots into each
// segment's true D_left, last to second; kBwdApply re-runs each segment from the next one's slot (dFinal in the
// last), writing dS' and dVn, and the first segment's D_left is dh0. Slices of the forward split's width.
enum BwdMode { kBwdWhole = 0, kBwdSummary = 1, kBwdApply = 2 };

template <class T, int K, int NS, int Mode = kBwdWhole>
__global__ void __launch_bounds__(Mode == kBwdWhole ? 128 : 256) state_bwd(Params p) {
  static_assert(NS == 2 || NS == 3, "chunk stages");
  constexpr int ldk = K + kPad16, ldp = C + kPad16, KT = K / 8;
  const BwdArgs& a = p.a;
  const int V = int(a.v), BV = Mode == kBwdWhole ? a.bv : p.f.seg_bv, ldo = BV + kPad16;
  const int slices = (Mode == kBwdSummary ? V + int(a.k) : V) / BV;
  const int64_t bid = blockIdx.x;
  const int64_t item = bid / (a.ho * slices);  // sequence, or segment (split)
  const int j = int((bid / slices) % a.ho), v0 = int(bid % slices) * BV;
  const int hq = int(j / (a.ho / a.h));
  const int tid = threadIdx.x, nthreads = blockDim.x, warp = tid / 32, lane = tid % 32, g = lane / 4, c = lane % 4;
  const int vw = warp * 16;
  int64_t s = item, seq0 = 0, start = 0, end = 0;
  bool first = true, last = true;
  if constexpr (Mode == kBwdWhole) {
    seq0 = start = cu_at(a.cu, a.cu_int64, s), end = cu_at(a.cu, a.cu_int64, s + 1);
  } else {
    const int2 ent = reinterpret_cast<const int2*>(p.f.segtab)[item];
    if (ent.x < 0) return;
    s = ent.x, seq0 = cu_at(a.cu, a.cu_int64, s), start = ent.y;
    const int64_t seq_end = cu_at(a.cu, a.cu_int64, s + 1);
    end = imin(seq_end, start + int64_t(C) * p.f.seg_chunks);
    first = start == seq0, last = end == seq_end;
  }
  const bool transfer = Mode == kBwdSummary && v0 >= V;  // M's rows: dO = 0, from the identity
  if (Mode == kBwdSummary && (first || (last && transfer))) return;
  const int nch = end > start ? int((end - start + C - 1) / C) : 0;
  // The first chunk's row of FwdSaved::states and dS' (a segment starts C-aligned in its sequence).
  const int64_t row0 = seq0 / C + s + (start - seq0) / C;
  const size_t slot = size_t(V + a.k) * size_t(a.k);

  extern __shared__ __align__(128) unsigned char smem[];
  const size_t sbytes = bstage_bytes(K, BV);
  auto stage_ptrs = [&](int st, T*& o, T*& pm, T*& k, T*& q, T*& w, float*& gm) {
    o = reinterpret_cast<T*>(smem + sbytes * size_t(st));
    pm = o + C * ldo;
    k = pm + C * ldp;
    q = k + C * ldk;
    w = q + C * ldk;
    gm = reinterpret_cast<float*>(w + C * ldk);
  };

  // dS^T strip: element (v = v0 + vw + g + 8 (e / 2), k = 8 kt + 2c + e % 2) in dacc[kt][e]. It starts from
  // dFinal at a sequence's end, else (split) from the next segment's slot (apply), zero or the identity (summary).
  const float* next_slot = Mode == kBwdApply && !last ? p.f.seg + (size_t(item + 1) * size_t(a.ho) + size_t(j)) * slot : nullptr;
  float dacc[KT][4];
#pragma unroll
  for (int kt = 0; kt < KT; ++kt)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int vv = v0 + vw + g + 8 * (e / 2), kk = 8 * kt + 2 * c + e % 2;
      if (transfer) dacc[kt][e] = vv - V == kk ? 1.f : 0.f;
      else if (next_slot) dacc[kt][e] = next_slot[size_t(vv) * size_t(a.k) + size_t(kk)];
      else if (last && a.dfin)
        dacc[kt][e] = load_any(a.dfin_type, a.dfin,
                               s * a.dfin_stride[0] + j * a.dfin_stride[1] + vv * a.dfin_stride[2] + kk * a.dfin_stride[3]);
      else dacc[kt][e] = 0.f;
    }

  const T* dog = static_cast<const T*>(a.d_o);
  const T* pg = static_cast<const T*>(p.f.aqk);
  const T* kg = static_cast<const T*>(p.f.k);
  const T* qg = static_cast<const T*>(p.f.q);
  const T* wg = static_cast<const T*>(p.f.w);
  auto issue = [&](int ci, int st) {
    T *o, *pm, *k, *q, *w;
    float* gm;
    stage_ptrs(st, o, pm, k, q, w, gm);
    const int64_t t0 = start + int64_t(ci) * C;
    const int L = int(imin(C, end - t0));
    for (int e = tid; e < C * (K / 8); e += nthreads) {
      const int r = e / (K / 8), col = (e % (K / 8)) * 8;
      const bool ok = r < L;
      const int64_t rq = ok ? (t0 + r) * a.h + hq : 0, rw = ok ? (t0 + r) * a.ho + j : 0;
      cp16(k + r * ldk + col, kg + rq * K + col, ok);
      cp16(q + r * ldk + col, qg + rq * K + col, ok);
      cp16(w + r * ldk + col, wg + rw * K + col, ok);
    }
    for (int e = tid; e < C * (C / 8); e += nthreads) {
      const int r = e / (C / 8), col = (e % (C / 8)) * 8;
      const bool ok = r < L;
      cp16(pm + r * ldp + col, pg + (ok ? (t0 + r) * a.ho + j : 0) * C + col, ok);
    }
    for (int e = tid; e < C * (BV / 8); e += nthreads) {
      const int r = e / (BV / 8), col = (e % (BV / 8)) * 8;
      const bool ok = r < L && !transfer;  // M's rows have dO = 0 (and columns past V)
      cp16(o + r * ldo + col, dog + (ok ? ((t0 + r) * a.ho + j) * V + v0 + col : 0), ok);
    }
    for (int r = tid; r < C; r += nthreads) cp4(gm + r, p.f.gam + (r < L ? (t0 + r) * a.ho + j : 0), r < L);
    cp_commit();
  };
  // NS = 3's loads: the same tiles with each source's chunk row formed once, 32-bit row offsets (a row stride
  // times 63 stays below 2^31: HO, H <= 65535, K, V <= 128) and shifts instead of the runtime division by
  // bv / 8 (the forward pass's issue_fast). Past-the-end rows point at the chunk's first row (zero-filled).
  static_assert(C == 64, "row = e >> 3 below");
  const int su = 31 - __clz(BV / 8);  // log2 of the 16-byte pieces in a dO row slice
  auto issue_fast = [&](int ci, int st) {
    T *o, *pm, *k, *q, *w;
    float* gm;
    stage_ptrs(st, o, pm, k, q, w, gm);
    const int64_t t0 = start + int64_t(ci) * C;
    const int L = int(imin(C, end - t0));
    const int sq = int(a.h) * K, sw = int(a.ho);  // q/k row stride (elements), [T, HO, ...] row stride (rows)
    const int64_t rw0 = t0 * a.ho + j;
    const T* k0 = kg + (t0 * a.h + hq) * K;
    const T* q0 = qg + (t0 * a.h + hq) * K;
    const T* w0 = wg + rw0 * K;
    constexpr int per_k = K / 8, sk = K == 128 ? 4 : 3;
    static_assert(per_k == 1 << sk, "K is 64 or 128");
    for (int e = tid; e < C * per_k; e += nthreads) {
      const int r = e >> sk, col = (e & (per_k - 1)) * 8;
      const bool ok = r < L;
      const int rr = ok ? r : 0;
      cp16(k + r * ldk + col, k0 + rr * sq + col, ok);
      cp16(q + r * ldk + col, q0 + rr * sq + col, ok);
      cp16(w + r * ldk + col, w0 + rr * (sw * K) + col, ok);
    }
    const T* p0 = pg + rw0 * C;
    for (int e = tid; e < C * (C / 8); e += nthreads) {
      const int r = e >> 3, col = (e & 7) * 8;
      const bool ok = r < L;
      cp16(pm + r * ldp + col, p0 + (ok ? r : 0) * (sw * C) + col, ok);
    }
    const T* o0 = dog + (transfer ? 0 : rw0 * V + v0);
    for (int e = tid; e < (C << su); e += nthreads) {
      const int r = e >> su, col = (e & ((1 << su) - 1)) * 8;
      const bool ok = r < L && !transfer;
      cp16(o + r * ldo + col, o0 + (ok ? r : 0) * (sw * V) + col, ok);
    }
    const float* g0 = p.f.gam + rw0;
    for (int r = tid; r < C; r += nthreads) cp4(gm + r, g0 + (r < L ? r : 0) * sw, r < L);
    cp_commit();
  };

  const int r8 = lane & 7, b3 = (lane >> 3) & 1, b4 = lane >> 4;
  // NS = 3: one commit group per queued chunk, empty ones past the sequence's first chunk, so that "all
  // but the newest group" is always chunk ci (the forward pass's ring, walked backwards). NS = 2 keeps the
  // verified default's code.
  if constexpr (NS == 2) {
    if (nch > 0) issue(nch - 1, 0);
  } else {
#pragma unroll
    for (int i = 0; i < NS - 1; ++i) {
      if (nch - 1 - i >= 0) issue_fast(nch - 1 - i, i);
      else cp_commit();
    }
  }
  for (int ci = nch - 1, it = 0; ci >= 0; --ci, ++it) {
    const int64_t t0 = start + int64_t(ci) * C;
    const int L = int(imin(C, end - t0));
    const int st = NS == 2 ? it & 1 : it % NS;
    if constexpr (NS == 2) cp_wait_all();
    else cp_wait_but_one();
    __syncthreads();  // chunk ci is visible; every warp is done with the stage chunk ci + 1 used
    if constexpr (NS == 2) {
      if (ci > 0) issue(ci - 1, st ^ 1);
    } else {
      if (ci >= NS - 1) issue_fast(ci - (NS - 1), (it + NS - 1) % NS);
      else cp_commit();
    }
    T *os, *ps, *ks, *qs, *ws;
    float* gs;
    stage_ptrs(st, os, ps, ks, qs, ws, gs);
    const float glast = gs[L - 1];

    // dS' of this chunk for chunk_bwd_v2 (not from the summaries: their D is not the true one yet).
    if constexpr (Mode != kBwdSummary) {
      T* dst = static_cast<T*>(p.w.dstates) + ((row0 + ci) * a.ho + j) * int64_t(V) * K;
#pragma unroll
      for (int kt = 0; kt < KT; ++kt)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int vv = v0 + vw + g + 8 * h, kk = 8 * kt + 2 * c;
          *reinterpret_cast<uint32_t*>(dst + int64_t(vv) * K + kk) = pack2<T>(dacc[kt][2 * h], dacc[kt][2 * h + 1]);
        }
    }

    // dVn^T (16 x 64): dS'^T K^T with its columns decayed, plus dO^T P (P lower: row slice kk feeds r <= its rows).
    float dv[8][4];
    zero(dv);
#pragma unroll
    for (int kk = 0; kk < K / 16; ++kk) {
      uint32_t af[4];
      a_frag<T>(af, dacc, kk);
#pragma unroll
      for (int np = 0; np < 4; ++np) {
        uint32_t b[4];
        ldsm4(b, ks + (16 * np + r8 + 8 * b4) * ldk + 16 * kk + 8 * b3);
        mma16816<T>(dv[2 * np], af, b[0], b[1]);
        mma16816<T>(dv[2 * np + 1], af, b[2], b[3]);
      }
    }
#pragma unroll
    for (int n = 0; n < 8; ++n) {
      const int r = 8 * n + 2 * c;
      const float d0 = __expf(glast - gs[r]), d1 = __expf(glast - gs[r + 1]);
      dv[n][0] *= d0, dv[n][1] *= d1, dv[n][2] *= d0, dv[n][3] *= d1;
    }
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
      uint32_t af[4];
      ldsm4t(af, os + (16 * kk + r8 + 8 * b4) * ldo + vw + 8 * b3);
#pragma unroll
      for (int np = 0; np <= kk; ++np) {
        uint32_t b[4];
        ldsm4t(b, ps + (16 * kk + r8 + 8 * b3) * ldp + 16 * np + 8 * b4);
        mma16816<T>(dv[2 * np], af, b[0], b[1]);
        mma16816<T>(dv[2 * np + 1], af, b[2], b[3]);
      }
    }
    T* dvn = static_cast<T*>(p.w.dvn) + (t0 * a.ho + j) * V + v0 + vw;
#pragma unroll
    for (int n = 0; n < 8; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int r = 8 * n + 2 * c + e % 2;
        if (Mode != kBwdSummary && r < L) dvn[r * a.ho * V + g + 8 * (e / 2)] = from_f<T>(dv[n][e]);
        dv[n][e] = -dv[n][e];
      }
    uint32_t vf[4][4];
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) a_frag<T>(vf[kk], dv, kk);

    // dS^T <- e^gL dS^T - dVn^T W + dO^T diag(scale e^gamma) Q.
    const float decay = __expf(glast);
#pragma unroll
    for (int kt = 0; kt < KT; ++kt)
#pragma unroll
      for (int e = 0; e < 4; ++e) dacc[kt][e] *= decay;
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
      uint32_t af[4];
      ldsm4t(af, os + (16 * kk + r8 + 8 * b4) * ldo + vw + 8 * b3);
      const int r = 16 * kk + 2 * c;
      const float f0 = a.scale * __expf(gs[r]), f1 = a.scale * __expf(gs[r + 1]);
      const float f8 = a.scale * __expf(gs[r + 8]), f9 = a.scale * __expf(gs[r + 9]);
      float2 x = unpack2<T>(af[0]);
      af[0] = pack2<T>(x.x * f0, x.y * f1);
      x = unpack2<T>(af[1]);
      af[1] = pack2<T>(x.x * f0, x.y * f1);
      x = unpack2<T>(af[2]);
      af[2] = pack2<T>(x.x * f8, x.y * f9);
      x = unpack2<T>(af[3]);
      af[3] = pack2<T>(x.x * f8, x.y * f9);
#pragma unroll
      for (int qp = 0; qp < K / 16; ++qp) {
        uint32_t b[4], bw[4];
        ldsm4t(b, qs + (16 * kk + r8 + 8 * b3) * ldk + 16 * qp + 8 * b4);
        ldsm4t(bw, ws + (16 * kk + r8 + 8 * b3) * ldk + 16 * qp + 8 * b4);
        mma16816<T>(dacc[2 * qp], af, b[0], b[1]);
        mma16816<T>(dacc[2 * qp + 1], af, b[2], b[3]);
        mma16816<T>(dacc[2 * qp], vf[kk], bw[0], bw[1]);
        mma16816<T>(dacc[2 * qp + 1], vf[kk], bw[2], bw[3]);
      }
    }
  }

  if constexpr (Mode == kBwdSummary) {  // this segment's R (rows < V) or M (rows V..) into its slot
    float* dst = p.f.seg + (size_t(item) * size_t(a.ho) + size_t(j)) * slot;
#pragma unroll
    for (int kt = 0; kt < KT; ++kt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int vv = v0 + vw + g + 8 * (e / 2), kk = 8 * kt + 2 * c + e % 2;
        dst[size_t(vv) * size_t(a.k) + size_t(kk)] = dacc[kt][e];
      }
  } else if (a.dinit && first) {
#pragma unroll
    for (int kt = 0; kt < KT; ++kt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int vv = v0 + vw + g + 8 * (e / 2), kk = 8 * kt + 2 * c + e % 2;
        store_any(a.dinit_type, a.dinit,
                  s * a.dinit_stride[0] + j * a.dinit_stride[1] + vv * a.dinit_stride[2] + kk * a.dinit_stride[3],
                  dacc[kt][e]);
      }
  }
}

// dg and dbeta of a chunk's rows r < L (one warp): gamma_r = sum_{i <= r} g_i, so dg_r = sum_{i >= r}
// dgamma_i, a suffix scan, two rows a lane.
__device__ __forceinline__ void write_gate_grads(const BwdArgs& a, int64_t t0, int j, int L, const float* dgam,
                                                 const float* dbet) {
  const int lane = threadIdx.x % 32, r0 = 2 * lane;
  const float x0 = r0 < L ? dgam[r0] : 0.f, x1 = r0 + 1 < L ? dgam[r0 + 1] : 0.f;
  float sfx = x0 + x1;
  for (int o = 1; o < 32; o <<= 1) {
    const float y = __shfl_down_sync(0xffffffffu, sfx, o);
    if (lane + o < 32) sfx += y;
  }
  const float dg[2] = {sfx, sfx - x0};
#pragma unroll
  for (int e = 0; e < 2; ++e)
    if (r0 + e < L) {
      store_any(a.g_type, a.dg, (t0 + r0 + e) * a.ho + j, dg[e]);
      store_any(a.beta_type, a.dbeta, (t0 + r0 + e) * a.ho + j, dbet[r0 + e]);
    }
}

// ------------------------------------------------------------------------------------------------
// chunk_bwd_v2: the per-chunk backward in 112 KB of shared memory, so two CTAs share an SM and one's
// loads overlap the other's products (H200, H16 HV64 32k tokens: 11.31 ms for the whole backward against
// 13.16 with a 210 KB kernel of one CTA an SM, which loaded 160 KB before its first product).
//
// Cost per CTA (one chunk, one output head), K = V = 128, C = 64:
//   products: dVn S^T, dO S^T, v' dS'^T 3 x 2.1 MFLOP; dO v'^T, K K^T, dW K^T, dU V^T 4 x 1.05; the
//     triangular ones (Dq K, Dq^T Q, T^T dW, T^T dU, E K, E^T K 6 x 0.52; G T^T, T^T Y 2 x 0.26) ~3.7:
//     ~14 MFLOP, 0.46 TFLOP over 32768 CTAs (H16 HV64 32k tokens): 0.47 ms at 990 TFLOP/s, ~0.8 ms at
//     mma.sync's practical rate.
//   ldmatrix: warp_mma reloads both operands from shared memory, ~0.08 B/FLOP: ~1.2 MB a CTA, 39 GB in
//     all, 1.2 ms at 128 B/clk/SM (132 SMs, 1.98 GHz).
//   global: reads S, dS' 2 x 32 KB, dO, v', dVn, v 4 x 16 KB, q, k 2 x 16 KB, T, P 2 x 8 KB (176 KB);
//     writes dq~, dk~, dv 3 x 16 KB: 7.3 GB, 2.1 ms at 3.5 TB/s; the G = HO/H output heads of one q/k
//     head are adjacent CTAs (the grid is flattened, head fastest), so q and k come from L2 for G - 1
//     of them: ~6.5 GB, ~1.9 ms.
//   So ~2 ms is the floor (memory); the stages inside a CTA run one after the other (the other CTA
//   fills the gaps).
// How it fits: S and dS' share one region (S's products first, dS' loaded after them; the decay term
// <S, dS'> reads dS' from memory in stage 1, just before stage 2 loads it); fp32 K K^T is recomputed
// where dA o A needs it, not kept in shared memory; dP o P and dA o A are summed over rows and
// columns in registers (shared atomics to dgamma) instead of through a C x C fp32 tile; P is read at the
// fragment positions from global memory; dq~ is finished in stage 2 (its gate term reads q at the
// fragment positions) so dq and dk are never live together: 128 registers a thread (two CTAs of 256),
// with warp_mma's k loop unrolled by two (no spills at K = V = 128; 8 bytes at K = 128, V = 64).
// Regions are reused across the three stages:
//   ra:   S (1) | dS' (2) | q, then Y, and v (3)        dout: dO (1) | k (2, 3)
//   vn:   v' (1, 2) | T (3)                              dvn, dw, ds: dU, dW, Dq then G then E
template <int K, int V>
struct B2Layout {
  static constexpr int ldk = K + kPad16, ldv = V + kPad16, ldc = C + kPad16;
  static constexpr size_t tk = size_t(C) * ldk * 2, tv = size_t(C) * ldv * 2, tc = size_t(C) * ldc * 2;
  static constexpr size_t ra = 0;
  static constexpr size_t dvn = std::max(size_t(V) * ldk * 2, tk + tv);
  static constexpr size_t dout = dvn + tv;
  static constexpr size_t vn = dout + std::max(tv, tk);
  static constexpr size_t dw = vn + std::max(tv, tc);
  static constexpr size_t ds = dw + tk;
  static constexpr size_t gates = ds + tc;  // gamma, beta, dgamma, dbeta [C] fp32
  static constexpr size_t bytes = gates + 4 * C * sizeof(float);
  static_assert(tc <= tk, "Y takes q's place");
};

// dgam[r] += sum_c X(r, c) and dgam[c] -= sum_r X(r, c) over a warp's 16 x 8N accumulator tile X (rows
// from m0, columns from n0), where entry (r, c) carries exp(gamma_r - gamma_c); no C x C tile in shared memory.
template <int N>
__device__ __forceinline__ void add_rows_minus_cols_frag(const float (&x)[N][4], int m0, int n0, float* dgam) {
  const int lane = threadIdx.x % 32, g = lane / 4, c = lane % 4;
  float r0 = 0.f, r1 = 0.f;
#pragma unroll
  for (int n = 0; n < N; ++n) r0 += x[n][0] + x[n][1], r1 += x[n][2] + x[n][3];
  r0 = row_sum(r0), r1 = row_sum(r1);
  if (c == 0) atomicAdd(dgam + m0 + g, r0), atomicAdd(dgam + m0 + g + 8, r1);
#pragma unroll
  for (int n = 0; n < N; ++n)
#pragma unroll
    for (int b = 0; b < 2; ++b) {
      float s = x[n][b] + x[n][2 + b];  // rows g and g + 8; then over the eight row groups
      s += __shfl_xor_sync(0xffffffffu, s, 4);
      s += __shfl_xor_sync(0xffffffffu, s, 8);
      s += __shfl_xor_sync(0xffffffffu, s, 16);
      if (g == 0) atomicAdd(dgam + n0 + 8 * n + 2 * c + b, -s);
    }
}

// Eight 16-bit pairs of two 16-byte vectors, multiplied and summed in fp32.
template <class T>
__device__ __forceinline__ float dot8(const uint4& x, const uint4& y) {
  const uint32_t xs[4] = {x.x, x.y, x.z, x.w}, ys[4] = {y.x, y.y, y.z, y.w};
  float s = 0.f;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 a = unpack2<T>(xs[i]), b = unpack2<T>(ys[i]);
    s += a.x * b.x + a.y * b.y;
  }
  return s;
}

// Grid: chunk table rows x HO, flattened with the output head fastest; 256 threads, two CTAs an SM. Warp
// w computes 16-row strip w / 2 of every product, half w % 2 of its columns, with mma.sync from 16-bit
// shared tiles.
template <class T, int K, int V>
__global__ void __launch_bounds__(256, 2) chunk_bwd_v2(Params p) {
  using Lay = B2Layout<K, V>;
  constexpr int ldk = Lay::ldk, ldv = Lay::ldv, ldc = Lay::ldc;
  constexpr int NK = K / 16, NV = V / 16;  // 8-column tiles in half of K or V
  const BwdArgs& a = p.a;
  const int64_t tr = int64_t(blockIdx.x) / a.ho;
  const int j = int(int64_t(blockIdx.x) % a.ho);
  const int2 ent = reinterpret_cast<const int2*>(p.f.table)[tr];
  if (ent.x < 0) return;
  const int64_t s = ent.x, t0 = ent.y, seq0 = cu_at(a.cu, a.cu_int64, s);
  const int L = int(imin(C, cu_at(a.cu, a.cu_int64, s + 1) - t0));
  const int hq = int(j / (a.ho / a.h)), hvv = int(j / (a.ho / a.hv));
  const int64_t crow = seq0 / C + s + (t0 - seq0) / C;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, c = lane % 4;
  const int m0 = 16 * (warp / 2), hf = warp % 2;

  extern __shared__ __align__(128) unsigned char smem[];
  T* sts = reinterpret_cast<T*>(smem + Lay::ra);  // S, then dS', then q
  T* yss = sts;                                   // Y (C x C) once q is consumed
  T* vs = reinterpret_cast<T*>(smem + Lay::ra + Lay::tk);
  T* dvns = reinterpret_cast<T*>(smem + Lay::dvn);
  T* dos = reinterpret_cast<T*>(smem + Lay::dout);  // dO, then k
  T* vns = reinterpret_cast<T*>(smem + Lay::vn);    // v', then T
  T* dws = reinterpret_cast<T*>(smem + Lay::dw);
  T* dss = reinterpret_cast<T*>(smem + Lay::ds);
  T *dsts = sts, *qs = sts, *ks = dos, *ts = vns, *ess = dss;
  float* gam = reinterpret_cast<float*>(smem + Lay::gates);
  float* bet = gam + C;
  float* dgam = bet + C;
  float* dbet = dgam + C;

  // Rows at or past L are zero-filled, so every product leaves them zero.
  auto load_rows = [&](T* dst, int ld, const void* src, int64_t heads, int64_t head, int width) {
    const T* sp = static_cast<const T*>(src);
    const int per = width / 8;
    for (int e = tid; e < C * per; e += 256) {
      const int r = e / per, col = (e % per) * 8;
      const bool ok = r < L;
      cp16(dst + r * ld + col, sp + ((ok ? t0 + r : t0) * heads + head) * width + col, ok);
    }
  };
  const int64_t state_off = (crow * a.ho + j) * int64_t(V) * K;
  auto load_state = [&](T* dst, const void* src) {
    const T* sp = static_cast<const T*>(src) + state_off;
    for (int e = tid; e < V * (K / 8); e += 256) {
      const int r = e / (K / 8), col = (e % (K / 8)) * 8;
      cp16(dst + r * ldk + col, sp + r * K + col, true);
    }
  };
  auto row_of = [&](int e) { return m0 + g + 8 * (e / 2); };
  auto col_of = [&](int n0, int n, int e) { return n0 + 8 * n + 2 * c + e % 2; };
  auto add_rows = [&](float* dst, float x0, float x1) {
    x0 = row_sum(x0), x1 = row_sum(x1);
    if (c == 0) atomicAdd(dst + m0 + g, x0), atomicAdd(dst + m0 + g + 8, x1);
  };
  auto store_rows = [&](auto* dst, int width, int n0, auto& acc) {
    constexpr int N = sizeof(acc) / sizeof(acc[0]);
    constexpr bool kF32 = std::is_same_v<std::remove_pointer_t<decltype(dst)>, float>;
#pragma unroll
    for (int n = 0; n < N; ++n)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int r = m0 + g + 8 * h;
        if (r >= L) continue;
        auto* at = dst + ((t0 + r) * a.ho + j) * width + n0 + 8 * n + 2 * c;
        if constexpr (kF32) *reinterpret_cast<float2*>(at) = make_float2(acc[n][2 * h], acc[n][2 * h + 1]);
        else *reinterpret_cast<uint32_t*>(at) = pack2<T>(acc[n][2 * h], acc[n][2 * h + 1]);
      }
  };
  // A 16-row strip of the C x C accumulators (half hf of the columns) into a 16-bit tile.
  auto put_c = [&](T* dst, const float (&x)[4][4]) {
#pragma unroll
    for (int n = 0; n < 4; ++n)
#pragma unroll
      for (int h = 0; h < 2; ++h)
        *reinterpret_cast<uint32_t*>(dst + (m0 + g + 8 * h) * ldc + hf * 32 + 8 * n + 2 * c) =
            pack2<T>(x[n][2 * h], x[n][2 * h + 1]);
  };
  const int nk0 = hf * K / 2, nv0 = hf * V / 2, nc0 = hf * 32;

  // Stage 1: S's products and dO v'^T. S and dU first, so dW starts while dO and v' arrive.
  load_state(sts, p.f.states);
  load_rows(dvns, ldv, p.w.dvn, a.ho, j, V);
  cp_commit();
  load_rows(dos, ldv, a.d_o, a.ho, j, V);
  load_rows(vns, ldv, p.f.vn, a.ho, j, V);
  cp_commit();
  if (tid < C) {
    const bool ok = tid < L;
    gam[tid] = ok ? p.f.gam[(t0 + tid) * a.ho + j] : 0.f;
    bet[tid] = ok ? load_any(a.beta_type, a.beta, (t0 + tid) * a.ho + j) : 0.f;
    dgam[tid] = 0.f;
    dbet[tid] = 0.f;
  }
  cp_wait_but_one();
  __syncthreads();
  const float glast = gam[L - 1];
  const float* gl = &gam[0];
  {
    float dw[NK][4];
    zero(dw);
    warp_mma<T, NK, false, false, 2>(dw, dvns, ldv, sts, ldk, m0, nk0, 0, V);  // dVn S^T
#pragma unroll
    for (int n = 0; n < NK; ++n)
#pragma unroll
      for (int h = 0; h < 2; ++h)
        *reinterpret_cast<uint32_t*>(dws + (m0 + g + 8 * h) * ldk + nk0 + 8 * n + 2 * c) =
            pack2<T>(-dw[n][2 * h], -dw[n][2 * h + 1]);
  }
  // P (Aqk) at dO v'^T's fragment positions, loaded while dO and v' are still arriving; its row r holds
  // columns <= r only, the rest is never read.
  uint32_t pw[4][2];
  {
    const T* pg = static_cast<const T*>(p.f.aqk) + (t0 * a.ho + j) * C;
#pragma unroll
    for (int n = 0; n < 4; ++n)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int r = m0 + g + 8 * h, col = nc0 + 8 * n + 2 * c;
        pw[n][h] = r < L && col <= r ? *reinterpret_cast<const uint32_t*>(pg + r * a.ho * C + col) : 0u;
      }
  }
  cp_wait_all();
  __syncthreads();
  {
    float dp[4][4];
    zero(dp);
    warp_mma<T, 4, false, true, 2>(dp, dos, ldv, vns, ldv, m0, nc0, 0, V);  // dO v'^T
#pragma unroll
    for (int n = 0; n < 4; ++n)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int r = m0 + g + 8 * h, col = nc0 + 8 * n + 2 * c;
        const float2 pv = unpack2<T>(pw[n][h]);
        float d[2];
#pragma unroll
        for (int b = 0; b < 2; ++b) {
          const bool live = r < L && col + b <= r;
          d[b] = live ? a.scale * __expf(gl[r] - gl[col + b]) : 0.f;
          const float x = dp[n][2 * h + b];
          dp[n][2 * h + b] = live ? x * (b ? pv.y : pv.x) : 0.f;  // dP o P for the gates
          d[b] *= x;                                                // Dq
        }
        *reinterpret_cast<uint32_t*>(dss + r * ldc + col) = pack2<T>(d[0], d[1]);
      }
    add_rows_minus_cols_frag(dp, m0, nc0, dgam);
  }
  float dq[NK][4];
  zero(dq);
  warp_mma<T, NK, false, false, 2>(dq, dos, ldv, sts, ldk, m0, nk0, 0, V);  // dO S^T
#pragma unroll
  for (int n = 0; n < NK; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int r = row_of(e);
      dq[n][e] *= r < L ? a.scale * __expf(gl[r]) : 0.f;
    }
  {  // e^gL <S, dS'>: the state's own decay over the chunk; dS' from memory, so stage 2's load finds it in L2
    const T* dg = static_cast<const T*>(p.w.dstates) + state_off;
    float x = 0.f;
    for (int e = tid; e < V * (K / 8); e += 256) {
      const int r = e / (K / 8), col = (e % (K / 8)) * 8;
      x += dot8<T>(*reinterpret_cast<const uint4*>(sts + r * ldk + col),
                   *reinterpret_cast<const uint4*>(dg + r * K + col));
    }
    for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
    if (lane == 0) atomicAdd(&dgam[L - 1], __expf(glast) * x);
  }
  __syncthreads();  // S and dO are consumed

  // Stage 2: k, then dS' (into S's place) behind it. dq~ is finished first (its gate term reads q from
  // L2 or memory at the fragment positions; stage 3 loads q again) so dq and dk are never live together.
  load_rows(ks, ldk, p.f.k, a.h, hq, K);
  cp_commit();
  load_state(dsts, p.w.dstates);
  cp_commit();
  cp_wait_but_one();
  __syncthreads();
  {
    const T* qg = static_cast<const T*>(p.f.q);
    float xq[2] = {0.f, 0.f};
#pragma unroll
    for (int n = 0; n < NK; ++n)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int r = m0 + g + 8 * h, col = nk0 + 8 * n + 2 * c;
        if (r < L) {
          const float2 qv = unpack2<T>(*reinterpret_cast<const uint32_t*>(qg + ((t0 + r) * a.h + hq) * K + col));
          xq[h] += dq[n][2 * h] * qv.x + dq[n][2 * h + 1] * qv.y;
        }
      }
    add_rows(dgam, xq[0], xq[1]);
  }
  warp_mma<T, NK, false, false, 2>(dq, dss, ldc, ks, ldk, m0, nk0, 0, m0 + 16);  // Dq K (Dq lower)
  store_rows(static_cast<T*>(p.w.dqs), K, nk0, dq);
  cp_wait_all();
  __syncthreads();
  float dk[NK][4];
  zero(dk);
  warp_mma<T, NK, false, false, 2>(dk, vns, ldv, dsts, ldk, m0, nk0, 0, V);  // v' dS'^T
  {
    float xk[2] = {0.f, 0.f};
#pragma unroll
    for (int n = 0; n < NK; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int r = row_of(e), col = col_of(nk0, n, e);
        dk[n][e] *= r < L ? __expf(glast - gl[r]) : 0.f;
        xk[e / 2] += dk[n][e] * to_f(ks[r * ldk + col]);
      }
    add_rows(dgam, -xk[0], -xk[1]);
    float tk = xk[0] + xk[1];  // Kd's e^gL: the same terms, all rows, onto the last row
    for (int o = 16; o > 0; o >>= 1) tk += __shfl_xor_sync(0xffffffffu, tk, o);
    if (lane == 0) atomicAdd(&dgam[L - 1], tk);
  }
  __syncthreads();  // dS' and v' are consumed

  // Stage 3: Dq^T Q, then through T, W and U.
  load_rows(qs, ldk, p.f.q, a.h, hq, K);
  load_rows(vs, ldv, a.vv, a.hv, hvv, V);
  load_rows(ts, ldc, p.f.tmat, a.ho, j, C);
  cp_commit();
  cp_wait_all();
  __syncthreads();
  warp_mma<T, NK, true, false, 2>(dk, dss, ldc, qs, ldk, m0, nk0, m0, C);  // Dq^T Q
  __syncthreads();  // Dq and q are consumed
  {
    float g1[4][4], g2[4][4];
    zero(g1);
    zero(g2);
    warp_mma<T, 4, false, true, 2>(g1, dws, ldk, ks, ldk, m0, nc0, 0, K);   // dW K^T
    warp_mma<T, 4, false, true, 2>(g2, dvns, ldv, vs, ldv, m0, nc0, 0, V);  // dU V^T
#pragma unroll
    for (int n = 0; n < 4; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int r = row_of(e), col = col_of(nc0, n, e);
        g1[n][e] = col < r && r < L ? bet[col] * (__expf(gl[col]) * g1[n][e] + g2[n][e]) : 0.f;
      }
    put_c(dss, g1);  // G = dT, strictly lower
  }
  {
    float bk[NK][4];
    zero(bk);
    warp_mma<T, NK, true, false, 2>(bk, ts, ldc, dws, ldk, m0, nk0, m0, C);  // T^T dW (T lower)
    float x[2] = {0.f, 0.f};
#pragma unroll
    for (int n = 0; n < NK; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int r = row_of(e), col = col_of(nk0, n, e);
        const float eg = r < L ? __expf(gl[r]) : 0.f;
        x[e / 2] += eg * bk[n][e] * to_f(ks[r * ldk + col]);
        dk[n][e] += bet[r] * eg * bk[n][e];
      }
    add_rows(dbet, x[0], x[1]);
    add_rows(dgam, x[0] * bet[m0 + g], x[1] * bet[m0 + g + 8]);
  }
  {
    float bv[NV][4];
    zero(bv);
    warp_mma<T, NV, true, false, 2>(bv, ts, ldc, dvns, ldv, m0, nv0, m0, C);  // T^T dU
    float x[2] = {0.f, 0.f};
#pragma unroll
    for (int n = 0; n < NV; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int r = row_of(e), col = col_of(nv0, n, e);
        x[e / 2] += bv[n][e] * to_f(vs[r * ldv + col]);
        bv[n][e] *= bet[r];
      }
    add_rows(dbet, x[0], x[1]);
    if (dv_direct(a)) store_rows(static_cast<T*>(a.dv), V, nv0, bv);
    else store_rows(p.w.des, V, nv0, bv);
  }
  __syncthreads();  // G complete
  {
    float y[4][4];
    zero(y);
    warp_mma<T, 4, false, true, 2>(y, dss, ldc, ts, ldc, m0, nc0, 0, m0 + 16);  // G T^T (G lower)
    put_c(yss, y);
  }
  __syncthreads();  // Y complete, G consumed
  {
    float da[4][4], kk[4][4];
    zero(da);
    zero(kk);
    warp_mma<T, 4, true, false, 2>(da, ts, ldc, yss, ldc, m0, nc0, m0, C);  // T^T Y; dA = -that
    warp_mma<T, 4, false, true, 2>(kk, ks, ldk, ks, ldk, m0, nc0, 0, K);   // K K^T (fp32)
    float x[2] = {0.f, 0.f};
#pragma unroll
    for (int n = 0; n < 4; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int r = row_of(e), col = col_of(nc0, n, e);
        const bool live = col < r && r < L;
        const float ed = live ? -da[n][e] * __expf(gl[r] - gl[col]) : 0.f;  // dA o Gamma
        x[e / 2] += ed * kk[n][e];
        da[n][e] = bet[r] * ed;               // E = diag(beta) (dA o Gamma)
        kk[n][e] *= da[n][e];                 // dA o A
      }
    add_rows(dbet, x[0], x[1]);
    put_c(ess, da);
    add_rows_minus_cols_frag(kk, m0, nc0, dgam);
  }
  __syncthreads();
  warp_mma<T, NK, false, false, 2>(dk, ess, ldc, ks, ldk, m0, nk0, 0, m0 + 16);  // E K
  warp_mma<T, NK, true, false, 2>(dk, ess, ldc, ks, ldk, m0, nk0, m0, C);        // E^T K
  store_rows(static_cast<T*>(p.w.dks), K, nk0, dk);
  __syncthreads();
  if (warp == 0) write_gate_grads(a, t0, j, L, dgam, dbet);
}

constexpr size_t kMaxSmem = 227 * 1024;

// Two CTAs an SM need the largest carveout; the grid is flattened (chunk rows x HO, head fastest).
template <class T, int K, int V>
void launch_kv_v2(const Params& p, cudaStream_t st) {
  const size_t bytes = B2Layout<K, V>::bytes;
  cudaFuncSetAttribute(chunk_bwd_v2<T, K, V>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes));
  cudaFuncSetAttribute(chunk_bwd_v2<T, K, V>, cudaFuncAttributePreferredSharedMemoryCarveout, 100);
  chunk_bwd_v2<T, K, V><<<unsigned(p.f.bound * p.a.ho), 256, bytes, st>>>(p);
}
// The split's segment table has no row for an empty sequence, so no apply CTA writes its dh0 (dFinal, or
// zero). grid (N, HO), 256 threads.
__global__ void __launch_bounds__(256) empty_dinit(BwdArgs a) {
  pass_empty_state(a.cu, a.cu_int64, a.v, a.k, a.dfin_type, a.dfin, a.dfin_stride, a.dinit_type, a.dinit, a.dinit_stride);
}

template <class T, int K, int NS, int Mode = kBwdWhole>
void launch_state_bwd(const Params& p, int64_t ctas, int bv, cudaStream_t st) {
  const size_t bytes = NS * bstage_bytes(K, bv);
  cudaFuncSetAttribute(state_bwd<T, K, NS, Mode>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes));
  state_bwd<T, K, NS, Mode><<<unsigned(ctas), unsigned(bv / 16 * 32), bytes, st>>>(p);
}
// v3's three stages where they fit and cost no co-resident CTA: either every CTA has an SM to itself, or two
// stages already leave room for one CTA an SM only (K = 128, bv = 64: 139 KB).
bool deep_ring(const BwdArgs& a, size_t stage) {
  if (!a.v3 || 3 * stage > kMaxSmem) return false;
  return a.n * a.ho * (a.v / a.bv) <= a.grid || 2 * (2 * stage + 1024) > 228 * 1024;
}
// Returns a launch error (the combine's launcher reads, and so clears, the error state) or nullptr.
template <class T, int K>
const char* launch_k(const Params& p, const FwdArgs& f, void* workspace, cudaStream_t st) {
  const BwdArgs& a = p.a;
  if (p.f.split) {  // two stages: 158 KB at K = V = 128 with the split's 128-column slices
    const int bv = p.f.seg_bv;
    launch_state_bwd<T, K, 2, kBwdSummary>(p, p.f.seg_bound * a.ho * ((a.v + K) / bv), bv, st);
    if (const char* e = launch_split_combine_reverse(f, workspace, st)) return e;
    launch_state_bwd<T, K, 2, kBwdApply>(p, p.f.seg_bound * a.ho * (a.v / bv), bv, st);
    if (a.dinit) empty_dinit<<<dim3(unsigned(a.n), unsigned(a.ho)), 256, 0, st>>>(a);
  } else if (deep_ring(a, bstage_bytes(K, a.bv))) {
    launch_state_bwd<T, K, 3>(p, a.n * a.ho * (a.v / a.bv), a.bv, st);
  } else {
    launch_state_bwd<T, K, 2>(p, a.n * a.ho * (a.v / a.bv), a.bv, st);
  }
  if (p.f.bound > 0) {
    if (a.v == 64) launch_kv_v2<T, K, 64>(p, st);
    else launch_kv_v2<T, K, 128>(p, st);
  }
  return nullptr;
}

template <class T>
const char* launch_typed(const BwdArgs& a, void* workspace, cudaStream_t st) {
  const FwdArgs f = forward_args(a);
  if (const char* e = launch_forward(f, workspace, st)) return e;
  const Params p{a, forward_saved(f, workspace), carve(a, static_cast<char*>(workspace))};
  if (const char* e = a.k == 64 ? launch_k<T, 64>(p, f, workspace, st) : launch_k<T, 128>(p, f, workspace, st)) return e;
  if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return cudaGetErrorString(e);
  return launch_backward_post(a, p.w.dqs, p.w.dks, dv_direct(a) ? nullptr : p.w.des, true, st);
}

// Two CTAs an SM: 228 KB of shared memory, 1 KB of it reserved per CTA.
static_assert(2 * (B2Layout<128, 128>::bytes + 1024) <= 228 * 1024, "chunk_bwd_v2 at K = V = 128: two CTAs an SM");
static_assert(2 * bstage_bytes(128, 64) <= kMaxSmem, "state_bwd at K = 128, bv = 64 must fit one SM");
static_assert(2 * bstage_bytes(128, 128) <= kMaxSmem, "the split state_bwd at K = V = 128, bv = 128 must fit one SM");

}  // namespace

bool chunked_backward_supported(int64_t k, int64_t v) { return (k == 64 || k == 128) && (v == 64 || v == 128); }

int choose_bv_backward(const BwdArgs& a, int sm_count) { return widest_state_slice(a.v, a.n * a.ho, sm_count); }

int64_t chunked_backward_workspace_bytes(const BwdArgs& a) { return int64_t(carve(a, nullptr).bytes); }

const char* launch_backward_chunked(const BwdArgs& a, void* workspace, void* stream) {
  const void* ptrs[] = {a.q, a.kk, a.vv, a.d_o, workspace};
  for (const void* ptr : ptrs)
    if (reinterpret_cast<uintptr_t>(ptr) % 16 != 0) return "q, k, v, dO and the workspace must be 16-byte aligned";
  if (dv_direct(a) && reinterpret_cast<uintptr_t>(a.dv) % 4 != 0) return "dv must be 4-byte aligned";
  if (a.n <= 0 || a.ho <= 0) return nullptr;
  if ((a.t / C + a.n) * a.ho > int64_t(0x7fffffff)) return "chunk_bwd_v2: more than 2^31 - 1 (chunk, head) CTAs";
  auto st = static_cast<cudaStream_t>(stream);
  return a.io == DataType::HALF ? launch_typed<__half>(a, workspace, st) : launch_typed<__nv_bfloat16>(a, workspace, st);
}

}  // namespace opendnn::cuda::gdn
