// SPDX-License-Identifier: Apache-2.0
// bf16 GEMM, column-major (K-contiguous) B, cooperative 256x128x64 (each consumer warpgroup 128x128), no
// activation: the tile cuBLAS tends to pick for large bf16 problems on Hopper, next to our 128x256.
#include "engines/cuda/gemm/gemm_sm90.cuh"

OPENDNN_GEMM_KERNEL(BF16, true, NONE, COOP_M256)
