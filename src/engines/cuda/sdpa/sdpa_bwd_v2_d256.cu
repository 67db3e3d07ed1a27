// SPDX-License-Identifier: Apache-2.0
// SDPA backward v2 for d_qk = d_v = 256 (sdpa_bwd_v2_d256.cuh; bf16 and fp16; the default d256
// plan, OPENDNN_SDPA_BWD_D256_V2=0 withholds it; its v4 is the default,
// OPENDNN_SDPA_BWD_D256_V4=0 keeps v2).
#include "engines/cuda/sdpa/sdpa_bwd_v2_d256.cuh"

namespace opendnn::cuda::sdpa {

const char* launch_bwd_v2_d256(const BwdProblem& a, void* workspace, void* stream) {
  cudaStream_t st = static_cast<cudaStream_t>(stream);
  return a.p.fp16 ? bwd2d256::launch_t<cutlass::half_t>(a, workspace, st)
                  : bwd2d256::launch_t<cutlass::bfloat16_t>(a, workspace, st);
}

}  // namespace opendnn::cuda::sdpa
