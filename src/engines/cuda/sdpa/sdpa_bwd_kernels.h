// SPDX-License-Identifier: Apache-2.0
// SDPA backward kernels of the cuda engine (sm_90a), behind a small launch API so the adapter
// (sdpa_bwd_adapter.cpp) never includes CUDA templates.
//
// Three launches, all deterministic (every sum is taken in a fixed order, no atomics):
//   1. preprocess: D_i = sum_d dO_id * O_id (fp32, workspace [B,Hq,Sq]);
//   2. dK/dV: one CTA per (64-row KV tile, KV head, batch), K/V resident in shared memory, looping
//      over the query heads of its GQA group and the query tiles in order, dK/dV in registers;
//   3. dQ: one CTA per (64-row query tile, query head, batch) looping over KV tiles in order.
// Splitting dQ from dK/dV recomputes S and dP once more, but needs no dQ accumulation buffer, no
// cross-CTA ordering and no spin-waits (workspace is O(B*Hq*Sq)).
#pragma once

#include <cstdint>

#include "engines/cuda/sdpa/sdpa_common.h"

namespace opendnn::cuda::sdpa {

struct BwdProblem {
  Problem p;  // Q, K, V, O, Stats, masks, lengths, scale (O and Stats are inputs here)
  TokenTensor dout, dq, dk, dv;
  bool v2 = false;  // the wgmma kernels (sdpa_bwd_v2.cuh); only where bwd_v2_supported
};

// Head-dim pairs (d_qk, d_v) the kernels are instantiated for.
bool bwd_dims_supported(int64_t d_qk, int64_t d_v);

// Head-dim pairs the v2 kernels (opt-in, OPENDNN_SDPA_BWD_V2=1) are instantiated for.
bool bwd_v2_supported(int64_t d_qk, int64_t d_v);

int64_t bwd_workspace_bytes(const Problem& p);

// Launch on `stream` (a cudaStream_t). Returns a CUDA error string or nullptr.
const char* launch_backward(const BwdProblem& a, void* workspace, void* stream);

// One head-dim instantiation each (sdpa_bwd_d<N>.cu): the dK/dV and dQ kernels.
const char* launch_bwd_main_d64(const BwdProblem& a, const float* delta, void* stream);
const char* launch_bwd_main_d128(const BwdProblem& a, const float* delta, void* stream);
const char* launch_bwd_main_d256(const BwdProblem& a, const float* delta, void* stream);
const char* launch_bwd_main_d192(const BwdProblem& a, const float* delta, void* stream);
// The v2 pair (sdpa_bwd_v2_d<N>.cu).
const char* launch_bwd_v2_d64(const BwdProblem& a, const float* delta, void* stream);
const char* launch_bwd_v2_d128(const BwdProblem& a, const float* delta, void* stream);

}  // namespace opendnn::cuda::sdpa
