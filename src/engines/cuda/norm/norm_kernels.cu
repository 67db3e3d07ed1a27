// SPDX-License-Identifier: Apache-2.0
// RMSNorm / LayerNorm on Hopper. Memory-bound: each row is read once into registers with 16-byte
// loads, reduced with warp shuffles, and written once. The backward pass keeps per-thread column
// partials of dscale/dbias in registers across a grid-stride loop over rows and reduces the
// per-CTA partials in a second, fixed-order kernel, so results are bitwise deterministic.
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

// N consecutive weights (scale or bias) at p as floats, with 16-byte loads: p is 16-byte aligned
// because rows are a multiple of 16 bytes and N elements of the row type fill 16 bytes.
template <class W, int N>
__device__ __forceinline__ void load_weights(const W* p, float (&out)[N]) {
  constexpr int per_vec = 16 / sizeof(W);
  static_assert(N % per_vec == 0 || per_vec % N == 0, "weight vectors must tile");
  if constexpr (N >= per_vec) {
#pragma unroll
    for (int v = 0; v < N / per_vec; ++v) {
      uint4 raw = __ldg(reinterpret_cast<const uint4*>(p) + v);
      const W* e = reinterpret_cast<const W*>(&raw);
#pragma unroll
      for (int k = 0; k < per_vec; ++k) out[v * per_vec + k] = to_f(e[k]);
    }
  } else {
#pragma unroll
    for (int k = 0; k < N; ++k) out[k] = to_f(p[k]);
  }
}

// A row slice owned by one thread: VPT vectors of 16 bytes, at columns (i*blockDim + tid)*N.
template <class T, int VPT>
struct RowSlice {
  static constexpr int N = 16 / sizeof(T);
  float v[VPT][N];
  bool ok[VPT];

  __device__ __forceinline__ void load(const T* row, int64_t cols) {
    uint4 raw[VPT];
    fetch(row, cols, raw);
    unpack(raw, cols);
  }
  // Issues the 16-byte loads only; unpack() converts them once they are needed.
  __device__ __forceinline__ static void fetch(const T* row, int64_t cols, uint4 (&raw)[VPT]) {
#pragma unroll
    for (int i = 0; i < VPT; ++i) {
      int64_t c = (int64_t(i) * blockDim.x + threadIdx.x) * N;
      raw[i] = c < cols ? *reinterpret_cast<const uint4*>(row + c) : make_uint4(0, 0, 0, 0);
    }
  }
  __device__ __forceinline__ void unpack(const uint4 (&raw)[VPT], int64_t cols) {
#pragma unroll
    for (int i = 0; i < VPT; ++i) {
      ok[i] = col(i) < cols;
      const T* e = reinterpret_cast<const T*>(&raw[i]);
#pragma unroll
      for (int j = 0; j < N; ++j) v[i][j] = to_f(e[j]);
    }
  }
  __device__ __forceinline__ int64_t col(int i) const { return (int64_t(i) * blockDim.x + threadIdx.x) * N; }
};

template <class T, class W, int VPT, bool LAYER>
__global__ void __launch_bounds__(512) fwd_kernel(FwdArgs a) {
  __shared__ float red[32];
  using S = RowSlice<T, VPT>;
  constexpr int N = S::N;
  const int64_t row = blockIdx.x;
  const T* x = static_cast<const T*>(a.x) + row * a.cols;
  S s;
  s.load(x, a.cols);
  const float inv_n = 1.f / float(a.cols);

  // LayerNorm: sum and sum of squares in one reduction, of values shifted by the row's first
  // element so that E[d^2] - E[d]^2 does not cancel catastrophically for rows with a large mean.
  float mean = 0.f, rstd;
  if constexpr (LAYER) {
    const float shift = to_f(x[0]);
    float2 acc = make_float2(0.f, 0.f);
#pragma unroll
    for (int i = 0; i < VPT; ++i)
      if (s.ok[i])
#pragma unroll
        for (int j = 0; j < N; ++j) {
          float d = s.v[i][j] - shift;
          acc.x += d;
          acc.y += d * d;
        }
    __shared__ float2 red2[32];
    acc = block_sum2(acc, red2);
    const float md = acc.x * inv_n;
    mean = shift + md;
    rstd = rsqrtf(fmaxf(acc.y * inv_n - md * md, 0.f) + a.epsilon);
  } else {
    float sq = 0.f;
#pragma unroll
    for (int i = 0; i < VPT; ++i)
      if (s.ok[i])
#pragma unroll
        for (int j = 0; j < N; ++j) sq += s.v[i][j] * s.v[i][j];
    rstd = rsqrtf(block_sum(sq, red) * inv_n + a.epsilon);
  }
  if (threadIdx.x == 0) {
    if (a.inv_variance) a.inv_variance[row] = rstd;
    if (LAYER && a.mean) a.mean[row] = mean;
  }

  const W* scale = static_cast<const W*>(a.scale);
  const W* bias = static_cast<const W*>(a.bias);
  T* y = static_cast<T*>(a.y) + row * a.cols;
#pragma unroll
  for (int i = 0; i < VPT; ++i) {
    if (!s.ok[i]) continue;
    const int64_t c = s.col(i);
    uint4 out;
    T* o = reinterpret_cast<T*>(&out);
    float w[N], b[N];
    load_weights<W, N>(scale + c, w);
    if (bias) load_weights<W, N>(bias + c, b);
#pragma unroll
    for (int j = 0; j < N; ++j) {
      float r = (s.v[i][j] - mean) * rstd * w[j];
      if (bias) r += b[j];
      o[j] = from_f<T>(r);
    }
    *reinterpret_cast<uint4*>(y + c) = out;
  }
}

// 16-byte and 4-byte asynchronous copies global -> shared (cp.async): the loads of the next rows
// are in flight without holding registers, so a CTA keeps tens of KB outstanding per SM.
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

inline constexpr int kBwdThreads = 512;
inline constexpr int kMaxStages = 8;

// Backward: a persistent grid; each CTA walks rows blockIdx.x, +gridDim.x, ... Thread t owns the
// 16-byte vectors at columns (i*blockDim + t)*N of every row, so
//  * the row's X and DY arrive through a ring of `stages` shared-memory buffers filled with
//    cp.async: each thread copies exactly the vectors (and the row's mean/rstd) it later reads, so
//    the ring needs no barrier; `stages - 1` rows are in flight while one is computed;
//  * x and dy stay packed in shared memory and are converted to fp32 on the fly (read twice: once
//    for the row sums, once for dx), which keeps the register count low;
//  * dscale/dbias partials accumulate in registers across all of the CTA's rows and are written
//    once as one fp32 row pair per CTA ([gridDim][2][cols]); reduce_partials sums them in a fixed
//    order, so results are bitwise deterministic.
// Ring layout: [stage][x|dy][VPT][blockDim] uint4 (conflict-free), then [stage][mean|rstd][blockDim] floats.
template <class T, class W, int VPT, bool LAYER>
__global__ void __launch_bounds__(kBwdThreads, 1) bwd_kernel(BwdArgs a, float* partial, int stages) {
  extern __shared__ uint4 ring[];
  constexpr int N = 16 / sizeof(T);
  constexpr int WW = N * int(sizeof(W)) / 4;  // 32-bit words of one vector's weights
  const int nt = blockDim.x, tid = threadIdx.x;
  const int64_t cols = a.cols;
  const T* X = static_cast<const T*>(a.x);
  const T* DY = static_cast<const T*>(a.dy);
  float* stats = reinterpret_cast<float*>(ring + int64_t(stages) * 2 * VPT * nt);

  bool ok[VPT];
  uint32_t wr[VPT][WW];  // this thread's scale, packed
  float ds[VPT][N], db[VPT][N];
#pragma unroll
  for (int i = 0; i < VPT; ++i) {
    const int64_t c = (int64_t(i) * nt + tid) * N;
    ok[i] = c < cols;
    const uint32_t* wp = reinterpret_cast<const uint32_t*>(static_cast<const W*>(a.scale) + c);
#pragma unroll
    for (int k = 0; k < WW; ++k) wr[i][k] = ok[i] ? __ldg(wp + k) : 0u;
#pragma unroll
    for (int j = 0; j < N; ++j) ds[i][j] = db[i][j] = 0.f;
  }
  auto weight = [&](int i, int j) { return to_f(reinterpret_cast<const W*>(wr[i])[j]); };
  auto vec = [&](int s, int t, int i) -> uint4* { return ring + ((int64_t(s) * 2 + t) * VPT + i) * nt + tid; };
  auto issue = [&](int64_t row, int s) {
    if (row < a.rows) {
#pragma unroll
      for (int i = 0; i < VPT; ++i)
        if (ok[i]) {
          const int64_t off = row * cols + (int64_t(i) * nt + tid) * N;
          cp_async16(vec(s, 0, i), X + off);
          cp_async16(vec(s, 1, i), DY + off);
        }
      if (LAYER) cp_async4(stats + (int64_t(s) * 2) * nt + tid, a.mean + row);
      cp_async4(stats + (int64_t(s) * 2 + 1) * nt + tid, a.inv_variance + row);
    }
    cp_async_commit();  // empty groups past the last row keep the group count uniform
  };

  __shared__ float2 red2[32];
  const float inv_n = 1.f / float(cols);
  const int64_t step = gridDim.x;
  int64_t row = blockIdx.x;
  for (int s = 0; s < stages - 1; ++s) issue(row + s * step, s);
  for (int s = 0; row < a.rows; row += step, s = s + 1 == stages ? 0 : s + 1) {
    // The buffer refilled here was read by this same thread in the previous iteration, and those
    // reads fed dx's stores already issued, so they are complete.
    issue(row + int64_t(stages - 1) * step, s == 0 ? stages - 1 : s - 1);
    cp_async_wait_dyn(stages - 1);
    const float mean = LAYER ? stats[(int64_t(s) * 2) * nt + tid] : 0.f;
    const float rstd = stats[(int64_t(s) * 2 + 1) * nt + tid];

    float2 sums = make_float2(0.f, 0.f);  // (sum g*xhat, sum g), g = dy*scale
#pragma unroll
    for (int i = 0; i < VPT; ++i) {
      if (!ok[i]) continue;
      const uint4 xr = *vec(s, 0, i), dr = *vec(s, 1, i);
      const T* xe = reinterpret_cast<const T*>(&xr);
      const T* de = reinterpret_cast<const T*>(&dr);
#pragma unroll
      for (int j = 0; j < N; ++j) {
        const float xhat = (to_f(xe[j]) - mean) * rstd, d = to_f(de[j]);
        const float g = d * weight(i, j);
        sums.x += g * xhat;
        sums.y += g;
        ds[i][j] += d * xhat;
        db[i][j] += d;
      }
    }
    sums = block_sum2(sums, red2);
    const float mean_gx = sums.x * inv_n;
    const float mean_g = LAYER ? sums.y * inv_n : 0.f;
    T* dx = static_cast<T*>(a.dx) + row * cols;
#pragma unroll
    for (int i = 0; i < VPT; ++i) {
      if (!ok[i]) continue;
      const uint4 xr = *vec(s, 0, i), dr = *vec(s, 1, i);
      const T* xe = reinterpret_cast<const T*>(&xr);
      const T* de = reinterpret_cast<const T*>(&dr);
      uint4 out;
      T* o = reinterpret_cast<T*>(&out);
#pragma unroll
      for (int j = 0; j < N; ++j) {
        const float xhat = (to_f(xe[j]) - mean) * rstd;
        o[j] = from_f<T>(rstd * (to_f(de[j]) * weight(i, j) - mean_g - xhat * mean_gx));
      }
      *reinterpret_cast<uint4*>(dx + (int64_t(i) * nt + tid) * N) = out;
    }
  }
  cp_async_wait<0>();  // nothing may land in shared memory after the CTA exits

  float* out = partial + int64_t(blockIdx.x) * 2 * cols;
#pragma unroll
  for (int i = 0; i < VPT; ++i) {
    if (!ok[i]) continue;
    const int64_t c = (int64_t(i) * nt + tid) * N;
#pragma unroll
    for (int j = 0; j < N; j += 4) {
      *reinterpret_cast<float4*>(out + c + j) = make_float4(ds[i][j], ds[i][j + 1], ds[i][j + 2], ds[i][j + 3]);
      if (a.dbias)
        *reinterpret_cast<float4*>(out + cols + c + j) = make_float4(db[i][j], db[i][j + 1], db[i][j + 2], db[i][j + 3]);
    }
  }
}

// Sums the per-CTA partials column by column in a fixed order (deterministic): warp y of a
// 32x8 block sums parts y, y+8, ... of 32 adjacent columns, then the 8 sums are added in order.
template <class W>
__global__ void __launch_bounds__(256) reduce_partials(const float* partial, int parts, int64_t cols, W* dscale, W* dbias) {
  __shared__ float red[2][8][33];
  const int64_t c = int64_t(blockIdx.x) * 32 + threadIdx.x;
  float s = 0.f, b = 0.f;
  if (c < cols)
    for (int p = threadIdx.y; p < parts; p += 8) {
      s += partial[int64_t(p) * 2 * cols + c];
      if (dbias) b += partial[int64_t(p) * 2 * cols + cols + c];
    }
  red[0][threadIdx.y][threadIdx.x] = s;
  red[1][threadIdx.y][threadIdx.x] = b;
  __syncthreads();
  if (threadIdx.y != 0 || c >= cols) return;
  s = b = 0.f;
  for (int k = 0; k < 8; ++k) {
    s += red[0][k][threadIdx.x];
    b += red[1][k][threadIdx.x];
  }
  dscale[c] = from_f<W>(s);
  if (dbias) dbias[c] = from_f<W>(b);
}

int vector_elems(DataType t) { return t == DataType::FLOAT ? 4 : 8; }

// Vectors per thread and threads per CTA for a row of `cols` elements.
// At most 512 threads and 8 vectors each: 16k columns at most (kMaxCols).
void shape_for(int64_t cols, DataType t, int target_threads, int& vpt, int& threads, int max_vpt = 8) {
  int64_t vecs = (cols + vector_elems(t) - 1) / vector_elems(t);
  for (vpt = 1; vpt < max_vpt; vpt *= 2)
    if ((vecs + vpt - 1) / vpt <= target_threads) break;
  int64_t th = (vecs + vpt - 1) / vpt;
  threads = int(std::min<int64_t>(512, std::max<int64_t>(32, (th + 31) / 32 * 32)));
}

template <class T, class W>
cudaError_t fwd_typed(const FwdArgs& a, cudaStream_t st) {
  int vpt, threads;
  shape_for(a.cols, a.x_type, 256, vpt, threads);
  dim3 grid{unsigned(a.rows)}, block{unsigned(threads)};
  bool layer = a.kind == Kind::LAYER;
#define OPENDNN_FWD(V)                                                         \
  case V:                                                                      \
    if (layer) fwd_kernel<T, W, V, true><<<grid, block, 0, st>>>(a);           \
    else fwd_kernel<T, W, V, false><<<grid, block, 0, st>>>(a);                \
    break;
  switch (vpt) { OPENDNN_FWD(1) OPENDNN_FWD(2) OPENDNN_FWD(4) OPENDNN_FWD(8) }
#undef OPENDNN_FWD
  return cudaGetLastError();
}

using BwdKernel = void (*)(BwdArgs, float*, int);

// The backward launch for a shape: kernel, block size, ring depth, dynamic shared memory, grid.
struct BwdLaunch {
  BwdKernel kernel = nullptr;
  int threads = 0, stages = 0, grid = 0;
  size_t smem = 0;
};

// About 220 KB of ring per SM (the most a CTA may take, less the static reduction buffers): up to kMaxStages rows, at least one (fp32 rows of 16k elements
// take 128 KB each: those run unpipelined, one row in flight per SM).
constexpr size_t kRingBudget = 220 * 1024;

template <class T, class W>
BwdLaunch bwd_launch_for(const BwdArgs& a, int sm_count) {
  BwdLaunch l;
  int vpt;
  shape_for(a.cols, a.x_type, kBwdThreads, vpt, l.threads);
  const size_t stage = size_t(l.threads) * (size_t(vpt) * 2 * sizeof(uint4) + 2 * sizeof(float));
  l.stages = int(std::clamp<size_t>(kRingBudget / stage, 1, kMaxStages));
  l.smem = stage * size_t(l.stages);
  const bool layer = a.kind == Kind::LAYER;
  switch (vpt) {
#define OPENDNN_BWD(V) \
  case V: l.kernel = layer ? bwd_kernel<T, W, V, true> : bwd_kernel<T, W, V, false>; break;
    OPENDNN_BWD(1) OPENDNN_BWD(2) OPENDNN_BWD(4)
#undef OPENDNN_BWD
    case 8:  // only fp32 rows need 8 vectors per thread (kMaxCols / 512 threads / 4 per vector)
      if constexpr (sizeof(T) == 4) l.kernel = layer ? bwd_kernel<T, W, 8, true> : bwd_kernel<T, W, 8, false>;
      break;
  }
  if (!l.kernel) return l;
  if (l.smem > 48 * 1024) cudaFuncSetAttribute(l.kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(l.smem));
  int per_sm = 0;
  if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, l.kernel, l.threads, l.smem) != cudaSuccess || per_sm < 1)
    per_sm = 1;
  l.grid = int(std::max<int64_t>(1, std::min<int64_t>(a.rows, int64_t(sm_count) * per_sm)));
  return l;
}

template <class T, class W>
cudaError_t bwd_typed(const BwdArgs& a, void* ws, int sm_count, cudaStream_t st) {
  const BwdLaunch l = bwd_launch_for<T, W>(a, sm_count);
  if (!l.kernel) return cudaErrorInvalidValue;
  float* partial = static_cast<float*>(ws);
  l.kernel<<<l.grid, l.threads, l.smem, st>>>(a, partial, l.stages);
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) return e;
  reduce_partials<W><<<unsigned((a.cols + 31) / 32), dim3(32, 8), 0, st>>>(partial, l.grid, a.cols, static_cast<W*>(a.dscale),
                                                                           static_cast<W*>(a.dbias));
  return cudaGetLastError();
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

template <class T, class W>
struct Fwd {
  static cudaError_t run(const FwdArgs& a, cudaStream_t st) { return fwd_typed<T, W>(a, st); }
};
template <class T, class W>
struct Bwd {
  static cudaError_t run(const BwdArgs& a, void* ws, int sm, cudaStream_t st) { return bwd_typed<T, W>(a, ws, sm, st); }
};
template <class T, class W>
struct BwdGrid {
  static cudaError_t run(const BwdArgs& a, int sm, int* grid) {
    *grid = bwd_launch_for<T, W>(a, sm).grid;
    return cudaSuccess;
  }
};

}  // namespace

bool supported_type(DataType t) { return t == DataType::FLOAT || t == DataType::HALF || t == DataType::BFLOAT16; }

int64_t backward_workspace_bytes(const BwdArgs& a, int sm_count) {
  int grid = 1;
  if (dispatch<BwdGrid>(a.x_type, a.w_type, a, sm_count, &grid) != cudaSuccess) grid = int(std::min<int64_t>(a.rows, 4 * sm_count));
  return int64_t(grid) * 2 * a.cols * int64_t(sizeof(float));
}

// The kernels move 16-byte vectors; rows are a multiple of 16 bytes, so only the bases can be off.
static bool aligned16(std::initializer_list<const void*> ps) {
  for (const void* p : ps)
    if (reinterpret_cast<uintptr_t>(p) % 16 != 0) return false;
  return true;
}

const char* launch_forward(const FwdArgs& a, void* stream) {
  if (!aligned16({a.x, a.y, a.scale, a.bias})) return "X, Y, scale and bias must be 16-byte aligned";
  cudaError_t e = dispatch<Fwd>(a.x_type, a.w_type, a, static_cast<cudaStream_t>(stream));
  return e == cudaSuccess ? nullptr : cudaGetErrorString(e);
}

const char* launch_backward(const BwdArgs& a, void* workspace, int sm_count, void* stream) {
  if (!aligned16({a.x, a.dy, a.dx, a.scale, workspace})) return "X, DY, DX, scale and the workspace must be 16-byte aligned";
  cudaError_t e = dispatch<Bwd>(a.x_type, a.w_type, a, workspace, sm_count, static_cast<cudaStream_t>(stream));
  return e == cudaSuccess ? nullptr : cudaGetErrorString(e);
}

}  // namespace opendnn::cuda::norm
