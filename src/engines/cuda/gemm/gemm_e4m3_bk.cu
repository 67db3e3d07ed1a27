// SPDX-License-Identifier: Apache-2.0
// fp8 e4m3 GEMM, column-major (K-contiguous) B, bf16 output, per-tensor scales; cooperative
// 128x128x128 with fp32 promotion of the accumulator.
#include "engines/cuda/gemm/gemm_sm90.cuh"

OPENDNN_GEMM_KERNEL(FP8_E4M3, true, NONE, COOP)
