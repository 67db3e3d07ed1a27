// SPDX-License-Identifier: Apache-2.0
// Gated delta net backward: the reference recurrence (src/engines/reference/gdn.cpp) differentiated
// token by token, on the GPU. A first, exact version; the chunked WY backward is the fast one to come.
//
//   sweep  persistent CTAs, one (sequence, output head) at a time, state M (V x K) and dM in fp32
//          shared memory. Forward over the sequence writing M every 64 tokens (checkpoints); then
//          chunk by chunk from the end: recompute the chunk's 64 per-token states into the CTA's
//          global scratch, and walk them backwards accumulating dM, writing d(q~), d(k~) and dv per
//          output head (fp32 scratch) and dg, dbeta directly.
//   post   per token and q/k/v head: sum the output heads that read it, then the l2norm backward.
//
// Sliced (BwdArgs::sliced, K * V > 16384): the columns of S (rows of M) evolve independently, so a work
// item is (sequence, output head, V-slice) with a bv x K state and gradient in shared memory. What sums
// over all rows (d(q~), d(k~), dg, dbeta) goes per slice into [slices, ...] fp32 partials, which
// sum_slices adds up in slice order before the post; dv and d(initial state) are per row.
#include <cuda_runtime.h>

#include <algorithm>

#include "engines/cuda/gdn/gdn_device.cuh"
#include "engines/cuda/gdn/gdn_kernels.h"

namespace opendnn::cuda::gdn {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kMaxState = 128 * 128;

size_t align_up(size_t x) { return (x + 255) & ~size_t(255); }

// How the sweep splits M's rows: `slices` items per (sequence, output head), slice i holding rows
// [i bv, min((i + 1) bv, V)). Unsliced: one slice of V rows.
struct Slicing {
  int slices, bv;
};
Slicing slicing(const BwdArgs& a) {
  if (!a.sliced) return {1, int(a.v)};
  const int V = int(a.v), widest = kMaxState / int(a.k);  // rows as large as the unsliced sweep's largest state
  int slices = (V + widest - 1) / widest;
  // A step costs about its slice's rows, so where (sequence, head) items leave most of the grid idle, thinner
  // slices (down to 16 rows) shorten the sequential chain instead; the partials grow with the slices, but
  // only while N * HO * slices stays under the grid.
  while (a.n * a.ho * slices * 2 <= a.grid && (V + 2 * slices - 1) / (2 * slices) >= 16) slices *= 2;
  const int bv = (V + slices - 1) / slices;
  return {(V + bv - 1) / bv, bv};
}

struct Scratch {
  float* ckpt;    // [T/64 + N, HO, V*K]: sequence s, chunk c at row cu[s]/64 + s + c
  float* states;  // [grid, 64, bv*K] the states inside one chunk, per CTA
  float* dqs;     // [slices, T, HO, K] gradient of the (normalised) q seen by each output head
  float* dks;     // [slices, T, HO, K]
  float* des;     // [T, HO, V] gradient of v seen by each output head
  float *dgp, *dbp;  // sliced only: [slices, T, HO] the slices' shares of dg and dbeta
  size_t bytes;
};
Scratch carve(const BwdArgs& a, char* base) {
  Scratch w{};
  size_t off = 0;
  auto take = [&](size_t floats) {
    float* p = base ? reinterpret_cast<float*>(base + off) : nullptr;
    off += align_up(floats * sizeof(float));
    return p;
  };
  const Slicing sl = slicing(a);
  const size_t vk = size_t(a.v * a.k), rows = size_t(a.t) * size_t(a.ho), parts = size_t(sl.slices);
  w.ckpt = take((size_t(a.t / 64) + size_t(a.n)) * size_t(a.ho) * vk);
  w.states = take(size_t(a.grid) * 64 * size_t(sl.bv) * size_t(a.k));
  w.dqs = take(parts * rows * size_t(a.k));
  w.dks = take(parts * rows * size_t(a.k));
  w.des = take(rows * size_t(a.v));
  if (a.sliced) {
    w.dgp = take(parts * rows);
    w.dbp = take(parts * rows);
  }
  w.bytes = off;
  return w;
}

struct Params {
  BwdArgs a;
  Scratch w;
  Slicing sl;
};
struct PostParams {
  BwdArgs a;
  const void *dqs, *dks;  // fp32, or the io type when qk_io
  const float* des;
  bool qk_io;
};

// rows: of M per item (V, or the slice width).
size_t sweep_smem(int k, int rows) { return size_t(2 * rows * k + 2 * k + 4 * rows + 32) * sizeof(float); }

// Shared-memory layout of one sweep CTA.
struct Tile {
  float *M, *dM, *q, *k, *v, *dov, *e, *de, *red;
};

// Loads q~/k~ (l2-normalised when asked) into x, by one warp.
template <class T>
__device__ void load_unit_row(const T* src, int dim, bool l2, float* x) {
  const int lane = threadIdx.x % 32;
  float ss = 0.f;
  for (int d = lane; d < dim; d += 32) {
    x[d] = to_f(src[d]);
    ss += x[d] * x[d];
  }
  if (!l2) return;
  for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
  const float r = rsqrtf(ss + 1e-6f);
  for (int d = lane; d < dim; d += 32) x[d] *= r;
}

// One forward token on M (k~, v, alpha, beta already staged); row a of the state before the token
// goes to dst first when dst is set. Warp w owns rows w, w + 8, ...
__device__ void forward_rows(const Tile& s, int K, int V, float alpha, float beta, float* dst) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  for (int a = warp; a < V; a += kWarps) {
    float* row = s.M + a * K;
    float u = 0.f;
    for (int d = lane; d < K; d += 32) {
      if (dst) dst[a * K + d] = row[d];
      u += row[d] * s.k[d];
    }
    for (int o = 16; o > 0; o >>= 1) u += __shfl_xor_sync(0xffffffffu, u, o);
    const float e = s.v[a] - alpha * u;
    for (int d = lane; d < K; d += 32) row[d] = alpha * row[d] + beta * e * s.k[d];
  }
}

// Sliced: an item owns rows [v0, v0 + R) of M; the unsliced instantiation folds slices to 1, v0 to 0 and
// R to V, which leaves its arithmetic as it was before slicing existed.
template <class T, bool Sliced>
__global__ void __launch_bounds__(kThreads) sweep(Params p) {
  const BwdArgs& a = p.a;
  const int K = int(a.k), V = int(a.v), VK = K * V;
  const int slices = Sliced ? p.sl.slices : 1, BV = Sliced ? p.sl.bv : V, SK = BV * K;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  extern __shared__ __align__(16) float smem[];
  Tile s;
  s.M = smem;
  s.dM = s.M + SK;
  s.q = s.dM + SK;
  s.k = s.q + K;
  s.v = s.k + K;
  s.dov = s.v + BV;
  s.e = s.dov + BV;
  s.de = s.e + BV;
  s.red = s.de + BV;
  float* my_states = p.w.states + int64_t(blockIdx.x) * 64 * SK;
  const T* q = static_cast<const T*>(a.q);
  const T* k = static_cast<const T*>(a.kk);
  const T* v = static_cast<const T*>(a.vv);
  const T* dO = static_cast<const T*>(a.d_o);

  // The slices of one (sequence, head) are neighbouring items: they read the same q, k, g, beta rows together.
  for (int64_t item = blockIdx.x; item < a.n * a.ho * slices; item += gridDim.x) {
    const int sl = int(item % slices), v0 = sl * BV, R = Sliced ? min(BV, V - v0) : V, RK = R * K;
    const int64_t part = int64_t(sl) * a.t * a.ho;  // the slice's rows in the [slices, T, HO] partials
    const int64_t sq = item / slices / a.ho;
    const int j = int(item / slices % a.ho);
    const int64_t hq = j / (a.ho / a.h), hvv = j / (a.ho / a.hv);
    const int64_t start = cu_at(a.cu, a.cu_int64, sq), end = cu_at(a.cu, a.cu_int64, sq + 1);
    float* ck = p.w.ckpt + ((start / 64 + sq) * a.ho + j) * int64_t(VK) + int64_t(v0) * K;
    const int64_t ck_stride = a.ho * int64_t(VK);  // next chunk of the same head
    const int64_t n_chunks = end > start ? (end - start + 63) / 64 : 0;

    __syncthreads();  // the previous item is done with shared memory
    for (int i = threadIdx.x; i < RK; i += blockDim.x) {
      const int r = v0 + i / K, c = i % K;
      s.M[i] = a.init ? load_any(a.init_type, a.init,
                                 sq * a.init_stride[0] + j * a.init_stride[1] + r * a.init_stride[2] + c * a.init_stride[3])
                      : 0.f;
      s.dM[i] = a.dfin ? load_any(a.dfin_type, a.dfin,
                                  sq * a.dfin_stride[0] + j * a.dfin_stride[1] + r * a.dfin_stride[2] + c * a.dfin_stride[3])
                       : 0.f;
    }
    __syncthreads();

    // Stages k~, v, alpha, beta of token t for a forward step; returns (alpha, beta).
    auto stage_forward = [&](int64_t t, float& alpha, float& beta) {
      if (warp == 0) load_unit_row(k + (t * a.h + hq) * K, K, a.l2norm, s.k);
      for (int i = threadIdx.x; i < R; i += blockDim.x) s.v[i] = to_f(v[(t * a.hv + hvv) * V + v0 + i]);
      alpha = __expf(load_any(a.g_type, a.g, t * a.ho + j));
      beta = load_any(a.beta_type, a.beta, t * a.ho + j);
      __syncthreads();
    };

    // Forward over the sequence, checkpointing the state entering every chunk.
    for (int64_t t = start; t < end; ++t) {
      float alpha, beta;
      stage_forward(t, alpha, beta);
      forward_rows(s, K, R, alpha, beta, (t - start) % 64 == 0 ? ck + ((t - start) / 64) * ck_stride : nullptr);
      __syncthreads();
    }

    for (int64_t c = n_chunks - 1; c >= 0; --c) {
      const int64_t t0 = start + c * 64;
      const int L = int(imin(64, end - t0));
      for (int i = threadIdx.x; i < RK; i += blockDim.x) s.M[i] = ck[c * ck_stride + i];
      __syncthreads();
      for (int r = 0; r < L; ++r) {
        float alpha, beta;
        stage_forward(t0 + r, alpha, beta);
        forward_rows(s, K, R, alpha, beta, my_states + int64_t(r) * SK);
        __syncthreads();
      }
      for (int r = L - 1; r >= 0; --r) {
        const int64_t t = t0 + r;
        const float* Mp = my_states + int64_t(r) * SK;  // the state before token t
        if (warp == 0) load_unit_row(q + (t * a.h + hq) * K, K, a.l2norm, s.q);
        if (warp == 1) load_unit_row(k + (t * a.h + hq) * K, K, a.l2norm, s.k);
        for (int i = threadIdx.x; i < R; i += blockDim.x) {
          s.v[i] = to_f(v[(t * a.hv + hvv) * V + v0 + i]);
          s.dov[i] = to_f(dO[(t * a.ho + j) * V + v0 + i]);
        }
        const float alpha = __expf(load_any(a.g_type, a.g, t * a.ho + j));
        const float beta = load_any(a.beta_type, a.beta, t * a.ho + j);
        __syncthreads();

        // Rows: u = Mp k~ (so e = v - alpha u), dM += scale dO q~^T, dmk = dM k~.
        float dbeta_part = 0.f, edo_part = 0.f;
        for (int r_ = warp; r_ < R; r_ += kWarps) {
          float u = 0.f, dmk = 0.f;
          const float sdo = a.scale * s.dov[r_];
          for (int d = lane; d < K; d += 32) {
            const float mp = Mp[r_ * K + d];
            s.M[r_ * K + d] = mp;
            u += mp * s.k[d];
            const float dm = s.dM[r_ * K + d] + sdo * s.q[d];
            s.dM[r_ * K + d] = dm;
            dmk += dm * s.k[d];
          }
          for (int o = 16; o > 0; o >>= 1) {
            u += __shfl_xor_sync(0xffffffffu, u, o);
            dmk += __shfl_xor_sync(0xffffffffu, dmk, o);
          }
          const float e = s.v[r_] - alpha * u;
          if (lane == 0) {
            s.e[r_] = e;
            s.de[r_] = beta * dmk;
          }
          dbeta_part += e * dmk;
          edo_part += e * s.dov[r_];
        }
        if (lane == 0) {
          s.red[warp] = dbeta_part;
          s.red[kWarps + warp] = edo_part;
        }
        __syncthreads();
        float dbeta = 0.f, edo = 0.f;
        for (int w = 0; w < kWarps; ++w) dbeta += s.red[w], edo += s.red[kWarps + w];

        // Columns: with M_t = alpha Mp + beta e k~^T,
        //   d(q~) = scale M_t^T dO = scale (alpha Mp^T dO + beta k~ (e . dO)),
        //   d(k~) = beta dM^T e - alpha Mp^T de.
        for (int d = threadIdx.x; d < K; d += blockDim.x) {
          float s1 = 0.f, s2 = 0.f, s3 = 0.f;
          for (int r_ = 0; r_ < R; ++r_) {
            const float mp = s.M[r_ * K + d];
            s1 += mp * s.dov[r_];
            s2 += s.dM[r_ * K + d] * s.e[r_];
            s3 += mp * s.de[r_];
          }
          p.w.dqs[(part + t * a.ho + j) * K + d] = a.scale * (alpha * s1 + beta * s.k[d] * edo);
          p.w.dks[(part + t * a.ho + j) * K + d] = beta * s2 - alpha * s3;
        }
        for (int i = threadIdx.x; i < R; i += blockDim.x) p.w.des[(t * a.ho + j) * V + v0 + i] = s.de[i];
        __syncthreads();

        // dP = dM - de k~^T; d(alpha) = <dP, Mp>; dM_{t-1} = alpha dP.
        float dal = 0.f;
        for (int i = threadIdx.x; i < RK; i += blockDim.x) {
          const float dp = s.dM[i] - s.de[i / K] * s.k[i % K];
          dal += dp * s.M[i];
          s.dM[i] = alpha * dp;
        }
        for (int o = 16; o > 0; o >>= 1) dal += __shfl_xor_sync(0xffffffffu, dal, o);
        if (lane == 0) s.red[2 * kWarps + warp] = dal;
        __syncthreads();
        if (threadIdx.x == 0) {
          float sum = 0.f;
          for (int w = 0; w < kWarps; ++w) sum += s.red[2 * kWarps + w];
          if constexpr (Sliced) {
            p.w.dgp[part + t * a.ho + j] = sum * alpha;
            p.w.dbp[part + t * a.ho + j] = dbeta;
          } else {
            store_any(a.g_type, a.dg, t * a.ho + j, sum * alpha);  // g is the log gate: d/dg = alpha d/dalpha
            store_any(a.beta_type, a.dbeta, t * a.ho + j, dbeta);
          }
        }
      }
    }
    __syncthreads();
    if (a.dinit)
      for (int i = threadIdx.x; i < RK; i += blockDim.x) {
        const int r = v0 + i / K, c = i % K;
        store_any(a.dinit_type, a.dinit,
                  sq * a.dinit_stride[0] + j * a.dinit_stride[1] + r * a.dinit_stride[2] + c * a.dinit_stride[3],
                  s.dM[i]);
      }
  }
}

// Sliced: adds the slices' partial d(q~), d(k~) into slice 0, which the post then reads as the unsliced
// sweep's, and their dg, dbeta into the outputs, over the tokens inside the sequences (the post zeroes the
// rest, and no sweep wrote their partials). Every element adds slices 0, 1, 2, ... in that order whatever
// the grid: the same sums bit for bit on every run, where atomics would add in arrival order.
__global__ void __launch_bounds__(kThreads) sum_slices(Params p) {
  const BwdArgs& a = p.a;
  const int slices = p.sl.slices;
  const int64_t rows = a.t * a.ho;
  const int64_t lo = cu_at(a.cu, a.cu_int64, 0) * a.ho, hi = cu_at(a.cu, a.cu_int64, a.n) * a.ho;
  const int64_t first = int64_t(blockIdx.x) * blockDim.x + threadIdx.x, step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = lo * a.k + first; i < hi * a.k; i += step) {
    float dq = p.w.dqs[i], dk = p.w.dks[i];
#pragma unroll 4
    for (int sl = 1; sl < slices; ++sl) {
      dq += p.w.dqs[sl * rows * a.k + i];
      dk += p.w.dks[sl * rows * a.k + i];
    }
    p.w.dqs[i] = dq;
    p.w.dks[i] = dk;
  }
  for (int64_t i = lo + first; i < hi; i += step) {
    float dg = p.w.dgp[i], db = p.w.dbp[i];
    for (int sl = 1; sl < slices; ++sl) {
      dg += p.w.dgp[sl * rows + i];
      db += p.w.dbp[sl * rows + i];
    }
    store_any(a.g_type, a.dg, i, dg);
    store_any(a.beta_type, a.dbeta, i, db);
  }
}

// Adds n <= 4 consecutive scratch values (one 16-byte fp32 or 8-byte 16-bit load when vec: n = 4 and
// the row is 4-aligned).
__device__ __forceinline__ void add4(float* acc, const float* p, bool vec, int n) {
  if (vec) {
    const float4 v = *reinterpret_cast<const float4*>(p);
    acc[0] += v.x, acc[1] += v.y, acc[2] += v.z, acc[3] += v.w;
  } else {
    for (int e = 0; e < n; ++e) acc[e] += p[e];
  }
}
template <class T>
__device__ __forceinline__ void add4(float* acc, const T* p, bool vec, int n) {
  if (vec) {
    const uint2 u = *reinterpret_cast<const uint2*>(p);
    const T* h = reinterpret_cast<const T*>(&u);
    for (int e = 0; e < 4; ++e) acc[e] += to_f(h[e]);
  } else {
    for (int e = 0; e < n; ++e) acc[e] += to_f(p[e]);
  }
}

// One warp per (token, head) row of dq, dk (with the l2norm backward) and dv; tokens outside every
// sequence get zero gradients (also dg and dbeta, which the sweep does not visit there). des == nullptr:
// the caller wrote dv of the tokens inside the sequences itself (HV == HO, no GVA head sum: the chunked
// backward's chunk_bwd_v2), only the rest is zeroed.
// A lane owns 4 consecutive columns per 128 (one vector load when the row allows), and the head sum's
// loads are unrolled, so that each lane keeps several loads in flight: the pass is bound by the scratch
// it reads. S: the dq/dk scratch's type (float, or the io type T).
// Lean (the chunked backward's v3, the default; OPENDNN_GDN_BWD_V3=0 keeps the full post): with des == nullptr the grid
// has no dv rows (the dq rows of tokens outside every sequence zero their share of dv instead), and the q/k
// rows and the outputs move in 8-byte pieces. Why [arithmetic, H16 HV64 K=V=128 32k tokens]: the pass must
// read dq~/dk~ (2 x 32768 x 64 x 128 x 2 B = 1.07 GB), q and k (0.27 GB) and write dq, dk (0.27 GB): 1.6 GB
// = 0.46 ms at 3.5 TB/s, measured 1.20 ms. Of its 393k CTAs, 262k are dv rows that only return (2M warps),
// and each lane read its q/k row and wrote its outputs in 2-byte pieces (12 accesses where 3 do).
template <class T, class S, bool Lean = false>
__global__ void __launch_bounds__(kThreads) post(PostParams p) {
  const BwdArgs& a = p.a;
  const int64_t row = int64_t(blockIdx.x) * kWarps + threadIdx.x / 32;
  const int64_t qrows = a.t * a.h, vrows = Lean && !p.des ? 0 : a.t * a.hv;
  if (row >= 2 * qrows + vrows) return;
  const int lane = threadIdx.x % 32;
  const int which = row < qrows ? 0 : row < 2 * qrows ? 1 : 2;  // dq, dk, dv
  const int64_t r = which == 2 ? row - 2 * qrows : row - which * qrows;
  const int64_t heads = which == 2 ? a.hv : a.h;
  const int64_t t = r / heads, h = r % heads;
  const int W = int(which == 2 ? a.v : a.k);
  const int64_t G = a.ho / heads;
  const bool inside = t >= cu_at(a.cu, a.cu_int64, 0) && t < cu_at(a.cu, a.cu_int64, a.n);
  const void* src = which == 0 ? p.dqs : which == 1 ? p.dks : p.des;
  if (inside && !src) return;
  T* out = static_cast<T*>(which == 0 ? a.dq : which == 1 ? a.dk : a.dv) + r * W;
  constexpr int kGroups = 2;  // 2 x 128 columns: head dims up to 256
  float acc[kGroups][4], x[kGroups][4];
  float ss = 0.f, xdy = 0.f;
  const bool vec = W % 4 == 0;
#pragma unroll
  for (int i = 0; i < kGroups; ++i) {
    const int d0 = 128 * i + 4 * lane;
#pragma unroll
    for (int e = 0; e < 4; ++e) acc[i][e] = x[i][e] = 0.f;
    if (d0 >= W || !inside) continue;
    const int64_t off = (t * a.ho + h * G) * W + d0;
    const int n = W - d0 < 4 ? W - d0 : 4;
    if (which == 2) {
#pragma unroll 4
      for (int64_t gi = 0; gi < G; ++gi) add4(acc[i], p.des + off + gi * W, vec, n);
    } else {
      const S* base = static_cast<const S*>(src) + off;
#pragma unroll 4
      for (int64_t gi = 0; gi < G; ++gi) add4(acc[i], base + gi * W, vec, n);
    }
    if (Lean && vec && which < 2 && a.l2norm) {  // n == 4 here: W and d0 are multiples of 4
      const uint2 u = *reinterpret_cast<const uint2*>(static_cast<const T*>(which == 0 ? a.q : a.kk) + r * W + d0);
      const T* hx = reinterpret_cast<const T*>(&u);
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        x[i][e] = to_f(hx[e]);
        ss += x[i][e] * x[i][e];
        xdy += x[i][e] * acc[i][e];
      }
    } else if (which < 2 && a.l2norm)
#pragma unroll
      for (int e = 0; e < 4; ++e)
        if (d0 + e < W) {
          x[i][e] = to_f(static_cast<const T*>(which == 0 ? a.q : a.kk)[r * W + d0 + e]);
          ss += x[i][e] * x[i][e];
          xdy += x[i][e] * acc[i][e];
        }
  }
  if (which < 2 && a.l2norm) {
    for (int o = 16; o > 0; o >>= 1) {
      ss += __shfl_xor_sync(0xffffffffu, ss, o);
      xdy += __shfl_xor_sync(0xffffffffu, xdy, o);
    }
    // y = x r with r = (x.x + eps)^-1/2: dx = r (dy - x r^2 (x . dy)).
    const float rr = rsqrtf(ss + 1e-6f);
#pragma unroll
    for (int i = 0; i < kGroups; ++i)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[i][e] = rr * (acc[i][e] - x[i][e] * rr * rr * xdy);
  }
  if (Lean && vec) {
#pragma unroll
    for (int i = 0; i < kGroups; ++i) {
      const int d0 = 128 * i + 4 * lane;
      if (d0 < W) {
        uint2 u;
        T* h4 = reinterpret_cast<T*>(&u);
#pragma unroll
        for (int e = 0; e < 4; ++e) h4[e] = from_f<T>(acc[i][e]);
        *reinterpret_cast<uint2*>(out + d0) = u;
      }
    }
  } else {
#pragma unroll
    for (int i = 0; i < kGroups; ++i)
#pragma unroll
      for (int e = 0; e < 4; ++e)
        if (128 * i + 4 * lane + e < W) out[128 * i + 4 * lane + e] = from_f<T>(acc[i][e]);
  }
  // Lean without dv rows: dv of a token outside every sequence is zeroed by its dq rows, q/k head h taking the
  // value heads [h HV / H, (h + 1) HV / H) (a partition of the HV heads whether HV >= H or not).
  if (Lean && !p.des && which == 0 && !inside)
    for (int64_t hv = h * a.hv / a.h; hv < (h + 1) * a.hv / a.h; ++hv)
      for (int col = lane; col < a.v; col += 32) static_cast<T*>(a.dv)[(t * a.hv + hv) * a.v + col] = from_f<T>(0.f);
  if (which == 0 && !inside && lane < G)
    for (int64_t gi = lane; gi < G; gi += 32) {
      store_any(a.g_type, a.dg, t * a.ho + h * G + gi, 0.f);
      store_any(a.beta_type, a.dbeta, t * a.ho + h * G + gi, 0.f);
    }
}

template <class T, bool Sliced>
const char* launch_typed(const BwdArgs& a, void* workspace, cudaStream_t st) {
  Params p{a, carve(a, static_cast<char*>(workspace)), slicing(a)};
  const size_t smem = sweep_smem(int(a.k), p.sl.bv);
  cudaFuncSetAttribute(sweep<T, Sliced>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem));
  const int64_t items = a.n * a.ho * p.sl.slices;
  const unsigned grid = unsigned(std::max<int64_t>(1, std::min<int64_t>(a.grid, items)));
  sweep<T, Sliced><<<grid, kThreads, smem, st>>>(p);
  if constexpr (Sliced) {
    // A few waves of CTAs over the T * HO * K partial elements (the loop strides over the rest).
    const int64_t blocks = (a.t * a.ho * a.k + kThreads - 1) / kThreads;
    sum_slices<<<unsigned(std::max<int64_t>(1, std::min<int64_t>(blocks, int64_t(a.grid) * 8))), kThreads, 0, st>>>(p);
  }
  return launch_backward_post(a, p.w.dqs, p.w.dks, p.w.des, false, st);
}

}  // namespace

bool backward_supported_dims(int64_t k, int64_t v) {
  return k >= 1 && v >= 1 && k <= 256 && v <= 256 && k * v <= kMaxState;
}

// Any K, V the op takes: a slice has at most 16384 / K rows (64 or more), as much state as the unsliced
// sweep's largest.
bool sliced_backward_supported_dims(int64_t k, int64_t v) { return k >= 1 && v >= 1 && k <= 256 && v <= 256; }

int backward_sweep_slices(const BwdArgs& a) { return slicing(a).slices; }

const char* launch_backward_post(const BwdArgs& a, const void* dqs, const void* dks, const float* des, bool qk_io,
                                 void* stream) {
  // Lean's 8-byte stores need dq, dk (and dv where its rows are summed here) 8-byte aligned; q and k are 16,
  // checked by the chunked launcher.
  auto al8 = [](const void* x) { return reinterpret_cast<uintptr_t>(x) % 8 == 0; };
  const bool lean = a.v3 && a.chunked && qk_io && al8(a.dq) && al8(a.dk) && (!des || al8(a.dv));
  const int64_t rows = 2 * a.t * a.h + (lean && !des ? 0 : a.t * a.hv);
  const PostParams p{a, dqs, dks, des, qk_io};
  auto st = static_cast<cudaStream_t>(stream);
  if (rows > 0 && lean) {
    const unsigned grid = unsigned((rows + kWarps - 1) / kWarps);
    if (a.io == DataType::HALF) post<__half, __half, true><<<grid, kThreads, 0, st>>>(p);
    else post<__nv_bfloat16, __nv_bfloat16, true><<<grid, kThreads, 0, st>>>(p);
  } else if (rows > 0) {
    const unsigned grid = unsigned((rows + kWarps - 1) / kWarps);
    if (a.io == DataType::HALF) {
      if (qk_io) post<__half, __half><<<grid, kThreads, 0, st>>>(p);
      else post<__half, float><<<grid, kThreads, 0, st>>>(p);
    } else {
      if (qk_io) post<__nv_bfloat16, __nv_bfloat16><<<grid, kThreads, 0, st>>>(p);
      else post<__nv_bfloat16, float><<<grid, kThreads, 0, st>>>(p);
    }
  }
  cudaError_t e = cudaGetLastError();
  return e == cudaSuccess ? nullptr : cudaGetErrorString(e);
}

int64_t backward_workspace_bytes(const BwdArgs& a) { return int64_t(carve(a, nullptr).bytes); }

const char* launch_backward(const BwdArgs& a, void* workspace, void* stream) {
  if (a.n <= 0 || a.ho <= 0) return nullptr;
  auto st = static_cast<cudaStream_t>(stream);
  if (a.sliced)
    return a.io == DataType::HALF ? launch_typed<__half, true>(a, workspace, st)
                                  : launch_typed<__nv_bfloat16, true>(a, workspace, st);
  return a.io == DataType::HALF ? launch_typed<__half, false>(a, workspace, st)
                                : launch_typed<__nv_bfloat16, false>(a, workspace, st);
}

}  // namespace opendnn::cuda::gdn
