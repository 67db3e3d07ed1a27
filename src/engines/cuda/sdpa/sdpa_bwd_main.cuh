// SPDX-License-Identifier: Apache-2.0
// The dK/dV and dQ kernels of the SDPA backward, templated on element type and head dims; each
// sdpa_bwd_d<N>.cu instantiates one head-dim pair. Tensor-core work is warp-level
// mma.sync.m16n8k16 (fp32 accumulate) on tiles staged in shared memory by cp.async.
//
// Per warp 16 rows of the CTA's resident tile. Output columns are produced in chunks of DC
// (template) so the fp32 accumulators of wide heads fit in registers; a head wider than DC
// recomputes S and dP once per chunk.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include <cute/arch/copy_sm75.hpp>
#include <cute/arch/mma_sm80.hpp>

#include "engines/cuda/sdpa/sdpa_bwd_kernels.h"

namespace opendnn::cuda::sdpa::bwd {

constexpr int kThreads = 128;  // 4 warps, 16 rows each
constexpr int kPad = 8;        // elements of padding per shared-memory row (bank-conflict-free fragments)
constexpr float kLog2e = 1.4426950408889634f;
// Fragments through ldmatrix (CuTe's SM75 LDSM wrappers); false falls back to plain 16/32-bit
// shared-memory loads of the same fragments (slower, kept as a check of the ldmatrix lane maps).
constexpr bool kLdsm = true;

// The m16n8k16 tensor-core step (CuTe's SM80 MMA atoms) and fp32 packing for one element type.
template <class T>
struct Elem {
  static constexpr bool kHalf = std::is_same_v<T, __half>;
  using Atom = std::conditional_t<kHalf, cute::SM80_16x8x16_F32F16F16F32_TN, cute::SM80_16x8x16_F32BF16BF16F32_TN>;
  static __device__ __forceinline__ void mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    Atom::fma(c[0], c[1], c[2], c[3], a[0], a[1], a[2], a[3], b0, b1, c[0], c[1], c[2], c[3]);
  }
  static __device__ __forceinline__ uint32_t pack(float lo, float hi) {
    uint32_t r;
    if constexpr (kHalf) {
      __half2 v = __floats2half2_rn(lo, hi);
      r = *reinterpret_cast<uint32_t*>(&v);
    } else {
      __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
      r = *reinterpret_cast<uint32_t*>(&v);
    }
    return r;
  }
};

// Two 16-bit elements from different rows (a transposed B fragment) packed low-first.
template <class T>
__device__ __forceinline__ uint32_t pair_of(const T* lo, const T* hi) {
  return uint32_t(*reinterpret_cast<const uint16_t*>(lo)) | (uint32_t(*reinterpret_cast<const uint16_t*>(hi)) << 16);
}
template <class T>
__device__ __forceinline__ uint32_t word_at(const T* p) {
  return *reinterpret_cast<const uint32_t*>(p);
}

// Stages rows [row0, row0+ROWS) of one head (D elements each, row stride `rs`) into shared memory
// with row pitch D+kPad. Rows at or past `valid` are zero-filled. 16-byte cp.async where the
// source is aligned (the common case), element copies otherwise (odd ragged offsets or strides).
template <class T, int ROWS, int D>
__device__ __forceinline__ void stage_rows(T* dst, const T* src, int64_t rs, int64_t row0, int64_t valid) {
  constexpr int kChunks = D / 8;
  for (int idx = int(threadIdx.x); idx < ROWS * kChunks; idx += kThreads) {
    const int r = idx / kChunks, ch = idx % kChunks;
    T* d = dst + r * (D + kPad) + ch * 8;
    if (row0 + r >= valid) {
      *reinterpret_cast<uint4*>(d) = make_uint4(0, 0, 0, 0);
      continue;
    }
    const T* s = src + (row0 + r) * rs + ch * 8;
    if ((reinterpret_cast<uintptr_t>(s) & 15) == 0) {
      const uint32_t saddr = uint32_t(__cvta_generic_to_shared(d));
      asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(saddr), "l"(s));
    } else {
      for (int e = 0; e < 8; ++e) d[e] = s[e];
    }
  }
}
__device__ __forceinline__ void staged_commit() { asm volatile("cp.async.commit_group;\n" ::); }
// Waits until at most N committed groups of this thread are in flight, then for the whole CTA.
template <int N>
__device__ __forceinline__ void staged_wait_for() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
  __syncthreads();
}
__device__ __forceinline__ void staged_wait() {
  staged_commit();
  staged_wait_for<0>();
}

// The attention mask of the reference engine, for one batch's lengths.
struct Mask {
  int64_t sq, skv, off;
  bool has_left, has_right;
  int64_t left, right;
  __device__ __forceinline__ bool visible(int64_t i, int64_t j) const {
    if (i >= sq || j >= skv) return false;
    const int64_t ia = i + off;
    if (has_right && j > ia + right) return false;
    if (has_left && j <= ia - left) return false;
    return true;
  }
  // True when every (i, j) of [i0, i1) x [j0, j1) is visible: the tile needs no per-element test.
  __device__ __forceinline__ bool covers(int64_t i0, int64_t i1, int64_t j0, int64_t j1) const {
    if (i1 > sq || j1 > skv) return false;
    if (has_right && j1 - 1 > i0 + off + right) return false;
    if (has_left && j0 <= i1 - 1 + off - left) return false;
    return true;
  }
};
__device__ __forceinline__ Mask mask_of(const Problem& p, int64_t b) {
  Mask m;
  m.sq = p.len_q(b);
  m.skv = p.len_kv(b);
  m.off = p.bottom_right ? m.skv - m.sq : 0;
  m.has_left = p.has_left;
  m.has_right = p.has_right;
  m.left = p.left;
  m.right = p.right;
  return m;
}
__device__ __forceinline__ float scale_of(const Problem& p) { return p.scale_ptr ? *p.scale_ptr : p.scale; }

template <bool kTrans>
__device__ __forceinline__ void ldsm(uint32_t (&r)[4], const void* smem) {
  const auto& src = *static_cast<const cute::uint128_t*>(smem);
  if constexpr (kTrans)
    cute::SM75_U16x8_LDSM_T::copy(src, r[0], r[1], r[2], r[3]);
  else
    cute::SM75_U32x4_LDSM_N::copy(src, r[0], r[1], r[2], r[3]);
}

// acc[16 x 8*NB] += A[16 rows of sa, K cols] * B^T where B rows are sb's rows nb*8.. (both row-major,
// pitch PA/PB): the S = Q K^T and dP = dO V^T shape.
template <class T, int K, int NB, int PA, int PB>
__device__ __forceinline__ void mma_abt(float (&acc)[NB][4], const T* sa, const T* sb, int g, int t) {
  static_assert(NB % 2 == 0, "B fragments are loaded two n-blocks at a time");
  const int lane = g * 4 + t;
#pragma unroll
  for (int kk = 0; kk < K / 16; ++kk) {
    uint32_t a[4];
    if constexpr (kLdsm) {
      // Lanes 0-15 address rows 0-15 at column 0 of the k-step, lanes 16-31 the same rows at column 8.
      ldsm<false>(a, sa + (lane & 15) * PA + kk * 16 + (lane >> 4) * 8);
    } else {
      const T* ar = sa + g * PA + kk * 16 + 2 * t;
      a[0] = word_at(ar);
      a[1] = word_at(ar + 8 * PA);
      a[2] = word_at(ar + 8);
      a[3] = word_at(ar + 8 * PA + 8);
    }
#pragma unroll
    for (int nb = 0; nb < NB; nb += 2) {
      uint32_t b[4];
      if constexpr (kLdsm) {
        // Matrix q = lane/8: n-block nb + q/2, k half q%2.
        const int q = lane >> 3;
        ldsm<false>(b, sb + (nb * 8 + (q >> 1) * 8 + (lane & 7)) * PB + kk * 16 + (q & 1) * 8);
      } else {
        const T* br = sb + (nb * 8 + g) * PB + kk * 16 + 2 * t;
        b[0] = word_at(br);
        b[1] = word_at(br + 8);
        b[2] = word_at(br + 8 * PB);
        b[3] = word_at(br + 8 * PB + 8);
      }
      Elem<T>::mma(acc[nb], a, b[0], b[1]);
      Elem<T>::mma(acc[nb + 1], a, b[2], b[3]);
    }
  }
}

// Where fragment element (nb, e) of a warp's S/dP tile sits: its query i, key j, and the query
// row's log2-scaled LSE and D.
struct Spot {
  int64_t i, j;
  float lse2, delta;
};

// One warp's S = As Bs^T and dP = Ad Bd^T over its 16 rows, then in place P = exp(S*scale - LSE) on
// visible elements (0 elsewhere) and dS = P (dP - D). `spot(nb, e)` locates each element.
template <class T, int DQK, int DV, int NB, class SpotFn>
__device__ __forceinline__ void probs_and_grads(float (&s)[NB][4], float (&dp)[NB][4], const T* as, const T* bs,
                                                const T* ad, const T* bd, const Mask& m, bool full, float sl2,
                                                int g, int t, SpotFn spot) {
  mma_abt<T, DQK, NB, DQK + kPad, DQK + kPad>(s, as, bs, g, t);
  mma_abt<T, DV, NB, DV + kPad, DV + kPad>(dp, ad, bd, g, t);
#pragma unroll
  for (int nb = 0; nb < NB; ++nb)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const Spot w = spot(nb, e);
      const float pv = full || m.visible(w.i, w.j) ? exp2f(s[nb][e] * sl2 - w.lse2) : 0.f;
      s[nb][e] = pv;
      dp[nb][e] = pv * (dp[nb][e] - w.delta);
    }
}

// acc[16 x 8*NC] += X[16 x 8*NX] (C-fragments in registers) * B[8*NX rows of sb, columns col0..]
// (row-major, pitch PB): the dV = P^T dO, dK = dS^T Q, dQ = dS K shape. Column pairs of n-blocks
// at or past `dmax` are skipped (dmax - col0 is a multiple of 16 for every instantiated chunk).
template <class T, int NX, int NC, int PB>
__device__ __forceinline__ void mma_xb(float (&acc)[NC][4], const float (&x)[NX][4], const T* sb, int col0, int dmax,
                                       int g, int t) {
  static_assert(NC % 2 == 0, "B fragments are loaded two n-blocks at a time");
  const int lane = g * 4 + t;
#pragma unroll
  for (int kq = 0; kq < NX / 2; ++kq) {
    uint32_t a[4];
    a[0] = Elem<T>::pack(x[2 * kq][0], x[2 * kq][1]);
    a[1] = Elem<T>::pack(x[2 * kq][2], x[2 * kq][3]);
    a[2] = Elem<T>::pack(x[2 * kq + 1][0], x[2 * kq + 1][1]);
    a[3] = Elem<T>::pack(x[2 * kq + 1][2], x[2 * kq + 1][3]);
#pragma unroll
    for (int nc = 0; nc < NC; nc += 2) {
      if (col0 + nc * 8 >= dmax) continue;
      uint32_t b[4];
      if constexpr (kLdsm) {
        // Transposed: matrix q = lane/8 holds k rows kq*16 + (q%2)*8.., columns of n-block nc + q/2.
        const int q = lane >> 3;
        ldsm<true>(b, sb + (kq * 16 + (q & 1) * 8 + (lane & 7)) * PB + col0 + (nc + (q >> 1)) * 8);
      } else {
        const T* r0 = sb + (kq * 16 + 2 * t) * PB + col0 + nc * 8 + g;
        b[0] = pair_of(r0, r0 + PB);
        b[1] = pair_of(r0 + 8 * PB, r0 + 9 * PB);
        b[2] = pair_of(r0 + 8, r0 + PB + 8);
        b[3] = pair_of(r0 + 8 * PB + 8, r0 + 9 * PB + 8);
      }
      Elem<T>::mma(acc[nc], a, b[0], b[1]);
      Elem<T>::mma(acc[nc + 1], a, b[2], b[3]);
    }
  }
}

// Writes a warp's [16 x 8*NC] fp32 accumulator (rows row0+g, row0+g+8 of one head) times `mul`.
template <class T, int NC>
__device__ __forceinline__ void store_rows(T* base, int64_t rs, const float (&acc)[NC][4], int64_t row0, int64_t rows,
                                           int col0, int dmax, float mul, int g, int t) {
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int64_t r = row0 + g + 8 * half;
    if (r >= rows) continue;
    T* dst = base + r * rs;
#pragma unroll
    for (int nc = 0; nc < NC; ++nc) {
      const int col = col0 + nc * 8 + 2 * t;
      if (col >= dmax) continue;
      // col is even and rows are 4-byte aligned when the stride is even: one 32-bit store.
      const uint32_t v = Elem<T>::pack(acc[nc][2 * half] * mul, acc[nc][2 * half + 1] * mul);
      if ((reinterpret_cast<uintptr_t>(dst + col) & 3) == 0) {
        *reinterpret_cast<uint32_t*>(dst + col) = v;
      } else {
        const uint16_t* h = reinterpret_cast<const uint16_t*>(&v);
        reinterpret_cast<uint16_t*>(dst)[col] = h[0];
        reinterpret_cast<uint16_t*>(dst)[col + 1] = h[1];
      }
    }
  }
}

template <int DQK, int DV>
struct DkDvShape {
  static constexpr int BN = 64, BM = 32, PK = DQK + kPad, PV = DV + kPad;
  static constexpr size_t smem_bytes(size_t elem) {
    return (size_t(BN) * PK + size_t(BN) * PV + 2 * (size_t(BM) * PK + size_t(BM) * PV)) * elem + 4 * BM * sizeof(float);
  }
};

// One CTA per (KV tile, KV head, batch). dK = scale * sum_i dS_ij Q_i and dV = sum_i P_ij dO_i over
// every query head of the GQA group (in head order) and every query tile (in row order).
template <class T, int DQK, int DV, int DC>
__global__ void __launch_bounds__(kThreads) dkdv_kernel(const BwdProblem a, const float* __restrict__ delta) {
  using S = DkDvShape<DQK, DV>;
  constexpr int BN = S::BN, BM = S::BM, PK = S::PK, PV = S::PV, NB = BM / 8, NC = DC / 8;
  constexpr int kDmax = DQK > DV ? DQK : DV, kPasses = (kDmax + DC - 1) / DC;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  T* sK = reinterpret_cast<T*>(smem_raw);
  T* sV = sK + BN * PK;
  // Two stages of (Q, dO, log2 LSE, D) tiles: the next query tile loads while this one computes.
  T* const sQ0 = sV + BN * PV;
  T* const sdO0 = sQ0 + 2 * BM * PK;
  float* const sL0 = reinterpret_cast<float*>(sdO0 + 2 * BM * PV);
  float* const sD0 = sL0 + 2 * BM;

  const Problem& p = a.p;
  const int64_t b = blockIdx.z, hk = blockIdx.y, n0 = int64_t(blockIdx.x) * BN;
  const int warp = int(threadIdx.x) / 32, lane = int(threadIdx.x) % 32, g = lane / 4, t = lane % 4;
  const Mask m = mask_of(p, b);
  const float scale = scale_of(p), sl2 = scale * kLog2e;
  const int64_t group = p.hq / p.hk;

  // Query rows that can see any key of this tile.
  int64_t lo = m.has_right ? n0 - m.off - m.right : 0;
  int64_t hi = m.has_left ? n0 + BN - 1 - m.off + m.left : m.sq;
  lo = lo < 0 ? 0 : lo;
  hi = hi > m.sq ? m.sq : hi;
  const int64_t first = (lo / BM) * BM;
  if (n0 >= m.skv) hi = first;  // a tile past the keys: no work, zeros stored

  const T* kbase = static_cast<const T*>(p.k.ptr) + p.base(p.k, b, false) + hk * p.k.stride[1];
  const T* vbase = static_cast<const T*>(p.v.ptr) + p.base(p.v, b, false) + hk * p.v.stride[1];
  stage_rows<T, BN, DQK>(sK, kbase, p.k.stride[2], n0, m.skv);
  stage_rows<T, BN, DV>(sV, vbase, p.v.stride[2], n0, m.skv);
  staged_wait();

  const T* sKw = sK + warp * 16 * PK;
  const T* sVw = sV + warp * 16 * PV;
  const int64_t jrow = n0 + warp * 16 + g;  // this thread's key rows: jrow, jrow + 8
  const int64_t ntiles = hi > first ? (hi - first + BM - 1) / BM : 0, total = group * ntiles;
  // Issues the cp.async loads of work item idx into stage buf (one commit group).
  auto stage_q = [&](int64_t idx, int buf) {
    const int64_t h = hk * group + idx / ntiles, m0 = first + (idx % ntiles) * BM;
    const T* qbase = static_cast<const T*>(p.q.ptr) + p.base(p.q, b, true) + h * p.q.stride[1];
    const T* obase = static_cast<const T*>(a.dout.ptr) + p.base(a.dout, b, true) + h * a.dout.stride[1];
    stage_rows<T, BM, DQK>(sQ0 + buf * BM * PK, qbase, p.q.stride[2], m0, m.sq);
    stage_rows<T, BM, DV>(sdO0 + buf * BM * PV, obase, a.dout.stride[2], m0, m.sq);
    if (threadIdx.x < BM) {
      const int64_t i = m0 + threadIdx.x;
      const float* lbase = p.lse + p.lse_base(b) + h * p.lse_stride[1];
      sL0[buf * BM + threadIdx.x] = i < m.sq ? lbase[i * p.lse_stride[2]] * kLog2e : 0.f;
      sD0[buf * BM + threadIdx.x] = i < m.sq ? delta[(b * p.hq + h) * p.sq + i] : 0.f;
    }
    staged_commit();
  };

  for (int pass = 0; pass < kPasses; ++pass) {
    const int col0 = pass * DC;
    float dk[NC][4] = {}, dv[NC][4] = {};
    // Work items: (query head of the group, query tile), heads outer, both in increasing order.
    if (total > 0) stage_q(0, 0);
    for (int64_t idx = 0; idx < total; ++idx) {
      const int buf = int(idx & 1);
      if (idx + 1 < total) {
        stage_q(idx + 1, buf ^ 1);
        staged_wait_for<1>();
      } else {
        staged_wait_for<0>();
      }
      const int64_t m0 = first + (idx % ntiles) * BM;
      const T* sQ = sQ0 + buf * BM * PK;
      const T* sdO = sdO0 + buf * BM * PV;
      const float* sL = sL0 + buf * BM;
      const float* sD = sD0 + buf * BM;
      float s[NB][4] = {}, dp[NB][4] = {};
      const bool full = m.covers(m0, m0 + BM, n0, n0 + BN);
      probs_and_grads<T, DQK, DV, NB>(s, dp, sKw, sQ, sVw, sdO, m, full, sl2, g, t, [&](int nb, int e) {
        const int c = nb * 8 + 2 * t + (e & 1);
        return Spot{m0 + c, jrow + (e >= 2 ? 8 : 0), sL[c], sD[c]};
      });
      if (col0 < DV) mma_xb<T, NB, NC, PV>(dv, s, sdO, col0, DV, g, t);
      if (col0 < DQK) mma_xb<T, NB, NC, PK>(dk, dp, sQ, col0, DQK, g, t);
      __syncthreads();  // every warp is done with this stage before it is loaded again
    }
    // Padded layouts get zeros on key rows past the sequence; packed ones leave them alone.
    const bool packed = p.cu_kv.ptr != nullptr;
    const int64_t krows = packed || a.dk.ragged.ptr ? m.skv : p.skv;
    const int64_t vrows = packed || a.dv.ragged.ptr ? m.skv : p.skv;
    T* dkb = static_cast<T*>(a.dk.ptr) + p.base(a.dk, b, false) + hk * a.dk.stride[1];
    T* dvb = static_cast<T*>(a.dv.ptr) + p.base(a.dv, b, false) + hk * a.dv.stride[1];
    if (col0 < DQK) store_rows<T, NC>(dkb, a.dk.stride[2], dk, n0 + warp * 16, krows, col0, DQK, scale, g, t);
    if (col0 < DV) store_rows<T, NC>(dvb, a.dv.stride[2], dv, n0 + warp * 16, vrows, col0, DV, 1.f, g, t);
  }
}

template <int DQK, int DV>
struct DqShape {
  static constexpr int BM = 64, BN = 32, PK = DQK + kPad, PV = DV + kPad;
  static constexpr size_t smem_bytes(size_t elem) {
    return (size_t(BM) * PK + size_t(BM) * PV + 2 * (size_t(BN) * PK + size_t(BN) * PV)) * elem;
  }
};

// One CTA per (query tile, query head, batch): dQ = scale * sum_j dS_ij K_j over key tiles in order.
template <class T, int DQK, int DV, int DC>
__global__ void __launch_bounds__(kThreads) dq_kernel(const BwdProblem a, const float* __restrict__ delta) {
  using S = DqShape<DQK, DV>;
  constexpr int BM = S::BM, BN = S::BN, PK = S::PK, PV = S::PV, NB = BN / 8, NC = DC / 8;
  constexpr int kPasses = (DQK + DC - 1) / DC;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  T* sQ = reinterpret_cast<T*>(smem_raw);
  T* sdO = sQ + BM * PK;
  // Two stages of (K, V) tiles: the next key tile loads while this one computes.
  T* const sK0 = sdO + BM * PV;
  T* const sV0 = sK0 + 2 * BN * PK;

  const Problem& p = a.p;
  const int64_t b = blockIdx.z, h = blockIdx.y, m0 = int64_t(blockIdx.x) * BM;
  const int64_t hk = h / (p.hq / p.hk), hv = h / (p.hq / p.hv);
  const int warp = int(threadIdx.x) / 32, lane = int(threadIdx.x) % 32, g = lane / 4, t = lane % 4;
  const Mask m = mask_of(p, b);
  const float scale = scale_of(p), sl2 = scale * kLog2e;

  // Keys any row of this tile can see.
  int64_t lo = m.has_left ? m0 + m.off - m.left + 1 : 0;
  int64_t hi = m.has_right ? m0 + BM + m.off + m.right : m.skv;
  lo = lo < 0 ? 0 : lo;
  hi = hi > m.skv ? m.skv : hi;
  const int64_t first = (lo / BN) * BN;
  if (m0 >= m.sq) hi = first;  // a tile past the queries: no work, zeros stored

  const T* qbase = static_cast<const T*>(p.q.ptr) + p.base(p.q, b, true) + h * p.q.stride[1];
  const T* obase = static_cast<const T*>(a.dout.ptr) + p.base(a.dout, b, true) + h * a.dout.stride[1];
  const T* kbase = static_cast<const T*>(p.k.ptr) + p.base(p.k, b, false) + hk * p.k.stride[1];
  const T* vbase = static_cast<const T*>(p.v.ptr) + p.base(p.v, b, false) + hv * p.v.stride[1];
  stage_rows<T, BM, DQK>(sQ, qbase, p.q.stride[2], m0, m.sq);
  stage_rows<T, BM, DV>(sdO, obase, a.dout.stride[2], m0, m.sq);
  staged_wait();

  const int64_t i0 = m0 + warp * 16 + g;  // this thread's query rows: i0, i0 + 8
  const float* lbase = p.lse + p.lse_base(b) + h * p.lse_stride[1];
  const float* dbase = delta + (b * p.hq + h) * p.sq;
  float lse[2], dd[2];
  for (int r = 0; r < 2; ++r) {
    const int64_t i = i0 + 8 * r;
    lse[r] = i < m.sq ? lbase[i * p.lse_stride[2]] * kLog2e : 0.f;
    dd[r] = i < m.sq ? dbase[i] : 0.f;
  }
  const T* sQw = sQ + warp * 16 * PK;
  const T* sdOw = sdO + warp * 16 * PV;
  const int64_t total = hi > first ? (hi - first + BN - 1) / BN : 0;
  // Issues the cp.async loads of key tile idx into stage buf (one commit group).
  auto stage_kv = [&](int64_t idx, int buf) {
    const int64_t n0 = first + idx * BN;
    stage_rows<T, BN, DQK>(sK0 + buf * BN * PK, kbase, p.k.stride[2], n0, m.skv);
    stage_rows<T, BN, DV>(sV0 + buf * BN * PV, vbase, p.v.stride[2], n0, m.skv);
    staged_commit();
  };

  for (int pass = 0; pass < kPasses; ++pass) {
    const int col0 = pass * DC;
    float dq[NC][4] = {};
    if (total > 0) stage_kv(0, 0);
    for (int64_t idx = 0; idx < total; ++idx) {
      const int buf = int(idx & 1);
      if (idx + 1 < total) {
        stage_kv(idx + 1, buf ^ 1);
        staged_wait_for<1>();
      } else {
        staged_wait_for<0>();
      }
      const int64_t n0 = first + idx * BN;
      const T* sK = sK0 + buf * BN * PK;
      const T* sV = sV0 + buf * BN * PV;
      float s[NB][4] = {}, dp[NB][4] = {};
      const bool full = m.covers(m0, m0 + BM, n0, n0 + BN);
      probs_and_grads<T, DQK, DV, NB>(s, dp, sQw, sK, sdOw, sV, m, full, sl2, g, t, [&](int nb, int e) {
        const int r = e >> 1;
        return Spot{i0 + 8 * r, n0 + nb * 8 + 2 * t + (e & 1), lse[r], dd[r]};
      });
      mma_xb<T, NB, NC, PK>(dq, dp, sK, col0, DQK, g, t);
      __syncthreads();  // every warp is done with this stage before it is loaded again
    }
    const bool packed = p.cu_q.ptr != nullptr || a.dq.ragged.ptr != nullptr;
    T* dqb = static_cast<T*>(a.dq.ptr) + p.base(a.dq, b, true) + h * a.dq.stride[1];
    store_rows<T, NC>(dqb, a.dq.stride[2], dq, m0 + warp * 16, packed ? m.sq : p.sq, col0, DQK, scale, g, t);
  }
}

inline const char* err(cudaError_t e) { return e == cudaSuccess ? nullptr : cudaGetErrorString(e); }

template <class T, int DQK, int DV, int DC_KV, int DC_Q>
const char* launch_main(const BwdProblem& a, const float* delta, cudaStream_t st) {
  const Problem& p = a.p;
  using KV = DkDvShape<DQK, DV>;
  using Q = DqShape<DQK, DV>;
  const size_t skv = KV::smem_bytes(sizeof(T)), sq = Q::smem_bytes(sizeof(T));
  // Once per instantiation: opt in to more than 48 KiB of dynamic shared memory.
  static const cudaError_t attr = [&] {
    cudaError_t e = cudaFuncSetAttribute(dkdv_kernel<T, DQK, DV, DC_KV>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(skv));
    if (e == cudaSuccess)
      e = cudaFuncSetAttribute(dq_kernel<T, DQK, DV, DC_Q>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(sq));
    return e;
  }();
  if (attr != cudaSuccess) return cudaGetErrorString(attr);
  if (p.b == 0 || p.hq == 0) return nullptr;
  if (p.skv > 0) {
    dim3 grid(unsigned((p.skv + KV::BN - 1) / KV::BN), unsigned(p.hk), unsigned(p.b));
    dkdv_kernel<T, DQK, DV, DC_KV><<<grid, kThreads, skv, st>>>(a, delta);
    if (const char* e = err(cudaGetLastError())) return e;
  }
  if (p.sq > 0) {
    dim3 grid(unsigned((p.sq + Q::BM - 1) / Q::BM), unsigned(p.hq), unsigned(p.b));
    dq_kernel<T, DQK, DV, DC_Q><<<grid, kThreads, sq, st>>>(a, delta);
    if (const char* e = err(cudaGetLastError())) return e;
  }
  return nullptr;
}

template <int DQK, int DV, int DC_KV, int DC_Q>
const char* launch_main_any(const BwdProblem& a, const float* delta, void* stream) {
  cudaStream_t st = static_cast<cudaStream_t>(stream);
  return a.p.fp16 ? launch_main<__half, DQK, DV, DC_KV, DC_Q>(a, delta, st)
                  : launch_main<__nv_bfloat16, DQK, DV, DC_KV, DC_Q>(a, delta, st);
}

}  // namespace opendnn::cuda::sdpa::bwd
