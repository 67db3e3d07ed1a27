// SPDX-License-Identifier: Apache-2.0
// bf16 GEMM, column-major (K-contiguous) B, cooperative 128x256x64, epilogue activation gelu_tanh.
#include "engines/cuda/gemm/gemm_sm90.cuh"

OPENDNN_GEMM_KERNEL(BF16, true, GELU_TANH, COOP)
