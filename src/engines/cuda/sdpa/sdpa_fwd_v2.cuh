// SPDX-License-Identifier: Apache-2.0
// SDPA forward v2 for sm_90a (the kernel template; sdpa_fwd_v2_d*.cu instantiate it, one head-dim
// configuration each, and sdpa_fwd_v2.cu holds the host side).
//
// One CTA per (128 query rows, query head, batch), 384 threads in three warpgroups:
// - warpgroup 0 gives its registers away (setmaxnreg 24) and one thread issues the TMA loads: Q
//   once, then K and V tiles into a kStages-deep ring. K and V have their own full and empty
//   mbarriers, because K of a tile is consumed (and freed) a whole GEMM before its V.
// - warpgroups 1 and 2 (setmaxnreg 240) own 64 query rows each. Per key tile j, in one "GEMM
//   section": issue S_j = Q K_j^T (wgmma SS) and O += P_{j-1} V_{j-1} (wgmma RS, P from
//   registers), then wait only for S_j (wgmma.wait_group 1) and run the softmax of S_j while the
//   tensor cores still work on P_{j-1} V_{j-1}; only then wait for that GEMM, rescale O and turn
//   S_j into P_j. The softmax therefore never sits on the critical path of the warpgroup's own
//   GEMMs. Known gap [code, SASS of the d128 instantiation]: ptxas hoists the wait_group 0
//   (WARPGROUP.DEPBAR.LE 0) to just after the row max, because P_t is converted into the
//   registers P_{t-1} V_{t-1} still reads and it interleaves those F2FP with the MUFU; so only the
//   max overlaps the PV GEMM (the pingpong below still overlaps the whole softmax with the other
//   warpgroup's GEMMs). Next step: two P fragments used alternately (loop unrolled by two).
// - The two consumer warpgroups take turns issuing their GEMM sections (two named barriers: each
//   waits on its own and, once its GEMMs are issued, arrives on the other's), so the tensor cores
//   run one warpgroup's GEMMs while the other computes its softmax instead of both contending
//   and then both idling in softmax. There is no CTA-wide barrier after the setup.
// The fp32 accumulator of the 64xN S wgmma holds its elements in the order the A-register operand
// of the PV wgmma expects (as in sdpa_fwd_kernel.cuh), so P needs no shuffle.
// Masking: only the tiles that cross the causal diagonal of the block's first row, or run past
// skv, are masked (a separate instantiation of the softmax step). Fully masked tiles are never
// loaded. Causal grids run the heaviest query blocks first (reversed block order).
// O / l goes through shared memory (Q's tile, no longer read by the finished warpgroup) to 16-byte
// global stores.
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <cute/tensor.hpp>
#include <cute/arch/copy_sm90_tma.hpp>
#include <cute/atom/mma_traits_sm90_gmma.hpp>
#include <cutlass/arch/barrier.h>
#include <cutlass/arch/reg_reconfig.h>
#include <cutlass/numeric_types.h>

#include <type_traits>

#include "engines/cuda/sdpa/sdpa_fwd_kernel.cuh"
#include "engines/cuda/sdpa/sdpa_fwd_v2.h"

namespace opendnn::cuda::sdpa {
namespace v2 {

constexpr int kThreads = 384;
constexpr int kBM = 128;  // query rows of a CTA (64 per consumer warpgroup)
// Named barrier ids (CUTLASS adds its reserved count): the two GEMM-turn barriers, then the two
// per-warpgroup epilogue barriers.
constexpr uint32_t kTurnBar = 0, kEpiBar = 2;

template <class T, int kD, int kDv, int kBN, int kStages>
struct Config {
  using BM = cute::Int<kBM>;
  using BN = cute::Int<kBN>;
  using D = cute::Int<kD>;
  using Dv = cute::Int<kDv>;
  using Stages = cute::Int<kStages>;
  // K-major operands with 64-column swizzle atoms stacked down the rows first: columns [0,64) of
  // all rows form one TMA box, [64,128) the next, and so on; stages are the last mode.
  using SmemQ = decltype(cute::tile_to_shape(cute::GMMA::Layout_K_SW128_Atom<T>{}, cute::Shape<BM, D>{}));
  using SmemK = decltype(cute::tile_to_shape(cute::GMMA::Layout_K_SW128_Atom<T>{}, cute::Shape<BN, D, Stages>{}));
  // V as the (d, key) B operand, d contiguous, atoms stacked along the keys first, so the same
  // row-major 64-column boxes of V land in it unchanged.
  using SmemVt = decltype(cute::tile_to_shape(cute::GMMA::Layout_MN_SW128_Atom<T>{}, cute::Shape<Dv, BN, Stages>{},
                                              cute::Step<cute::_2, cute::_1, cute::_3>{}));
  using MmaS = WgmmaSS<T, BN, D>;
  using MmaO = WgmmaRS<T, Dv, BN>;
  struct Smem {
    alignas(1024) T q[cute::cosize_v<SmemQ>];
    alignas(1024) T k[cute::cosize_v<SmemK>];
    alignas(1024) T v[cute::cosize_v<SmemVt>];
    cutlass::arch::ClusterTransactionBarrier q_full, k_full[kStages], v_full[kStages];
    cutlass::arch::ClusterBarrier k_empty[kStages], v_empty[kStages];
  };
  static constexpr uint32_t kQBytes = kBM * kD * sizeof(T);
  static constexpr uint32_t kKBytes = kBN * kD * sizeof(T);
  static constexpr uint32_t kVBytes = kBN * kDv * sizeof(T);
  // The dynamic shared memory base is only 16-byte aligned; the swizzled layouts need 1024.
  static constexpr int kSmemBytes = int(sizeof(Smem)) + 1024;
  static_assert(kSmemBytes <= 227 * 1024, "shared memory of one CTA exceeds the H200's 227 KiB");
  static_assert(kD % kBoxCols == 0 && kDv % kBoxCols == 0 && kDv <= kD, "head dims in 64-column boxes, O fits Q");
};

struct Params {
  CUtensorMap tq, tk, tv;
  Problem p;
};

__device__ __forceinline__ float exp2_approx(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// Issues C (+)= A B over every k block (no commit, no wait: the caller batches and waits).
template <class Mma, class TA, class TB, class TC>
__device__ __forceinline__ void issue(Mma& mma, const TA& a, const TB& b, TC& c, bool accumulate) {
  using namespace cute;
  mma.accumulate_ = accumulate ? GMMA::ScaleOut::One : GMMA::ScaleOut::Zero;
  CUTE_UNROLL
  for (int kb = 0; kb < size<2>(a); ++kb) {
    gemm(mma, a(_, _, kb), b(_, _, kb), c);
    mma.accumulate_ = GMMA::ScaleOut::One;
  }
}

template <class T, int kD, int kDv, int kBN, int kStages>
__global__ void __launch_bounds__(kThreads, 1) fwd_kernel(const __grid_constant__ Params prm) {
  using namespace cute;
  using Cfg = Config<T, kD, kDv, kBN, kStages>;
  constexpr float kLog2e = 1.4426950408889634f;
  constexpr float kLn2 = 0.6931471805599453f;
  const Problem& p = prm.p;

  extern __shared__ char smem_raw[];
  // Aligned by offsetting smem_raw itself (not through an integer), so the compiler still knows
  // every access is to shared memory (STS/LDS, not generic stores).
  const uint32_t raw_addr = cute::cast_smem_ptr_to_uint(smem_raw);
  auto& sm = *reinterpret_cast<typename Cfg::Smem*>(smem_raw + ((1024u - (raw_addr & 1023u)) & 1023u));
  const int wg = threadIdx.x / 128;
  // Causal blocks see more keys the later they sit: launch those first so the short ones fill
  // the tail of the grid.
  const int mb = p.has_right ? int(gridDim.x - 1 - blockIdx.x) : int(blockIdx.x);
  const int m0 = mb * kBM;
  const int h = int(blockIdx.y), bi = int(blockIdx.z);
  const int hk = h / int(p.hq / p.hk), hv = h / int(p.hq / p.hv);
  // Positions fit in 32 bits (sequences up to 2^30, fwd_v2_supports), which keeps the masked
  // softmax step within the register budget.
  const int sq = int(p.sq), skv = int(p.skv);
  const int diag = p.bottom_right ? skv - sq : 0;  // query i sits at key position i + diag
  // Keys [0, n_hi) are visible to some row of the block; keys [0, full_hi) to every row of it.
  int n_hi = skv, full_hi = skv;
  if (p.has_right) {
    n_hi = min(n_hi, min(m0 + kBM, sq) + diag);
    full_hi = min(full_hi, m0 + diag + 1);
  }
  const int n_tiles = n_hi > 0 ? (n_hi + kBN - 1) / kBN : 0;
  // Tiles [0, n_plain) need no mask; the rest (at most a few at the end) do.
  const int n_plain = full_hi > 0 ? min(full_hi / kBN, n_tiles) : 0;

  if (threadIdx.x == 0) {
    sm.q_full.init(1);
    for (int s = 0; s < kStages; ++s) {
      sm.k_full[s].init(1);
      sm.v_full[s].init(1);
      sm.k_empty[s].init(8);  // one arrival per consumer warp
      sm.v_empty[s].init(8);
    }
    cutlass::arch::fence_barrier_init();
  }
  __syncthreads();

  if (wg == 0) {
    cutlass::arch::warpgroup_reg_dealloc<24>();
    if (threadIdx.x != 0) return;
    // A tile is kD / 64 boxes of (64 columns, rows, 1 head, 1 batch); rows past the sequence
    // (of this head) are zero-filled and still counted in the transaction bytes.
    auto load = [&](const CUtensorMap& t, cutlass::arch::ClusterTransactionBarrier& bar, T* dst, int cols, int rows,
                    int row0, int head) {
      for (int c = 0; c < cols; c += kBoxCols)
        SM90_TMA_LOAD_4D::copy(&t, reinterpret_cast<uint64_t*>(&bar), uint64_t(TMA::CacheHintSm90::EVICT_NORMAL),
                               dst + c * rows, c, row0, head, bi);
    };
    sm.q_full.arrive_and_expect_tx(Cfg::kQBytes);
    load(prm.tq, sm.q_full, sm.q, kD, kBM, m0, h);
    for (int t = 0; t < n_tiles; ++t) {
      const int s = t % kStages;
      const uint32_t reuse_phase = ((t / kStages) - 1) & 1;
      if (t >= kStages) sm.k_empty[s].wait(reuse_phase);
      sm.k_full[s].arrive_and_expect_tx(Cfg::kKBytes);
      load(prm.tk, sm.k_full[s], sm.k + s * kBN * kD, kD, kBN, t * kBN, hk);
      if (t >= kStages) sm.v_empty[s].wait(reuse_phase);
      sm.v_full[s].arrive_and_expect_tx(Cfg::kVBytes);
      load(prm.tv, sm.v_full[s], sm.v + s * kBN * kDv, kDv, kBN, t * kBN, hv);
    }
    return;
  }

  cutlass::arch::warpgroup_reg_alloc<240>();
  const int cw = wg - 1;              // consumer warpgroup 0 or 1
  const int tid = threadIdx.x - 128;  // 0..255 over both consumer warpgroups
  const bool warp_leader = threadIdx.x % 32 == 0;
  Tensor sQ = make_tensor(make_smem_ptr(sm.q), typename Cfg::SmemQ{});
  Tensor sK = make_tensor(make_smem_ptr(sm.k), typename Cfg::SmemK{});
  Tensor sVt = make_tensor(make_smem_ptr(sm.v), typename Cfg::SmemVt{});
  typename Cfg::MmaS mma_s;
  typename Cfg::MmaO mma_o;
  auto thr_s = mma_s.get_thread_slice(tid);
  auto thr_o = mma_o.get_thread_slice(tid);
  using SShape = Shape<typename Cfg::BM, typename Cfg::BN>;
  using OShape = Shape<typename Cfg::BM, typename Cfg::Dv>;
  Tensor tSrQ = thr_s.make_fragment_A(thr_s.partition_A(sQ));
  Tensor tSrK = thr_s.make_fragment_B(thr_s.partition_B(sK));
  Tensor tOrP = thr_o.partition_fragment_A(make_tensor(static_cast<T*>(nullptr), make_layout(SShape{}, LayoutRight{})));
  Tensor tOrV = thr_o.make_fragment_B(thr_o.partition_B(sVt));
  Tensor accS = partition_fragment_C(mma_s, SShape{});
  Tensor accO = partition_fragment_C(mma_o, OShape{});
  static_assert(decltype(size(tOrP))::value == decltype(size(accS))::value, "P and S fragments differ");
  Tensor cS = thr_s.partition_C(make_identity_tensor(SShape{}));
  Tensor cO = thr_o.partition_C(make_identity_tensor(OShape{}));
  Tensor S = make_tensor(accS.data(), rows_cols(accS.layout()));
  Tensor O = make_tensor(accO.data(), rows_cols(accO.layout()));
  Tensor cSrc = make_tensor(cS.data(), rows_cols(cS.layout()));
  Tensor cOrc = make_tensor(cO.data(), rows_cols(cO.layout()));
  constexpr int kRows = decltype(size<0>(S))::value;
  static_assert(kRows == decltype(size<0>(O))::value, "S and O rows must match");

  const float scale2 = p.scale * kLog2e;  // never a device scale (fwd_v2_supports)
  float row_max[kRows], row_sum[kRows], corr[kRows];
  CUTE_UNROLL
  for (int r = 0; r < kRows; ++r) row_max[r] = -INFINITY, row_sum[r] = 0.0f, corr[r] = 1.0f;
  clear(accO);

  // Turn-taking of the GEMM sections: consumer 0 goes first, so consumer 1 starts with one arrival
  // on consumer 0's barrier (consumer 0 takes it back after its loop, leaving both barriers empty).
  auto turn_wait = [&] { cutlass::arch::NamedBarrier::sync(256, kTurnBar + cw); };
  auto turn_pass = [&] { cutlass::arch::NamedBarrier::arrive(256, kTurnBar + (cw ^ 1)); };
  if (cw == 1) turn_pass();

  // Online softmax of S (tile at key n0) in place: S becomes exp2(scaled S - new max), corr the
  // factor the old O and row sums take. kMask: columns past skv or right of the causal diagonal.
  // The scale is positive (the adapter runs v1 otherwise), so the max of the raw logits gives the
  // scaled max and the scaling folds into one FFMA per element ahead of the exp2.
  auto softmax = [&](auto mask_tag, int n0) {
    constexpr bool kMask = decltype(mask_tag)::value;
    CUTE_UNROLL
    for (int r = 0; r < kRows; ++r) {
      int hi = skv - n0;  // visible columns of this row: [0, hi)
      if (kMask && p.has_right) hi = min(hi, m0 + get<0>(cSrc(r, 0)) + diag + 1 - n0);
      float mx = -INFINITY;
      CUTE_UNROLL
      for (int c = 0; c < size<1>(S); ++c) {
        if (kMask && get<1>(cSrc(r, c)) >= hi) S(r, c) = -INFINITY;
        mx = fmaxf(mx, S(r, c));
      }
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      const float m2 = fmaxf(row_max[r], mx * scale2);
      const float use = m2 == -INFINITY ? 0.0f : m2;  // a row with nothing visible yet stays at 0
      corr[r] = exp2_approx(row_max[r] - use);
      row_max[r] = m2;
      float sum = 0.0f;
      CUTE_UNROLL
      for (int c = 0; c < size<1>(S); ++c) {
        const float e = exp2_approx(fmaf(S(r, c), scale2, -use));
        S(r, c) = e;
        sum += e;
      }
      row_sum[r] = row_sum[r] * corr[r] + sum;
    }
  };
  auto to_p = [&] {
    CUTE_UNROLL
    for (int e = 0; e < size(accS); ++e) tOrP(e) = T(accS(e));
  };
  // O *= corr, row by row; only while no PV GEMM is in flight.
  auto rescale_o = [&] {
    CUTE_UNROLL
    for (int r = 0; r < kRows; ++r) {
      CUTE_UNROLL
      for (int c = 0; c < size<1>(O); ++c) O(r, c) *= corr[r];
    }
  };
  auto issue_s = [&](int stage) {
    warpgroup_fence_operand(accS);
    warpgroup_arrive();
    issue(mma_s, tSrQ, tSrK(_, _, _, stage), accS, false);
    warpgroup_commit_batch();
    warpgroup_fence_operand(accS);
  };
  auto issue_pv = [&](int stage) {
    warpgroup_fence_operand(tOrP);
    warpgroup_fence_operand(accO);
    warpgroup_arrive();
    issue(mma_o, tOrP, tOrV(_, _, _, stage), accO, true);
    warpgroup_commit_batch();
    warpgroup_fence_operand(accO);
    warpgroup_fence_operand(tOrP);
  };
  auto release = [&](cutlass::arch::ClusterBarrier& b) {
    if (warp_leader) b.arrive();
  };

  sm.q_full.wait(0);
  if (n_tiles > 0) {
    // Tile 0: S_0 alone.
    sm.k_full[0].wait(0);
    turn_wait();
    issue_s(0);
    turn_pass();
    warpgroup_wait<0>();
    warpgroup_fence_operand(accS);
    release(sm.k_empty[0]);
    if (n_plain > 0) softmax(std::false_type{}, 0);
    else softmax(std::true_type{}, 0);
    to_p();
    // Tile t: S_t and P_{t-1} V_{t-1} in flight together, softmax of S_t under the PV GEMM.
    auto step = [&](auto mask_tag, int t) {
      const int s = t % kStages, sp = (t - 1) % kStages;
      sm.k_full[s].wait((t / kStages) & 1);
      sm.v_full[sp].wait(((t - 1) / kStages) & 1);
      turn_wait();
      issue_s(s);
      rescale_o();  // by the previous softmax's factors, while S_t runs
      issue_pv(sp);
      turn_pass();
      warpgroup_wait<1>();
      warpgroup_fence_operand(accS);
      release(sm.k_empty[s]);
      softmax(mask_tag, t * kBN);
      warpgroup_fence_operand(accS);
      warpgroup_wait<0>();
      warpgroup_fence_operand(accO);
      warpgroup_fence_operand(tOrP);
      release(sm.v_empty[sp]);
      to_p();
    };
    int t = 1;
    for (; t < n_plain; ++t) step(std::false_type{}, t);
    for (; t < n_tiles; ++t) step(std::true_type{}, t);
    // The last P V.
    const int sl = (n_tiles - 1) % kStages;
    sm.v_full[sl].wait(((n_tiles - 1) / kStages) & 1);
    turn_wait();
    rescale_o();
    issue_pv(sl);
    turn_pass();
    warpgroup_wait<0>();
    warpgroup_fence_operand(accO);
  }
  if (cw == 0) turn_wait();  // takes back consumer 1's opening arrival

  // Epilogue. This warpgroup's S GEMMs, the only readers of its 64 rows of sQ, have completed:
  // O / l goes there (same swizzle, two columns per 32-bit store), then out 16 bytes a thread.
  CUTE_UNROLL
  for (int r = 0; r < kRows; ++r) {
    float l = row_sum[r];
    l += __shfl_xor_sync(0xffffffffu, l, 1);
    l += __shfl_xor_sync(0xffffffffu, l, 2);
    const int row = get<0>(cOrc(r, 0));
    const float inv = l > 0.0f ? 1.0f / l : 0.0f;
    CUTE_UNROLL
    for (int c = 0; c < size<1>(O); c += 2) {
      // Accumulator columns come in adjacent pairs (c, c + 1) of one thread.
      const T pair[2] = {T(O(r, c) * inv), T(O(r, c + 1) * inv)};
      uint32_t word;
      memcpy(&word, pair, 4);
      *reinterpret_cast<uint32_t*>(&sQ(row, get<1>(cOrc(r, c)))) = word;
    }
    if (p.lse && tid % 4 == 0 && m0 + row < sq) {
      const float lse = l > 0.0f ? (row_max[r] + __log2f(l)) * kLn2 : -INFINITY;
      p.lse[p.lse_base(bi) + h * p.lse_stride[1] + (m0 + row) * p.lse_stride[2]] = lse;
    }
  }
  cutlass::arch::NamedBarrier::sync(128, kEpiBar + cw);  // this warpgroup's rows are in sQ
  T* o = static_cast<T*>(p.o.ptr) + p.base(p.o, bi, true) + h * p.o.stride[1];
  constexpr int kChunks = kDv / 8;
  const int wrow0 = cw * 64;
  for (int idx = threadIdx.x % 128; idx < 64 * kChunks; idx += 128) {
    const int row = wrow0 + idx / kChunks, col = (idx % kChunks) * 8;
    if (m0 + row < sq)
      *reinterpret_cast<uint4*>(o + int64_t(m0 + row) * p.o.stride[2] + col) =
          *reinterpret_cast<const uint4*>(&sQ(row, col));
  }
}

template <class T, int kD, int kDv, int kBN, int kStages>
const char* launch_t(const Problem& p, const FwdV2Descs& d, void* stream) {
  using Cfg = Config<T, kD, kDv, kBN, kStages>;
  auto kernel = fwd_kernel<T, kD, kDv, kBN, kStages>;
  static const cudaError_t attr =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Cfg::kSmemBytes);
  if (attr != cudaSuccess) return cudaGetErrorString(attr);
  if (p.b == 0 || p.hq == 0 || p.sq == 0) return nullptr;
  Params prm;
  memcpy(&prm.tq, d.bytes[0], sizeof(CUtensorMap));
  memcpy(&prm.tk, d.bytes[1], sizeof(CUtensorMap));
  memcpy(&prm.tv, d.bytes[2], sizeof(CUtensorMap));
  prm.p = p;
  dim3 grid(unsigned((p.sq + kBM - 1) / kBM), unsigned(p.hq), unsigned(p.b));
  kernel<<<grid, kThreads, Cfg::kSmemBytes, static_cast<cudaStream_t>(stream)>>>(prm);
  cudaError_t e = cudaGetLastError();
  return e == cudaSuccess ? nullptr : cudaGetErrorString(e);
}

// Both element types of one head-dim configuration.
template <int kD, int kDv, int kBN, int kStages>
const char* launch_any(const Problem& p, const FwdV2Descs& d, void* stream) {
  static_assert(kBN == fwd_v2_kv_rows(kD), "the K/V box rows of the descriptors");
  return p.fp16 ? launch_t<cutlass::half_t, kD, kDv, kBN, kStages>(p, d, stream)
                : launch_t<cutlass::bfloat16_t, kD, kDv, kBN, kStages>(p, d, stream);
}

}  // namespace v2
}  // namespace opendnn::cuda::sdpa
