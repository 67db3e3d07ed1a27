// SPDX-License-Identifier: Apache-2.0
// bf16 GEMM, row-major (N-contiguous) B, cooperative 128x256x64, epilogue activation gelu_erf.
#include "engines/cuda/gemm/gemm_sm90.cuh"

OPENDNN_GEMM_KERNEL(BF16, false, GELU_ERF, COOP)
