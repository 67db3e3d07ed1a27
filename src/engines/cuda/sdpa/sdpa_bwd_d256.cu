// SPDX-License-Identifier: Apache-2.0
// SDPA backward, d_qk 256 / d_v 256 (bf16 and fp16).
#include "engines/cuda/sdpa/sdpa_bwd_main.cuh"

namespace opendnn::cuda::sdpa {

const char* launch_bwd_main_d256(const BwdProblem& a, const float* delta, void* stream) {
  return bwd::launch_main_any<256, 256, 128, 128>(a, delta, stream);
}

}  // namespace opendnn::cuda::sdpa
