// SPDX-License-Identifier: Apache-2.0
// fp8 e4m3 GEMM, column-major (K-contiguous) B, bf16 output, per-tensor scales: one instantiation
// of gemm_sm90.cuh.
#include "engines/cuda/gemm/gemm_sm90.cuh"

namespace opendnn::cuda::gemm {

const char* run_e4m3_bk(const Args& a, void* workspace, int sm_count, void* stream, LaunchCache* cache,
                        int64_t* ws_query) {
  using Gemm = Sm90Gemm<cutlass::float_e4m3_t, cutlass::bfloat16_t, true>;
  return Gemm::run(a, workspace, sm_count, stream, cache, ws_query);
}

}  // namespace opendnn::cuda::gemm
