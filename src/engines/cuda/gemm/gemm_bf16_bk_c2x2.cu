// SPDX-License-Identifier: Apache-2.0
// bf16 GEMM, column-major (K-contiguous) B, cooperative 128x256x64, no activation, with a 2x2 cluster: A and B
// tiles both multicast, a quarter fewer L2-to-SM bytes than the 2x1 cluster. UNVERIFIED on a GPU: opt-in,
// OPENDNN_GEMM_C2X2=1.
#include "engines/cuda/gemm/gemm_sm90.cuh"

OPENDNN_GEMM_KERNEL(BF16, true, NONE, COOP_C2X2)
