// SPDX-License-Identifier: Apache-2.0
// bf16 GEMM, column-major (K-contiguous) B, cooperative 128x256x64, no activation, with a 1x2 cluster: two N
// neighbours share (multicast) the A tile instead of two M neighbours the B tile. UNVERIFIED on a GPU: opt-in,
// OPENDNN_GEMM_C1X2=1.
#include "engines/cuda/gemm/gemm_sm90.cuh"

OPENDNN_GEMM_KERNEL(BF16, true, NONE, COOP_C1X2)
