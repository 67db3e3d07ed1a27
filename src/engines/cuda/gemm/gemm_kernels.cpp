// SPDX-License-Identifier: Apache-2.0
// Picks the instantiation for a GEMM and checks what TMA and the kernels need.
#include <cuda_runtime.h>

#include <climits>
#include <cstdint>

#include "engines/cuda/gemm/gemm_kernels.h"

namespace opendnn::cuda::gemm {
namespace {

using Runner = const char* (*)(const Args&, void*, int, void*, LaunchCache*, int64_t*);

// bf16 COOP has one kernel per activation (gemm_bf16_<layout>_<act>.cu).
template <bool BK>
Runner bf16_coop(Act act) {
  switch (act) {
    case Act::NONE: return run<Elem::BF16, BK, Act::NONE, Config::COOP>;
    case Act::RELU: return run<Elem::BF16, BK, Act::RELU, Config::COOP>;
    case Act::GELU_ERF: return run<Elem::BF16, BK, Act::GELU_ERF, Config::COOP>;
    case Act::GELU_TANH: return run<Elem::BF16, BK, Act::GELU_TANH, Config::COOP>;
    case Act::SILU: return run<Elem::BF16, BK, Act::SILU, Config::COOP>;
    default: return nullptr;
  }
}

// The variants (gemm_kernels.h), one kernel each: bf16 SwiGLU (pingpong, B column-major), bf16 in with fp32
// out (cooperative, B column-major, the activation a run-time switch), fp8 with amax.
Runner variant(const Args& a) {
  const bool none = a.act.act == Act::NONE;
  if (a.epi == Epi::GATED)
    return a.type == Elem::BF16 && a.b_k_major && a.out == Out::NATIVE && a.act.act == Act::SILU &&
                   a.config == Config::PINGPONG
               ? run<Elem::BF16, true, Act::SILU, Config::PINGPONG, Epi::GATED, Out::NATIVE>
               : nullptr;
  if (a.epi == Epi::AMAX)
    return a.type == Elem::FP8_E4M3 && none && a.out == Out::NATIVE && a.config == Config::COOP
               ? run<Elem::FP8_E4M3, true, Act::NONE, Config::COOP, Epi::AMAX, Out::NATIVE>
               : nullptr;
  return a.type == Elem::BF16 && a.b_k_major && a.config == Config::COOP
             ? run<Elem::BF16, true, Act::RUNTIME, Config::COOP, Epi::PLAIN, Out::FP32>
             : nullptr;
}

// The configurations instantiated for bf16 with B column-major and no activation only.
bool bf16_bk_plain(const Args& a) { return a.type == Elem::BF16 && a.b_k_major && a.act.act == Act::NONE; }

// The instantiated kernels, or null.
Runner runner(const Args& a) {
  const bool none = a.act.act == Act::NONE;
  if (a.epi != Epi::PLAIN || a.out != Out::NATIVE) return variant(a);
  switch (a.config) {
    case Config::COOP:
      if (a.type == Elem::FP8_E4M3) return none ? run<Elem::FP8_E4M3, true, Act::NONE, Config::COOP> : nullptr;
      if (a.type == Elem::FP16)  // fewer kernels: one that switches on the activation
        return a.b_k_major ? run<Elem::FP16, true, Act::RUNTIME, Config::COOP>
                           : run<Elem::FP16, false, Act::RUNTIME, Config::COOP>;
      return a.b_k_major ? bf16_coop<true>(a.act.act) : bf16_coop<false>(a.act.act);
    case Config::PINGPONG:  // bf16, B column-major (nn.Linear weights), plain and GELU (erf) only; fp8 plain
      if (a.type == Elem::FP8_E4M3) return none ? run<Elem::FP8_E4M3, true, Act::NONE, Config::PINGPONG> : nullptr;
      if (a.type != Elem::BF16 || !a.b_k_major) return nullptr;
      if (none) return run<Elem::BF16, true, Act::NONE, Config::PINGPONG>;
      return a.act.act == Act::GELU_ERF ? run<Elem::BF16, true, Act::GELU_ERF, Config::PINGPONG> : nullptr;
    case Config::FAST_ACCUM:
      return a.type == Elem::FP8_E4M3 && none ? run<Elem::FP8_E4M3, true, Act::NONE, Config::FAST_ACCUM> : nullptr;
    case Config::COOP_M256:  // bf16, B column-major, no activation
      return bf16_bk_plain(a) ? run<Elem::BF16, true, Act::NONE, Config::COOP_M256> : nullptr;
    case Config::PINGPONG_64X256:  // bf16, B column-major, plain and GELU (erf), like PINGPONG
      if (a.type != Elem::BF16 || !a.b_k_major) return nullptr;
      if (none) return run<Elem::BF16, true, Act::NONE, Config::PINGPONG_64X256>;
      return a.act.act == Act::GELU_ERF ? run<Elem::BF16, true, Act::GELU_ERF, Config::PINGPONG_64X256> : nullptr;
  }
  return nullptr;
}

// TMA's stride and address rule: 16 bytes, 8 elements of D (16-bit) and of 16-bit A/B, 16 of fp8.
bool aligned(int64_t v, int64_t elems = 8) { return v % elems == 0; }
bool aligned_ptr(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

}  // namespace

const char* check(const Args& a) {
  if (a.M <= 0 || a.N <= 0 || a.K <= 0 || a.L <= 0) return "M, N, K and the batch must be positive";
  if (a.M > INT_MAX || a.N > INT_MAX || a.K > INT_MAX || a.L > INT_MAX) return "M, N, K and the batch must fit in 32 bits";
  const int64_t ab = a.type == Elem::FP8_E4M3 ? 16 : 8;
  if (a.type == Elem::FP8_E4M3 && !a.b_k_major) return "fp8 B must be column-major (K contiguous)";
  if (!aligned(a.N) || !aligned(a.K, ab))
    return a.type == Elem::FP8_E4M3 ? "N must be a multiple of 8 and K of 16 (TMA needs 16-byte aligned rows)"
                                    : "N and K must be multiples of 8 (TMA needs 16-byte aligned rows of A, B and C)";
  if (!aligned(a.lda, ab) || !aligned(a.ldb, ab) || !aligned(a.ldd) || (a.residual_given && !aligned(a.ldr)))
    return "row strides of A, B, C and the residual must be multiples of 16 bytes (TMA)";
  if (!aligned(a.batch_a, ab) || !aligned(a.batch_b, ab) || !aligned(a.batch_d) ||
      (a.residual_given && !aligned(a.batch_r)))
    return "batch strides must be multiples of 16 bytes (TMA)";
  if (a.epi == Epi::AMAX && a.L > 1) return "amax is computed over one batch only";
  if (a.L > 1 && (a.batch_a == 0 || a.batch_b == 0 || a.batch_d == 0 || (a.residual_given && a.batch_r == 0)))
    return "a broadcast batch (stride 0) is supported only when it folds into M";
  return "";
}

bool has_kernel(const Args& a) { return runner(a) != nullptr; }

int64_t workspace_bytes(const Args& a, int sm_count) {
  int64_t bytes = 0;
  if (Runner r = runner(a)) r(a, nullptr, sm_count, nullptr, nullptr, &bytes);
  return bytes;
}

const char* launch(const Args& a, void* workspace, int sm_count, void* stream, LaunchCache& cache) {
  Runner r = runner(a);
  if (!r) return "no kernel is instantiated for this configuration";
  if (!cache.matches(a, workspace) &&
      (!aligned_ptr(a.a) || !aligned_ptr(a.b) || !aligned_ptr(a.d) || (a.bias && !aligned_ptr(a.bias)) ||
       (a.residual && !aligned_ptr(a.residual))))
    return "A, B, C, bias and residual must be 16-byte aligned (TMA)";
  // The kernel max-reduces into *amax with atomics, from 0 (|x| >= 0), at every launch.
  if (a.epi == Epi::AMAX) {
    if (!a.amax) return "amax needs device memory";
    if (cudaError_t e = cudaMemsetAsync(a.amax, 0, sizeof(float), static_cast<cudaStream_t>(stream)); e != cudaSuccess)
      return cudaGetErrorString(e);
  }
  return r(a, workspace, sm_count, stream, &cache, nullptr);
}

}  // namespace opendnn::cuda::gemm
