// SPDX-License-Identifier: Apache-2.0
// SDPA backward v2 for d_qk = d_v = 256 on sm_90a (the default d256 plan, OPENDNN_SDPA_BWD_D256_V2=0
// withholds it; instantiated by sdpa_bwd_v2_d256.cu). H200, session 7: every D256V2 test of
// test_cuda_sdpa_bwd passed; B8 H8 S2048 bf16 5.33 ms dense / 2.77 causal (first kernel 16.2 / 8.8,
// cuDNN 2.31 / 1.23).
//
// Why a kernel of its own: sdpa_bwd_v2.cuh gives each warpgroup 64 resident rows and both the dK and
// the dV accumulator, 2 x 64 x kD fp32; at kD = 256 that is 256 registers a thread for the
// accumulators alone. Here a CTA keeps only 64 key rows (K and V, 32 KiB each) and the two consumer
// warpgroups split the work by output instead of by rows:
//   warpgroup 0: S = K Q^T (SS), P = exp(S * scale - LSE) (masked), dV += P dO (RS, P from registers);
//   warpgroup 1: dP = V dO^T (SS), dS = P (dP - D), dK += dS Q (RS; dK / scale until the store).
// Each holds one 64 x 256 fp32 accumulator (128 registers). Both tile GEMMs have the same shape and
// hence the same accumulator layout, so thread t of warpgroup 1 finds the P values it needs exactly
// where thread t of warpgroup 0 left them: P goes through shared memory as fp32 in a [value][thread]
// array (conflict-free, no swizzle), behind one named barrier (0 arrives, 1 waits). The two
// warpgroups run the same instruction stream for every wgmma (operands picked by a runtime base
// pointer), only the element-wise part differs.
// dQ is fused as in sdpa_bwd_v2.cuh: warpgroup 1 writes dS (64 keys x 64 queries, bf16, 128-byte
// swizzle) to shared memory and both warpgroups compute dQ = dS^T K for half of the columns each
// (64 x 128, 64 registers), then add it to the fp32 workspace of bwd_v2_layout in turn order (a
// per-(query tile, half) counter; the first contributor stores, the others add with red.add, one CTA
// at a time), and bwd2::dq_convert scales and converts the sum. Deterministic: every accumulator
// and every dQ element sums its terms in one fixed order, so the results are bitwise reproducible;
// the workspace is linear in Sq. The turn order (contributors<64>) and its deadlock argument are
// sdpa_bwd_v2.cuh's: descending key tiles (grid run last-first) under a right bound, else ascending.
// Streamed Q / dO tiles of 64 rows come through a 2-stage cp.async ring (32 KiB per tile): item
// idx + 1 is loaded while idx computes, one CTA barrier per step. Shared memory: K, V 64 KiB; Q, dO
// 128 KiB; dS 8 KiB; P 16 KiB; LSE/D 1 KiB: 217 KiB (+1 KiB alignment) of the 227 KiB.
// Scope (the adapter declines the rest): BHSD-strided tensors at full lengths (no per-batch lengths,
// no THD), no mask or a causal one (right bound 0, either diagonal alignment), GQA/MQA.
// Known gaps: no TMA producer warp, the dQ adds sit on the critical path of each step (the turn's
// fences do not, with early turns, below), and the next step's S / dP GEMMs do not overlap this
// step's dQ; 64-row key tiles mean four times d128's fp32 dQ reduction traffic per flop, and a key
// tile's CTA starts its dQ adds only after its predecessor in the turn order has (per (head, batch),
// CTA n starts about n turn latencies late).
//
// v4 (the default where TMA takes the tensors, a.d256_v4; OPENDNN_SDPA_BWD_D256_V4=0 keeps the schedule
// above; H200, session 8: every D256V4 test passed, B8 H8 S2048 bf16 2.71 ms dense / 1.26 causal, 1.9x the
// schedule above, 0.84x / 1.0x cuDNN): sdpa_bwd_v2.cuh's v4 + v3
// design at d256. 384 threads: warpgroup 0 gives its registers away (setmaxnreg 40; at 24 the writers'
// 64-bit index arithmetic spilled 36 bytes) and the two consumer warpgroups (setmaxnreg 232: 128 x 40 +
// 256 x 232 = 64512 of the 65536 registers; ptxas: no spills) compute exactly as above. Warp 0 loads K/V
// once and each step's Q/dO tiles by TMA (sdpa_bwd_tma.cu: 64 x 64 boxes, rows past Sq / Skv read as
// zeros, as stage_tile zero-fills) into the 2-stage ring, its 32 lanes store the LSE/D rows; warps 1-2
// (lane 0) are the dQ writers of consumer warpgroups 0-1. The consumers meet only at kBarP / kBarDs
// (P and dS must be shared anyway): no CTA barrier, no cp.async in the loop.
// dQ: no room for a separate fp32 park area (two halves of 64 x 128 fp32 = 64 KiB; 9 KiB are free), but a
// dQ half is exactly one streamed tile (64 x 128 x 4 B = 64 x 256 x 2 B = 32 KiB), and once a step's
// accumulator GEMM is waited for, the tile it read is dead: warpgroup 0 parks its half in the stage's dO
// tile, warpgroup 1 in the Q tile (the other warpgroup read each only in its tile GEMM, finished before
// kBarP / kBarDs), in the workspace's bulk layout (bwd2::park_dq_block, bulk_dq_offset; dq_convert<.., true>
// reads it), and arrives on dq_full[warpgroup][stage]. Its writer waits for the query tile's turn, adds the
// block with one bulk reduction (the first contributor stores it), frees the stage once the reduction has
// read it (empty: the two writers) and hands the turn on once its writes are performed. The turn wait, the
// 32 KiB reductions and the fences leave the consumers' path; they wait only when writer(idx) + TMA(idx + 2)
// outlast step idx + 1. Same turn order, same sums in the same order: bitwise reproducible, and the
// workspace is v2's (linear in Sq; the blocks in bwd2::bulk_dq_offset layout, as v3's).
// Shared memory of v4: K, V 64 KiB; 2 stages x (Q + dO) 128 KiB; dS 8 KiB; P 16 KiB; LSE/D 1 KiB;
// 9 mbarriers 72 B: 217 KiB + 72 B, 218 KiB with the struct's 1 KiB alignment, +1 KiB for aligning the
// dynamic base: 219 of 227. A third 64-row stage would need 64 KiB more;
// 32-row stages (4 in 128 KiB) would make the dQ GEMM 32 x 128 (wgmma needs M = 64: dQ^T = K^T dS
// instead), left for later. Overlapping the next step's S / dP GEMM with this step's dQ GEMM does not
// pay: with the dQ half in two 64 x 64 quarters and the next S / dP issued between them, both quarters
// live, ptxas serialized every wgmma for want of registers at 232 a thread, and at 240 the producer
// warpgroup's 24 spilled; with the first quarter parked before the issue it compiled clean but ran at
// 0.90-0.91x this schedule (H200, B8 H8 S2048 bf16), and was removed.
// dq_full is per stage: with one barrier per warpgroup the consumers could complete its phase twice
// (steps idx and idx + 1) before the writer waited for idx, and a parity wait would then hang.
#pragma once

#include "engines/cuda/sdpa/sdpa_bwd_v2.cuh"

namespace opendnn::cuda::sdpa::bwd2d256 {

using bwd2::kThreads;        // two consumer warpgroups, all threads stage by cp.async
constexpr int kD = 256;
constexpr int kRes = 64;     // resident key rows of a CTA
constexpr int kStep = bwd2::kStep;  // streamed query rows per step (64)
constexpr int kStages = 2;
constexpr int kDqN = kD / 2;  // dQ columns of one warpgroup
// Named barrier ids: P written by warpgroup 0; dS written by warpgroup 1; then one per warpgroup
// around its dQ adds.
constexpr int kBarP = 1, kBarDs = 2, kBarAdd = 3;

template <class T>
struct Config {
  using R = cute::Int<kRes>;
  using N = cute::Int<kStep>;
  using D = cute::Int<kD>;
  using DqN = cute::Int<kDqN>;
  using One = cute::Layout<cute::Shape<cute::_1, cute::_1, cute::_1>>;  // one warpgroup per MMA
  // K-major 128-byte swizzle atoms stacked down the rows first: each 64-column block of a tile is
  // contiguous, which is also the MN-major (columns, rows) view the dQ GEMM reads K through.
  using SmemRes = decltype(cute::tile_to_shape(cute::GMMA::Layout_K_SW128_Atom<T>{}, cute::Shape<R, D>{}));
  using SmemStr = decltype(cute::tile_to_shape(cute::GMMA::Layout_K_SW128_Atom<T>{}, cute::Shape<N, D, cute::Int<kStages>>{}));
  using SmemStrT = decltype(cute::tile_to_shape(cute::GMMA::Layout_MN_SW128_Atom<T>{}, cute::Shape<D, N, cute::Int<kStages>>{},
                                                cute::Step<cute::_2, cute::_1, cute::_3>{}));
  using SmemDs = decltype(cute::tile_to_shape(cute::GMMA::Layout_K_SW128_Atom<T>{}, cute::Shape<R, N>{}));
  using SmemDsA = decltype(cute::tile_to_shape(cute::GMMA::Layout_MN_SW128_Atom<T>{}, cute::Shape<N, R>{},
                                               cute::Step<cute::_2, cute::_1>{}));
  using SmemResT = decltype(cute::tile_to_shape(cute::GMMA::Layout_MN_SW128_Atom<T>{}, cute::Shape<DqN, R>{},
                                                cute::Step<cute::_2, cute::_1>{}));
  // S / dP = (K or V) (Q or dO)^T: 64 x 64 over k = 256, both K-major.
  using MmaT = decltype(cute::make_tiled_mma(cute::GMMA::ss_op_selector<T, T, float, cute::Shape<R, N, D>>(), One{}));
  // dV / dK += (P or dS) (dO or Q): 64 x 256 over k = 64; A from registers, B MN-major.
  using MmaAcc = decltype(cute::make_tiled_mma(
      cute::GMMA::rs_op_selector<T, T, float, cute::Shape<R, D, N>, cute::GMMA::Major::K, cute::GMMA::Major::MN>(), One{}));
  // dQ half = dS^T K[:, half]: 64 x 128 over k = 64 keys, both MN-major.
  using MmaDq = decltype(cute::make_tiled_mma(
      cute::GMMA::ss_op_selector<T, T, float, cute::Shape<N, DqN, R>, cute::GMMA::Major::MN, cute::GMMA::Major::MN>(), One{}));
  struct Smem {
    alignas(1024) T k[cute::cosize_v<SmemRes>];
    alignas(1024) T v[cute::cosize_v<SmemRes>];
    alignas(1024) T q[cute::cosize_v<SmemStr>];
    alignas(1024) T dout[cute::cosize_v<SmemStr>];
    alignas(1024) T ds[cute::cosize_v<SmemDs>];
    float p[kRes * kStep / 128][128];  // warpgroup 0's P, [value][thread]
    float lse[kStages][kStep], delta[kStages][kStep];  // log2-scaled LSE and D of the streamed queries
  };
  static constexpr int kSmemBytes = int(sizeof(Smem)) + 1024;  // + alignment of the dynamic base
  static_assert(kSmemBytes <= 227 * 1024, "shared memory of one CTA exceeds the H200's 227 KiB");
  // v4: the same buffers and the rings' barriers (the header comment has the arithmetic).
  struct SmemV4 : Smem {
    cutlass::arch::ClusterTransactionBarrier res_full, full[kStages];
    cutlass::arch::ClusterBarrier empty[kStages];
    cutlass::arch::ClusterBarrier dq_full[2][kStages];  // [consumer warpgroup][stage whose buffer holds its dQ]
  };
  static constexpr int kSmemBytesV4 = int(sizeof(SmemV4)) + 1024;
  static_assert(kSmemBytesV4 <= 227 * 1024, "v4's shared memory exceeds the H200's 227 KiB");
  static_assert(kStep * kDqN * sizeof(float) == kStep * kD * sizeof(T), "a dQ half fills one streamed tile");
};

// Copies rows [row0, row0 + 64) of one head (row stride rs) into a (64, 256) tile of Config::SmemRes /
// SmemStr layout; rows at or past `valid` become zeros. Thread t moves the 16-byte chunk t % 32 of rows
// t / 32 + 8 k: under the 128-byte swizzle those rows share the chunk's position in their atom rows,
// so the eight destinations are one base plus k whole atoms (8 rows x 64 columns, 1 KiB), which keeps
// the staging to two address registers (bwd2::stage's generic loop spilled here).
template <class T, class Dst>
__device__ __forceinline__ void stage_tile(Dst dst, const T* src, int64_t rs, int64_t row0, int64_t valid) {
  const int r = int(threadIdx.x) / 32, c = (int(threadIdx.x) % 32) * 8;
  T* d = &dst(r, c);
  const T* g = src + (row0 + r) * rs + c;
  const bool aligned = ((reinterpret_cast<uintptr_t>(src) | uintptr_t(rs * int64_t(sizeof(T)))) & 15) == 0;
  CUTE_UNROLL
  for (int k = 0; k < 8; ++k, d += 8 * 64, g += 8 * rs) {
    if (row0 + r + 8 * k >= valid) {
      *reinterpret_cast<uint4*>(d) = make_uint4(0, 0, 0, 0);
    } else if (aligned) {
      asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(uint32_t(__cvta_generic_to_shared(d))), "l"(g));
    } else {
      for (int e = 0; e < 8; ++e) d[e] = g[e];
    }
  }
}

template <class T, bool kEarly, bool kV4 = false>
__global__ void __launch_bounds__(kV4 ? bwd2::kV4Threads : kThreads, 1)
    bwd_kernel(const BwdProblem a, const float* __restrict__ delta, const bwd2::DqAccum acc,
               const __grid_constant__ BwdV4Descs tma) {
  using namespace cute;
  using Cfg = Config<T>;
  using Smem = std::conditional_t<kV4, typename Cfg::SmemV4, typename Cfg::Smem>;
  using bwd::kLog2e;
  const Problem& p = a.p;
  extern __shared__ char smem_raw[];
  const uint32_t raw_addr = cute::cast_smem_ptr_to_uint(smem_raw);
  auto& sm = *reinterpret_cast<Smem*>(smem_raw + ((1024u - (raw_addr & 1023u)) & 1023u));
  static_assert(!(kV4 && kEarly), "v4's turns are kept by its dQ writers");

  // Under a right bound the turn order of a query tile's contributors is descending key tiles, and a
  // CTA may only wait for CTAs launched before it: the grid runs key tiles last-first.
  const bool descending = p.has_right;
  const unsigned tile = descending ? gridDim.x - 1 - blockIdx.x : blockIdx.x;
  const int64_t b = blockIdx.z, r0 = int64_t(tile) * kRes, hk = blockIdx.y;
  const bwd::Mask m = bwd::mask_of(p, b);
  const float scale = bwd::scale_of(p), sl2 = scale * kLog2e;
  const int64_t group = p.hq / p.hk;

  // Query rows that see some resident key, from a whole step (the loop bounds contributors<kRes>
  // assumes).
  int64_t lo = m.has_right ? r0 - m.off - m.right : 0;
  int64_t hi = m.has_left ? r0 + kRes - 1 - m.off + m.left : m.sq;
  hi = hi > m.sq ? m.sq : hi;
  if (r0 >= m.skv) hi = 0;
  lo = lo < 0 ? 0 : lo;
  const int64_t first = (lo / kStep) * kStep;
  const int64_t ntiles = hi > first ? (hi - first + kStep - 1) / kStep : 0;
  const int64_t total = group * ntiles;

  constexpr int kTileElems = kStep * kD;  // one streamed tile (a stage of sm.q or sm.dout)
  if constexpr (kV4) {
    if (threadIdx.x == 0) {
      sm.res_full.init(1);
      for (int s = 0; s < kStages; ++s) {
        sm.full[s].init(32);  // the producer warp's lanes, once their LSE/D rows are stored
        sm.empty[s].init(2);  // the two dQ writers, once their bulk reductions have read the stage
        for (int w = 0; w < 2; ++w) sm.dq_full[w][s].init(128);  // a consumer warpgroup's threads, dQ parked
      }
      cutlass::arch::fence_barrier_init();
    }
    __syncthreads();  // the only CTA-wide barrier
    if (threadIdx.x < 128) {
      cutlass::arch::warpgroup_reg_dealloc<40>();
      const int warp = int(threadIdx.x) / 32, lane = int(threadIdx.x) % 32;
      // Item idx walks (head h0 + head_i, query tile first + tile_i * 64) in the consumers' order; 32-bit
      // where it can be (40 registers; bwd_v4_encode takes sequences below 2^31 rows only).
      const int h0 = int(hk * group), nt = int(ntiles);
      if (warp == 1 || warp == 2) {
        // dQ writer of consumer warpgroup w: once the warpgroup has parked step idx's dQ half (fp32, the
        // workspace block's layout) in the stage it read, waits for the query tile's turn, adds the
        // block with one bulk reduction (the first contributor stores it), hands the turn on and frees
        // the stage. Turn waits and reductions thus leave the consumers' path: they stall only when the
        // producer cannot refill a stage in time.
        if (lane != 0) return;
        const int w = warp - 1;
        const uint32_t park0 = cute::cast_smem_ptr_to_uint(w == 0 ? sm.dout : sm.q);
        int tile_i = 0, head_i = 0;
        bool broken = false;  // a parked block that never came: keep the turns going (others wait on them)
        for (int idx = 0; idx < int(total); ++idx) {
          const int st = idx % kStages;
          if (!broken) broken = !bwd2::ring_wait(&sm.dq_full[w][st], uint32_t((idx / kStages) & 1));
          const int64_t s0 = first + int64_t(tile_i) * kStep;
          const int64_t slot = ((b * p.hq + h0 + head_i) * acc.mt + s0 / kStep) * 2 + w;
          int* counter = acc.counters + slot;
          float* dst = acc.dq + slot * (kStep * kDqN);
          const bwd2::KeyTiles kt = bwd2::contributors<kRes>(m, s0);
          const int turn = int(descending ? kt.hi - int64_t(tile) : int64_t(tile) - kt.lo);
          bwd2::wait_until_equal(counter, turn, dst);
          bwd2::fence_proxy_async_global();  // the bulk add comes after the previous contributor's
          bwd2::bulk_dq_issue(dst, park0 + uint32_t(st * kTileElems * int(sizeof(T))), kStep * kDqN * int(sizeof(float)),
                              turn != 0);
          // The stage is free once the reduction has read it: the producer refills it while the writes
          // complete.
          asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory");
          sm.empty[st].arrive();
          asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory");
          bwd2::fence_proxy_async_global();  // ... and is performed before the release
          bwd2::release_increment(counter);
          if (++tile_i == nt) tile_i = 0, ++head_i;
        }
        return;
      }
      if (warp != 0) return;
      // Producer warp. TMA views (sdpa_bwd_tma.cu): 0 Q, 1 dO, 2 K, 3 V; a tile is four column blocks
      // of 64 (one 128-byte swizzle span) stacked down its 64 rows, as SmemRes / SmemStr are. Rows past
      // Sq / Skv read as zeros, as stage_tile's.
      const auto* maps = reinterpret_cast<const CUtensorMap*>(tma.bytes);
      auto load = [&](int view, cutlass::arch::ClusterTransactionBarrier& bar, T* dst, int64_t row0, int64_t head) {
        for (int c = 0; c < kD; c += 64)
          SM90_TMA_LOAD_4D::copy(&maps[view], reinterpret_cast<uint64_t*>(&bar), uint64_t(TMA::CacheHintSm90::EVICT_NORMAL),
                                 dst + c * kStep, c, int(row0), int(head), int(b));
      };
      if (total > 0 && lane == 0) {
        sm.res_full.arrive_and_expect_tx(uint32_t(2 * kRes * kD * sizeof(T)));
        load(2, sm.res_full, sm.k, r0, hk);
        load(3, sm.res_full, sm.v, r0, hk);
      }
      const int sq = int(m.sq);
      const float* lse0 = p.lse + p.lse_base(b) + h0 * p.lse_stride[1];
      const float* d0 = delta + (b * p.hq + h0) * p.sq;
      bwd2::produce_query_items<kStages, kStep>(sm, p, lse0, d0, int(total), int(first), nt, sq, lane,
                                                [&](int st, int s0, int head_i) {
                                                  sm.full[st].expect_transaction(uint32_t(2 * kTileElems * sizeof(T)));
                                                  load(0, sm.full[st], sm.q + st * kTileElems, s0, h0 + head_i);
                                                  load(1, sm.full[st], sm.dout + st * kTileElems, s0, h0 + head_i);
                                                });
      return;
    }
    cutlass::arch::warpgroup_reg_alloc<232>();
  }

  Tensor sK = make_tensor(make_smem_ptr(sm.k), typename Cfg::SmemRes{});
  Tensor sV = make_tensor(make_smem_ptr(sm.v), typename Cfg::SmemRes{});
  Tensor sQ = make_tensor(make_smem_ptr(sm.q), typename Cfg::SmemStr{});
  Tensor sO = make_tensor(make_smem_ptr(sm.dout), typename Cfg::SmemStr{});
  if constexpr (!kV4) {
    const T* kb = static_cast<const T*>(p.k.ptr) + p.base(p.k, b, false) + hk * p.k.stride[1];
    const T* vb = static_cast<const T*>(p.v.ptr) + p.base(p.v, b, false) + hk * p.v.stride[1];
    stage_tile<T>(sK, kb, p.k.stride[2], r0, m.skv);
    stage_tile<T>(sV, vb, p.v.stride[2], r0, m.skv);
  }
  // Item (query head h, query tile at s0) into stage buf: one cp.async commit group (an empty one
  // past the end, valid = false).
  auto stage_item = [&](bool valid, int64_t h, int64_t s0, int buf) {
    if (valid) {
      const T* qb = static_cast<const T*>(p.q.ptr) + p.base(p.q, b, true) + h * p.q.stride[1];
      const T* ob = static_cast<const T*>(a.dout.ptr) + p.base(a.dout, b, true) + h * a.dout.stride[1];
      stage_tile<T>(sQ(_, _, buf), qb, p.q.stride[2], s0, m.sq);
      stage_tile<T>(sO(_, _, buf), ob, a.dout.stride[2], s0, m.sq);
      // Warps 5-6 load LSE and D (plain loads): warpgroup 1 has slack while warpgroup 0 computes P,
      // and these warps keep no turns.
      const int r = int(threadIdx.x) - 160;
      if (r >= 0 && r < kStep) {
        const int64_t i = s0 + r;
        const float* lb = p.lse + p.lse_base(b) + h * p.lse_stride[1];
        sm.lse[buf][r] = i < m.sq ? lb[i * p.lse_stride[2]] * kLog2e : 0.f;
        sm.delta[buf][r] = i < m.sq ? delta[(b * p.hq + h) * p.sq + i] : 0.f;
      }
    }
    bwd::staged_commit();
  };
  // Items walk the group's query heads, each over the query tiles first..; (h, s0) of item idx and
  // of item idx + 1 (next_*), by increments instead of 64-bit divisions.
  int64_t h = hk * group, s0 = first, next_h = h, next_s0 = s0;
  auto advance = [&](int64_t& hh, int64_t& ss) {
    ss += kStep;
    if (ss >= first + ntiles * kStep) ss = first, ++hh;
  };
  if constexpr (!kV4) stage_item(total > 0, h, s0, 0);  // one group with K and V
  advance(next_h, next_s0);

  const int tid = int(threadIdx.x) - (kV4 ? 128 : 0), wg = tid / 128, wt = tid % 128;  // consumer threads
  // Operands by role: warpgroup 0 reads (K, Q) for its tile GEMM and dO for its accumulator GEMM,
  // warpgroup 1 (V, dO) and Q. One instruction stream, runtime base pointers.
  T* const x_base = wg == 0 ? sm.k : sm.v;
  T* const u_base = wg == 0 ? sm.q : sm.dout;
  T* const w_base = wg == 0 ? sm.dout : sm.q;
  Tensor sX = make_tensor(make_smem_ptr(x_base), typename Cfg::SmemRes{});
  Tensor sU = make_tensor(make_smem_ptr(u_base), typename Cfg::SmemStr{});
  Tensor sWt = make_tensor(make_smem_ptr(w_base), typename Cfg::SmemStrT{});
  typename Cfg::MmaT mma_t;
  typename Cfg::MmaAcc mma_a;
  typename Cfg::MmaDq mma_dq;
  auto thr_t = mma_t.get_thread_slice(wt);
  auto thr_a = mma_a.get_thread_slice(wt);
  auto thr_dq = mma_dq.get_thread_slice(wt);
  using TShape = Shape<typename Cfg::R, typename Cfg::N>;
  using AShape = Shape<typename Cfg::R, typename Cfg::D>;
  using DqShape = Shape<typename Cfg::N, typename Cfg::DqN>;
  Tensor tXr = thr_t.make_fragment_A(thr_t.partition_A(sX));
  Tensor tUr = thr_t.make_fragment_B(thr_t.partition_B(sU));
  Tensor tWtr = thr_a.make_fragment_B(thr_a.partition_B(sWt));
  Tensor tFr = thr_a.partition_fragment_A(make_tensor(static_cast<T*>(nullptr), make_layout(TShape{}, LayoutRight{})));
  Tensor t = partition_fragment_C(mma_t, TShape{});   // S (warpgroup 0) or dP (1)
  Tensor accum = partition_fragment_C(mma_a, AShape{});  // dV (0) or dK / scale (1)
  static_assert(decltype(size(tFr))::value == decltype(size(t))::value, "P/dS and S/dP fragments differ");
  static_assert(decltype(size(t))::value == kRes * kStep / 128, "one P value per thread and slot of sm.p");
  Tensor cT = thr_t.partition_C(make_identity_tensor(TShape{}));
  Tensor cA = thr_a.partition_C(make_identity_tensor(AShape{}));
  clear(accum);
  // dQ = dS^T K over this warpgroup's columns [wg * 128, wg * 128 + 128): whole 64-column blocks of
  // the K tile, kRes * 64 elements each.
  Tensor sDsA = make_tensor(make_smem_ptr(sm.ds), typename Cfg::SmemDsA{});
  Tensor sKt = make_tensor(make_smem_ptr(sm.k + wg * kDqN * kRes), typename Cfg::SmemResT{});
  Tensor tDsA = thr_dq.make_fragment_A(thr_dq.partition_A(sDsA));
  Tensor tKt = thr_dq.make_fragment_B(thr_dq.partition_B(sKt));
  Tensor cDq = thr_dq.partition_C(make_identity_tensor(DqShape{}));

  // This thread's tile elements are (rb + dr, cb + dc), dr in {0, 8}, dc % 8 in {0, 1}.
  const int rb = get<0>(cT(0)), cb = get<1>(cT(0));
  // dS by 32-bit st.shared at the swizzled byte offset r * 128 + ((c / 8) ^ (r % 8)) * 16 + (c % 8) * 2
  // of the (64, 64) K-major tile (the formula sdpa_bwd_v2.cuh checked against CuTe's SmemDs layout).
  const uint32_t ds_row = cute::cast_smem_ptr_to_uint(sm.ds) + uint32_t(rb * 128 + cb * 2);
  const uint32_t ds_xor = uint32_t(rb % 8) << 4;

  // dQ of this warpgroup's half to the workspace, in its turn. Accumulator values e..e+3 are (row r,
  // columns c, c+1) and (row r+8, the same columns), thread t ^ 1 holds columns c +- 2 of the same
  // rows: the even thread gathers row r, the odd one row r + 8, four contiguous columns each, so one
  // 16-byte store or red.add per group (as sdpa_bwd_v2.cuh's park_dq / add_dq).
  constexpr int kGroups = kDqN * kStep / 128 / 4;
  const bool even = (wt & 1) == 0;
  // Early turns (kEarly; the default under a causal mask, where it gains ~12%): the turn's fences leave warpgroup 0's path. Each dQ half has
  // a keeper thread in warpgroup 1, which has slack while warpgroup 0 computes P: thread 224 (warp 7)
  // for warpgroup 0's half, thread 128 for warpgroup 1's. Right after the tile GEMM is issued the
  // keeper hands on the previous step's turn (release) and waits for this step's (acquire); warp 7
  // then arrives on warpgroup 0's add barrier (160 threads: its 128 and warp 7), thread 128 is one of
  // the 128 of warpgroup 1's. So the adds wait only on a named barrier. The release comes after the
  // CTA barrier that follows every thread's adds of the previous step, which orders them before it
  // (as in sdpa_bwd_v2.cuh's add_dq, whose release follows a barrier too). A CTA still only waits
  // for CTAs launched before it. Without kEarly thread 0 of each warpgroup waits, and after the adds
  // releases, at the end of the step.
  constexpr int kKeeper0 = 224, kKeeper1 = 128;
  int* released = nullptr;  // kEarly, a keeper: the counter whose adds await release
  auto counter_of = [&](int w) { return acc.counters + ((b * p.hq + h) * acc.mt + s0 / kStep) * 2 + w; };
  auto dst_of = [&](int w) { return acc.dq + ((b * p.hq + h) * acc.mt * kStep + s0) * kD + w * kDqN; };
  auto turn_of = [&]() {
    const bwd2::KeyTiles kt = bwd2::contributors<kRes>(m, s0);
    return int(descending ? kt.hi - int64_t(tile) : int64_t(tile) - kt.lo);
  };
  auto take_turn = [&](int w) {
    int* counter = counter_of(w);
    if (released) bwd2::release_increment(released);
    bwd2::wait_until_equal(counter, turn_of(), dst_of(w));
    released = counter;
  };
  auto add_dq = [&](const auto& dq) {
    static_assert(decltype(size(dq))::value == 4 * kGroups, "accumulator values come in 2x2 groups");
    float* dst = dst_of(wg);
    const int turn = turn_of();
    if constexpr (!kEarly)
      if (wt == 0) bwd2::wait_until_equal(counter_of(wg), turn, dst);
    bwd2::named_sync(kBarAdd + wg, kEarly && wg == 0 ? 160 : 128);  // the keeper has seen the turn come
    CUTE_UNROLL
    for (int k = 0; k < kGroups; ++k) {
      const int e = 4 * k;
      const float g0 = __shfl_xor_sync(0xffffffffu, even ? dq(e + 2) : dq(e), 1);
      const float g1 = __shfl_xor_sync(0xffffffffu, even ? dq(e + 3) : dq(e + 1), 1);
      const float4 v = even ? make_float4(dq(e), dq(e + 1), g0, g1) : make_float4(g0, g1, dq(e + 2), dq(e + 3));
      const int r = get<0>(cDq(e)) + (even ? 0 : 8), c = get<1>(cDq(e)) - (even ? 0 : 2);
      float* d = dst + r * kD + c;
      if (turn == 0) *reinterpret_cast<float4*>(d) = v;  // the first contributor stores: no clearing needed
      else bwd2::red_add4(d, v);  // one adder at a time (the counter): a fixed order of the sums
    }
    if constexpr (!kEarly) {
      bwd2::named_sync(kBarAdd + wg, 128);
      if (wt == 0) bwd2::release_increment(counter_of(wg));
    }
  };

  bool broken = false;  // v4: a ring wait timed out; dK/dV become NaN
  if constexpr (kV4)
    if (total > 0) broken = !bwd2::ring_wait(&sm.res_full, 0);
  for (int64_t idx = 0; idx < total; ++idx) {
    const int buf = int(idx & 1);
    if constexpr (kV4) {
      // Item idx's TMA bytes landed and its LSE/D rows are stored. No CTA barrier: P and dS are handed
      // over by kBarP / kBarDs, which also order their reuse (warpgroup 0 writes P of step idx after
      // kBarDs of idx - 1, which warpgroup 1 reaches after reading P of idx - 1; warpgroup 1 writes dS
      // of idx after kBarP of idx, which warpgroup 0 reaches after its dQ wgmma of idx - 1 completed).
      if (!broken) broken = !bwd2::ring_wait(&sm.full[buf], uint32_t((idx >> 1) & 1));
    } else {
      asm volatile("cp.async.wait_group 0;\n" ::);  // item idx (and at idx 0 K, V) landed
      // cp.async and zero-fill stores are generic-proxy writes; wgmma reads through the async proxy.
      cutlass::arch::fence_view_async_shared();
      // Item idx visible to all; step idx - 1 finished everywhere (its stage, P and dS are free).
      __syncthreads();
    }

    warpgroup_fence_operand(t);
    warpgroup_arrive();
    v2::issue(mma_t, tXr, tUr(_, _, _, buf), t, false);
    warpgroup_commit_batch();
    // The next item's loads go out behind the tile GEMM, so no warp's LSE/D loads (warps 5-6) or
    // turn (kEarly: the keepers) hold back a wgmma issue.
    if constexpr (!kV4) stage_item(idx + 1 < total, next_h, next_s0, buf ^ 1);
    if constexpr (kEarly) {
      if (tid == kKeeper1) take_turn(1);
      if (tid >= kKeeper0) {  // warp 7
        if (tid == kKeeper0) take_turn(0);
        __syncwarp();
        bwd2::named_arrive(kBarAdd + 0, 160);
      }
      __syncwarp();  // the keepers' warps converge before the next aligned instructions
    }

    // Tile-local visibility (bwd::Mask::visible): query qi = cb + dc < qlim, key kj = rb + dr < klim,
    // dmin < dr - dc <= dmax; |kj - qi| < 64, so bounds clamped to +-256 keep every outcome.
    const int64_t i0 = s0, j0 = r0;
    const bool full = m.covers(i0, i0 + kStep, j0, j0 + kRes);
    auto clamp32 = [](int64_t v) { return int(v < -4 * kRes ? -4 * kRes : v > 4 * kRes ? 4 * kRes : v); };
    const int qlim = clamp32(m.sq - i0) - cb, klim = clamp32(m.skv - j0) - rb;
    const int dmax = (m.has_right ? clamp32(m.off + m.right - (j0 - i0)) : 4 * kRes) - (rb - cb);
    const int dmin = (m.has_left ? clamp32(m.off - m.left - (j0 - i0)) : -4 * kRes) - (rb - cb);
    const float* slq = sm.lse[buf] + cb;
    const float* sdq = sm.delta[buf] + cb;
    warpgroup_wait<0>();
    warpgroup_fence_operand(t);
    if (wg == 0) {
      auto probs = [&](auto masked) {
        CUTE_UNROLL
        for (int e = 0; e < size(t); ++e) {
          const int dr = get<0>(cT(e)) - rb, dc = get<1>(cT(e)) - cb;
          float pv = v2::exp2_approx(t(e) * sl2 - slq[dc]);
          if constexpr (decltype(masked)::value) {
            const bool vis = dc < qlim && dr < klim && dr - dc <= dmax && dr - dc > dmin;
            pv = vis ? pv : 0.f;
          }
          sm.p[e][wt] = pv;
          tFr(e) = T(pv);
        }
      };
      if (full) probs(std::false_type{});
      else probs(std::true_type{});
      bwd2::named_arrive(kBarP, 256);  // releases the P stores to warpgroup 1
    } else {
      bwd2::named_sync(kBarP, 256);
      CUTE_UNROLL
      for (int e = 0; e < size(t); ++e) {
        const int dc = get<1>(cT(e)) - cb;
        tFr(e) = T(sm.p[e][wt] * (t(e) - sdq[dc]));
      }
      // Values e, e + 1 are columns c, c + 1 of one row: one 32-bit store per pair.
      CUTE_UNROLL
      for (int e = 0; e < size(tFr); e += 2) {
        const int dr = get<0>(cT(e)) - rb, dc = get<1>(cT(e)) - cb;
        const uint32_t lo16 = reinterpret_cast<const uint16_t&>(tFr(e)), hi16 = reinterpret_cast<const uint16_t&>(tFr(e + 1));
        const uint32_t addr = ds_row + uint32_t(dr * 128) + ((uint32_t(dc >> 3) << 4) ^ ds_xor);
        asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(addr), "r"(lo16 | (hi16 << 16)) : "memory");
      }
      cutlass::arch::fence_view_async_shared();  // generic writes, read by the dQ wgmma (async proxy)
    }

    warpgroup_fence_operand(tFr);
    warpgroup_fence_operand(accum);
    warpgroup_arrive();
    v2::issue(mma_a, tFr, tWtr(_, _, _, buf), accum, true);
    warpgroup_commit_batch();
    bwd2::named_sync(kBarDs, 256);  // dS of the step in shared memory
    // The P / dS registers stay live until the accumulator GEMM has read them: waiting for it here
    // keeps them and the dQ accumulator apart (255 registers and spills otherwise).
    warpgroup_wait<0>();
    warpgroup_fence_operand(accum);
    warpgroup_fence_operand(tFr);
    // Declared per step: its registers are free while S / dP and P / dS are live.
    Tensor dq = partition_fragment_C(mma_dq, DqShape{});
    warpgroup_fence_operand(dq);
    warpgroup_arrive();
    v2::issue(mma_dq, tDsA, tKt, dq, false);
    warpgroup_commit_batch();
    warpgroup_wait<0>();
    warpgroup_fence_operand(dq);
    if constexpr (kV4) {
      // The dQ half (64 x 128 fp32, 32 KiB) goes into the stage's tile that this warpgroup's accumulator
      // GEMM read (warpgroup 0: dO, 1: Q): that GEMM is waited for, and the other warpgroup read the
      // tile only in its tile GEMM, which it waited for before kBarP (warpgroup 0) / kBarDs (1).
      bwd2::park_dq_block<kDqN>(reinterpret_cast<float*>((wg == 0 ? sm.dout : sm.q) + buf * kTileElems), dq, cDq);
      cutlass::arch::fence_view_async_shared();  // generic writes, read by the writer's bulk copy (async proxy)
      sm.dq_full[wg][buf].arrive();
    } else {
      add_dq(dq);
    }
    h = next_h, s0 = next_s0;
    advance(next_h, next_s0);
  }
  if constexpr (kV4) {
    if (broken)
      for (int e = 0; e < size(accum); ++e) accum(e) = __int_as_float(0x7fffffff);
  } else {
    asm volatile("cp.async.wait_group 0;\n" ::);  // no loads left in flight at exit (total == 0)
  }
  if constexpr (kEarly) {
    __syncthreads();  // every thread's adds of the last step precede its release
    if (released) bwd2::release_increment(released);  // the keepers
  }

  // Warpgroup 0 holds dV, 1 holds dK / scale; key rows past Skv are not written.
  const TokenTensor& out = wg == 0 ? a.dv : a.dk;
  T* ob = static_cast<T*>(out.ptr) + p.base(out, b, false) + hk * out.stride[1];
  bwd2::store_acc(ob, out.stride[2], accum, cA, r0, p.skv, wg == 0 ? 1.f : scale);
}

template <class T>
const char* launch_t(const BwdProblem& a, void* workspace, cudaStream_t st) {
  using Cfg = Config<T>;
  const Problem& p = a.p;
  auto early = bwd_kernel<T, true>;
  auto plain = bwd_kernel<T, false>;
  auto v4 = bwd_kernel<T, false, true>;
  static const cudaError_t attr = [&] {
    cudaError_t e = cudaFuncSetAttribute(early, cudaFuncAttributeMaxDynamicSharedMemorySize, Cfg::kSmemBytes);
    if (e == cudaSuccess) e = cudaFuncSetAttribute(plain, cudaFuncAttributeMaxDynamicSharedMemorySize, Cfg::kSmemBytes);
    return e != cudaSuccess ? e : cudaFuncSetAttribute(v4, cudaFuncAttributeMaxDynamicSharedMemorySize, Cfg::kSmemBytesV4);
  }();
  if (attr != cudaSuccess) return cudaGetErrorString(attr);
  if (p.b == 0 || p.hq == 0) return nullptr;
  const float* delta = static_cast<const float*>(workspace);
  const BwdV2Layout l = bwd_v2_layout(p);
  char* ws = static_cast<char*>(workspace);
  const bwd2::DqAccum acc{reinterpret_cast<float*>(ws + l.dq), reinterpret_cast<int*>(ws + l.counters), l.mt};
  if (l.counter_bytes > 0)
    if (const char* e = bwd::err(cudaMemsetAsync(acc.counters, 0, size_t(l.counter_bytes), st))) return e;
  // v4 where TMA can describe the problem (host work of a few microseconds: four encodes); its dQ
  // blocks have the bulk layout (bwd2::bulk_dq_offset), which dq_convert<..., true> reads.
  BwdV4Descs descs{};  // zeros for the other kernels, which do not read them
  const bool use_v4 = a.d256_v4 && bwd_v4_encode(a, descs) == nullptr;
  if (p.skv > 0) {
    const dim3 grid(unsigned((p.skv + kRes - 1) / kRes), unsigned(p.hk), unsigned(p.b));
    if (use_v4) v4<<<grid, bwd2::kV4Threads, Cfg::kSmemBytesV4, st>>>(a, delta, acc, descs);
    else (a.d256_early_turns ? early : plain)<<<grid, kThreads, Cfg::kSmemBytes, st>>>(a, delta, acc, descs);
    if (const char* e = bwd::err(cudaGetLastError())) return e;
  }
  if (p.sq > 0) {
    constexpr int kRows = kThreads / (kD / 8);
    const dim3 grid(unsigned((p.sq + kRows - 1) / kRows), unsigned(p.hq), unsigned(p.b));
    if (use_v4) bwd2::dq_convert<T, kD, true><<<grid, kThreads, 0, st>>>(a, acc);
    else bwd2::dq_convert<T, kD, false><<<grid, kThreads, 0, st>>>(a, acc);
    if (const char* e = bwd::err(cudaGetLastError())) return e;
  }
  return nullptr;
}

}  // namespace opendnn::cuda::sdpa::bwd2d256
