// SPDX-License-Identifier: Apache-2.0
// fp8 e4m3 GEMM, column-major (K-contiguous) B, bf16 output, per-tensor scales; pingpong 64x128x128 with fp32
// promotion of the accumulator (exact, like gemm_e4m3_bk.cu), each consumer warpgroup on its own tile.
// Opt-in, OPENDNN_GEMM_FP8_PINGPONG=1 (passes CudaGemm.Fp8E4m3Pingpong; slower than the
// cooperative exact plan: 1.58 ms at 8192^3 in gemm_sweep.json).
#include "engines/cuda/gemm/gemm_sm90.cuh"

OPENDNN_GEMM_KERNEL(FP8_E4M3, true, NONE, PINGPONG)
