// SPDX-License-Identifier: Apache-2.0
// RMSNorm and LayerNorm kernels for Hopper, forward (training/inference) and backward.
// Rows are independent; each row of `cols` elements is normalised. X, Y, DY, DX are packed rows;
// scale/bias/dscale/dbias are packed [cols]; mean/inv_variance are fp32 [rows].
#pragma once

#include <cstddef>
#include <cstdint>

#include "opendnn/types.h"

namespace opendnn::cuda::norm {

enum class Kind { RMS, LAYER };

struct FwdArgs {
  Kind kind;
  DataType x_type, w_type;  // x/y share x_type; scale/bias share w_type
  int64_t rows, cols;
  const void* x;
  const void* scale;
  const void* bias;     // may be null (RMS without bias)
  void* y;
  float* mean;          // LAYER training only; may be null
  float* inv_variance;  // may be null (inference)
  float epsilon;
};

struct BwdArgs {
  Kind kind;
  DataType x_type, w_type;
  int64_t rows, cols;
  const void* dy;
  const void* x;
  const void* scale;
  const float* mean;          // LAYER only
  const float* inv_variance;
  void* dx;
  void* dscale;
  void* dbias;                // may be null
};

bool supported_type(DataType t);
// Largest hidden size the kernels take.
inline constexpr int64_t kMaxCols = 16384;

// A launch chosen once, when a plan is built (the backward's queries the device); execute only
// launches.
struct Launch {
  const void* kernel = nullptr;  // null: no kernel for these types/shape
  int threads = 0, stages = 0, grid = 0;  // stages: the backward's ring depth (0 for the forward)
  size_t smem = 0;                        // the backward's ring (0 for the forward)
  // Backward v2 (register rows): row slots per CTA and threads per row; v3 (TMA ring): threads
  // per team in tpr.
  int slots = 0, tpr = 0;
  int version = 1;  // backward: 1 ring, 2 register rows, 3 TMA ring; forward: 1, 2 narrow CTAs
};
// narrow: rows of 129-512 vectors on 128 threads (opt-in, OPENDNN_NORM_FWD_NARROW=1, read by the
// adapter); Launch::version is 2 where it applies.
Launch plan_forward(const FwdArgs& a, bool narrow = false);
// version 2: the register-row backward (opt-in, OPENDNN_NORM_BWD_V2=1); 3: the TMA-ring backward (the
// adapter's default for 16-bit rows of 257-512 vectors, OPENDNN_NORM_BWD_V3=1 everywhere it fits). Rows too wide for them (fp32 past
// 8192) get the ring kernel (version 1) anyway; Launch::version says which one runs.
Launch plan_backward(const BwdArgs& a, int sm_count, int version = 1);

// Workspace the backward pass needs for its deterministic column reduction.
int64_t backward_workspace_bytes(const BwdArgs& a, const Launch& l);

// Launch on `stream` (a cudaStream_t). Returns an error string or nullptr.
const char* launch_forward(const FwdArgs& a, const Launch& l, void* stream);
const char* launch_backward(const BwdArgs& a, const Launch& l, void* workspace, void* stream);

}  // namespace opendnn::cuda::norm
