// SPDX-License-Identifier: Apache-2.0
// SDPA forward v2 for sm_90a, common case only: fp16/bf16, d_qk = d_v = 128, dense [B,H,S,D]
// (BHSD or BSHD strides), sq and skv multiples of 128, no mask or causal (either alignment).
// One CTA per (128 query rows, head, batch) with three warpgroups: warpgroup 0 gives up its
// registers (setmaxnreg 40) and one thread issues TMA loads: Q once, then K and V tiles into a
// 2-stage ring (full barriers carry the transaction bytes, empty barriers are arrived by every
// consumer warp); warpgroups 1 and 2 (setmaxnreg 232) own 64 query rows each: S = Q K^T by wgmma
// SS, online softmax in registers, P kept in registers as the A operand of O += P V (wgmma RS,
// the accumulator order is the A-register order, as in sdpa_fwd_kernel.cuh), then O goes through
// shared memory (Q's, no longer read) to 16-byte global stores.
// Not yet: overlap of softmax with the next S GEMM inside a warpgroup, pingpong between the two
// consumer warpgroups, TMA store of O.
#include <cuda.h>
#include <cuda_runtime.h>

#include <cute/tensor.hpp>
#include <cute/arch/copy_sm90_tma.hpp>
#include <cute/atom/mma_traits_sm90_gmma.hpp>
#include <cutlass/arch/barrier.h>
#include <cutlass/arch/reg_reconfig.h>
#include <cutlass/numeric_types.h>

#include "engines/cuda/sdpa/sdpa_fwd_kernel.cuh"
#include "engines/cuda/sdpa/sdpa_fwd_v2.h"

namespace opendnn::cuda::sdpa {
namespace {

constexpr int kV2D = 128;   // head dim of both GEMMs
constexpr int kV2Tile = 128;  // query rows and key rows of a tile
constexpr int kV2Threads = 384;
// One TMA box: 64 elements (128 bytes, the swizzle span) by 128 rows; a tile is two boxes.
constexpr int kBoxCols = 64;
constexpr uint32_t kTileBytes = kV2Tile * kV2D * 2;

template <class T>
struct V2Config {
  // The v1 configuration of the same shape gives the GEMMs and the Q and K layouts: K-major with
  // 64-column swizzle atoms stacked down the rows first, so columns [0,64) of all 128 rows are
  // one contiguous 16 KiB TMA box and [64,128) the next.
  using V1 = FwdConfig<T, kV2D, kV2D, kV2Tile>;
  using Tile = typename V1::BN;
  using D = typename V1::D;
  using SmemQ = typename V1::SmemQ;
  using SmemK = typename V1::SmemK;
  using MmaS = typename V1::MmaS;
  using MmaO = typename V1::MmaO;
  // V as the (d, key) B operand, d contiguous, with its atoms stacked along the keys first (unlike
  // v1's) so that the same two row-major boxes of V land in it unchanged.
  using SmemVt = decltype(cute::tile_to_shape(cute::GMMA::Layout_MN_SW128_Atom<T>{}, cute::Shape<D, Tile, cute::_2>{},
                                              cute::Step<cute::_2, cute::_1, cute::_3>{}));
  struct Smem {
    alignas(1024) T q[cute::cosize_v<SmemQ>];
    alignas(1024) T k[cute::cosize_v<SmemK>];
    alignas(1024) T v[cute::cosize_v<SmemVt>];
    cutlass::arch::ClusterTransactionBarrier q_full, k_full[2], v_full[2];
    cutlass::arch::ClusterBarrier empty[2];
  };
  static constexpr int kSmemBytes = int(sizeof(Smem)) + 1024;
  static_assert(kSmemBytes <= 227 * 1024, "shared memory of one CTA exceeds the H200's 227 KiB");
};

struct V2Params {
  CUtensorMap tq, tk, tv;
  Problem p;
};

template <class T>
__global__ void __launch_bounds__(kV2Threads, 1) sdpa_fwd_v2_kernel(const __grid_constant__ V2Params prm) {
  using namespace cute;
  using Cfg = V2Config<T>;
  constexpr float kLog2e = 1.4426950408889634f;
  constexpr float kLn2 = 0.6931471805599453f;
  const Problem& p = prm.p;

  extern __shared__ char smem_raw[];
  auto& sm = *reinterpret_cast<typename Cfg::Smem*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));
  const int wg = threadIdx.x / 128;
  const int m0 = int(blockIdx.x) * kV2Tile;
  const int h = int(blockIdx.y), bi = int(blockIdx.z);
  const int hk = h / int(p.hq / p.hk), hv = h / int(p.hq / p.hv);
  const int64_t diag = p.bottom_right ? p.skv - p.sq : 0;  // query i sits at key position i + diag
  // Tiles [0, n_tiles): all of them, or those up to the diagonal of this block's last row.
  int64_t n_hi = p.skv;
  if (p.has_right) {
    const int64_t lim = m0 + kV2Tile + diag;
    n_hi = lim < n_hi ? lim : n_hi;
  }
  const int n_tiles = n_hi > 0 ? int((n_hi + kV2Tile - 1) / kV2Tile) : 0;

  if (threadIdx.x == 0) {
    sm.q_full.init(1);
    for (int s = 0; s < 2; ++s) {
      sm.k_full[s].init(1);
      sm.v_full[s].init(1);
      sm.empty[s].init(8);  // one arrival per consumer warp
    }
    cutlass::arch::fence_barrier_init();
  }
  __syncthreads();

  if (wg == 0) {
    cutlass::arch::warpgroup_reg_dealloc<40>();
    if (threadIdx.x != 0) return;
    // Boxes are (64 columns, 128 rows, 1 head, 1 batch); a 16 KiB box per column half.
    auto load = [&](const CUtensorMap& t, cutlass::arch::ClusterTransactionBarrier& bar, T* dst, int row, int head) {
      for (int half = 0; half < kV2D / kBoxCols; ++half)
        SM90_TMA_LOAD_4D::copy(&t, reinterpret_cast<uint64_t*>(&bar), uint64_t(TMA::CacheHintSm90::EVICT_NORMAL),
                               dst + half * kV2Tile * kBoxCols, half * kBoxCols, row, head, bi);
    };
    sm.q_full.arrive_and_expect_tx(kTileBytes);
    load(prm.tq, sm.q_full, sm.q, m0, h);
    for (int t = 0; t < n_tiles; ++t) {
      const int s = t & 1;
      if (t >= 2) sm.empty[s].wait(((t >> 1) - 1) & 1);
      sm.k_full[s].arrive_and_expect_tx(kTileBytes);
      load(prm.tk, sm.k_full[s], sm.k + s * kV2Tile * kV2D, t * kV2Tile, hk);
      sm.v_full[s].arrive_and_expect_tx(kTileBytes);
      load(prm.tv, sm.v_full[s], sm.v + s * kV2Tile * kV2D, t * kV2Tile, hv);
    }
    return;
  }

  cutlass::arch::warpgroup_reg_alloc<232>();
  const int tid = threadIdx.x - 128;  // 0..255 over the two consumer warpgroups
  Tensor sQ = make_tensor(make_smem_ptr(sm.q), typename Cfg::SmemQ{});
  Tensor sK = make_tensor(make_smem_ptr(sm.k), typename Cfg::SmemK{});
  Tensor sVt = make_tensor(make_smem_ptr(sm.v), typename Cfg::SmemVt{});
  typename Cfg::MmaS mma_s;
  typename Cfg::MmaO mma_o;
  auto thr_s = mma_s.get_thread_slice(tid);
  auto thr_o = mma_o.get_thread_slice(tid);
  using TileShape = Shape<typename Cfg::Tile, typename Cfg::Tile>;
  using OShape = Shape<typename Cfg::Tile, typename Cfg::D>;
  Tensor tSrQ = thr_s.make_fragment_A(thr_s.partition_A(sQ));
  Tensor tSrK = thr_s.make_fragment_B(thr_s.partition_B(sK));
  Tensor tOrP = thr_o.partition_fragment_A(make_tensor(static_cast<T*>(nullptr), make_layout(TileShape{}, LayoutRight{})));
  Tensor tOrV = thr_o.make_fragment_B(thr_o.partition_B(sVt));
  Tensor accS = partition_fragment_C(mma_s, TileShape{});
  Tensor accO = partition_fragment_C(mma_o, OShape{});
  static_assert(decltype(size(tOrP))::value == decltype(size(accS))::value, "P and S fragments differ");
  Tensor cS = thr_s.partition_C(make_identity_tensor(TileShape{}));
  Tensor cO = thr_o.partition_C(make_identity_tensor(OShape{}));
  Tensor S = make_tensor(accS.data(), rows_cols(accS.layout()));
  Tensor O = make_tensor(accO.data(), rows_cols(accO.layout()));
  Tensor cSrc = make_tensor(cS.data(), rows_cols(cS.layout()));
  Tensor cOrc = make_tensor(cO.data(), rows_cols(cO.layout()));
  constexpr int kRows = decltype(size<0>(S))::value;

  const float scale2 = (p.scale_ptr ? *p.scale_ptr : p.scale) * kLog2e;
  float row_max[kRows], row_sum[kRows];
  CUTE_UNROLL
  for (int r = 0; r < kRows; ++r) row_max[r] = -INFINITY, row_sum[r] = 0.0f;
  clear(accO);

  sm.q_full.wait(0);
  for (int t = 0; t < n_tiles; ++t) {
    const int s = t & 1, phase = (t >> 1) & 1;
    const int n0 = t * kV2Tile;
    sm.k_full[s].wait(phase);
    Tensor tSrK_s = tSrK(_, _, _, s);
    wgmma_tile(mma_s, tSrQ, tSrK_s, accS, false);
    // Only a tile that crosses this block's diagonal has masked columns.
    const bool masked = p.has_right && n0 + kV2Tile - 1 > m0 + diag;
    CUTE_UNROLL
    for (int r = 0; r < kRows; ++r) {
      const int64_t hi = m0 + get<0>(cSrc(r, 0)) + diag + 1 - n0;  // visible columns [0, hi)
      float mx = row_max[r];
      CUTE_UNROLL
      for (int c = 0; c < size<1>(S); ++c) {
        const bool vis = !masked || get<1>(cSrc(r, c)) < hi;
        const float s2 = vis ? S(r, c) * scale2 : -INFINITY;
        S(r, c) = s2;
        mx = fmaxf(mx, s2);
      }
      softmax_update(S, O, r, mx, row_max[r], row_sum[r]);
    }
    CUTE_UNROLL
    for (int e = 0; e < size(accS); ++e) tOrP(e) = T(accS(e));
    sm.v_full[s].wait(phase);
    Tensor tOrV_s = tOrV(_, _, _, s);
    wgmma_tile(mma_o, tOrP, tOrV_s, accO, true);
    // Both of this warp's GEMMs on stage s have completed: the stage may be refilled.
    if (threadIdx.x % 32 == 0) sm.empty[s].arrive();
  }

  // Epilogue. Each consumer warpgroup's S GEMMs read only its own 64 rows of Q, all completed, so
  // it writes O / l over those rows of sQ (same swizzle) and then copies them out 16 bytes a thread.
  const int wrow0 = (wg - 1) * 64;
  CUTE_UNROLL
  for (int r = 0; r < kRows; ++r) {
    float l = row_sum[r];
    l += __shfl_xor_sync(0xffffffffu, l, 1);
    l += __shfl_xor_sync(0xffffffffu, l, 2);
    const int row = get<0>(cOrc(r, 0));
    const float inv = l > 0.0f ? 1.0f / l : 0.0f;
    CUTE_UNROLL
    for (int c = 0; c < size<1>(O); ++c) sQ(row, get<1>(cOrc(r, c))) = T(O(r, c) * inv);
    if (p.lse && tid % 4 == 0) {
      const float lse = l > 0.0f ? (row_max[r] + log2f(l)) * kLn2 : -INFINITY;
      p.lse[p.lse_base(bi) + h * p.lse_stride[1] + (m0 + row) * p.lse_stride[2]] = lse;
    }
  }
  cutlass::arch::NamedBarrier::sync(128, wg);  // ids 1 and 2: this warpgroup's rows are in sQ
  T* o = static_cast<T*>(p.o.ptr) + p.base(p.o, bi, true) + h * p.o.stride[1];
  constexpr int kChunks = kV2D / 8;
  for (int idx = threadIdx.x % 128; idx < 64 * kChunks; idx += 128) {
    const int row = wrow0 + idx / kChunks, col = (idx % kChunks) * 8;
    *reinterpret_cast<uint4*>(o + int64_t(m0 + row) * p.o.stride[2] + col) =
        *reinterpret_cast<const uint4*>(&sQ(row, col));
  }
}

using EncodeTiled = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                                 const cuuint64_t*, const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave,
                                 CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

EncodeTiled encode_fn() {
  // Through the runtime, so the library does not link the driver; looked up once.
  static const EncodeTiled fn = [] {
    void* f = nullptr;
    cudaDriverEntryPointQueryResult q{};
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault, &q) != cudaSuccess ||
        q != cudaDriverEntryPointSuccess)
      f = nullptr;
    return reinterpret_cast<EncodeTiled>(f);
  }();
  return fn;
}

// A [B, H, S, 128] tensor as the 4-D TMA view (d, s, h, b) with 128-byte swizzled boxes.
const char* encode(CUtensorMap* m, const TokenTensor& t, int64_t b, int64_t heads, int64_t seq, bool fp16) {
  EncodeTiled fn = encode_fn();
  if (!fn) return "cuTensorMapEncodeTiled is not available from the driver";
  const cuuint64_t dims[4] = {cuuint64_t(kV2D), cuuint64_t(seq), cuuint64_t(heads), cuuint64_t(b)};
  const cuuint64_t strides[3] = {cuuint64_t(t.stride[2]) * 2, cuuint64_t(t.stride[1]) * 2, cuuint64_t(t.stride[0]) * 2};
  const cuuint32_t box[4] = {kBoxCols, kV2Tile, 1, 1};
  const cuuint32_t elem[4] = {1, 1, 1, 1};
  CUresult r = fn(m, fp16 ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16 : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 4, t.ptr, dims, strides,
                  box, elem, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                  CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  return r == CUDA_SUCCESS ? nullptr : "cuTensorMapEncodeTiled rejected a Q/K/V view (pointer or strides)";
}

template <class T>
const char* launch(const Problem& p, const FwdV2Descs& d, void* stream) {
  auto kernel = sdpa_fwd_v2_kernel<T>;
  static const cudaError_t attr =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, V2Config<T>::kSmemBytes);
  if (attr != cudaSuccess) return cudaGetErrorString(attr);
  if (p.b == 0 || p.hq == 0 || p.sq == 0) return nullptr;
  V2Params prm;
  memcpy(&prm.tq, d.bytes[0], sizeof(CUtensorMap));
  memcpy(&prm.tk, d.bytes[1], sizeof(CUtensorMap));
  memcpy(&prm.tv, d.bytes[2], sizeof(CUtensorMap));
  prm.p = p;
  dim3 grid(unsigned(p.sq / kV2Tile), unsigned(p.hq), unsigned(p.b));
  kernel<<<grid, kV2Threads, V2Config<T>::kSmemBytes, static_cast<cudaStream_t>(stream)>>>(prm);
  cudaError_t e = cudaGetLastError();
  return e == cudaSuccess ? nullptr : cudaGetErrorString(e);
}

}  // namespace

static_assert(sizeof(CUtensorMap) == sizeof(FwdV2Descs::bytes[0]), "CUtensorMap is 128 bytes");

std::string fwd_v2_supports(const Problem& p) {
  const std::string no = "not supported by sdpa_fwd_v2: ";
  if (p.d_qk != kV2D || p.d_v != kV2D) return no + "head dims other than 128";
  if (p.sq % kV2Tile || p.skv % kV2Tile) return no + "sequence lengths that are not multiples of 128";
  if (p.seq_len_q.ptr || p.seq_len_kv.ptr || p.cu_q.ptr || p.cu_kv.ptr) return no + "per-batch lengths";
  if (p.q.ragged.ptr || p.k.ragged.ptr || p.v.ragged.ptr || p.o.ragged.ptr || p.lse_ragged.ptr)
    return no + "ragged (THD) layouts";
  if (p.sink) return no + "attention sinks";
  if (p.has_left) return no + "sliding windows";
  if (p.has_right && p.right != 0) return no + "right bounds other than 0 (causal)";
  if (p.b > 65535 || p.hq > 65535) return no + "more than 65535 batches or heads";
  for (const TokenTensor* t : {&p.q, &p.k, &p.v, &p.o})
    for (int i = 0; i < 3; ++i)
      if (t->stride[i] % 8 || t->stride[i] <= 0) return no + "strides that are not positive multiples of 8 elements";
  return "";
}

const char* fwd_v2_encode(const Problem& p, FwdV2Descs& d) {
  if (const char* e = encode(reinterpret_cast<CUtensorMap*>(d.bytes[0]), p.q, p.b, p.hq, p.sq, p.fp16)) return e;
  if (const char* e = encode(reinterpret_cast<CUtensorMap*>(d.bytes[1]), p.k, p.b, p.hk, p.skv, p.fp16)) return e;
  return encode(reinterpret_cast<CUtensorMap*>(d.bytes[2]), p.v, p.b, p.hv, p.skv, p.fp16);
}

const char* launch_fwd_v2(const Problem& p, const FwdV2Descs& d, void* stream) {
  return p.fp16 ? launch<cutlass::half_t>(p, d, stream) : launch<cutlass::bfloat16_t>(p, d, stream);
}

}  // namespace opendnn::cuda::sdpa
