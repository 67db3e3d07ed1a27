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
//
// Persistent schedule (kPersistent; d64/d128; the default with two Q buffers, OPENDNN_SDPA_FWD_PERSISTENT=1
// one buffer, =0 the grid schedule; H200 session 9: 1.15-1.22x the grid at S=512, 1.02-1.05x at 2k). Why [measured, bench/results/sdpa.json, session 7]:
// every FA3 shape has 2048 (query block, head, batch) tiles at d128 (B*S = 16k, 16 heads), 15.5
// waves of 132 CTAs (4096 tiles, 31 waves at d64). Per wave (ms / 15.5), ours is 11.5, 17.4, 29.7 us
// at S 512/1024/2048, i.e. t = a + b * S/512 with a ~ 5.4 us, b ~ 6.1 us; cuDNN's 8.5 and 14.6 us
// at S 512/1024 give a ~ 2.3 us. That ~3 us a tile is the CTA's launch and set-up (the previous
// CTA's exit, barrier init, setmaxnreg, then Q + the first K/V tile from DRAM with the tensor cores
// idle) on top of the epilogue. Here the grid is at most one CTA an SM (graph sm_count caps it);
// each CTA starts on tile blockIdx.x, then its producer thread takes the next id from a counter
// (atomicAdd on 4 bytes of workspace that the launch zeroes) in the plain grid's order (query blocks
// fastest, so the CTAs running at once share K/V in L2; causal blocks heaviest first within a
// head) as soon as it has issued the current tile's last K/V load. The K/V ring runs on across
// tiles; Q comes in two 64-row halves, one a consumer warpgroup (q_full/q_empty per half), and the
// tile id travels in shared memory with them (slot k & 1 for the CTA's k-th tile).
// - Mode 1 (kQBufs 1, the 3-stage ring kept): Q has one buffer, which also stages the epilogue's
//   O, so the producer first issues the next tile's first kStages K/V tiles (their slots free up
//   in the current tile's last steps), then each Q half once its warpgroup's epilogue has left
//   it; that Q was prefetched into L2 when its id was taken. A tile's start costs a Q half from L2.
// - Mode 2 (kQBufs 2): tiles alternate two Q buffers, so the next tile's Q is loaded as soon as its
//   id is taken (the buffer's previous tile, two back, is long done) and is in place when the
//   current tile ends. At d128 the second 32 KiB buffer costs a K/V stage (2 stages, 192 KiB).
// Registers: the producer's loop state spills at 24, so the split is 40/232 (the consumers fit 232
// with no spill once the epilogue's and the mask's thread coordinates are recomputed in each tile,
// `opaque`, and mode 2 re-points the Q descriptors once a tile); d256's consumers (64x256
// accumulators) spill at 232 and even at 240 with the loop state, so d256 keeps the grid schedule.
// Expected [estimate, not measured]: mode 1 saves 1.5-2 us a tile: d128 S512 0.178 -> ~0.15 ms,
// S1024 0.270 -> ~0.245, S2048 0.460 -> ~0.43, causal S512/S1024 0.143/0.192 -> ~0.115/0.165; mode 2
// another ~0.5 us a tile (the L2 round trip of Q) where the 2-stage ring keeps up, i.e. d64 (3
// stages kept) and d128 at S <= 2k; d64 about twice the savings in ms (twice the tiles); S >= 8k
// within +-2% (tiles of 50-225 us), or slower in mode 2 at d128 if 2 stages starve the ring. The
// cost: a 4-byte memset node before each launch (~1-2 us) and 16 bytes of workspace. Not done: the
// O store of tile i still runs before the warpgroup's first GEMM of tile i+1 (O is staged in the
// Q buffer and stored by the consumer threads, not by TMA).
// Why not the two P fragments first: at S >= 2k, where the issue's 1.0x target is missed (d128
// S16384 0.96x, d256 0.94-0.98x), the time is in the steady loop, but a second P fragment costs 32
// registers a thread at d128 (64x128 bf16) with the consumers at ~225 of 240, and 16 at d256 at 237
// [ptxas, SASS register indices]: it needs a smaller S tile or a split accumulator first.
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

template <class T, int kD, int kDv, int kBN, int kStages, int kQBufs = 1>
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
    alignas(1024) T q[kQBufs * cute::cosize_v<SmemQ>];  // buffer b at q + b * kQElems
    alignas(1024) T k[cute::cosize_v<SmemK>];
    alignas(1024) T v[cute::cosize_v<SmemVt>];
    // q_full[0] takes all of Q in the grid schedule; the persistent one loads and frees each Q
    // buffer b in 64-row halves, one a consumer warpgroup ([2 * b + half]), and passes the tile id
    // in tile[] (two slots: one is written while the other may still be read).
    cutlass::arch::ClusterTransactionBarrier q_full[2 * kQBufs], k_full[kStages], v_full[kStages];
    cutlass::arch::ClusterBarrier q_empty[2 * kQBufs], k_empty[kStages], v_empty[kStages];
    int tile[2];
  };
  static constexpr int kQElems = cute::cosize_v<SmemQ>;
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
  int* next_tile = nullptr;  // persistent: zeroed before the launch; counts tiles past the grid's first
  int n_work = 0;            // persistent: (query blocks) x heads x batches
  int n_mb = 0, hq = 0;      // persistent: query blocks, query heads
};

// A (query block, head, batch) tile and the key tiles it visits.
struct Work {
  int m0 = 0, h = 0, bi = 0;
  int n_tiles = 0;  // key tiles [0, n_tiles) are visible to some row of the block
  int n_plain = 0;  // key tiles [0, n_plain) need no mask; the rest (a few at the end) do
};

template <int kBN>
__device__ __forceinline__ Work work_at(const Problem& p, int mb, int h, int bi) {
  const int sq = int(p.sq), skv = int(p.skv);
  const int diag = p.bottom_right ? skv - sq : 0;  // query i sits at key position i + diag
  Work w;
  w.m0 = mb * kBM, w.h = h, w.bi = bi;
  // Keys [0, n_hi) are visible to some row of the block; keys [0, full_hi) to every row of it.
  int n_hi = skv, full_hi = skv;
  if (p.has_right) {
    n_hi = min(n_hi, min(w.m0 + kBM, sq) + diag);
    full_hi = min(full_hi, w.m0 + diag + 1);
  }
  w.n_tiles = n_hi > 0 ? (n_hi + kBN - 1) / kBN : 0;
  w.n_plain = full_hi > 0 ? min(full_hi / kBN, w.n_tiles) : 0;
  return w;
}

// Tile `id` of the persistent order, the plain grid's launch order: query blocks fastest (reversed
// under a causal mask, the heaviest first), then heads, then batches. Returns (block, head, batch).
__device__ __forceinline__ int3 tile_coords(const Params& prm, int id) {
  const int hb = id / prm.n_mb, mi = id - hb * prm.n_mb;
  const int h = hb % prm.hq;
  return make_int3(prm.p.has_right ? prm.n_mb - 1 - mi : mi, h, (hb - h) / prm.hq);
}
template <int kBN>
__device__ __forceinline__ Work work_of(const Params& prm, int id) {
  const int3 c = tile_coords(prm, id);
  return work_at<kBN>(prm.p, c.x, c.y, c.z);
}

__device__ __forceinline__ void compiler_fence() { asm volatile("" ::: "memory"); }
// x, which the compiler can no longer treat as loop-invariant.
__device__ __forceinline__ int opaque(int x) {
  asm volatile("" : "+r"(x));
  return x;
}

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

template <class T, int kD, int kDv, int kBN, int kStages, bool kPersistent, int kQBufs = 1>
__global__ void __launch_bounds__(kThreads, 1) fwd_kernel(const __grid_constant__ Params prm) {
  using namespace cute;
  using Cfg = Config<T, kD, kDv, kBN, kStages, kQBufs>;
  static_assert(kQBufs == 1 || (kPersistent && kQBufs == 2), "two Q buffers only in the persistent schedule");
  constexpr float kLog2e = 1.4426950408889634f;
  constexpr float kLn2 = 0.6931471805599453f;
  const Problem& p = prm.p;

  extern __shared__ char smem_raw[];
  // Aligned by offsetting smem_raw itself (not through an integer), so the compiler still knows
  // every access is to shared memory (STS/LDS, not generic stores).
  const uint32_t raw_addr = cute::cast_smem_ptr_to_uint(smem_raw);
  auto& sm = *reinterpret_cast<typename Cfg::Smem*>(smem_raw + ((1024u - (raw_addr & 1023u)) & 1023u));
  const int wg = threadIdx.x / 128;
  // Positions fit in 32 bits (sequences up to 2^30, fwd_v2_supports), which keeps the masked
  // softmax step within the register budget.
  const int sq = int(p.sq), skv = int(p.skv);
  const int diag = p.bottom_right ? skv - sq : 0;  // query i sits at key position i + diag
  const int hq_per_k = int(p.hq / p.hk), hq_per_v = int(p.hq / p.hv);
  // The grid schedule's one tile. Causal blocks see more keys the later they sit: launch those
  // first so the short ones fill the tail of the grid.
  auto grid_work = [&] {
    return work_at<kBN>(p, p.has_right ? int(gridDim.x - 1 - blockIdx.x) : int(blockIdx.x), int(blockIdx.y),
                        int(blockIdx.z));
  };

  if (threadIdx.x == 0) {
    for (int i = 0; i < 2 * kQBufs; ++i) {
      sm.q_full[i].init(1);
      sm.q_empty[i].init(4);  // one arrival per warp of the consumer warpgroup owning the half
    }
    for (int s = 0; s < kStages; ++s) {
      sm.k_full[s].init(1);
      sm.v_full[s].init(1);
      sm.k_empty[s].init(8);  // one arrival per consumer warp
      sm.v_empty[s].init(8);
    }
    cutlass::arch::fence_barrier_init();
  }
  __syncthreads();

  // Register split (multiples of 8 summing to the launch's 168 a thread): the persistent producer
  // keeps the work loop's state and spills at 24 [ptxas -v]; its consumers fit 232.
  static_assert(!kPersistent || kDv <= 128, "d256's persistent consumers spill (fwd_v2_persistent_supports)");
  constexpr int kProducerRegs = kPersistent ? 40 : 24, kConsumerRegs = kPersistent ? 232 : 240;
  static_assert(kProducerRegs + 2 * kConsumerRegs == 3 * 168, "the register file of one CTA");
  if (wg == 0) {
    cutlass::arch::warpgroup_reg_dealloc<kProducerRegs>();
    if (threadIdx.x != 0) return;
    // A tile is kD / 64 boxes of (64 columns, box rows, 1 head, 1 batch), column block c at
    // dst + c * block_rows (the rows of the shared-memory tile); rows past the sequence (of this
    // head) are zero-filled and still counted in the transaction bytes.
    auto load = [&](const CUtensorMap& t, cutlass::arch::ClusterTransactionBarrier& bar, T* dst, int cols,
                    int block_rows, int row0, int head, int bi) {
      for (int c = 0; c < cols; c += kBoxCols)
        SM90_TMA_LOAD_4D::copy(&t, reinterpret_cast<uint64_t*>(&bar), uint64_t(TMA::CacheHintSm90::EVICT_NORMAL),
                               dst + c * block_rows, c, row0, head, bi);
    };
    // K/V tiles go round the ring in one sequence over all of the CTA's work tiles (`it`).
    int it = 0;
    auto load_kv = [&](const Work& w, int hk, int hv, int t) {
      const int s = it % kStages;
      const uint32_t reuse_phase = ((it / kStages) + 1) & 1;  // the phase of the load kStages back
      if (it >= kStages) sm.k_empty[s].wait(reuse_phase);
      sm.k_full[s].arrive_and_expect_tx(Cfg::kKBytes);
      load(prm.tk, sm.k_full[s], sm.k + s * kBN * kD, kD, kBN, t * kBN, hk, w.bi);
      if (it >= kStages) sm.v_empty[s].wait(reuse_phase);
      sm.v_full[s].arrive_and_expect_tx(Cfg::kVBytes);
      load(prm.tv, sm.v_full[s], sm.v + s * kBN * kDv, kDv, kBN, t * kBN, hv, w.bi);
      ++it;
    };
    if constexpr (!kPersistent) {
      const Work w = grid_work();
      sm.q_full[0].arrive_and_expect_tx(Cfg::kQBytes);
      load(prm.tq, sm.q_full[0], sm.q, kD, kBM, w.m0, w.h, w.bi);
      for (int t = 0; t < w.n_tiles; ++t) load_kv(w, w.h / hq_per_k, w.h / hq_per_v, t);
    } else {
      int id = int(blockIdx.x);
      for (int k = 0;; ++k) {
        const bool done = id >= prm.n_work;
        Work w;
        if (!done) w = work_of<kBN>(prm, id);
        const int hk = w.h / hq_per_k, hv = w.h / hq_per_v;
        // Q buffer b, in its use u; its halves, each with the tile id (or the end), or no rows.
        const int b = kQBufs == 2 ? (k & 1) : 0, u = kQBufs == 2 ? (k >> 1) : k;
        auto load_q_half = [&](int half) {
          const int row0 = w.m0 + half * 64;
          auto& full = sm.q_full[2 * b + half];
          if (done || row0 >= sq) {
            full.arrive();
          } else {
            full.arrive_and_expect_tx(Cfg::kQBytes / 2);
            load(prm.tq, full, sm.q + b * Cfg::kQElems + half * 64 * kBoxCols, kD, kBM, row0, w.h, w.bi);
          }
        };
        int pre = 0;
        if constexpr (kQBufs == 1) {
          // Slot k & 1 last held tile k - 2's id, which both warpgroups read before freeing their
          // halves of Q at its end (waited for below in round k - 1).
          *reinterpret_cast<volatile int*>(&sm.tile[k & 1]) = done ? -1 : id;
          compiler_fence();
          // The first K/V tiles wait only for ring slots of the previous tile, all freed before
          // its epilogue; the rest wait for this tile's own S GEMMs, which need Q first.
          pre = min(kStages, w.n_tiles);
          for (int t = 0; t < pre; ++t) load_kv(w, hk, hv, t);
          for (int half = 0; half < 2; ++half) {
            if (u > 0) sm.q_empty[half].wait((u - 1) & 1);
            load_q_half(half);
          }
        } else {
          // Buffer b was last used by tile k - 2 (normally long done): with both its halves free,
          // both warpgroups are past that tile, and so past their read of slot k & 1. Q goes first:
          // it no longer waits for the current tile's epilogue.
          if (u > 0) {
            sm.q_empty[2 * b].wait((u - 1) & 1);
            sm.q_empty[2 * b + 1].wait((u - 1) & 1);
          }
          *reinterpret_cast<volatile int*>(&sm.tile[k & 1]) = done ? -1 : id;
          compiler_fence();
          load_q_half(0);
          load_q_half(1);
        }
        if (done) return;
        for (int t = pre; t < w.n_tiles; ++t) load_kv(w, hk, hv, t);
        id = int(gridDim.x) + atomicAdd(prm.next_tile, 1);
        if (kQBufs == 1 && id < prm.n_work) {  // its Q into L2 while this tile's last K/V tiles are consumed
          const int3 n = tile_coords(prm, id);
          for (int r = n.x * kBM; r < min(n.x * kBM + kBM, sq); r += 64)
            for (int c = 0; c < kD; c += kBoxCols) SM90_TMA_LOAD_4D::PREFETCH::copy(&prm.tq, c, r, n.y, n.z);
        }
      }
    }
    return;
  }

  cutlass::arch::warpgroup_reg_alloc<kConsumerRegs>();
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
  Tensor tSrQ = thr_s.make_fragment_A(thr_s.partition_A(sQ));  // re-pointed at each tile's Q buffer
  Tensor tSrK = thr_s.make_fragment_B(thr_s.partition_B(sK));
  Tensor tOrP = thr_o.partition_fragment_A(make_tensor(static_cast<T*>(nullptr), make_layout(SShape{}, LayoutRight{})));
  Tensor tOrV = thr_o.make_fragment_B(thr_o.partition_B(sVt));
  Tensor accS = partition_fragment_C(mma_s, SShape{});
  Tensor accO = partition_fragment_C(mma_o, OShape{});
  static_assert(decltype(size(tOrP))::value == decltype(size(accS))::value, "P and S fragments differ");
  Tensor S = make_tensor(accS.data(), rows_cols(accS.layout()));
  Tensor O = make_tensor(accO.data(), rows_cols(accO.layout()));
  constexpr int kRows = decltype(size<0>(S))::value;
  static_assert(kRows == decltype(size<0>(O))::value, "S and O rows must match");

  const float scale2 = p.scale * kLog2e;  // never a device scale (fwd_v2_supports)
  float row_max[kRows], row_sum[kRows], corr[kRows];
  Work w;          // the current tile
  int qb = 0;       // its Q buffer (persistent with two buffers: tiles alternate)
  int diag_m0 = 0;  // w.m0 + diag: the key position of the tile's first query row
  int it = 0;  // ring position of its first K/V tile (the producer's sequence)

  // Turn-taking of the GEMM sections: consumer 0 goes first, so consumer 1 starts with one arrival
  // on consumer 0's barrier (consumer 0 takes it back after its last tile, leaving both barriers
  // empty). Both warpgroups take n_tiles + 1 turns a tile, so the alternation holds across tiles.
  auto turn_wait = [&] { cutlass::arch::NamedBarrier::sync(256, kTurnBar + cw); };
  auto turn_pass = [&] { cutlass::arch::NamedBarrier::arrive(256, kTurnBar + (cw ^ 1)); };
  if (cw == 1) turn_pass();

  // Online softmax of S (tile at key n0) in place: S becomes exp2(scaled S - new max), corr the
  // factor the old O and row sums take. kMask: columns past skv or right of the causal diagonal.
  // The scale is positive (the adapter runs v1 otherwise), so the max of the raw logits gives the
  // scaled max and the scaling folds into one FFMA per element ahead of the exp2.
  auto softmax = [&](auto mask_tag, int n0) {
    constexpr bool kMask = decltype(mask_tag)::value;
    // The coordinates again from an opaque thread index in the tile loop: kept from the start,
    // they are the one value ptxas spills there.
    Tensor cSm = mma_s.get_thread_slice(kPersistent && kMask ? opaque(tid) : tid).partition_C(make_identity_tensor(SShape{}));
    Tensor cSrc = make_tensor(cSm.data(), rows_cols(cSm.layout()));
    CUTE_UNROLL
    for (int r = 0; r < kRows; ++r) {
      int hi = skv - n0;  // visible columns of this row: [0, hi)
      if (kMask && p.has_right) hi = min(hi, diag_m0 + get<0>(cSrc(r, 0)) + 1 - n0);
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

  for (int k = 0;; ++k) {
    if constexpr (kPersistent) {
      qb = kQBufs == 2 ? (k & 1) : 0;
      if constexpr (kQBufs == 2) {
        Tensor sQb = make_tensor(make_smem_ptr(sm.q + qb * Cfg::kQElems), typename Cfg::SmemQ{});
        tSrQ = thr_s.make_fragment_A(thr_s.partition_A(sQb));
      }
      sm.q_full[2 * qb + cw].wait((kQBufs == 2 ? (k >> 1) : k) & 1);
      compiler_fence();
      const int id = *reinterpret_cast<volatile const int*>(&sm.tile[k & 1]);
      if (id < 0) break;
      w = work_of<kBN>(prm, id);
    } else {
      w = grid_work();
      sm.q_full[0].wait(0);
    }
    // Opaque in the tile loop, so ptxas does not keep per-row sums of it live (and spilled) across it.
    diag_m0 = (kPersistent ? opaque(diag) : diag) + w.m0;
    CUTE_UNROLL
    for (int r = 0; r < kRows; ++r) row_max[r] = -INFINITY, row_sum[r] = 0.0f, corr[r] = 1.0f;
    clear(accO);
    const int n_tiles = w.n_tiles, n_plain = w.n_plain;
    if (n_tiles > 0) {
      // Tile 0: S_0 alone.
      sm.k_full[it % kStages].wait((it / kStages) & 1);
      turn_wait();
      issue_s(it % kStages);
      turn_pass();
      warpgroup_wait<0>();
      warpgroup_fence_operand(accS);
      release(sm.k_empty[it % kStages]);
      if (n_plain > 0) softmax(std::false_type{}, 0);
      else softmax(std::true_type{}, 0);
      to_p();
      // Tile t: S_t and P_{t-1} V_{t-1} in flight together, softmax of S_t under the PV GEMM.
      auto step = [&](auto mask_tag, int t) {
        const int g = it + t;
        const int s = g % kStages, sp = (g - 1) % kStages;
        sm.k_full[s].wait((g / kStages) & 1);
        sm.v_full[sp].wait(((g - 1) / kStages) & 1);
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
      const int gl = it + n_tiles - 1, sl = gl % kStages;
      sm.v_full[sl].wait((gl / kStages) & 1);
      turn_wait();
      rescale_o();
      issue_pv(sl);
      turn_pass();
      warpgroup_wait<0>();
      warpgroup_fence_operand(accO);
      if constexpr (kPersistent) release(sm.v_empty[sl]);  // the next tile's loads reuse the slot
      it += n_tiles;
    }
    if constexpr (!kPersistent) {
      if (cw == 0) turn_wait();  // takes back consumer 1's opening arrival
    }

    // Epilogue. This warpgroup's S GEMMs, the only readers of its 64 rows of sQ, have completed:
    // O / l goes there (same swizzle, two columns per 32-bit store), then out 16 bytes a thread.
    // In the tile loop the thread index is made opaque first: else ptxas hoists the epilogue's
    // shared-memory addresses out of the loop and spills them (and accumulators) around it.
    const int etid = kPersistent ? opaque(tid) : tid;
    Tensor sO = make_tensor(make_smem_ptr(sm.q + (kQBufs == 1 ? 0 : qb * Cfg::kQElems)), typename Cfg::SmemQ{});
    Tensor cO = mma_o.get_thread_slice(etid).partition_C(make_identity_tensor(OShape{}));
    Tensor cOrc = make_tensor(cO.data(), rows_cols(cO.layout()));
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
        *reinterpret_cast<uint32_t*>(&sO(row, get<1>(cOrc(r, c)))) = word;
      }
      if (p.lse && tid % 4 == 0 && w.m0 + row < sq) {
        const float lse = l > 0.0f ? (row_max[r] + __log2f(l)) * kLn2 : -INFINITY;
        p.lse[p.lse_base(w.bi) + w.h * p.lse_stride[1] + (w.m0 + row) * p.lse_stride[2]] = lse;
      }
    }
    cutlass::arch::NamedBarrier::sync(128, kEpiBar + cw);  // this warpgroup's rows are in sQ
    T* o = static_cast<T*>(p.o.ptr) + p.base(p.o, w.bi, true) + w.h * p.o.stride[1];
    constexpr int kChunks = kDv / 8;
    const int wrow0 = cw * 64;
    for (int idx = threadIdx.x % 128; idx < 64 * kChunks; idx += 128) {
      const int row = wrow0 + idx / kChunks, col = (idx % kChunks) * 8;
      if (w.m0 + row < sq)
        *reinterpret_cast<uint4*>(o + int64_t(w.m0 + row) * p.o.stride[2] + col) =
            *reinterpret_cast<const uint4*>(&sO(row, col));
    }
    if constexpr (!kPersistent) {
      break;
    } else {
      // This warp's reads of its rows of sQ are done (their values are in the stores above); the
      // generic-proxy writes of O must be ordered before the TMA (async proxy) reloads Q there.
      cutlass::arch::fence_view_async_shared();
      __syncwarp();
      release(sm.q_empty[2 * qb + cw]);
    }
  }
  if constexpr (kPersistent) {
    if (cw == 0) turn_wait();  // takes back consumer 1's opening arrival
  }
}

// Whether Config<T, kD, kDv, kBN, kStages, kQBufs> fits the H200's 227 KiB (its barriers and
// alignment slack within 2 KiB), without instantiating it (its static_assert).
template <class T>
constexpr bool smem_fits(int d, int dv, int bn, int stages, int q_bufs) {
  return (int64_t(q_bufs) * kBM * d + int64_t(stages) * bn * (d + dv)) * int64_t(sizeof(T)) + 2048 <= 227 * 1024;
}

// The persistent grid: one CTA an SM (shared memory allows no second), never more than the tiles
// (whose count fits an int: fwd_v2_persistent_supports).
inline int persistent_ctas(const Problem& p, int sm_count) {
  const int64_t n_work = (p.sq + kBM - 1) / kBM * p.hq * p.b;
  return int(n_work < sm_count ? n_work : sm_count);
}

template <class T, int kD, int kDv, int kBN, int kStages>
const char* launch_t(const Problem& p, const FwdV2Descs& d, const FwdV2Persistent* pers, void* stream) {
  using Cfg = Config<T, kD, kDv, kBN, kStages>;
  auto kernel = fwd_kernel<T, kD, kDv, kBN, kStages, false>;
  static const cudaError_t attr =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Cfg::kSmemBytes);
  if (attr != cudaSuccess) return cudaGetErrorString(attr);
  if (p.b == 0 || p.hq == 0 || p.sq == 0) return nullptr;
  Params prm;
  memcpy(&prm.tq, d.bytes[0], sizeof(CUtensorMap));
  memcpy(&prm.tk, d.bytes[1], sizeof(CUtensorMap));
  memcpy(&prm.tv, d.bytes[2], sizeof(CUtensorMap));
  prm.p = p;
  auto st = static_cast<cudaStream_t>(stream);
  const int ctas = pers ? persistent_ctas(p, pers->ctas) : 0;
  if (pers && (ctas <= 0 || !pers->counter)) return "sdpa_fwd_v2: persistent launch without CTAs or a counter";
  if constexpr (kDv <= 128) {
    if (ctas > 0) {
      prm.next_tile = pers->counter;
      prm.n_mb = int((p.sq + kBM - 1) / kBM), prm.hq = int(p.hq);
      prm.n_work = prm.n_mb * prm.hq * int(p.b);
      // Two Q buffers take a K/V stage where the ring would not fit beside them (d128: 2 stages).
      constexpr int kStages2 = smem_fits<T>(kD, kDv, kBN, kStages, 2) ? kStages : kStages - 1;
      static_assert(kStages2 >= 2 && smem_fits<T>(kD, kDv, kBN, kStages2, 2), "two Q buffers and a 2-stage ring");
      auto kernel_p = pers->q_bufs == 2 ? fwd_kernel<T, kD, kDv, kBN, kStages2, true, 2>
                                        : fwd_kernel<T, kD, kDv, kBN, kStages, true, 1>;
      const int smem = pers->q_bufs == 2 ? Config<T, kD, kDv, kBN, kStages2, 2>::kSmemBytes : Cfg::kSmemBytes;
      static const cudaError_t attr_p1 =
          cudaFuncSetAttribute(fwd_kernel<T, kD, kDv, kBN, kStages, true, 1>,
                               cudaFuncAttributeMaxDynamicSharedMemorySize, Cfg::kSmemBytes);
      static const cudaError_t attr_p2 =
          cudaFuncSetAttribute(fwd_kernel<T, kD, kDv, kBN, kStages2, true, 2>,
                               cudaFuncAttributeMaxDynamicSharedMemorySize,
                               Config<T, kD, kDv, kBN, kStages2, 2>::kSmemBytes);
      if (attr_p1 != cudaSuccess) return cudaGetErrorString(attr_p1);
      if (attr_p2 != cudaSuccess) return cudaGetErrorString(attr_p2);
      if (cudaError_t e = cudaMemsetAsync(pers->counter, 0, sizeof(int), st); e != cudaSuccess)
        return cudaGetErrorString(e);
      kernel_p<<<ctas, kThreads, smem, st>>>(prm);
      cudaError_t e = cudaGetLastError();
      return e == cudaSuccess ? nullptr : cudaGetErrorString(e);
    }
  }
  // Q's descriptor has the persistent schedule's boxes: the grid schedule cannot take it.
  if (pers) return "sdpa_fwd_v2: no persistent kernel for this head dim";
  dim3 grid(unsigned((p.sq + kBM - 1) / kBM), unsigned(p.hq), unsigned(p.b));
  kernel<<<grid, kThreads, Cfg::kSmemBytes, st>>>(prm);
  cudaError_t e = cudaGetLastError();
  return e == cudaSuccess ? nullptr : cudaGetErrorString(e);
}

// Both element types of one head-dim configuration.
template <int kD, int kDv, int kBN, int kStages>
const char* launch_any(const Problem& p, const FwdV2Descs& d, const FwdV2Persistent* pers, void* stream) {
  static_assert(kBN == fwd_v2_kv_rows(kD), "the K/V box rows of the descriptors");
  return p.fp16 ? launch_t<cutlass::half_t, kD, kDv, kBN, kStages>(p, d, pers, stream)
                : launch_t<cutlass::bfloat16_t, kD, kDv, kBN, kStages>(p, d, pers, stream);
}

}  // namespace v2
}  // namespace opendnn::cuda::sdpa
