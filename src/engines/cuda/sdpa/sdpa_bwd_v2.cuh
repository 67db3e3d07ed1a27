// SPDX-License-Identifier: Apache-2.0
// SDPA backward v2 for sm_90a: the default plan at d64/d128 (OPENDNN_SDPA_BWD_V2=0 withholds it; see
// sdpa_bwd_adapter.cpp for which schedule runs by default). sdpa_bwd_v2_d*.cu instantiate it per head dim.
// Every schedule below has passed test_cuda_sdpa_bwd on the H200 (68/68, session 10).
//
// One kernel template serves both passes, because dK/dV and dQ have the same shape once the
// operands are named by role: a CTA keeps a 128-row "resident" tile (X, Y) in shared memory and
// streams 64-row tiles (U, W) through a 3-stage cp.async ring. Per streamed tile each of the two
// warpgroups (64 resident rows each) runs, with wgmma:
//   T1 = X U^T, T2 = Y W^T                        (SS, both operands K-major in shared memory)
//   P = exp(T1 * scale - LSE), dS = P (T2 - D)    (in registers)
//   acc1 += dS U, acc2 += P W                     (RS: P / dS straight from the accumulators)
// dK/dV pass: X = K, Y = V, U = Q, W = dO; the LSE and D belong to the streamed (query) columns;
//   acc1 = dK / scale, acc2 = dV. Streamed items: every query head of the GQA group, then query
//   tiles, both in increasing order.
// dQ pass (two-pass schedule only, OPENDNN_SDPA_BWD_V2_TWO_PASS=1): X = Q, Y = dO, U = K, W = V;
//   LSE and D belong to the resident rows; acc1 = dQ / scale. It recomputes T1/T2: 7 GEMMs.
// Fused dQ (default): the dK/dV pass also writes dS (128 keys x 64 queries) to shared memory and
//   computes the 64-query dQ contribution of its 128 keys, dS^T K (SS, both operands MN-major): a
//   fifth GEMM per step instead of a second pass of three; each warpgroup takes half of the columns
//   (so K is staged with 64-byte swizzle atoms at d64). The contribution goes into an fp32 dQ
//   workspace deterministically: the key tiles contributing to one query tile add in a fixed order (a
//   per-tile counter in global memory says whose turn it is; the first stores, the others add), and a
//   small kernel scales and converts the sum. Workspace stays linear in Sq. A step's dQ is parked in
//   shared memory and added during the next step's wgmma, so the turn wait overlaps tensor work.
// v3 (on by default, OPENDNN_SDPA_BWD_V3=0 turns it off): the fused
//   schedule with bulk dQ adds (a warpgroup parks its 64 x kDqN dQ values in shared memory in the
//   workspace's own layout and one thread adds them with a single bulk reduction, cp.reduce.async.bulk
//   .add.f32 of 8/16 KiB, instead of 128 threads issuing 8-16 16-byte red.add each; the turn order is
//   unchanged, so the sums keep their fixed order), and the next item's loads issued after the T1/T2
//   wgmma instead of before. Same arithmetic as v2's fused schedule.
// v4 (on by default where TMA can describe the tensors, alone or with v3; OPENDNN_SDPA_BWD_V4=0 turns it off):
//   the fused schedule (v2's dQ adds, or v3's bulk ones) with a producer warp. 384 threads: warpgroup 0
//   gives its registers away (setmaxnreg 24) and one warp of it loads, the two consumer warpgroups
//   (setmaxnreg 240) compute exactly as before. The producer's lane 0 loads K/V once and then the Q/dO
//   tiles of each step by TMA into the kStages ring; its 32 lanes load the step's LSE/D rows with
//   plain loads and store them next to the tile; a stage is full once the TMA bytes have landed and
//   all 32 lanes have arrived, and empty once each of the 8 consumer warps has finished the step's
//   wgmma. So no CTA barrier and no cp.async remain in the loop; the consumers meet only where dQ
//   needs both warpgroups' dS (one 256-thread named barrier per step, as before), and dS is double
//   buffered, which makes that barrier also the proof that the other buffer is free. With turns on
//   (the default; a.v4_turns) the two warpgroups issue their T1/T2 wgmma alternately (two named
//   barriers, as in sdpa_fwd_v2.cuh), so one warpgroup's P/dS runs under the other's GEMMs.
//   v4 with V3: v3's bulk dQ adds move to two dQ writer warps of the producer warpgroup (one per
//   consumer warpgroup): a consumer parks its block (v3's layout) and arrives on an mbarrier, the
//   writer waits for the block's turn, adds it with one bulk reduction and frees the area, so the turn
//   wait and the reduction's latency leave the consumers' critical path (they wait only if the writer
//   has not finished step idx - 1's block when step idx's is ready to park). Same order of the sums.
//   The 4-D TMA view reads rows past Sq/Skv as zeros (v2 zero-fills them), but cannot zero padded rows
//   of per-batch lengths: those problems (and THD, and pointers TMA rejects) run the fused kernel.
//   Turn order and deadlock freedom: a CTA only ever waits for CTAs of lower block index of its own
//   (head, batch), so the earliest unfinished CTA never waits and all finish, given that CTAs are
//   dispatched in block order (what CUDA does; the stream-K and FlashAttention-3 style reductions
//   rely on it too; not a documented guarantee). Under a right bound (causal) key tile n + 1 reaches
//   each query tile two steps before tile n, so the order is descending key tiles and the grid runs
//   them last-first; without one all tiles reach a query tile at the same step and the order is
//   ascending (CTA n then waits about n turn latencies once, at its first tile).
//   Rotating the loop of v4 with V3 (the next step's T1 issued behind this step's dQ wgmma, the dQ park
//   under it) ran at 0.955-1.002x this schedule (H200, B8 S2048 bf16) and was removed.
// The same shared-memory tile of U (W) serves as the K-major B operand of T1 (T2) and as the
// MN-major B operand of acc1 (acc2): both views give (row, col) the same swizzled address.
// Deterministic: every accumulator sums its terms in one fixed order, so the results are bitwise
// reproducible. Only d_qk == d_v in {64, 128}: the fp32 dK and dV accumulators of d256 do not fit.
#pragma once

#include <cute/tensor.hpp>
#include <cute/atom/mma_traits_sm90_gmma.hpp>
#include <cutlass/arch/barrier.h>
#include <cutlass/numeric_types.h>

#include "engines/cuda/sdpa/sdpa_bwd_main.cuh"
#include "engines/cuda/sdpa/sdpa_fwd_v2.cuh"

namespace opendnn::cuda::sdpa::bwd2 {

constexpr int kThreads = 256;  // two consumer warpgroups, no producer: all threads stage by cp.async
constexpr int kRes = 128;      // resident rows of a CTA
constexpr int kStep = 64;      // streamed rows per step
// Ring depth: tile idx + 2 loads while idx computes, into the slot idx - 1 used, which every thread
// has finished with once it passes step idx's barrier: one CTA barrier per step.
constexpr int kStages = 3;
// v4: a producer warpgroup before the two consumer warpgroups; named barrier ids of the consumers'
// turns (1: dS of both warpgroups written, 2-3: per-warpgroup dQ adds).
constexpr int kV4Threads = 384;
constexpr int kTurnBar = 4;

template <class T, int kD>
struct Config {
  using R = cute::Int<kRes>;
  using N = cute::Int<kStep>;
  using D = cute::Int<kD>;
  // Fused dQ: each warpgroup computes half of the dQ tile's columns. The resident K tile doubles as
  // the MN-major B operand of dQ = dS^T K, and a half of its columns must be a whole number of
  // swizzle atoms there: 128-byte atoms (64 columns) for d128, 64-byte atoms (32 columns) for d64.
  static constexpr int kDqN = kD / 2;
  using DqN = cute::Int<kDqN>;
  using ResAtomK = std::conditional_t<kDqN % 64 == 0, cute::GMMA::Layout_K_SW128_Atom<T>, cute::GMMA::Layout_K_SW64_Atom<T>>;
  using ResAtomMN = std::conditional_t<kDqN % 64 == 0, cute::GMMA::Layout_MN_SW128_Atom<T>, cute::GMMA::Layout_MN_SW64_Atom<T>>;
  using SmemRes = decltype(cute::tile_to_shape(ResAtomK{}, cute::Shape<R, D>{}));
  using SmemStr = decltype(cute::tile_to_shape(cute::GMMA::Layout_K_SW128_Atom<T>{}, cute::Shape<N, D, cute::Int<kStages>>{}));
  using SmemStrT = decltype(cute::tile_to_shape(cute::GMMA::Layout_MN_SW128_Atom<T>{}, cute::Shape<D, N, cute::Int<kStages>>{},
                                                cute::Step<cute::_2, cute::_1, cute::_3>{}));
  using MmaT = WgmmaSS<T, N, D>;
  using MmaAcc = WgmmaRS<T, D, N>;
  // dS as written from the T accumulators, (128 keys, 64 queries), and as the MN-major A operand of
  // dQ = dS^T K, (64 queries, 128 keys): one address per element in both views, as with SmemStrT.
  using SmemDs = decltype(cute::tile_to_shape(cute::GMMA::Layout_K_SW128_Atom<T>{}, cute::Shape<R, N>{}));
  using SmemDsA = decltype(cute::tile_to_shape(cute::GMMA::Layout_MN_SW128_Atom<T>{}, cute::Shape<N, R>{},
                                               cute::Step<cute::_2, cute::_1>{}));
  // kDqN columns of the resident K tile as the MN-major B operand (columns, keys) of dQ = dS^T K.
  using SmemResT = decltype(cute::tile_to_shape(ResAtomMN{}, cute::Shape<DqN, R>{}, cute::Step<cute::_2, cute::_1>{}));
  using MmaDq = decltype(cute::make_tiled_mma(
      cute::GMMA::ss_op_selector<T, T, float, cute::Shape<N, DqN, R>, cute::GMMA::Major::MN, cute::GMMA::Major::MN>(),
      cute::Layout<cute::Shape<cute::_1, cute::_1, cute::_1>>{}));
  struct Smem {
    alignas(1024) T x[cute::cosize_v<SmemRes>];
    alignas(1024) T y[cute::cosize_v<SmemRes>];
    alignas(1024) T u[cute::cosize_v<SmemStr>];
    alignas(1024) T w[cute::cosize_v<SmemStr>];
    alignas(1024) T ds[cute::cosize_v<SmemDs>];      // fused dQ only
    // Fused dQ only: each thread's dQ values of the previous step (16-byte groups, thread-minor), added
    // to the workspace while the next step's wgmma run.
    float4 dq_parked[kD / 16][kThreads];
    float lse[kStages][kRes], delta[kStages][kRes];  // log2-scaled LSE and D per stage (dQ: resident rows in [0])
  };
  static constexpr int kSmemBytes = int(sizeof(Smem)) + 1024;  // + alignment of the dynamic base
  static_assert(kSmemBytes <= 227 * 1024, "shared memory of one CTA exceeds the H200's 227 KiB");
  // v4: TMA boxes of the resident tiles are one swizzle atom wide (64 columns, 32 at d64).
  static constexpr int kResBoxCols = kDqN % 64 == 0 ? 64 : 32;
  struct SmemV4 {
    alignas(1024) T x[cute::cosize_v<SmemRes>];
    alignas(1024) T y[cute::cosize_v<SmemRes>];
    alignas(1024) T u[cute::cosize_v<SmemStr>];
    alignas(1024) T w[cute::cosize_v<SmemStr>];
    alignas(1024) T ds[2 * cute::cosize_v<SmemDs>];  // two buffers: step idx writes idx % 2
    float4 dq_parked[kD / 16][kThreads];
    float lse[kStages][kStep], delta[kStages][kStep];  // the streamed (query) rows' log2-scaled LSE and D
    cutlass::arch::ClusterTransactionBarrier res_full, full[kStages];
    cutlass::arch::ClusterBarrier empty[kStages];
    cutlass::arch::ClusterBarrier dq_full[2], dq_empty[2];  // v4 with v3: a consumer warpgroup's parked dQ
  };
  static constexpr int kSmemBytesV4 = int(sizeof(SmemV4)) + 1024;
  static_assert(kSmemBytesV4 <= 227 * 1024, "v4's shared memory exceeds the H200's 227 KiB");
};

// Copies rows [row0, row0 + ROWS) of one head (row stride rs) into the (ROWS, D) swizzled view dst;
// rows at or past `valid` become zeros. 16-byte cp.async where aligned, element copies otherwise.
template <class T, int ROWS, int D, class Dst>
__device__ __forceinline__ void stage(Dst dst, const T* src, int64_t rs, int64_t row0, int64_t valid) {
  constexpr int kChunks = D / 8;
  for (int idx = int(threadIdx.x); idx < ROWS * kChunks; idx += kThreads) {
    const int r = idx / kChunks, c = (idx % kChunks) * 8;
    T* d = &dst(r, c);  // 8 consecutive columns stay contiguous under the 128-byte swizzle
    if (row0 + r >= valid) {
      *reinterpret_cast<uint4*>(d) = make_uint4(0, 0, 0, 0);
      continue;
    }
    const T* s = src + (row0 + r) * rs + c;
    if ((reinterpret_cast<uintptr_t>(s) & 15) == 0) {
      asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(uint32_t(__cvta_generic_to_shared(d))), "l"(s));
    } else {
      for (int e = 0; e < 8; ++e) d[e] = s[e];
    }
  }
}

// Stores an fp32 accumulator (times mul) of the (kRes, D) tile to rows row0.. (< rows) of one head.
template <class T, class Acc, class Coord>
__device__ __forceinline__ void store_acc(T* base, int64_t rs, const Acc& acc, const Coord& c, int64_t row0,
                                          int64_t rows, float mul) {
  using namespace cute;
  static_assert(decltype(size(acc))::value % 2 == 0, "accumulator values come in column pairs");
  CUTE_UNROLL
  for (int e = 0; e < size(acc); e += 2) {
    const int64_t r = row0 + get<0>(c(e));
    const int col = get<1>(c(e));
    if (r >= rows) continue;
    T* dst = base + r * rs + col;
    const T pair[2] = {T(acc(e) * mul), T(acc(e + 1) * mul)};
    // Values e, e + 1 are columns col, col + 1 of one row (the wgmma accumulator layout).
    if ((reinterpret_cast<uintptr_t>(dst) & 3) == 0) {
      uint32_t word;
      memcpy(&word, pair, 4);
      *reinterpret_cast<uint32_t*>(dst) = word;
    } else {
      dst[0] = pair[0];
      dst[1] = pair[1];
    }
  }
}

// Key tiles [lo, hi] whose dK/dV loop (bounds in bwd_kernel) visits the query tile at row m0: the
// contributors to that tile's dQ. hi(n) > m0 gives lo, first(n) <= m0 and n * kRes < skv give hi;
// both bounds of the loop grow with n, so the set is an interval. Only called with skv >= 1.
// kResRows: the key tile height (the d256 kernel, sdpa_bwd_v2_d256.cuh, keeps 64 resident rows).
struct KeyTiles {
  int64_t lo, hi;
};
template <int kResRows = kRes>
__device__ __forceinline__ KeyTiles contributors(const bwd::Mask& m, int64_t m0) {
  KeyTiles t{0, (m.skv - 1) / kResRows};
  if (m.has_left) {  // m0 < n*kResRows + kResRows - 1 - off + left
    const int64_t x = m0 - (kResRows - 2) + m.off - m.left;
    if (x > 0) t.lo = (x + kResRows - 1) / kResRows;
  }
  if (m.has_right) {  // floor(max(0, n*kResRows - off - right) / kStep) * kStep <= m0
    const int64_t y = m0 + kStep - 1 + m.off + m.right;
    const int64_t h = y < 0 ? -1 : y / kResRows;
    t.hi = h < t.hi ? h : t.hi;
  }
  return t;
}

__device__ __forceinline__ uint64_t global_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %globaltimer;\n" : "=l"(t));
  return t;
}
// Spins until *p == value, then orders later accesses after it (relaxed loads and one fence: an
// ld.acquire per iteration would invalidate L1 on every poll). A turn that never comes (it cannot,
// with CTAs dispatched in block order) ends the wait after 20 s with a NaN in *poison: a visibly
// wrong dQ instead of a hung process (a trap here would serialize the wgmma in flight).
__device__ __forceinline__ void wait_until_equal(const int* p, int value, float* poison) {
  int v;
  asm volatile("ld.relaxed.gpu.global.b32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
  if (v != value) {
    const uint64_t t0 = global_ns();
    do {
      asm volatile("ld.relaxed.gpu.global.b32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
      if (global_ns() - t0 > 20000000000ull) {
        atomicExch(poison, __int_as_float(0x7fffffff));
        break;
      }
    } while (v != value);
  }
  asm volatile("fence.acq_rel.gpu;\n" ::: "memory");
}
// Publishes everything the CTA's threads wrote before the preceding barrier, then counts one turn.
__device__ __forceinline__ void release_increment(int* p) {
  asm volatile("fence.acq_rel.gpu;\nred.relaxed.gpu.global.add.s32 [%0], 1;\n" ::"l"(p) : "memory");
}
// 16-byte fp32 reduction without a returned value (atomicAdd(float4*) compiles to ATOMG, which does).
__device__ __forceinline__ void red_add4(float* p, float4 v) {
  asm volatile("red.global.add.v4.f32 [%0], {%1, %2, %3, %4};\n" ::"l"(p), "f"(v.x), "f"(v.y), "f"(v.z), "f"(v.w)
               : "memory");
}
__device__ __forceinline__ void named_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
__device__ __forceinline__ void named_arrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
// v4's ring waits: true once the barrier's phase of this parity has completed, false after ~1 s (every
// legitimate wait is microseconds). A broken ring then yields NaN results instead of a hung GPU: the
// caller poisons what it produces and stops waiting.
__device__ __forceinline__ bool ring_wait(const void* bar, uint32_t parity) {
  const uint32_t addr = cute::cast_smem_ptr_to_uint(bar);
  auto done = [&] {
    uint32_t ok;
    asm volatile(
        "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(ok)
        : "r"(addr), "r"(parity)
        : "memory");
    return ok != 0;
  };
  if (done()) return true;
  const uint64_t t0 = global_ns();
  while (global_ns() - t0 < 1000000000ull)
    if (done()) return true;
  return false;
}
// The producer warp's walk over its items (query tiles first, then the group's heads): from the ring's
// second round on it waits for the stage to be free, lane 0 issues the stage's TMA loads (issue(stage,
// first query, head within the group)), each lane stores its rows (lane, lane + 32, ...) of the stage's
// log2-scaled LSE and D (0 past sq), and arrives. A timed-out wait poisons LSE with NaN, so that every
// result does instead of the GPU hanging. Shared by the d64/d128 and d256 producers.
template <int kStages, int kStep, class Smem, class Params, class Issue>
__device__ __forceinline__ void produce_query_items(Smem& sm, const Params& p, const float* lse0, const float* d0,
                                                    int total, int first, int nt, int sq, int lane, Issue issue) {
  int st = 0, tile_i = 0, head_i = 0;
  uint32_t phase = 0;
  bool broken = false;
  for (int idx = 0; idx < total; ++idx) {
    if (idx >= kStages && !broken) broken = !ring_wait(&sm.empty[st], phase ^ 1);
    const int s0 = first + tile_i * kStep;
    if (lane == 0) issue(st, s0, head_i);
    const float* lb = lse0 + head_i * p.lse_stride[1];
    const float* db = d0 + head_i * p.sq;
    CUTE_UNROLL
    for (int k = 0; k < kStep / 32; ++k) {
      const int r = lane + 32 * k, i = s0 + r;
      sm.lse[st][r] = broken ? __int_as_float(0x7fffffff) : i < sq ? lb[i * p.lse_stride[2]] * bwd::kLog2e : 0.f;
      sm.delta[st][r] = i < sq ? db[i] : 0.f;
    }
    sm.full[st].arrive();  // releases this lane's LSE/D stores to the consumers' wait
    if (++tile_i == nt) tile_i = 0, ++head_i;
    if (++st == kStages) st = 0, phase ^= 1;
  }
}

// Bulk dQ: the workspace holds each (b, h, query tile, warpgroup) block of 64 rows x n fp32 columns
// contiguously, 16-byte groups of a row rotated by XOR with row % 8, so that shared memory (which a bulk
// copy mirrors byte for byte) takes the accumulator's float2 stores in two wavefronts per warp instead
// of eight. Offset of (row r, column c) inside such a block:
__host__ __device__ __forceinline__ int bulk_dq_offset(int r, int c, int n) {
  return r * n + ((((c >> 2) ^ (r & 7)) << 2) | (c & 3));
}
// Stores a dQ accumulator (the m64nN wgmma layout; cDq: its identity partition) into a block of bulk_dq_offset
// layout with n columns at `block` (shared memory). Addresses without a register per store (ptxas kept ~16
// of them live across the loop): this thread's pairs are (r0 + dr, c0 + 8j), dr in {0, 8}, with r0 % 8 == x,
// c0 % 8 in {0, 2, 4, 6}, so bulk_dq_offset = base + 8 ((j % 4) ^ (x / 2)) + dr n + 8 (j - j % 4): four
// bases, for any n (checked on the host against bulk_dq_offset for every lane, warp and pair at n = 32 and
// 64). Shared by v3 (sdpa_bwd_v2.cuh) and d256 v4 (sdpa_bwd_v2_d256.cuh, n = 128).
template <int n, class Dq, class Coord>
__device__ __forceinline__ void park_dq_block(float* block, const Dq& dq, const Coord& cDq) {
  using cute::get;
  const int r0 = get<0>(cDq(0)), c0 = get<1>(cDq(0)), x = r0 & 7;
  float* const base = block + r0 * n + 4 * (((c0 >> 2) & 1) ^ (x & 1)) + (c0 & 3);
  float* const b4[4] = {base + 8 * (0 ^ (x >> 1)), base + 8 * (1 ^ (x >> 1)), base + 8 * (2 ^ (x >> 1)),
                        base + 8 * (3 ^ (x >> 1))};
  CUTE_UNROLL
  for (int e = 0; e < cute::size(dq); e += 2) {  // values e, e + 1: columns c, c + 1 of one row
    const int dr = get<0>(cDq(e)) - r0, j = (get<1>(cDq(e)) - c0) >> 3;
    *reinterpret_cast<float2*>(b4[j & 3] + dr * n + 8 * (j & ~3)) = make_float2(dq(e), dq(e + 1));
  }
}
// dst (+)= the `bytes` bytes at shared address src through the async proxy: a plain bulk copy for the
// first contributor, an fp32 add reduction for the others, as one bulk group (bulk_dq_put waits for it).
__device__ __forceinline__ void bulk_dq_issue(float* dst, uint32_t src, int bytes, bool add) {
  if (add)
    asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;\n" ::"l"(dst), "r"(src), "r"(bytes)
                 : "memory");
  else
    asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;\n" ::"l"(dst), "r"(src), "r"(bytes) : "memory");
  asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
}
// bulk_dq_issue, then returns once the writes are performed.
__device__ __forceinline__ void bulk_dq_put(float* dst, uint32_t src, int bytes, bool add) {
  bulk_dq_issue(dst, src, bytes, add);
  asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory");
}
__device__ __forceinline__ void fence_proxy_async_global() { asm volatile("fence.proxy.async.global;\n" ::: "memory"); }

// Where the fused kernel accumulates dQ (bwd_v2_layout): fp32 [B,Hq,mt*64,D] and two counters per
// (b, h, query tile).
struct DqAccum {
  float* dq = nullptr;
  int* counters = nullptr;
  int64_t mt = 0;
};

template <class T, int kD, bool kDkDv, bool kFuse, bool kV3 = false, bool kV4 = false>
__global__ void __launch_bounds__(kV4 ? kV4Threads : kThreads, 1)
    bwd_kernel(const BwdProblem a, const float* __restrict__ delta, const DqAccum acc,
               const __grid_constant__ BwdV4Descs tma) {
  using namespace cute;
  using Cfg = Config<T, kD>;
  using Smem = std::conditional_t<kV4, typename Cfg::SmemV4, typename Cfg::Smem>;
  using bwd::kLog2e;
  const Problem& p = a.p;
  extern __shared__ char smem_raw[];
  const uint32_t raw_addr = cute::cast_smem_ptr_to_uint(smem_raw);
  auto& sm = *reinterpret_cast<Smem*>(smem_raw + ((1024u - (raw_addr & 1023u)) & 1023u));

  // Under a right bound the early key tiles (dK/dV) and the late query tiles (dQ) have the most
  // work: the dQ grid runs in reverse so the heavy CTAs start first and the light ones fill the tail.
  static_assert(kDkDv || !kFuse, "dQ is fused into the dK/dV pass");
  static_assert(kFuse || !kV3, "v3 is the fused schedule");
  static_assert(kFuse || !kV4, "v4 is the fused schedule");
  // Fused dQ under a right bound: the turn order of the dQ tiles is descending key tiles, and a CTA
  // may only wait for CTAs launched before it, so the grid runs key tiles last-first.
  const bool descending = kFuse && a.p.has_right;
  const unsigned tile = (!kDkDv && a.p.has_right) || descending ? gridDim.x - 1 - blockIdx.x : blockIdx.x;
  const int64_t b = blockIdx.z, r0 = int64_t(tile) * kRes;
  const bwd::Mask m = bwd::mask_of(p, b);
  const float scale = bwd::scale_of(p), sl2 = scale * kLog2e;
  const int64_t group = p.hq / p.hk;
  // Resident head: the KV head (dK/dV) or the query head (dQ); hk/hv: the KV heads streamed by dQ.
  const int64_t hr = blockIdx.y;
  const int64_t hk = kDkDv ? hr : hr / group, hv = kDkDv ? hr : hr / (p.hq / p.hv);

  // Streamed rows that interact with some resident row, rounded down to a whole step.
  int64_t lo, hi;
  if constexpr (kDkDv) {  // resident keys [r0, r0 + kRes), streamed queries
    lo = m.has_right ? r0 - m.off - m.right : 0;
    hi = m.has_left ? r0 + kRes - 1 - m.off + m.left : m.sq;
    hi = hi > m.sq ? m.sq : hi;
    if (r0 >= m.skv) hi = 0;
  } else {  // resident queries, streamed keys
    lo = m.has_left ? r0 + m.off - m.left + 1 : 0;
    hi = m.has_right ? r0 + kRes + m.off + m.right : m.skv;
    hi = hi > m.skv ? m.skv : hi;
    if (r0 >= m.sq) hi = 0;
  }
  lo = lo < 0 ? 0 : lo;
  const int64_t first = (lo / kStep) * kStep;
  const int64_t ntiles = hi > first ? (hi - first + kStep - 1) / kStep : 0;
  const int64_t total = kDkDv ? group * ntiles : ntiles;

  if constexpr (kV4) {
    if (threadIdx.x == 0) {
      sm.res_full.init(1);
      for (int s = 0; s < kStages; ++s) {
        sm.full[s].init(32);  // the producer warp's lanes, once their LSE/D rows are stored
        sm.empty[s].init(8);  // one arrival per consumer warp
      }
      for (int w = 0; w < 2; ++w) {
        sm.dq_full[w].init(128);  // every thread of the consumer warpgroup, once its values are parked
        sm.dq_empty[w].init(1);   // the dQ writer, once the bulk reduction has read them
      }
      cutlass::arch::fence_barrier_init();
    }
    __syncthreads();  // the only CTA-wide barrier
    if (threadIdx.x < 128) {
      cutlass::arch::warpgroup_reg_dealloc<24>();
      if constexpr (kV3) {
        // dQ writers (v4 with v3): lane 0 of warp 1 (2) adds consumer warpgroup 0's (1's) parked dQ of
        // every step to the workspace in its turn, as add_dq_bulk does in v3, so the turn wait, the
        // bulk reduction's latency and the fences leave the consumers' critical path: a consumer only
        // waits when the writer has not finished the previous step's block by the end of this step.
        if (threadIdx.x == 32 || threadIdx.x == 64) {
          const int w = threadIdx.x == 32 ? 0 : 1;
          const uint32_t park = cute::cast_smem_ptr_to_uint(&sm.dq_parked[0][0]) + uint32_t(w * kStep * Cfg::kDqN * 4);
          // Block (head, query tile) of item idx: slot (head_i * mt + first / 64 + tile_i) * 2 + w.
          const int64_t slot0 = ((b * p.hq + hk * group) * acc.mt + first / kStep) * 2 + w;
          int tile_i = 0, head_i = 0;
          uint32_t phase = 0;
          bool broken = false;  // a parked block that never came: keep the turns going (others wait on them)
          for (int idx = 0; idx < int(total); ++idx) {
            if (!broken) broken = !ring_wait(&sm.dq_full[w], phase);
            const int64_t slot = slot0 + (head_i * acc.mt + tile_i) * 2;
            int* counter = acc.counters + slot;
            float* dst = acc.dq + slot * (kStep * Cfg::kDqN);
            const KeyTiles kt = contributors(m, first + tile_i * kStep);
            const int turn = int(descending ? kt.hi - int64_t(tile) : int64_t(tile) - kt.lo);
            wait_until_equal(counter, turn, dst);
            fence_proxy_async_global();  // the bulk add comes after the previous contributor's
            bulk_dq_put(dst, park, kStep * Cfg::kDqN * int(sizeof(float)), turn != 0);
            fence_proxy_async_global();  // ... and is performed before the release
            release_increment(counter);
            sm.dq_empty[w].arrive();
            if (++tile_i == int(ntiles)) tile_i = 0, ++head_i;
            phase ^= 1;
          }
          return;
        }
      }
      if (threadIdx.x >= 32) return;
      // Producer warp. TMA views (sdpa_bwd_tma.cu): 0 Q, 1 dO, 2 K, 3 V; a tile is column blocks of
      // `cols` (one swizzle span) stacked down its rows, as the shared-memory layouts are.
      const int lane = int(threadIdx.x);
      const auto* maps = reinterpret_cast<const CUtensorMap*>(tma.bytes);
      auto load = [&](int view, cutlass::arch::ClusterTransactionBarrier& bar, T* dst, int cols, int rows, int64_t row0,
                      int64_t head) {
        for (int c = 0; c < kD; c += cols)
          SM90_TMA_LOAD_4D::copy(&maps[view], reinterpret_cast<uint64_t*>(&bar), uint64_t(TMA::CacheHintSm90::EVICT_NORMAL),
                                 dst + c * rows, c, int(row0), int(head), int(b));
      };
      if (total > 0 && lane == 0) {
        sm.res_full.arrive_and_expect_tx(uint32_t(2 * kRes * kD * sizeof(T)));
        load(2, sm.res_full, sm.x, Cfg::kResBoxCols, kRes, r0, hr);
        load(3, sm.res_full, sm.y, Cfg::kResBoxCols, kRes, r0, hr);
      }
      // Items walk the group's query heads, each over the query tiles first.. (32-bit: the producer
      // has 24 registers; sequences are below 2^31 rows, bwd_v4_encode).
      const int h0 = int(hk * group), nt = int(ntiles), sq = int(m.sq);
      const float* lse0 = p.lse + p.lse_base(b) + h0 * p.lse_stride[1];
      const float* d0 = delta + (b * p.hq + h0) * p.sq;
      produce_query_items<kStages, kStep>(sm, p, lse0, d0, int(total), int(first), nt, sq, lane, [&](int st, int s0, int head_i) {
        sm.full[st].expect_transaction(uint32_t(2 * kStep * kD * sizeof(T)));
        load(0, sm.full[st], sm.u + st * (kStep * kD), 64, kStep, s0, h0 + head_i);
        load(1, sm.full[st], sm.w + st * (kStep * kD), 64, kStep, s0, h0 + head_i);
      });
      return;
    }
    cutlass::arch::warpgroup_reg_alloc<240>();
  }

  Tensor sX = make_tensor(make_smem_ptr(sm.x), typename Cfg::SmemRes{});
  Tensor sY = make_tensor(make_smem_ptr(sm.y), typename Cfg::SmemRes{});
  Tensor sU = make_tensor(make_smem_ptr(sm.u), typename Cfg::SmemStr{});
  Tensor sW = make_tensor(make_smem_ptr(sm.w), typename Cfg::SmemStr{});
  Tensor sUt = make_tensor(make_smem_ptr(sm.u), typename Cfg::SmemStrT{});
  Tensor sWt = make_tensor(make_smem_ptr(sm.w), typename Cfg::SmemStrT{});

  const TokenTensor& tx = kDkDv ? p.k : p.q;
  const TokenTensor& ty = kDkDv ? p.v : a.dout;
  const TokenTensor& tu = kDkDv ? p.q : p.k;
  const TokenTensor& tw = kDkDv ? a.dout : p.v;
  const int64_t res_valid = kDkDv ? m.skv : m.sq, str_valid = kDkDv ? m.sq : m.skv;
  if constexpr (!kV4) {
    const T* xb = static_cast<const T*>(tx.ptr) + p.base(tx, b, !kDkDv) + hr * tx.stride[1];
    const T* yb = static_cast<const T*>(ty.ptr) + p.base(ty, b, !kDkDv) + hr * ty.stride[1];
    stage<T, kRes, kD>(sX, xb, tx.stride[2], r0, res_valid);
    stage<T, kRes, kD>(sY, yb, ty.stride[2], r0, res_valid);
    if (!kDkDv && threadIdx.x < kRes) {
      const int64_t i = r0 + threadIdx.x;
      const float* lb = p.lse + p.lse_base(b) + hr * p.lse_stride[1];
      sm.lse[0][threadIdx.x] = i < m.sq ? lb[i * p.lse_stride[2]] * kLog2e : 0.f;
      sm.delta[0][threadIdx.x] = i < m.sq ? delta[(b * p.hq + hr) * p.sq + i] : 0.f;
    }
    bwd::staged_commit();
  }
  // Streamed item idx into stage buf (one cp.async commit group; an empty one past the end, so
  // the group count, and with it the wait below, is the same on every step).
  auto stage_item = [&](int64_t idx, int buf) {
    if (idx >= total) {
      bwd::staged_commit();
      return;
    }
    const int64_t h = kDkDv ? hk * group + idx / ntiles : 0;
    const int64_t s0 = first + (kDkDv ? idx % ntiles : idx) * kStep;
    const T* ub = static_cast<const T*>(tu.ptr) + p.base(tu, b, kDkDv) + (kDkDv ? h : hk) * tu.stride[1];
    const T* wb = static_cast<const T*>(tw.ptr) + p.base(tw, b, kDkDv) + (kDkDv ? h : hv) * tw.stride[1];
    stage<T, kStep, kD>(sU(_, _, buf), ub, tu.stride[2], s0, str_valid);
    stage<T, kStep, kD>(sW(_, _, buf), wb, tw.stride[2], s0, str_valid);
    if (kDkDv && threadIdx.x < kStep) {
      const int64_t i = s0 + threadIdx.x;
      const float* lb = p.lse + p.lse_base(b) + h * p.lse_stride[1];
      sm.lse[buf][threadIdx.x] = i < m.sq ? lb[i * p.lse_stride[2]] * kLog2e : 0.f;
      sm.delta[buf][threadIdx.x] = i < m.sq ? delta[(b * p.hq + h) * p.sq + i] : 0.f;
    }
    bwd::staged_commit();
  };

  const int tid = int(threadIdx.x) - (kV4 ? 128 : 0);  // over the two consumer warpgroups
  typename Cfg::MmaT mma_t;
  typename Cfg::MmaAcc mma_a;
  auto thr_t = mma_t.get_thread_slice(tid);
  auto thr_a = mma_a.get_thread_slice(tid);
  using TShape = Shape<typename Cfg::R, typename Cfg::N>;
  using AShape = Shape<typename Cfg::R, typename Cfg::D>;
  Tensor tXr = thr_t.make_fragment_A(thr_t.partition_A(sX));
  Tensor tYr = thr_t.make_fragment_A(thr_t.partition_A(sY));
  Tensor tUr = thr_t.make_fragment_B(thr_t.partition_B(sU));
  Tensor tWr = thr_t.make_fragment_B(thr_t.partition_B(sW));
  Tensor tUtr = thr_a.make_fragment_B(thr_a.partition_B(sUt));
  Tensor tWtr = thr_a.make_fragment_B(thr_a.partition_B(sWt));
  Tensor tPr = thr_a.partition_fragment_A(make_tensor(static_cast<T*>(nullptr), make_layout(TShape{}, LayoutRight{})));
  Tensor tdSr = make_fragment_like(tPr);
  Tensor t1 = partition_fragment_C(mma_t, TShape{});
  Tensor t2 = partition_fragment_C(mma_t, TShape{});
  Tensor acc1 = partition_fragment_C(mma_a, AShape{});
  Tensor acc2 = partition_fragment_C(mma_a, AShape{});
  static_assert(decltype(size(tPr))::value == decltype(size(t1))::value, "P and T1 fragments differ");
  Tensor cT = thr_t.partition_C(make_identity_tensor(TShape{}));
  Tensor cA = thr_a.partition_C(make_identity_tensor(AShape{}));
  clear(acc1);
  clear(acc2);

  // Fused dQ (unused otherwise; the compiler drops it): the dS tile, the dQ wgmma of this thread's
  // warpgroup over its kDqN columns, and the turn-ordered accumulation into the workspace.
  const int wg = tid / 128, wt = tid % 128;
  // This thread's T accumulator elements are (rb + dr, cb + dc), dr in {0, 8}, dc % 8 in {0, 1}.
  const int rb = get<0>(cT(0)), cb = get<1>(cT(0));
  // dS goes to shared memory by explicit 32-bit st.shared (a generic pointer store otherwise).
  const uint32_t ds_row = cute::cast_smem_ptr_to_uint(sm.ds) + uint32_t(rb * 128 + cb * 2);
  const uint32_t ds_xor = uint32_t(rb % 8) << 4;
  typename Cfg::MmaDq mma_dq;
  auto thr_dq = mma_dq.get_thread_slice(wt);
  using DqShape = Shape<typename Cfg::N, typename Cfg::DqN>;
  const int dq_col0 = wg * Cfg::kDqN;
  Tensor sDsA = make_tensor(make_smem_ptr(sm.ds), typename Cfg::SmemDsA{});
  // Columns dq_col0.. of the MN-major view of K start whole atom columns (kRes * atom width
  // elements each) into the tile: kRes * dq_col0 elements.
  Tensor sKt = make_tensor(make_smem_ptr(sm.x + dq_col0 * kRes), typename Cfg::SmemResT{});
  Tensor tDsA = thr_dq.make_fragment_A(thr_dq.partition_A(sDsA));
  constexpr int kDsElems = cute::cosize_v<typename Cfg::SmemDs>;  // one dS buffer (v4 has two)
  Tensor tKt = thr_dq.make_fragment_B(thr_dq.partition_B(sKt));
  Tensor cDq = thr_dq.partition_C(make_identity_tensor(DqShape{}));
  // Adds this warpgroup's dQ columns of step idx (query tile s0 of head h) to the workspace once the
  // key tiles before this one in the tile's turn order have added theirs.
  // dQ of a step leaves the registers right after its wgmma (park_dq) and goes to the workspace
  // during the next step's wgmma (add_dq), so the turn wait, the adds and the fences overlap tensor
  // work. Accumulator values e..e+3 are (row r, columns c, c+1) and (row r+8, the same columns), with
  // c % 8 == 2 * (thread % 4); thread t ^ 1 holds columns c +- 2 of the same rows (checked on the host
  // against CuTe's partition for this MMA). The even thread gathers row r, the odd one row r + 8, four
  // contiguous columns each: one 16-byte add instead of two 8-byte ones. Each thread parks and later
  // reads back only its own groups, so parking needs no barrier.
  constexpr int kGroups = Cfg::kDqN * kStep / 128 / 4;  // 16-byte groups of a thread
  const bool even = (wt & 1) == 0;
  auto park_dq = [&](const auto& dq) {
    static_assert(decltype(size(dq))::value == 4 * kGroups, "accumulator values come in 2x2 groups");
    CUTE_UNROLL
    for (int k = 0; k < kGroups; ++k) {
      const int e = 4 * k;
      const float g0 = __shfl_xor_sync(0xffffffffu, even ? dq(e + 2) : dq(e), 1);
      const float g1 = __shfl_xor_sync(0xffffffffu, even ? dq(e + 3) : dq(e + 1), 1);
      sm.dq_parked[k][tid] = even ? make_float4(dq(e), dq(e + 1), g0, g1) : make_float4(g0, g1, dq(e + 2), dq(e + 3));
    }
  };
  // Adds the parked dQ columns of step idx (query tile s0 of head h) to the workspace once the key
  // tiles before this one in the tile's turn order have added theirs.
  auto add_dq = [&](int64_t idx, int64_t s0) {
    const int64_t h = hk * group + idx / ntiles;
    const int64_t bh = b * p.hq + h, mtile = s0 / kStep;
    int* counter = acc.counters + (bh * acc.mt + mtile) * 2 + wg;
    float* dst = acc.dq + (bh * acc.mt * kStep + s0) * kD + dq_col0;
    const KeyTiles kt = contributors(m, s0);
    const int turn = int(descending ? kt.hi - int64_t(tile) : int64_t(tile) - kt.lo);
    if (wt == 0) wait_until_equal(counter, turn, dst);
    named_sync(2 + wg, 128);
    CUTE_UNROLL
    for (int k = 0; k < kGroups; ++k) {
      const int e = 4 * k;
      const int r = get<0>(cDq(e)) + (even ? 0 : 8), c = get<1>(cDq(e)) - (even ? 0 : 2);
      const float4 v = sm.dq_parked[k][tid];
      float* d = dst + r * kD + c;
      if (turn == 0) *reinterpret_cast<float4*>(d) = v;  // the first contributor stores: no clearing needed
      else red_add4(d, v);  // one adder at a time (the counter), so the order of the sums is fixed
    }
    named_sync(2 + wg, 128);
    if (wt == 0) release_increment(counter);
  };

  // Bulk variant of park_dq / add_dq: this warpgroup's block of the parked area in the workspace layout.
  float* const bulk_park = reinterpret_cast<float*>(&sm.dq_parked[0][0]) + wg * (kStep * Cfg::kDqN);
  auto park_dq_bulk = [&](const auto& dq) {
    park_dq_block<Cfg::kDqN>(bulk_park, dq, cDq);
    cutlass::arch::fence_view_async_shared();  // generic writes, read by the bulk copy (async proxy)
  };
  auto add_dq_bulk = [&](int64_t idx, int64_t s0) {
    const int64_t h = hk * group + idx / ntiles;
    const int64_t bh = b * p.hq + h, mtile = s0 / kStep;
    int* counter = acc.counters + (bh * acc.mt + mtile) * 2 + wg;
    float* dst = acc.dq + ((bh * acc.mt + mtile) * 2 + wg) * (kStep * Cfg::kDqN);
    const KeyTiles kt = contributors(m, s0);
    const int turn = int(descending ? kt.hi - int64_t(tile) : int64_t(tile) - kt.lo);
    named_sync(2 + wg, 128);  // the warpgroup's values are parked
    if (wt == 0) {
      wait_until_equal(counter, turn, dst);
      fence_proxy_async_global();  // the bulk add comes after the previous contributor's, seen through the acquire
      bulk_dq_put(dst, cute::cast_smem_ptr_to_uint(bulk_park), kStep * Cfg::kDqN * int(sizeof(float)), turn != 0);
      fence_proxy_async_global();  // ... and is performed before the release that hands the turn on
      release_increment(counter);
    }
    named_sync(2 + wg, 128);  // the bulk copy has read the parked values: they may be overwritten
  };

  int64_t parked_s0 = 0;  // query tile of the parked dQ
  // v4 turns: warpgroup 0 issues first, so warpgroup 1 opens with one arrival on 0's barrier (0 takes
  // it back after the loop, leaving both barriers empty).
  const bool turns = kV4 && a.v4_turns;
  bool broken = false;  // v4: a ring wait timed out; dK/dV become NaN
  if constexpr (kV4) {
    if (turns && wg == 1) named_arrive(kTurnBar + 0, 256);
    if (total > 0) broken = !ring_wait(&sm.res_full, 0);
  } else {
    stage_item(0, 0);
    stage_item(1, 1);
  }
  for (int64_t idx = 0; idx < total; ++idx) {
    const int buf = int(idx % kStages);
    if constexpr (kV4) {
      if (!broken) broken = !ring_wait(&sm.full[buf], uint32_t((idx / kStages) & 1));  // TMA bytes landed, LSE/D stored
    } else {
      asm volatile("cp.async.wait_group 1;\n" ::);  // item idx (and the resident tile) landed
      // cp.async and zero-fill stores are generic-proxy writes; wgmma reads through the async proxy.
      cutlass::arch::fence_view_async_shared();
      __syncthreads();  // item idx visible to all; step idx - 1 finished everywhere (its slot is free)
      if constexpr (!kV3) stage_item(idx + 2, int((idx + 2) % kStages));
    }
    const int64_t s0 = first + (kDkDv ? idx % ntiles : idx) * kStep;

    if (turns) named_sync(kTurnBar + wg, 256);
    warpgroup_fence_operand(t1);
    warpgroup_fence_operand(t2);
    warpgroup_arrive();
    v2::issue(mma_t, tXr, tUr(_, _, _, buf), t1, false);
    warpgroup_commit_batch();
    v2::issue(mma_t, tYr, tWr(_, _, _, buf), t2, false);
    warpgroup_commit_batch();
    if (turns) named_arrive(kTurnBar + (wg ^ 1), 256);
    // v3: the next loads go out behind T1/T2 (another slot), so warps 0-1 wait for their LSE/D loads
    // while the tensor cores work instead of holding back the warpgroup's wgmma issue.
    if constexpr (kV3 && !kV4) stage_item(idx + 2, int((idx + 2) % kStages));

    // (i, j) = (i0 + qi, j0 + kj): the query and key of a T element; LSE/D of its query.
    const int64_t i0 = kDkDv ? s0 : r0, j0 = kDkDv ? r0 : s0;
    const bool full = m.covers(i0, i0 + (kDkDv ? kStep : kRes), j0, j0 + (kDkDv ? kRes : kStep));
    const float* sl = kDkDv ? sm.lse[buf] : sm.lse[0];
    const float* sd = kDkDv ? sm.delta[buf] : sm.delta[0];
    // bwd::Mask::visible in tile-local int32 terms: qi < qlim, kj < klim, dmin < kj - qi <= dmax, with
    // (qi, kj) = (qb + dq, kb + dk), (dq, dk) compile-time per element: every test compares a
    // constant with a per-step register. |kj - qi| < kRes, so bounds clamped to +-4 kRes keep every
    // outcome.
    auto clamp32 = [](int64_t v) { return int(v < -4 * kRes ? -4 * kRes : v > 4 * kRes ? 4 * kRes : v); };
    const int qb = kDkDv ? cb : rb, kb = kDkDv ? rb : cb;
    const int qlim = clamp32(m.sq - i0) - qb, klim = clamp32(m.skv - j0) - kb;
    const int dmax = (m.has_right ? clamp32(m.off + m.right - (j0 - i0)) : 4 * kRes) - (kb - qb);
    const int dmin = (m.has_left ? clamp32(m.off - m.left - (j0 - i0)) : -4 * kRes) - (kb - qb);
    const float* slq = sl + qb;
    const float* sdq = sd + qb;
    // P and dS of the step; masked = false (a tile the mask covers) compiles without any test.
    auto probs_and_grads = [&](auto masked) {
      warpgroup_wait<1>();
      warpgroup_fence_operand(t1);
      CUTE_UNROLL
      for (int e = 0; e < size(t1); ++e) {
        const int dr = get<0>(cT(e)) - rb, dc = get<1>(cT(e)) - cb;
        const int dq = kDkDv ? dc : dr, dk = kDkDv ? dr : dc;
        const float pv = v2::exp2_approx(t1(e) * sl2 - slq[dq]);
        if constexpr (decltype(masked)::value) {
          const bool vis = dq < qlim && dk < klim && dk - dq <= dmax && dk - dq > dmin;
          t1(e) = vis ? pv : 0.f;
        } else {
          t1(e) = pv;
        }
        tPr(e) = T(t1(e));
      }
      warpgroup_wait<0>();
      warpgroup_fence_operand(t2);
      CUTE_UNROLL
      for (int e = 0; e < size(t2); ++e) {
        const int dq = kDkDv ? get<1>(cT(e)) - cb : get<0>(cT(e)) - rb;
        tdSr(e) = T(t1(e) * (t2(e) - sdq[dq]));
      }
    };
    if (full) probs_and_grads(std::false_type{});
    else probs_and_grads(std::true_type{});
    // v4: dS buffer of this step (bytes); the other one may still be read by the previous dQ wgmma.
    const uint32_t ds_buf = kV4 && (idx & 1) ? uint32_t(kDsElems * sizeof(T)) : 0u;
    if constexpr (kFuse) {
      // Values e, e + 1 are columns c, c + 1 of one row: one 32-bit shared store per pair, at the
      // swizzled byte offset r * 128 + ((c / 8) ^ (r % 8)) * 16 + (c % 8) * 2 of the (128, 64) tile
      // (128-byte rows; r % 8 == rb % 8 and c % 8 == cb for even e; checked on the host against
      // CuTe's tensor for SmemDs).
      CUTE_UNROLL
      for (int e = 0; e < size(tdSr); e += 2) {
        const int dr = get<0>(cT(e)) - rb, dc = get<1>(cT(e)) - cb;
        const uint32_t lo = reinterpret_cast<const uint16_t&>(tdSr(e)), hi = reinterpret_cast<const uint16_t&>(tdSr(e + 1));
        const uint32_t addr = ds_row + ds_buf + uint32_t(dr * 128) + ((uint32_t(dc >> 3) << 4) ^ ds_xor);
        asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(addr), "r"(lo | (hi << 16)) : "memory");
      }
    }

    warpgroup_fence_operand(tPr);
    warpgroup_fence_operand(tdSr);
    warpgroup_fence_operand(acc1);
    if constexpr (kDkDv) warpgroup_fence_operand(acc2);
    warpgroup_arrive();
    if constexpr (kDkDv) v2::issue(mma_a, tPr, tWtr(_, _, _, buf), acc2, true);
    v2::issue(mma_a, tdSr, tUtr(_, _, _, buf), acc1, true);
    warpgroup_commit_batch();
    // Declared per step: its registers are free while T1/T2 are live.
    Tensor dq = partition_fragment_C(mma_dq, DqShape{});
    if constexpr (kFuse) {
      // dS of both warpgroups in shared memory (generic writes, read by wgmma through the async proxy).
      // v2: the previous step's dQ wgmma finished before this step's CTA barrier, so the tile was
      // free. v4: the other warpgroup wrote its dS of this step after its dQ wgmma of step idx - 1
      // had completed, the last reader of this step's buffer, so passing this barrier proves both.
      cutlass::arch::fence_view_async_shared();
      named_sync(1, kThreads);
      warpgroup_fence_operand(dq);
      warpgroup_arrive();
      if constexpr (kV4) {
        // This step's buffer, as descriptors from a runtime base (one code path: a branch between two
        // issues makes ptxas inject warpgroup.arrive around the accumulator).
        Tensor tDs = thr_dq.make_fragment_A(thr_dq.partition_A(
            make_tensor(make_smem_ptr(sm.ds + (idx & 1) * kDsElems), typename Cfg::SmemDsA{})));
        v2::issue(mma_dq, tDs, tKt, dq, false);
      } else {
        v2::issue(mma_dq, tDsA, tKt, dq, false);
      }
      warpgroup_commit_batch();
      if (idx > 0) {  // while this step's dV, dK and dQ wgmma run
        if constexpr (kV3 && !kV4) add_dq_bulk(idx - 1, parked_s0);
        else if constexpr (!kV3) add_dq(idx - 1, parked_s0);
      }
    }
    warpgroup_wait<0>();
    warpgroup_fence_operand(acc1);
    if constexpr (kDkDv) warpgroup_fence_operand(acc2);
    warpgroup_fence_operand(tPr);
    warpgroup_fence_operand(tdSr);
    // v4: this warp's reads of the stage (wgmma operands, LSE/D) are over.
    if constexpr (kV4)
      if (tid % 32 == 0) sm.empty[buf].arrive();
    if constexpr (kFuse) {
      warpgroup_fence_operand(dq);
      if constexpr (kV3 && kV4) {
        // The writer has read step idx - 1's block (its dq_empty phase idx - 1), so the area is free.
        // A plain wait: the writer's own waits are bounded, so it always gets here.
        if (idx > 0) sm.dq_empty[wg].wait(uint32_t((idx - 1) & 1));
        park_dq_bulk(dq);
        sm.dq_full[wg].arrive();
      } else if constexpr (kV3) {
        park_dq_bulk(dq);
      } else {
        park_dq(dq);
      }
      parked_s0 = s0;
    }
  }
  if constexpr (kFuse) {
    if constexpr (kV3) {
      if (!kV4 && total > 0) add_dq_bulk(total - 1, parked_s0);  // v4: the writer adds the last one
    } else {
      if (total > 0) add_dq(total - 1, parked_s0);
    }
  }
  if constexpr (kV4) {
    if (turns && wg == 0) named_sync(kTurnBar + 0, 256);  // takes back warpgroup 1's last arrival
    if (broken)
      for (int e = 0; e < size(acc1); ++e) acc1(e) = acc2(e) = __int_as_float(0x7fffffff);
  } else {
    asm volatile("cp.async.wait_group 0;\n" ::);  // no loads left in flight at exit (total == 0)
  }

  if constexpr (kDkDv) {
    // Padded layouts get zeros on key rows past the sequence; packed ones leave them alone.
    const bool packed = p.cu_kv.ptr != nullptr;
    const int64_t krows = packed || a.dk.ragged.ptr ? m.skv : p.skv;
    const int64_t vrows = packed || a.dv.ragged.ptr ? m.skv : p.skv;
    T* dkb = static_cast<T*>(a.dk.ptr) + p.base(a.dk, b, false) + hr * a.dk.stride[1];
    T* dvb = static_cast<T*>(a.dv.ptr) + p.base(a.dv, b, false) + hr * a.dv.stride[1];
    store_acc(dkb, a.dk.stride[2], acc1, cA, r0, krows, scale);
    store_acc(dvb, a.dv.stride[2], acc2, cA, r0, vrows, 1.f);
  } else {
    const bool packed = p.cu_q.ptr != nullptr || a.dq.ragged.ptr != nullptr;
    T* dqb = static_cast<T*>(a.dq.ptr) + p.base(a.dq, b, true) + hr * a.dq.stride[1];
    store_acc(dqb, a.dq.stride[2], acc1, cA, r0, packed ? m.sq : p.sq, scale);
  }
}

// dQ = scale * the fused kernel's fp32 sum, in the element type; rows of query tiles no key tile
// contributed to (counter 0: nothing visible, or no keys) are zeros, as are padded rows.
template <class T, int kD, bool kV3>
__global__ void __launch_bounds__(kThreads) dq_convert(const BwdProblem a, const DqAccum acc) {
  constexpr int kPerRow = kD / 8, kRows = kThreads / kPerRow;
  const Problem& p = a.p;
  const int64_t b = blockIdx.z, h = blockIdx.y, i = int64_t(blockIdx.x) * kRows + threadIdx.x / kPerRow;
  const int c = int(threadIdx.x % kPerRow) * 8;
  const int64_t sqb = p.len_q(b);
  const bool packed = p.cu_q.ptr != nullptr || a.dq.ragged.ptr != nullptr;
  if (i >= (packed ? sqb : p.sq)) return;
  const int64_t bh = b * p.hq + h;
  float v[8] = {};
  if (i < sqb && acc.counters[(bh * acc.mt + i / kStep) * 2] > 0) {
    const float scale = bwd::scale_of(p);
    float4 x, y;
    if constexpr (kV3) {  // columns c..c+7 lie in one warpgroup's block, as two 16-byte groups
      constexpr int n = kD / 2;
      const float* blk = acc.dq + ((bh * acc.mt + i / kStep) * 2 + c / n) * (kStep * n);
      const int r = int(i % kStep), cc = c % n;
      x = *reinterpret_cast<const float4*>(blk + bulk_dq_offset(r, cc, n));
      y = *reinterpret_cast<const float4*>(blk + bulk_dq_offset(r, cc + 4, n));
    } else {
      const float4* s = reinterpret_cast<const float4*>(acc.dq + (bh * acc.mt * kStep + i) * kD + c);
      x = s[0];
      y = s[1];
    }
    const float in[8] = {x.x, x.y, x.z, x.w, y.x, y.y, y.z, y.w};
    for (int e = 0; e < 8; ++e) v[e] = in[e] * scale;
  }
  T out[8];
  for (int e = 0; e < 8; ++e) out[e] = T(v[e]);
  T* dst = static_cast<T*>(a.dq.ptr) + p.base(a.dq, b, true) + h * a.dq.stride[1] + i * a.dq.stride[2] + c;
  if ((reinterpret_cast<uintptr_t>(dst) & 15) == 0) {
    uint4 word;
    memcpy(&word, out, 16);
    *reinterpret_cast<uint4*>(dst) = word;
  } else {
    for (int e = 0; e < 8; ++e) dst[e] = out[e];
  }
}

template <class T, int kD>
const char* launch_t(const BwdProblem& a, void* workspace, cudaStream_t st) {
  using Cfg = Config<T, kD>;
  const Problem& p = a.p;
  auto kv = bwd_kernel<T, kD, true, false>;
  auto q = bwd_kernel<T, kD, false, false>;
  auto fused = bwd_kernel<T, kD, true, true>;
  auto fused_v3 = bwd_kernel<T, kD, true, true, true>;
  auto fused_v4 = bwd_kernel<T, kD, true, true, false, true>;
  auto fused_v4_bulk = bwd_kernel<T, kD, true, true, true, true>;
  static const cudaError_t attr = [&] {
    cudaError_t e = cudaSuccess;
    for (auto k : {kv, q, fused, fused_v3})
      if (e == cudaSuccess) e = cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, Cfg::kSmemBytes);
    for (auto k : {fused_v4, fused_v4_bulk})
      if (e == cudaSuccess) e = cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, Cfg::kSmemBytesV4);
    return e;
  }();
  if (attr != cudaSuccess) return cudaGetErrorString(attr);
  if (p.b == 0 || p.hq == 0) return nullptr;
  const float* delta = static_cast<const float*>(workspace);
  const dim3 kv_grid(unsigned((p.skv + kRes - 1) / kRes), unsigned(p.hk), unsigned(p.b));
  BwdV4Descs descs{};  // v4's TMA views; unused (zeros) by the other kernels
  if (a.v2_two_pass) {
    if (p.skv > 0) {
      kv<<<kv_grid, kThreads, Cfg::kSmemBytes, st>>>(a, delta, DqAccum{}, descs);
      if (const char* e = bwd::err(cudaGetLastError())) return e;
    }
    if (p.sq > 0) {
      dim3 grid(unsigned((p.sq + kRes - 1) / kRes), unsigned(p.hq), unsigned(p.b));
      q<<<grid, kThreads, Cfg::kSmemBytes, st>>>(a, delta, DqAccum{}, descs);
      if (const char* e = bwd::err(cudaGetLastError())) return e;
    }
    return nullptr;
  }
  const BwdV2Layout l = bwd_v2_layout(p);
  char* ws = static_cast<char*>(workspace);
  const DqAccum acc{reinterpret_cast<float*>(ws + l.dq), reinterpret_cast<int*>(ws + l.counters), l.mt};
  if (l.counter_bytes > 0)
    if (const char* e = bwd::err(cudaMemsetAsync(acc.counters, 0, size_t(l.counter_bytes), st))) return e;
  if (p.skv > 0) {
    // v4 where TMA can describe the problem (host work of a few microseconds: four encodes), else the
    // fused kernel with the same workspace layout.
    if (a.v4 && bwd_v4_encode(a, descs) == nullptr)
      (a.v3 ? fused_v4_bulk : fused_v4)<<<kv_grid, kV4Threads, Cfg::kSmemBytesV4, st>>>(a, delta, acc, descs);
    else
      (a.v3 ? fused_v3 : fused)<<<kv_grid, kThreads, Cfg::kSmemBytes, st>>>(a, delta, acc, descs);
    if (const char* e = bwd::err(cudaGetLastError())) return e;
  }
  if (p.sq > 0) {
    constexpr int kRows = kThreads / (kD / 8);
    dim3 grid(unsigned((p.sq + kRows - 1) / kRows), unsigned(p.hq), unsigned(p.b));
    if (a.v3) dq_convert<T, kD, true><<<grid, kThreads, 0, st>>>(a, acc);
    else dq_convert<T, kD, false><<<grid, kThreads, 0, st>>>(a, acc);
    if (const char* e = bwd::err(cudaGetLastError())) return e;
  }
  return nullptr;
}

template <int kD>
const char* launch_any(const BwdProblem& a, void* workspace, void* stream) {
  cudaStream_t st = static_cast<cudaStream_t>(stream);
  return a.p.fp16 ? launch_t<cutlass::half_t, kD>(a, workspace, st)
                  : launch_t<cutlass::bfloat16_t, kD>(a, workspace, st);
}

}  // namespace opendnn::cuda::sdpa::bwd2
