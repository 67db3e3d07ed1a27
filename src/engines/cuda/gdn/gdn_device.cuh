// SPDX-License-Identifier: Apache-2.0
// Device helpers shared by the GDN forward and backward kernels: element conversions and scalar
// access to tensors whose data type is only known at run time (gates, beta, states, cu_seqlens).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <cstring>
#include <type_traits>

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
// An empty sequence's state passes through: dst[s, j] <- src[s, j] (zero without src), both [N, HO, V, K]
// with element strides. One CTA per (sequence blockIdx.x, head blockIdx.y); the split passes' segment tables
// have no row for an empty sequence, so nothing else writes it (the forward's final state, the backward's dh0).
__device__ __forceinline__ void pass_empty_state(const void* cu, bool cu_i64, int64_t v, int64_t k, DataType src_type,
                                                 const void* src, const int64_t (&ss)[4], DataType dst_type, void* dst,
                                                 const int64_t (&ds)[4]) {
  const int64_t s = blockIdx.x, j = blockIdx.y;
  if (cu_at(cu, cu_i64, s + 1) > cu_at(cu, cu_i64, s)) return;
  const int64_t sb = s * ss[0] + j * ss[1], db = s * ds[0] + j * ds[1];
  for (int64_t i = threadIdx.x; i < v * k; i += blockDim.x) {
    const int64_t vv = i / k, kk = i % k;
    const float x = src ? load_any(src_type, src, sb + vv * ss[2] + kk * ss[3]) : 0.f;
    store_any(dst_type, dst, db + vv * ds[2] + kk * ds[3], x);
  }
}
__device__ __forceinline__ int64_t imin(int64_t a, int64_t b) { return a < b ? a : b; }

// cp.async, ldmatrix and m16n8k16 mma.sync, shared by the register-state passes (forward and backward)
// and chunk_prep_mma.
__device__ __forceinline__ uint32_t smem_addr(const void* p) { return uint32_t(__cvta_generic_to_shared(p)); }
// 16 bytes global -> shared; a row outside the chunk is zero-filled (src-size 0 reads nothing).
__device__ __forceinline__ void cp16(void* dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst)), "l"(src), "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void cp4(void* dst, const void* src, bool valid) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(smem_addr(dst)), "l"(src), "r"(valid ? 4 : 0));
}
__device__ __forceinline__ void cp_commit() { asm volatile("cp.async.commit_group;\n" ::); }
__device__ __forceinline__ void cp_wait_all() { asm volatile("cp.async.wait_group 0;\n" ::: "memory"); }
__device__ __forceinline__ void cp_wait_but_one() { asm volatile("cp.async.wait_group 1;\n" ::: "memory"); }

__device__ __forceinline__ void ldsm4(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p)));
}
__device__ __forceinline__ void ldsm4t(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p)));
}

// d += a b, m16n8k16, fp32 accumulators.
template <class T>
__device__ __forceinline__ void mma16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  if constexpr (std::is_same_v<T, __half>) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
}

// Two floats as one 16-bit pair, the lower column in the low half (the fragment order).
template <class T>
__device__ __forceinline__ uint32_t pack2(float lo, float hi) {
  uint32_t r;
  if constexpr (std::is_same_v<T, __half>) {
    __half2 h = __floats2half2_rn(lo, hi);
    memcpy(&r, &h, 4);
  } else {
    __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
    memcpy(&r, &h, 4);
  }
  return r;
}
template <class T>
__device__ __forceinline__ float2 unpack2(uint32_t x) {
  if constexpr (std::is_same_v<T, __half>) {
    __half2 h;
    memcpy(&h, &x, 4);
    return __half22float2(h);
  } else {
    __nv_bfloat162 h;
    memcpy(&h, &x, 4);
    return __bfloat1622float2(h);
  }
}

// The A operand of k-slice ks (columns 16ks..16ks+15) of a 16-row strip held as m16n8 accumulators
// acc[n-tile][4], each element times col_scale of its column (f[n-tile][0 or 1]).
template <class T, int N>
__device__ __forceinline__ void a_frag(uint32_t (&a)[4], const float (&acc)[N][4], int ks) {
  a[0] = pack2<T>(acc[2 * ks][0], acc[2 * ks][1]);
  a[1] = pack2<T>(acc[2 * ks][2], acc[2 * ks][3]);
  a[2] = pack2<T>(acc[2 * ks + 1][0], acc[2 * ks + 1][1]);
  a[3] = pack2<T>(acc[2 * ks + 1][2], acc[2 * ks + 1][3]);
}

}  // namespace opendnn::cuda::gdn
