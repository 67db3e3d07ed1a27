// SPDX-License-Identifier: Apache-2.0
// Enumerations shared by the whole API: data types, heuristic modes, plan policies.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace opendnn {

// X(enum, json/python name, size in bits), in cuDNN Frontend's order, so that a member's value is
// cuDNN Frontend's (int(opendnn.data_type.HALF) == 3). INT8x4, UINT8x4, INT8x32, FAST_FLOAT_FOR_FP8
// and INT4 are named but no kernel stores them: a graph with such a tensor is declined at validate().
#define OPENDNN_DATA_TYPES(X)                  \
  X(NOT_SET, "NOT_SET", 0)                     \
  X(FLOAT, "FLOAT", 32)                        \
  X(DOUBLE, "DOUBLE", 64)                      \
  X(HALF, "HALF", 16)                          \
  X(INT8, "INT8", 8)                           \
  X(INT32, "INT32", 32)                        \
  X(INT8x4, "INT8x4", 32)                      \
  X(UINT8, "UINT8", 8)                         \
  X(UINT8x4, "UINT8x4", 32)                    \
  X(INT8x32, "INT8x32", 256)                   \
  X(BFLOAT16, "BFLOAT16", 16)                  \
  X(INT64, "INT64", 64)                        \
  X(BOOLEAN, "BOOLEAN", 8)                     \
  X(FP8_E4M3, "FP8_E4M3", 8)                   \
  X(FP8_E5M2, "FP8_E5M2", 8)                   \
  X(FAST_FLOAT_FOR_FP8, "FAST_FLOAT_FOR_FP8", 8) \
  X(FP8_E8M0, "FP8_E8M0", 8)                   \
  X(FP4_E2M1, "FP4_E2M1", 4)                   \
  X(INT4, "INT4", 4)

enum class DataType : uint8_t {
#define OPENDNN_X(e, s, b) e,
  OPENDNN_DATA_TYPES(OPENDNN_X)
#undef OPENDNN_X
};

std::string_view to_string(DataType t);
std::optional<DataType> data_type_from_string(std::string_view s);
// Storage size in bits (FP4 packs two values per byte).
int bits_of(DataType t);
bool is_floating(DataType t);  // FLOAT, DOUBLE, HALF, BFLOAT16, FP8*, FP4
bool is_integer(DataType t);   // INT8, UINT8, INT32, INT64, BOOLEAN
bool is_fp8(DataType t);
// False for the types opendnn names but has no kernels for (vectorised int8, INT4, FAST_FLOAT_FOR_FP8).
bool is_storable(DataType t);

enum class HeurMode : uint8_t { A, B, FALLBACK, OPENSOURCE };
enum class BuildPlanPolicy : uint8_t { HEURISTICS_CHOICE, ALL };
enum class TensorReordering : uint8_t { NONE, INT8x32, F16x16, F8_128x4 };

std::string_view to_string(HeurMode m);
std::string_view to_string(TensorReordering r);
std::optional<TensorReordering> reordering_from_string(std::string_view s);

}  // namespace opendnn
