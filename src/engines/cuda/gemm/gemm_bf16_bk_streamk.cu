// SPDX-License-Identifier: Apache-2.0
// bf16 GEMM, column-major (K-contiguous) B, cooperative 128x256x64 with a 2x1 cluster like gemm_bf16_bk_none.cu,
// under CUTLASS's stream-K scheduler: the tiles of a last, partial wave are split along K over the idle SMs
// (8192^3 is 2048 tiles, 15.5 waves of 132). UNVERIFIED on a GPU: opt-in, OPENDNN_GEMM_STREAMK=1.
#include "engines/cuda/gemm/gemm_sm90.cuh"

OPENDNN_GEMM_KERNEL(BF16, true, NONE, COOP_STREAMK)
