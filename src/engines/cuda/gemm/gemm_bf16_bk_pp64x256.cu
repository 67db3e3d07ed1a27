// SPDX-License-Identifier: Apache-2.0
// bf16 GEMM, column-major (K-contiguous) B, pingpong 64x256x64 (each consumer warpgroup on its own 64x256 tile,
// m64n256k16 wgmma), no activation. Opt-in, OPENDNN_GEMM_PP64X256=1 (passes CudaGemm.Pingpong64x256Plan).
#include "engines/cuda/gemm/gemm_sm90.cuh"

OPENDNN_GEMM_KERNEL(BF16, true, NONE, PINGPONG_64X256)
