// SPDX-License-Identifier: Apache-2.0
#include <array>
#include <string>

#include "opendnn/node.h"
#include "opendnn/status.h"
#include "opendnn/types.h"

namespace opendnn {

namespace {
struct DataTypeInfo {
  DataType type;
  std::string_view name;
  int bits;
};
constexpr DataTypeInfo kDataTypes[] = {
#define OPENDNN_X(e, s, b) {DataType::e, s, b},
    OPENDNN_DATA_TYPES(OPENDNN_X)
#undef OPENDNN_X
};
constexpr std::string_view kErrorNames[] = {
#define OPENDNN_X(e) #e,
    OPENDNN_ERROR_CODES(OPENDNN_X)
#undef OPENDNN_X
};
}  // namespace

std::string_view to_string(DataType t) {
  for (const auto& i : kDataTypes)
    if (i.type == t) return i.name;
  return "INVALID";
}

std::optional<DataType> data_type_from_string(std::string_view s) {
  for (const auto& i : kDataTypes)
    if (i.name == s) return i.type;
  return std::nullopt;
}

int bits_of(DataType t) {
  for (const auto& i : kDataTypes)
    if (i.type == t) return i.bits;
  return 0;
}

bool is_fp8(DataType t) {
  return t == DataType::FP8_E4M3 || t == DataType::FP8_E5M2 || t == DataType::FP8_E8M0;
}

bool is_storable(DataType t) {
  switch (t) {
    case DataType::INT8x4: case DataType::UINT8x4: case DataType::INT8x32: case DataType::FAST_FLOAT_FOR_FP8:
    case DataType::INT4:
      return false;
    default:
      return true;
  }
}

bool is_floating(DataType t) {
  switch (t) {
    case DataType::FLOAT: case DataType::DOUBLE: case DataType::HALF: case DataType::BFLOAT16:
    case DataType::FP8_E4M3: case DataType::FP8_E5M2: case DataType::FP8_E8M0: case DataType::FP4_E2M1:
      return true;
    default:
      return false;
  }
}

bool is_integer(DataType t) {
  switch (t) {
    case DataType::INT8: case DataType::UINT8: case DataType::INT32: case DataType::INT64: case DataType::BOOLEAN:
      return true;
    default:
      return false;
  }
}

std::string_view to_string(HeurMode m) {
  switch (m) {
    case HeurMode::A: return "A";
    case HeurMode::B: return "B";
    case HeurMode::FALLBACK: return "FALLBACK";
    case HeurMode::OPENSOURCE: return "OPENSOURCE";
  }
  return "INVALID";
}

std::string_view to_string(TensorReordering r) {
  switch (r) {
    case TensorReordering::NONE: return "NONE";
    case TensorReordering::INT8x32: return "INT8x32";
    case TensorReordering::F16x16: return "F16x16";
    case TensorReordering::F8_128x4: return "F8_128x4";
  }
  return "INVALID";
}

std::optional<TensorReordering> reordering_from_string(std::string_view s) {
  for (auto r : {TensorReordering::NONE, TensorReordering::INT8x32, TensorReordering::F16x16, TensorReordering::F8_128x4})
    if (to_string(r) == s) return r;
  return std::nullopt;
}

std::string_view to_string(ErrorCode c) {
  auto i = static_cast<size_t>(c);
  return i < std::size(kErrorNames) ? kErrorNames[i] : "UNKNOWN_ERROR";
}

std::string Status::to_string() const {
  if (is_good()) return "OK";
  return std::string(opendnn::to_string(code_)) + ": " + message_;
}

std::string_view to_string(AttrType t) {
  switch (t) {
    case AttrType::BOOL: return "bool";
    case AttrType::INT: return "int";
    case AttrType::FLOAT: return "float";
    case AttrType::ENUM: return "enum";
    case AttrType::STRING: return "string";
    case AttrType::INT_LIST: return "int list";
    case AttrType::FLOAT_LIST: return "float list";
  }
  return "invalid";
}

}  // namespace opendnn
