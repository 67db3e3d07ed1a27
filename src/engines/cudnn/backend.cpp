// SPDX-License-Identifier: Apache-2.0
#include "engines/cudnn/backend.h"

#include <cstring>

#include "opendnn/types.h"

namespace opendnn::cudnn {

DescPtr Builder::make(cudnnBackendDescriptorType_t t) {
  if (!ok()) return nullptr;
  auto d = std::make_shared<Desc>(t);
  cudnnStatus_t s = api().BackendCreateDescriptor(t, d->addr());
  if (s != CUDNN_STATUS_SUCCESS) {
    status_ = s;
    fail("cudnnBackendCreateDescriptor(" + std::to_string(int(t)) + "): " + api().status_string(s));
    return nullptr;
  }
  sig_ += 'D';
  sig_ += std::to_string(int(t));
  sig_ += ';';
  return d;
}

void Builder::set(const DescPtr& d, cudnnBackendAttributeName_t a, cudnnBackendAttributeType_t t, int64_t n, const void* v) {
  if (!ok() || !d) return;
  cudnnStatus_t s = api().BackendSetAttribute(d->get(), a, t, n, v);
  if (s != CUDNN_STATUS_SUCCESS) {
    status_ = s;
    fail("cudnnBackendSetAttribute(descriptor " + std::to_string(int(d->type())) + ", attribute " + std::to_string(int(a)) +
         "): " + api().status_string(s));
    return;
  }
  // Signature: attribute, type and raw bytes of plain values (descriptor handles excluded).
  sig_ += std::to_string(int(a)) + ":" + std::to_string(int(t)) + ":" + std::to_string(n) + "=";
  size_t elem = 0;
  switch (t) {
    case CUDNN_TYPE_INT64: elem = 8; break;
    case CUDNN_TYPE_DOUBLE: elem = 8; break;
    case CUDNN_TYPE_FLOAT: elem = 4; break;
    case CUDNN_TYPE_BOOLEAN: elem = sizeof(bool); break;
    case CUDNN_TYPE_BACKEND_DESCRIPTOR: case CUDNN_TYPE_HANDLE: case CUDNN_TYPE_VOID_PTR: elem = 0; break;
    default: elem = 4; break;  // enums
  }
  if (elem && n > 0) sig_.append(static_cast<const char*>(v), size_t(n) * elem);
  sig_ += ";";
}

void Builder::set_desc(const DescPtr& d, cudnnBackendAttributeName_t a, const DescPtr& v) {
  if (!ok() || !d) return;
  if (!v) return fail("internal: null descriptor for attribute " + std::to_string(int(a)));
  cudnnBackendDescriptor_t raw = v->get();
  set(d, a, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &raw);
}

void Builder::set_descs(const DescPtr& d, cudnnBackendAttributeName_t a, const std::vector<DescPtr>& v) {
  if (!ok() || !d) return;
  std::vector<cudnnBackendDescriptor_t> raw;
  for (auto& x : v) {
    if (!x) return fail("internal: null descriptor in list for attribute " + std::to_string(int(a)));
    raw.push_back(x->get());
  }
  set(d, a, CUDNN_TYPE_BACKEND_DESCRIPTOR, int64_t(raw.size()), raw.data());
}

void Builder::finalize(const DescPtr& d, const std::string& what) {
  if (!ok() || !d) return;
  cudnnStatus_t s = api().BackendFinalize(d->get());
  if (s != CUDNN_STATUS_SUCCESS) {
    status_ = s;
    fail(what + ": " + api().status_string(s));
  }
}

cudnnDataType_t to_cudnn(DataType t, bool* ok) {
  *ok = true;
  switch (t) {
    case DataType::FLOAT: return CUDNN_DATA_FLOAT;
    case DataType::DOUBLE: return CUDNN_DATA_DOUBLE;
    case DataType::HALF: return CUDNN_DATA_HALF;
    case DataType::BFLOAT16: return CUDNN_DATA_BFLOAT16;
    case DataType::FP8_E4M3: return CUDNN_DATA_FP8_E4M3;
    case DataType::FP8_E5M2: return CUDNN_DATA_FP8_E5M2;
    case DataType::FP8_E8M0: return CUDNN_DATA_FP8_E8M0;
    case DataType::FP4_E2M1: return CUDNN_DATA_FP4_E2M1;
    case DataType::INT8: return CUDNN_DATA_INT8;
    case DataType::UINT8: return CUDNN_DATA_UINT8;
    case DataType::INT32: return CUDNN_DATA_INT32;
    case DataType::INT64: return CUDNN_DATA_INT64;
    case DataType::BOOLEAN: return CUDNN_DATA_BOOLEAN;
    case DataType::INT8x4: case DataType::UINT8x4: case DataType::INT8x32: case DataType::FAST_FLOAT_FOR_FP8:
    case DataType::INT4:
    case DataType::NOT_SET: break;
  }
  *ok = false;
  return CUDNN_DATA_FLOAT;
}

bool get_attr(const DescPtr& d, cudnnBackendAttributeName_t a, cudnnBackendAttributeType_t t, int64_t n, int64_t* count,
              void* out) {
  int64_t c = 0;
  cudnnStatus_t s = api().BackendGetAttribute(d->get(), a, t, n, count ? count : &c, out);
  return s == CUDNN_STATUS_SUCCESS;
}

}  // namespace opendnn::cudnn
