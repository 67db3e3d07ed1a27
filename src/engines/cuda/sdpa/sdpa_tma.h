// SPDX-License-Identifier: Apache-2.0
// TMA descriptors of [B, H, S, D] token tensors, shared by the SDPA forward v2 and backward v4 host
// sides. The driver's encoder is reached through the runtime, so the library does not link the driver.
#pragma once

#include <cstdint>

#include "engines/cuda/sdpa/sdpa_common.h"

namespace opendnn::cuda::sdpa {

// True when the driver offers cuTensorMapEncodeTiled (looked up once).
bool tma_encoder_available();

// Encodes `t` into `map` (a CUtensorMap, 128 bytes) as the 4-D view (d, s, h, b) in boxes of (cols, rows):
// swizzled shared-memory tiles are column blocks of `cols` 16-bit elements (one swizzle span: 128 bytes,
// or 64) stacked down the rows. Rows at or past `seq` read as zeros. Returns an error or nullptr.
const char* encode_token_view(void* map, const TokenTensor& t, int64_t b, int64_t heads, int64_t seq, int64_t d,
                              int cols, int rows, bool fp16);

}  // namespace opendnn::cuda::sdpa
