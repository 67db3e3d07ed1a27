// SPDX-License-Identifier: Apache-2.0
// RMSNorm / LayerNorm on Hopper. Memory-bound: each row is read once into registers with 16-byte
// loads, reduced with warp shuffles, and written once. The backward pass keeps per-thread column
// partials of dscale/dbias in registers across a grid-stride loop over rows and reduces the
// per-CTA partials in a second, fixed-order kernel, so results are bitwise deterministic.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>

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

// Backward: dx per row, and per-CTA column partials of dscale (and dbias) written to `partial`
// ([gridDim.x][2][cols] fp32). Each thread owns the same columns in every row, so the partials
// accumulate in shared memory without atomics; x and dy stay in registers for the row. The
// accumulators are laid out element-major ([2][N][VPT][blockDim]) so a warp touches 32 consecutive
// words: the column-major order would put 8 threads on each bank.
// Up to 64 elements per thread (x and dy in registers, plus the next row's raw loads) need the
// register budget of 256-thread blocks; bwd_kernel_for never picks more threads (kMaxCols).
template <class T, class W, int VPT, bool LAYER>
__global__ void __launch_bounds__(256) bwd_kernel(BwdArgs a, float* partial) {
  extern __shared__ float acc[];
  using S = RowSlice<T, VPT>;
  constexpr int N = S::N;
  const W* scale = static_cast<const W*>(a.scale);
  const float inv_n = 1.f / float(a.cols);
  const int per_j = VPT * blockDim.x;  // stride between element indices j
  float* acc_s = acc;
  float* acc_b = acc + N * per_j;
  auto slot = [&](int i, int j) { return j * per_j + i * int(blockDim.x) + int(threadIdx.x); };
#pragma unroll
  for (int i = 0; i < VPT; ++i)
#pragma unroll
    for (int j = 0; j < N; ++j) acc_s[slot(i, j)] = acc_b[slot(i, j)] = 0.f;

  __shared__ float2 red2[32];
  uint4 nx[VPT], ndy[VPT];
  const T* X = static_cast<const T*>(a.x);
  const T* DY = static_cast<const T*>(a.dy);
  if (blockIdx.x < a.rows) {
    S::fetch(X + int64_t(blockIdx.x) * a.cols, a.cols, nx);
    S::fetch(DY + int64_t(blockIdx.x) * a.cols, a.cols, ndy);
  }
  for (int64_t row = blockIdx.x; row < a.rows; row += gridDim.x) {
    S x, dy;
    x.unpack(nx, a.cols);
    dy.unpack(ndy, a.cols);
    // The next row's loads are in flight while this row is reduced and written.
    if (row + gridDim.x < a.rows) {
      S::fetch(X + (row + gridDim.x) * a.cols, a.cols, nx);
      S::fetch(DY + (row + gridDim.x) * a.cols, a.cols, ndy);
    }
    const float rstd = a.inv_variance[row];
    const float mean = LAYER ? a.mean[row] : 0.f;
    float2 sums = make_float2(0.f, 0.f);  // (sum g*xhat, sum g)
#pragma unroll
    for (int i = 0; i < VPT; ++i) {
      if (!x.ok[i]) continue;
      float w[N];
      load_weights<W, N>(scale + x.col(i), w);
#pragma unroll
      for (int j = 0; j < N; ++j) {
        float xhat = (x.v[i][j] - mean) * rstd;
        float g = dy.v[i][j] * w[j];
        sums.x += g * xhat;
        sums.y += g;
        acc_s[slot(i, j)] += dy.v[i][j] * xhat;
        acc_b[slot(i, j)] += dy.v[i][j];
      }
    }
    sums = block_sum2(sums, red2);
    const float mean_gx = sums.x * inv_n;
    const float mean_g = LAYER ? sums.y * inv_n : 0.f;
    T* dx = static_cast<T*>(a.dx) + row * a.cols;
#pragma unroll
    for (int i = 0; i < VPT; ++i) {
      if (!x.ok[i]) continue;
      const int64_t c = x.col(i);
      uint4 out;
      T* o = reinterpret_cast<T*>(&out);
      float w[N];
      load_weights<W, N>(scale + c, w);
#pragma unroll
      for (int j = 0; j < N; ++j) {
        float xhat = (x.v[i][j] - mean) * rstd;
        float g = dy.v[i][j] * w[j];
        o[j] = from_f<T>(rstd * (g - mean_g - xhat * mean_gx));
      }
      *reinterpret_cast<uint4*>(dx + c) = out;
    }
  }
  // Each thread reads back only its own accumulators: no barrier needed.
  float* out = partial + int64_t(blockIdx.x) * 2 * a.cols;
#pragma unroll
  for (int i = 0; i < VPT; ++i) {
    const int64_t c = (int64_t(i) * blockDim.x + threadIdx.x) * N;
    if (c >= a.cols) continue;
#pragma unroll
    for (int j = 0; j < N; ++j) {
      out[c + j] = acc_s[slot(i, j)];
      out[a.cols + c + j] = acc_b[slot(i, j)];
    }
  }
}

// Sums the per-CTA partials column by column in CTA order (deterministic).
template <class W>
__global__ void reduce_partials(const float* partial, int parts, int64_t cols, W* dscale, W* dbias) {
  int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= cols) return;
  float s = 0.f, b = 0.f;
  for (int p = 0; p < parts; ++p) {
    s += partial[int64_t(p) * 2 * cols + c];
    b += partial[int64_t(p) * 2 * cols + cols + c];
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

using BwdKernel = void (*)(BwdArgs, float*);

// The backward kernel for a shape, its block size and its dynamic shared memory.
template <class T, class W>
BwdKernel bwd_kernel_for(const BwdArgs& a, int& threads, size_t& smem) {
  int vpt;
  shape_for(a.cols, a.x_type, 256, vpt, threads, a.x_type == DataType::FLOAT ? 16 : 8);
  smem = size_t(2) * size_t(vpt) * size_t(threads) * size_t(vector_elems(a.x_type)) * sizeof(float);
  const bool layer = a.kind == Kind::LAYER;
  switch (vpt) {
#define OPENDNN_BWD(V) \
  case V: return layer ? bwd_kernel<T, W, V, true> : bwd_kernel<T, W, V, false>;
    OPENDNN_BWD(1) OPENDNN_BWD(2) OPENDNN_BWD(4) OPENDNN_BWD(8)
    case 16:
      if constexpr (sizeof(T) == 4) return layer ? bwd_kernel<T, W, 16, true> : bwd_kernel<T, W, 16, false>;
      return nullptr;
#undef OPENDNN_BWD
  }
  return nullptr;
}

// As many CTAs as fit on the GPU at once (each streams rows with a grid stride), so every SM keeps
// several rows in flight; never more CTAs than rows.
template <class T, class W>
int bwd_grid_typed(const BwdArgs& a, int sm_count) {
  int threads;
  size_t smem;
  BwdKernel k = bwd_kernel_for<T, W>(a, threads, smem);
  if (smem > 48 * 1024) cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem));
  int per_sm = 0;
  if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, k, threads, smem) != cudaSuccess || per_sm < 1) per_sm = 1;
  return int(std::max<int64_t>(1, std::min<int64_t>(a.rows, int64_t(sm_count) * per_sm)));
}

template <class T, class W>
cudaError_t bwd_typed(const BwdArgs& a, void* ws, int sm_count, cudaStream_t st) {
  int threads;
  size_t smem;
  BwdKernel k = bwd_kernel_for<T, W>(a, threads, smem);
  const int grid = bwd_grid_typed<T, W>(a, sm_count);
  float* partial = static_cast<float*>(ws);
  k<<<grid, threads, smem, st>>>(a, partial);
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) return e;
  unsigned rb = unsigned((a.cols + 255) / 256);
  reduce_partials<W><<<rb, 256, 0, st>>>(partial, grid, a.cols, static_cast<W*>(a.dscale), static_cast<W*>(a.dbias));
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
    *grid = bwd_grid_typed<T, W>(a, sm);
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

const char* launch_forward(const FwdArgs& a, void* stream) {
  cudaError_t e = dispatch<Fwd>(a.x_type, a.w_type, a, static_cast<cudaStream_t>(stream));
  return e == cudaSuccess ? nullptr : cudaGetErrorString(e);
}

const char* launch_backward(const BwdArgs& a, void* workspace, int sm_count, void* stream) {
  cudaError_t e = dispatch<Bwd>(a.x_type, a.w_type, a, workspace, sm_count, static_cast<cudaStream_t>(stream));
  return e == cudaSuccess ? nullptr : cudaGetErrorString(e);
}

}  // namespace opendnn::cuda::norm
