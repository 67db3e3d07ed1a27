// SPDX-License-Identifier: Apache-2.0
// Thin RAII and error plumbing over cudnnBackend* descriptors. A Builder records the first failure
// (with cuDNN's own message) so lowering code can set many attributes and check once.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engines/cudnn/loader.h"
#include "opendnn/types.h"

namespace opendnn::cudnn {

class Desc {
 public:
  explicit Desc(cudnnBackendDescriptorType_t t) : type_(t) {}
  ~Desc() {
    if (d_) api().BackendDestroyDescriptor(d_);
  }
  Desc(const Desc&) = delete;
  Desc& operator=(const Desc&) = delete;
  cudnnBackendDescriptor_t get() const { return d_; }
  cudnnBackendDescriptor_t* addr() { return &d_; }
  cudnnBackendDescriptorType_t type() const { return type_; }

 private:
  cudnnBackendDescriptorType_t type_;
  cudnnBackendDescriptor_t d_ = nullptr;
};
using DescPtr = std::shared_ptr<Desc>;

class Builder {
 public:
  // A new descriptor (null, with the error recorded, on failure).
  DescPtr make(cudnnBackendDescriptorType_t t);
  void set(const DescPtr& d, cudnnBackendAttributeName_t a, cudnnBackendAttributeType_t t, int64_t n, const void* v);
  void set_i64(const DescPtr& d, cudnnBackendAttributeName_t a, int64_t v) { set(d, a, CUDNN_TYPE_INT64, 1, &v); }
  void set_i64s(const DescPtr& d, cudnnBackendAttributeName_t a, const std::vector<int64_t>& v) {
    set(d, a, CUDNN_TYPE_INT64, int64_t(v.size()), v.data());
  }
  void set_bool(const DescPtr& d, cudnnBackendAttributeName_t a, bool v) { set(d, a, CUDNN_TYPE_BOOLEAN, 1, &v); }
  void set_dtype(const DescPtr& d, cudnnBackendAttributeName_t a, cudnnDataType_t v) { set(d, a, CUDNN_TYPE_DATA_TYPE, 1, &v); }
  void set_float(const DescPtr& d, cudnnBackendAttributeName_t a, float v) { set(d, a, CUDNN_TYPE_FLOAT, 1, &v); }
  void set_double(const DescPtr& d, cudnnBackendAttributeName_t a, double v) { set(d, a, CUDNN_TYPE_DOUBLE, 1, &v); }
  void set_desc(const DescPtr& d, cudnnBackendAttributeName_t a, const DescPtr& v);
  void set_descs(const DescPtr& d, cudnnBackendAttributeName_t a, const std::vector<DescPtr>& v);
  void finalize(const DescPtr& d, const std::string& what);

  bool ok() const { return error_.empty(); }
  const std::string& error() const { return error_; }
  cudnnStatus_t status() const { return status_; }
  void fail(const std::string& e) {
    if (error_.empty()) error_ = e;
  }
  void clear_error() {
    error_.clear();
    status_ = CUDNN_STATUS_SUCCESS;
  }
  // Every attribute set so far, as text: identical graphs give identical signatures.
  const std::string& signature() const { return sig_; }

 private:
  std::string error_;
  cudnnStatus_t status_ = CUDNN_STATUS_SUCCESS;
  std::string sig_;
};

cudnnDataType_t to_cudnn(DataType t, bool* ok);

// Reads a scalar/array attribute; returns false on failure.
bool get_attr(const DescPtr& d, cudnnBackendAttributeName_t a, cudnnBackendAttributeType_t t, int64_t n, int64_t* count,
              void* out);

}  // namespace opendnn::cudnn
