// SPDX-License-Identifier: Apache-2.0
// Host side of SDPA forward v2 (kernel: sdpa_fwd_v2.cuh): which problems it takes, the TMA
// descriptors, and the choice of head-dim instantiation.
#include <cuda.h>
#include <cuda_runtime.h>

#include "engines/cuda/sdpa/sdpa_fwd_v2.h"
#include "engines/cuda/sdpa/sdpa_tma.h"

namespace opendnn::cuda::sdpa {

static_assert(sizeof(CUtensorMap) == sizeof(FwdV2Descs::bytes[0]), "CUtensorMap is 128 bytes");

std::string fwd_v2_supports(const Problem& p, const Slots& s) {
  const std::string no = "not supported by sdpa_fwd_v2: ";
  // 192/128 is not built: its instantiation compiles to a 1 KiB stack array and serialized
  // wgmma (ptxas C7520), so it stays on the first kernel until that is looked into.
  const bool dims_ok = p.d_qk == p.d_v && (p.d_qk == 64 || p.d_qk == 128 || p.d_qk == 256);
  if (!dims_ok) return no + "head dims other than 64, 128 and 256";
  if (p.seq_len_q.ptr || p.seq_len_kv.ptr || p.cu_q.ptr || p.cu_kv.ptr) return no + "per-batch lengths";
  if (p.q.ragged.ptr || p.k.ragged.ptr || p.v.ragged.ptr || p.o.ragged.ptr || p.lse_ragged.ptr)
    return no + "ragged (THD) layouts";
  if (p.sink) return no + "attention sinks";
  // The kernel needs a positive scale; a host value is checked at execute (else v1 runs).
  if (s.scale_device >= 0) return no + "a device attn_scale tensor";
  if (p.has_left) return no + "sliding windows";
  if (p.has_right && p.right != 0) return no + "right bounds other than 0 (causal)";
  if (p.b > 65535 || p.hq > 65535) return no + "more than 65535 batches or heads";
  if (p.sq > (int64_t(1) << 30) || p.skv > (int64_t(1) << 30)) return no + "sequences longer than 2^30";
  for (const TokenTensor* t : {&p.q, &p.k, &p.v, &p.o})
    for (int i = 0; i < 3; ++i)
      if (t->stride[i] % 8 || t->stride[i] <= 0) return no + "strides that are not positive multiples of 8 elements";
  return "";
}

std::string fwd_v2_persistent_supports(const Problem& p) {
  const std::string no = "not supported by the persistent sdpa_fwd_v2: ";
  // Its consumers at d256 (64x256 fp32 accumulators) spill with the few registers the tile loop
  // adds [ptxas -v]; the grid schedule keeps d256.
  if (p.d_v > 128) return no + "head dims over 128";
  // Tile ids are ints (query blocks x heads x batches, plus one grid).
  if ((p.sq + 127) / 128 * p.hq * p.b >= (int64_t(1) << 30)) return no + "more than 2^30 tiles";
  return "";
}

const char* fwd_v2_encode(const Problem& p, FwdV2Descs& d, int q_rows) {
  const int kv_rows = fwd_v2_kv_rows(p.d_qk);
  auto* m = reinterpret_cast<CUtensorMap*>(d.bytes);
  if (const char* e = encode_token_view(m + 0, p.q, p.b, p.hq, p.sq, p.d_qk, kBoxCols, q_rows, p.fp16)) return e;
  if (const char* e = encode_token_view(m + 1, p.k, p.b, p.hk, p.skv, p.d_qk, kBoxCols, kv_rows, p.fp16)) return e;
  return encode_token_view(m + 2, p.v, p.b, p.hv, p.skv, p.d_v, kBoxCols, kv_rows, p.fp16);
}

const char* launch_fwd_v2(const Problem& p, const FwdV2Descs& d, void* stream, const FwdV2Persistent* persistent) {
  switch (p.d_qk) {
    case 64: return launch_fwd_v2_d64(p, d, persistent, stream);
    case 128: return launch_fwd_v2_d128(p, d, persistent, stream);
    case 256: return launch_fwd_v2_d256(p, d, persistent, stream);
    default: return "sdpa_fwd_v2: no kernel for this head dim";
  }
}

}  // namespace opendnn::cuda::sdpa
