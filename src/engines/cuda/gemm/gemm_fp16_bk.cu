// SPDX-License-Identifier: Apache-2.0
// fp16 GEMM, column-major (K-contiguous) B, cooperative 128x256x64: one kernel for every epilogue, the activation a
// run-time switch (fp16 does not get a kernel per activation, to keep the build small).
#include "engines/cuda/gemm/gemm_sm90.cuh"

OPENDNN_GEMM_KERNEL(FP16, true, RUNTIME, COOP)
