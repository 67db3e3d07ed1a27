// SPDX-License-Identifier: Apache-2.0
// SDPA forward for sm_90a: one CTA per (128 query rows, query head, batch), two consumer
// warpgroups of 64 rows each. Per key/value tile: S = Q K^T by wgmma (SS) into fp32 registers,
// online softmax in registers (exp2 with the scale and log2(e) folded into one multiplier),
// P converted to 16 bits in registers and O += P V by wgmma (RS): the fp32 accumulator of a
// 64xN wgmma holds its elements in the order the A-register operand of the next wgmma expects
// (checked on the host for every tile shape used here), so no shuffle is needed.
// Included only by the per-head-dim translation units sdpa_fwd_d*.cu (one instantiation each).
//
// This version favours being right over being fast: K/V tiles are loaded by all threads with
// 16-byte cp.async (zero-filled past the sequence) into a 2-stage ring, the next tile in flight
// while the current one is computed; no producer warp or TMA yet. Unaligned sequences (a ragged
// offset that is not a multiple of 8 elements) fall back to plain loads.
#pragma once

#include <cuda_runtime.h>

#include <cute/tensor.hpp>
#include <cute/arch/copy_sm80.hpp>
#include <cute/atom/mma_traits_sm90_gmma.hpp>
#include <cutlass/arch/barrier.h>
#include <cutlass/numeric_types.h>

#include "engines/cuda/sdpa/sdpa_common.h"
#include "engines/cuda/sdpa/sdpa_fwd.h"

namespace opendnn::cuda::sdpa {

// The two wgmma shapes every attention kernel here uses, both over two consumer warpgroups (128 rows):
// C[64 x N] per warpgroup += A · B with both operands in shared memory, K-major (S = Q K^T, dP = dO V^T);
// and with A in registers, B MN-major (O += P V, dK += dS^T Q).
template <class T, class N, class K>
using WgmmaSS = decltype(cute::make_tiled_mma(cute::GMMA::ss_op_selector<T, T, float, cute::Shape<cute::_64, N, K>>(),
                                              cute::Layout<cute::Shape<cute::_2, cute::_1, cute::_1>>{}));
template <class T, class N, class K>
using WgmmaRS = decltype(cute::make_tiled_mma(
    cute::GMMA::rs_op_selector<T, T, float, cute::Shape<cute::_64, N, K>, cute::GMMA::Major::K, cute::GMMA::Major::MN>(),
    cute::Layout<cute::Shape<cute::_2, cute::_1, cute::_1>>{}));

template <class T, int kD, int kDv, int kBN>
struct FwdConfig {
  static constexpr int kBM = 128;
  static constexpr int kThreads = 256;
  using BM = cute::Int<kBM>;
  using BN = cute::Int<kBN>;
  using D = cute::Int<kD>;
  using Dv = cute::Int<kDv>;
  // Operands of S = Q K^T (both K-major) and O = P V (P K-major, V with d contiguous: MN-major).
  using SmemQ = decltype(cute::tile_to_shape(cute::GMMA::Layout_K_SW128_Atom<T>{}, cute::Shape<BM, D>{}));
  // K and V: two stages (last mode).
  using SmemK = decltype(cute::tile_to_shape(cute::GMMA::Layout_K_SW128_Atom<T>{}, cute::Shape<BN, D, cute::_2>{}));
  using SmemVt = decltype(cute::tile_to_shape(cute::GMMA::Layout_MN_SW128_Atom<T>{}, cute::Shape<Dv, BN, cute::_2>{}));
  using MmaS = WgmmaSS<T, BN, D>;
  using MmaO = WgmmaRS<T, Dv, BN>;

  struct Smem {
    alignas(1024) T q[cute::cosize_v<SmemQ>];
    alignas(1024) T k[cute::cosize_v<SmemK>];
    alignas(1024) T v[cute::cosize_v<SmemVt>];
  };
  // The dynamic shared memory base is only 16-byte aligned; the swizzled layouts need 1024.
  static constexpr int kSmemBytes = int(sizeof(Smem)) + 1024;
  static_assert(kSmemBytes <= 227 * 1024, "shared memory of one CTA exceeds the H200's 227 KiB");
};

// An accumulator fragment ((2,2,V),M,N) of a 64xN wgmma viewed as (rows, cols) of this thread:
// value mode 1 steps 8 rows, modes 0 and 2 step columns.
template <class L>
__device__ __forceinline__ auto rows_cols(L l) {
  using namespace cute;
  return make_layout(make_layout(get<0, 1>(l), get<1>(l)), make_layout(get<0, 0>(l), get<0, 2>(l), get<2>(l)));
}

// Online softmax step for row r of this thread: S(r, :) holds scaled log2-unit logits (masked ones
// -inf) and mx their max with row_max (this thread's columns). Takes the max over the quad that
// shares the row, replaces S(r, :) by exp2(S - max), folds the old sum and O's row by the correction.
template <class TS, class TO>
__device__ __forceinline__ void softmax_update(TS& S, TO& O, int r, float mx, float& row_max, float& row_sum) {
  mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
  mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
  const float use = mx == -INFINITY ? 0.0f : mx;  // a row with nothing visible yet stays at 0
  const float corr = exp2f(row_max - use);
  row_max = mx;
  float sum = 0.0f;
  CUTE_UNROLL
  for (int c = 0; c < cute::size<1>(S); ++c) {
    const float e = exp2f(S(r, c) - use);
    S(r, c) = e;
    sum += e;
  }
  row_sum = row_sum * corr + sum;
  CUTE_UNROLL
  for (int c = 0; c < cute::size<1>(O); ++c) O(r, c) *= corr;
}

// Whether a wgmma A operand is 16-bit registers (RS) rather than shared-memory descriptors.
template <class TA>
constexpr bool kRegsA = sizeof(typename TA::value_type) == 2;

// C (+)= A B over every k block of the tiles, issued and waited by the calling warpgroup.
// A is shared-memory descriptors or (RS) registers, which are fenced like the accumulator.
template <class Mma, class TA, class TB, class TC>
__device__ __forceinline__ void wgmma_tile(Mma& mma, TA& a, const TB& b, TC& c, bool accumulate) {
  using namespace cute;
  if constexpr (kRegsA<TA>) warpgroup_fence_operand(a);
  warpgroup_fence_operand(c);
  warpgroup_arrive();
  mma.accumulate_ = accumulate ? GMMA::ScaleOut::One : GMMA::ScaleOut::Zero;
  CUTE_UNROLL
  for (int kb = 0; kb < size<2>(a); ++kb) {
    gemm(mma, a(_, _, kb), b(_, _, kb), c);
    mma.accumulate_ = GMMA::ScaleOut::One;
  }
  warpgroup_commit_batch();
  warpgroup_wait<0>();
  warpgroup_fence_operand(c);
  if constexpr (kRegsA<TA>) warpgroup_fence_operand(a);
}

// Copies rows [row0, row0 + ROWS) x [0, COLS) of a token tensor into smem, 8 elements at a time to
// `dst(r, c)` (8 contiguous elements in every GMMA swizzle), zero-filling rows at or past `valid`.
// With `async`, 16-byte cp.async (the caller commits and waits); else plain loads, for sources
// that are not 16-byte aligned.
template <class T, int ROWS, int COLS, class Dst>
__device__ __forceinline__ void load_rows(const T* rows_base, int64_t row_stride, int64_t row0, int64_t valid,
                                          bool async, Dst dst) {
  constexpr int kChunks = COLS / 8;
  for (int idx = threadIdx.x; idx < ROWS * kChunks; idx += 256) {
    const int r = idx / kChunks, c = (idx % kChunks) * 8;
    const bool in = row0 + r < valid;
    const T* src = rows_base + (in ? (row0 + r) * row_stride + c : 0);
    uint4* to = reinterpret_cast<uint4*>(dst(r, c));
    if (async) {
      cute::SM80_CP_ASYNC_CACHEGLOBAL_ZFILL<uint4>::copy(*reinterpret_cast<const uint4*>(src), *to, in);
    } else {
      T tmp[8];
      for (int e = 0; e < 8; ++e) tmp[e] = in ? src[e] : T(0.0f);
      memcpy(to, tmp, 16);
    }
  }
}

template <class T, int kD, int kDv, int kBN>
__global__ void __launch_bounds__(256, 1) sdpa_fwd_kernel(const __grid_constant__ Problem p) {
  using namespace cute;
  using Cfg = FwdConfig<T, kD, kDv, kBN>;
  constexpr int kBM = Cfg::kBM;
  constexpr float kLog2e = 1.4426950408889634f;
  constexpr float kLn2 = 0.6931471805599453f;

  extern __shared__ char smem_raw[];
  auto& sm = *reinterpret_cast<typename Cfg::Smem*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));
  Tensor sQ = make_tensor(make_smem_ptr(sm.q), typename Cfg::SmemQ{});
  Tensor sK = make_tensor(make_smem_ptr(sm.k), typename Cfg::SmemK{});
  Tensor sVt = make_tensor(make_smem_ptr(sm.v), typename Cfg::SmemVt{});

  const int tid = threadIdx.x;
  const int64_t m0 = int64_t(blockIdx.x) * kBM;
  const int64_t h = blockIdx.y, bi = blockIdx.z;
  const int64_t sq = p.len_q(bi), skv = p.len_kv(bi);
  const int64_t hk = h / (p.hq / p.hk), hv = h / (p.hq / p.hv);
  const float scale = p.scale_ptr ? *p.scale_ptr : p.scale;
  const float scale2 = scale * kLog2e;
  const int64_t diag = p.bottom_right ? skv - sq : 0;  // query i sits at key position i + diag

  // Key range any row of this block can see.
  int64_t n_lo = 0, n_hi = 0;
  if (m0 < sq && skv > 0) {
    const int64_t last = (m0 + kBM < sq ? m0 + kBM : sq) - 1;
    n_hi = p.has_right ? last + diag + p.right + 1 : skv;
    n_hi = n_hi < skv ? n_hi : skv;
    n_lo = p.has_left ? m0 + diag - p.left + 1 : 0;
    n_lo = n_lo > 0 ? n_lo : 0;
  }
  const int64_t tile_lo = n_lo / kBN;
  const int64_t tile_hi = n_hi > n_lo ? (n_hi + kBN - 1) / kBN : tile_lo;

  const T* q = static_cast<const T*>(p.q.ptr) + p.base(p.q, bi, true) + h * p.q.stride[1];
  const T* k = static_cast<const T*>(p.k.ptr) + p.base(p.k, bi, false) + hk * p.k.stride[1];
  const T* v = static_cast<const T*>(p.v.ptr) + p.base(p.v, bi, false) + hv * p.v.stride[1];

  // 16-byte alignment of every row start (strides are multiples of 8 elements, checked at build).
  const bool q_async = (reinterpret_cast<uintptr_t>(q) & 15) == 0;
  const bool kv_async = ((reinterpret_cast<uintptr_t>(k) | reinterpret_cast<uintptr_t>(v)) & 15) == 0;
  load_rows<T, kBM, kD>(q, p.q.stride[2], m0, sq, q_async, [&](int r, int c) { return &sQ(r, c); });
  auto load_kv = [&](int64_t t, int stage) {
    load_rows<T, kBN, kD>(k, p.k.stride[2], t * kBN, skv, kv_async, [&](int r, int c) { return &sK(r, c, stage); });
    load_rows<T, kBN, kDv>(v, p.v.stride[2], t * kBN, skv, kv_async, [&](int r, int c) { return &sVt(c, r, stage); });
  };
  if (tile_lo < tile_hi) load_kv(tile_lo, 0);
  cute::cp_async_fence();

  typename Cfg::MmaS mma_s;
  typename Cfg::MmaO mma_o;
  auto thr_s = mma_s.get_thread_slice(tid);
  auto thr_o = mma_o.get_thread_slice(tid);
  Tensor tSrQ = thr_s.make_fragment_A(thr_s.partition_A(sQ));
  Tensor tSrK = thr_s.make_fragment_B(thr_s.partition_B(sK));
  // P as the A-register operand: its compact layout matches accS's register order.
  Tensor tOrP = thr_o.partition_fragment_A(
      make_tensor(static_cast<T*>(nullptr), make_layout(Shape<typename Cfg::BM, typename Cfg::BN>{}, LayoutRight{})));
  Tensor tOrV = thr_o.make_fragment_B(thr_o.partition_B(sVt));
  Tensor accS = partition_fragment_C(mma_s, Shape<typename Cfg::BM, typename Cfg::BN>{});
  Tensor accO = partition_fragment_C(mma_o, Shape<typename Cfg::BM, typename Cfg::Dv>{});
  static_assert(decltype(size(tOrP))::value == decltype(size(accS))::value, "P and S fragments differ");
  Tensor cS = thr_s.partition_C(make_identity_tensor(Shape<typename Cfg::BM, typename Cfg::BN>{}));
  Tensor cO = thr_o.partition_C(make_identity_tensor(Shape<typename Cfg::BM, typename Cfg::Dv>{}));
  Tensor S = make_tensor(accS.data(), rows_cols(accS.layout()));
  Tensor O = make_tensor(accO.data(), rows_cols(accO.layout()));
  Tensor cSrc = make_tensor(cS.data(), rows_cols(cS.layout()));
  Tensor cOrc = make_tensor(cO.data(), rows_cols(cO.layout()));
  constexpr int kRows = decltype(size<0>(S))::value;
  static_assert(kRows == decltype(size<0>(O))::value, "S and O rows must match");

  // Running max (log2 units of the scaled logits) and this thread's partial row sums. A sink logit
  // starts the row: it joins the max and adds exp(0) = 1 to the denominator, never to O.
  float row_max[kRows], row_sum[kRows];
  const float sink2 = p.sink ? p.sink[h] * kLog2e : -INFINITY;
  CUTE_UNROLL
  for (int r = 0; r < kRows; ++r) {
    row_max[r] = sink2;
    row_sum[r] = (p.sink && (tid % 4) == 0) ? 1.0f : 0.0f;  // counted once per quad
  }
  clear(accO);

  for (int64_t t = tile_lo; t < tile_hi; ++t) {
    const int64_t n0 = t * kBN;
    const int stage = int((t - tile_lo) & 1);
    // The next tile goes into the other stage, whose readers finished at the end of the last
    // iteration; then this tile's copies (all groups but the newest) must have landed.
    if (t + 1 < tile_hi) load_kv(t + 1, stage ^ 1);
    cute::cp_async_fence();
    cute::cp_async_wait<1>();
    cutlass::arch::fence_view_async_shared();  // generic-proxy smem writes -> wgmma reads
    __syncthreads();

    Tensor tSrK_stage = tSrK(_, _, _, stage);
    wgmma_tile(mma_s, tSrQ, tSrK_stage, accS, false);

    // Mask and online softmax, row by row of this thread (a row's columns live in one quad).
    CUTE_UNROLL
    for (int r = 0; r < kRows; ++r) {
      // Visible columns of this row within the tile: [lo, hi), clamped to 32-bit tile coordinates.
      const int64_t ia = m0 + get<0>(cSrc(r, 0)) + diag;
      int64_t hi = skv - n0, lo = -n0;
      if (p.has_right && ia + p.right + 1 - n0 < hi) hi = ia + p.right + 1 - n0;
      if (p.has_left) lo = ia - p.left + 1 - n0;
      const int hi32 = int(hi < 0 ? 0 : hi > kBN ? kBN : hi);
      const int lo32 = int(lo < 0 ? 0 : lo > kBN ? kBN : lo);
      float mx = row_max[r];
      CUTE_UNROLL
      for (int c = 0; c < size<1>(S); ++c) {
        const int j = get<1>(cSrc(r, c));
        const float s2 = (j >= lo32 && j < hi32) ? S(r, c) * scale2 : -INFINITY;
        S(r, c) = s2;
        mx = fmaxf(mx, s2);
      }
      softmax_update(S, O, r, mx, row_max[r], row_sum[r]);
    }

    CUTE_UNROLL
    for (int e = 0; e < size(accS); ++e) tOrP(e) = T(accS(e));
    Tensor tOrV_stage = tOrV(_, _, _, stage);
    wgmma_tile(mma_o, tOrP, tOrV_stage, accO, true);
    __syncthreads();  // both warpgroups are done reading this stage before it is refilled
  }
  cute::cp_async_wait<0>();  // the Q copy of a block without visible keys

  // Epilogue: O / l and the natural-log LSE; rows past the sequence get zeros in unpacked layouts.
  T* o = static_cast<T*>(p.o.ptr) + p.base(p.o, bi, true) + h * p.o.stride[1];
  const bool o_zero_pad = !p.q_packed();
  const bool lse_zero_pad = !p.lse_ragged.ptr;
  CUTE_UNROLL
  for (int r = 0; r < kRows; ++r) {
    float l = row_sum[r];
    l += __shfl_xor_sync(0xffffffffu, l, 1);
    l += __shfl_xor_sync(0xffffffffu, l, 2);
    const int64_t i = m0 + get<0>(cOrc(r, 0));
    if (i >= p.sq) continue;
    const bool valid = i < sq;
    if (!valid && !o_zero_pad && !lse_zero_pad) continue;
    const float inv = (valid && l > 0.0f) ? 1.0f / l : 0.0f;
    if (valid || o_zero_pad) {
      T* orow = o + i * p.o.stride[2];
      CUTE_UNROLL
      for (int c = 0; c < size<1>(O); ++c) orow[get<1>(cOrc(r, c))] = T(O(r, c) * inv);
    }
    if (p.lse && (tid % 4) == 0 && (valid || lse_zero_pad)) {
      const float lse = !valid ? 0.0f : l > 0.0f ? (row_max[r] + log2f(l)) * kLn2 : -INFINITY;
      p.lse[p.lse_base(bi) + h * p.lse_stride[1] + i * p.lse_stride[2]] = lse;
    }
  }
}

template <class T, int kD, int kDv, int kBN>
const char* launch_fwd(const Problem& p, void* stream) {
  using Cfg = FwdConfig<T, kD, kDv, kBN>;
  auto kernel = sdpa_fwd_kernel<T, kD, kDv, kBN>;
  // Once per instantiation: opting in to more than 48 KiB of dynamic shared memory.
  static const cudaError_t attr =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Cfg::kSmemBytes);
  if (attr != cudaSuccess) return cudaGetErrorString(attr);
  if (p.b == 0 || p.hq == 0 || p.sq == 0) return nullptr;
  dim3 grid(unsigned((p.sq + Cfg::kBM - 1) / Cfg::kBM), unsigned(p.hq), unsigned(p.b));
  kernel<<<grid, Cfg::kThreads, Cfg::kSmemBytes, static_cast<cudaStream_t>(stream)>>>(p);
  cudaError_t e = cudaGetLastError();
  return e == cudaSuccess ? nullptr : cudaGetErrorString(e);
}

// The two element types of one head-dim configuration.
template <int kD, int kDv, int kBN>
const char* launch_fwd_any(const Problem& p, void* stream) {
  return p.fp16 ? launch_fwd<cutlass::half_t, kD, kDv, kBN>(p, stream)
                : launch_fwd<cutlass::bfloat16_t, kD, kDv, kBN>(p, stream);
}

}  // namespace opendnn::cuda::sdpa
