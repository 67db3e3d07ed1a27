// SPDX-License-Identifier: Apache-2.0
// fp16 GEMM with column-major (K-contiguous) B: one instantiation of gemm_sm90.cuh.
#include "engines/cuda/gemm/gemm_sm90.cuh"

namespace opendnn::cuda::gemm {

const char* run_fp16_bk(const Args& a, void* workspace, int sm_count, void* stream, LaunchCache* cache,
                       int64_t* ws_query) {
  using Gemm = Sm90Gemm<cutlass::half_t, cutlass::half_t, true>;
  return Gemm::run(a, workspace, sm_count, stream, cache, ws_query);
}

}  // namespace opendnn::cuda::gemm
