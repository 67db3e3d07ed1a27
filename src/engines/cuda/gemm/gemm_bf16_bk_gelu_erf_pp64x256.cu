// SPDX-License-Identifier: Apache-2.0
// bf16 GEMM, column-major (K-contiguous) B, pingpong 64x256x64, epilogue activation gelu_erf: the fused bias+GELU
// of gemm_bf16_bk_gelu_erf_pingpong.cu in the wider tile. Opt-in, OPENDNN_GEMM_PP64X256=1 (passes CudaGemm.Pingpong64x256Plan).
#include "engines/cuda/gemm/gemm_sm90.cuh"

OPENDNN_GEMM_KERNEL(BF16, true, GELU_ERF, PINGPONG_64X256)
