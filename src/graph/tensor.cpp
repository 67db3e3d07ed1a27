// SPDX-License-Identifier: Apache-2.0
#include "opendnn/tensor.h"

#include <limits>

namespace opendnn {

namespace {
bool mul_overflows(int64_t a, int64_t b, int64_t& out) { return __builtin_mul_overflow(a, b, &out); }
}  // namespace

int64_t TensorAttr::volume() const {
  int64_t v = 1;
  for (int64_t d : dims_) {
    if (d < 0) return -1;
    if (mul_overflows(v, d, v)) return -1;
  }
  return v;
}

int64_t TensorAttr::storage_elements() const {
  if (dims_.size() != strides_.size()) return -1;
  int64_t last = 0;
  for (size_t i = 0; i < dims_.size(); ++i) {
    if (dims_[i] < 0 || strides_[i] < 0) return -1;
    if (dims_[i] == 0) return 0;
    int64_t span;
    if (mul_overflows(dims_[i] - 1, strides_[i], span) || __builtin_add_overflow(last, span, &last)) return -1;
  }
  int64_t count;
  return __builtin_add_overflow(last, int64_t(1), &count) ? -1 : count;
}

int64_t TensorAttr::storage_bytes() const {
  int64_t n = storage_elements();
  if (n < 0) return -1;
  int64_t bits;
  if (mul_overflows(n, bits_of(dtype_), bits)) return -1;
  return (bits + 7) / 8;
}

bool TensorAttr::is_packed_row_major() const { return strides_ == row_major_strides(dims_); }

std::vector<int64_t> row_major_strides(const std::vector<int64_t>& dims) {
  // Saturates at INT64_MAX: such a tensor's storage_elements() is then -1 and validation rejects it.
  std::vector<int64_t> s(dims.size(), 1);
  for (size_t i = dims.size(); i-- > 1;)
    if (mul_overflows(s[i], dims[i] > 0 ? dims[i] : 1, s[i - 1])) s[i - 1] = std::numeric_limits<int64_t>::max();
  return s;
}

}  // namespace opendnn
