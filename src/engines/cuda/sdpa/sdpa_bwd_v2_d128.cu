// SPDX-License-Identifier: Apache-2.0
// SDPA backward v2 (wgmma), d_qk 128 / d_v 128 (bf16 and fp16).
#include "engines/cuda/sdpa/sdpa_bwd_v2.cuh"

namespace opendnn::cuda::sdpa {

const char* launch_bwd_v2_d128(const BwdProblem& a, void* workspace, void* stream) {
  return bwd2::launch_any<128>(a, workspace, stream);
}

}  // namespace opendnn::cuda::sdpa
