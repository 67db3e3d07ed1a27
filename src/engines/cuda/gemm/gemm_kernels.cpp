// SPDX-License-Identifier: Apache-2.0
// Picks the instantiation for a GEMM and checks what TMA and the kernels need.
#include <climits>
#include <cstdint>

#include "engines/cuda/gemm/gemm_kernels.h"

namespace opendnn::cuda::gemm {
namespace {

using Runner = const char* (*)(const Args&, void*, int, void*, LaunchCache*, int64_t*);

Runner runner(const Args& a) {
  if (a.type == Elem::FP8_E4M3) return run_e4m3_bk;
  if (a.type == Elem::BF16) return a.b_k_major ? run_bf16_bk : run_bf16_bn;
  return a.b_k_major ? run_fp16_bk : run_fp16_bn;
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

int64_t workspace_bytes(const Args& a, int sm_count) {
  int64_t bytes = 0;
  runner(a)(a, nullptr, sm_count, nullptr, nullptr, &bytes);
  return bytes;
}

const char* launch(const Args& a, void* workspace, int sm_count, void* stream, LaunchCache& cache) {
  if (cache.matches(a, workspace)) return runner(a)(a, workspace, sm_count, stream, &cache, nullptr);
  if (!aligned_ptr(a.a) || !aligned_ptr(a.b) || !aligned_ptr(a.d) || (a.bias && !aligned_ptr(a.bias)) ||
      (a.residual && !aligned_ptr(a.residual)))
    return "A, B, C, bias and residual must be 16-byte aligned (TMA)";
  return runner(a)(a, workspace, sm_count, stream, &cache, nullptr);
}

}  // namespace opendnn::cuda::gemm
