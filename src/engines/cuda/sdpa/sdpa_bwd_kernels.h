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
// cross-CTA ordering and no spin-waits (workspace is O(B*Hq*Sq)). The v2 kernels (sdpa_bwd_v2.cuh)
// instead fuse dQ into the dK/dV kernel by default, with a turn-ordered fp32 accumulation
// (workspace O(B*Hq*Sq*Dqk)) and a convert kernel.
#pragma once

#include <cstdint>

#include "engines/cuda/sdpa/sdpa_common.h"

namespace opendnn::cuda::sdpa {

struct BwdProblem {
  Problem p;  // Q, K, V, O, Stats, masks, lengths, scale (O and Stats are inputs here)
  TokenTensor dout, dq, dk, dv;
  // The wgmma kernels (sdpa_bwd_v2.cuh); only where bwd_v2_supported, or at d256
  // sdpa_bwd_v2_d256.cuh (always the fused schedule: v2_two_pass, v3 and v4 are ignored there).
  bool v2 = false;
  // v2 only: the earlier two-pass schedule (a separate dQ kernel recomputing S and dP) instead of
  // dQ accumulated by the dK/dV kernel (OPENDNN_SDPA_BWD_V2_TWO_PASS=1, read when building).
  bool v2_two_pass = false;
  // v2 fused schedule only: v3 (sdpa_bwd_v2.cuh: dQ added by one bulk reduction per warpgroup and
  // step, loads issued behind the first wgmma; default, OPENDNN_SDPA_BWD_V3=0 turns it off, read when building).
  bool v3 = false;
  // v2 fused schedule only: v4 (sdpa_bwd_v2.cuh: a TMA producer warp fills the Q/dO/LSE/D ring,
  // default, OPENDNN_SDPA_BWD_V4=0 turns it off, read when building); with v3 too, dQ writer warps do v3's bulk
  // dQ adds off the consumers' path.
  // Problems TMA cannot take (per-batch lengths, THD, unaligned pointers) run the fused kernel.
  bool v4 = false;
  // v4 only: the two consumer warpgroups take turns issuing their first GEMMs (OPENDNN_SDPA_BWD_V4_TURNS=0
  // turns it off).
  bool v4_turns = true;
  // d256 v2 only: early turns of the fused dQ (sdpa_bwd_v2_d256.cuh: the turn's release and wait off the
  // consumer warps' critical path); on under a right bound, OPENDNN_SDPA_BWD_D256_V2_EARLY_TURNS=0 / 1
  // forces them (read when building).
  bool d256_early_turns = true;
  // d256 v2 only: v4 of the d256 kernel (sdpa_bwd_v2_d256.cuh: TMA producer warp, mbarrier ring, dQ writer
  // warps with bulk reductions; default, OPENDNN_SDPA_BWD_D256_V4=0 turns it off, read when building). Problems TMA
  // cannot take run the d256 kernel without it; d256_early_turns does not apply to it.
  bool d256_v4 = false;
  // With sink_token: the gradient of the sink logits, [1,Hq,1,1] FLOAT (null when not requested). dQ, dK
  // and dV need nothing else, the sink being part of the Stats input.
  float* dsink = nullptr;
};

// v4's four TMA descriptors (CUtensorMap: Q, dO, K, V), encoded on the host from a bound problem.
struct alignas(64) BwdV4Descs {
  unsigned char bytes[4][128];
};
// Encodes `d` for v4 (host only, no device call); nullptr, or why v4 cannot take the problem.
const char* bwd_v4_encode(const BwdProblem& a, BwdV4Descs& d);
// Whether the driver offers the encoder; looks it up once (call when building a plan, so that
// execute finds it cached).
bool bwd_v4_available();

// Head-dim pairs (d_qk, d_v) the kernels are instantiated for.
bool bwd_dims_supported(int64_t d_qk, int64_t d_v);

// Head-dim pairs the v2 kernels (opt-in, OPENDNN_SDPA_BWD_V2=1) are instantiated for.
bool bwd_v2_supported(int64_t d_qk, int64_t d_v);

// Workspace: D (fp32 [B,Hq,Sq]); with fused_dq (v2's default schedule), also the dQ accumulation
// of bwd_v2_layout.
int64_t bwd_workspace_bytes(const Problem& p, bool fused_dq);

// Where v2's dQ accumulation lives in the workspace, after D: per (batch, query head, 64-row query
// tile) two int32 chain counters (one per half of the head dim), then fp32 dQ [B,Hq,Mt*64,Dqk].
struct BwdV2Layout {
  int64_t mt;                  // 64-row query tiles per head: ceil(Sq / 64)
  int64_t counters, dq;        // byte offsets into the workspace
  int64_t counter_bytes, end;  // bytes to clear before each run; total bytes
};
BwdV2Layout bwd_v2_layout(const Problem& p);

// Launch on `stream` (a cudaStream_t). Returns a CUDA error string or nullptr.
const char* launch_backward(const BwdProblem& a, void* workspace, void* stream);

// One head-dim instantiation each (sdpa_bwd_d<N>.cu): the dK/dV and dQ kernels.
const char* launch_bwd_main_d64(const BwdProblem& a, const float* delta, void* stream);
const char* launch_bwd_main_d128(const BwdProblem& a, const float* delta, void* stream);
const char* launch_bwd_main_d256(const BwdProblem& a, const float* delta, void* stream);
const char* launch_bwd_main_d192(const BwdProblem& a, const float* delta, void* stream);
// v2 (sdpa_bwd_v2_d<N>.cu); workspace: D, then (fused schedule) bwd_v2_layout.
const char* launch_bwd_v2_d64(const BwdProblem& a, void* workspace, void* stream);
const char* launch_bwd_v2_d128(const BwdProblem& a, void* workspace, void* stream);
// v2 at d_qk = d_v = 256 (sdpa_bwd_v2_d256.cuh; OPENDNN_SDPA_BWD_D256_V2=0 withholds it): BHSD at full lengths,
// no mask or causal; the workspace of the fused schedule (bwd_v2_layout).
const char* launch_bwd_v2_d256(const BwdProblem& a, void* workspace, void* stream);

}  // namespace opendnn::cuda::sdpa
