// SPDX-License-Identifier: Apache-2.0
#include "opendnn/tensor.h"

#include <algorithm>
#include <atomic>

#include "common/checked_math.h"

namespace opendnn {

namespace {
std::atomic<uint64_t> g_edit_clock{0};
}  // namespace

uint64_t tensor_edit_clock() { return g_edit_clock.load(std::memory_order_acquire); }

void TensorAttr::stamp(const char* what) {
  edit_stamp_ = g_edit_clock.fetch_add(1, std::memory_order_acq_rel) + 1;
  last_edit_ = what;
}

int64_t TensorAttr::volume() const {
  int64_t v = 0;
  return cm::volume(dims_, v) ? v : -1;
}

int64_t TensorAttr::storage_elements() const {
  if (dims_.size() != strides_.size()) return -1;
  int64_t last = 0;
  bool empty = false;
  for (size_t i = 0; i < dims_.size(); ++i) {
    if (dims_[i] < 0 || strides_[i] < 0) return -1;
    if (dims_[i] == 0) empty = true;
  }
  if (empty) return 0;
  for (size_t i = 0; i < dims_.size(); ++i) {
    int64_t span = 0;
    if (!cm::mul(dims_[i] - 1, strides_[i], span) || !cm::add(last, span, last)) return -1;
  }
  int64_t n = 0;
  return cm::add(last, 1, n) ? n : -1;
}

int64_t TensorAttr::storage_bytes() const {
  int64_t n = storage_elements();
  if (n < 0) return -1;
  int64_t bits = 0, rounded = 0;
  if (!cm::mul(n, bits_of(dtype_), bits) || !cm::add(bits, 7, rounded)) return -1;
  return rounded / 8;
}

bool TensorAttr::is_packed_row_major() const { return strides_ == row_major_strides(dims_); }

bool TensorAttr::addresses_each_element_once() const {
  if (strides_.size() != dims_.size()) return false;
  if (volume() == 0) return true;
  std::vector<std::pair<int64_t, int64_t>> axes;  // (stride, dim) of the dims over 1
  for (size_t i = 0; i < dims_.size(); ++i)
    if (dims_[i] > 1) axes.push_back({strides_[i], dims_[i]});
  std::sort(axes.begin(), axes.end());
  int64_t covered = 1;  // elements spanned by the faster dims
  for (const auto& [stride, dim] : axes) {
    if (stride < covered) return false;
    if (!cm::mul(stride, dim, covered)) covered = INT64_MAX;
  }
  return true;
}

// Saturates at INT64_MAX on overflow (validation rejects such a tensor by its volume first).
std::vector<int64_t> row_major_strides(const std::vector<int64_t>& dims) {
  // Saturates at INT64_MAX: such a tensor's storage_elements() is then -1 and validation rejects it.
  std::vector<int64_t> s(dims.size(), 1);
  for (size_t i = dims.size(); i-- > 1;)
    if (!cm::mul(s[i], dims[i] > 0 ? dims[i] : 1, s[i - 1])) s[i - 1] = INT64_MAX;
  return s;
}

}  // namespace opendnn
