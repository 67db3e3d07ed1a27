// SPDX-License-Identifier: Apache-2.0
// Tensor attributes: the description of a tensor in a graph (never its data).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "opendnn/types.h"

namespace opendnn {

// A host scalar passed by value (epsilon, attn scale, dropout seed...). Integers keep full int64
// precision in `i`; floating values live in `f` and are rounded to `type` when a kernel reads them.
struct Scalar {
  DataType type = DataType::NOT_SET;
  double f = 0.0;
  int64_t i = 0;

  static Scalar of_float(float v) { return {DataType::FLOAT, v, 0}; }
  static Scalar of_double(double v) { return {DataType::DOUBLE, v, 0}; }
  static Scalar of_half(float v) { return {DataType::HALF, v, 0}; }
  static Scalar of_bf16(float v) { return {DataType::BFLOAT16, v, 0}; }
  static Scalar of_int32(int32_t v) { return {DataType::INT32, double(v), v}; }
  static Scalar of_int64(int64_t v) { return {DataType::INT64, double(v), v}; }
  bool is_set() const { return type != DataType::NOT_SET; }
  double as_double() const { return is_integer(type) ? double(i) : f; }
  bool operator==(const Scalar&) const = default;
};

class TensorAttr;
using TensorPtr = std::shared_ptr<TensorAttr>;

class TensorAttr {
 public:
  TensorAttr() = default;

  // Every setter but set_name stamps the tensor when it changes something (see edit_stamp()).
  TensorAttr& set_name(std::string n) { name_ = std::move(n); return *this; }
  TensorAttr& set_dim(std::vector<int64_t> d) { return update(dims_, std::move(d), "dims", &dims_stamp_); }
  TensorAttr& set_stride(std::vector<int64_t> s) { return update(strides_, std::move(s), "strides", &strides_stamp_); }
  TensorAttr& set_data_type(DataType t) { return update(dtype_, t, "data type", &dtype_stamp_); }
  TensorAttr& set_is_virtual(bool v) { return update(virtual_, v, "virtual flag"); }
  // Marks a tensor as a graph output: it is no longer virtual and needs memory in the variant pack.
  TensorAttr& set_output(bool o) { return update(virtual_, !o, "output flag"); }
  TensorAttr& set_uid(int64_t u) {
    update(uid_assigned_, true, "uid");
    return update(uid_, u, "uid");
  }
  TensorAttr& clear_uid() {
    update(uid_, int64_t(0), "uid");
    return update(uid_assigned_, false, "uid");
  }
  TensorAttr& set_is_pass_by_value(bool p) { return update(pass_by_value_, p, "pass-by-value flag"); }
  TensorAttr& set_value(Scalar v) {
    update(value_, v, "value");
    update(pass_by_value_, true, "value");
    if (dtype_ == DataType::NOT_SET) update(dtype_, v.type, "data type", &dtype_stamp_);
    return *this;
  }
  TensorAttr& set_ragged_offset(TensorPtr r) { return update(ragged_offset_, std::move(r), "ragged offset"); }
  TensorAttr& set_reordering_type(TensorReordering r) { return update(reordering_, r, "reordering type"); }

  // A process-wide edit clock: each change through a setter above gives the tensor the next tick as its
  // stamp. A validated graph remembers the clock; a tensor stamped after it changed since validation.
  uint64_t edit_stamp() const { return edit_stamp_; }
  // What the last stamped change touched ("dims", "data type", ...), or "" if never changed.
  const char* last_edit() const { return last_edit_; }
  // The stamps of the last change of the dims, the strides and the data type alone.
  uint64_t dims_stamp() const { return dims_stamp_; }
  uint64_t strides_stamp() const { return strides_stamp_; }
  uint64_t data_type_stamp() const { return dtype_stamp_; }
  // Descriptor hints cuDNN Frontend carries (byte alignment, vectorised layouts); engines read them as
  // they need. A compile-time constant is a pass-by-value value the plan may bake in.
  TensorAttr& set_alignment(int64_t a) { alignment_ = a; return *this; }
  TensorAttr& set_vector_count_and_dimension(int64_t count, int64_t dim) { vector_count_ = count; vector_dim_ = dim; return *this; }
  TensorAttr& set_compile_time_constant(bool c) { compile_time_constant_ = c; return *this; }

  const std::string& get_name() const { return name_; }
  const std::vector<int64_t>& get_dim() const { return dims_; }
  const std::vector<int64_t>& get_stride() const { return strides_; }
  DataType get_data_type() const { return dtype_; }
  bool get_is_virtual() const { return virtual_; }
  bool get_is_output() const { return !virtual_ && produced_; }
  int64_t get_uid() const { return uid_; }
  bool has_uid() const { return uid_assigned_; }
  bool get_is_pass_by_value() const { return pass_by_value_; }
  const Scalar& get_value() const { return value_; }
  const TensorPtr& get_ragged_offset() const { return ragged_offset_; }
  TensorReordering get_reordering_type() const { return reordering_; }
  int64_t get_alignment() const { return alignment_; }
  int64_t get_vector_count() const { return vector_count_; }
  int64_t get_vector_dimension() const { return vector_dim_; }
  bool get_has_compile_time_constant() const { return compile_time_constant_ && value_.is_set(); }

  int64_t volume() const;            // product of dims (0 if any dim is 0); saturates to -1 on overflow
  int64_t storage_elements() const;  // 1 + max linear offset reachable through strides; -1 on overflow
  int64_t storage_bytes() const;     // storage_elements() in bytes of the data type; -1 on overflow
  bool is_packed_row_major() const;
  // True if every element has its own address: no stride of 0 (or below) on a dim over 1, and no two
  // elements at one offset. Dims of extent 1 take any stride; a tensor without elements passes.
  bool addresses_each_element_once() const;

  // Set by the graph when a node writes this tensor; a user tensor that no node writes is an input.
  void mark_produced(bool p) { produced_ = p; }
  bool is_produced() const { return produced_; }

 private:
  std::string name_;
  std::vector<int64_t> dims_;
  std::vector<int64_t> strides_;
  DataType dtype_ = DataType::NOT_SET;
  bool virtual_ = false;
  bool produced_ = false;
  int64_t uid_ = 0;
  bool uid_assigned_ = false;
  bool pass_by_value_ = false;
  Scalar value_;
  TensorPtr ragged_offset_;
  TensorReordering reordering_ = TensorReordering::NONE;
  int64_t alignment_ = 16;
  int64_t vector_count_ = 1;
  int64_t vector_dim_ = -1;
  bool compile_time_constant_ = false;
  uint64_t edit_stamp_ = 0, dims_stamp_ = 0, strides_stamp_ = 0, dtype_stamp_ = 0;
  const char* last_edit_ = "";

  template <class T, class V>
  TensorAttr& update(T& field, V&& v, const char* what, uint64_t* field_stamp = nullptr) {
    if (!(field == v)) {
      field = std::forward<V>(v);
      stamp(what);
      if (field_stamp) *field_stamp = edit_stamp_;
    }
    return *this;
  }
  void stamp(const char* what);
};

// The current value of the edit clock (see TensorAttr::edit_stamp).
uint64_t tensor_edit_clock();

// Packed row-major strides for dims (last dimension fastest).
std::vector<int64_t> row_major_strides(const std::vector<int64_t>& dims);

}  // namespace opendnn
