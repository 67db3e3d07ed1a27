// SPDX-License-Identifier: Apache-2.0
// Launch API of the second SDPA forward kernel (sdpa_fwd_v2.cuh): TMA loads by a producer warp,
// two consumer warpgroups taking turns on the tensor cores. Common cases only (see
// fwd_v2_supports); the adapter offers it where it applies.
#pragma once

#include <string>

#include "engines/cuda/sdpa/sdpa_common.h"

namespace opendnn::cuda::sdpa {

// Three opaque TMA descriptors (CUtensorMap: Q, K, V), encoded on the host from a bound Problem.
struct alignas(64) FwdV2Descs {
  unsigned char bytes[3][128];
};

// TMA boxes are 64 columns (128 bytes, the swizzle span) wide; Q boxes are 128 rows, K/V boxes
// one key tile: 64 rows at d_qk 256 (registers and shared memory), 128 rows otherwise.
constexpr int kBoxCols = 64;
constexpr int fwd_v2_kv_rows(int64_t d_qk) { return d_qk == 256 ? 64 : 128; }

// The persistent schedule of the v2 kernel (OPENDNN_SDPA_FWD_PERSISTENT=1 or 2, see sdpa_fwd_v2.cuh):
// at most `ctas` CTAs (one an SM) take the (query block, head, batch) tiles from `counter`, a
// 4-byte word of the plan's workspace that the launch zeroes on the stream. Its Q descriptor has
// 64-row boxes (fwd_v2_encode's q_rows), one per consumer warpgroup. q_bufs 2: two Q buffers, the
// next tile's Q loaded during the current tile (d128: with a 2-stage K/V ring).
struct FwdV2Persistent {
  int* counter = nullptr;
  int ctas = 0;
  int q_bufs = 1;
};
constexpr int64_t kFwdV2PersistentWorkspace = 16;
constexpr int kFwdV2PersistentQRows = 64;
// "" when the persistent schedule runs a problem that fwd_v2_supports accepts, else the reason.
std::string fwd_v2_persistent_supports(const Problem& p);

// "" when the v2 kernel runs this problem, else the reason it does not ("not supported: ...").
std::string fwd_v2_supports(const Problem& p, const Slots& s);
// Encodes the descriptors for the pointers and strides of `p` (host only, about a microsecond
// each: no allocation, no device call). Returns an error string or nullptr (then the caller runs
// the first kernel instead: the pointers are not 16-byte aligned).
// q_rows: the rows of a Q box, 128 (the grid schedule) or kFwdV2PersistentQRows.
const char* fwd_v2_encode(const Problem& p, FwdV2Descs& d, int q_rows = 128);
// Launches on `stream` (a cudaStream_t) with descriptors encoded from the same pointers; with
// `persistent` (descriptors encoded with its q_rows) in the persistent schedule.
const char* launch_fwd_v2(const Problem& p, const FwdV2Descs& d, void* stream,
                          const FwdV2Persistent* persistent = nullptr);

// One per head-dim configuration (sdpa_fwd_v2_d*.cu); launch_fwd_v2 picks.
const char* launch_fwd_v2_d64(const Problem& p, const FwdV2Descs& d, const FwdV2Persistent* pers, void* stream);
const char* launch_fwd_v2_d128(const Problem& p, const FwdV2Descs& d, const FwdV2Persistent* pers, void* stream);
const char* launch_fwd_v2_d256(const Problem& p, const FwdV2Descs& d, const FwdV2Persistent* pers, void* stream);

}  // namespace opendnn::cuda::sdpa
