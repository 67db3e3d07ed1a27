// SPDX-License-Identifier: Apache-2.0
// RMSNorm and LayerNorm kernels for Hopper, forward (training/inference) and backward.
// Rows are independent; each row of `cols` elements is normalised. X, Y, DY, DX are packed rows;
// scale/bias/dscale/dbias are packed [cols]; mean/inv_variance are fp32 [rows].
#pragma once

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

// Workspace the backward pass needs for its deterministic column reduction.
int64_t backward_workspace_bytes(const BwdArgs& a, int sm_count);

// Launch on `stream` (a cudaStream_t). Returns a CUDA error string or nullptr.
const char* launch_forward(const FwdArgs& a, void* stream);
const char* launch_backward(const BwdArgs& a, void* workspace, int sm_count, void* stream);

}  // namespace opendnn::cuda::norm
