// SPDX-License-Identifier: Apache-2.0
// NVRTC loaded with dlopen at run time, so the library never links it. Plain C++ (no CUDA headers).
//
// Search order (the first that loads and has every entry point wins):
//   1. a libnvrtc already loaded in the process (torch loads one), so a process never holds two;
//   2. $CUDA_HOME/lib64, $CUDA_PATH/lib64, /usr/local/cuda/lib64;
//   3. pip wheels: nvidia/cu13/lib and nvidia/cuda_nvrtc/lib in the site-packages that holds a loaded
//      torch, then in each $PYTHONPATH entry;
//   4. the system loader.
// Each place is tried with libnvrtc.so.13, libnvrtc.so.12, libnvrtc.so.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace opendnn::cuda::pw {

struct Nvrtc {
  bool ok = false;
  int version = 0;                  // major * 1000 + minor * 10, e.g. 13000
  std::string path;                 // what dlopen accepted
  std::vector<std::string> tried;   // every candidate with why it failed
  std::string decline_reason() const;  // "NVRTC not found (tried: ...)"
};

// Loads once per process (thread-safe).
const Nvrtc& nvrtc();

// Compiles `source` for `arch` (e.g. "sm_90a") to a cubin; returns "" or the compiler's log.
std::string nvrtc_compile(const std::string& source, const std::string& arch, std::string& cubin);

// How many times this process ran NVRTC (a debug counter: tests check cache hits with it).
int64_t nvrtc_compile_count();

// Drops this process's loaded kernels so the next build reads the disk cache (tests; defined with
// the cuda engine's pointwise plans).
void forget_loaded_kernels();

}  // namespace opendnn::cuda::pw
