// SPDX-License-Identifier: Apache-2.0
// What every tests/gpu/test_cuda_*.cpp needs from the device: whether an sm_90 GPU is there (else the test
// skips), an owning device buffer with typed copies both ways, and a scoped kernel switch (the engines
// read OPENDNN_* variables when planning). Failures are gtest failures.
#pragma once
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "common/dtype_convert.h"
#include "opendnn/opendnn.h"

namespace opendnn::test {

// The heuristics mode of tests that run our own engines: cuDNN is not asked to propose (its runtime-compiled
// SDPA plans cost seconds a graph, and the tests deselect them anyway).
inline const std::vector<HeurMode> kOurEngines{HeurMode::OPENSOURCE};

inline bool have_sm90_gpu() {
  Target t = default_target();
  return t.kind == DeviceKind::CUDA && t.sm_version >= 90;
}

struct DevBuf {
  void* p = nullptr;  // the device address (kept public: tests put it straight into variant packs)
  size_t n = 0;       // bytes

  explicit DevBuf(size_t bytes) : n(bytes) { EXPECT_EQ(cudaMalloc(&p, bytes ? bytes : 16), cudaSuccess); }
  ~DevBuf() { cudaFree(p); }
  DevBuf(const DevBuf&) = delete;
  DevBuf& operator=(const DevBuf&) = delete;

  void put(const void* src, size_t bytes) { ASSERT_EQ(cudaMemcpy(p, src, bytes, cudaMemcpyHostToDevice), cudaSuccess); }
  template <class T>
  void put(const std::vector<T>& v) { put(v.data(), v.size() * sizeof(T)); }
  // All bytes 0xff: NaN in every floating type, so an element a kernel forgot to write shows.
  void poison() { ASSERT_EQ(cudaMemset(p, 0xff, n), cudaSuccess); }
  template <class T>
  std::vector<T> get(size_t count) const {
    std::vector<T> v(count);
    EXPECT_EQ(cudaMemcpy(v.data(), p, count * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
    return v;
  }
  // `count` elements of type t, widened to double.
  std::vector<double> values(DataType t, size_t count) const {
    std::vector<uint8_t> raw = get<uint8_t>(count * size_t(bits_of(t) / 8));
    std::vector<double> out(count);
    for (size_t i = 0; i < count; ++i) out[i] = load_element(t, raw.data(), int64_t(i));
    return out;
  }
};

// Sets an environment variable (unsets it when value is null) until the end of the scope, then restores
// what was there.
struct ScopedEnv {
  std::string name, saved;
  bool had = false;
  ScopedEnv(const char* n, const char* value) : name(n) {
    const char* was = std::getenv(n);
    had = was != nullptr;
    saved = had ? was : "";
    if (value) setenv(n, value, 1);
    else unsetenv(n);
  }
  ~ScopedEnv() {
    if (had) setenv(name.c_str(), saved.c_str(), 1);
    else unsetenv(name.c_str());
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;
};

}  // namespace opendnn::test
