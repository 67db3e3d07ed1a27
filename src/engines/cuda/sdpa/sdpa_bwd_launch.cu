// SPDX-License-Identifier: Apache-2.0
// SDPA backward: the preprocess kernel (D = rowsum(dO * O)) and the dispatch to the per-head-dim
// dK/dV and dQ kernels.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "engines/cuda/sdpa/sdpa_bwd_kernels.h"

namespace opendnn::cuda::sdpa {
namespace {

constexpr int kRowsPerCta = 8;  // one warp per query row

__device__ __forceinline__ float to_f(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ __forceinline__ float to_f(__half x) { return __half2float(x); }

// delta[(b*Hq + h)*Sq + i] = sum_d dO[b,h,i,d] * O[b,h,i,d]; rows past the sequence get 0. Each lane
// sums a fixed set of columns and the warp reduces in a fixed tree: bitwise reproducible.
template <class T>
__global__ void __launch_bounds__(32 * kRowsPerCta) delta_kernel(const BwdProblem a, float* __restrict__ delta) {
  const Problem& p = a.p;
  const int64_t b = blockIdx.z, h = blockIdx.y;
  const int64_t i = int64_t(blockIdx.x) * kRowsPerCta + threadIdx.x / 32;
  const int lane = int(threadIdx.x) % 32;
  if (i >= p.sq) return;
  float acc = 0.f;
  if (i < p.len_q(b)) {
    const T* o = static_cast<const T*>(p.o.ptr) + p.base(p.o, b, true) + h * p.o.stride[1] + i * p.o.stride[2];
    const T* d = static_cast<const T*>(a.dout.ptr) + p.base(a.dout, b, true) + h * a.dout.stride[1] + i * a.dout.stride[2];
    for (int64_t c = lane; c < p.d_v; c += 32) acc += to_f(o[c]) * to_f(d[c]);
  }
  for (int s = 16; s > 0; s >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, s);
  if (lane == 0) delta[(b * p.hq + h) * p.sq + i] = acc;
}

// dsink[h] = -sum over b and i < len_q(b) of exp(sink_h - Stats_{b,h,i}) D_{b,h,i}: one CTA per query head,
// each thread a fixed stride of rows, then a fixed tree: bitwise reproducible.
constexpr int kSinkThreads = 256;
__global__ void __launch_bounds__(kSinkThreads) dsink_kernel(const BwdProblem a, const float* __restrict__ delta) {
  const Problem& p = a.p;
  const int64_t h = blockIdx.x;
  const float sink = p.sink[h];
  float acc = 0.f;
  for (int64_t b = 0; b < p.b; ++b) {
    const int64_t n = p.len_q(b);
    const float* lse = p.lse + p.lse_base(b) + h * p.lse_stride[1];
    for (int64_t i = threadIdx.x; i < n; i += kSinkThreads)
      acc += __expf(sink - lse[i * p.lse_stride[2]]) * delta[(b * p.hq + h) * p.sq + i];
  }
  __shared__ float red[kSinkThreads];
  red[threadIdx.x] = acc;
  __syncthreads();
  for (int s = kSinkThreads / 2; s > 0; s >>= 1) {
    if (int(threadIdx.x) < s) red[threadIdx.x] += red[threadIdx.x + s];
    __syncthreads();
  }
  if (threadIdx.x == 0) a.dsink[h] = -red[0];
}

const char* launch_kernels(const BwdProblem& a, void* workspace, void* stream) {
  const Problem& p = a.p;
  float* delta = static_cast<float*>(workspace);
  if (a.v2) {
    if (p.d_qk == 256 && p.d_v == 256) return launch_bwd_v2_d256(a, workspace, stream);
    if (!bwd_v2_supported(p.d_qk, p.d_v)) return "head dims not instantiated for v2";
    return p.d_qk == 64 ? launch_bwd_v2_d64(a, workspace, stream) : launch_bwd_v2_d128(a, workspace, stream);
  }
  switch (p.d_qk) {
    case 64: return launch_bwd_main_d64(a, delta, stream);
    case 128: return launch_bwd_main_d128(a, delta, stream);
    case 256: return launch_bwd_main_d256(a, delta, stream);
    default: return launch_bwd_main_d192(a, delta, stream);
  }
}

}  // namespace

bool bwd_dims_supported(int64_t d_qk, int64_t d_v) {
  return (d_qk == d_v && (d_qk == 64 || d_qk == 128 || d_qk == 256)) || (d_qk == 192 && d_v == 128);
}

bool bwd_v2_supported(int64_t d_qk, int64_t d_v) { return d_qk == d_v && (d_qk == 64 || d_qk == 128); }

namespace {
int64_t round256(int64_t n) { return (n + 255) / 256 * 256; }
}  // namespace

BwdV2Layout bwd_v2_layout(const Problem& p) {
  BwdV2Layout l;
  l.mt = (p.sq + 63) / 64;
  l.counters = round256(p.b * p.hq * p.sq * int64_t(sizeof(float)));
  l.counter_bytes = p.b * p.hq * l.mt * 2 * int64_t(sizeof(int));
  l.dq = l.counters + round256(l.counter_bytes);
  l.end = l.dq + round256(p.b * p.hq * l.mt * 64 * p.d_qk * int64_t(sizeof(float)));
  return l;
}

int64_t bwd_workspace_bytes(const Problem& p, bool fused_dq) {
  return fused_dq ? bwd_v2_layout(p).end : round256(p.b * p.hq * p.sq * int64_t(sizeof(float)));
}

const char* launch_backward(const BwdProblem& a, void* workspace, void* stream) {
  const Problem& p = a.p;
  if (!bwd_dims_supported(p.d_qk, p.d_v)) return "head dims not instantiated";
  if (p.b == 0 || p.hq == 0) return nullptr;
  cudaStream_t st = static_cast<cudaStream_t>(stream);
  float* delta = static_cast<float*>(workspace);
  if (p.sq > 0) {
    dim3 grid(unsigned((p.sq + kRowsPerCta - 1) / kRowsPerCta), unsigned(p.hq), unsigned(p.b));
    if (p.fp16)
      delta_kernel<__half><<<grid, 32 * kRowsPerCta, 0, st>>>(a, delta);
    else
      delta_kernel<__nv_bfloat16><<<grid, 32 * kRowsPerCta, 0, st>>>(a, delta);
    if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return cudaGetErrorString(e);
  }
  if (const char* e = launch_kernels(a, workspace, stream)) return e;
  if (a.dsink && p.sink) {  // delta is the workspace's first region in both layouts
    dsink_kernel<<<unsigned(p.hq), kSinkThreads, 0, st>>>(a, delta);
    if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return cudaGetErrorString(e);
  }
  return nullptr;
}

}  // namespace opendnn::cuda::sdpa
