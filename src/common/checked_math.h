// SPDX-License-Identifier: Apache-2.0
// Overflow-checked int64 arithmetic for dims, strides, paddings and sizes. Each helper returns false
// (leaving `out` unspecified) when the exact result does not fit in int64 or is undefined.
#pragma once

#include <cstdint>
#include <vector>

namespace opendnn::cm {

inline bool add(int64_t a, int64_t b, int64_t& out) { return !__builtin_add_overflow(a, b, &out); }
inline bool sub(int64_t a, int64_t b, int64_t& out) { return !__builtin_sub_overflow(a, b, &out); }
inline bool mul(int64_t a, int64_t b, int64_t& out) { return !__builtin_mul_overflow(a, b, &out); }
// Floor division for b > 0 (false for b <= 0).
inline bool div_floor(int64_t a, int64_t b, int64_t& out) {
  if (b <= 0) return false;
  out = a / b - ((a % b != 0) && (a < 0));
  return true;
}
// Ceiling division for a >= 0, b > 0 (false otherwise).
inline bool div_ceil(int64_t a, int64_t b, int64_t& out) {
  if (b <= 0 || a < 0) return false;
  out = a / b + (a % b != 0);
  return true;
}

// Product of dims; false for a negative dim or an overflow. A zero dim gives 0 (and no overflow check
// of the other factors is needed: the product is 0 whatever they are).
inline bool volume(const std::vector<int64_t>& dims, int64_t& out) {
  int64_t v = 1;
  bool zero = false;
  for (int64_t d : dims) {
    if (d < 0) return false;
    if (d == 0) zero = true;
  }
  if (zero) {
    out = 0;
    return true;
  }
  for (int64_t d : dims)
    if (!mul(v, d, v)) return false;
  out = v;
  return true;
}

}  // namespace opendnn::cm
