// SPDX-License-Identifier: Apache-2.0
// Host side of SDPA backward v4 (sdpa_bwd_v2.cuh, and d256 v4 in sdpa_bwd_v2_d256.cuh): the TMA
// descriptors of Q, dO (streamed 64-row tiles) and K, V (the CTA's resident 128-row tiles, 64 at d256),
// and which problems they can describe.
#include <cuda.h>
#include <cuda_runtime.h>

#include "engines/cuda/sdpa/sdpa_bwd_kernels.h"
#include "engines/cuda/sdpa/sdpa_tma.h"

namespace opendnn::cuda::sdpa {

static_assert(sizeof(CUtensorMap) == sizeof(BwdV4Descs::bytes[0]), "CUtensorMap is 128 bytes");

bool bwd_v4_available() { return tma_encoder_available(); }

const char* bwd_v4_encode(const BwdProblem& a, BwdV4Descs& d) {
  const Problem& p = a.p;
  // One descriptor covers every batch only when all have the full lengths and plain strides: padded
  // rows of per-batch lengths must read as zeros (v2 zero-fills them), which a 4-D view cannot do.
  if (p.seq_len_q.ptr || p.seq_len_kv.ptr || p.cu_q.ptr || p.cu_kv.ptr) return "per-batch lengths";
  if (p.q.ragged.ptr || p.k.ragged.ptr || p.v.ragged.ptr || a.dout.ragged.ptr) return "ragged (THD) layouts";
  if (p.d_qk != p.d_v || (p.d_qk != 64 && p.d_qk != 128 && p.d_qk != 256)) return "head dims";
  if (p.sq >= (int64_t(1) << 31) || p.skv >= (int64_t(1) << 31)) return "sequences of 2^31 rows";
  auto* m = reinterpret_cast<CUtensorMap*>(d.bytes);
  // Resident K/V tiles use 64-byte swizzle atoms at d64 (sdpa_bwd_v2.cuh, Config::ResAtomK); d256 v4
  // (sdpa_bwd_v2_d256.cuh) keeps 64 key rows.
  const int res_cols = p.d_qk >= 128 ? 64 : 32, res_rows = p.d_qk == 256 ? 64 : 128;
  if (const char* e = encode_token_view(m + 0, p.q, p.b, p.hq, p.sq, p.d_qk, 64, 64, p.fp16)) return e;
  if (const char* e = encode_token_view(m + 1, a.dout, p.b, p.hq, p.sq, p.d_v, 64, 64, p.fp16)) return e;
  if (const char* e = encode_token_view(m + 2, p.k, p.b, p.hk, p.skv, p.d_qk, res_cols, res_rows, p.fp16)) return e;
  return encode_token_view(m + 3, p.v, p.b, p.hv, p.skv, p.d_v, res_cols, res_rows, p.fp16);
}

}  // namespace opendnn::cuda::sdpa
