// SPDX-License-Identifier: Apache-2.0
// The reference engine's blocked GEMM: C_b = alpha * A_b · B_b for a batch of problems, any data
// type, any layout. Accumulates in double (operands are converted to double while packing), rounds
// once when storing C. The micro-kernel is a register-blocked plain loop that the compiler vectorises;
// it is compiled three times (AVX-512, AVX2+FMA, baseline) and chosen at run time with
// __builtin_cpu_supports.
//
// Element (r, c) of operand X in batch b lives at  X.data[batch_off[b] + row_off[r] + col_off[c]]
// (element offsets in X.dtype), or is computed by X.fn(X.ctx, b, r, c) when fn is set (implicit
// operands such as im2col). The output works the same way (no fn).
#pragma once

#include <cstddef>
#include <cstdint>

#include "opendnn/types.h"

namespace opendnn::ref::gemm {

struct Operand {
  DataType dtype = DataType::FLOAT;
  const void* data = nullptr;
  const int64_t* row_off = nullptr;
  const int64_t* col_off = nullptr;
  const int64_t* batch_off = nullptr;  // null: every batch at offset 0
  double (*fn)(const void* ctx, int64_t batch, int64_t r, int64_t c) = nullptr;
  const void* ctx = nullptr;
};

struct Output {
  DataType dtype = DataType::FLOAT;
  void* data = nullptr;
  const int64_t* row_off = nullptr;
  const int64_t* col_off = nullptr;
  const int64_t* batch_off = nullptr;
};

struct Problem {
  int64_t batch = 1, M = 0, N = 0, K = 0;
  Operand a;  // M x K
  Operand b;  // K x N
  Output c;   // M x N
  double alpha = 1.0;       // D = alpha * A·B
  double out_scale = 1.0;   // C = round(D * out_scale)
  double* amax = nullptr;   // if set: max |D| over every element (before out_scale)
};

// Scratch the run needs (64-byte aligned base), for up to max_threads() threads.
int64_t scratch_bytes(int64_t M, int64_t N, int64_t K);
void run(const Problem& p, std::byte* scratch);

// Which micro-kernel run() uses: "avx512", "avx2" or "generic". OPENDNN_REF_GEMM=generic|avx2 forces
// a lesser one (for testing every path).
const char* isa();
// Switches to the best micro-kernel not above `name` ("avx512", "avx2", "generic"); returns the one
// chosen. For tests and benchmarks only (not thread-safe against a running GEMM).
const char* force_isa(const char* name);

}  // namespace opendnn::ref::gemm
