// SPDX-License-Identifier: Apache-2.0
#include "engines/cuda/sdpa/sdpa_tma.h"

#include <cuda.h>
#include <cuda_runtime.h>

namespace opendnn::cuda::sdpa {
namespace {

using EncodeTiled = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                                 const cuuint64_t*, const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave,
                                 CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

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

}  // namespace

bool tma_encoder_available() { return encode_tiled() != nullptr; }

const char* encode_token_view(void* map, const TokenTensor& t, int64_t b, int64_t heads, int64_t seq, int64_t d,
                              int cols, int rows, bool fp16) {
  EncodeTiled fn = encode_tiled();
  if (!fn) return "cuTensorMapEncodeTiled is not available from the driver";
  const cuuint64_t dims[4] = {cuuint64_t(d), cuuint64_t(seq), cuuint64_t(heads), cuuint64_t(b)};
  const cuuint64_t strides[3] = {cuuint64_t(t.stride[2]) * 2, cuuint64_t(t.stride[1]) * 2, cuuint64_t(t.stride[0]) * 2};
  const cuuint32_t box[4] = {cuuint32_t(cols), cuuint32_t(rows), 1, 1};
  const cuuint32_t elem[4] = {1, 1, 1, 1};
  const CUtensorMapSwizzle sw = cols * 2 == 128 ? CU_TENSOR_MAP_SWIZZLE_128B : CU_TENSOR_MAP_SWIZZLE_64B;
  CUresult r = fn(static_cast<CUtensorMap*>(map), fp16 ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16 : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16,
                  4, t.ptr, dims, strides, box, elem, CU_TENSOR_MAP_INTERLEAVE_NONE, sw, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                  CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  return r == CUDA_SUCCESS ? nullptr : "cuTensorMapEncodeTiled rejected a Q/K/V view (pointer or strides)";
}

}  // namespace opendnn::cuda::sdpa
