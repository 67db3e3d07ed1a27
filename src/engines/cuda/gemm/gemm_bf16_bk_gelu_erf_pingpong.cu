// SPDX-License-Identifier: Apache-2.0
// bf16 GEMM, column-major (K-contiguous) B, pingpong 128x128x64, epilogue activation gelu_erf: where
// one warpgroup's epilogue hides under the other's MMA, a heavy activation gains the most.
#include "engines/cuda/gemm/gemm_sm90.cuh"

OPENDNN_GEMM_KERNEL(BF16, true, GELU_ERF, PINGPONG)
