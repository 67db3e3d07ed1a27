// SPDX-License-Identifier: Apache-2.0
// SDPA forward, head dims d_qk=256, d_v=256 (key/value tile 64 rows).
#include "engines/cuda/sdpa/sdpa_fwd_kernel.cuh"

namespace opendnn::cuda::sdpa {
const char* launch_fwd_d256(const Problem& p, void* stream) { return launch_fwd_any<256, 256, 64>(p, stream); }
}  // namespace opendnn::cuda::sdpa
