// SPDX-License-Identifier: Apache-2.0
// A tiny .npy (NumPy format 1.0/2.0/3.0) reader and writer for the tool's inputs and outputs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "opendnn/types.h"

namespace opendnn::tools {

struct NpyArray {
  std::string descr;             // e.g. "<f4"
  DataType dtype = DataType::NOT_SET;  // NOT_SET for a raw void type ("<V2", "|V1")
  int item_bytes = 0;
  std::vector<int64_t> shape;
  bool fortran_order = false;
  std::vector<std::byte> data;   // the elements as stored in the file
};

// The opendnn type of a numpy descr ("<f4" -> FLOAT); nullopt for unsupported ones.
std::optional<DataType> npy_dtype(std::string_view descr);
// The numpy descr of an opendnn type, or "" when numpy has none (BFLOAT16, FP8, FP4).
std::string npy_descr(DataType t);

bool read_npy(const std::string& path, NpyArray& out, std::string& error);
// Writes `data` (packed row-major elements of `descr`) with the given shape.
bool write_npy(const std::string& path, const std::string& descr, const std::vector<int64_t>& shape,
               const void* data, size_t bytes, std::string& error);

}  // namespace opendnn::tools
