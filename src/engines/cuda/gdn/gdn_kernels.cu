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
//   state_pass    per (sequence, output head, V slice): walks the chunks in order with the state slice in
//                 fp32 shared memory: v' = U - W S, O = (scale e^gamma Q) S + Aqk v',
//                 S <- e^gamma_last S + (e^(gamma_last - gamma) K)^T v'. Fusing the output here means the
//                 per-chunk states never go to memory in the forward.
// Matrix products use warp-level bf16/fp16 tensor-core fragments (WMMA) from shared memory, fp32
// accumulation. exp(gamma_i - gamma_j) is only evaluated under the causal mask, so strong gates
// (a chunk's cumulative log decay far below -88) underflow to 0 instead of producing inf * 0.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <mma.h>

#include <algorithm>

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

// Workspace carve-up, shared by the size query and the launcher.
struct Work {
  int2* table;     // [bound] (sequence, first token); sequence -1 marks unused rows
  float* gam;      // [T, HO] within-chunk cumulative log gate
  void* w;         // [T, HO, K] io type
  void* u;         // [T, HO, V]
  void* aqk;       // [T, HO, 64] scale * (Q K^T masked and decayed)
  void* qn;        // [T, H, K] l2-normalised q (l2norm only)
  void* kn;
  size_t bytes;
};
int64_t chunk_bound(const FwdArgs& a) { return a.t / C + a.n; }
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
  w.w = take(rows * size_t(a.k) * e);
  w.u = take(rows * size_t(a.v) * e);
  w.aqk = take(rows * C * e);
  if (a.l2norm) {
    w.qn = take(size_t(a.t) * size_t(a.h) * size_t(a.k) * e);
    w.kn = take(size_t(a.t) * size_t(a.h) * size_t(a.k) * e);
  }
  w.bytes = off;
  return w;
}

// ------------------------------------------------------------------------------------------------
// The chunk table. One CTA scans the per-sequence chunk counts in tiles of blockDim sequences.
__global__ void __launch_bounds__(1024) chunk_table(const void* cu, bool i64, int64_t n, int64_t bound, int2* table) {
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
    const int chunks = int((len + C - 1) / C);
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
    for (int c = 0; c < chunks && start + c < bound; ++c) table[start + c] = make_int2(int(s), int(t0 + int64_t(c) * C));
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
    for (int r = 0; r < 16; ++r) {
      float x = r == c ? 1.f : 0.f;
      for (int m = c; m < r; ++m) x -= gs[(o + r) * ldf + o + m] * tm[(o + m) * ldf + o + c];
      tm[(o + r) * ldf + o + c] = x;
    }
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
    const int width = is_w ? K : V;
    T* dst = static_cast<T*>(is_w ? p.w.w : p.w.u) + (t0 * a.ho + j) * width + nt * 16;
    for (int e = lane; e < 256; e += 32) {
      const int r = mt * 16 + e / 16;
      if (r < L) dst[r * a.ho * width + e % 16] = from_f<T>(sc[e]);
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

template <class T>
const char* launch_typed(const FwdArgs& a, void* workspace, cudaStream_t st) {
  Work w = carve(a, static_cast<char*>(workspace));
  const int64_t bound = chunk_bound(a);
  chunk_table<<<1, 1024, 0, st>>>(a.cu, a.cu_int64, a.n, bound, w.table);
  const void* q = a.q;
  const void* k = a.kk;
  if (a.l2norm) {
    const int64_t rows = a.t * a.h;
    l2_rows<T><<<unsigned((2 * rows + kWarps - 1) / kWarps), kThreads, 0, st>>>(
        static_cast<const T*>(a.q), static_cast<const T*>(a.kk), static_cast<T*>(w.qn), static_cast<T*>(w.kn), rows,
        int(a.k));
    q = w.qn, k = w.kn;
  }
  const size_t ps = prep_smem(int(a.k), int(a.v));
  cudaFuncSetAttribute(chunk_prep<T>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(ps));
  if (bound > 0) chunk_prep<T><<<dim3(unsigned(bound), unsigned(a.ho)), kThreads, ps, st>>>(PrepParams{a, w, q, k});
  const size_t ss = pass_smem(int(a.k), a.bv);
  cudaFuncSetAttribute(state_pass<T>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(ss));
  const int64_t ctas = a.n * a.ho * (a.v / a.bv);
  state_pass<T><<<unsigned(ctas), kThreads, ss, st>>>(PassParams{a, w, q, k});
  cudaError_t e = cudaGetLastError();
  return e == cudaSuccess ? nullptr : cudaGetErrorString(e);
}

constexpr size_t kMaxSmem = 227 * 1024;

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

int64_t forward_workspace_bytes(const FwdArgs& a) { return int64_t(carve(a, nullptr).bytes); }

const char* launch_forward(const FwdArgs& a, void* workspace, void* stream) {
  const void* ptrs[] = {a.q, a.kk, a.vv, a.o, workspace};
  for (const void* ptr : ptrs)
    if (reinterpret_cast<uintptr_t>(ptr) % 16 != 0) return "q, k, v, O and the workspace must be 16-byte aligned";
  if (a.n <= 0 || a.ho <= 0) return nullptr;
  auto st = static_cast<cudaStream_t>(stream);
  return a.io == DataType::HALF ? launch_typed<__half>(a, workspace, st) : launch_typed<__nv_bfloat16>(a, workspace, st);
}

}  // namespace opendnn::cuda::gdn
