// SPDX-License-Identifier: Apache-2.0
// Host side of SDPA backward v4 (sdpa_bwd_v2.cuh): the TMA descriptors of Q, dO (streamed 64-row
// tiles) and K, V (the CTA's resident 128-row tiles), and which problems they can describe.
#include <cuda.h>
#include <cuda_runtime.h>

#include "engines/cuda/sdpa/sdpa_bwd_kernels.h"

namespace opendnn::cuda::sdpa {
namespace {

using EncodeTiled = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                                 const cuuint64_t*, const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave,
                                 CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

// Looked up once through the runtime (the library does not link the driver).
EncodeTiled encode_tiled() {
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

// t as the 4-D view (d, s, h, b) in boxes of (cols, rows): the kernel's swizzled shared-memory tiles
// are column blocks of `cols` (one swizzle span: 128 bytes, or 64 at d64's resident tiles) stacked
// down the rows. Rows at or past `seq` read as zeros, which is what the kernel's masks assume.
const char* encode(CUtensorMap* m, const TokenTensor& t, int64_t b, int64_t heads, int64_t seq, int64_t d, int cols,
                   int rows, bool fp16) {
  EncodeTiled fn = encode_tiled();
  if (!fn) return "cuTensorMapEncodeTiled is not available from the driver";
  const cuuint64_t dims[4] = {cuuint64_t(d), cuuint64_t(seq), cuuint64_t(heads), cuuint64_t(b)};
  const cuuint64_t strides[3] = {cuuint64_t(t.stride[2]) * 2, cuuint64_t(t.stride[1]) * 2, cuuint64_t(t.stride[0]) * 2};
  const cuuint32_t box[4] = {cuuint32_t(cols), cuuint32_t(rows), 1, 1};
  const cuuint32_t elem[4] = {1, 1, 1, 1};
  const CUtensorMapSwizzle sw = cols * 2 == 128 ? CU_TENSOR_MAP_SWIZZLE_128B : CU_TENSOR_MAP_SWIZZLE_64B;
  CUresult r = fn(m, fp16 ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16 : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 4, t.ptr, dims, strides,
                  box, elem, CU_TENSOR_MAP_INTERLEAVE_NONE, sw, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                  CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  return r == CUDA_SUCCESS ? nullptr : "cuTensorMapEncodeTiled rejected a view (pointer or strides)";
}

}  // namespace

static_assert(sizeof(CUtensorMap) == sizeof(BwdV4Descs::bytes[0]), "CUtensorMap is 128 bytes");

bool bwd_v4_available() { return encode_tiled() != nullptr; }

const char* bwd_v4_encode(const BwdProblem& a, BwdV4Descs& d) {
  const Problem& p = a.p;
  // One descriptor covers every batch only when all have the full lengths and plain strides: padded
  // rows of per-batch lengths must read as zeros (v2 zero-fills them), which a 4-D view cannot do.
  if (p.seq_len_q.ptr || p.seq_len_kv.ptr || p.cu_q.ptr || p.cu_kv.ptr) return "per-batch lengths";
  if (p.q.ragged.ptr || p.k.ragged.ptr || p.v.ragged.ptr || a.dout.ragged.ptr) return "ragged (THD) layouts";
  if (p.d_qk != p.d_v || (p.d_qk != 64 && p.d_qk != 128)) return "head dims";
  if (p.sq >= (int64_t(1) << 31) || p.skv >= (int64_t(1) << 31)) return "sequences of 2^31 rows";
  auto* m = reinterpret_cast<CUtensorMap*>(d.bytes);
  // Resident K/V tiles use 64-byte swizzle atoms at d64 (sdpa_bwd_v2.cuh, Config::ResAtomK).
  const int res_cols = p.d_qk == 128 ? 64 : 32;
  if (const char* e = encode(m + 0, p.q, p.b, p.hq, p.sq, p.d_qk, 64, 64, p.fp16)) return e;
  if (const char* e = encode(m + 1, a.dout, p.b, p.hq, p.sq, p.d_v, 64, 64, p.fp16)) return e;
  if (const char* e = encode(m + 2, p.k, p.b, p.hk, p.skv, p.d_qk, res_cols, 128, p.fp16)) return e;
  return encode(m + 3, p.v, p.b, p.hv, p.skv, p.d_v, res_cols, 128, p.fp16);
}

}  // namespace opendnn::cuda::sdpa
