// SPDX-License-Identifier: Apache-2.0
// RMSNorm / LayerNorm on Hopper, memory-bound; each row is read from global memory once and
// written once. The forward runs one CTA per row with the row in registers. The backward runs a
// persistent grid: each CTA walks rows blockIdx.x, +gridDim.x, ..., and the rows ahead stream into
// a ring of shared-memory buffers with cp.async, so an SM keeps ~100-200 KB of loads in flight
// without spending registers on them. It keeps per-thread column partials of dscale/dbias in
// registers across the CTA's rows and reduces the per-CTA partials in a second, fixed-order
// kernel, so results are bitwise deterministic. An opt-in second backward (bwd_rows_kernel,
// OPENDNN_NORM_BWD_V2=1) keeps rows in registers instead, several row slots to a CTA; an opt-in
// third (bwd_tma_kernel, OPENDNN_NORM_BWD_V3=1) streams rows into a deep ring with the TMA unit,
// one CTA per SM.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <initializer_list>

#include "engines/cuda/norm/norm_kernels.h"

namespace opendnn::cuda::norm {
namespace {

template <class T> __device__ __forceinline__ float to_f(T v);
template <> __device__ __forceinline__ float to_f(float v) { return v; }
template <> __device__ __forceinline__ float to_f(__half v) { return __half2float(v); }
template <> __device__ __forceinline__ float to_f(__nv_bfloat16 v) { return __bfloat162float(v); }
template <class T> __device__ __forceinline__ T from_f(float v);
template <> __device__ __forceinline__ float from_f(float v) { return v; }
template <> __device__ __forceinline__ __half from_f(float v) { return __float2half_rn(v); }
template <> __device__ __forceinline__ __nv_bfloat16 from_f(float v) { return __float2bfloat16_rn(v); }

// Sum over the block; every thread gets the result. `red` holds 32 floats.
__device__ __forceinline__ float block_sum(float v, float* red) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, warps = blockDim.x / 32;
  __syncthreads();  // red may still be read by a previous reduction
  if (lane == 0) red[warp] = v;
  __syncthreads();
  v = lane < warps ? red[lane] : 0.f;
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// Sums two values over the block in one pass (one pair of barriers instead of two).
__device__ __forceinline__ float2 block_sum2(float2 v, float2* red) {
  for (int o = 16; o > 0; o >>= 1) {
    v.x += __shfl_xor_sync(0xffffffffu, v.x, o);
    v.y += __shfl_xor_sync(0xffffffffu, v.y, o);
  }
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, warps = blockDim.x / 32;
  __syncthreads();
  if (lane == 0) red[warp] = v;
  __syncthreads();
  v = lane < warps ? red[lane] : make_float2(0.f, 0.f);
  for (int o = 16; o > 0; o >>= 1) {
    v.x += __shfl_xor_sync(0xffffffffu, v.x, o);
    v.y += __shfl_xor_sync(0xffffffffu, v.y, o);
  }
  return v;
}

// 16-byte and 4-byte asynchronous copies global -> shared (cp.async).
__device__ __forceinline__ void cp_async16(void* smem, const void* gmem) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(gmem) : "memory");
}
__device__ __forceinline__ void cp_async4(void* smem, const void* gmem) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(s), "l"(gmem) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int K>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(K) : "memory"); }
// wait_group takes an immediate; the ring depth is chosen at launch.
__device__ __forceinline__ void cp_async_wait_dyn(int pending) {
  switch (pending) {
    case 0: cp_async_wait<0>(); break;
    case 1: cp_async_wait<1>(); break;
    case 2: cp_async_wait<2>(); break;
    case 3: cp_async_wait<3>(); break;
    case 4: cp_async_wait<4>(); break;
    case 5: cp_async_wait<5>(); break;
    case 6: cp_async_wait<6>(); break;
    default: cp_async_wait<7>(); break;
  }
}

inline constexpr int kThreads = 512;
inline constexpr int kMaxStages = 8;

// One thread's share of a ring of `stages` row buffers in dynamic shared memory. Thread t owns
// the 16-byte vectors i = 0..VPT-1 at columns (i*blockDim + t)*N of every row, of K row tensors,
// plus J per-row floats (statistics). Each thread copies exactly what it later reads, so the ring
// needs no barrier, and the [stage][k][i][thread] layout is conflict-free.
template <class T, int VPT, int K, int J>
struct Ring {
  static constexpr int N = 16 / sizeof(T);
  uint4* vecs;
  float* stats;
  int nt, tid;
  bool ok[VPT];

  __device__ Ring(void* base, int stages, int64_t cols) : nt(blockDim.x), tid(threadIdx.x) {
    vecs = static_cast<uint4*>(base);
    stats = reinterpret_cast<float*>(vecs + int64_t(stages) * K * VPT * nt);
#pragma unroll
    for (int i = 0; i < VPT; ++i) ok[i] = col(i) < cols;
  }
  static size_t stage_bytes(int threads) { return size_t(threads) * (size_t(K) * VPT * sizeof(uint4) + J * sizeof(float)); }
  __device__ __forceinline__ int64_t col(int i) const { return (int64_t(i) * nt + tid) * N; }
  __device__ __forceinline__ uint4* vec(int s, int k, int i) const { return vecs + ((int64_t(s) * K + k) * VPT + i) * nt + tid; }
  __device__ __forceinline__ float* stat(int s, int j) const { return stats + (int64_t(s) * J + j) * nt + tid; }
  // Starts copying this thread's vectors of row `row` (row-major, `cols` wide) of tensor k.
  __device__ __forceinline__ void fetch(int s, int k, const T* base, int64_t row, int64_t cols) const {
#pragma unroll
    for (int i = 0; i < VPT; ++i)
      if (ok[i]) cp_async16(vec(s, k, i), base + row * cols + col(i));
  }
  // Vector i of tensor k in stage s, as floats.
  __device__ __forceinline__ void get(int s, int k, int i, float (&out)[N]) const {
    const uint4 raw = *vec(s, k, i);
    const T* e = reinterpret_cast<const T*>(&raw);
#pragma unroll
    for (int j = 0; j < N; ++j) out[j] = to_f(e[j]);
  }
};

// Runs issue(row, stage) for the rows ahead and body(row, stage) for each row of this CTA, with
// `stages - 1` rows in flight. issue() must only start cp.async copies; a group is committed per
// row (empty past the last row, which keeps the count that wait_group relies on uniform).
template <class Issue, class Body>
__device__ __forceinline__ void pipelined_rows(int64_t rows, int stages, Issue issue, Body body) {
  const int64_t step = gridDim.x;
  int64_t row = blockIdx.x;
  for (int s = 0; s < stages - 1; ++s) {
    if (row + s * step < rows) issue(row + s * step, s);
    cp_async_commit();
  }
  for (int s = 0; row < rows; row += step, s = s + 1 == stages ? 0 : s + 1) {
    // The buffer refilled here was read by this same thread in the previous iteration, and those
    // reads fed stores already issued, so they are complete.
    const int64_t ahead = row + int64_t(stages - 1) * step;
    if (ahead < rows) issue(ahead, s == 0 ? stages - 1 : s - 1);
    cp_async_commit();
    cp_async_wait_dyn(stages - 1);
    body(row, s);
  }
  cp_async_wait<0>();  // nothing may land in shared memory after the CTA exits
}

// A thread's weights (scale or bias) for its VPT vectors, kept packed in registers.
template <class W, int VPT, int N>
struct Weights {
  static constexpr int WORDS = N * int(sizeof(W)) / 4;
  uint32_t w[VPT][WORDS];
  // Thread `tid` of `nt` threads that share a row (threadIdx.x where the whole CTA shares it).
  __device__ __forceinline__ void load(const void* p, const bool (&ok)[VPT], int nt, unsigned tid) {
#pragma unroll
    for (int i = 0; i < VPT; ++i) {
      const uint32_t* src = reinterpret_cast<const uint32_t*>(static_cast<const W*>(p) + (int64_t(i) * nt + tid) * N);
#pragma unroll
      for (int k = 0; k < WORDS; ++k) w[i][k] = ok[i] ? __ldg(src + k) : 0u;
    }
  }
  __device__ __forceinline__ float operator()(int i, int j) const { return to_f(reinterpret_cast<const W*>(w[i])[j]); }
};

// dx of one 16-byte vector of N elements from x, dy, the weight of column j (weight(j)) and the row's
// statistics: rstd * (dy*w - mean_g - xhat * mean_gx), mean_g = 0 for RMSNorm. Shared by the backward
// kernels so that they round alike.
template <class T, int N, class Weight>
__device__ __forceinline__ uint4 dx_vector(uint4 xv, uint4 dv, const Weight& weight, float rstd, float mean,
                                           float mean_g, float mean_gx) {
  const T* xe = reinterpret_cast<const T*>(&xv);
  const T* de = reinterpret_cast<const T*>(&dv);
  uint4 out;
  T* o = reinterpret_cast<T*>(&out);
#pragma unroll
  for (int j = 0; j < N; ++j)
    o[j] = from_f<T>(rstd * (to_f(de[j]) * weight(j) - mean_g - (to_f(xe[j]) - mean) * rstd * mean_gx));
  return out;
}

// N weights of type W at column c (a multiple of N), as floats: one or two 16-byte loads, or one
// 8-byte load (fp16 weights of fp32 rows). Weights are small and stay in L1/L2.
template <class W, int N>
__device__ __forceinline__ void load_weights(const void* p, int64_t c, float (&out)[N]) {
  constexpr int BYTES = N * int(sizeof(W));
  const W* src = static_cast<const W*>(p) + c;
  if constexpr (BYTES % 16 == 0) {
    uint4 raw[BYTES / 16];
#pragma unroll
    for (int k = 0; k < BYTES / 16; ++k) raw[k] = __ldg(reinterpret_cast<const uint4*>(src) + k);
    const W* e = reinterpret_cast<const W*>(raw);
#pragma unroll
    for (int j = 0; j < N; ++j) out[j] = to_f(e[j]);
  } else {
    static_assert(BYTES == 8);
    const uint2 raw = __ldg(reinterpret_cast<const uint2*>(src));
    const W* e = reinterpret_cast<const W*>(&raw);
#pragma unroll
    for (int j = 0; j < N; ++j) out[j] = to_f(e[j]);
  }
}

// Forward: one CTA per row, not persistent. Each thread issues all of its row's 16-byte loads at
// once into registers, the row is reduced with warp shuffles and one block reduction, and written
// once; a CTA exits after its row, so the block scheduler balances the tail and no CTA waits for
// a pipeline to fill. Measured on the H200 faster than both a persistent cp.async ring and one
// warp per row. LayerNorm takes the sum and the sum of squares in one reduction, of values
// shifted by the row's first element, so E[d^2] - E[d]^2 does not cancel for rows with a large
// mean.
template <class T, class W, int VPT, bool LAYER>
__global__ void __launch_bounds__(kThreads) fwd_kernel(FwdArgs a) {
  constexpr int N = 16 / sizeof(T);
  __shared__ float red[32];
  __shared__ float2 red2[32];
  auto col = [&](int i) { return (int64_t(i) * blockDim.x + threadIdx.x) * N; };
  bool ok[VPT];
#pragma unroll
  for (int i = 0; i < VPT; ++i) ok[i] = col(i) < a.cols;
  const float inv_n = 1.f / float(a.cols);
  // Past 2^31-1 rows (the grid's x limit) the grid has a second dimension.
  const int64_t row = int64_t(blockIdx.y) * gridDim.x + blockIdx.x;
  if (row >= a.rows) return;
  const T* x = static_cast<const T*>(a.x) + row * a.cols;
  float v[VPT][N];
  {
    uint4 raw[VPT];
#pragma unroll
    for (int i = 0; i < VPT; ++i) raw[i] = ok[i] ? *reinterpret_cast<const uint4*>(x + col(i)) : make_uint4(0u, 0u, 0u, 0u);
#pragma unroll
    for (int i = 0; i < VPT; ++i)
#pragma unroll
      for (int j = 0; j < N; ++j) v[i][j] = to_f(reinterpret_cast<const T*>(&raw[i])[j]);
  }
  float mean = 0.f, rstd;
  if constexpr (LAYER) {
    const float shift = to_f(x[0]);
    float2 acc = make_float2(0.f, 0.f);
#pragma unroll
    for (int i = 0; i < VPT; ++i)
      if (ok[i])  // padding would add shift and shift^2
#pragma unroll
        for (int j = 0; j < N; ++j) {
          const float d = v[i][j] - shift;
          acc.x += d;
          acc.y += d * d;
        }
    acc = block_sum2(acc, red2);
    const float md = acc.x * inv_n;
    mean = shift + md;
    rstd = rsqrtf(fmaxf(acc.y * inv_n - md * md, 0.f) + a.epsilon);
  } else {
    float sq = 0.f;
#pragma unroll
    for (int i = 0; i < VPT; ++i)
#pragma unroll
      for (int j = 0; j < N; ++j) sq += v[i][j] * v[i][j];  // padding is zero
    rstd = rsqrtf(block_sum(sq, red) * inv_n + a.epsilon);
  }
  if (threadIdx.x == 0) {
    if (a.inv_variance) a.inv_variance[row] = rstd;
    if (LAYER && a.mean) a.mean[row] = mean;
  }
  T* y = static_cast<T*>(a.y) + row * a.cols;
#pragma unroll
  for (int i = 0; i < VPT; ++i) {
    if (!ok[i]) continue;
    float w[N], b[N];
    load_weights<W, N>(a.scale, col(i), w);
    if (a.bias) load_weights<W, N>(a.bias, col(i), b);
    uint4 out;
    T* o = reinterpret_cast<T*>(&out);
#pragma unroll
    for (int j = 0; j < N; ++j) {
      float r = (v[i][j] - mean) * rstd * w[j];
      if (a.bias) r += b[j];
      o[j] = from_f<T>(r);
    }
    *reinterpret_cast<uint4*>(y + col(i)) = out;
  }
}

// Backward: dx per row, and dscale/dbias partials accumulated in registers over the CTA's rows,
// written once as one fp32 row pair per CTA ([gridDim][2][cols]) for reduce_partials. X and DY
// stay packed in the ring and are converted on the fly, read twice (row sums, then dx); the row's
// mean and rstd come through the ring too, so no global load sits on a row's critical path.
template <class T, class W, int VPT, bool LAYER>
__global__ void __launch_bounds__(kThreads) bwd_kernel(BwdArgs a, float* partial, int stages) {
  extern __shared__ uint4 smem[];
  using R = Ring<T, VPT, 2, 2>;  // tensors X, DY; statistics mean, rstd
  constexpr int N = R::N;
  const R ring(smem, stages, a.cols);
  Weights<W, VPT, N> scale;
  scale.load(a.scale, ring.ok, ring.nt, threadIdx.x);
  float ds[VPT][N], db[VPT][N];
#pragma unroll
  for (int i = 0; i < VPT; ++i)
#pragma unroll
    for (int j = 0; j < N; ++j) ds[i][j] = db[i][j] = 0.f;
  const T* X = static_cast<const T*>(a.x);
  const T* DY = static_cast<const T*>(a.dy);
  const float inv_n = 1.f / float(a.cols);
  __shared__ float2 red2[32];

  auto issue = [&](int64_t row, int s) {
    ring.fetch(s, 0, X, row, a.cols);
    ring.fetch(s, 1, DY, row, a.cols);
    if (LAYER) cp_async4(ring.stat(s, 0), a.mean + row);
    cp_async4(ring.stat(s, 1), a.inv_variance + row);
  };
  auto body = [&](int64_t row, int s) {
    const float mean = LAYER ? *ring.stat(s, 0) : 0.f;
    const float rstd = *ring.stat(s, 1);
    float2 sums = make_float2(0.f, 0.f);  // (sum g*xhat, sum g), g = dy*scale
    float x[N], d[N];
#pragma unroll
    for (int i = 0; i < VPT; ++i) {
      if (!ring.ok[i]) continue;
      ring.get(s, 0, i, x);
      ring.get(s, 1, i, d);
#pragma unroll
      for (int j = 0; j < N; ++j) {
        const float xhat = (x[j] - mean) * rstd, g = d[j] * scale(i, j);
        sums.x += g * xhat;
        sums.y += g;
        ds[i][j] += d[j] * xhat;
        db[i][j] += d[j];
      }
    }
    sums = block_sum2(sums, red2);
    const float mean_gx = sums.x * inv_n;
    const float mean_g = LAYER ? sums.y * inv_n : 0.f;
    T* dx = static_cast<T*>(a.dx) + row * a.cols;
#pragma unroll
    for (int i = 0; i < VPT; ++i) {
      if (!ring.ok[i]) continue;
      ring.get(s, 0, i, x);
      ring.get(s, 1, i, d);
      uint4 out;
      T* o = reinterpret_cast<T*>(&out);
#pragma unroll
      for (int j = 0; j < N; ++j) o[j] = from_f<T>(rstd * (d[j] * scale(i, j) - mean_g - (x[j] - mean) * rstd * mean_gx));
      *reinterpret_cast<uint4*>(dx + ring.col(i)) = out;
    }
  };
  pipelined_rows(a.rows, stages, issue, body);
  // reduce_partials (launched as a programmatic dependent) may be scheduled now; it still waits
  // for this whole grid to finish before reading the partials.
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");

  float* out = partial + int64_t(blockIdx.x) * 2 * a.cols;
#pragma unroll
  for (int i = 0; i < VPT; ++i) {
    if (!ring.ok[i]) continue;
    const int64_t c = ring.col(i);
#pragma unroll
    for (int j = 0; j < N; j += 4) {
      *reinterpret_cast<float4*>(out + c + j) = make_float4(ds[i][j], ds[i][j + 1], ds[i][j + 2], ds[i][j + 3]);
      if (a.dbias)
        *reinterpret_cast<float4*>(out + a.cols + c + j) = make_float4(db[i][j], db[i][j + 1], db[i][j + 2], db[i][j + 3]);
    }
  }
}

// Backward v2 (opt-in, OPENDNN_NORM_BWD_V2=1): rows in registers, like the forward, which beat
// the cp.async ring on the H200. A CTA of up to 1024 threads is `slots` independent row slots of
// `tpr` threads; a slot walks a contiguous chunk of rows and loads row r+1 into registers before
// it works on row r, so an SM has `slots` rows of X and DY in flight (64 KB at hidden 4096/8192,
// 16-bit). A slot's row sum is one named barrier (bar.sync 1+slot), not two CTA barriers, and a
// slot never waits for another. dscale/dbias accumulate in shared memory (registers are capped
// at 64 by 1024 threads), each thread only touching its own columns until the end, when the CTA
// adds its slots in order and writes one partial row pair: one CTA per SM means 132 partials, a
// quarter of the ring's 528 (rmsnorm 8192x4096), for reduce_partials to read. Every sum has a
// fixed order for a given plan, so dscale/dbias are bitwise reproducible. Opt-in (OPENDNN_NORM_BWD_V2=1); passes
// test_cuda_norm's *BackwardV2 cases on the H200.
inline constexpr int kV2MaxSlots = 8;

__device__ __forceinline__ void named_barrier(int id, int count) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(count) : "memory");
}

template <class T, class W, int VPT, bool LAYER>
__global__ void __launch_bounds__(VPT <= 2 ? 1024 : 512) bwd_rows_kernel(BwdArgs a, float* partial, int tpr) {
  constexpr int N = 16 / sizeof(T), Q = N / 4;  // Q float4 per vector per plane
  extern __shared__ float4 acc[];               // [slot][plane: dscale, dbias][VPT][Q][tpr]
  __shared__ float2 red[kV2MaxSlots][2][16];    // [slot][row parity][warp of the slot]
  const int slots = blockDim.x / tpr, slot = threadIdx.x / tpr, t = threadIdx.x % tpr;
  const int warp = t / 32, lane = t % 32;
  const bool has_db = a.dbias != nullptr;
  auto col = [&](int i) { return (int64_t(i) * tpr + t) * N; };
  // float4 index of (slot k, plane, vector i, quarter q) of thread th
  auto idx = [&](int k, int plane, int i, int q, int th) { return (((k * 2 + plane) * VPT + i) * Q + q) * tpr + th; };
  auto at = [&](int k, int plane, int i, int q) { return idx(k, plane, i, q, t); };
  bool ok[VPT];
#pragma unroll
  for (int i = 0; i < VPT; ++i) {
    ok[i] = col(i) < a.cols;
#pragma unroll
    for (int q = 0; q < Q; ++q) acc[at(slot, 0, i, q)] = acc[at(slot, 1, i, q)] = make_float4(0.f, 0.f, 0.f, 0.f);
  }
  const float inv_n = 1.f / float(a.cols);
  const int64_t chunks = int64_t(gridDim.x) * slots, me = int64_t(blockIdx.x) * slots + slot;
  const int64_t r0 = a.rows * me / chunks, r1 = a.rows * (me + 1) / chunks;

  // The next row waits in shared memory, not registers (two rows in registers spill at 64):
  // [tensor x, dy][VPT][thread] vectors, then mean and rstd per thread. Each thread copies only
  // what it reads itself, so the stage needs no barrier.
  uint4* stage = reinterpret_cast<uint4*>(acc + slots * 2 * VPT * Q * tpr);
  float* stat = reinterpret_cast<float*>(stage + 2 * VPT * blockDim.x);
  auto vec = [&](int k, int i) -> uint4& { return stage[(k * VPT + i) * blockDim.x + threadIdx.x]; };
  auto fetch = [&](int64_t r) {
    const T* X = static_cast<const T*>(a.x) + r * a.cols;
    const T* DY = static_cast<const T*>(a.dy) + r * a.cols;
#pragma unroll
    for (int i = 0; i < VPT; ++i)
      if (ok[i]) {
        cp_async16(&vec(0, i), X + col(i));
        cp_async16(&vec(1, i), DY + col(i));
      }
    if (LAYER) cp_async4(stat + threadIdx.x, a.mean + r);
    cp_async4(stat + blockDim.x + threadIdx.x, a.inv_variance + r);
    cp_async_commit();
  };
  struct Row {
    uint4 x[VPT], d[VPT];
    float mean, rstd;
  };
  auto take = [&](Row& b) {
    cp_async_wait<0>();
#pragma unroll
    for (int i = 0; i < VPT; ++i) {
      b.x[i] = ok[i] ? vec(0, i) : make_uint4(0u, 0u, 0u, 0u);
      b.d[i] = ok[i] ? vec(1, i) : make_uint4(0u, 0u, 0u, 0u);
    }
    b.mean = LAYER ? stat[threadIdx.x] : 0.f;
    b.rstd = stat[blockDim.x + threadIdx.x];
  };
  auto process = [&](const Row& b, int64_t r, int parity, bool more) {
    const float mean = LAYER ? b.mean : 0.f, rstd = b.rstd;
    float2 sums = make_float2(0.f, 0.f);  // (sum g*xhat, sum g), g = dy*scale
#pragma unroll
    for (int i = 0; i < VPT; ++i) {
      if (!ok[i]) continue;
      float w[N];
      load_weights<W, N>(a.scale, col(i), w);  // L1-resident; cheaper here than 8-16 registers
      const T* xe = reinterpret_cast<const T*>(&b.x[i]);
      const T* de = reinterpret_cast<const T*>(&b.d[i]);
      // A float4 of accumulators at a time keeps the live set small enough for 64 registers.
#pragma unroll
      for (int q = 0; q < Q; ++q) {
        float4 ds = acc[at(slot, 0, i, q)];
        float4 db = has_db ? acc[at(slot, 1, i, q)] : make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
        for (int jj = 0; jj < 4; ++jj) {
          const int j = q * 4 + jj;
          const float d = to_f(de[j]), xhat = (to_f(xe[j]) - mean) * rstd, g = d * w[j];
          sums.x += g * xhat;
          sums.y += g;
          reinterpret_cast<float*>(&ds)[jj] += d * xhat;
          reinterpret_cast<float*>(&db)[jj] += d;
        }
        acc[at(slot, 0, i, q)] = ds;
        if (has_db) acc[at(slot, 1, i, q)] = db;
      }
    }
    // The first pass used every value read from the stage, so those reads are complete and the
    // next row may land there; it is in flight across the barrier, the second pass and the wait.
    if (more) fetch(r + 1);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
      sums.x += __shfl_xor_sync(0xffffffffu, sums.x, o);
      sums.y += __shfl_xor_sync(0xffffffffu, sums.y, o);
    }
    // red[slot][parity] is rewritten two rows later, after this slot's next barrier, which every
    // reader of this row's values has reached: one barrier per row is enough.
    if (lane == 0) red[slot][parity][warp] = sums;
    named_barrier(1 + slot, tpr);
    sums = make_float2(0.f, 0.f);
    for (int k = 0; k < tpr / 32; ++k) {
      const float2 v = red[slot][parity][k];
      sums.x += v.x;
      sums.y += v.y;
    }
    const float mean_gx = sums.x * inv_n, mean_g = LAYER ? sums.y * inv_n : 0.f;
    T* dx = static_cast<T*>(a.dx) + r * a.cols;
    // Load the weights and unpack the row again, behind empty asm: the compiler would otherwise
    // keep the first pass's floats (weights and row, up to 4x the packed row's registers) alive
    // across the barrier, and spill.
    const void* scale = a.scale;
    asm("" : "+l"(scale));
#pragma unroll
    for (int i = 0; i < VPT; ++i) {
      if (!ok[i]) continue;
      float w[N];
      load_weights<W, N>(scale, col(i), w);
      uint4 xv = b.x[i], dv = b.d[i];
      asm("" : "+r"(xv.x), "+r"(xv.y), "+r"(xv.z), "+r"(xv.w), "+r"(dv.x), "+r"(dv.y), "+r"(dv.z), "+r"(dv.w));
      *reinterpret_cast<uint4*>(dx + col(i)) =
          dx_vector<T, N>(xv, dv, [&](int j) { return w[j]; }, rstd, mean, mean_g, mean_gx);
    }
  };

  if (r0 < r1) fetch(r0);
  int parity = 0;
  for (int64_t r = r0; r < r1; ++r, parity ^= 1) {
    Row cur;
    take(cur);
    process(cur, r, parity, r + 1 < r1);
  }
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");  // as in bwd_kernel

  __syncthreads();  // every slot's accumulators are final
  const float* accf = reinterpret_cast<const float*>(acc);
  float* out = partial + int64_t(blockIdx.x) * 2 * a.cols;
  for (int64_t c = threadIdx.x; c < a.cols; c += blockDim.x) {
    const int64_t v = c / N;
    const int j = int(c % N), i = int(v / tpr), tt = int(v % tpr);
    auto plane_sum = [&](int plane) {
      float s = 0.f;
      for (int k = 0; k < slots; ++k) s += accf[idx(k, plane, i, j / 4, tt) * 4 + j % 4];
      return s;
    };
    out[c] = plane_sum(0);
    if (has_db) out[a.cols + c] = plane_sum(1);
  }
}

// Backward v3 (the default for 16-bit rows of 257-512 vectors, see the adapter; OPENDNN_NORM_BWD_V3=1 takes it
// wherever it fits, =0 never): the bulk-copy (TMA) unit streams rows into a deep
// shared-memory ring, so the bytes in flight per SM depend neither on registers nor on how many
// threads issue copies. Why: at 8k tokens v1 (264 CTAs, 1-4 rows ahead each, 264 partial rows)
// and v2 (one row ahead a slot) ran at 0.54-0.73 of copy bandwidth, and at ~4.2 TB/s over 132
// SMs with 1-2 us of loaded latency an SM needs 32-64 KB of reads in flight at all times.
// A CTA (one per SM) is `slots` (1-2) teams of `tpr` threads; a team walks its own contiguous
// chunk of rows, its thread 0 keeping `stages - 1` rows of X and DY in flight, one bulk copy per
// row and tensor completing on the stage's mbarrier. The chunk's mean/rstd are read into shared
// memory once at the start, so no global load sits on a row's path. A stage is refilled right
// after the team's row-sum barrier of the next row, which every thread of the team reaches only
// after it has finished the row that used the stage. dscale/dbias accumulate in registers; the
// teams add theirs in a fixed order and write one partial row pair per CTA (132 for
// reduce_partials), so results stay bitwise reproducible. H200 (session 5): test_cuda_norm's BackwardV3
// cases pass; 8192x4096 bf16 rms 0.0662 ms vs v1's 0.0678, LN 0.0802 vs 0.0909; slower at hidden 8192.
inline constexpr int kV3MaxStages = 16;
inline constexpr int kV3MaxSlots = 2;
inline constexpr int64_t kV3MaxChunk = 1024;  // rows of a team's chunk, so its statistics fit in shared memory

__device__ __forceinline__ uint32_t smem_addr(const void* p) { return uint32_t(__cvta_generic_to_shared(p)); }
__device__ __forceinline__ void mbar_init(uint64_t* bar, int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(count) : "memory");
}
// This thread's arrival on the barrier's current phase, which then also waits for `bytes` of copies.
__device__ __forceinline__ void mbar_expect(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(bytes) : "memory");
}
// Gives up after 2^25 polls (seconds, far past any legitimate wait) with a trap, so that a broken
// ring fails its launch and the test instead of hanging the run.
__device__ __forceinline__ void mbar_wait(uint64_t* bar, uint32_t parity) {
  for (uint32_t polls = 0;; ++polls) {
    uint32_t done;
    asm volatile(
        "{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(smem_addr(bar)), "r"(parity)
        : "memory");
    if (done) return;
    if (polls == (1u << 25)) __trap();
  }
}
// Global -> shared copy by the TMA unit; `bytes` and both addresses are multiples of 16.
__device__ __forceinline__ void bulk_load(void* dst, const void* src, uint32_t bytes, uint64_t* bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(
                   smem_addr(dst)),
               "l"(src), "r"(bytes), "r"(smem_addr(bar))
               : "memory");
}

// Dynamic shared memory of bwd_tma_kernel, computed alike on the host and the device: the teams'
// rings ([team][stage][X row | DY row]), then their statistics ([team][mean | rstd][cap]).
struct V3Layout {
  int64_t row_bytes, cap;  // bytes of one row of X (or DY); rows of a team's chunk at most
  int64_t slots, stages;
  __host__ __device__ int64_t ring_bytes() const { return slots * stages * 2 * row_bytes; }
  __host__ __device__ int64_t bytes() const { return ring_bytes() + slots * 2 * cap * int64_t(sizeof(float)); }
};

// One vector (16 bytes) of a row per thread: rows of up to 1024 vectors (16-bit hidden 8192, fp32
// 4096); a team is the row's vectors rounded up to a warp, two teams a CTA where they fit in 1024
// threads. Wider rows take the ring kernel: two or four vectors a thread spilled under the
// register cap of 1024 threads, or at 128 registers (hidden 16384).
inline constexpr int64_t kV3MaxVecs = 1024;

template <class T, class W, bool LAYER>
__global__ void __launch_bounds__(1024) bwd_tma_kernel(BwdArgs a, float* partial, int stages) {
  constexpr int N = 16 / sizeof(T);
  extern __shared__ __align__(16) uint8_t dyn3[];
  __shared__ uint64_t full[kV3MaxSlots][kV3MaxStages];
  __shared__ float2 red[kV3MaxSlots][2][32];  // [team][row parity][warp]
  const int vecs = int(a.cols / N);
  const int tpr = (vecs + 31) / 32 * 32;
  const int slots = blockDim.x / tpr, slot = threadIdx.x / tpr, t = threadIdx.x % tpr;
  const int warp = t / 32, lane = t % 32;
  const int64_t chunks = int64_t(gridDim.x) * slots, me = int64_t(blockIdx.x) * slots + slot;
  const int64_t r0 = a.rows * me / chunks;
  const int n = int(a.rows * (me + 1) / chunks - r0);  // at most kV3MaxChunk
  const V3Layout lay{a.cols * int64_t(sizeof(T)), (a.rows + chunks - 1) / chunks, slots, stages};
  const uint32_t rb = uint32_t(lay.row_bytes);
  uint8_t* ring = dyn3 + uint32_t(slot) * uint32_t(stages) * 2 * rb;
  float* stat = reinterpret_cast<float*>(dyn3 + lay.ring_bytes()) + int64_t(slot) * 2 * lay.cap;
  const float* rstd_of = stat + lay.cap;
  uint64_t* bar = full[slot];
  // Row addresses from the kernel parameters each time: no registers held across the loop for
  // what only thread 0 needs (the LayerNorm kernel sits at the 64-register cap of 1024 threads).
  auto issue = [&](int i) {  // row r0 + i into stage i % stages
    const int s = i % stages;
    uint8_t* dst = ring + uint32_t(s) * 2 * rb;
    const int64_t off = (r0 + i) * a.cols;
    mbar_expect(&bar[s], 2 * rb);
    bulk_load(dst, static_cast<const T*>(a.x) + off, rb, &bar[s]);
    bulk_load(dst + rb, static_cast<const T*>(a.dy) + off, rb, &bar[s]);
  };
  if (t == 0) {
    for (int s = 0; s < stages; ++s) mbar_init(&bar[s], 1);
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    for (int i = 0; i < stages && i < n; ++i) issue(i);
  }
  // The statistics and the weights load while the first rows are in flight.
  for (int k = t; k < n; k += tpr) {
    if (LAYER) stat[k] = a.mean[r0 + k];
    stat[lay.cap + k] = a.inv_variance[r0 + k];
  }
  const bool ok = t < vecs;
  bool oks[1] = {ok};
  Weights<W, 1, N> scale;
  scale.load(a.scale, oks, tpr, t);
  float ds[N], db[N];
#pragma unroll
  for (int j = 0; j < N; ++j) ds[j] = db[j] = 0.f;
  const float inv_n = 1.f / float(a.cols);
  T* dx = static_cast<T*>(a.dx) + r0 * a.cols + int64_t(t) * N;
  __syncthreads();  // barriers initialised, statistics in shared memory

  uint32_t phase = 0;
  for (int i = 0, s = 0; i < n; ++i, dx += a.cols) {
    mbar_wait(&bar[s], phase);
    const uint4* xs = reinterpret_cast<const uint4*>(ring + uint32_t(s) * 2 * rb) + t;
    const uint4* gs = reinterpret_cast<const uint4*>(ring + uint32_t(s) * 2 * rb + rb) + t;
    const float mean = LAYER ? stat[i] : 0.f, rstd = rstd_of[i];
    float2 sums = make_float2(0.f, 0.f);  // (sum g*xhat, sum g), g = dy*scale
    if (ok) {
      const uint4 xv = *xs, dv = *gs;
      const T* xe = reinterpret_cast<const T*>(&xv);
      const T* de = reinterpret_cast<const T*>(&dv);
#pragma unroll
      for (int j = 0; j < N; ++j) {
        const float d = to_f(de[j]), xhat = (to_f(xe[j]) - mean) * rstd, g = d * scale(0, j);
        sums.x += g * xhat;
        sums.y += g;
        ds[j] += d * xhat;
        db[j] += d;
      }
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
      sums.x += __shfl_xor_sync(0xffffffffu, sums.x, o);
      sums.y += __shfl_xor_sync(0xffffffffu, sums.y, o);
    }
    // red[slot][parity] is rewritten two rows later, after the team's next barrier, which every
    // reader of this row's sums has passed.
    if (lane == 0) red[slot][i & 1][warp] = sums;
    named_barrier(1 + slot, tpr);
    // Every thread of the team is past row i - 1: its stage takes row i - 1 + stages.
    if (t == 0 && i >= 1 && i - 1 + stages < n) issue(i - 1 + stages);
    sums = make_float2(0.f, 0.f);
    for (int k = 0; k < tpr / 32; ++k) {
      const float2 w = red[slot][i & 1][k];
      sums.x += w.x;
      sums.y += w.y;
    }
    const float mean_gx = sums.x * inv_n, mean_g = LAYER ? sums.y * inv_n : 0.f;
    if (ok) {
      const uint4 xv = *xs, dv = *gs;
      *reinterpret_cast<uint4*>(dx) =
          dx_vector<T, N>(xv, dv, [&](int j) { return scale(0, j); }, rstd, mean, mean_g, mean_gx);
    }
    if (++s == stages) s = 0, phase ^= 1u;
  }
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");  // as in bwd_kernel

  const bool has_db = a.dbias != nullptr;
  const int64_t c = int64_t(t) * N;
  if (slots > 1) {
    // Team 1 hands its sums to team 0 through the ring, which no copy writes any more (every
    // issued row was waited for); team 0 adds them to its own, a fixed order.
    __syncthreads();
    float* buf = reinterpret_cast<float*>(dyn3);  // [dscale | dbias][cols]
    if (slot == 1 && ok)
#pragma unroll
      for (int j = 0; j < N; ++j) {
        buf[c + j] = ds[j];
        if (has_db) buf[a.cols + c + j] = db[j];
      }
    __syncthreads();
    if (slot == 1) return;
    if (ok)
#pragma unroll
      for (int j = 0; j < N; ++j) {
        ds[j] += buf[c + j];
        if (has_db) db[j] += buf[a.cols + c + j];
      }
  }
  if (!ok) return;
  float* out = partial + int64_t(blockIdx.x) * 2 * a.cols + c;
#pragma unroll
  for (int j = 0; j < N; j += 4) {
    *reinterpret_cast<float4*>(out + j) = make_float4(ds[j], ds[j + 1], ds[j + 2], ds[j + 3]);
    if (has_db) *reinterpret_cast<float4*>(out + a.cols + j) = make_float4(db[j], db[j + 1], db[j + 2], db[j + 3]);
  }
}

// Sums the per-CTA partials column by column in a fixed order (deterministic): warp y of a
// 32x32 block sums parts y, y+32, ... of 32 adjacent columns, then the 32 sums are added in order.
// 32 warps with 4 loads each in flight keep this short tail (parts x 2 x cols floats, ~9 MB for
// 264 CTAs x 4096 columns) from being latency-bound.
inline constexpr int kReduceWarps = 32;
template <class W>
__global__ void __launch_bounds__(32 * kReduceWarps) reduce_partials(const float* partial, int parts, int64_t cols, W* dscale, W* dbias) {
  __shared__ float red[2][kReduceWarps][33];
  asm volatile("griddepcontrol.wait;\n" ::: "memory");  // the backward kernel's partials are complete
  const int64_t c = int64_t(blockIdx.x) * 32 + threadIdx.x;
  auto column_sum = [&](const float* src) {  // parts threadIdx.y, +32, ... of one column
    float acc = 0.f;
    int p = threadIdx.y;
    for (; p + 3 * kReduceWarps < parts; p += 4 * kReduceWarps) {
      float v[4];
#pragma unroll
      for (int u = 0; u < 4; ++u) v[u] = __ldg(src + int64_t(p + u * kReduceWarps) * 2 * cols);
#pragma unroll
      for (int u = 0; u < 4; ++u) acc += v[u];
    }
    for (; p < parts; p += kReduceWarps) acc += __ldg(src + int64_t(p) * 2 * cols);
    return acc;
  };
  float acc[2] = {0.f, 0.f};
  if (c < cols) {
    acc[0] = column_sum(partial + c);
    if (dbias) acc[1] = column_sum(partial + cols + c);
  }
  red[0][threadIdx.y][threadIdx.x] = acc[0];
  red[1][threadIdx.y][threadIdx.x] = acc[1];
  __syncthreads();
  if (threadIdx.y != 0 || c >= cols) return;
  float s = 0.f, b = 0.f;
  for (int k = 0; k < kReduceWarps; ++k) {
    s += red[0][k][threadIdx.x];
    b += red[1][k][threadIdx.x];
  }
  dscale[c] = from_f<W>(s);
  if (dbias) dbias[c] = from_f<W>(b);
}

int vector_elems(DataType t) { return t == DataType::FLOAT ? 4 : 8; }

// Vectors per thread (1, 2, 4 or 8) and threads per CTA (32..512) for a row of `cols` elements:
// as few vectors per thread as `target` threads allow (kMaxCols fits 512 threads x 8 vectors).
// The forward aims at 256 threads (up to 8 vectors each in registers), the backward at 512.
void shape_for(int64_t cols, DataType t, int target, int& vpt, int& threads) {
  const int64_t vecs = (cols + vector_elems(t) - 1) / vector_elems(t);
  for (vpt = 1; vpt < 8; vpt *= 2)
    if ((vecs + vpt - 1) / vpt <= target) break;
  const int64_t th = (vecs + vpt - 1) / vpt;
  threads = int(std::min<int64_t>(kThreads, std::max<int64_t>(32, (th + 31) / 32 * 32)));
}

// Lifts l.kernel's dynamic shared memory limit to the device's, then returns how many CTAs of
// l.threads/l.smem fit on an SM (at least 1). The kernel's limit, not this plan's size: plans of
// other widths share the kernel and may need more, and a later plan must not lower the limit
// under an earlier one's launches.
int resident_ctas(const Launch& l, const cudaFuncAttributes& fa) {
  int dev = 0, optin = 0;
  if (cudaGetDevice(&dev) == cudaSuccess && cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) == cudaSuccess &&
      optin > int(fa.sharedSizeBytes))
    cudaFuncSetAttribute(l.kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, optin - int(fa.sharedSizeBytes));
  int per_sm = 0;
  if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, l.kernel, l.threads, l.smem) != cudaSuccess || per_sm < 1)
    per_sm = 1;
  return per_sm;
}

// Sizes the ring and the grid: as many CTAs per SM as the registers allow (up to 4, so one CTA's
// reductions overlap another's loads), and the shared memory split between them, up to
// kMaxStages rows each (at least one: fp32 backward rows of 16k elements take 128 KB each).
void size_launch(Launch& l, size_t stage_bytes, int64_t rows, int sm_count) {
  constexpr size_t kSmemPerSm = 227 * 1024, kReserve = 2 * 1024;  // per CTA: static buffers, driver
  cudaFuncAttributes fa{};
  int by_regs = 1;
  if (cudaFuncGetAttributes(&fa, l.kernel) == cudaSuccess && fa.numRegs > 0)
    by_regs = 65536 / (((fa.numRegs + 7) / 8 * 8) * l.threads);
  const int ctas = std::clamp(by_regs, 1, 4);
  const size_t budget = kSmemPerSm / size_t(ctas) - kReserve;
  l.stages = int(std::clamp<size_t>(budget / stage_bytes, 1, kMaxStages));
  l.smem = stage_bytes * size_t(l.stages);
  l.grid = int(std::max<int64_t>(1, std::min<int64_t>(rows, int64_t(sm_count) * resident_ctas(l, fa))));
}

using FwdKernel = void (*)(FwdArgs);
using BwdKernel = void (*)(BwdArgs, float*, int);

// The kernel for VPT vectors per thread; Pick<>::get() is null where no kernel is instantiated.
template <class T, template <class, class, int, bool> class Pick, class W>
auto pick_kernel(int vpt, bool layer) -> decltype(Pick<T, W, 1, true>::get()) {
  switch (vpt) {
    case 1: return layer ? Pick<T, W, 1, true>::get() : Pick<T, W, 1, false>::get();
    case 2: return layer ? Pick<T, W, 2, true>::get() : Pick<T, W, 2, false>::get();
    case 4: return layer ? Pick<T, W, 4, true>::get() : Pick<T, W, 4, false>::get();
    case 8: return layer ? Pick<T, W, 8, true>::get() : Pick<T, W, 8, false>::get();
  }
  return nullptr;
}
template <class T, class W, int V, bool L>
struct PickFwd {
  static FwdKernel get() { return fwd_kernel<T, W, V, L>; }
};
template <class T, class W, int V, bool L>
struct PickBwd {
  // 16-bit rows of kMaxCols take 4 vectors on 512 threads; only fp32 rows need 8.
  static BwdKernel get() {
    if constexpr (V == 8 && sizeof(T) != 4) return nullptr;
    else return bwd_kernel<T, W, V, L>;
  }
};

// Bytes of one ring stage: K row tensors and J statistics per thread.
size_t stage_bytes(int vpt, int threads, int k, int j) {
  return size_t(threads) * (size_t(k) * size_t(vpt) * sizeof(uint4) + size_t(j) * sizeof(float));
}

// One CTA per row (fwd_kernel); `grid` is the grid's x size, launch_forward adds rows of it.
// narrow (opt-in, OPENDNN_NORM_FWD_NARROW=1; passes its tests, no faster in norm.json): rows of up to 512 vectors
// (16-bit hidden 4096) on 128 threads of 4 vectors instead of 256 of 2. Why: fwd_kernel takes
// 37-40 registers at 2 vectors (6 CTAs, 6 rows of loads, 48 KB in flight per SM) and 63-64 at 4
// (8 CTAs of 128: 8 rows, 64 KB), and at 8192x4096 the forward runs at 0.89 (RMS) and 0.80
// (LayerNorm, whose longer reduction keeps each row's loads waiting longer) of copy bandwidth,
// as if an SM had too few bytes in flight for the latency.
template <class T, class W>
struct PlanFwd {
  static cudaError_t run(const FwdArgs& a, bool narrow, Launch* l) {
    const int64_t vecs = (a.cols + vector_elems(a.x_type) - 1) / vector_elems(a.x_type);
    narrow = narrow && vecs > 128 && vecs <= 512;
    int vpt;
    shape_for(a.cols, a.x_type, narrow ? 128 : 256, vpt, l->threads);
    l->version = narrow ? 2 : 1;
    FwdKernel k = pick_kernel<T, PickFwd, W>(vpt, a.kind == Kind::LAYER);
    if (!k) return cudaErrorInvalidValue;
    l->kernel = reinterpret_cast<const void*>(k);
    l->grid = int(std::clamp<int64_t>(a.rows, 1, INT32_MAX));
    l->stages = 0;
    l->smem = 0;
    return cudaSuccess;
  }
};

template <class T, class W>
struct PlanBwd {
  static cudaError_t run(const BwdArgs& a, int sm_count, Launch* l) {
    int vpt;
    shape_for(a.cols, a.x_type, kThreads, vpt, l->threads);
    BwdKernel k = pick_kernel<T, PickBwd, W>(vpt, a.kind == Kind::LAYER);
    if (!k) return cudaErrorInvalidValue;
    l->kernel = reinterpret_cast<const void*>(k);
    size_launch(*l, stage_bytes(vpt, l->threads, 2, 2), a.rows, sm_count);
    return cudaSuccess;  // a failed occupancy query leaves a smaller, still valid grid
  }
};

// Backward v2 (bwd_rows_kernel): 2 vectors a thread up to 1024 vectors a row (16-bit hidden 8192,
// fp32 4096), else 4 (to 16-bit 16384, fp32 8192); wider fp32 rows take the ring kernel, whose
// 8 vectors a thread would not fit twice in registers. Slots fill 1024 threads (512 at 4 vectors,
// where a thread's two rows take 64 registers); one row of work per slot at least.
template <class T, class W>
struct PlanBwdV2 {
  static cudaError_t run(const BwdArgs& a, int sm_count, Launch* l) {
    const int64_t vecs = (a.cols + vector_elems(a.x_type) - 1) / vector_elems(a.x_type);
    const int vpt = vecs <= 2 * 512 ? 2 : vecs <= 4 * 512 ? 4 : 0;
    if (vpt == 0) return PlanBwd<T, W>::run(a, sm_count, l);
    const bool layer = a.kind == Kind::LAYER;
    BwdKernel k = vpt == 2 ? (layer ? bwd_rows_kernel<T, W, 2, true> : bwd_rows_kernel<T, W, 2, false>)
                           : (layer ? bwd_rows_kernel<T, W, 4, true> : bwd_rows_kernel<T, W, 4, false>);
    l->kernel = reinterpret_cast<const void*>(k);
    l->tpr = int(std::max<int64_t>(32, ((vecs + vpt - 1) / vpt + 31) / 32 * 32));
    l->slots = std::clamp((vpt == 2 ? 1024 : 512) / l->tpr, 1, kV2MaxSlots);
    l->version = 2;
    l->threads = l->slots * l->tpr;
    l->stages = 0;
    // dscale/dbias accumulators (2 planes of vpt vectors in fp32), the next row's x/dy, its statistics
    l->smem = size_t(l->threads) * (size_t(vpt) * size_t(vector_elems(a.x_type)) * 2 * sizeof(float) +
                                    size_t(vpt) * 2 * 16 + 2 * sizeof(float));
    cudaFuncAttributes fa{};
    cudaFuncGetAttributes(&fa, l->kernel);
    const int64_t needed = (a.rows + l->slots - 1) / l->slots;  // CTAs with a row for every slot
    l->grid = int(std::clamp<int64_t>(needed, 1, int64_t(sm_count) * resident_ctas(*l, fa)));
    return cudaSuccess;
  }
};

// Backward v3 (bwd_tma_kernel): one CTA per SM unless the teams' chunks would outgrow
// kV3MaxChunk rows; the shared memory left after the statistics is ring stages (up to 16, at least
// 2). Rows past kV3MaxVecs vectors, or too few stages, take the ring kernel (version 1).
template <class T, class W>
struct PlanBwdV3 {
  static cudaError_t run(const BwdArgs& a, int sm_count, Launch* l) {
    const int64_t vecs = a.cols / vector_elems(a.x_type);  // a row is a multiple of 16 bytes
    if (vecs > kV3MaxVecs) return PlanBwd<T, W>::run(a, sm_count, l);
    BwdKernel k = a.kind == Kind::LAYER ? bwd_tma_kernel<T, W, true> : bwd_tma_kernel<T, W, false>;
    const int tpr = int((vecs + 31) / 32 * 32);
    V3Layout lay{a.cols * int64_t(sizeof(T)), 0, std::clamp(1024 / tpr, 1, kV3MaxSlots), 0};
    int64_t grid = std::clamp<int64_t>((a.rows + lay.slots - 1) / lay.slots, 1, sm_count);
    grid = std::max(grid, (a.rows + lay.slots * kV3MaxChunk - 1) / (lay.slots * kV3MaxChunk));
    lay.cap = (a.rows + grid * lay.slots - 1) / (grid * lay.slots);
    cudaFuncAttributes fa{};
    int dev = 0, optin = 0;
    if (cudaFuncGetAttributes(&fa, k) != cudaSuccess || cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) != cudaSuccess)
      return PlanBwd<T, W>::run(a, sm_count, l);
    const int64_t budget = int64_t(optin) - int64_t(fa.sharedSizeBytes) - lay.bytes();  // lay.bytes(): statistics only yet
    lay.stages = std::min<int64_t>(kV3MaxStages, budget / (lay.slots * 2 * lay.row_bytes));
    if (lay.stages < 2 || grid > INT32_MAX ||
        cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, optin - int(fa.sharedSizeBytes)) != cudaSuccess)
      return PlanBwd<T, W>::run(a, sm_count, l);
    l->kernel = reinterpret_cast<const void*>(k);
    l->version = 3;
    l->threads = int(lay.slots) * tpr;
    l->stages = int(lay.stages);
    l->smem = size_t(lay.bytes());
    l->grid = int(grid);
    l->tpr = tpr;
    return cudaSuccess;
  }
};

// reduce_partials for the weights' type.
// Launched as a programmatic dependent of the backward kernel, so its launch latency overlaps
// the backward's last rows.
template <class W>
cudaError_t reduce_typed(const BwdArgs& a, const float* partial, int parts, cudaStream_t st) {
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(unsigned((a.cols + 31) / 32));
  cfg.blockDim = dim3(32, kReduceWarps);
  cfg.stream = st;
  cudaLaunchAttribute attr{};
  attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr.val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = &attr;
  cfg.numAttrs = 1;
  return cudaLaunchKernelEx(&cfg, reduce_partials<W>, partial, parts, int64_t(a.cols), static_cast<W*>(a.dscale),
                            static_cast<W*>(a.dbias));
}

template <template <class, class> class F, class... Args>
cudaError_t dispatch(DataType xt, DataType wt, Args&&... args) {
  auto with_w = [&](auto x_tag) -> cudaError_t {
    using X = decltype(x_tag);
    switch (wt) {
      case DataType::FLOAT: return F<X, float>::run(args...);
      case DataType::HALF: return F<X, __half>::run(args...);
      case DataType::BFLOAT16: return F<X, __nv_bfloat16>::run(args...);
      default: return cudaErrorInvalidValue;
    }
  };
  switch (xt) {
    case DataType::FLOAT: return with_w(float{});
    case DataType::HALF: return with_w(__half{});
    case DataType::BFLOAT16: return with_w(__nv_bfloat16{});
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace

bool supported_type(DataType t) { return t == DataType::FLOAT || t == DataType::HALF || t == DataType::BFLOAT16; }

Launch plan_forward(const FwdArgs& a, bool narrow) {
  Launch l;
  if (dispatch<PlanFwd>(a.x_type, a.w_type, a, narrow, &l) != cudaSuccess) l.kernel = nullptr;
  return l;
}

Launch plan_backward(const BwdArgs& a, int sm_count, int version) {
  Launch l;
  const cudaError_t e = version == 3   ? dispatch<PlanBwdV3>(a.x_type, a.w_type, a, sm_count, &l)
                        : version == 2 ? dispatch<PlanBwdV2>(a.x_type, a.w_type, a, sm_count, &l)
                                       : dispatch<PlanBwd>(a.x_type, a.w_type, a, sm_count, &l);
  if (e != cudaSuccess) l.kernel = nullptr;
  return l;
}

int64_t backward_workspace_bytes(const BwdArgs& a, const Launch& l) {
  return int64_t(std::max(l.grid, 1)) * 2 * a.cols * int64_t(sizeof(float));
}

// The kernels move 16-byte vectors; rows are a multiple of 16 bytes, so only the bases can be off.
static bool aligned16(std::initializer_list<const void*> ps) {
  for (const void* p : ps)
    if (reinterpret_cast<uintptr_t>(p) % 16 != 0) return false;
  return true;
}

const char* launch_forward(const FwdArgs& a, const Launch& l, void* stream) {
  if (!l.kernel) return "no kernel for this norm";
  if (!aligned16({a.x, a.y, a.scale, a.bias})) return "X, Y, scale and bias must be 16-byte aligned";
  if (a.rows == 0) return nullptr;
  auto k = reinterpret_cast<FwdKernel>(const_cast<void*>(l.kernel));
  const dim3 grid(unsigned(l.grid), unsigned((a.rows + l.grid - 1) / l.grid));
  k<<<grid, l.threads, 0, static_cast<cudaStream_t>(stream)>>>(a);
  cudaError_t e = cudaGetLastError();
  return e == cudaSuccess ? nullptr : cudaGetErrorString(e);
}

const char* launch_backward(const BwdArgs& a, const Launch& l, void* workspace, void* stream) {
  if (!l.kernel) return "no kernel for this norm";
  if (!aligned16({a.x, a.dy, a.dx, a.scale, workspace})) return "X, DY, DX, scale and the workspace must be 16-byte aligned";
  if (a.cols == 0) return nullptr;
  cudaStream_t st = static_cast<cudaStream_t>(stream);
  float* partial = static_cast<float*>(workspace);
  auto k = reinterpret_cast<BwdKernel>(const_cast<void*>(l.kernel));
  k<<<l.grid, l.threads, l.smem, st>>>(a, partial, l.version == 2 ? l.tpr : l.stages);
  cudaError_t e = cudaGetLastError();
  if (e == cudaSuccess) {
    switch (a.w_type) {
      case DataType::FLOAT: e = reduce_typed<float>(a, partial, l.grid, st); break;
      case DataType::HALF: e = reduce_typed<__half>(a, partial, l.grid, st); break;
      case DataType::BFLOAT16: e = reduce_typed<__nv_bfloat16>(a, partial, l.grid, st); break;
      default: e = cudaErrorInvalidValue;
    }
  }
  return e == cudaSuccess ? nullptr : cudaGetErrorString(e);
}

}  // namespace opendnn::cuda::norm
