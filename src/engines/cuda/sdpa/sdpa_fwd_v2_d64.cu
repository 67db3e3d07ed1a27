// SPDX-License-Identifier: Apache-2.0
// SDPA forward v2, d_qk=64, d_v=64: key/value tiles of 128 rows, a 3-stage K/V ring.
#include "engines/cuda/sdpa/sdpa_fwd_v2.cuh"

namespace opendnn::cuda::sdpa {
const char* launch_fwd_v2_d64(const Problem& p, const FwdV2Descs& d, const FwdV2Persistent* pers,
                               void* stream) {
  return v2::launch_any<64, 64, 128, 3>(p, d, pers, stream);
}
}  // namespace opendnn::cuda::sdpa
