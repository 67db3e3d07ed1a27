// SPDX-License-Identifier: Apache-2.0
// Exhaustive and hand-computed checks of the dtype conversions (src/common/dtype_convert.h).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "common/dtype_convert.h"

using namespace opendnn;

namespace {

const double kInf = std::numeric_limits<double>::infinity();
const double kNaN = std::numeric_limits<double>::quiet_NaN();

struct Codec {
  const char* name;
  int bits;
  double (*dec)(uint32_t);
  uint32_t (*enc)(double);
};

const Codec kCodecs[] = {
    {"half", 16, [](uint32_t b) { return half_to_double(uint16_t(b)); }, [](double v) { return uint32_t(double_to_half(v)); }},
    {"bf16", 16, [](uint32_t b) { return bf16_to_double(uint16_t(b)); }, [](double v) { return uint32_t(double_to_bf16(v)); }},
    {"e4m3", 8, [](uint32_t b) { return fp8_e4m3_to_double(uint8_t(b)); }, [](double v) { return uint32_t(double_to_fp8_e4m3(v)); }},
    {"e5m2", 8, [](uint32_t b) { return fp8_e5m2_to_double(uint8_t(b)); }, [](double v) { return uint32_t(double_to_fp8_e5m2(v)); }},
    {"e2m1", 4, [](uint32_t b) { return fp4_e2m1_to_double(uint8_t(b)); }, [](double v) { return uint32_t(double_to_fp4_e2m1(v)); }},
};

// The decoded non-negative finite values of a format, ascending, with their patterns.
std::vector<std::pair<double, uint32_t>> finite_positive(const Codec& c) {
  std::vector<std::pair<double, uint32_t>> v;
  uint32_t sign = 1u << (c.bits - 1);
  for (uint32_t b = 0; b < sign; ++b) {
    double d = c.dec(b);
    if (std::isfinite(d)) v.push_back({d, b});
  }
  return v;
}

}  // namespace

TEST(DtypeConvert, EveryPatternRoundTrips) {
  for (const Codec& c : kCodecs) {
    uint32_t n = 1u << c.bits;
    for (uint32_t b = 0; b < n; ++b) {
      double d = c.dec(b);
      if (std::isnan(d)) {
        EXPECT_TRUE(std::isnan(c.dec(c.enc(d)))) << c.name << " " << b;
        continue;
      }
      EXPECT_EQ(c.enc(d), b) << c.name << " pattern " << b << " value " << d;
    }
  }
}

TEST(DtypeConvert, MidpointsRoundToNearestEven) {
  // For every pair of adjacent finite values: the midpoint goes to the one with the even mantissa,
  // anything strictly inside goes to the nearer one. Catches double rounding (double->float->x).
  for (const Codec& c : kCodecs) {
    auto vals = finite_positive(c);
    for (size_t i = 0; i + 1 < vals.size(); ++i) {
      auto [lo, lob] = vals[i];
      auto [hi, hib] = vals[i + 1];
      double mid = (lo + hi) / 2;  // exact
      uint32_t even = (lob & 1) ? hib : lob;
      EXPECT_EQ(c.enc(mid), even) << c.name << " mid " << mid;
      EXPECT_EQ(c.enc(std::nextafter(mid, 0.0)), lob) << c.name << " below mid " << mid;
      EXPECT_EQ(c.enc(std::nextafter(mid, kInf)), hib) << c.name << " above mid " << mid;
      uint32_t sign = 1u << (c.bits - 1);
      EXPECT_EQ(c.enc(-mid), even | sign) << c.name << " -mid " << mid;
    }
  }
}

TEST(DtypeConvert, HandComputedHalf) {
  EXPECT_EQ(double_to_half(1.0), 0x3c00);
  EXPECT_EQ(double_to_half(-2.0), 0xc000);
  EXPECT_EQ(double_to_half(65504.0), 0x7bff);
  // 65520 is the midpoint between 65504 and 65536 (=inf in the extended format): ties-to-even -> inf.
  EXPECT_EQ(double_to_half(65520.0), 0x7c00);
  EXPECT_EQ(double_to_half(std::nextafter(65520.0, 0.0)), 0x7bff);
  EXPECT_EQ(double_to_half(1e10), 0x7c00);
  EXPECT_EQ(double_to_half(-kInf), 0xfc00);
  EXPECT_EQ(double_to_half(kNaN) & 0x7c00, 0x7c00);
  EXPECT_NE(double_to_half(kNaN) & 0x3ff, 0);
  // 1 + 2^-11 is the tie between 1 and 1+2^-10: even -> 1.0; 1 + 3*2^-11 -> 1 + 2^-9 (0x3c02).
  EXPECT_EQ(double_to_half(1.0 + std::ldexp(1.0, -11)), 0x3c00);
  EXPECT_EQ(double_to_half(1.0 + 3 * std::ldexp(1.0, -11)), 0x3c02);
  // Double rounding trap: 1 + 2^-11 + 2^-40 is above the tie (-> 0x3c01), but via float it would
  // become exactly the tie (-> 0x3c00).
  EXPECT_EQ(double_to_half(1.0 + std::ldexp(1.0, -11) + std::ldexp(1.0, -40)), 0x3c01);
  // Subnormals: smallest 2^-24, largest 0x3ff * 2^-24.
  EXPECT_EQ(double_to_half(std::ldexp(1.0, -24)), 0x0001);
  EXPECT_EQ(half_to_double(0x0001), std::ldexp(1.0, -24));
  EXPECT_EQ(half_to_double(0x03ff), 1023 * std::ldexp(1.0, -24));
  EXPECT_EQ(double_to_half(std::ldexp(1.0, -25)), 0x0000);                       // tie -> even (0)
  EXPECT_EQ(double_to_half(std::nextafter(std::ldexp(1.0, -25), 1.0)), 0x0001);  // above the tie
  EXPECT_EQ(double_to_half(3 * std::ldexp(1.0, -25)), 0x0002);                   // tie 1.5 -> 2
  EXPECT_EQ(double_to_half(-std::ldexp(1.0, -30)), 0x8000);                      // -0
  EXPECT_EQ(double_to_half(1023.5 * std::ldexp(1.0, -24)), 0x0400);              // rounds up into the normals
  EXPECT_EQ(half_to_double(0x7c00), kInf);
}

TEST(DtypeConvert, HandComputedBf16) {
  EXPECT_EQ(double_to_bf16(1.0), 0x3f80);
  EXPECT_EQ(double_to_bf16(1.0 + std::ldexp(1.0, -8)), 0x3f80);                            // tie -> even
  EXPECT_EQ(double_to_bf16(1.0 + 3 * std::ldexp(1.0, -8)), 0x3f82);                        // tie -> even (up)
  EXPECT_EQ(double_to_bf16(1.0 + std::ldexp(1.0, -8) + std::ldexp(1.0, -30)), 0x3f81);     // double rounding trap
  EXPECT_EQ(double_to_bf16(3.3895313892515355e38), 0x7f7f);                                // max bf16
  EXPECT_EQ(double_to_bf16(1e39), 0x7f80);
  EXPECT_EQ(bf16_to_double(0x0001), std::ldexp(1.0, -133));  // smallest subnormal
  EXPECT_EQ(double_to_bf16(std::ldexp(1.0, -134)), 0x0000);
  EXPECT_EQ(double_to_bf16(std::ldexp(3.0, -134)), 0x0002);  // tie 1.5 ulp -> 2
  EXPECT_EQ(double_to_bf16(std::ldexp(3.0, -135)), 0x0001);  // 0.75 ulp -> 1
}

TEST(DtypeConvert, Fp8) {
  // E4M3fn
  EXPECT_EQ(fp8_e4m3_to_double(0x7e), 448.0);
  EXPECT_TRUE(std::isnan(fp8_e4m3_to_double(0x7f)));
  EXPECT_TRUE(std::isnan(fp8_e4m3_to_double(0xff)));
  EXPECT_EQ(fp8_e4m3_to_double(0x78), 256.0);  // exponent 15 is finite
  EXPECT_EQ(fp8_e4m3_to_double(0x01), std::ldexp(1.0, -9));
  EXPECT_EQ(double_to_fp8_e4m3(448.0), 0x7e);
  EXPECT_EQ(double_to_fp8_e4m3(460.0), 0x7e);
  EXPECT_EQ(double_to_fp8_e4m3(1e6), 0x7e);   // saturate
  EXPECT_EQ(double_to_fp8_e4m3(-1e6), 0xfe);  // saturate
  EXPECT_EQ(double_to_fp8_e4m3(kInf) & 0x7f, 0x7f);  // inf -> NaN
  EXPECT_EQ(double_to_fp8_e4m3(kNaN) & 0x7f, 0x7f);
  EXPECT_EQ(double_to_fp8_e4m3(1.0), 0x38);
  EXPECT_EQ(double_to_fp8_e4m3(1.0625), 0x38);  // tie between 1 and 1.125 -> 1
  EXPECT_EQ(double_to_fp8_e4m3(1.1875), 0x3a);  // tie between 1.125 and 1.25 -> 1.25
  EXPECT_EQ(double_to_fp8_e4m3(std::ldexp(1.0, -10)), 0x00);  // tie with 0 -> 0
  EXPECT_EQ(double_to_fp8_e4m3(std::ldexp(3.0, -11)), 0x01);
  // E5M2
  EXPECT_EQ(fp8_e5m2_to_double(0x7b), 57344.0);
  EXPECT_EQ(fp8_e5m2_to_double(0x7c), kInf);
  EXPECT_EQ(fp8_e5m2_to_double(0xfc), -kInf);
  EXPECT_TRUE(std::isnan(fp8_e5m2_to_double(0x7f)));
  EXPECT_EQ(double_to_fp8_e5m2(61440.0), 0x7c);                        // tie above max -> inf
  EXPECT_EQ(double_to_fp8_e5m2(std::nextafter(61440.0, 0.0)), 0x7b);
  EXPECT_EQ(fp8_e5m2_to_double(0x01), std::ldexp(1.0, -16));
  // E8M0
  EXPECT_EQ(fp8_e8m0_to_double(127), 1.0);
  EXPECT_EQ(fp8_e8m0_to_double(0), std::ldexp(1.0, -127));
  EXPECT_EQ(fp8_e8m0_to_double(254), std::ldexp(1.0, 127));
  EXPECT_TRUE(std::isnan(fp8_e8m0_to_double(0xff)));
  for (uint32_t b = 0; b < 255; ++b) EXPECT_EQ(double_to_fp8_e8m0(fp8_e8m0_to_double(uint8_t(b))), b);
  EXPECT_EQ(double_to_fp8_e8m0(1.5), 128);   // rounds the exponent up: 2
  EXPECT_EQ(double_to_fp8_e8m0(0.75), 127);  // 1
  EXPECT_EQ(double_to_fp8_e8m0(0.0), 0);
  EXPECT_EQ(double_to_fp8_e8m0(1e300), 0xfe);
  EXPECT_EQ(double_to_fp8_e8m0(kNaN), 0xff);
}

TEST(DtypeConvert, Fp4) {
  const double vals[8] = {0, 0.5, 1, 1.5, 2, 3, 4, 6};
  for (int i = 0; i < 8; ++i) {
    EXPECT_EQ(fp4_e2m1_to_double(uint8_t(i)), vals[i]);
    EXPECT_EQ(fp4_e2m1_to_double(uint8_t(i | 8)), -vals[i]);
  }
  EXPECT_EQ(double_to_fp4_e2m1(5.0), 0x6);   // tie 4|6 -> 4 (even mantissa)
  EXPECT_EQ(double_to_fp4_e2m1(2.5), 0x4);   // tie 2|3 -> 2
  EXPECT_EQ(double_to_fp4_e2m1(0.25), 0x0);  // tie 0|0.5 -> 0
  EXPECT_EQ(double_to_fp4_e2m1(0.75), 0x2);  // tie 0.5|1 -> 1
  EXPECT_EQ(double_to_fp4_e2m1(100.0), 0x7);
  EXPECT_EQ(double_to_fp4_e2m1(-kInf), 0xf);
  // Packing: even element in the low nibble.
  uint8_t buf[2] = {0, 0};
  store_element(DataType::FP4_E2M1, buf, 0, 1.0);   // 0x2
  store_element(DataType::FP4_E2M1, buf, 1, -6.0);  // 0xf
  store_element(DataType::FP4_E2M1, buf, 2, 3.0);   // 0x5
  EXPECT_EQ(buf[0], 0xf2);
  EXPECT_EQ(buf[1], 0x05);
  EXPECT_EQ(load_element(DataType::FP4_E2M1, buf, 1), -6.0);
  store_element(DataType::FP4_E2M1, buf, 0, 0.5);
  EXPECT_EQ(buf[0], 0xf1);
}

TEST(DtypeConvert, IntegersTruncateAndSaturate) {
  EXPECT_EQ(round_to(DataType::INT8, 3.9), 3.0);
  EXPECT_EQ(round_to(DataType::INT8, -3.9), -3.0);
  EXPECT_EQ(round_to(DataType::INT8, 200.0), 127.0);
  EXPECT_EQ(round_to(DataType::INT8, -200.0), -128.0);
  EXPECT_EQ(round_to(DataType::UINT8, -1.5), 0.0);
  EXPECT_EQ(round_to(DataType::UINT8, 255.9), 255.0);
  EXPECT_EQ(round_to(DataType::UINT8, 256.0), 255.0);
  EXPECT_EQ(round_to(DataType::INT32, kNaN), 0.0);
  EXPECT_EQ(round_to(DataType::INT32, 3e9), 2147483647.0);
  EXPECT_EQ(round_to(DataType::INT32, -kInf), -2147483648.0);
  int64_t i64 = 0;
  store_element(DataType::INT64, &i64, 0, 1e30);
  EXPECT_EQ(i64, std::numeric_limits<int64_t>::max());
  store_element(DataType::INT64, &i64, 0, -1e30);
  EXPECT_EQ(i64, std::numeric_limits<int64_t>::min());
  store_element(DataType::INT64, &i64, 0, -12345.75);
  EXPECT_EQ(i64, -12345);
  EXPECT_EQ(load_element(DataType::INT64, &i64, 0), -12345.0);
  uint8_t b = 7;
  store_element(DataType::BOOLEAN, &b, 0, -0.5);
  EXPECT_EQ(b, 1);
  store_element(DataType::BOOLEAN, &b, 0, 0.0);
  EXPECT_EQ(b, 0);
  b = 9;
  EXPECT_EQ(load_element(DataType::BOOLEAN, &b, 0), 1.0);
}

TEST(DtypeConvert, FloatAndDoubleStoreLoad) {
  float f[3];
  store_element(DataType::FLOAT, f, 2, 1.0 + std::ldexp(1.0, -24));  // tie -> 1
  EXPECT_EQ(f[2], 1.0f);
  store_element(DataType::FLOAT, f, 1, 1e-45);
  EXPECT_EQ(load_element(DataType::FLOAT, f, 1), double(std::numeric_limits<float>::denorm_min()));
  double d[2];
  store_element(DataType::DOUBLE, d, 1, 0.1);
  EXPECT_EQ(load_element(DataType::DOUBLE, d, 1), 0.1);
  uint16_t h[4] = {};
  store_element(DataType::HALF, h, 3, -1.5);
  EXPECT_EQ(h[3], 0xbe00);
  store_element(DataType::BFLOAT16, h, 1, 2.0);
  EXPECT_EQ(h[1], 0x4000);
  EXPECT_EQ(round_to(DataType::HALF, 0.1), half_to_double(0x2e66));
}

#if defined(__FLT16_MAX__)
// Independent oracle: the compiler's _Float16 conversion from double (libgcc soft-fp, correctly
// rounded in one step).
TEST(DtypeConvert, HalfMatchesCompilerFloat16) {
  std::mt19937_64 rng(42);
  std::uniform_real_distribution<double> expo(-28.0, 17.0);
  std::uniform_real_distribution<double> mant(1.0, 2.0);
  for (int i = 0; i < 200000; ++i) {
    double v = std::ldexp(mant(rng), int(expo(rng))) * ((i & 1) ? -1 : 1);
    volatile _Float16 h = static_cast<_Float16>(v);
    _Float16 hh = h;
    uint16_t bits;
    std::memcpy(&bits, &hh, 2);
    ASSERT_EQ(double_to_half(v), bits) << v;
  }
}
#endif
