// SPDX-License-Identifier: Apache-2.0
// fp8 e4m3 GEMM like gemm_e4m3_bk.cu (cooperative 128x128x128, fp32 promotion, bf16 output) that also
// reduces MATMUL_FP8's amax_C, max |descale_A * descale_B * acc|, into one fp32.
#include "engines/cuda/gemm/gemm_sm90.cuh"

OPENDNN_GEMM_KERNEL_VARIANT(FP8_E4M3, true, NONE, COOP, AMAX, NATIVE)
