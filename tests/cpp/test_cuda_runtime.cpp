// SPDX-License-Identifier: Apache-2.0
// The run-time CUDA runtime loader (common/cuda_runtime.h) on a machine with or without CUDA: it
// declines with every candidate it tried, never crashes, and sees no device where there is none.
#include <gtest/gtest.h>

#include <algorithm>

#include "common/cuda_runtime.h"

using namespace opendnn;

TEST(CudaRuntime, DeclinesWithTheSearchedPaths) {
  cudart::Runtime r = cudart::load({"/nonexistent/libcudart.so.99", "libopendnn_no_such_cudart.so"});
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(r.lib, nullptr);
  ASSERT_EQ(r.tried.size(), 2u);
  EXPECT_NE(r.error.find("no CUDA runtime could be loaded"), std::string::npos) << r.error;
  EXPECT_NE(r.error.find("/nonexistent/libcudart.so.99"), std::string::npos) << r.error;
  EXPECT_NE(r.error.find("libopendnn_no_such_cudart.so"), std::string::npos) << r.error;
  EXPECT_EQ(r.device_count(), 0);
}

TEST(CudaRuntime, NamesMissingSymbols) {
  // A library that loads but is no CUDA runtime.
  cudart::Runtime r = cudart::load({"libm.so.6"});
  EXPECT_FALSE(r.ok());
  EXPECT_NE(r.error.find("libm.so.6 lacks cudaGetDeviceCount"), std::string::npos) << r.error;
  EXPECT_EQ(r.device_count(), 0);
}

TEST(CudaRuntime, DefaultCandidates) {
  auto c = cudart::default_candidates();
  ASSERT_GE(c.size(), 3u);
  EXPECT_EQ(c[0], "libcudart.so.13");
  EXPECT_EQ(c[1], "libcudart.so.12");
  EXPECT_NE(std::find(c.begin(), c.end(), "/usr/local/cuda/lib64/libcudart.so.12"), c.end());
}

TEST(CudaRuntime, ProcessRuntimeIsUsableOrExplains) {
  const cudart::Runtime& r = cudart::runtime();
  if (!r.ok()) {
    EXPECT_NE(r.error.find("tried"), std::string::npos) << r.error;
    return;
  }
  // Loaded: asking for devices must not fail loudly on a machine without a driver or GPU.
  int n = r.device_count();
  EXPECT_GE(n, 0);
  EXPECT_EQ(r.failure(0, "cudaMalloc"), "");
  EXPECT_NE(r.failure(2, "cudaMalloc").find("cudaMalloc: "), std::string::npos);
}
