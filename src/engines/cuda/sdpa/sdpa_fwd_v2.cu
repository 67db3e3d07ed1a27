// SPDX-License-Identifier: Apache-2.0
// Host side of SDPA forward v2 (kernel: sdpa_fwd_v2.cuh): which problems it takes, the TMA
// descriptors, and the choice of head-dim instantiation.
#include <cuda.h>
#include <cuda_runtime.h>

#include "engines/cuda/sdpa/sdpa_fwd_v2.h"

namespace opendnn::cuda::sdpa {
namespace {

using EncodeTiled = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                                 const cuuint64_t*, const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave,
                                 CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

EncodeTiled encode_fn() {
  // Through the runtime, so the library does not link the driver; looked up once.
  static const EncodeTiled fn = [] {
    void* f = nullptr;
    cudaDriverEntryPointQueryResult q{};
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault, &q) != cudaSuccess ||
        q != cudaDriverEntryPointSuccess)
      f = nullptr;
    return reinterpret_cast<EncodeTiled>(f);
  }();
  return fn;
}

// A [B, H, S, D] tensor as the 4-D TMA view (d, s, h, b) with 128-byte swizzled boxes of
// (64, rows). Rows past S within a head read as zeros (never the next head's).
const char* encode(CUtensorMap* m, const TokenTensor& t, int64_t b, int64_t heads, int64_t seq, int64_t d, int rows,
                   bool fp16) {
  EncodeTiled fn = encode_fn();
  if (!fn) return "cuTensorMapEncodeTiled is not available from the driver";
  const cuuint64_t dims[4] = {cuuint64_t(d), cuuint64_t(seq), cuuint64_t(heads), cuuint64_t(b)};
  const cuuint64_t strides[3] = {cuuint64_t(t.stride[2]) * 2, cuuint64_t(t.stride[1]) * 2, cuuint64_t(t.stride[0]) * 2};
  const cuuint32_t box[4] = {cuuint32_t(kBoxCols), cuuint32_t(rows), 1, 1};
  const cuuint32_t elem[4] = {1, 1, 1, 1};
  CUresult r = fn(m, fp16 ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16 : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 4, t.ptr, dims, strides,
                  box, elem, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                  CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  return r == CUDA_SUCCESS ? nullptr : "cuTensorMapEncodeTiled rejected a Q/K/V view (pointer or strides)";
}

}  // namespace

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

const char* fwd_v2_encode(const Problem& p, FwdV2Descs& d) {
  const int kv_rows = fwd_v2_kv_rows(p.d_qk);
  auto* m = reinterpret_cast<CUtensorMap*>(d.bytes);
  if (const char* e = encode(m + 0, p.q, p.b, p.hq, p.sq, p.d_qk, 128, p.fp16)) return e;
  if (const char* e = encode(m + 1, p.k, p.b, p.hk, p.skv, p.d_qk, kv_rows, p.fp16)) return e;
  return encode(m + 2, p.v, p.b, p.hv, p.skv, p.d_v, kv_rows, p.fp16);
}

const char* launch_fwd_v2(const Problem& p, const FwdV2Descs& d, void* stream) {
  switch (p.d_qk) {
    case 64: return launch_fwd_v2_d64(p, d, stream);
    case 128: return launch_fwd_v2_d128(p, d, stream);
    case 256: return launch_fwd_v2_d256(p, d, stream);
    default: return "sdpa_fwd_v2: no kernel for this head dim";
  }
}

}  // namespace opendnn::cuda::sdpa
