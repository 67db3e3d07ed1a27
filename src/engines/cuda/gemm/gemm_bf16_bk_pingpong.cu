// SPDX-License-Identifier: Apache-2.0
// bf16 GEMM, column-major (K-contiguous) B, pingpong 128x128x64, no activation (bias, scale and
// residual only): the second tile configuration, next to the cooperative 128x256.
#include "engines/cuda/gemm/gemm_sm90.cuh"

OPENDNN_GEMM_KERNEL(BF16, true, NONE, PINGPONG)
