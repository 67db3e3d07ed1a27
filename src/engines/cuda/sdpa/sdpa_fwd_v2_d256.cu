// SPDX-License-Identifier: Apache-2.0
// SDPA forward v2, d_qk=256, d_v=256: key/value tiles of 64 rows, a 2-stage K/V ring.
#include "engines/cuda/sdpa/sdpa_fwd_v2.cuh"

namespace opendnn::cuda::sdpa {
const char* launch_fwd_v2_d256(const Problem& p, const FwdV2Descs& d, const FwdV2Persistent* pers,
                               void* stream) {
  return v2::launch_any<256, 256, 64, 2>(p, d, pers, stream);
}
}  // namespace opendnn::cuda::sdpa
