// SPDX-License-Identifier: Apache-2.0
// Gated delta net forward, chunk size 64 (shared/reference/gated_delta_net.md section 1.3).
//
// Kernels, in stream order:
//   chunk_table   one CTA turns cu_seqlens into a chunk -> (sequence, first token) table sized by the
//                 bound T/64 + N, with sentinel rows, so nothing waits for the host (graph capturable).
//   l2_rows       (use_qk_l2norm only) q and k rows normalised once per q/k head into the workspace.
//   chunk_prep    per (chunk, output head): gamma = within-chunk cumsum of g, the UT transform
//                 T = (I + StrictLower(beta K K^T * decay))^-1 by forward substitution, W = T (beta e^gamma K),
//                 U = T (beta V), and the masked, decayed, scaled Q K^T of the output.
//                 chunk_prep_mma (the default; OPENDNN_GDN_PREP_V2=0 withholds it) does the same per
//                 (chunk, q/k head) with mma.sync, sharing K K^T and Q K^T over the output heads of a group.
//   state_pass    per (sequence, output head, V slice): walks the chunks in order with the state slice in
//                 fp32 shared memory: v' = U - W S, O = (scale e^gamma Q) S + Aqk v',
//                 S <- e^gamma_last S + (e^(gamma_last - gamma) K)^T v'. Fusing the output here means the
//                 per-chunk states never go to memory in the forward.
//                 state_pass_mma (the default; OPENDNN_GDN_FWD_V2=0 withholds it) keeps the state in
//                 mma.sync registers; when the unsplit grid underfills the GPU (OPENDNN_GDN_SPLIT=1/0
//                 forces it) it runs split: segment summaries, split_combine, then
//                 the outputs per segment (see the comment above PassMode). Its chunk products run on
//                 wgmma (v4, the default; OPENDNN_GDN_FWD_V4=0: mma.sync; see "v4" in namespace mma).
// Matrix products use warp-level bf16/fp16 tensor-core fragments (WMMA) from shared memory, fp32
// accumulation. exp(gamma_i - gamma_j) is only evaluated under the causal mask, so strong gates
// (a chunk's cumulative log decay far below -88) underflow to 0 instead of producing inf * 0.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <mma.h>

#include <algorithm>
#include <cstring>
#include <type_traits>

#include "engines/cuda/gdn/gdn_device.cuh"
#include "engines/cuda/gdn/gdn_kernels.h"

namespace opendnn::cuda::gdn {
namespace {

namespace wm = nvcuda::wmma;
constexpr int C = kChunk;
constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kPad16 = 8;  // 16 bytes of row padding on 16-bit tiles against bank conflicts
constexpr int kPad32 = 4;

size_t align_up(size_t x) { return (x + 255) & ~size_t(255); }

// Waits until at most N of this thread's cp.async groups are still pending.
template <int N>
__device__ __forceinline__ void cp_wait_group() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// Workspace carve-up, shared by the size query and the launcher.
struct Work {
  int2* table;     // [bound] (sequence, first token); sequence -1 marks unused rows
  float* gam;      // [T, HO] within-chunk cumulative log gate
  void* w;         // [T, HO, K] io type
  void* u;         // [T, HO, V]
  void* aqk;       // [T, HO, 64] scale * (Q K^T masked and decayed)
  void* qn;        // [T, H, K] l2-normalised q (l2norm only, unless fused_l2)
  void* kn;
  // prep3: [3][T, HO] fp32 per-row scales for the pass, with n = the row's inverse l2 norm of k or q
  // (1 without l2norm): e^gamma n_k, scale e^gamma n_q, e^(gamma_last - gamma) n_k.
  float* fs;
  int2* segtab;    // split pass: [seg_bound] (sequence, first token) of each segment
  float* seg;      // split pass: [seg_bound, HO, V + K, K] fp32, see state_pass_mma
  // Kept for the chunked backward (a.keep): the inverse T = (I + A)^-1 [T, HO, 64] io type (chunk_prep_mma),
  // the state entering every chunk [T/64 + N, HO, V, K] io type (sequence s, chunk c at row cu[s]/64 + s + c)
  // and v' = U - W S [T, HO, V] io type (state_pass_mma kStates).
  void* tmat;
  void* tu;        // prep3: [T, HO, 64] io type, Tu = T diag(beta) (instead of W and U)
  void* states;
  void* vn;
  size_t bytes;
};
int64_t chunk_bound(const FwdArgs& a) { return a.t / C + a.n; }
// chunk_prep_mma's v3 variant, and whether it takes over the l2 normalisation (see FwdArgs::prep_v3).
bool prep3(const FwdArgs& a) { return a.prep_v3 && a.mma_prep && (a.mma_pass || a.split) && !a.keep; }
bool fused_l2(const FwdArgs& a) { return a.l2norm && prep3(a); }
// v4 (OPENDNN_GDN_FWD_V4): the v3 pass with wgmma products; a warpgroup owns 64 state columns.
bool wg_pass(const FwdArgs& a) { return a.wg && prep3(a) && a.bv % 64 == 0; }
int64_t seg_bound(const FwdArgs& a) { return a.split ? a.t / (int64_t(C) * a.seg_chunks) + a.n : 0; }
Work carve(const FwdArgs& a, char* base) {
  Work w{};
  size_t off = 0;
  auto take = [&](size_t bytes) {
    char* p = base ? base + off : nullptr;
    off += align_up(bytes);
    return p;
  };
  const size_t e = 2, rows = size_t(a.t) * size_t(a.ho);
  w.table = reinterpret_cast<int2*>(take(size_t(chunk_bound(a)) * sizeof(int2)));
  w.gam = reinterpret_cast<float*>(take(rows * sizeof(float)));
  if (prep3(a)) {
    w.tu = take(rows * C * e);
  } else {
    w.w = take(rows * size_t(a.k) * e);
    w.u = take(rows * size_t(a.v) * e);
  }
  w.aqk = take(rows * C * e);
  if (prep3(a)) w.fs = reinterpret_cast<float*>(take(3 * rows * sizeof(float)));
  if (a.l2norm && !fused_l2(a)) {
    w.qn = take(size_t(a.t) * size_t(a.h) * size_t(a.k) * e);
    w.kn = take(size_t(a.t) * size_t(a.h) * size_t(a.k) * e);
  }
  if (a.keep) {
    w.tmat = take(rows * C * e);
    w.states = take(size_t(chunk_bound(a)) * size_t(a.ho) * size_t(a.v) * size_t(a.k) * e);
    w.vn = take(rows * size_t(a.v) * e);
  }
  if (a.split) {
    w.segtab = reinterpret_cast<int2*>(take(size_t(seg_bound(a)) * sizeof(int2)));
    w.seg = reinterpret_cast<float*>(take(size_t(seg_bound(a)) * size_t(a.ho) * size_t(a.v + a.k) * size_t(a.k) * 4));
  }
  w.bytes = off;
  return w;
}

// ------------------------------------------------------------------------------------------------
// The chunk table (span = C tokens an entry) and the segment table of the split pass (span = C times
// the chunks of a segment). One CTA scans the per-sequence entry counts in tiles of blockDim sequences.
__global__ void __launch_bounds__(1024) chunk_table(const void* cu, bool i64, int64_t n, int64_t bound, int span,
                                                    int2* table) {
  __shared__ int warp_sums[32];
  __shared__ int carry;
  if (threadIdx.x == 0) carry = 0;
  __syncthreads();
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  for (int64_t base = 0; base < n; base += blockDim.x) {
    const int64_t s = base + threadIdx.x;
    int64_t t0 = 0, len = 0;
    if (s < n) {
      t0 = cu_at(cu, i64, s);
      len = cu_at(cu, i64, s + 1) - t0;
      if (len < 0) len = 0;
    }
    const int chunks = int((len + span - 1) / span);
    int incl = chunks;  // inclusive scan over the block
    for (int o = 1; o < 32; o <<= 1) {
      int y = __shfl_up_sync(0xffffffffu, incl, o);
      if (lane >= o) incl += y;
    }
    if (lane == 31) warp_sums[warp] = incl;
    __syncthreads();
    if (warp == 0) {
      int x = lane < int(blockDim.x / 32) ? warp_sums[lane] : 0;
      for (int o = 1; o < 32; o <<= 1) {
        int y = __shfl_up_sync(0xffffffffu, x, o);
        if (lane >= o) x += y;
      }
      warp_sums[lane] = x;
    }
    __syncthreads();
    const int start = carry + (warp > 0 ? warp_sums[warp - 1] : 0) + incl - chunks;
    for (int c = 0; c < chunks && start + c < bound; ++c) table[start + c] = make_int2(int(s), int(t0 + int64_t(c) * span));
    __syncthreads();
    if (threadIdx.x == 0) carry += warp_sums[blockDim.x / 32 - 1];
    __syncthreads();
  }
  for (int64_t i = carry + threadIdx.x; i < bound; i += blockDim.x) table[i] = make_int2(-1, 0);
}

// ------------------------------------------------------------------------------------------------
// One warp per row of q or k: x * (sum x^2 + 1e-6)^-1/2, as the reference defines it.
template <class T>
__global__ void __launch_bounds__(kThreads) l2_rows(const T* q, const T* k, T* qn, T* kn, int64_t rows, int dim) {
  const int64_t r = int64_t(blockIdx.x) * kWarps + threadIdx.x / 32;
  if (r >= 2 * rows) return;
  const int lane = threadIdx.x % 32;
  const T* src = (r < rows ? q : k) + (r % rows) * dim;
  T* dst = (r < rows ? qn : kn) + (r % rows) * dim;
  float ss = 0.f;
  for (int d = lane; d < dim; d += 32) ss += to_f(src[d]) * to_f(src[d]);
  for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
  const float r_ = rsqrtf(ss + 1e-6f);
  for (int d = lane; d < dim; d += 32) dst[d] = from_f<T>(to_f(src[d]) * r_);
}

// Copies `rows` valid rows of `cols` 16-bit elements (a multiple of 8) from global (row stride in
// elements) into a shared tile with leading dimension ld, multiplying row r by f(r); rows up to C
// beyond the valid ones are zeroed.
template <class T, class F>
__device__ __forceinline__ void stage_rows(T* dst, int ld, const T* src, int64_t stride, int rows, int cols, F f) {
  const int per_row = cols / 8;
  for (int i = threadIdx.x; i < C * per_row; i += blockDim.x) {
    const int r = i / per_row, c = (i % per_row) * 8;
    uint4 raw = make_uint4(0, 0, 0, 0);
    if (r < rows) {
      raw = *reinterpret_cast<const uint4*>(src + r * stride + c);
      const float m = f(r);
      if (m != 1.f) {
        T* e = reinterpret_cast<T*>(&raw);
#pragma unroll
        for (int j = 0; j < 8; ++j) e[j] = from_f<T>(to_f(e[j]) * m);
      }
    }
    *reinterpret_cast<uint4*>(dst + r * ld + c) = raw;
  }
}
struct One {
  __device__ float operator()(int) const { return 1.f; }
};

template <class T>
using FragA = wm::fragment<wm::matrix_a, 16, 16, 16, T, wm::row_major>;
template <class T>
using FragAT = wm::fragment<wm::matrix_a, 16, 16, 16, T, wm::col_major>;
template <class T>
using FragB = wm::fragment<wm::matrix_b, 16, 16, 16, T, wm::row_major>;
template <class T>
using FragBT = wm::fragment<wm::matrix_b, 16, 16, 16, T, wm::col_major>;
using Acc = wm::fragment<wm::accumulator, 16, 16, 16, float>;

// acc += A[16 x 16*ktiles] B[16*ktiles x 16], both row-major tiles in shared memory.
template <class T>
__device__ __forceinline__ void mma_rows(Acc& acc, const T* a, int lda, const T* b, int ldb, int ktiles) {
  for (int kt = 0; kt < ktiles; ++kt) {
    FragA<T> fa;
    FragB<T> fb;
    wm::load_matrix_sync(fa, a + kt * 16, lda);
    wm::load_matrix_sync(fb, b + kt * 16 * ldb, ldb);
    wm::mma_sync(acc, fa, fb, acc);
  }
}

// ------------------------------------------------------------------------------------------------
// chunk_prep: grid (bound, HO), kThreads threads. Dynamic shared memory, see prep_smem().
struct PrepParams {
  FwdArgs a;
  Work w;
  const void* q;  // q and k as the kernels read them (normalised copies with l2norm)
  const void* k;
};
size_t prep_smem(int k, int v) {
  return size_t(2 * C * (k + kPad16) + C * (v + kPad16) + C * (C + kPad16)) * 2 +
         size_t(2 * C * (C + kPad32) + kWarps * 256 + 2 * C) * 4;
}

// Column c of (I + A_oo)^-1 for the 16x16 diagonal block at row/column o of a strictly lower A (row
// stride ld), by forward substitution in registers: a chain through shared memory would cost a load
// latency a step. Entries above row c come out as exact zeros, so every sum starts at m = 0 (A is
// finite) and the loops stay fully unrolled. Both chunk_prep kernels take their diagonal blocks here.
__device__ __forceinline__ void unit_lower_inverse_column16(const float* A, int ld, int o, int c, float (&col)[16]) {
#pragma unroll
  for (int r = 0; r < 16; ++r) {
    float x = r == c ? 1.f : 0.f;
#pragma unroll
    for (int m = 0; m < r; ++m) x -= A[(o + r) * ld + o + m] * col[m];
    col[r] = x;
  }
}

template <class T>
__global__ void __launch_bounds__(kThreads) chunk_prep(PrepParams p) {
  const FwdArgs& a = p.a;
  const int2 ent = p.w.table[blockIdx.x];
  if (ent.x < 0) return;
  const int j = blockIdx.y;
  const int K = int(a.k), V = int(a.v);
  const int64_t t0 = ent.y;
  const int L = int(imin(C, cu_at(a.cu, a.cu_int64, ent.x + 1) - t0));
  const int hq = int(j / (a.ho / a.h)), hvv = int(j / (a.ho / a.hv));
  const int ldk = K + kPad16, ldv = V + kPad16, ldc = C + kPad16, ldf = C + kPad32;

  extern __shared__ __align__(128) unsigned char smem[];
  T* kb = reinterpret_cast<T*>(smem);        // [C][ldk] k rows
  T* qb = kb + C * ldk;                      // [C][ldk] q rows, later beta e^gamma k
  T* vb = qb + C * ldk;                      // [C][ldv] beta v
  T* tb = vb + C * ldv;                      // [C][ldc] the UT transform in the io type
  float* gs = reinterpret_cast<float*>(tb + C * ldc);  // [C][ldf] K K^T, then A
  float* ps = gs + C * ldf;                  // [C][ldf] Q K^T
  float* tm = ps;                            // [C][ldf] (I + A)^-1, once the mask pass has read Q K^T
  float* scratch = ps + C * ldf;             // [warps][256]
  float* gam = scratch + kWarps * 256;       // [C]
  float* bet = gam + C;                      // [C]

  const T* q = static_cast<const T*>(p.q) + (t0 * a.h + hq) * K;
  const T* k = static_cast<const T*>(p.k) + (t0 * a.h + hq) * K;
  const T* v = static_cast<const T*>(a.vv) + (t0 * a.hv + hvv) * V;
  stage_rows(kb, ldk, k, a.h * K, L, K, One{});
  stage_rows(qb, ldk, q, a.h * K, L, K, One{});
  if (threadIdx.x < 32) {
    // Cumulative log gate over the chunk: each lane owns two consecutive rows.
    const int r0 = 2 * threadIdx.x;
    float g0 = r0 < L ? load_any(a.g_type, a.g, (t0 + r0) * a.ho + j) : 0.f;
    float g1 = r0 + 1 < L ? load_any(a.g_type, a.g, (t0 + r0 + 1) * a.ho + j) : 0.f;
    float s = g0 + g1;
    for (int o = 1; o < 32; o <<= 1) {
      float y = __shfl_up_sync(0xffffffffu, s, o);
      if (int(threadIdx.x) >= o) s += y;
    }
    gam[r0] = s - g1;
    gam[r0 + 1] = s;
    for (int r = r0; r < r0 + 2; ++r) {
      bet[r] = r < L ? load_any(a.beta_type, a.beta, (t0 + r) * a.ho + j) : 0.f;
      if (r < L) p.w.gam[(t0 + r) * a.ho + j] = gam[r];
    }
  }
  __syncthreads();

  // K K^T and Q K^T: 2 x 16 tiles of 16x16 over the warps.
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  for (int tile = warp; tile < 32; tile += kWarps) {
    const int which = tile / 16, mt = (tile % 16) / 4, nt = tile % 4;
    if (nt > mt) continue;  // strictly upper tiles are masked away
    const T* lhs = which ? qb : kb;
    Acc acc;
    wm::fill_fragment(acc, 0.f);
    for (int kt = 0; kt < K / 16; ++kt) {
      FragA<T> fa;
      FragBT<T> fb;
      wm::load_matrix_sync(fa, lhs + mt * 16 * ldk + kt * 16, ldk);
      wm::load_matrix_sync(fb, kb + nt * 16 * ldk + kt * 16, ldk);
      wm::mma_sync(acc, fa, fb, acc);
    }
    wm::store_matrix_sync((which ? ps : gs) + mt * 16 * ldf + nt * 16, acc, ldf, wm::mem_row_major);
  }
  __syncthreads();

  // Masks and decays; the output matrix goes straight to global memory.
  T* aqk = static_cast<T*>(p.w.aqk) + (t0 * a.ho + j) * C;
  for (int i = threadIdx.x; i < C * C; i += blockDim.x) {
    const int r = i / C, c = i % C;
    const bool live = r < L;
    const float d = (live && c <= r) ? __expf(gam[r] - gam[c]) : 0.f;
    gs[r * ldf + c] = (c < r) ? bet[r] * gs[r * ldf + c] * d : 0.f;
    if (live) aqk[r * a.ho * C + c] = from_f<T>(c <= r ? a.scale * ps[r * ldf + c] * d : 0.f);
  }
  __syncthreads();

  // (I + A)^-1, blocked: the four diagonal 16x16 blocks by substitution (one thread per block column;
  // a column depends only on itself), then block rows i = 1..3 as T_ij = -T_ii sum_{k=j}^{i-1} A_ik T_kj.
  // Blocks above the diagonal are never read (the W/U products stop at the diagonal block).
  if (threadIdx.x < C) {
    const int o = (threadIdx.x / 16) * 16, c = threadIdx.x % 16;
    float col[16];
    unit_lower_inverse_column16(gs, ldf, o, c, col);
#pragma unroll
    for (int r = 0; r < 16; ++r) tm[(o + r) * ldf + o + c] = col[r];
  }
  // Meanwhile: beta e^gamma k (over q's tile, no longer needed) and beta v.
  for (int i = threadIdx.x; i < C * K; i += blockDim.x) {
    const int r = i / K, c = i % K;
    qb[r * ldk + c] = from_f<T>(r < L ? to_f(kb[r * ldk + c]) * bet[r] * __expf(gam[r]) : 0.f);
  }
  stage_rows(vb, ldv, v, a.hv * V, L, V, [&](int r) { return bet[r]; });
  __syncthreads();
  for (int i = 1; i < C / 16; ++i) {
    float* xs = scratch;  // [i][16][16] X_ij = sum_k A_ik T_kj
    for (int e = threadIdx.x; e < i * 256; e += blockDim.x) {
      const int jb = e / 256, r = (e % 256) / 16, c = e % 16;
      float x = 0.f;
      for (int m = jb * 16; m < i * 16; ++m) x += gs[(i * 16 + r) * ldf + m] * tm[m * ldf + jb * 16 + c];
      xs[e] = x;
    }
    __syncthreads();
    for (int e = threadIdx.x; e < i * 256; e += blockDim.x) {
      const int jb = e / 256, r = (e % 256) / 16, c = e % 16;
      float x = 0.f;
      for (int m = 0; m <= r; ++m) x += tm[(i * 16 + r) * ldf + i * 16 + m] * xs[jb * 256 + m * 16 + c];
      tm[(i * 16 + r) * ldf + jb * 16 + c] = -x;
    }
    __syncthreads();
  }
  for (int i = threadIdx.x; i < C * C; i += blockDim.x) tb[(i / C) * ldc + i % C] = from_f<T>(tm[(i / C) * ldf + i % C]);
  __syncthreads();

  // W = T (beta e^gamma K) and U = T (beta V), one 16x16 tile per warp step, through a per-warp scratch.
  float* sc = scratch + warp * 256;
  const int kt_n = K / 16, vt_n = V / 16;
  for (int tile = warp; tile < 4 * (kt_n + vt_n); tile += kWarps) {
    const int mt = tile % 4, col = tile / 4;
    const bool is_w = col < kt_n;
    const int nt = is_w ? col : col - kt_n;
    const T* rhs = is_w ? qb : vb;
    const int ldr = is_w ? ldk : ldv;
    Acc acc;
    wm::fill_fragment(acc, 0.f);
    mma_rows(acc, tb + mt * 16 * ldc, ldc, rhs + nt * 16, ldr, mt + 1);  // T is lower triangular
    wm::store_matrix_sync(sc, acc, 16, wm::mem_row_major);
    __syncwarp();
    // One 16-byte store per lane: half a row of the tile.
    const int width = is_w ? K : V;
    T* dst = static_cast<T*>(is_w ? p.w.w : p.w.u) + (t0 * a.ho + j) * width + nt * 16;
    const int r = mt * 16 + lane / 2, half = lane % 2;
    if (r < L) {
      uint4 pk;
      T* e = reinterpret_cast<T*>(&pk);
#pragma unroll
      for (int i = 0; i < 8; ++i) e[i] = from_f<T>(sc[lane * 8 + i]);
      *reinterpret_cast<uint4*>(dst + r * a.ho * width + 8 * half) = pk;
    }
    __syncwarp();
  }
}

// ------------------------------------------------------------------------------------------------
// state_pass: grid N * HO * (V / bv), kThreads threads.
struct PassParams {
  FwdArgs a;
  Work w;
  const void* q;
  const void* k;
};
size_t pass_smem(int k, int bv) {
  return size_t(k) * (bv + kPad32) * 4 + size_t(k) * (bv + kPad16) * 2 + size_t(3) * C * (k + kPad16) * 2 +
         size_t(C) * (bv + kPad16) * 2 + size_t(C) * (C + kPad16) * 2 + size_t(C) * (bv + kPad32) * 4 + C * 4;
}

template <class T>
__global__ void __launch_bounds__(kThreads) state_pass(PassParams p) {
  const FwdArgs& a = p.a;
  const int K = int(a.k), V = int(a.v), BV = a.bv;
  const int slices = V / BV;
  const int64_t bid = blockIdx.x;
  const int64_t s = bid / (a.ho * slices);
  const int j = int((bid / slices) % a.ho), v0 = int(bid % slices) * BV;
  const int hq = int(j / (a.ho / a.h));
  const int lds = BV + kPad32, ldsb = BV + kPad16, ldk = K + kPad16, ldc = C + kPad16, ldx = BV + kPad32;

  extern __shared__ __align__(128) unsigned char smem[];
  float* S = reinterpret_cast<float*>(smem);           // [K][lds] fp32 state slice
  T* sb = reinterpret_cast<T*>(S + K * lds);           // [K][ldsb] the state in the io type
  T* wb = sb + K * ldsb;                               // [C][ldk] W
  T* qb = wb + C * ldk;                                // [C][ldk] scale e^gamma q
  T* kb = qb + C * ldk;                                // [C][ldk] e^(gamma_last - gamma) k
  T* ub = kb + C * ldk;                                // [C][ldsb] U, then v'
  T* ab = ub + C * ldsb;                               // [C][ldc] Aqk
  float* X = reinterpret_cast<float*>(ab + C * ldc);   // [C][ldx]
  float* gam = X + C * ldx;                            // [C]

  const int64_t sid_init = s * a.init_stride[0] + j * a.init_stride[1];
  for (int i = threadIdx.x; i < K * BV; i += blockDim.x) {
    const int r = i / BV, c = i % BV;
    const float x =
        a.init ? load_any(a.init_type, a.init, sid_init + (v0 + c) * a.init_stride[2] + r * a.init_stride[3]) : 0.f;
    S[r * lds + c] = x;
    sb[r * ldsb + c] = from_f<T>(x);
  }
  const int64_t start = cu_at(a.cu, a.cu_int64, s), end = cu_at(a.cu, a.cu_int64, s + 1);
  const int warp = threadIdx.x / 32;
  const int nt_n = BV / 16, kt_n = K / 16;

  for (int64_t t0 = start; t0 < end; t0 += C) {
    const int L = int(imin(C, end - t0));
    __syncthreads();  // the previous chunk is done with every tile
    if (threadIdx.x < C) gam[threadIdx.x] = threadIdx.x < L ? p.w.gam[(t0 + threadIdx.x) * a.ho + j] : 0.f;
    __syncthreads();
    const float glast = gam[L - 1];
    const T* q = static_cast<const T*>(p.q) + (t0 * a.h + hq) * K;
    const T* k = static_cast<const T*>(p.k) + (t0 * a.h + hq) * K;
    stage_rows(wb, ldk, static_cast<const T*>(p.w.w) + (t0 * a.ho + j) * K, a.ho * K, L, K, One{});
    stage_rows(qb, ldk, q, a.h * K, L, K, [&](int r) { return a.scale * __expf(gam[r]); });
    stage_rows(kb, ldk, k, a.h * K, L, K, [&](int r) { return __expf(glast - gam[r]); });
    stage_rows(ub, ldsb, static_cast<const T*>(p.w.u) + (t0 * a.ho + j) * V + v0, a.ho * V, L, BV, One{});
    stage_rows(ab, ldc, static_cast<const T*>(p.w.aqk) + (t0 * a.ho + j) * C, a.ho * C, L, C, One{});
    __syncthreads();

    // X = W S
    for (int tile = warp; tile < 4 * nt_n; tile += kWarps) {
      const int mt = tile % 4, nt = tile / 4;
      Acc acc;
      wm::fill_fragment(acc, 0.f);
      mma_rows(acc, wb + mt * 16 * ldk, ldk, sb + nt * 16, ldsb, kt_n);
      wm::store_matrix_sync(X + mt * 16 * ldx + nt * 16, acc, ldx, wm::mem_row_major);
    }
    __syncthreads();
    for (int i = threadIdx.x; i < C * BV; i += blockDim.x) {
      const int r = i / BV, c = i % BV;
      ub[r * ldsb + c] = from_f<T>(r < L ? to_f(ub[r * ldsb + c]) - X[r * ldx + c] : 0.f);
    }
    __syncthreads();

    // O = (scale e^gamma Q) S + Aqk v'
    for (int tile = warp; tile < 4 * nt_n; tile += kWarps) {
      const int mt = tile % 4, nt = tile / 4;
      Acc acc;
      wm::fill_fragment(acc, 0.f);
      mma_rows(acc, qb + mt * 16 * ldk, ldk, sb + nt * 16, ldsb, kt_n);
      mma_rows(acc, ab + mt * 16 * ldc, ldc, ub + nt * 16, ldsb, mt + 1);  // Aqk is lower triangular
      wm::store_matrix_sync(X + mt * 16 * ldx + nt * 16, acc, ldx, wm::mem_row_major);
    }
    // S <- e^glast S runs alongside (S is not read by the products above, only sb).
    const float decay = __expf(glast);
    for (int i = threadIdx.x; i < K * BV; i += blockDim.x) S[(i / BV) * lds + i % BV] *= decay;
    __syncthreads();
    T* o = static_cast<T*>(a.o) + (t0 * a.ho + j) * V + v0;
    for (int i = threadIdx.x; i < L * BV; i += blockDim.x) {
      const int r = i / BV, c = i % BV;
      o[r * a.ho * V + c] = from_f<T>(X[r * ldx + c]);
    }

    // S += (decayed K)^T v'; each warp refreshes the io-type copy of the tiles it owns.
    for (int tile = warp; tile < kt_n * nt_n; tile += kWarps) {
      const int mt = tile / nt_n, nt = tile % nt_n;
      Acc acc;
      wm::load_matrix_sync(acc, S + mt * 16 * lds + nt * 16, lds, wm::mem_row_major);
      for (int rt = 0; rt < C / 16; ++rt) {
        FragAT<T> fa;
        FragB<T> fb;
        wm::load_matrix_sync(fa, kb + rt * 16 * ldk + mt * 16, ldk);
        wm::load_matrix_sync(fb, ub + rt * 16 * ldsb + nt * 16, ldsb);
        wm::mma_sync(acc, fa, fb, acc);
      }
      float* dst = S + mt * 16 * lds + nt * 16;
      wm::store_matrix_sync(dst, acc, lds, wm::mem_row_major);
      __syncwarp();
      for (int e = threadIdx.x % 32; e < 256; e += 32)
        sb[(mt * 16 + e / 16) * ldsb + nt * 16 + e % 16] = from_f<T>(dst[(e / 16) * lds + e % 16]);
    }
  }
  __syncthreads();
  if (a.fin) {
    const int64_t base = s * a.fin_stride[0] + j * a.fin_stride[1];
    for (int i = threadIdx.x; i < K * BV; i += blockDim.x) {
      const int r = i / BV, c = i % BV;
      store_any(a.final_type, a.fin, base + (v0 + c) * a.fin_stride[2] + r * a.fin_stride[3], S[r * lds + c]);
    }
  }
}

// ------------------------------------------------------------------------------------------------
// state_pass_mma (the default pass; OPENDNN_GDN_FWD_V2=0 withholds it): the same recurrence with the state
// slice held transposed, S^T (bv x K), in fp32 mma.sync accumulators. Warp w owns the 16 state rows
// v0 + 16w .. +15 over all of K, so every product a chunk needs reads the state and v' from its own
// registers (an m16n8 accumulator pair is the m16n8k16 A operand) and only the chunk tiles W, Q, K,
// Aqk and U come from shared memory, shared by the warps:
//   X^T = S^T W^T, v'^T = U^T - X^T, O^T = (S^T Q^T) diag(scale e^gamma) + v'^T Aqk^T,
//   S^T <- e^gamma_last S^T + (v'^T diag(e^(gamma_last - gamma))) K.
// The gates scale fp32 accumulators instead of 16-bit tiles, so no pass over shared memory is needed
// between a chunk's arrival and its products. Chunk t+1 streams in with cp.async while chunk t computes
// (two stages): one barrier per chunk.
namespace mma {

// Shared-memory layout of one chunk stage; rows padded by 16 bytes so ldmatrix rows hit distinct banks.
// W, K, Q [C][k + pad], Aqk [C][C + pad], U [C][bv + pad] (16-bit), then gamma [C] and, v3, the three
// per-row scales of Work::fs [3][C] (fp32). Without outputs (the split's summaries) Q, Aqk and the
// O staging are left out: two CTAs then fit an SM. v3 (prep3): Tu [C][C + pad] in W's place and the
// v rows in U's.
__host__ __device__ constexpr size_t stage_bytes(int k, int bv, bool outputs = true, bool v3 = false) {
  return size_t(C * ((v3 ? C : k) + kPad16) + (outputs ? 2 : 1) * C * (k + kPad16) + (outputs ? C * (C + kPad16) : 0) +
                C * (bv + kPad16)) * 2 +
         4 * C * sizeof(float);
}
constexpr int kLdo = 16 + kPad16;  // per-warp O staging rows
size_t smem_bytes(int k, int bv, bool outputs = true, int stages = 2, bool v3 = false) {
  return size_t(stages) * stage_bytes(k, bv, outputs, v3) + (outputs ? size_t(bv / 16) * C * kLdo * 2 : 0);
}

// ---- v4 (OPENDNN_GDN_FWD_V4): the pass's B operands through wgmma instead of ldmatrix + mma.sync ----
// Why [code + arithmetic; H200: 132 SMs, 128 B/clk of shared memory an SM, ~1.85 GHz]. The v3 pass runs
// H16 HV64 K=V=128 32k tokens in ~1.5-1.6 ms = 512 chunk steps of ~3 us (v3 2.23 ms in all, prep3 ~0.65),
// one 4-warp CTA an SM. Per SM and chunk step it moves through shared memory:
//   ldmatrix: 120 x4 loads a warp (K for Y^T 32, Q 32, K.trans for the state 32, Tu 10, Aqk 10, V^T 4),
//             x 512 B x 4 warps = 246 KB, every warp re-reading the same K and Q tiles;
//   cp.async fill 57 KB (Tu 8, K 16, Q 16, Aqk 8, v 8, gates 1), O staging 16 KB:
//   ~320 KB = ~2500 clk = ~1.35 us, against 232 HMMA a warp (one warp an SM sub-partition, ~7 clk each:
//   ~1600 clk) and ~1400 issued instructions a warp: the shared-memory pipe, not the tensor cores, is
//   the step's largest single cost, and each phase waits for the previous (Y -> v' -> state).
// v4 keeps the registers (the state strip, x, o) and their layouts (a warp's 16 rows of an m64nNk16
// register A operand / accumulator are the m16n8k16 fragments) and feeds every product's B operand to
// wgmma from a swizzled tile, read once per warpgroup: 16 (Y^T) + 16 (S^T Q^T) + 8 (Tu) + 8 (Aqk) + 16
// (K, MN-major, state) = 64 KB, + V^T ldmatrix 8 KB + fill 57 + staging 16 = ~145 KB = ~1130 clk a step.
// Tensor work: 32 m64n64k16 equivalents (4.2 MFLOP; Tu and Aqk now full 64 x 64: +0.4 MFLOP, their
// stored upper triangles are zero) = ~1100 clk at the dense peak, ~1600 at 70%. The warp issues ~30
// wgmma instead of ~350 ldmatrix + HMMA, and S^T Q^T runs behind v' = D Tu^T's inputs, O's Aqk product
// alongside the state update.
// Prediction: ~1.0 us a step (critical path Y 8 k-steps -> D -> Tu 4 -> scales -> state 4 -> fill
// issue + barrier), the pass 0.5-0.8 ms at H16 HV64 32k (v3 ~1.55), forward 1.15-1.5 ms (2.5-3.3x fla);
// H16 HV32 (64 CTAs of 64 columns instead of 128 of 32) 0.85-1.15 ms (v3 2.03); H4 HV8 split (bv 128,
// two warpgroups a CTA; depth 2 x 32 summary + 32 apply steps + combine) 0.2-0.3 ms (v3 0.52).
// Not done here: fusing prep3 into the pass (it would lengthen the sequential step it feeds) and
// the few-heads target (100 TFLOP/s = 0.17 ms needs the split's 3x products cut, not only a faster step).
// A stage then holds Tu, K, Q and Aqk as 128-byte-swizzled [C][64] column blocks (K and Q: K / 64 of
// them, 8 KiB each, every block 1024-byte aligned), read by the tensor cores straight from shared memory
// once per warpgroup; the U/v rows keep their padded layout (each warp still loads its own V^T strip with
// ldmatrix.trans), then gamma and the row scales.
__host__ __device__ constexpr size_t wg_stage_bytes(int k, int bv, bool outputs) {
  return size_t(C) * 64 * 2 * size_t(1 + (outputs ? 2 : 1) * (k / 64) + (outputs ? 1 : 0)) +
         size_t(C) * (bv + kPad16) * 2 + 4 * C * sizeof(float);
}
// + 1 KiB: the dynamic shared memory base is only 16-byte aligned for sure; the kernel rounds it up.
size_t wg_smem_bytes(int k, int bv, bool outputs, int stages) {
  return size_t(stages) * wg_stage_bytes(k, bv, outputs) + (outputs ? size_t(bv / 16) * C * kLdo * 2 : 0) + 1024;
}
// Element offset of (row r, column col: a multiple of 8) in a tile of [C][64] blocks, 128-byte swizzle:
// the 16-byte piece index is XORed with r % 8 (what the descriptor's swizzle mode 1 undoes).
__device__ __forceinline__ int swz(int r, int col) {
  return (col >> 6) * (C * 64) + r * 64 + ((((col >> 3) & 7) ^ (r & 7)) << 3);
}
// Matrix descriptor, 128-byte swizzle, 8-row groups 1024 bytes apart (SBO). lbo: K-major operands 16
// (unused), MN-major ones the distance between 64-column blocks.
__device__ __forceinline__ uint64_t wg_desc(uint32_t addr, uint32_t lbo) {
  return uint64_t((addr & 0x3FFFF) >> 4) | (uint64_t(lbo >> 4) << 16) | (uint64_t(1024 >> 4) << 32) | (uint64_t(1) << 62);
}
__device__ __forceinline__ void wg_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wg_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wg_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
// cp.async wrote the tiles through the generic proxy; wgmma reads them through the async proxy.
__device__ __forceinline__ void fence_async_smem() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }
// Pins accumulators in place around wgmma issue/wait so the compiler neither reads them early nor
// moves writes past an issue.
template <int N>
__device__ __forceinline__ void fence_acc(float (&d)[N][4]) {
#pragma unroll
  for (int i = 0; i < N; ++i)
#pragma unroll
    for (int e = 0; e < 4; ++e) asm volatile("" : "+f"(d[i][e])::"memory");
}
// One asm block per shape, the element type (f16 or bf16) spliced into the instruction's name.
#define GDN_WGMMA_M64N64(TY)                                                                                           \
  asm volatile(                                                                                                        \
      "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"                                                                     \
      "wgmma.mma_async.sync.aligned.m64n64k16.f32." TY "." TY " "                                                      \
      "{"                                                                                                              \
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "                                       \
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31 "                              \
      "}, {%32, %33, %34, %35}, %36, p, 1, 1, %38;\n}\n"                                                               \
      : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3]), \
          "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]), "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3]), \
          "+f"(d[4][0]), "+f"(d[4][1]), "+f"(d[4][2]), "+f"(d[4][3]), "+f"(d[5][0]), "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]), \
          "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]), "+f"(d[7][0]), "+f"(d[7][1]), "+f"(d[7][2]), "+f"(d[7][3]) \
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc), "r"(1), "n"(TransB))
#define GDN_WGMMA_M64N128(TY)                                                                                          \
  asm volatile(                                                                                                        \
      "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"                                                                     \
      "wgmma.mma_async.sync.aligned.m64n128k16.f32." TY "." TY " "                                                     \
      "{"                                                                                                              \
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "                                       \
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "                             \
        "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "                             \
        "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63 "                              \
      "}, {%64, %65, %66, %67}, %68, p, 1, 1, %70;\n}\n"                                                               \
      : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3]), \
          "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]), "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3]), \
          "+f"(d[4][0]), "+f"(d[4][1]), "+f"(d[4][2]), "+f"(d[4][3]), "+f"(d[5][0]), "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]), \
          "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]), "+f"(d[7][0]), "+f"(d[7][1]), "+f"(d[7][2]), "+f"(d[7][3]), \
          "+f"(d[8][0]), "+f"(d[8][1]), "+f"(d[8][2]), "+f"(d[8][3]), "+f"(d[9][0]), "+f"(d[9][1]), "+f"(d[9][2]), "+f"(d[9][3]), \
          "+f"(d[10][0]), "+f"(d[10][1]), "+f"(d[10][2]), "+f"(d[10][3]), "+f"(d[11][0]), "+f"(d[11][1]), "+f"(d[11][2]), "+f"(d[11][3]), \
          "+f"(d[12][0]), "+f"(d[12][1]), "+f"(d[12][2]), "+f"(d[12][3]), "+f"(d[13][0]), "+f"(d[13][1]), "+f"(d[13][2]), "+f"(d[13][3]), \
          "+f"(d[14][0]), "+f"(d[14][1]), "+f"(d[14][2]), "+f"(d[14][3]), "+f"(d[15][0]), "+f"(d[15][1]), "+f"(d[15][2]), "+f"(d[15][3]) \
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc), "r"(1), "n"(TransB))
// d (m64n64 fp32, this warp's 16 rows as 8 m16n8 tiles) += a (registers) * B (descriptor).
template <class T, int TransB>
__device__ __forceinline__ void wgmma64(float (&d)[8][4], const uint32_t (&a)[4], uint64_t desc) {
  if constexpr (std::is_same_v<T, __half>) GDN_WGMMA_M64N64("f16");
  else GDN_WGMMA_M64N64("bf16");
}
// d (m64n128 fp32, this warp's 16 rows as 16 m16n8 tiles) += a (registers) * B (descriptor).
template <class T, int TransB>
__device__ __forceinline__ void wgmma128(float (&d)[16][4], const uint32_t (&a)[4], uint64_t desc) {
  if constexpr (std::is_same_v<T, __half>) GDN_WGMMA_M64N128("f16");
  else GDN_WGMMA_M64N128("bf16");
}
#undef GDN_WGMMA_M64N64
#undef GDN_WGMMA_M64N128

}  // namespace mma

// The sequence split (default when the unsplit grid underfills the GPU; OPENDNN_GDN_SPLIT=1/0 forces it).
// With few heads, N * HO * (V / 16)
// warps walking T / 64 chunks in order leave most SMs idle (H4 HV8 K=V=128: 64 warps, 512 chunks).
// Per chunk the state update is affine in the entering state,
//   S' = A_c S + Kd^T U,   A_c = e^gamma_last I - Kd^T W,   Kd = diag(e^(gamma_last - gamma)) K,
// so over a segment of chunks S_out = M S_in + S^0, where S^0 is the segment run from a zero state and
// M (K x K) the product of the A_c: the same recurrence run on the identity with U = 0. Hence:
//   kSummary  per (segment, head, slice of the V + K columns [S | M]) in parallel: S^0 from zero
//             (from the given initial state in a sequence's first segment) and M from I; no output.
//   split_combine  per (sequence, head, 16 state columns): S_in of each segment, in order (one K x K
//             by K x 16 fp32 product per segment; the only sequential part left, depth = segments).
//   kApply    per (segment, head, slice) in parallel: the kWhole walk from the true S_in, writing O.
// Estimate without a measurement, H4 HV8 K=V=128, 32k tokens (the issue's 100 TF/s is 0.17 ms):
// - A finer V split (8 columns a warp) keeps the chunk order: 512 dependent chunk steps whatever the
//   width. The unsplit mma pass measured 3.1 us a step (1.59 ms / 512 at H16 HV64); even 1 us a step
//   is 0.5 ms for the pass alone, so it cannot reach the target.
// - The split (16 segments of 32 chunks here, bv = 128): summary 232 CTAs, one per SM (registers),
//   ~2 waves x 32 steps of 128 HMMA a warp; combine 14 steps of ~1-2 us; apply 128 CTAs, one wave x 32
//   steps. At ~3 us a step: ~0.3 ms, ~2.2x the products of one pass (M costs what S^0 costs at K = V).
//   So the split is the one that can get near; the whole forward still adds l2_rows and chunk_prep
//   (0.56 ms at HV8 for the old one, scaled from 4.47 ms at HV64), which the target also needs cut.
// Recomputing each segment (kApply) rather than correcting O from stored per-chunk transfers keeps the
// workspace at one [V + K, K] fp32 slot per segment and head.
// kStates (the chunked backward's recompute, a.keep): kWhole without outputs, writing the state entering
// every chunk and v' (before its decay) to the workspace instead. kApplyStates: the split's kApply with
// kStates' writes instead of O (the backward's recompute with few heads, OPENDNN_GDN_BWD_SPLIT).
enum PassMode { kWhole = 0, kSummary = 1, kApply = 2, kStates = 3, kApplyStates = 4 };

// kWhole: grid N * HO * (V / bv). kSummary: seg_bound * HO * ((V + K) / bv). kApply: seg_bound * HO *
// (V / bv). bv / 16 warps (up to 4 unsplit, 8 split), smem_bytes(K, bv, outputs, NS).
// NS chunk stages: chunk t + NS - 1 is queued while chunk t computes (NS = 3: OPENDNN_GDN_PASS_V3).
// V3 (prep3, OPENDNN_GDN_PREP_V3): chunk_prep_mma leaves Tu = T diag(beta) instead of W and U, and v'
// is formed here from the raw v rows, with W S = Tu diag(e^gamma) K S:
//   Y^T = S^T K^T,  v'^T = (V^T - Y^T diag(e^gamma)) Tu^T   (Tu lower triangular: 10 of 16 blocks),
// 20 more mma a warp and chunk than reading W and U (+10%), for 2.4 GB less traffic between the kernels
// at H16 HV64 32k tokens (W and U written and read, v read twice) and a prep without W/U products.
// (V - Y') is rounded to 16 bits once, where U and W S were rounded separately before. The row scales
// (gates, scale and, with l2norm, the inverse norms of the raw q and k rows) come from prep (Work::fs):
// no exp in the loop but the chunk's decay.
template <class T, int K, int Mode, int NS, bool V3, bool WG = false>
__global__ void __launch_bounds__(Mode == kWhole || Mode == kStates ? 128 : 256) state_pass_mma(PassParams p) {
  using namespace mma;
  constexpr bool kKeep = Mode == kStates || Mode == kApplyStates;  // writes the chunk states and v'
  static_assert(!WG || (V3 && !kKeep), "v4 is the v3 pass with wgmma products");
  // Row strides of the K/Q and Tu/Aqk tiles: padded for ldmatrix, dense swizzled blocks for wgmma (WG).
  constexpr int ldk = WG ? K : K + kPad16, lda = WG ? C : C + kPad16;
  constexpr int KT = K / 8;  // n-tiles of the state strip
  // Row pairs (16 chunk rows each) per pass over the chunk. K = 256 would need fewer (its state strip
  // alone takes 128 registers) and still spills at one pair, so it stays on state_pass.
  static_assert(K <= 128, "the state strip and two 16 x 64 accumulators must fit the registers");
  constexpr int NP = 4;
  const FwdArgs& a = p.a;
  const int V = int(a.v), BV = a.bv, ldu = BV + kPad16;
  const int slices = (Mode == kSummary ? V + K : V) / BV;
  const int64_t bid = blockIdx.x;
  const int64_t item = bid / (a.ho * slices);  // sequence (kWhole) or segment
  const int j = int((bid / slices) % a.ho), v0 = int(bid % slices) * BV;
  int64_t s = item, start = 0, end = 0;
  bool first = true, last = true;
  if constexpr (Mode == kWhole || Mode == kStates) {
    start = cu_at(a.cu, a.cu_int64, s), end = cu_at(a.cu, a.cu_int64, s + 1);
  } else {
    const int2 ent = p.w.segtab[item];
    if (ent.x < 0) return;
    s = ent.x;
    const int64_t seq_end = cu_at(a.cu, a.cu_int64, s + 1);
    start = ent.y, end = imin(seq_end, start + int64_t(C) * a.seg_chunks);
    first = start == cu_at(a.cu, a.cu_int64, s), last = end == seq_end;
  }
  // Columns V.. of the summary carry M; a sequence's last segment needs no summary and its first no M.
  const bool transfer = Mode == kSummary && v0 >= V;
  if (Mode == kSummary && (last || (first && transfer))) return;
  const int hq = int(j / (a.ho / a.h));
  const int nthreads = blockDim.x, tid = threadIdx.x;
  const int warp = tid / 32, lane = tid % 32, g = lane / 4, c = lane % 4;
  const int vw = warp * 16;  // this warp's strip inside the slice

  constexpr bool kOut = Mode == kWhole || Mode == kApply;
  extern __shared__ __align__(128) unsigned char smem_raw[];
  unsigned char* smem = smem_raw;
  if constexpr (WG) smem += (1024u - (smem_addr(smem_raw) & 1023u)) & 1023u;  // swizzle atoms: 1024-aligned
  const size_t sbytes = WG ? wg_stage_bytes(K, BV, kOut) : stage_bytes(K, BV, kOut, V3);
  T* ostage = reinterpret_cast<T*>(smem + NS * sbytes) + warp * C * kLdo;
  auto stage_ptrs = [&](int st, T*& w, T*& q, T*& k, T*& aq, T*& u, float*& gm) {
    w = reinterpret_cast<T*>(smem + sbytes * size_t(st));  // W, or Tu (V3)
    k = w + C * (V3 ? lda : ldk);
    q = k + C * ldk;
    aq = q + (kOut ? C * ldk : 0);
    u = aq + (kOut ? C * lda : 0);
    gm = reinterpret_cast<float*>(u + C * ldu);
  };

  // S^T strip: element (v = vw + g + 8 * (e / 2), k = 8 kt + 2c + e % 2) in sacc[kt][e]. It starts
  // from the given initial state at a sequence start, else from zero (kSummary), the identity (M), or
  // the state split_combine left in the previous segment's slot (kApply).
  const size_t slot = size_t(V + K) * K;
  float sacc[KT][4];
  {
    const void* src = a.init;
    DataType ty = a.init_type;
    int64_t base = s * a.init_stride[0] + j * a.init_stride[1], sv = a.init_stride[2], sk = a.init_stride[3];
    if (!first) {
      src = Mode == kApply || Mode == kApplyStates ? p.w.seg : nullptr, ty = DataType::FLOAT;
      base = int64_t(((item - 1) * a.ho + j) * slot), sv = K, sk = 1;
    }
#pragma unroll
    for (int kt = 0; kt < KT; ++kt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int vv = v0 + vw + g + 8 * (e / 2), kk = 8 * kt + 2 * c + e % 2;
        sacc[kt][e] = transfer ? (vv - V == kk ? 1.f : 0.f) : src ? load_any(ty, src, base + vv * sv + kk * sk) : 0.f;
      }
  }

  const T* qg = static_cast<const T*>(p.q);
  const T* kg = static_cast<const T*>(p.k);
  const T* wg = static_cast<const T*>(p.w.w);
  const T* ug = static_cast<const T*>(p.w.u);
  const T* ag = static_cast<const T*>(p.w.aqk);
  const T* tug = static_cast<const T*>(p.w.tu);
  const T* vg = static_cast<const T*>(a.vv);
  const int64_t hvv = j / (a.ho / a.hv);
  const float* fsg = p.w.fs;
  const int64_t fs_plane = a.t * a.ho;

  // Queues chunk t0's tiles into stage st (rows past the sequence end are zero-filled).
  auto issue = [&](int64_t t0, int st) {
    T *w, *q, *k, *aq, *u;
    float* gm;
    stage_ptrs(st, w, q, k, aq, u, gm);
    const int L = int(imin(C, end - t0));
    constexpr int per_k = K / 8;
    for (int e = tid; e < C * per_k; e += nthreads) {
      const int r = e / per_k, col = (e % per_k) * 8;
      const bool ok = r < L;
      const int64_t rq = ok ? (t0 + r) * a.h + hq : 0, rw = ok ? (t0 + r) * a.ho + j : 0;
      if constexpr (!V3) cp16(w + r * ldk + col, wg + rw * K + col, ok);
      if constexpr (kOut) cp16(q + r * ldk + col, qg + rq * K + col, ok);
      cp16(k + r * ldk + col, kg + rq * K + col, ok);
    }
    if constexpr (kOut || V3) {
      for (int e = tid; e < C * (C / 8); e += nthreads) {
        const int r = e / (C / 8), col = (e % (C / 8)) * 8;
        const bool ok = r < L;
        const int64_t rw = (ok ? (t0 + r) * a.ho + j : 0) * C + col;
        if constexpr (kOut) cp16(aq + r * lda + col, ag + rw, ok);
        if constexpr (V3) cp16(w + r * lda + col, tug + rw, ok);
      }
    }
    const int per_u = BV / 8;
    for (int e = tid; e < C * per_u; e += nthreads) {
      const int r = e / per_u, col = (e % per_u) * 8;
      const bool ok = r < L && !transfer;  // M's recurrence has U = 0 (V3: v = 0)
      if constexpr (V3) cp16(u + r * ldu + col, vg + (ok ? (t0 + r) * a.hv + hvv : 0) * V + (ok ? v0 + col : 0), ok);
      else cp16(u + r * ldu + col, ug + (ok ? (t0 + r) * a.ho + j : 0) * V + (ok ? v0 + col : 0), ok);
    }
    for (int r = tid; r < C; r += nthreads) cp4(gm + r, p.w.gam + (r < L ? (t0 + r) * a.ho + j : 0), r < L);
    if constexpr (V3) {
      for (int e = tid; e < 3 * C; e += nthreads) {
        const int r = e % C;
        cp4(gm + C + e, fsg + (e / C) * fs_plane + (r < L ? (t0 + r) * a.ho + j : 0), r < L);
      }
    }
  };
  // The same loads with each source's chunk row formed once and 32-bit row offsets (every row stride
  // times 63 stays below 2^31), shifts instead of divisions, and past-the-end rows pointed at the
  // chunk's first row: ~300 instead of ~730 SASS instructions a thread and chunk (K = 128, bv = 64,
  // v3), against ~1100 of compute. Used with NS = 3 or V3 (the defaults); `issue` stays for the two-stage
  // instantiations without v3 (the split on the older preps, the backward's two-stage recompute).
  static_assert(C == 64, "row = e >> 6 below");
  const int su = 31 - __clz(BV / 8);  // log2 of the 16-byte pieces in a U/v row
  auto issue_fast = [&](int64_t t0, int st) {
    T *w, *q, *k, *aq, *u;
    float* gm;
    stage_ptrs(st, w, q, k, aq, u, gm);
    const int L = int(imin(C, end - t0));
    const int64_t rq0 = t0 * a.h + hq, rw0 = t0 * a.ho + j;
    const int sq = int(a.h) * K, sw = int(a.ho);  // q/k row stride (elements), [T, HO, ...] row stride (rows)
    constexpr int per_k = K / 8, sk = K == 128 ? 4 : 3;
    static_assert(per_k == 1 << sk, "K is 64 or 128");
    const T* q0 = qg + rq0 * K;
    const T* k0 = kg + rq0 * K;
    for (int e = tid; e < C * per_k; e += nthreads) {
      const int r = e >> sk, col = (e & (per_k - 1)) * 8;
      const bool ok = r < L;
      const int off = (ok ? r : 0) * sq + col;
      const int dst = WG ? swz(r, col) : r * ldk + col;
      if constexpr (!V3) cp16(w + dst, wg + rw0 * K + (ok ? r : 0) * (sw * K) + col, ok);
      if constexpr (kOut) cp16(q + dst, q0 + off, ok);
      cp16(k + dst, k0 + off, ok);
    }
    if constexpr (kOut || V3) {
      for (int e = tid; e < C * (C / 8); e += nthreads) {
        const int r = e >> 3, col = (e & 7) * 8;
        const bool ok = r < L;
        const int64_t off = rw0 * C + (ok ? r : 0) * (sw * C) + col;
        const int dst = WG ? swz(r, col) : r * lda + col;
        if constexpr (kOut) cp16(aq + dst, ag + off, ok);
        if constexpr (V3) cp16(w + dst, tug + off, ok);
      }
    }
    const int ucol = transfer ? 0 : v0;  // M's recurrence has U = 0 (V3: v = 0): no row is read
    const T* u0;
    int sv;
    if constexpr (V3) u0 = vg + (t0 * a.hv + hvv) * V + ucol, sv = int(a.hv) * int(V);
    else u0 = ug + rw0 * V + ucol, sv = sw * int(V);
    for (int e = tid; e < (C << su); e += nthreads) {
      const int r = e >> su, col = (e & ((1 << su) - 1)) * 8;
      const bool ok = r < L && !transfer;
      cp16(u + r * ldu + col, u0 + (ok ? r * sv + col : 0), ok);
    }
    // gamma, then (V3) the three row scales: gm[plane * C + r].
    for (int e = tid; e < (V3 ? 4 : 1) * C; e += nthreads) {
      const int r = e & (C - 1), plane = e >> 6;
      const float* src = plane == 0 ? p.w.gam : fsg + (plane - 1) * fs_plane;
      cp4(gm + e, src + rw0 + (r < L ? r * sw : 0), r < L);
    }
  };
  // Neither issue nor issue_fast commits: each call site below commits once, whichever way its branch went.
  // (issue's commit used to follow an unbraced `if constexpr (V3) for (...) {...}`, and nvcc 13.0 dropped
  // it where V3 is false: the PTX of every two-stage pass without v3 jumped from the copies past the only
  // commit, so wait_group 0 did not wait for them and a chunk's tiles could be read before they landed.)
  auto queue = [&](int64_t t0, int st) {
    if constexpr (NS == 3 || V3) issue_fast(t0, st);
    else issue(t0, st);
  };

  // ldmatrix lane offsets: B from rows of a row-major [n][k] tile (x4 = two n-tiles of one k-slice),
  // B from a row-major [k][n] tile (.trans), and U^T as accumulators from the row-major [r][v] tile.
  const int rb_row = (lane >> 4) * 8 + (lane & 7), rb_col = ((lane >> 3) & 1) * 8;
  const int tb_row = ((lane >> 3) & 1) * 8 + (lane & 7), tb_col = (lane >> 4) * 8;

  // v3: D = V^T - Y^T diag(e^gamma / |k|) as A operands of k-slices p0..p0+3 (the V^T fragments come
  // from the v rows with ldmatrix.trans), from Y^T in x.
  auto form_d = [&](uint32_t(&da)[4][4], const float(&x)[8][4], const T* us, const float* gs, int p0) {
#pragma unroll
    for (int np = 0; np < 4; ++np) {
      uint32_t u[4];
      ldsm4t(u, us + (16 * (p0 + np) + rb_row) * ldu + vw + rb_col);
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int n = 2 * np + h, r = 8 * (2 * p0 + n) + 2 * c;
        const float e0 = gs[C + r], e1 = gs[C + r + 1];  // e^gamma n_k
        const float2 lo = unpack2<T>(u[2 * h]), hi = unpack2<T>(u[2 * h + 1]);
        da[np][2 * h] = pack2<T>(lo.x - x[n][0] * e0, lo.y - x[n][1] * e1);
        da[np][2 * h + 1] = pack2<T>(hi.x - x[n][2] * e0, hi.y - x[n][3] * e1);
      }
    }
  };
  // O^T rows of pass p0 through the warp's staging tile, then 16-byte stores of whole 32-byte row pieces.
  auto stage_o = [&](const float(&o)[8][4], int p0) {
#pragma unroll
    for (int n = 0; n < 8; ++n) {
      const int r = 8 * (2 * p0 + n) + 2 * c;
      ostage[r * kLdo + g] = from_f<T>(o[n][0]);
      ostage[(r + 1) * kLdo + g] = from_f<T>(o[n][1]);
      ostage[r * kLdo + g + 8] = from_f<T>(o[n][2]);
      ostage[(r + 1) * kLdo + g + 8] = from_f<T>(o[n][3]);
    }
  };
  auto store_o = [&](int64_t t0, int L) {
    __syncwarp();
    T* og = static_cast<T*>(a.o) + (t0 * a.ho + j) * V + v0 + vw;
#pragma unroll
    for (int m = 0; m < 4; ++m) {
      const int e = lane + 32 * m, r = e / 2, half = e % 2;
      if (r < L)
        *reinterpret_cast<uint4*>(og + r * a.ho * V + 8 * half) = *reinterpret_cast<const uint4*>(ostage + r * kLdo + 8 * half);
    }
  };

  // One commit group per chunk slot, empty past the end, so that "all but the newest NS - 2 groups"
  // is always chunk t0.
#pragma unroll
  for (int i = 0; i < NS - 1; ++i) {
    if (start + int64_t(i) * C < end) queue(start + int64_t(i) * C, i);
    cp_commit();
  }
  int it = 0;
  for (int64_t t0 = start; t0 < end; t0 += C, ++it) {
    const int L = int(imin(C, end - t0));
    const int st = it % NS;
    cp_wait_group<NS - 2>();
    if constexpr (WG) fence_async_smem();  // before the barrier: every thread's copies, then wgmma reads
    __syncthreads();  // chunk t0 is visible to every warp, and every warp is done with chunk t0 - C's stage
    auto refill = [&]() {
      if (t0 + int64_t(NS - 1) * C < end) queue(t0 + int64_t(NS - 1) * C, (it + NS - 1) % NS);
      cp_commit();
    };
    if constexpr (!WG) refill();  // v4 issues it behind its first products
    T *ws, *qs, *ks, *as, *us;
    float* gs;
    stage_ptrs(st, ws, qs, ks, as, us, gs);
    const float glast = gs[L - 1];
    if constexpr (kKeep) {
      // The sequence's chunk c sits at row cu[s] / C + s + c (FwdSaved::states); a segment starts C-aligned.
      const int64_t seq0 = cu_at(a.cu, a.cu_int64, s);
      T* dst = static_cast<T*>(p.w.states) + ((seq0 / C + s + (start - seq0) / C + it) * a.ho + j) * int64_t(V) * K;
#pragma unroll
      for (int kt = 0; kt < KT; ++kt)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int vv = v0 + vw + g + 8 * h, kk = 8 * kt + 2 * c;
          *reinterpret_cast<uint32_t*>(dst + int64_t(vv) * K + kk) = pack2<T>(sacc[kt][2 * h], sacc[kt][2 * h + 1]);
        }
    }

    // The chunk's 64 rows in passes of NP row pairs (16 rows each). Per pass: X^T and S^T Q^T share
    // each A fragment of the state; v'^T = U^T - X^T gives va (its A operand for the output) and vk
    // (decayed, for the state update); then O^T = (S^T Q^T) diag(scale e^gamma) + v'^T Aqk^T, where
    // Aqk is lower triangular so pair np only needs the k-slices <= np, all from this or earlier passes.
    if constexpr (WG) {
      // v4: the same chunk step with warpgroup products. Each warp keeps its 16 state rows as before
      // (an m64nNk16 register A operand per warp is the m16n8k16 A fragment, and its accumulators are
      // the m16n8 tiles), the B tiles come from the swizzled stage without ldmatrix. Order: Y^T and
      // S^T Q^T (two groups; D needs only the first), v'^T = D Tu^T, then O^T += v'^T Aqk^T and the
      // state update S^T = e^glast S^T + vk K together (K as an MN-major B operand).
      const uint32_t tu_a = smem_addr(ws), k_a = smem_addr(ks), q_a = smem_addr(qs), aq_a = smem_addr(as);
      constexpr uint32_t kBlk = C * 64 * 2;  // bytes of one [C][64] swizzled block
      float x[8][4], o[8][4];
#pragma unroll
      for (int n = 0; n < 8; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) x[n][e] = 0.f, o[n][e] = 0.f;
      uint32_t af[K / 16][4];
#pragma unroll
      for (int kk = 0; kk < K / 16; ++kk) a_frag<T>(af[kk], sacc, kk);
      fence_acc(x);
      fence_acc(o);
      wg_fence();
#pragma unroll
      for (int kk = 0; kk < K / 16; ++kk)  // Y^T = S^T K^T
        wgmma64<T, 0>(x, af[kk], wg_desc(k_a + (kk >> 2) * kBlk + (kk & 3) * 32, 16));
      wg_commit();
      if constexpr (kOut) {
#pragma unroll
        for (int kk = 0; kk < K / 16; ++kk)  // S^T Q^T
          wgmma64<T, 0>(o, af[kk], wg_desc(q_a + (kk >> 2) * kBlk + (kk & 3) * 32, 16));
        wg_commit();
        refill();  // ~300 instructions a thread while the tensor cores work (chunk t0 - C's stage: read, waited)
        wg_wait<1>();
      } else {
        refill();
        wg_wait<0>();
      }
      fence_acc(x);
      uint32_t da[4][4];
      form_d(da, x, us, gs, 0);
#pragma unroll
      for (int n = 0; n < 8; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) x[n][e] = 0.f;
      fence_acc(x);
      wg_fence();
#pragma unroll
      for (int kk = 0; kk < 4; ++kk)  // v'^T = D Tu^T (Tu's zeros above the diagonal are stored)
        wgmma64<T, 0>(x, da[kk], wg_desc(tu_a + kk * 32, 16));
      wg_commit();
      wg_wait<0>();
      fence_acc(x);
      fence_acc(o);
      uint32_t va[4][4], vk[4][4];
      if constexpr (kOut)
#pragma unroll
        for (int np = 0; np < 4; ++np) a_frag<T>(va[np], x, np);
#pragma unroll
      for (int n = 0; n < 8; ++n) {
        const int r = 8 * n + 2 * c;
        const float d0 = gs[3 * C + r], d1 = gs[3 * C + r + 1];
        x[n][0] *= d0, x[n][1] *= d1, x[n][2] *= d0, x[n][3] *= d1;
        if constexpr (kOut) {
          const float f0 = gs[2 * C + r], f1 = gs[2 * C + r + 1];
          o[n][0] *= f0, o[n][1] *= f1, o[n][2] *= f0, o[n][3] *= f1;
        }
      }
#pragma unroll
      for (int np = 0; np < 4; ++np) a_frag<T>(vk[np], x, np);
      const float decay = __expf(glast);
#pragma unroll
      for (int kt = 0; kt < KT; ++kt)
#pragma unroll
        for (int e = 0; e < 4; ++e) sacc[kt][e] *= decay;
      fence_acc(o);
      fence_acc(sacc);
      wg_fence();
      if constexpr (kOut)
#pragma unroll
        for (int kk = 0; kk < 4; ++kk)  // O^T += v'^T Aqk^T
          wgmma64<T, 0>(o, va[kk], wg_desc(aq_a + kk * 32, 16));
#pragma unroll
      for (int kk = 0; kk < 4; ++kk) {  // S^T += vk K: 16 chunk rows a k-slice, the K / 64 blocks LBO apart
        const uint64_t d = wg_desc(k_a + kk * 16 * 128, kBlk);
        if constexpr (K == 128) wgmma128<T, 1>(sacc, vk[kk], d);
        else wgmma64<T, 1>(sacc, vk[kk], d);
      }
      wg_commit();
      wg_wait<0>();
      fence_acc(o);
      fence_acc(sacc);
      if constexpr (kOut) {
        stage_o(o, 0);
        store_o(t0, L);
      }
    } else {
    uint32_t va[4][4], vk[4][4];
#pragma unroll
    for (int p0 = 0; p0 < 4; p0 += NP) {
      float x[2 * NP][4], o[2 * NP][4];
#pragma unroll
      for (int n = 0; n < 2 * NP; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) x[n][e] = 0.f, o[n][e] = 0.f;
#pragma unroll
      for (int kk = 0; kk < K / 16; ++kk) {
        uint32_t af[4];
        a_frag<T>(af, sacc, kk);
#pragma unroll
        for (int np = 0; np < NP; ++np) {
          uint32_t b[4];
          ldsm4(b, (V3 ? ks : ws) + (16 * (p0 + np) + rb_row) * ldk + 16 * kk + rb_col);  // V3: Y^T = S^T K^T
          mma16816<T>(x[2 * np], af, b[0], b[1]);
          mma16816<T>(x[2 * np + 1], af, b[2], b[3]);
          if constexpr (kOut) {
            uint32_t bq[4];
            ldsm4(bq, qs + (16 * (p0 + np) + rb_row) * ldk + 16 * kk + rb_col);
            mma16816<T>(o[2 * np], af, bq[0], bq[1]);
            mma16816<T>(o[2 * np + 1], af, bq[2], bq[3]);
          }
        }
      }
      if constexpr (V3) {
        static_assert(NP == 4, "v'^T = D Tu^T reads every row pair's D");
        // D = V^T - Y^T diag(e^gamma / |k|) as A operands (the V^T fragment of k-slice np is the U^T
        // load's), then x = v'^T = D Tu^T.
        uint32_t da[NP][4];
        form_d(da, x, us, gs, p0);
#pragma unroll
        for (int np = 0; np < NP; ++np) {
#pragma unroll
          for (int e = 0; e < 4; ++e) x[2 * np][e] = 0.f, x[2 * np + 1][e] = 0.f;
#pragma unroll
          for (int kk = 0; kk <= np; ++kk) {  // Tu is lower triangular
            uint32_t b[4];
            ldsm4(b, ws + (16 * np + rb_row) * lda + 16 * kk + rb_col);
            mma16816<T>(x[2 * np], da[kk], b[0], b[1]);
            mma16816<T>(x[2 * np + 1], da[kk], b[2], b[3]);
          }
          if constexpr (kOut) a_frag<T>(va[np], x, np);
        }
      } else {
#pragma unroll
        for (int np = 0; np < NP; ++np) {
          uint32_t u[4];
          ldsm4t(u, us + (16 * (p0 + np) + rb_row) * ldu + vw + rb_col);
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const int n = 2 * np + h;
            const float2 lo = unpack2<T>(u[2 * h]), hi = unpack2<T>(u[2 * h + 1]);
            x[n][0] = lo.x - x[n][0];
            x[n][1] = lo.y - x[n][1];
            x[n][2] = hi.x - x[n][2];
            x[n][3] = hi.y - x[n][3];
          }
          if constexpr (kOut) a_frag<T>(va[p0 + np], x, np);
        }
      }
      if constexpr (kKeep) {
        T* vn = static_cast<T*>(p.w.vn) + (t0 * a.ho + j) * V + v0 + vw;
#pragma unroll
        for (int n = 0; n < 2 * NP; ++n)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int r = 8 * (2 * p0 + n) + 2 * c + e % 2;
            if (r < L) vn[r * a.ho * V + g + 8 * (e / 2)] = from_f<T>(x[n][e]);
          }
      }
#pragma unroll
      for (int n = 0; n < 2 * NP; ++n) {
        const int r = 8 * (2 * p0 + n) + 2 * c;
        const float d0 = V3 ? gs[3 * C + r] : __expf(glast - gs[r]);
        const float d1 = V3 ? gs[3 * C + r + 1] : __expf(glast - gs[r + 1]);
        x[n][0] *= d0, x[n][1] *= d1, x[n][2] *= d0, x[n][3] *= d1;
        if constexpr (kOut) {
          const float f0 = V3 ? gs[2 * C + r] : a.scale * __expf(gs[r]);
          const float f1 = V3 ? gs[2 * C + r + 1] : a.scale * __expf(gs[r + 1]);
          o[n][0] *= f0, o[n][1] *= f1, o[n][2] *= f0, o[n][3] *= f1;
        }
      }
#pragma unroll
      for (int np = 0; np < NP; ++np) a_frag<T>(vk[p0 + np], x, np);
      if constexpr (kOut) {  // the output: Aqk products, then the staging tile
#pragma unroll
        for (int np = 0; np < NP; ++np) {
#pragma unroll
          for (int kk = 0; kk <= p0 + np; ++kk) {
            uint32_t b[4];
            ldsm4(b, as + (16 * (p0 + np) + rb_row) * lda + 16 * kk + rb_col);
            mma16816<T>(o[2 * np], va[kk], b[0], b[1]);
            mma16816<T>(o[2 * np + 1], va[kk], b[2], b[3]);
          }
        }
        stage_o(o, p0);
      }
    }
    if constexpr (kOut) store_o(t0, L);

    // S^T <- e^glast S^T + vk K (B = K rows through ldmatrix.trans).
    const float decay = __expf(glast);
#pragma unroll
    for (int kt = 0; kt < KT; ++kt)
#pragma unroll
      for (int e = 0; e < 4; ++e) sacc[kt][e] *= decay;
#pragma unroll
    for (int qp = 0; qp < K / 16; ++qp)
#pragma unroll
      for (int kk = 0; kk < 4; ++kk) {
        uint32_t b[4];
        ldsm4t(b, ks + (16 * kk + tb_row) * ldk + 16 * qp + tb_col);
        mma16816<T>(sacc[2 * qp], vk[kk], b[0], b[1]);
        mma16816<T>(sacc[2 * qp + 1], vk[kk], b[2], b[3]);
      }
    }  // !WG
    __syncwarp();  // the staging tile is rewritten next chunk
  }

  if constexpr (Mode == kSummary) {
    float* dst = p.w.seg + ((item * a.ho + j) * slot);
#pragma unroll
    for (int kt = 0; kt < KT; ++kt)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int vv = v0 + vw + g + 8 * h, kk = 8 * kt + 2 * c;
        *reinterpret_cast<float2*>(dst + size_t(vv) * K + kk) = make_float2(sacc[kt][2 * h], sacc[kt][2 * h + 1]);
      }
  } else if (a.fin && last) {
    const int64_t base = s * a.fin_stride[0] + j * a.fin_stride[1];
#pragma unroll
    for (int kt = 0; kt < KT; ++kt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int vv = v0 + vw + g + 8 * (e / 2), kk = 8 * kt + 2 * c + e % 2;
        store_any(a.final_type, a.fin, base + vv * a.fin_stride[2] + kk * a.fin_stride[3], sacc[kt][e]);
      }
  }
}

// split_combine: grid (seg_bound, HO, V / 16), 256 threads, combine_smem(K). One CTA per (sequence,
// output head, 16 state columns), started at the sequence's first segment, walks its segments in order:
//   slot[g] <- M_g slot[g - 1] + slot[g]   (state rows only)
// for every segment g after the first that has a successor, so slot[g] ends as the state entering
// segment g + 1 (the first segment's slot already is: it ran from the true initial state). M_g^T sits in
// the slot's rows V.., (m, k) = M_g(k, m). fp32 FMA in a fixed order: deterministic. M_{g+1} streams
// into the other buffer while M_g is applied.
size_t combine_smem(int k) { return (size_t(2) * k * k + size_t(16) * k) * sizeof(float); }

// Reverse (the chunked backward's state_bwd split): from the sequence's last segment back to its second, slot[g]
// <- slot[g + 1] M_g + slot[g] with M_g's rows in slot g's rows V.. (the same arithmetic).
template <int K, bool Reverse = false>
__global__ void __launch_bounds__(256) split_combine(PassParams p) {
  const FwdArgs& a = p.a;
  const int V = int(a.v);
  const int64_t g0 = blockIdx.x;
  const int j = int(blockIdx.y), v0 = int(blockIdx.z) * 16;
  const int2 e0 = p.w.segtab[g0];
  if (e0.x < 0 || e0.y != cu_at(a.cu, a.cu_int64, e0.x)) return;  // not a sequence's first segment
  const int64_t span = int64_t(C) * a.seg_chunks;
  const int64_t nseg = (cu_at(a.cu, a.cu_int64, e0.x + 1) - e0.y + span - 1) / span;
  if (nseg <= 2) return;

  extern __shared__ __align__(16) float csm[];
  // Two M^T buffers [K][K], then [16][K]: the state entering the current segment, this CTA's columns.
  float* prev = csm + 2 * K * K;
  constexpr int G = 256 / K, R = 16 / G;  // column groups; columns a thread owns
  const int tid = threadIdx.x, k = tid % K, vg = tid / K;
  const size_t slot = size_t(V + K) * K;
  auto seg_at = [&](int64_t g) { return p.w.seg + (size_t(g) * size_t(a.ho) + size_t(j)) * slot; };
  auto issue = [&](int64_t g, int st) {
    const float* src = seg_at(g) + size_t(V) * K;
    float* dst = csm + st * K * K;
    for (int i = tid; i < K * K / 4; i += 256) cp16(dst + 4 * i, src + 4 * i, true);
    cp_commit();
  };
  // Forward: segments g0 + 1 .. g0 + nseg - 2 from g0's slot (the last one has no successor); reverse:
  // g0 + nseg - 2 down to g0 + 1 from the last one's (the first one's left boundary is nobody's input).
  const int64_t from = Reverse ? g0 + nseg - 1 : g0, step = Reverse ? -1 : 1;
  for (int i = tid; i < 16 * K; i += 256) prev[i] = seg_at(from)[size_t(v0) * K + i];
  issue(from + step, 0);
  for (int64_t i = 1; i < nseg - 1; ++i) {
    const int64_t g = from + step * i;
    const int st = int(i - 1) & 1;
    cp_wait_all();
    __syncthreads();  // M_g and prev are visible; the other buffer is free
    if (i + 1 < nseg - 1) issue(g + step, st ^ 1);
    const float* m = csm + st * K * K;
    float* cur = seg_at(g) + size_t(v0) * K;
    float acc[R];
#pragma unroll
    for (int r = 0; r < R; ++r) acc[r] = cur[size_t(vg + G * r) * K + k];
    for (int mm = 0; mm < K; mm += 4) {
      const float m0 = m[mm * K + k], m1 = m[(mm + 1) * K + k], m2 = m[(mm + 2) * K + k], m3 = m[(mm + 3) * K + k];
#pragma unroll
      for (int r = 0; r < R; ++r) {
        const float4 pv = *reinterpret_cast<const float4*>(prev + (vg + G * r) * K + mm);
        acc[r] = fmaf(m0, pv.x, acc[r]);
        acc[r] = fmaf(m1, pv.y, acc[r]);
        acc[r] = fmaf(m2, pv.z, acc[r]);
        acc[r] = fmaf(m3, pv.w, acc[r]);
      }
    }
    __syncthreads();  // every thread is done reading prev
#pragma unroll
    for (int r = 0; r < R; ++r) {
      prev[(vg + G * r) * K + k] = acc[r];
      cur[size_t(vg + G * r) * K + k] = acc[r];
    }
  }
}

// The split's segment table has no row for an empty sequence, so no apply CTA writes its final state
// (the initial state, or zero). grid (N, HO), 256 threads.
__global__ void __launch_bounds__(256) empty_final(FwdArgs a) {
  pass_empty_state(a.cu, a.cu_int64, a.v, a.k, a.init_type, a.init, a.init_stride, a.final_type, a.fin, a.fin_stride);
}

// ------------------------------------------------------------------------------------------------
// chunk_prep_mma (the default prep; OPENDNN_GDN_PREP_V2=0 withholds it): the same workspace as chunk_prep,
// one CTA per (chunk, q/k head) for the G = HO / H output heads that read that head. What depends on
// what: K K^T and Q K^T depend only on the q/k head, so they are formed once per CTA (mma.sync) and kept
// in fp32; the gates, beta, the inverse, W, U and Aqk depend on the output head and are redone per head
// from those products. The gate scalings are folded into the inverse's columns,
//   W = (T diag(beta e^gamma)) K,  U = (T diag(beta)) V,
// so the raw K and V tiles are the B operands and no scaled copy of them is built.
// The inverse T = (I + A)^-1 is blocked: the four 16x16 diagonal blocks by substitution (fp32, one
// thread per column), then T_10 and T_32 = -T_ii A_ij T_jj, then the 32x32 bottom-left block the same
// way, both with tf32 mma.sync (fp32 range, 10-bit mantissa: the result is rounded to 16 bits anyway).
// A and T share one fp32 matrix M: A in the strict lower triangle, T transposed in the upper one
// (T(r, c) at M[c][r], c <= r), so every block product reads finished inputs and writes a free block.
namespace prep2 {

constexpr int kLdm = C + 4;        // fp32 rows of M and of the K K^T / Q K^T tiles
constexpr int kLdt = C + kPad16;   // 16-bit rows of the scaled inverses
constexpr int kLdst = 16 + kPad16;  // per-warp output staging rows (16 columns)

template <int K, int V, bool Lean = false>
struct Layout {
  // Lean (the v3 kernel): no v rows and no scaled inverses in shared memory, 70 KB at K = 128, so
  // three CTAs fit an SM.
  static constexpr int ldk = K + kPad16, ldv = V + kPad16, vt = Lean ? 0 : C;
  static constexpr size_t ks = 0;                                    // [C][ldk] k rows
  static constexpr size_t vs = ks + size_t(C) * ldk * 2;             // [C][ldv] v rows of one head
  static constexpr size_t kk = vs + size_t(vt) * ldv * 2;            // [C][kLdm] fp32 K K^T
  static constexpr size_t qk = kk + size_t(C) * kLdm * 4;            // [C][kLdm] fp32 Q K^T
  static constexpr size_t m = qk + size_t(C) * kLdm * 4;             // q rows, then M, then output staging
  static constexpr size_t m_bytes = std::max(size_t(C) * ldk * 2, size_t(C) * kLdm * 4);
  static constexpr size_t tw = m + m_bytes;                          // [C][kLdt] T diag(beta e^gamma)
  static constexpr size_t tu = tw + size_t(vt) * kLdt * 2;           // [C][kLdt] T diag(beta)
  static constexpr size_t gates = tu + size_t(vt) * kLdt * 2;        // gamma, beta, beta e^gamma [C] each,
  static constexpr size_t bytes = gates + 5 * C * sizeof(float);    // then (Lean) 1/|q|, 1/|k| [C] each
  static_assert(kWarps * 16 * kLdst * 2 <= m_bytes, "the output staging lives in M's space");
};

__device__ __forceinline__ uint32_t tf32(float x) {
  uint32_t r;
  asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(x));
  return r;
}
__device__ __forceinline__ void mma_tf32(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
                                         uint32_t b1) {
  asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
               : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// One warp: the S x S block T_RC = -T_R A_RC T_C below the diagonal (rows r0.., columns c0..), where
// T_R and T_C are the finished diagonal parts. Computed transposed, 16 rows ms.. of
//   Y^T = T_C^T A_RC^T,   T_RC^T = -Y^T T_R^T,
// so that Y^T's accumulators are directly the A operand of the second product: an m16n8 accumulator
// holds columns 2c, 2c+1 where the tf32 A operand wants c, c+4, and the k order inside each 8-slice is
// free as long as the B rows follow it.
template <int S>
__device__ __forceinline__ void offdiag(float* M, int r0, int c0, int ms, int lane) {
  constexpr int NT = S / 8;
  const int g = lane / 4, c = lane % 4;
  float y[NT][4] = {};
  auto tc_t = [&](int m, int k) { return k >= m ? M[(c0 + m) * kLdm + c0 + k] : 0.f; };  // T_C^T(m, k)
#pragma unroll
  for (int k0 = 0; k0 < S; k0 += 8) {
    const int m = ms + g, k = k0 + c;
    const uint32_t a0 = tf32(tc_t(m, k)), a1 = tf32(tc_t(m + 8, k)), a2 = tf32(tc_t(m, k + 4)),
                   a3 = tf32(tc_t(m + 8, k + 4));
#pragma unroll
    for (int n = 0; n < NT; ++n) {
      const float* arow = M + (r0 + 8 * n + g) * kLdm + c0;  // A_RC^T(k, n) = A_RC(n, k)
      mma_tf32(y[n], a0, a1, a2, a3, tf32(arow[k]), tf32(arow[k + 4]));
    }
  }
  float t[NT][4] = {};
  auto tr_t = [&](int k, int n) { return n >= k ? M[(r0 + k) * kLdm + r0 + n] : 0.f; };  // T_R^T(k, n)
#pragma unroll
  for (int s = 0; s < NT; ++s) {
    const int k = 8 * s + 2 * c;  // the physical rows behind logical k = c and c + 4
#pragma unroll
    for (int n = 0; n < NT; ++n)
      mma_tf32(t[n], tf32(y[s][0]), tf32(y[s][2]), tf32(y[s][1]), tf32(y[s][3]), tf32(tr_t(k, 8 * n + g)),
               tf32(tr_t(k + 1, 8 * n + g)));
  }
#pragma unroll
  for (int n = 0; n < NT; ++n) {  // T_RC(n', m') goes to M[c0 + m'][r0 + n']
    float* d = M + (c0 + ms + g) * kLdm + r0 + 8 * n + 2 * c;
    d[0] = -t[n][0], d[1] = -t[n][1];
    d[8 * kLdm] = -t[n][2], d[8 * kLdm + 1] = -t[n][3];
  }
}

}  // namespace prep2

// grid (bound, H), kThreads threads, prep2::Layout<K, V>::bytes of shared memory.
// V3 (the default prep3; OPENDNN_GDN_PREP_V3=0 withholds it): the output per head is Tu = T diag(beta), Aqk, gamma and
// the per-row scales of Work::fs only: no v rows, no W/U products, ~25 KB written per chunk and head
// instead of 40 (state_pass_mma<V3> forms v' from v and Tu). With l2norm the raw q and k rows are
// normalised in shared memory (the products see the same 16-bit normalised values l2_rows would write)
// and their fp32 inverse norms go into those scales, for the pass's raw q and k. Warp 0 loads the next
// head's gates while the current head computes, so no head waits a global round trip with the CTA
// parked at a barrier.
template <class T, int K, int V, bool V3>
__global__ void __launch_bounds__(kThreads, V3 ? 3 : 2) chunk_prep_mma(PrepParams p) {
  using namespace mma;
  using namespace prep2;
  using Lay = Layout<K, V, V3>;
  constexpr int ldk = Lay::ldk, ldv = Lay::ldv;
  const FwdArgs& a = p.a;
  const int2 ent = p.w.table[blockIdx.x];
  if (ent.x < 0) return;
  const int hq = blockIdx.y;
  const int G = int(a.ho / a.h);
  const int64_t t0 = ent.y;
  const int L = int(imin(C, cu_at(a.cu, a.cu_int64, ent.x + 1) - t0));
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, c = lane % 4;

  extern __shared__ __align__(128) unsigned char smem[];
  T* ks = reinterpret_cast<T*>(smem + Lay::ks);
  T* vs = reinterpret_cast<T*>(smem + Lay::vs);
  float* kkt = reinterpret_cast<float*>(smem + Lay::kk);
  float* qkt = reinterpret_cast<float*>(smem + Lay::qk);
  T* qs = reinterpret_cast<T*>(smem + Lay::m);
  float* M = reinterpret_cast<float*>(smem + Lay::m);
  T* tw = reinterpret_cast<T*>(smem + Lay::tw);
  T* tu = reinterpret_cast<T*>(smem + Lay::tu);
  float* gam = reinterpret_cast<float*>(smem + Lay::gates);
  float* bet = gam + C;
  float* beg = bet + C;  // beta e^gamma
  float* nqs = beg + C;  // V3: inverse norms of the q rows, then of the k rows (1 without l2norm)

  const T* qg = static_cast<const T*>(p.q);
  const T* kg = static_cast<const T*>(p.k);
  const T* vg = static_cast<const T*>(a.vv);
  auto issue_v = [&](int j) {
    const int64_t hvv = j / (a.ho / a.hv);
    for (int e = tid; e < C * (V / 8); e += kThreads) {
      const int r = e / (V / 8), col = (e % (V / 8)) * 8;
      cp16(vs + r * ldv + col, vg + ((r < L ? t0 + r : t0) * a.hv + hvv) * V + col, r < L);
    }
    cp_commit();
  };
  for (int e = tid; e < C * (K / 8); e += kThreads) {
    const int r = e / (K / 8), col = (e % (K / 8)) * 8;
    const int64_t row = ((r < L ? t0 + r : t0) * a.h + hq) * K + col;
    cp16(ks + r * ldk + col, kg + row, r < L);
    cp16(qs + r * ldk + col, qg + row, r < L);
  }
  // cp.async.wait_group only waits for committed groups: v2 commits these q/k copies with its v rows
  // (issue_v); v3 reads no v and must commit them itself, else cp_wait_all() below returns at once and
  // the l2 norms and K K^T read rows still in flight (non-finite output under load: bench/gdn.py).
  if constexpr (V3) cp_commit();
  else issue_v(hq * G);
  // Gates of output head j for rows 2 lane, 2 lane + 1 (warp 0).
  float gv[2] = {0.f, 0.f}, bv[2] = {0.f, 0.f};
  auto load_gates = [&](int j) {
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const int r = 2 * lane + e;
      gv[e] = r < L ? load_any(a.g_type, a.g, (t0 + r) * a.ho + j) : 0.f;
      bv[e] = r < L ? load_any(a.beta_type, a.beta, (t0 + r) * a.ho + j) : 0.f;
    }
  };
  if (V3 && warp == 0) load_gates(hq * G);
  cp_wait_all();
  __syncthreads();
  if constexpr (V3) {
    if (!a.l2norm) {
      for (int e = tid; e < 2 * C; e += kThreads) nqs[e] = 1.f;  // read after the head loop's first barrier
    } else {
      // One warp a row, K / 32 elements a lane: x * (sum x^2 + 1e-6)^-1/2, as l2_rows.
      constexpr int E = K / 32;
      using Vec = std::conditional_t<E == 4, uint2, uint32_t>;
      for (int u = warp; u < 2 * C; u += kWarps) {
        const int r = u % C;
        T* row = (u < C ? qs : ks) + r * ldk + lane * E;
        Vec raw = *reinterpret_cast<const Vec*>(row);
        T* e = reinterpret_cast<T*>(&raw);
        float x[E], ss = 0.f;
#pragma unroll
        for (int i = 0; i < E; ++i) x[i] = to_f(e[i]), ss += x[i] * x[i];
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
        const float inv = rsqrtf(ss + 1e-6f);
#pragma unroll
        for (int i = 0; i < E; ++i) e[i] = from_f<T>(x[i] * inv);
        *reinterpret_cast<Vec*>(row) = raw;
        if (lane == 0) nqs[u] = inv;
      }
      __syncthreads();
    }
  }

  // ldmatrix lane offsets: A (and B from [n][k] rows) 16x16 row-major, and B from [k][n] rows (.trans).
  const int a_row = (lane & 7) + ((lane >> 3) & 1) * 8, a_col = (lane >> 4) * 8;
  const int rb_row = (lane & 7) + (lane >> 4) * 8, rb_col = ((lane >> 3) & 1) * 8;

  // K K^T and Q K^T: the 10 lower 16x16 blocks of each, blocks over the warps.
  for (int b = warp; b < 20; b += kWarps) {
    int mt = 0, nt = b % 10;
    while (nt > mt) nt -= ++mt;
    const T* lhs = b < 10 ? ks : qs;
    float acc[2][4] = {};
#pragma unroll
    for (int kk = 0; kk < K / 16; ++kk) {
      uint32_t af[4], bf[4];
      ldsm4(af, lhs + (16 * mt + a_row) * ldk + 16 * kk + a_col);
      ldsm4(bf, ks + (16 * nt + rb_row) * ldk + 16 * kk + rb_col);
      mma16816<T>(acc[0], af, bf[0], bf[1]);
      mma16816<T>(acc[1], af, bf[2], bf[3]);
    }
    float* dst = (b < 10 ? kkt : qkt) + (16 * mt + g) * kLdm + 16 * nt + 2 * c;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      *reinterpret_cast<float2*>(dst + 8 * h) = make_float2(acc[h][0], acc[h][1]);
      *reinterpret_cast<float2*>(dst + 8 * h + 8 * kLdm) = make_float2(acc[h][2], acc[h][3]);
    }
  }

  for (int i = 0; i < G; ++i) {
    const int j = hq * G + i;
    __syncthreads();  // q rows (first head) or the previous head's staging in M are done with
    if (warp == 0) {
      // Cumulative log gate over the chunk: each lane owns two consecutive rows.
      if constexpr (!V3) load_gates(j);
      const int r0 = 2 * lane;
      float s = gv[0] + gv[1];
      for (int o = 1; o < 32; o <<= 1) {
        const float y = __shfl_up_sync(0xffffffffu, s, o);
        if (lane >= o) s += y;
      }
      const float gm[2] = {s - gv[1], s};
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int r = r0 + e;
        gam[r] = gm[e];
        bet[r] = bv[e];
        beg[r] = bv[e] * __expf(gm[e]);
        if (r < L) p.w.gam[(t0 + r) * a.ho + j] = gm[e];
      }
      if constexpr (V3) {
        const float glast = __shfl_sync(0xffffffffu, (L - 1) % 2 ? gm[1] : gm[0], (L - 1) / 2);
        float* fs = p.w.fs + (t0 * a.ho + j);
        const int64_t plane = a.t * a.ho;
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int r = r0 + e;
          if (r >= L) continue;
          const float nk = nqs[C + r], eg = __expf(gm[e]);
          fs[r * a.ho] = eg * nk;
          fs[plane + r * a.ho] = a.scale * eg * nqs[r];
          fs[2 * plane + r * a.ho] = __expf(glast - gm[e]) * nk;
        }
        if (i + 1 < G) load_gates(j + 1);  // used next head: the latency hides behind this one
      }
    }
    __syncthreads();

    // Gates and masks, eight columns of one row a step: A into M's lower triangle, Aqk to global.
    T* aqk = static_cast<T*>(p.w.aqk) + (t0 * a.ho + j) * C;
    for (int u = tid; u < C * C / 8; u += kThreads) {
      const int r = u / 8, c0 = (u % 8) * 8;
      const float gr = gam[r], br = bet[r];
      float kv[8], qv[8], av[8];
      // 16-byte loads: 8 lanes of a row read 256 contiguous bytes (2-way), scalar ones would be 4-way.
      *reinterpret_cast<float4*>(kv) = *reinterpret_cast<const float4*>(kkt + r * kLdm + c0);
      *reinterpret_cast<float4*>(kv + 4) = *reinterpret_cast<const float4*>(kkt + r * kLdm + c0 + 4);
      *reinterpret_cast<float4*>(qv) = *reinterpret_cast<const float4*>(qkt + r * kLdm + c0);
      *reinterpret_cast<float4*>(qv + 4) = *reinterpret_cast<const float4*>(qkt + r * kLdm + c0 + 4);
      uint4 pk;
      T* pe = reinterpret_cast<T*>(&pk);
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        const int cc = c0 + e;
        const float d = __expf(gr - gam[cc]);  // only kept under the mask (cc <= r): never inf * 0
        av[e] = cc < r ? br * kv[e] * d : 0.f;
        pe[e] = from_f<T>(cc <= r ? a.scale * qv[e] * d : 0.f);
      }
      *reinterpret_cast<float4*>(M + r * kLdm + c0) = make_float4(av[0], av[1], av[2], av[3]);
      *reinterpret_cast<float4*>(M + r * kLdm + c0 + 4) = make_float4(av[4], av[5], av[6], av[7]);
      if (r < L) *reinterpret_cast<uint4*>(aqk + r * a.ho * C + c0) = pk;
    }
    __syncthreads();

    // Diagonal blocks: thread (block o, column cl) substitutes its column in registers. Reads A below
    // the diagonal, writes T_oo^T on and above it.
    if (tid < C) {
      const int o = (tid / 16) * 16, cl = tid % 16;
      float col[16];
      unit_lower_inverse_column16(M, kLdm, o, cl, col);
#pragma unroll
      for (int r = 0; r < 16; ++r)
        if (r >= cl) M[(o + cl) * kLdm + o + r] = col[r];
    }
    __syncthreads();
    if (warp < 2) offdiag<16>(M, 16 + 32 * warp, 32 * warp, 0, lane);  // T_10, T_32
    __syncthreads();
    if (warp < 2) offdiag<32>(M, 32, 0, 16 * warp, lane);  // T_{2:4, 0:2}
    __syncthreads();

    // The scaled inverses in the io type (lanes walk rows: conflict-free column reads of M).
    for (int u = tid; u < C * C / 8; u += kThreads) {
      const int r = u % C, c0 = (u / C) * 8;
      uint4 pw, pu, pt;
      T* ew = reinterpret_cast<T*>(&pw);
      T* eu = reinterpret_cast<T*>(&pu);
      T* et = reinterpret_cast<T*>(&pt);
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        const int cc = c0 + e;
        const float t = cc <= r ? M[cc * kLdm + r] : 0.f;
        ew[e] = from_f<T>(t * beg[cc]);
        eu[e] = from_f<T>(t * bet[cc]);
        et[e] = from_f<T>(t);
      }
      if constexpr (V3) {  // Tu = T diag(beta) is all the pass needs (see state_pass_mma)
        if (r < L) *reinterpret_cast<uint4*>(static_cast<T*>(p.w.tu) + ((t0 + r) * a.ho + j) * C + c0) = pu;
        continue;
      }
      *reinterpret_cast<uint4*>(tw + r * kLdt + c0) = pw;
      *reinterpret_cast<uint4*>(tu + r * kLdt + c0) = pu;
      if (p.w.tmat && r < L) *reinterpret_cast<uint4*>(static_cast<T*>(p.w.tmat) + ((t0 + r) * a.ho + j) * C + c0) = pt;
    }
    if constexpr (V3) continue;  // next head: its first barrier orders M's reuse
    cp_wait_all();  // this head's v rows
    __syncthreads();

    // W and U in units of 16 columns of one of them; 16-row strips through the warp's staging tile
    // (in M's space, free now) to 16-byte stores.
    T* st = reinterpret_cast<T*>(M) + warp * 16 * kLdst;
    for (int unit = warp; unit < (K + V) / 16; unit += kWarps) {
      const bool is_w = unit < K / 16;
      const int col0 = (is_w ? unit : unit - K / 16) * 16;
      const T* bsrc = is_w ? ks : vs;
      const int ldb = is_w ? ldk : ldv;
      const T* asrc = is_w ? tw : tu;
      uint32_t bf[4][4];
#pragma unroll
      for (int kk = 0; kk < 4; ++kk) ldsm4t(bf[kk], bsrc + (16 * kk + a_row) * ldb + col0 + a_col);
      const int width = is_w ? K : V;
      T* dst = static_cast<T*>(is_w ? p.w.w : p.w.u) + (t0 * a.ho + j) * width + col0;
#pragma unroll
      for (int s = 0; s < 4; ++s) {
        float acc[2][4] = {};
#pragma unroll
        for (int kk = 0; kk <= s; ++kk) {  // T is lower triangular
          uint32_t af[4];
          ldsm4(af, asrc + (16 * s + a_row) * kLdt + 16 * kk + a_col);
          mma16816<T>(acc[0], af, bf[kk][0], bf[kk][1]);
          mma16816<T>(acc[1], af, bf[kk][2], bf[kk][3]);
        }
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          *reinterpret_cast<uint32_t*>(st + g * kLdst + 8 * h + 2 * c) = pack2<T>(acc[h][0], acc[h][1]);
          *reinterpret_cast<uint32_t*>(st + (g + 8) * kLdst + 8 * h + 2 * c) = pack2<T>(acc[h][2], acc[h][3]);
        }
        __syncwarp();
        const int r = lane / 2, half = lane % 2;
        if (16 * s + r < L)
          *reinterpret_cast<uint4*>(dst + (16 * s + r) * a.ho * width + 8 * half) =
              *reinterpret_cast<const uint4*>(st + r * kLdst + 8 * half);
        __syncwarp();
      }
    }
    if (i + 1 < G) {
      __syncthreads();  // every warp is done with this head's v rows
      issue_v(j + 1);
    }
  }
}

template <class T, int K, int V>
void launch_prep_kv(const PrepParams& pp, int64_t bound, cudaStream_t st) {
  const bool v3 = prep3(pp.a);
  const size_t bytes = v3 ? prep2::Layout<K, V, true>::bytes : prep2::Layout<K, V>::bytes;
  auto kernel = v3 ? chunk_prep_mma<T, K, V, true> : chunk_prep_mma<T, K, V, false>;
  cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes));
  // Three lean CTAs an SM need the largest shared-memory carve-out: ask for it rather than rely on
  // the driver's choice.
  if (v3) cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout, 100);
  kernel<<<dim3(unsigned(bound), unsigned(pp.a.h)), kThreads, bytes, st>>>(pp);
}
template <class T>
void launch_prep_mma(const PrepParams& pp, int64_t bound, cudaStream_t st) {
  const int64_t k = pp.a.k, v = pp.a.v;
  if (k == 64 && v == 64) launch_prep_kv<T, 64, 64>(pp, bound, st);
  else if (k == 64) launch_prep_kv<T, 64, 128>(pp, bound, st);
  else if (v == 64) launch_prep_kv<T, 128, 64>(pp, bound, st);
  else launch_prep_kv<T, 128, 128>(pp, bound, st);
}

constexpr size_t kMaxSmem = 227 * 1024;

template <class T, int K, int Mode, int NS, bool V3, bool WG = false>
void launch_mma_stages(const PassParams& pp, int64_t ctas, cudaStream_t st) {
  constexpr bool out = Mode == kWhole || Mode == kApply;
  const size_t bytes = WG ? mma::wg_smem_bytes(K, pp.a.bv, out, NS) : mma::smem_bytes(K, pp.a.bv, out, NS, V3);
  cudaFuncSetAttribute(state_pass_mma<T, K, Mode, NS, V3, WG>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes));
  state_pass_mma<T, K, Mode, NS, V3, WG><<<unsigned(ctas), unsigned(pp.a.bv / 16 * 32), bytes, st>>>(pp);
}
template <class T, int K, int Mode, bool V3>
void launch_mma_v(const PassParams& pp, int64_t ctas, cudaStream_t st) {
  if constexpr (V3 && Mode != kStates) {
    if (wg_pass(pp.a)) {
      constexpr bool out = Mode == kWhole || Mode == kApply;
      if (pp.a.stages >= 3 && mma::wg_smem_bytes(K, pp.a.bv, out, 3) <= kMaxSmem)
        launch_mma_stages<T, K, Mode, 3, true, true>(pp, ctas, st);
      else launch_mma_stages<T, K, Mode, 2, true, true>(pp, ctas, st);
      return;
    }
  }
  if (pp.a.stages >= 3 && mma::smem_bytes(K, pp.a.bv, Mode == kWhole || Mode == kApply, 3, V3) <= kMaxSmem)
    launch_mma_stages<T, K, Mode, 3, V3>(pp, ctas, st);
  else
    launch_mma_stages<T, K, Mode, 2, V3>(pp, ctas, st);
}
template <class T, int K, int Mode>
void launch_mma_mode(const PassParams& pp, int64_t ctas, cudaStream_t st) {
  // The backward's recompute takes three stages under its v3 (stages >= 3; the default, OPENDNN_GDN_BWD_V3=0
  // keeps two: 1.56 ms vs ~1.87 at H16 HV64 32k tokens when session 7 ran it so). Its floor there
  // [arithmetic]: a step moves ~1 MB of W, 0.25 of K and 1 of U from HBM and writes 2 MB of entering states
  // and 1 of v' (~5.3 MB: ~1.5 us at 3.5 TB/s, 0.77 ms for 512 steps); a warp's ~200 mma.sync ~0.75 us.
  if constexpr (Mode == kStates || Mode == kApplyStates) {
    if (pp.a.stages >= 3 && mma::smem_bytes(K, pp.a.bv, false, 3, false) <= kMaxSmem)
      launch_mma_stages<T, K, Mode, 3, false>(pp, ctas, st);
    else
      launch_mma_stages<T, K, Mode, 2, false>(pp, ctas, st);
  } else if (Mode == kWhole || prep3(pp.a)) {  // kWhole without prep3 is refused in launch_forward
    launch_mma_v<T, K, Mode, true>(pp, ctas, st);
  } else if constexpr (Mode != kWhole) {
    launch_mma_v<T, K, Mode, false>(pp, ctas, st);
  }
}
// grid (segment rows, HO, V / 16): a CTA per sequence's first segment does the work.
template <int K, bool Reverse>
void launch_combine(const PassParams& pp, cudaStream_t st) {
  const size_t cs = combine_smem(K);
  cudaFuncSetAttribute(split_combine<K, Reverse>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(cs));
  split_combine<K, Reverse><<<dim3(unsigned(seg_bound(pp.a)), unsigned(pp.a.ho), unsigned(pp.a.v / 16)), 256, cs, st>>>(pp);
}
// Unsplit: one launch. Split: the segment table, the summaries, the combine, then the outputs.
template <class T, int K>
void launch_mma_k(const PassParams& pp, cudaStream_t st) {
  const FwdArgs& a = pp.a;
  if (!a.split) {
    if (a.keep) launch_mma_mode<T, K, kStates>(pp, a.n * a.ho * (a.v / a.bv), st);
    else launch_mma_mode<T, K, kWhole>(pp, a.n * a.ho * (a.v / a.bv), st);
    return;
  }
  const int64_t sb = seg_bound(a);
  chunk_table<<<1, 1024, 0, st>>>(a.cu, a.cu_int64, a.n, sb, C * a.seg_chunks, pp.w.segtab);
  launch_mma_mode<T, K, kSummary>(pp, sb * a.ho * ((a.v + K) / a.bv), st);
  launch_combine<K, false>(pp, st);
  if (a.keep) launch_mma_mode<T, K, kApplyStates>(pp, sb * a.ho * (a.v / a.bv), st);
  else launch_mma_mode<T, K, kApply>(pp, sb * a.ho * (a.v / a.bv), st);
  if (a.fin) empty_final<<<dim3(unsigned(a.n), unsigned(a.ho)), 256, 0, st>>>(a);
}
template <class T>
void launch_mma_pass(const PassParams& pp, cudaStream_t st) {
  switch (pp.a.k) {
    case 64: launch_mma_k<T, 64>(pp, st); break;
    default: launch_mma_k<T, 128>(pp, st); break;
  }
}

template <class T>
const char* launch_typed(const FwdArgs& a, void* workspace, cudaStream_t st) {
  Work w = carve(a, static_cast<char*>(workspace));
  const int64_t bound = chunk_bound(a);
  chunk_table<<<1, 1024, 0, st>>>(a.cu, a.cu_int64, a.n, bound, C, w.table);
  const void* q = a.q;
  const void* k = a.kk;
  if (a.l2norm && !fused_l2(a)) {
    const int64_t rows = a.t * a.h;
    l2_rows<T><<<unsigned((2 * rows + kWarps - 1) / kWarps), kThreads, 0, st>>>(
        static_cast<const T*>(a.q), static_cast<const T*>(a.kk), static_cast<T*>(w.qn), static_cast<T*>(w.kn), rows,
        int(a.k));
    q = w.qn, k = w.kn;
  }
  const size_t ps = prep_smem(int(a.k), int(a.v));
  if (bound > 0 && a.mma_prep) {
    launch_prep_mma<T>(PrepParams{a, w, q, k}, bound, st);
  } else if (bound > 0) {
    cudaFuncSetAttribute(chunk_prep<T>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(ps));
    chunk_prep<T><<<dim3(unsigned(bound), unsigned(a.ho)), kThreads, ps, st>>>(PrepParams{a, w, q, k});
  }
  const int64_t ctas = a.n * a.ho * (a.v / a.bv);
  if (a.mma_pass || a.split) {
    launch_mma_pass<T>(PassParams{a, w, q, k}, st);
  } else {
    const size_t ss = pass_smem(int(a.k), a.bv);
    cudaFuncSetAttribute(state_pass<T>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(ss));
    state_pass<T><<<unsigned(ctas), kThreads, ss, st>>>(PassParams{a, w, q, k});
  }
  cudaError_t e = cudaGetLastError();
  return e == cudaSuccess ? nullptr : cudaGetErrorString(e);
}

}  // namespace

bool supported_dims(int64_t k, int64_t v) {
  return k >= 16 && v >= 16 && k <= 256 && v <= 256 && k % 16 == 0 && v % 16 == 0 &&
         prep_smem(int(k), int(v)) <= kMaxSmem && pass_smem(int(k), 16) <= kMaxSmem;
}

int choose_bv(const FwdArgs& a, int sm_count) {
  int best = 0;
  for (int bv : {64, 32, 16}) {
    if (a.v % bv != 0 || pass_smem(int(a.k), bv) > kMaxSmem) continue;
    if (best == 0) best = bv;  // the widest that fits
    if (a.n * a.ho * (a.v / bv) >= sm_count) return bv;
    best = bv;  // narrower slices: more CTAs for long sequences with few heads
  }
  return best;
}

bool mma_pass_supported(int64_t k, int64_t v) {
  return (k == 64 || k == 128) && v % 16 == 0 && v >= 16 && v <= 256 &&
         mma::smem_bytes(int(k), 64) <= kMaxSmem;
}

int widest_state_slice(int64_t v, int64_t sequences_x_heads, int sm_count) {
  // Every warp owns 16 state columns whatever bv is, so bv only trades CTAs (spread over the SMs)
  // against duplicated chunk-tile loads: take the widest slice that still gives ~3/4 of the SMs
  // a CTA (one CTA per SM fits at two stages), else the narrowest for the most parallel warps.
  int best = 0;
  for (int bv : {64, 32, 16}) {
    if (v % bv != 0) continue;
    best = bv;
    if (sequences_x_heads * (v / bv) * 4 >= int64_t(sm_count) * 3) return bv;
  }
  return best;
}

int choose_bv_mma(const FwdArgs& a, int sm_count) { return widest_state_slice(a.v, a.n * a.ho, sm_count); }

bool choose_split(FwdArgs& a, int sm_count) {
  // bv must divide V and K (the summary's slices run over [S | M], V + K columns); K is 64 or 128.
  // The widest such slice: the chunk tiles (W, K, Q, Aqk: ~4/5 of a CTA's loads) are then fetched by
  // fewer CTAs, and at K = V = 128 one 8-warp CTA per SM (183 KB) keeps twice the warps of bv = 64
  // in flight. Segments: about one output-pass CTA per SM (one wave; the summary pass has (V + K) / V
  // times as many CTAs at half the shared memory); at least 8 chunks a segment so that the combine's
  // depth (one K x K by K x 16 product per segment) stays a small part of the walk.
  a.bv = 16;
  for (int bv : {128, 64, 32})
    if (a.v % bv == 0 && a.k % bv == 0) {
      a.bv = bv;
      break;
    }
  const int64_t per_seg = a.ho * (a.v / a.bv);
  const int64_t want = std::max<int64_t>(1, int64_t(sm_count) / per_seg);
  const int64_t chunks = (a.t + C - 1) / C;
  a.seg_chunks = int(std::max<int64_t>(8, (chunks + want - 1) / want));
  // The summaries take a [V + K, K] fp32 slot per (segment, head), and the segment bound counts one
  // per sequence: many short sequences would need gigabytes for nothing to split.
  const int64_t slots = (a.t / (int64_t(C) * a.seg_chunks) + a.n) * a.ho;
  return slots * (a.v + a.k) * a.k * 4 <= (int64_t(1) << 30);
}

bool mma_prep_supported(int64_t k, int64_t v) { return (k == 64 || k == 128) && (v == 64 || v == 128); }

int64_t forward_workspace_bytes(const FwdArgs& a) { return int64_t(carve(a, nullptr).bytes); }

FwdSaved forward_saved(const FwdArgs& a, void* workspace) {
  const Work w = carve(a, static_cast<char*>(workspace));
  return {reinterpret_cast<const int*>(w.table), w.gam, w.w, w.u, w.aqk, a.l2norm ? w.qn : a.q, a.l2norm ? w.kn : a.kk,
          w.tmat, w.states, w.vn, chunk_bound(a), a.split, reinterpret_cast<const int*>(w.segtab), w.seg, seg_bound(a), a.seg_chunks, a.bv};
}

const char* launch_split_combine_reverse(const FwdArgs& a, void* workspace, void* stream) {
  if (!a.split || a.n <= 0 || a.ho <= 0) return nullptr;
  const PassParams pp{a, carve(a, static_cast<char*>(workspace)), a.q, a.kk};
  auto st = static_cast<cudaStream_t>(stream);
  if (a.k == 64) launch_combine<64, true>(pp, st);
  else launch_combine<128, true>(pp, st);
  cudaError_t e = cudaGetLastError();
  return e == cudaSuccess ? nullptr : cudaGetErrorString(e);
}

const char* launch_forward(const FwdArgs& a, void* workspace, void* stream) {
  const void* ptrs[] = {a.q, a.kk, a.vv, a.keep ? a.q : a.o, workspace};
  for (const void* ptr : ptrs)
    if (reinterpret_cast<uintptr_t>(ptr) % 16 != 0) return "q, k, v, O and the workspace must be 16-byte aligned";
  // The unsplit register-state pass on the older preps gave wrong final states on the H200 (see the
  // adapter), so it is not built: the pass without v3's prep is the first one (state_pass).
  if (a.mma_pass && !a.split && !a.keep && !prep3(a))
    return "not supported: the unsplit register-state pass needs v3's chunk_prep (prep_v3 with mma_prep)";
  if (a.n <= 0 || a.ho <= 0) return nullptr;
  auto st = static_cast<cudaStream_t>(stream);
  return a.io == DataType::HALF ? launch_typed<__half>(a, workspace, st) : launch_typed<__nv_bfloat16>(a, workspace, st);
}

}  // namespace opendnn::cuda::gdn
