// SPDX-License-Identifier: Apache-2.0
// The CUDA runtime (libcudart) loaded at run time with dlopen, for code that needs device memory
// without a link-time dependency on it (the opendnn tool, which must build and run where no CUDA
// toolkit exists). Declared without the CUDA headers: cudaError_t and cudaMemcpyKind are int-sized
// enums and events/streams are pointers in every CUDA 12 and 13 runtime, so these signatures match.
//
// Search order (the first library that loads and has every required symbol wins):
//   1. $OPENDNN_CUDART_PATH (a file), when set.
//   2. A libcudart.so.13 / .so.12 / .so the process already holds, so one process uses one runtime.
//   3. The same sonames through the system loader.
//   4. The toolkit folders: $CUDA_HOME, $CUDA_PATH, /usr/local/cuda, each with lib64/ and lib/.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace opendnn::cudart {

struct Runtime {
  int (*GetDeviceCount)(int*) = nullptr;
  int (*SetDevice)(int) = nullptr;
  int (*Malloc)(void**, size_t) = nullptr;
  int (*Free)(void*) = nullptr;
  int (*Memcpy)(void*, const void*, size_t, int) = nullptr;
  int (*DeviceSynchronize)() = nullptr;
  int (*GetLastError)() = nullptr;
  const char* (*GetErrorString)(int) = nullptr;
  // Events (optional: without them callers time with DeviceSynchronize and the host clock).
  int (*EventCreate)(void**) = nullptr;
  int (*EventRecord)(void*, void*) = nullptr;
  int (*EventSynchronize)(void*) = nullptr;
  int (*EventElapsedTime)(float*, void*, void*) = nullptr;
  int (*EventDestroy)(void*) = nullptr;

  static constexpr int kHostToDevice = 1;  // cudaMemcpyHostToDevice
  static constexpr int kDeviceToHost = 2;  // cudaMemcpyDeviceToHost

  void* lib = nullptr;
  std::string name;                // what dlopen accepted
  std::vector<std::string> tried;  // every candidate that failed, with why
  std::string error;               // empty when usable

  bool ok() const { return error.empty(); }
  bool has_events() const { return EventCreate && EventRecord && EventSynchronize && EventElapsedTime && EventDestroy; }
  // Devices the runtime sees; 0 when there is no driver or no GPU (the error is cleared).
  int device_count() const;
  // "" when rc is cudaSuccess, else "<what>: <CUDA's message> (error <rc>)".
  std::string failure(int rc, const char* what) const;
};

// The candidates of steps 3 and 4 above, in order (step 1 and 2 are not files to try).
std::vector<std::string> default_candidates();

// Opens the first candidate that loads, preferring a runtime already in the process when
// `prefer_loaded`; records every failure in `tried` and the accepted candidate in `name`.
void* open_library(const std::vector<std::string>& candidates, bool prefer_loaded, std::vector<std::string>& tried,
                   std::string& name);

// Loads from `candidates` (no environment, no already-loaded preference: what tests need).
Runtime load(const std::vector<std::string>& candidates);

// The process's runtime, loaded once by the search order above (thread-safe).
const Runtime& runtime();

}  // namespace opendnn::cudart
