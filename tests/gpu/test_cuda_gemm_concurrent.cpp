// SPDX-License-Identifier: Apache-2.0
// Concurrent execute() on one built graph on the GPU: 8 host threads, each with its own buffers,
// workspace and stream, run one built cuda-engine plan (a GEMM, a fused pointwise chain) and must
// each get their own right answer. Needs an NVIDIA GPU (sm_90+); skips elsewhere.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <memory>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "common/dtype_convert.h"
#include "opendnn/opendnn.h"
#include "support/device.h"

using namespace opendnn;
using test::DevBuf;

namespace {

bool plan_on_cuda(Graph& g) {
  if (g.validate().is_bad()) return false;
  if (g.create_execution_plans(test::kOurEngines).is_bad()) return false;
  if (g.deselect_engines({"cudnn", "reference"}).is_bad()) return false;
  if (g.check_support().is_bad()) return false;
  return g.build_plans().is_good();
}

// Per thread: A [M, K] = t + 1 everywhere, B [K, N] = 1 / 64 (exact in bf16), so C = (t + 1) * K / 64.
TEST(CudaConcurrent, ThreadsShareOneBuiltGemm) {
  if (!test::have_sm90_gpu()) GTEST_SKIP() << "needs an sm_90+ GPU";
  const int64_t M = 256, N = 256, K = 128;
  Graph g;
  g.set_io_data_type(DataType::BFLOAT16).set_intermediate_data_type(DataType::FLOAT).set_compute_data_type(DataType::FLOAT);
  auto a = g.tensor(TensorAttr().set_name("A").set_dim({1, M, K}).set_stride({M * K, K, 1}));
  auto b = g.tensor(TensorAttr().set_name("B").set_dim({1, K, N}).set_stride({K * N, N, 1}));
  auto c = g.matmul(a, b);
  c->set_output(true).set_name("C").set_data_type(DataType::FLOAT);
  if (!plan_on_cuda(g)) GTEST_SKIP() << "the cuda engine has no plan for this GEMM";
  const size_t ws_bytes = size_t(std::max<int64_t>(g.get_workspace_size(), 1));
  std::atomic<int> wrong{0}, failed{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t)
    threads.emplace_back([&, t] {
      cudaStream_t s = nullptr;
      if (cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) != cudaSuccess) {
        ++failed;
        return;
      }
      std::vector<uint16_t> ha(size_t(M * K)), hb(size_t(K * N));
      for (auto& v : ha) store_element(DataType::BFLOAT16, &v, 0, double(t + 1));
      for (auto& v : hb) store_element(DataType::BFLOAT16, &v, 0, 1.0 / 64);
      DevBuf da(ha.size() * 2), db(hb.size() * 2), dc(size_t(M * N) * 4), ws(ws_bytes);
      da.put(ha);
      db.put(hb);
      const float want = float(t + 1) * float(K) / 64.f;
      for (int it = 0; it < 50; ++it) {
        dc.poison();
        if (g.execute({{a, da.p}, {b, db.p}, {c, dc.p}}, ws.p, s).is_bad()) {
          ++failed;
          continue;
        }
        cudaStreamSynchronize(s);
        auto got = dc.get<float>(size_t(M * N));
        if (std::any_of(got.begin(), got.end(), [&](float v) { return v != want; })) ++wrong;
      }
      cudaStreamDestroy(s);
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(failed.load(), 0);
  EXPECT_EQ(wrong.load(), 0) << "of 400 calls";
}

// y = relu(x * x + b) on the fused pointwise kernel.
TEST(CudaConcurrent, ThreadsShareOneBuiltPointwiseChain) {
  if (!test::have_sm90_gpu()) GTEST_SKIP() << "needs an sm_90+ GPU";
  const int64_t n = 1 << 16;
  Graph g;
  g.set_io_data_type(DataType::FLOAT).set_intermediate_data_type(DataType::FLOAT).set_compute_data_type(DataType::FLOAT);
  auto x = g.tensor(TensorAttr().set_name("x").set_dim({n}).set_stride({1}));
  auto b = g.tensor(TensorAttr().set_name("b").set_dim({n}).set_stride({1}));
  auto y = g.relu(g.add(g.mul(x, x), b));
  y->set_output(true).set_name("y");
  if (!plan_on_cuda(g)) GTEST_SKIP() << "the cuda engine has no plan for this chain";
  std::atomic<int> wrong{0}, failed{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t)
    threads.emplace_back([&, t] {
      cudaStream_t s = nullptr;
      if (cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) != cudaSuccess) {
        ++failed;
        return;
      }
      const size_t len = static_cast<size_t>(n);
      std::vector<float> hx(len, float(t + 1)), hb(len, float(t));
      DevBuf dx(size_t(n) * 4), db(size_t(n) * 4), dy(size_t(n) * 4);
      dx.put(hx);
      db.put(hb);
      const float want = float((t + 1) * (t + 1) + t);
      for (int it = 0; it < 50; ++it) {
        dy.poison();
        if (g.execute({{x, dx.p}, {b, db.p}, {y, dy.p}}, nullptr, s).is_bad()) {
          ++failed;
          continue;
        }
        cudaStreamSynchronize(s);
        auto got = dy.get<float>(size_t(n));
        if (std::any_of(got.begin(), got.end(), [&](float v) { return v != want; })) ++wrong;
      }
      cudaStreamDestroy(s);
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(failed.load(), 0);
  EXPECT_EQ(wrong.load(), 0) << "of 400 calls";
}

}  // namespace
