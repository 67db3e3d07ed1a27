// SPDX-License-Identifier: Apache-2.0
// bf16 GEMM with row-major (N-contiguous) B: one instantiation of gemm_sm90.cuh.
#include "engines/cuda/gemm/gemm_sm90.cuh"

namespace opendnn::cuda::gemm {

const char* run_bf16_bn(const Args& a, void* workspace, int sm_count, void* stream, LaunchCache* cache,
                       int64_t* ws_query) {
  using Gemm = Sm90Gemm<cutlass::bfloat16_t, cutlass::bfloat16_t, false>;
  return Gemm::run(a, workspace, sm_count, stream, cache, ws_query);
}

}  // namespace opendnn::cuda::gemm
