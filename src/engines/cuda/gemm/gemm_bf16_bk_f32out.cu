// SPDX-License-Identifier: Apache-2.0
// bf16 GEMM, column-major (K-contiguous) B, cooperative 128x256x64, fp32 output (and fp32 residual): fp32
// logits without a separate cast. One kernel for every epilogue, the activation a run-time switch.
#include "engines/cuda/gemm/gemm_sm90.cuh"

OPENDNN_GEMM_KERNEL_VARIANT(BF16, true, RUNTIME, COOP, PLAIN, FP32)
