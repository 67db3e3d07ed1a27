// SPDX-License-Identifier: Apache-2.0
// Device helpers shared by the GDN forward and backward kernels: element conversions and scalar
// access to tensors whose data type is only known at run time (gates, beta, states, cu_seqlens).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "opendnn/types.h"

namespace opendnn::cuda::gdn {

template <class T> __device__ __forceinline__ float to_f(T v);
template <> __device__ __forceinline__ float to_f(__half v) { return __half2float(v); }
template <> __device__ __forceinline__ float to_f(__nv_bfloat16 v) { return __bfloat162float(v); }
template <class T> __device__ __forceinline__ T from_f(float v);
template <> __device__ __forceinline__ __half from_f(float v) { return __float2half_rn(v); }
template <> __device__ __forceinline__ __nv_bfloat16 from_f(float v) { return __float2bfloat16_rn(v); }

__device__ __forceinline__ float load_any(DataType t, const void* p, int64_t i) {
  switch (t) {
    case DataType::HALF: return __half2float(static_cast<const __half*>(p)[i]);
    case DataType::BFLOAT16: return __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]);
    default: return static_cast<const float*>(p)[i];
  }
}
__device__ __forceinline__ void store_any(DataType t, void* p, int64_t i, float v) {
  switch (t) {
    case DataType::HALF: static_cast<__half*>(p)[i] = __float2half_rn(v); break;
    case DataType::BFLOAT16: static_cast<__nv_bfloat16*>(p)[i] = __float2bfloat16_rn(v); break;
    default: static_cast<float*>(p)[i] = v;
  }
}
__device__ __forceinline__ int64_t cu_at(const void* cu, bool i64, int64_t i) {
  return i64 ? static_cast<const long long*>(cu)[i] : int64_t(static_cast<const int*>(cu)[i]);
}
__device__ __forceinline__ int64_t imin(int64_t a, int64_t b) { return a < b ? a : b; }

}  // namespace opendnn::cuda::gdn
