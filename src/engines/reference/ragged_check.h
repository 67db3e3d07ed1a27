// SPDX-License-Identifier: Apache-2.0
// Range check of per-batch offsets into a tensor (ragged offsets of THD layouts, and token-packed
// starts such as cu_seq_len * token stride): batch b of a [B, ...] tensor starts at offsets[b] and
// spans dims[1..] with their strides, so every offsets[b] (b < B) must lie in
// [0, storage_elements - span]. Values outside would make a kernel read or write outside the
// tensor's storage. Used by the reference engine before its kernels read offsets, and by the tool.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "common/dtype_convert.h"
#include "opendnn/node.h"
#include "opendnn/types.h"

namespace opendnn::ref {

// The largest start offset at which one batch entry (dims[1..], strides[1..]) still fits in the
// storage of a tensor of `dims`/`strides`; -1 for an empty or malformed tensor.
inline int64_t max_batch_start(const std::vector<int64_t>& dims, const std::vector<int64_t>& strides) {
  if (dims.empty() || dims.size() != strides.size()) return -1;
  int64_t storage_last = 0, batch_last = 0;  // highest element offset: of the tensor, of one batch entry
  for (size_t i = 0; i < dims.size(); ++i) {
    if (dims[i] <= 0 || strides[i] < 0) return -1;
    int64_t span;
    if (__builtin_mul_overflow(dims[i] - 1, strides[i], &span) || __builtin_add_overflow(storage_last, span, &storage_last))
      return -1;
    if (i > 0) batch_last += span;  // no overflow: bounded by storage_last
  }
  return storage_last - batch_last;
}

// Checks offsets[b] * scale for b < count (the offsets are `count` elements of `type`, packed).
// Returns "" when all are in range, else what is wrong, e.g.
// "offset 9000 of batch 1 is out of range: batch entries of Q start in [0, 4096]".
inline std::string batch_offsets_error(const std::vector<int64_t>& dims, const std::vector<int64_t>& strides,
                                       const char* tensor, const void* offsets, DataType type, int64_t count,
                                       int64_t scale = 1) {
  const int64_t limit = max_batch_start(dims, strides);
  if (limit < 0) return {};  // an empty tensor: nothing is addressed
  if (!offsets) return std::string("the offsets of ") + tensor + " have no data";
  for (int64_t b = 0; b < count; ++b) {
    double v = load_element(type, offsets, b);
    int64_t start;
    bool bad = !(v >= 0 && v <= double(limit)) || __builtin_mul_overflow(int64_t(v), scale, &start) || start > limit;
    if (bad) {
      char value[32];
      std::snprintf(value, sizeof value, "%.17g", v);
      return std::string("offset ") + value + (scale != 1 ? " (x" + std::to_string(scale) + ")" : std::string()) +
             " of batch " + std::to_string(b) + " is out of range: batch entries of " + tensor + " start in [0, " +
             std::to_string(limit) + "]";
    }
  }
  return {};
}

// Only the SDPA ops address tensors through ragged offsets (THD layout); every other kernel would
// read its tensors as dense and the offsets as extra inputs. "" when n has no ragged tensor or reads
// them, else what is wrong.
inline std::string ragged_port_error(const Node& n) {
  switch (n.kind()) {
    case OpKind::SDPA:
    case OpKind::SDPA_BACKWARD:
    case OpKind::SDPA_FP8:
    case OpKind::SDPA_FP8_BACKWARD: return {};
    default: break;
  }
  for (const auto* ports : {&n.inputs(), &n.outputs()})
    for (const auto& t : *ports)
      if (t && t->get_ragged_offset())
        return "tensor \"" + t->get_name() + "\" has a ragged offset, which only the SDPA ops read (THD layout)";
  return {};
}

}  // namespace opendnn::ref
