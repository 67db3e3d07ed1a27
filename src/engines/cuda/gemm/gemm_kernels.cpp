// SPDX-License-Identifier: Apache-2.0
// Picks the instantiation for a GEMM and checks what TMA and the kernels need.
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

// The instantiated kernels, or null.
Runner runner(const Args& a) {
  const bool none = a.act.act == Act::NONE;
  switch (a.config) {
    case Config::COOP:
      if (a.type == Elem::FP8_E4M3) return none ? run<Elem::FP8_E4M3, true, Act::NONE, Config::COOP> : nullptr;
      if (a.type == Elem::FP16)  // fewer kernels: one that switches on the activation
        return a.b_k_major ? run<Elem::FP16, true, Act::RUNTIME, Config::COOP>
                           : run<Elem::FP16, false, Act::RUNTIME, Config::COOP>;
      return a.b_k_major ? bf16_coop<true>(a.act.act) : bf16_coop<false>(a.act.act);
    case Config::PINGPONG:  // bf16, B column-major (nn.Linear weights), plain and GELU (erf) only
      if (a.type != Elem::BF16 || !a.b_k_major) return nullptr;
      if (none) return run<Elem::BF16, true, Act::NONE, Config::PINGPONG>;
      return a.act.act == Act::GELU_ERF ? run<Elem::BF16, true, Act::GELU_ERF, Config::PINGPONG> : nullptr;
    case Config::FAST_ACCUM:
      return a.type == Elem::FP8_E4M3 && none ? run<Elem::FP8_E4M3, true, Act::NONE, Config::FAST_ACCUM> : nullptr;
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
  if (cache.matches(a, workspace)) return r(a, workspace, sm_count, stream, &cache, nullptr);
  if (!aligned_ptr(a.a) || !aligned_ptr(a.b) || !aligned_ptr(a.d) || (a.bias && !aligned_ptr(a.bias)) ||
      (a.residual && !aligned_ptr(a.residual)))
    return "A, B, C, bias and residual must be 16-byte aligned (TMA)";
  return r(a, workspace, sm_count, stream, &cache, nullptr);
}

}  // namespace opendnn::cuda::gemm
