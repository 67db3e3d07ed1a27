// SPDX-License-Identifier: Apache-2.0
// SDPA forward, head dims d_qk=64, d_v=64 (key/value tile 128 rows).
#include "engines/cuda/sdpa/sdpa_fwd_kernel.cuh"

namespace opendnn::cuda::sdpa {
const char* launch_fwd_d64(const Problem& p, void* stream) { return launch_fwd_any<64, 64, 128>(p, stream); }
}  // namespace opendnn::cuda::sdpa
