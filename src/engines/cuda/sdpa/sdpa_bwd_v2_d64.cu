// SPDX-License-Identifier: Apache-2.0
// SDPA backward v2 (wgmma), d_qk 64 / d_v 64 (bf16 and fp16).
#include "engines/cuda/sdpa/sdpa_bwd_v2.cuh"

namespace opendnn::cuda::sdpa {

const char* launch_bwd_v2_d64(const BwdProblem& a, void* workspace, void* stream) {
  return bwd2::launch_any<64>(a, workspace, stream);
}

}  // namespace opendnn::cuda::sdpa
