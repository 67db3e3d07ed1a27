// SPDX-License-Identifier: Apache-2.0
// fp8 e4m3 GEMM like gemm_e4m3_bk.cu but 128x256x128 and without fp32 promotion (the wgmma
// accumulator only): the faster, less exact alternative plan.
#include "engines/cuda/gemm/gemm_sm90.cuh"

OPENDNN_GEMM_KERNEL(FP8_E4M3, true, NONE, FAST_ACCUM)
