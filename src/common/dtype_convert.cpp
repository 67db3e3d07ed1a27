// SPDX-License-Identifier: Apache-2.0
// Exact conversions between opendnn data types and double.
//
// Every floating format is decoded exactly to double and encoded from double in one step with
// round-to-nearest-even (no intermediate float, so no double rounding). Conventions:
//   HALF, BFLOAT16   IEEE-style: overflow rounds to +-inf; NaN stores the canonical quiet NaN
//                    (sign kept): 0x7e00 / 0x7fc0.
//   FP8_E4M3         the "fn" variant (no infinities, max 448, NaN = 0x7f/0xff). A finite value that
//                    rounds above 448 saturates to +-448 (like CUDA's __NV_SATFINITE); +-inf and NaN
//                    store NaN (0x7f / 0xff, sign kept).
//   FP8_E5M2         IEEE-style with infinities (max 57344); overflow rounds to +-inf; NaN = 0x7f/0xff.
//   FP8_E8M0         unsigned power of two 2^(e-127), e in [0, 254]; 0xff is NaN. Encoding rounds the
//                    exponent *up* (ceil(log2|v|)), so a scale never underestimates; |v| is used (the
//                    sign is dropped), 0 and values below 2^-127 store 0x00 (2^-127), finite values
//                    above 2^127 saturate to 0xfe, inf and NaN store 0xff.
//   FP4_E2M1         values {0, .5, 1, 1.5, 2, 3, 4, 6} with sign, two per byte, the even element in
//                    the low nibble. Out-of-range values (inf included) saturate to +-6; NaN has no
//                    encoding and stores +6 (0x7). The nibble store is atomic against a concurrent
//                    store to the other nibble of the same byte, so kernels may parallelise freely.
//   FLOAT, DOUBLE    the C++ conversion (RNE under the default rounding mode).
//   INT8/UINT8/INT32/INT64  truncation toward zero, saturating to the type's range; NaN stores 0.
//   BOOLEAN          one byte, 0 or 1: stores v != 0 (NaN is true); loads byte != 0.
#include "common/dtype_convert.h"

#include <cmath>
#include <cstring>
#include <limits>

namespace opendnn {
namespace {

// Round a non-negative double (< 2^52) to an integral value, ties to even, independent of the
// floating-point environment's rounding mode.
inline double rne(double x) {
  double f = std::floor(x);
  double d = x - f;  // exact
  if (d > 0.5 || (d == 0.5 && std::fmod(f, 2.0) != 0.0)) f += 1.0;
  return f;
}

enum class Overflow : uint8_t { kInf, kSaturate };

struct Format {
  int ebits;
  int mbits;
  int bias;
  uint32_t max_finite;  // magnitude bit pattern of the largest finite value
  uint32_t inf;         // magnitude bit pattern of infinity (kInf formats)
  Overflow overflow;
};

// IEEE-style: the all-ones exponent holds inf (mantissa 0) and NaN.
constexpr Format kHalf = {5, 10, 15, 0x7bff, 0x7c00, Overflow::kInf};
constexpr Format kBf16 = {8, 7, 127, 0x7f7f, 0x7f80, Overflow::kInf};
constexpr Format kE5M2 = {5, 2, 15, 0x7b, 0x7c, Overflow::kInf};
// E4M3fn: exponent 15 is finite except mantissa 7 (NaN).
constexpr Format kE4M3 = {4, 3, 7, 0x7e, 0, Overflow::kSaturate};
constexpr Format kE2M1 = {2, 1, 1, 0x7, 0, Overflow::kSaturate};

// Magnitude bit pattern for finite a > 0 with RNE; returns max_finite + 1 or more on overflow
// (the caller maps it).
uint64_t encode_magnitude(double a, const Format& f) {
  int ex = 0;
  std::frexp(a, &ex);  // a = m * 2^ex, m in [0.5, 1)
  int64_t e = int64_t(ex) - 1;  // a in [2^e, 2^(e+1))
  const int64_t emin = 1 - f.bias;
  const int64_t emax_field = (int64_t(1) << f.ebits) - 1;
  if (e + f.bias > emax_field) return uint64_t(f.max_finite) + 1;  // far beyond range
  if (e < emin) e = emin;
  double scaled = std::ldexp(a, int(f.mbits - e));  // exact: a power-of-two scaling
  uint64_t q = uint64_t(rne(scaled));
  const uint64_t hidden = uint64_t(1) << f.mbits;
  if (q == 2 * hidden) {  // rounded up to the next binade
    ++e;
    q = hidden;
  }
  if (q < hidden) return q;  // subnormal (or zero), exponent field 0
  uint64_t ef = uint64_t(e + f.bias);
  return (ef << f.mbits) | (q - hidden);
}

uint32_t encode(double v, const Format& f, uint32_t nan_bits) {
  const uint32_t sign = std::signbit(v) ? (uint32_t(1) << (f.ebits + f.mbits)) : 0;
  if (std::isnan(v)) return sign | nan_bits;
  double a = std::fabs(v);
  if (a == 0.0) return sign;
  if (std::isinf(a)) {
    if (f.overflow == Overflow::kInf) return sign | f.inf;
    return sign | nan_bits;  // E4M3 stores NaN; E2M1 passes max_finite as its "nan" (saturates)
  }
  uint64_t mag = encode_magnitude(a, f);
  if (mag > f.max_finite) return sign | (f.overflow == Overflow::kInf ? f.inf : f.max_finite);
  return sign | uint32_t(mag);
}

double decode_ieee(uint32_t bits, const Format& f) {
  const uint32_t mmask = (uint32_t(1) << f.mbits) - 1;
  const uint32_t emask = (uint32_t(1) << f.ebits) - 1;
  const bool neg = (bits >> (f.ebits + f.mbits)) & 1;
  const uint32_t ef = (bits >> f.mbits) & emask;
  const uint32_t m = bits & mmask;
  double v;
  if (ef == 0) {
    v = std::ldexp(double(m), 1 - f.bias - f.mbits);
  } else if (ef == emask && f.overflow == Overflow::kInf) {
    v = m == 0 ? std::numeric_limits<double>::infinity() : std::numeric_limits<double>::quiet_NaN();
  } else {
    v = std::ldexp(double(m | (mmask + 1)), int(ef) - f.bias - f.mbits);
  }
  return neg ? -v : v;
}

template <class T>
T load_raw(const void* base, int64_t i) {
  T t;
  std::memcpy(&t, static_cast<const unsigned char*>(base) + i * int64_t(sizeof(T)), sizeof(T));
  return t;
}

template <class T>
void store_raw(void* base, int64_t i, T t) {
  std::memcpy(static_cast<unsigned char*>(base) + i * int64_t(sizeof(T)), &t, sizeof(T));
}

// Truncate toward zero and saturate to [lo, hi]; NaN -> 0.
template <class T>
T to_int(double v) {
  if (std::isnan(v)) return T(0);
  const double lo = double(std::numeric_limits<T>::min());
  // hi_excl is the first double above the range: 2^(digits) (exact as a double).
  const double hi_excl = std::ldexp(1.0, std::numeric_limits<T>::digits);
  if (v <= lo) return std::numeric_limits<T>::min();
  if (v >= hi_excl) return std::numeric_limits<T>::max();
  return T(std::trunc(v));
}

}  // namespace

double half_to_double(uint16_t bits) { return decode_ieee(bits, kHalf); }
uint16_t double_to_half(double v) { return uint16_t(encode(v, kHalf, 0x7e00)); }
double bf16_to_double(uint16_t bits) { return decode_ieee(bits, kBf16); }
uint16_t double_to_bf16(double v) { return uint16_t(encode(v, kBf16, 0x7fc0)); }

double fp8_e4m3_to_double(uint8_t bits) {
  if ((bits & 0x7f) == 0x7f) return std::numeric_limits<double>::quiet_NaN();
  return decode_ieee(bits, kE4M3);  // kSaturate: exponent 15 decodes as finite
}
uint8_t double_to_fp8_e4m3(double v) { return uint8_t(encode(v, kE4M3, 0x7f)); }

double fp8_e5m2_to_double(uint8_t bits) { return decode_ieee(bits, kE5M2); }
uint8_t double_to_fp8_e5m2(double v) { return uint8_t(encode(v, kE5M2, 0x7f)); }

double fp8_e8m0_to_double(uint8_t bits) {
  if (bits == 0xff) return std::numeric_limits<double>::quiet_NaN();
  return std::ldexp(1.0, int(bits) - 127);
}
uint8_t double_to_fp8_e8m0(double v) {
  if (std::isnan(v)) return 0xff;
  double a = std::fabs(v);
  if (std::isinf(a)) return 0xff;
  if (a == 0.0) return 0x00;
  int ex = 0;
  double m = std::frexp(a, &ex);  // a = m * 2^ex, m in [0.5, 1)
  int e = (m == 0.5) ? ex - 1 : ex;  // ceil(log2(a))
  if (e < -127) return 0x00;
  if (e > 127) return 0xfe;
  return uint8_t(e + 127);
}

double fp4_e2m1_to_double(uint8_t nibble) { return decode_ieee(nibble & 0xf, kE2M1); }
uint8_t double_to_fp4_e2m1(double v) {
  if (std::isnan(v)) return 0x7;
  return uint8_t(encode(v, kE2M1, 0x7));
}

double load_element(DataType t, const void* base, int64_t i) {
  switch (t) {
    case DataType::FLOAT: return double(load_raw<float>(base, i));
    case DataType::DOUBLE: return load_raw<double>(base, i);
    case DataType::HALF: return half_to_double(load_raw<uint16_t>(base, i));
    case DataType::BFLOAT16: return bf16_to_double(load_raw<uint16_t>(base, i));
    case DataType::FP8_E4M3: return fp8_e4m3_to_double(load_raw<uint8_t>(base, i));
    case DataType::FP8_E5M2: return fp8_e5m2_to_double(load_raw<uint8_t>(base, i));
    case DataType::FP8_E8M0: return fp8_e8m0_to_double(load_raw<uint8_t>(base, i));
    case DataType::FP4_E2M1: {
      uint8_t byte = static_cast<const uint8_t*>(base)[i >> 1];
      return fp4_e2m1_to_double((i & 1) ? uint8_t(byte >> 4) : uint8_t(byte & 0xf));
    }
    case DataType::INT8: return double(load_raw<int8_t>(base, i));
    case DataType::UINT8: return double(load_raw<uint8_t>(base, i));
    case DataType::INT32: return double(load_raw<int32_t>(base, i));
    case DataType::INT64: return double(load_raw<int64_t>(base, i));
    case DataType::BOOLEAN: return load_raw<uint8_t>(base, i) != 0 ? 1.0 : 0.0;
    case DataType::INT8x4: case DataType::UINT8x4: case DataType::INT8x32: case DataType::FAST_FLOAT_FOR_FP8:
    case DataType::INT4:
    case DataType::NOT_SET: break;
  }
  return std::numeric_limits<double>::quiet_NaN();
}

void store_element(DataType t, void* base, int64_t i, double v) {
  switch (t) {
    case DataType::FLOAT: store_raw<float>(base, i, float(v)); return;
    case DataType::DOUBLE: store_raw<double>(base, i, v); return;
    case DataType::HALF: store_raw<uint16_t>(base, i, double_to_half(v)); return;
    case DataType::BFLOAT16: store_raw<uint16_t>(base, i, double_to_bf16(v)); return;
    case DataType::FP8_E4M3: store_raw<uint8_t>(base, i, double_to_fp8_e4m3(v)); return;
    case DataType::FP8_E5M2: store_raw<uint8_t>(base, i, double_to_fp8_e5m2(v)); return;
    case DataType::FP8_E8M0: store_raw<uint8_t>(base, i, double_to_fp8_e8m0(v)); return;
    case DataType::FP4_E2M1: {
      uint8_t* p = static_cast<uint8_t*>(base) + (i >> 1);
      const int shift = (i & 1) ? 4 : 0;
      const uint8_t nib = uint8_t(double_to_fp4_e2m1(v) << shift);
      const uint8_t keep = uint8_t(~(0xf << shift));
      uint8_t old = __atomic_load_n(p, __ATOMIC_RELAXED);
      while (!__atomic_compare_exchange_n(p, &old, uint8_t((old & keep) | nib), true, __ATOMIC_RELAXED,
                                          __ATOMIC_RELAXED)) {
      }
      return;
    }
    case DataType::INT8: store_raw<int8_t>(base, i, to_int<int8_t>(v)); return;
    case DataType::UINT8: store_raw<uint8_t>(base, i, to_int<uint8_t>(v)); return;
    case DataType::INT32: store_raw<int32_t>(base, i, to_int<int32_t>(v)); return;
    case DataType::INT64: store_raw<int64_t>(base, i, to_int<int64_t>(v)); return;
    case DataType::BOOLEAN: store_raw<uint8_t>(base, i, uint8_t(v != 0.0 ? 1 : 0)); return;
    case DataType::INT8x4: case DataType::UINT8x4: case DataType::INT8x32: case DataType::FAST_FLOAT_FOR_FP8:
    case DataType::INT4:
    case DataType::NOT_SET: return;
  }
}

double round_to(DataType t, double v) {
  switch (t) {
    case DataType::FLOAT: return double(float(v));
    case DataType::DOUBLE: return v;
    case DataType::HALF: return half_to_double(double_to_half(v));
    case DataType::BFLOAT16: return bf16_to_double(double_to_bf16(v));
    case DataType::FP8_E4M3: return fp8_e4m3_to_double(double_to_fp8_e4m3(v));
    case DataType::FP8_E5M2: return fp8_e5m2_to_double(double_to_fp8_e5m2(v));
    case DataType::FP8_E8M0: return fp8_e8m0_to_double(double_to_fp8_e8m0(v));
    case DataType::FP4_E2M1: return fp4_e2m1_to_double(double_to_fp4_e2m1(v));
    case DataType::INT8: return double(to_int<int8_t>(v));
    case DataType::UINT8: return double(to_int<uint8_t>(v));
    case DataType::INT32: return double(to_int<int32_t>(v));
    case DataType::INT64: return double(to_int<int64_t>(v));
    case DataType::BOOLEAN: return v != 0.0 ? 1.0 : 0.0;
    case DataType::INT8x4: case DataType::UINT8x4: case DataType::INT8x32: case DataType::FAST_FLOAT_FOR_FP8:
    case DataType::INT4:
    case DataType::NOT_SET: break;
  }
  return v;
}

}  // namespace opendnn
