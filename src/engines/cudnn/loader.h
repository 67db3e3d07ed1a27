// SPDX-License-Identifier: Apache-2.0
// Run-time loading of libcudnn (9.x) and the CUDA runtime with dlopen: opendnn never links either.
//
// libcudnn search order (the first library that loads and reports version >= 9.0 wins):
//   1. $OPENDNN_CUDNN_PATH: a file (dlopen'ed as is) or a folder (folder/libcudnn.so.9, folder/libcudnn.so).
//   2. A libcudnn.so.9 already loaded in the process (e.g. by torch), so one process never holds two.
//   3. The pip wheel folder `nvidia/cudnn/lib`: $OPENDNN_PIP_CUDNN_DIR if set, else each entry of
//      $PYTHONPATH, then $VIRTUAL_ENV/lib/python3*/site-packages and $CONDA_PREFIX/lib/python3*/site-packages.
//   4. The system loader: dlopen("libcudnn.so.9").
// The CUDA runtime: cudart::open_library's search (common/cuda_runtime.h: an already-loaded one first,
// then libcudart.so.13/.12/.so, then the toolkit folders). A missing soname is never an error by itself.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <cudnn_backend.h>

namespace opendnn::cudnn {

struct CudnnApi {
  // ---- cuDNN (graph library entry points, resolved with dlsym)
  size_t (*GetVersion)() = nullptr;
  const char* (*GetErrorString)(cudnnStatus_t) = nullptr;
  void (*GetLastErrorString)(char*, size_t) = nullptr;
  cudnnStatus_t (*Create)(cudnnHandle_t*) = nullptr;
  cudnnStatus_t (*Destroy)(cudnnHandle_t) = nullptr;
  cudnnStatus_t (*SetStream)(cudnnHandle_t, cudaStream_t) = nullptr;
  cudnnStatus_t (*BackendCreateDescriptor)(cudnnBackendDescriptorType_t, cudnnBackendDescriptor_t*) = nullptr;
  cudnnStatus_t (*BackendDestroyDescriptor)(cudnnBackendDescriptor_t) = nullptr;
  cudnnStatus_t (*BackendInitialize)(cudnnBackendDescriptor_t) = nullptr;
  cudnnStatus_t (*BackendFinalize)(cudnnBackendDescriptor_t) = nullptr;
  cudnnStatus_t (*BackendSetAttribute)(cudnnBackendDescriptor_t, cudnnBackendAttributeName_t,
                                       cudnnBackendAttributeType_t, int64_t, const void*) = nullptr;
  cudnnStatus_t (*BackendGetAttribute)(cudnnBackendDescriptor_t, cudnnBackendAttributeName_t,
                                       cudnnBackendAttributeType_t, int64_t, int64_t*, void*) = nullptr;
  cudnnStatus_t (*BackendExecute)(cudnnHandle_t, cudnnBackendDescriptor_t, cudnnBackendDescriptor_t) = nullptr;
  cudnnStatus_t (*BackendPopulateCudaGraph)(cudnnHandle_t, cudnnBackendDescriptor_t, cudnnBackendDescriptor_t,
                                            cudaGraph_t) = nullptr;  // optional (9.5+)
  cudnnStatus_t (*BackendUpdateCudaGraph)(cudnnHandle_t, cudnnBackendDescriptor_t, cudnnBackendDescriptor_t,
                                          cudaGraph_t) = nullptr;  // optional (9.5+)

  // ---- CUDA runtime (only the calls the engine needs; ABI-stable across CUDA 12 and 13)
  cudaError_t (*cudaGetDeviceCount)(int*) = nullptr;
  cudaError_t (*cudaGetDevice)(int*) = nullptr;
  cudaError_t (*cudaSetDevice)(int) = nullptr;
  cudaError_t (*cudaDeviceGetAttribute)(int*, cudaDeviceAttr, int) = nullptr;
  cudaError_t (*cudaMemsetAsync)(void*, int, size_t, cudaStream_t) = nullptr;
  cudaError_t (*cudaStreamIsCapturing)(cudaStream_t, cudaStreamCaptureStatus*) = nullptr;
  const char* (*cudaGetErrorString)(cudaError_t) = nullptr;
  // Events, for autotune's timer (optional: without them autotune falls back to host time).
  cudaError_t (*cudaEventCreate)(cudaEvent_t*) = nullptr;
  cudaError_t (*cudaEventRecord)(cudaEvent_t, cudaStream_t) = nullptr;
  cudaError_t (*cudaEventSynchronize)(cudaEvent_t) = nullptr;
  cudaError_t (*cudaEventElapsedTime)(float*, cudaEvent_t, cudaEvent_t) = nullptr;
  cudaError_t (*cudaEventDestroy)(cudaEvent_t) = nullptr;
  bool has_events() const {
    return cudaEventCreate && cudaEventRecord && cudaEventSynchronize && cudaEventElapsedTime && cudaEventDestroy;
  }

  void* cudnn_lib = nullptr;
  void* cudart_lib = nullptr;
  size_t version = 0;          // cudnnGetVersion(): 91900 for 9.19.0
  std::string cudnn_path;      // what was loaded (the path or soname that dlopen accepted)
  std::string cudart_name;
  std::vector<std::string> tried;  // every candidate, with why it was rejected
  std::string error;               // empty when usable

  bool ok() const { return error.empty(); }
  bool has_cudart() const { return cudart_lib != nullptr; }
  // "cuDNN could not be loaded: ... (tried: a: why; b: why)"
  std::string decline_reason() const;
  // cuDNN's last error message (thread-local in cuDNN), or "".
  std::string last_error() const;
  std::string status_string(cudnnStatus_t s) const;
};

// Loads once per process (thread-safe) and returns the same object ever after.
const CudnnApi& api();

}  // namespace opendnn::cudnn
