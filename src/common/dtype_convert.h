// SPDX-License-Identifier: Apache-2.0
// Exact conversions between every opendnn data type and double, rounding to nearest even.
// Element offsets count elements, not bytes (FP4_E2M1 packs two per byte, low nibble first).
#pragma once

#include <cstdint>

#include "opendnn/types.h"

namespace opendnn {

double load_element(DataType t, const void* base, int64_t element_offset);
void store_element(DataType t, void* base, int64_t element_offset, double value);

// Scalar conversions (bit patterns in, double out; double in, bit pattern out with RNE).
double half_to_double(uint16_t bits);
uint16_t double_to_half(double v);
double bf16_to_double(uint16_t bits);
uint16_t double_to_bf16(double v);
double fp8_e4m3_to_double(uint8_t bits);   // e4m3fn: no infinities, max 448, 0x7f/0xff NaN
uint8_t double_to_fp8_e4m3(double v);      // saturates out-of-range finite values to +-448
double fp8_e5m2_to_double(uint8_t bits);   // IEEE-like, with infinities
uint8_t double_to_fp8_e5m2(double v);
double fp8_e8m0_to_double(uint8_t bits);   // 2^(e-127); 0xff NaN
uint8_t double_to_fp8_e8m0(double v);      // rounds the exponent up (a scale never underestimates)
double fp4_e2m1_to_double(uint8_t nibble);
uint8_t double_to_fp4_e2m1(double v);      // saturates to +-6
// Rounds v to the nearest value representable in t (identity for DOUBLE; integer types truncate
// toward zero and saturate; BOOLEAN is v != 0).
double round_to(DataType t, double v);

}  // namespace opendnn
