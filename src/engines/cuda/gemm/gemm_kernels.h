// SPDX-License-Identifier: Apache-2.0
// Hopper GEMM kernels (CUTLASS 3.x sm90 TMA + wgmma, warp-specialized, persistent) behind a plain
// launch API, so adapters never include CUTLASS. One instantiation per translation unit (gemm_*.cu).
//
//   D[l, m, n] = act(alpha * sum_k A[l, m, k] B[l, k, n] + bias[n] + beta * R[l, m, n])
// A is row-major (K contiguous), D and R are row-major (N contiguous); B is row-major (N contiguous)
// or column-major (K contiguous). Accumulation is fp32; D, R and bias have A's type, except for
// FP8_E4M3 A and B (B column-major only), whose D, R and bias are BFLOAT16 and whose alpha is
// scale[0] * scale[1] * scale[2] (MATMUL_FP8's descale_A, descale_B, scale_C; device pointers).
// Variants (Epi, Out; one kernel each, see gemm_kernels.cpp for which exist):
//   Epi::GATED  D = act(alpha * acc + bias[n]) * R: R is the `up` tensor of a SwiGLU (read where the
//               residual is, through the epilogue's source operand); beta is unused
//   Epi::AMAX   fp8 only: also *amax = max |scale[0] * scale[1] * acc| (before scale_C, NaN sticks);
//               the caller zeroes *amax before the launch (launch() does, on the stream)
//   Out::FP32   D and R are FLOAT (bias keeps A's type): fp32 logits from bf16 inputs
#pragma once

#include <cstddef>
#include <cstdint>

namespace opendnn::cuda::gemm {

enum class Elem : int { BF16, FP16, FP8_E4M3 };
// RUNTIME names a kernel, never an ActArgs value: one kernel that switches on ActArgs::act.
enum class Act : int { NONE, RELU, GELU_ERF, GELU_TANH, SILU, RUNTIME };
// The kernel configurations (gemm_sm90.cuh says what each is); COOP exists for every type and layout.
// COOP_M256: 256x128x64 cooperative (each consumer warpgroup 128x128), bf16 only. PINGPONG_64X256 is
// pingpong with 64x256 tiles (bf16, B column-major, plain or GELU erf; opt-in). PINGPONG also exists for
// fp8 (64x128x128, fp32 promotion). Configurations index plans (gemm_adapter.cpp): at most 8. Values 4-6
// were stream-K and the 1x2 / 2x2 clusters, measured slower than the 2x1 cluster everywhere on the H200
// (session 5) and deleted; the gap keeps the other plans' indices.
enum class Config : int { COOP, PINGPONG, FAST_ACCUM, COOP_M256, PINGPONG_64X256 = 7 };
enum class Epi : int { PLAIN, GATED, AMAX };
enum class Out : int { NATIVE, FP32 };  // NATIVE: A's type, BFLOAT16 for fp8
// The persistent tile scheduler's walk over the output tiles (CUTLASS's RasterOrderOptions).
enum class Raster : int { HEURISTIC, ALONG_M, ALONG_N };

// The epilogue's run-time arguments (CUTLASS hands them to the activation functor): the activation,
// which only Act::RUNTIME kernels read, and SiLU's beta.
struct ActArgs {
  Act act = Act::NONE;
  float swish_beta = 1.0f;
};

struct Args {
  Elem type = Elem::BF16;
  bool b_k_major = false;  // B column-major: K contiguous
  int64_t M = 0, N = 0, K = 0, L = 1;
  const void* a = nullptr;
  int64_t lda = 0, batch_a = 0;  // element strides of a row and of a batch (0: broadcast)
  const void* b = nullptr;
  int64_t ldb = 0, batch_b = 0;
  void* d = nullptr;
  int64_t ldd = 0, batch_d = 0;
  const void* bias = nullptr;  // [N] packed, or null
  const void* residual = nullptr;  // like D, or null
  bool residual_given = false;     // known at plan time, before the pointer is
  int64_t ldr = 0, batch_r = 0;
  float alpha = 1.0f, beta = 0.0f;
  const float* scale[3] = {nullptr, nullptr, nullptr};  // FP8_E4M3 only: fp32 scalars in device memory
  Epi epi = Epi::PLAIN;
  Out out = Out::NATIVE;
  float* amax = nullptr;  // Epi::AMAX: one fp32 in device memory
  ActArgs act;
  Config config = Config::COOP;
  int swizzle = 1;  // max_swizzle_size: 1, 2, 4 or 8 tiles
  Raster raster = Raster::HEURISTIC;
  // FP8_E4M3 with fp32 promotion (not FAST_ACCUM): wgmma k-steps of 32 between two promotions, 4 (every 128-deep
  // k-tile, CUTLASS's default), 8 or 16. Each promotion waits for every wgmma in flight.
  int fp8_promotion = 4;
};

// The kernel parameters of the last launch of a plan, reused while its pointers and alpha stay the
// same: encoding TMA descriptors costs host microseconds a small GEMM cannot hide. The plan owns it.
struct LaunchCache {
  static constexpr size_t kBytes = 2048;
  alignas(64) unsigned char params[kBytes];
  bool valid = false;
  const void *a = nullptr, *b = nullptr, *d = nullptr, *bias = nullptr, *residual = nullptr, *workspace = nullptr,
             *amax = nullptr;
  const float* scale[3] = {nullptr, nullptr, nullptr};
  float alpha = 0.0f;
  bool matches(const Args& x, const void* ws) const {
    return valid && a == x.a && b == x.b && d == x.d && bias == x.bias && residual == x.residual && workspace == ws &&
           amax == x.amax &&
           alpha == x.alpha && scale[0] == x.scale[0] && scale[1] == x.scale[1] && scale[2] == x.scale[2];
  }
  void remember(const Args& x, const void* ws) {
    a = x.a, b = x.b, d = x.d, bias = x.bias, residual = x.residual, workspace = ws, alpha = x.alpha;
    amax = x.amax;
    for (int i = 0; i < 3; ++i) scale[i] = x.scale[i];
    valid = true;
  }
};

// "" when the kernels take these shapes and strides, else why not (pointers are checked at launch).
const char* check(const Args& a);
// Whether a kernel of a.config is instantiated for a's type, layout and activation.
bool has_kernel(const Args& a);
int64_t workspace_bytes(const Args& a, int sm_count);
// Launch on `stream` (a cudaStream_t). Returns an error string or nullptr.
const char* launch(const Args& a, void* workspace, int sm_count, void* stream, LaunchCache& cache);

// One kernel; gemm_*.cu instantiate those gemm_kernels.cpp dispatches to. With ws_query set, only
// reports the workspace size.
template <Elem E, bool BKMajor, Act A, Config C>
const char* run(const Args& a, void* workspace, int sm_count, void* stream, LaunchCache* cache, int64_t* ws_query);
// The same with an epilogue variant or another output type (an overload, so the plain kernels keep
// their symbols).
template <Elem E, bool BKMajor, Act A, Config C, Epi X, Out O>
const char* run(const Args& a, void* workspace, int sm_count, void* stream, LaunchCache* cache, int64_t* ws_query);

}  // namespace opendnn::cuda::gemm
