// SPDX-License-Identifier: Apache-2.0
// Launch API of the second SDPA forward kernel (sdpa_fwd_v2.cu): TMA loads by a producer warp,
// two consumer warpgroups. Common case only (see fwd_v2_supports); opt-in through the adapter.
#pragma once

#include <string>

#include "engines/cuda/sdpa/sdpa_common.h"

namespace opendnn::cuda::sdpa {

// Three opaque TMA descriptors (CUtensorMap: Q, K, V), encoded on the host from a bound Problem.
struct alignas(64) FwdV2Descs {
  unsigned char bytes[3][128];
};

// "" when the v2 kernel runs this problem, else the reason it does not ("not supported: ...").
std::string fwd_v2_supports(const Problem& p);
// Encodes the descriptors for the pointers and strides of `p` (host only, about a microsecond
// each: no allocation, no device call). Returns an error string or nullptr.
const char* fwd_v2_encode(const Problem& p, FwdV2Descs& d);
// Launches on `stream` (a cudaStream_t) with descriptors encoded from the same pointers.
const char* launch_fwd_v2(const Problem& p, const FwdV2Descs& d, void* stream);

}  // namespace opendnn::cuda::sdpa
