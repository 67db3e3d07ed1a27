// SPDX-License-Identifier: Apache-2.0
// bf16 GEMM, column-major (K-contiguous) B, pingpong 128x128x64, gated epilogue silu(alpha * acc + bias) * up:
// the gate projection of a SwiGLU MLP with the up projection's result read as the epilogue's source.
#include "engines/cuda/gemm/gemm_sm90.cuh"

OPENDNN_GEMM_KERNEL_VARIANT(BF16, true, SILU, PINGPONG, GATED, NATIVE)
