// SPDX-License-Identifier: Apache-2.0
// Launch API of the cuda SDPA forward kernels (sdpa_fwd_d*.cu); the adapter includes only this.
#pragma once

#include <cstdint>

#include "engines/cuda/sdpa/sdpa_common.h"

namespace opendnn::cuda::sdpa {

// One function per head-dim configuration (d_qk, d_v), each in its own translation unit.
// Launch on `stream` (a cudaStream_t); returns a CUDA error string or nullptr.
const char* launch_fwd_d64(const Problem& p, void* stream);
const char* launch_fwd_d128(const Problem& p, void* stream);
const char* launch_fwd_d192_128(const Problem& p, void* stream);
const char* launch_fwd_d256(const Problem& p, void* stream);

using FwdLauncher = const char* (*)(const Problem&, void*);
// The launcher for (d_qk, d_v), or nullptr when no kernel is built for it.
inline FwdLauncher fwd_launcher(int64_t d_qk, int64_t d_v) {
  if (d_qk == 64 && d_v == 64) return launch_fwd_d64;
  if (d_qk == 128 && d_v == 128) return launch_fwd_d128;
  if (d_qk == 192 && d_v == 128) return launch_fwd_d192_128;
  if (d_qk == 256 && d_v == 256) return launch_fwd_d256;
  return nullptr;
}

}  // namespace opendnn::cuda::sdpa
