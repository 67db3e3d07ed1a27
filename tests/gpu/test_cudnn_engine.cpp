// SPDX-License-Identifier: Apache-2.0
// The cudnn engine on a GPU: every lowered op family against a host (fp64) reference on small shapes,
// declines, the variant-pack refresh and CUDA-graph capture. Skips cleanly without a GPU or libcudnn.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <map>
#include <random>
#include <set>
#include <unordered_map>

#include "common/dtype_convert.h"
#include "engines/cudnn/cudnn_engine.h"
#include "opendnn/engine.h"
#include "opendnn/graph.h"

namespace opendnn {
namespace {

using Host = std::vector<double>;

bool have_gpu() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

#define SKIP_WITHOUT_CUDNN()                                                               \
  do {                                                                                     \
    if (!have_gpu()) GTEST_SKIP() << "no CUDA device";                                     \
    if (!make_cudnn_engine()->serves(cuda_target())) GTEST_SKIP() << cudnn::describe_loaded(); \
  } while (0)

Target cuda_target() {
  Target t;
  t.kind = DeviceKind::CUDA;
  t.device = 0;
  return t;
}

TensorPtr input(Graph& g, const char* name, std::vector<int64_t> dims, DataType dt, std::vector<int64_t> strides = {}) {
  TensorAttr a;
  a.set_name(name).set_dim(dims).set_data_type(dt);
  a.set_stride(strides.empty() ? row_major_strides(dims) : strides);
  return g.tensor(a);
}

void as_output(const TensorPtr& t, std::vector<int64_t> dims, DataType dt, std::vector<int64_t> strides = {}) {
  t->set_output(true).set_data_type(dt);
  if (t->get_dim().empty()) t->set_dim(dims);
  if (t->get_stride().empty()) t->set_stride(strides.empty() ? row_major_strides(t->get_dim()) : strides);
}

// validate(), or (while an op still lacks inference rules) just uids on the explicitly-shaped tensors.
void prepare(Graph& g) {
  Status s = g.validate();
  if (s.is_bad()) {
    std::printf("  note: validate() failed (%s); using explicit shapes\n", s.to_string().c_str());
    ASSERT_TRUE(g.assign_uids().is_good());
  }
}

struct RunResult {
  std::map<const TensorAttr*, Host> out;
  std::string plan_name;
  int64_t workspace = 0;
  double us = 0;
};

// Plans `g` through the router on the cudnn engine alone (the other engines deselected), selects and
// builds its `nth` cudnn plan (or the first when there are fewer).
::testing::AssertionResult plan_on_cudnn(Graph& g, int nth, RunResult& r) {
  Status s = g.create_execution_plans({HeurMode::A, HeurMode::B, HeurMode::FALLBACK});
  if (s.is_bad()) return ::testing::AssertionFailure() << "create_execution_plans: " << s.to_string();
  std::vector<int64_t> ours;
  std::vector<std::string> others;
  for (int64_t i = 0; i < g.get_execution_plan_count(); ++i) {
    PlanInfo info;
    if (g.get_plan_info_at_index(i, info).is_bad()) continue;
    if (info.engine == "cudnn") ours.push_back(i);
    else others.push_back(info.engine);
  }
  if (ours.empty()) {
    std::string m;
    for (auto& d : make_cudnn_engine()->propose_plans(g, cuda_target()).declines) m += d + "\n";
    return ::testing::AssertionFailure() << "declined:\n" << m;
  }
  if (!others.empty()) (void)g.deselect_engines(others);
  int64_t index = ours[size_t(nth) < ours.size() ? size_t(nth) : 0];
  s = g.build_plan_at_index(index);
  if (s.is_good()) s = g.select_plan(index);
  (void)g.get_plan_name_at_index(index, r.plan_name);
  if (s.is_bad()) return ::testing::AssertionFailure() << "build " << r.plan_name << ": " << s.to_string();
  (void)g.get_workspace_size_plan_at_index(index, r.workspace);
  return ::testing::AssertionSuccess();
}

using Data = std::map<const TensorAttr*, Host>;

// Visits every element of t in logical row-major order with its offset (elements) in t's storage.
template <class F>
void for_each_offset(const TensorAttr& t, F&& f) {
  const auto& d = t.get_dim();
  const auto& st = t.get_stride();
  std::vector<int64_t> idx(d.size(), 0);
  for (int64_t lin = 0, n = t.volume(); lin < n; ++lin) {
    int64_t off = 0;
    for (size_t k = 0; k < d.size(); ++k) off += idx[k] * st[k];
    f(size_t(lin), off);
    for (size_t k = d.size(); k-- > 0;) {
      if (++idx[k] < d[k]) break;
      idx[k] = 0;
    }
  }
}

// t's storage bytes: `data` (logical row-major order) scattered through the strides; outputs start
// poisoned (all-ones bytes: NaN in every float type) so an unwritten element fails.
std::vector<unsigned char> host_bytes(const TensorAttr& t, const Data& data) {
  std::vector<unsigned char> host(size_t(std::max<int64_t>(t.storage_bytes(), 16)), t.is_produced() ? 0xFF : 0);
  auto it = data.find(&t);
  if (it != data.end())
    for_each_offset(t, [&](size_t lin, int64_t off) {
      if (lin < it->second.size()) store_element(t.get_data_type(), host.data(), off, it->second[lin]);
    });
  return host;
}

Host gather(const TensorAttr& t, const unsigned char* bytes) {
  Host v(size_t(t.volume()));
  for_each_offset(t, [&](size_t lin, int64_t off) { v[lin] = load_element(t.get_data_type(), bytes, off); });
  return v;
}

// Runs g (already planned by plan_on_cudnn, so its variant slots are laid out) on the reference engine
// with host buffers; returns every slot tensor.
::testing::AssertionResult run_reference(Graph& g, const Data& data, std::map<const TensorAttr*, Host>& out) {
  std::shared_ptr<Engine> ref;
  for (auto& e : registered_engines())
    if (e->name() == "reference") ref = e;
  if (!ref) return ::testing::AssertionFailure() << "no reference engine registered";
  Proposal p = ref->propose_plans(g, Target{});
  if (p.plans.empty()) return ::testing::AssertionFailure() << "reference declines: " << (p.declines.empty() ? "" : p.declines[0]);
  std::unique_ptr<Plan> plan;
  Status s = ref->build_plan(g, Target{}, p.plans[0], plan);
  if (s.is_bad()) return ::testing::AssertionFailure() << "reference build: " << s.to_string();
  const std::vector<int64_t>& slots = g.variant_uids();
  std::vector<std::vector<unsigned char>> bufs(slots.size());
  std::vector<void*> ptrs(slots.size());
  for (size_t i = 0; i < slots.size(); ++i) {
    bufs[i] = host_bytes(*g.find_tensor(slots[i]), data);
    ptrs[i] = bufs[i].data();
  }
  std::vector<unsigned char> ws(size_t(std::max<int64_t>(plan->workspace_size(), 1)));
  s = plan->execute(ptrs.data(), ws.data(), nullptr);
  if (s.is_bad()) return ::testing::AssertionFailure() << "reference execute: " << s.to_string();
  for (size_t i = 0; i < slots.size(); ++i) {
    TensorPtr t = g.find_tensor(slots[i]);
    out[t.get()] = gather(*t, bufs[i].data());
  }
  return ::testing::AssertionSuccess();
}

// Fills inputs (by tensor) from `data`, runs a cudnn plan through Graph::execute's slot-array hot path,
// returns every non-virtual tensor.
::testing::AssertionResult run_graph(Graph& g, const Data& data, RunResult& r, bool capture = false,
                                     int plan_index = 0) {
  ::testing::AssertionResult planned = plan_on_cudnn(g, plan_index, r);
  if (!planned) return planned;
  Graph* plan = &g;  // executes the selected plan
  const std::vector<int64_t>& slots = g.variant_uids();
  std::vector<void*> ptrs(slots.size(), nullptr);
  std::vector<TensorPtr> ts(slots.size());
  // Run-time by-value scalars are read from host memory (cuDNN reads them at every execute).
  std::vector<std::vector<unsigned char>> host_scalars(slots.size());
  for (size_t i = 0; i < slots.size(); ++i) {
    TensorPtr t = g.find_tensor(slots[i]);
    ts[i] = t;
    std::vector<unsigned char> host = host_bytes(*t, data);
    if (t->get_is_pass_by_value()) {
      host_scalars[i] = std::move(host);
      ptrs[i] = host_scalars[i].data();
    } else {
      cudaMalloc(&ptrs[i], host.size());
      cudaMemcpy(ptrs[i], host.data(), host.size(), cudaMemcpyHostToDevice);
    }
  }
  void* ws = nullptr;
  if (r.workspace > 0) cudaMalloc(&ws, size_t(r.workspace));
  cudaStream_t stream;
  cudaStreamCreate(&stream);
  Status es;
  if (capture) {
    // Execute once outside capture (plans may do one-time work), then capture and replay.
    es = plan->execute(ptrs.data(), ws, stream);
    cudaStreamSynchronize(stream);
    cudaGraph_t graph;
    cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal);
    Status cs = plan->execute(ptrs.data(), ws, stream);
    cudaError_t ce = cudaStreamEndCapture(stream, &graph);
    if (cs.is_bad() || ce != cudaSuccess)
      return ::testing::AssertionFailure() << "capture failed: " << cs.to_string() << " / " << cudaGetErrorString(ce);
    // Zero the outputs, then replay the graph: outputs must come back.
    for (size_t i = 0; i < slots.size(); ++i)
      if (ts[i]->is_produced()) cudaMemset(ptrs[i], 0, size_t(ts[i]->storage_bytes()));
    cudaGraphExec_t exec;
    if (cudaGraphInstantiate(&exec, graph, 0) != cudaSuccess) return ::testing::AssertionFailure() << "instantiate failed";
    cudaGraphLaunch(exec, stream);
    cudaStreamSynchronize(stream);
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
  } else {
    es = plan->execute(ptrs.data(), ws, stream);
    cudaEvent_t a, b;
    cudaEventCreate(&a);
    cudaEventCreate(&b);
    cudaEventRecord(a, stream);
    if (es.is_good()) es = plan->execute(ptrs.data(), ws, stream);  // a second run: pointers re-set
    cudaEventRecord(b, stream);
    cudaStreamSynchronize(stream);
    float ms = 0;
    cudaEventElapsedTime(&ms, a, b);
    r.us = ms * 1000.0;
  }
  cudaError_t err = cudaStreamSynchronize(stream);
  if (es.is_bad()) return ::testing::AssertionFailure() << "execute: " << es.to_string();
  if (err != cudaSuccess) return ::testing::AssertionFailure() << "CUDA error: " << cudaGetErrorString(err);
  for (size_t i = 0; i < slots.size(); ++i) {
    const TensorPtr& t = ts[i];
    if (t->get_is_pass_by_value()) {
      r.out[t.get()] = gather(*t, host_scalars[i].data());
      continue;
    }
    std::vector<unsigned char> host(size_t(std::max<int64_t>(t->storage_bytes(), 16)));
    cudaMemcpy(host.data(), ptrs[i], host.size(), cudaMemcpyDeviceToHost);
    cudaFree(ptrs[i]);
    r.out[t.get()] = gather(*t, host.data());
  }
  if (ws) cudaFree(ws);
  cudaStreamDestroy(stream);
  std::printf("  plan %s (workspace %lld B, variant pack mode '%s')\n", r.plan_name.c_str(), (long long)r.workspace,
              cudnn::variant_pack_mode());
  return ::testing::AssertionSuccess();
}

Host random(size_t n, uint32_t seed, DataType dt, double lo = -1, double hi = 1) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> u(lo, hi);
  Host v(n);
  for (auto& x : v) x = round_to(dt, u(rng));
  return v;
}

void expect_close(const Host& got, const Host& want, double atol, double rtol, const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  size_t bad = 0, first = 0;
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    double err = std::fabs(got[i] - want[i]);
    if (!(err <= atol + rtol * std::fabs(want[i]))) {
      if (!bad) first = i;
      ++bad;
    }
    if (err > worst || std::isnan(err)) worst = err;
  }
  EXPECT_EQ(bad, 0u) << what << ": " << bad << " of " << got.size() << " mismatch; first at " << first << " got "
                     << got[first] << " want " << want[first] << "; worst abs err " << worst;
}

// ---------------------------------------------------------------------------------------------

TEST(CudnnLoader, LoadsOrDeclinesWithPaths) {
  std::string d = cudnn::describe_loaded();
  std::printf("  %s\n", d.c_str());
  EXPECT_FALSE(d.empty());
  Graph g;
  auto a = input(g, "a", {4, 4}, DataType::FLOAT);
  auto y = g.relu(a);
  as_output(y, {4, 4}, DataType::FLOAT);
  prepare(g);
  Target cpu;
  Proposal p = make_cudnn_engine()->propose_plans(g, cpu);
  EXPECT_TRUE(p.plans.empty());
  ASSERT_FALSE(p.declines.empty());
  EXPECT_NE(p.declines[0].find("cudnn"), std::string::npos) << p.declines[0];
}

// Skips (printing cuDNN's reasons) when the engine declines the graph: a decline is a legal answer for
// what this cuDNN has no engine for; a plan that runs must still be right.
#define SKIP_IF_DECLINED(g)                                                          \
  do {                                                                               \
    Proposal p_ = make_cudnn_engine()->propose_plans(g, cuda_target());              \
    if (p_.plans.empty()) {                                                          \
      std::string m_;                                                                \
      for (auto& d_ : p_.declines) m_ += d_ + "; ";                                  \
      GTEST_SKIP() << "declined: " << m_;                                            \
    }                                                                                \
  } while (0)

// Bias broadcast over rows (batch 1). A bias broadcast over the batch too is declined (next test).
TEST(CudnnEngine, PointwiseChainFp32) {
  SKIP_WITHOUT_CUDNN();
  Graph g;
  g.set_io_data_type(DataType::FLOAT).set_intermediate_data_type(DataType::FLOAT).set_compute_data_type(DataType::FLOAT);
  std::vector<int64_t> d = {1, 32, 32};
  auto a = input(g, "a", d, DataType::FLOAT), b = input(g, "b", d, DataType::FLOAT);
  auto bias = input(g, "bias", {1, 1, 32}, DataType::FLOAT);
  auto t = g.mul(a, b);
  auto u = g.add(t, bias);
  auto y = g.sigmoid(u);
  as_output(y, d, DataType::FLOAT);
  prepare(g);
  size_t n = 32 * 32;
  Host ha = random(n, 1, DataType::FLOAT), hb = random(n, 2, DataType::FLOAT), hbias = random(32, 3, DataType::FLOAT);
  RunResult r;
  ASSERT_TRUE(run_graph(g, {{a.get(), ha}, {b.get(), hb}, {bias.get(), hbias}}, r));
  Host want(n);
  for (size_t i = 0; i < n; ++i) want[i] = 1.0 / (1.0 + std::exp(-(ha[i] * hb[i] + hbias[i % 32])));
  expect_close(r.out[y.get()], want, 1e-5, 1e-4, "sigmoid(a*b+bias)");
}

// cuDNN 9.19's pointwise engine computed a [1,1,32] bias added to [2,16,32] wrongly past batch 0: declined,
// with the reason naming the tensor.
TEST(CudnnEngine, PointwiseOuterBroadcastDeclined) {
  SKIP_WITHOUT_CUDNN();
  Graph g;
  g.set_io_data_type(DataType::FLOAT).set_intermediate_data_type(DataType::FLOAT).set_compute_data_type(DataType::FLOAT);
  std::vector<int64_t> d = {2, 16, 32};
  auto a = input(g, "a", d, DataType::FLOAT);
  auto bias = input(g, "bias", {1, 1, 32}, DataType::FLOAT);
  auto y = g.add(a, bias);
  as_output(y, d, DataType::FLOAT);
  prepare(g);
  Proposal p = make_cudnn_engine()->propose_plans(g, cuda_target());
  EXPECT_TRUE(p.plans.empty());
  ASSERT_FALSE(p.declines.empty());
  EXPECT_NE(p.declines[0].find("bias"), std::string::npos) << p.declines[0];
  std::printf("  decline: %s\n", p.declines[0].c_str());
}

TEST(CudnnEngine, MatmulBiasReluBf16) {
  SKIP_WITHOUT_CUDNN();
  Graph g;
  g.set_io_data_type(DataType::BFLOAT16).set_intermediate_data_type(DataType::FLOAT).set_compute_data_type(DataType::FLOAT);
  int64_t B = 2, M = 64, K = 128, N = 96;
  auto A = input(g, "A", {B, M, K}, DataType::BFLOAT16);
  auto Bm = input(g, "B", {B, K, N}, DataType::BFLOAT16);
  auto bias = input(g, "bias", {1, 1, N}, DataType::BFLOAT16);
  auto C = g.matmul(A, Bm);
  C->set_data_type(DataType::FLOAT);
  auto D = g.add(C, bias);
  D->set_data_type(DataType::FLOAT);
  auto Y = g.relu(D);
  as_output(Y, {B, M, N}, DataType::BFLOAT16);
  prepare(g);
  Host ha = random(size_t(B * M * K), 4, DataType::BFLOAT16), hb = random(size_t(B * K * N), 5, DataType::BFLOAT16),
       hbias = random(size_t(N), 6, DataType::BFLOAT16);
  RunResult r;
  ASSERT_TRUE(run_graph(g, {{A.get(), ha}, {Bm.get(), hb}, {bias.get(), hbias}}, r));
  Host want(static_cast<size_t>(B * M * N));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 0; n < N; ++n) {
        double s = 0;
        for (int64_t k = 0; k < K; ++k) s += ha[size_t((b * M + m) * K + k)] * hb[size_t((b * K + k) * N + n)];
        want[size_t((b * M + m) * N + n)] = std::max(0.0, s + hbias[size_t(n)]);
      }
  expect_close(r.out[Y.get()], want, 2e-2, 1e-2, "relu(A@B+bias)");
}

TEST(CudnnEngine, MatmulCapturedInCudaGraph) {
  SKIP_WITHOUT_CUDNN();
  Graph g;
  g.set_io_data_type(DataType::HALF).set_intermediate_data_type(DataType::FLOAT).set_compute_data_type(DataType::FLOAT);
  int64_t M = 128, K = 64, N = 128;
  auto A = input(g, "A", {1, M, K}, DataType::HALF);
  auto Bm = input(g, "B", {1, K, N}, DataType::HALF);
  auto C = g.matmul(A, Bm);
  as_output(C, {1, M, N}, DataType::HALF);
  prepare(g);
  Host ha = random(size_t(M * K), 7, DataType::HALF), hb = random(size_t(K * N), 8, DataType::HALF);
  RunResult r;
  ASSERT_TRUE(run_graph(g, {{A.get(), ha}, {Bm.get(), hb}}, r, /*capture=*/true));
  Host want(static_cast<size_t>(M * N));
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      double s = 0;
      for (int64_t k = 0; k < K; ++k) s += ha[size_t(m * K + k)] * hb[size_t(k * N + n)];
      want[size_t(m * N + n)] = s;
    }
  expect_close(r.out[C.get()], want, 2e-2, 5e-3, "captured matmul");
}

// The router's autotune over every built cuDNN engine config, timed with the engine's CUDA-event timer:
// the plans come back fastest first with measured times.
TEST(CudnnEngine, AutotuneOrdersCudnnPlans) {
  SKIP_WITHOUT_CUDNN();
  Graph g;
  g.set_io_data_type(DataType::HALF).set_intermediate_data_type(DataType::FLOAT).set_compute_data_type(DataType::FLOAT);
  auto A = input(g, "A", {1, 512, 512}, DataType::HALF);
  auto Bm = input(g, "B", {1, 512, 512}, DataType::HALF);
  as_output(g.matmul(A, Bm), {1, 512, 512}, DataType::HALF);
  prepare(g);
  RunResult r;
  ASSERT_TRUE(plan_on_cudnn(g, 0, r));
  ASSERT_TRUE(g.build_plans(BuildPlanPolicy::ALL).is_good());
  int64_t ws_bytes = 1;
  for (int64_t i = 0; i < g.get_execution_plan_count(); ++i) {
    int64_t b = 0;
    if (g.get_workspace_size_plan_at_index(i, b).is_good()) ws_bytes = std::max(ws_bytes, b);
  }
  std::unordered_map<int64_t, void*> pack;
  for (int64_t uid : g.variant_uids()) {
    void* p = nullptr;
    cudaMalloc(&p, size_t(g.find_tensor(uid)->storage_bytes()));
    cudaMemset(p, 0, size_t(g.find_tensor(uid)->storage_bytes()));
    pack[uid] = p;
  }
  void* ws = nullptr;
  cudaMalloc(&ws, size_t(ws_bytes));
  Status s = g.autotune(pack, ws, nullptr);
  EXPECT_TRUE(s.is_good()) << s.to_string();
  double prev = 0;
  int timed = 0;
  for (int64_t i = 0; i < g.get_execution_plan_count(); ++i) {
    PlanInfo info;
    ASSERT_TRUE(g.get_plan_info_at_index(i, info).is_good());
    if (info.measured_us < 0) continue;
    std::printf("  %s: %.1f us\n", info.plan.c_str(), info.measured_us);
    EXPECT_GE(info.measured_us, prev);
    EXPECT_LT(info.measured_us, 1e6);  // event time of a 512^3 matmul, not a host-time artefact
    prev = info.measured_us;
    ++timed;
  }
  EXPECT_GT(timed, 0);
  EXPECT_TRUE(g.execute(pack, ws).is_good());
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  for (auto& [uid, p] : pack) cudaFree(p);
  cudaFree(ws);
}

TEST(CudnnEngine, ConvFpropNhwcHalf) {
  SKIP_WITHOUT_CUDNN();
  Graph g;
  g.set_io_data_type(DataType::HALF).set_intermediate_data_type(DataType::FLOAT).set_compute_data_type(DataType::FLOAT);
  int64_t N = 2, C = 16, H = 10, W = 10, K = 32, R = 3, S = 3;
  auto X = input(g, "X", {N, C, H, W}, DataType::HALF, {H * W * C, 1, W * C, C});
  auto Wt = input(g, "W", {K, C, R, S}, DataType::HALF, {C * R * S, 1, S * C, C});
  auto Y = g.conv_fprop(X, Wt, NodeAttrs().set("pre_padding", std::vector<int64_t>{1, 1})
                                   .set("post_padding", std::vector<int64_t>{1, 1})
                                   .set("stride", std::vector<int64_t>{1, 1})
                                   .set("dilation", std::vector<int64_t>{1, 1}));
  as_output(Y, {N, K, H, W}, DataType::HALF, {H * W * K, 1, W * K, K});
  prepare(g);
  Host hx = random(size_t(N * C * H * W), 9, DataType::HALF), hw = random(size_t(K * C * R * S), 10, DataType::HALF);
  RunResult r;
  ASSERT_TRUE(run_graph(g, {{X.get(), hx}, {Wt.get(), hw}}, r));
  Host want(static_cast<size_t>(N * K * H * W));
  for (int64_t n = 0; n < N; ++n)
    for (int64_t k = 0; k < K; ++k)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t w = 0; w < W; ++w) {
          double s = 0;
          for (int64_t c = 0; c < C; ++c)
            for (int64_t r2 = 0; r2 < R; ++r2)
              for (int64_t s2 = 0; s2 < S; ++s2) {
                int64_t ih = h + r2 - 1, iw = w + s2 - 1;
                if (ih < 0 || iw < 0 || ih >= H || iw >= W) continue;
                s += hx[size_t(((n * C + c) * H + ih) * W + iw)] * hw[size_t(((k * C + c) * R + r2) * S + s2)];
              }
          want[size_t(((n * K + k) * H + h) * W + w)] = s;
        }
  expect_close(r.out[Y.get()], want, 3e-2, 5e-3, "conv_fprop");
}

TEST(CudnnEngine, ReductionSumFp32) {
  SKIP_WITHOUT_CUDNN();
  Graph g;
  g.set_io_data_type(DataType::FLOAT).set_intermediate_data_type(DataType::FLOAT).set_compute_data_type(DataType::FLOAT);
  auto X = input(g, "X", {4, 32, 64}, DataType::FLOAT);
  auto Y = g.reduction(X, NodeAttrs().set("mode", "ADD").set("dims", std::vector<int64_t>{4, 32, 1}));
  as_output(Y, {4, 32, 1}, DataType::FLOAT);
  prepare(g);
  SKIP_IF_DECLINED(g);  // cuDNN 9.19: "!is_NHWC ... check_reduction_support_fort" for every config
  Host hx = random(size_t(4 * 32 * 64), 11, DataType::FLOAT);
  RunResult r;
  ASSERT_TRUE(run_graph(g, {{X.get(), hx}}, r));
  Host want(4 * 32, 0.0);
  for (size_t i = 0; i < hx.size(); ++i) want[i / 64] += hx[i];
  expect_close(r.out[Y.get()], want, 1e-4, 1e-4, "row sum");
}

void norm_case(bool rms, DataType dt) {
  Graph g;
  g.set_io_data_type(dt).set_intermediate_data_type(DataType::FLOAT).set_compute_data_type(DataType::FLOAT);
  int64_t Bt = 64, D = 256;
  auto X = input(g, "X", {Bt, D, 1, 1}, dt);
  auto scale = input(g, "scale", {1, D, 1, 1}, DataType::FLOAT);
  auto bias = input(g, "bias", {1, D, 1, 1}, DataType::FLOAT);
  auto eps = g.tensor(Scalar::of_float(1e-5f));
  TensorPtr Y, mean, inv;
  NodeAttrs at = NodeAttrs().set("forward_phase", "TRAINING");
  if (rms) {
    auto o = g.rmsnorm(X, scale, eps, at);
    Y = o[0];
    inv = o[1];
  } else {
    auto o = g.layernorm(X, scale, bias, eps, at);
    Y = o[0];
    mean = o[1];
    inv = o[2];
    as_output(mean, {Bt, 1, 1, 1}, DataType::FLOAT);
  }
  as_output(Y, {Bt, D, 1, 1}, dt);
  as_output(inv, {Bt, 1, 1, 1}, DataType::FLOAT);
  prepare(g);
  Host hx = random(size_t(Bt * D), 12, dt, -2, 2), hs = random(size_t(D), 13, DataType::FLOAT, 0.5, 1.5),
       hb = random(size_t(D), 14, DataType::FLOAT);
  RunResult r;
  std::map<const TensorAttr*, Host> data = {{X.get(), hx}, {scale.get(), hs}};
  if (!rms) data[bias.get()] = hb;
  ASSERT_TRUE(run_graph(g, data, r));
  Host wy(static_cast<size_t>(Bt * D)), winv(static_cast<size_t>(Bt)), wmean(static_cast<size_t>(Bt));
  for (int64_t b = 0; b < Bt; ++b) {
    double m = 0, v = 0;
    for (int64_t d = 0; d < D; ++d) m += hx[size_t(b * D + d)];
    m /= double(D);
    if (rms) m = 0;
    for (int64_t d = 0; d < D; ++d) v += (hx[size_t(b * D + d)] - m) * (hx[size_t(b * D + d)] - m);
    v /= double(D);
    double iv = 1.0 / std::sqrt(v + 1e-5);
    wmean[size_t(b)] = m;
    winv[size_t(b)] = iv;
    for (int64_t d = 0; d < D; ++d)
      wy[size_t(b * D + d)] = (hx[size_t(b * D + d)] - m) * iv * hs[size_t(d)] + (rms ? 0.0 : hb[size_t(d)]);
  }
  double tol = dt == DataType::FLOAT ? 1e-4 : 2e-2;
  expect_close(r.out[Y.get()], wy, tol, tol, rms ? "rmsnorm Y" : "layernorm Y");
  expect_close(r.out[inv.get()], winv, 1e-3, 1e-3, "inv_variance");
  if (!rms) expect_close(r.out[mean.get()], wmean, 1e-4, 1e-4, "mean");
}

TEST(CudnnEngine, RmsNormForwardBf16) {
  SKIP_WITHOUT_CUDNN();
  norm_case(true, DataType::BFLOAT16);
}
TEST(CudnnEngine, LayerNormForwardFp32) {
  SKIP_WITHOUT_CUDNN();
  norm_case(false, DataType::FLOAT);
}

TEST(CudnnEngine, RmsNormBackwardBf16) {
  SKIP_WITHOUT_CUDNN();
  Graph g;
  g.set_io_data_type(DataType::BFLOAT16).set_intermediate_data_type(DataType::FLOAT).set_compute_data_type(DataType::FLOAT);
  int64_t Bt = 32, D = 128;
  auto DY = input(g, "DY", {Bt, D, 1, 1}, DataType::BFLOAT16);
  auto X = input(g, "X", {Bt, D, 1, 1}, DataType::BFLOAT16);
  auto scale = input(g, "scale", {1, D, 1, 1}, DataType::FLOAT);
  auto inv = input(g, "inv", {Bt, 1, 1, 1}, DataType::FLOAT);
  auto o = g.rmsnorm_backward(DY, X, scale, inv);
  as_output(o[0], {Bt, D, 1, 1}, DataType::BFLOAT16);
  as_output(o[1], {1, D, 1, 1}, DataType::FLOAT);
  prepare(g);
  Host hdy = random(size_t(Bt * D), 15, DataType::BFLOAT16), hx = random(size_t(Bt * D), 16, DataType::BFLOAT16),
       hs = random(size_t(D), 17, DataType::FLOAT, 0.5, 1.5);
  Host hinv(static_cast<size_t>(Bt));
  for (int64_t b = 0; b < Bt; ++b) {
    double v = 0;
    for (int64_t d = 0; d < D; ++d) v += hx[size_t(b * D + d)] * hx[size_t(b * D + d)];
    hinv[size_t(b)] = round_to(DataType::FLOAT, 1.0 / std::sqrt(v / double(D) + 1e-5));
  }
  RunResult r;
  ASSERT_TRUE(run_graph(g, {{DY.get(), hdy}, {X.get(), hx}, {scale.get(), hs}, {inv.get(), hinv}}, r));
  Host wdx(static_cast<size_t>(Bt * D)), wds(static_cast<size_t>(D), 0.0);
  for (int64_t b = 0; b < Bt; ++b) {
    double iv = hinv[size_t(b)], dot = 0;
    for (int64_t d = 0; d < D; ++d) {
      double xh = hx[size_t(b * D + d)] * iv;
      dot += hdy[size_t(b * D + d)] * hs[size_t(d)] * xh;
      wds[size_t(d)] += hdy[size_t(b * D + d)] * xh;
    }
    for (int64_t d = 0; d < D; ++d) {
      double xh = hx[size_t(b * D + d)] * iv;
      wdx[size_t(b * D + d)] = iv * (hdy[size_t(b * D + d)] * hs[size_t(d)] - xh * dot / double(D));
    }
  }
  expect_close(r.out[o[0].get()], wdx, 3e-2, 2e-2, "rmsnorm dX");
  expect_close(r.out[o[1].get()], wds, 2e-2, 1e-2, "rmsnorm dscale");
}

// ---- SDPA: host reference in fp64
struct Attn {
  int64_t B, Hq, Hk, Sq, Skv, D;
  bool causal;
  double scale;
  DataType dt = DataType::BFLOAT16;
  bool bottom_right = false;
};

// Masked out: key j beyond query i's diagonal (shifted by Skv - Sq when bottom-right aligned).
bool masked(const Attn& a, int64_t i, int64_t j) {
  return a.causal && j > i + (a.bottom_right ? a.Skv - a.Sq : 0);
}

void sdpa_ref(const Attn& a, const Host& q, const Host& k, const Host& v, Host& o, Host& stats) {
  o.assign(size_t(a.B * a.Hq * a.Sq * a.D), 0);
  stats.assign(size_t(a.B * a.Hq * a.Sq), 0);
  int64_t grp = a.Hq / a.Hk;
  std::vector<double> s(size_t(a.Skv));
  for (int64_t b = 0; b < a.B; ++b)
    for (int64_t h = 0; h < a.Hq; ++h)
      for (int64_t i = 0; i < a.Sq; ++i) {
        int64_t hk = h / grp;
        double mx = -INFINITY;
        for (int64_t j = 0; j < a.Skv; ++j) {
          double acc = 0;
          for (int64_t d = 0; d < a.D; ++d)
            acc += q[size_t(((b * a.Hq + h) * a.Sq + i) * a.D + d)] * k[size_t(((b * a.Hk + hk) * a.Skv + j) * a.D + d)];
          s[size_t(j)] = masked(a, i, j) ? -INFINITY : acc * a.scale;
          mx = std::max(mx, s[size_t(j)]);
        }
        double z = 0;
        for (int64_t j = 0; j < a.Skv; ++j) z += std::exp(s[size_t(j)] - mx);
        stats[size_t((b * a.Hq + h) * a.Sq + i)] = mx + std::log(z);
        for (int64_t j = 0; j < a.Skv; ++j) {
          double p = std::exp(s[size_t(j)] - mx) / z;
          for (int64_t d = 0; d < a.D; ++d)
            o[size_t(((b * a.Hq + h) * a.Sq + i) * a.D + d)] += p * v[size_t(((b * a.Hk + hk) * a.Skv + j) * a.D + d)];
        }
      }
}

void sdpa_bwd_ref(const Attn& a, const Host& q, const Host& k, const Host& v, const Host& o, const Host& dO,
                  const Host& stats, Host& dq, Host& dk, Host& dv) {
  dq.assign(q.size(), 0);
  dk.assign(k.size(), 0);
  dv.assign(v.size(), 0);
  int64_t grp = a.Hq / a.Hk;
  std::vector<double> p(size_t(a.Skv)), dp(size_t(a.Skv));
  for (int64_t b = 0; b < a.B; ++b)
    for (int64_t h = 0; h < a.Hq; ++h)
      for (int64_t i = 0; i < a.Sq; ++i) {
        int64_t hk = h / grp;
        size_t qi = size_t(((b * a.Hq + h) * a.Sq + i) * a.D);
        double dsum = 0;
        for (int64_t d = 0; d < a.D; ++d) dsum += dO[qi + size_t(d)] * o[qi + size_t(d)];
        for (int64_t j = 0; j < a.Skv; ++j) {
          size_t kj = size_t(((b * a.Hk + hk) * a.Skv + j) * a.D);
          double acc = 0, dpa = 0;
          for (int64_t d = 0; d < a.D; ++d) {
            acc += q[qi + size_t(d)] * k[kj + size_t(d)];
            dpa += dO[qi + size_t(d)] * v[kj + size_t(d)];
          }
          p[size_t(j)] = masked(a, i, j) ? 0.0 : std::exp(acc * a.scale - stats[size_t((b * a.Hq + h) * a.Sq + i)]);
          dp[size_t(j)] = dpa;
        }
        for (int64_t j = 0; j < a.Skv; ++j) {
          size_t kj = size_t(((b * a.Hk + hk) * a.Skv + j) * a.D);
          double ds = p[size_t(j)] * (dp[size_t(j)] - dsum) * a.scale;
          for (int64_t d = 0; d < a.D; ++d) {
            dv[kj + size_t(d)] += p[size_t(j)] * dO[qi + size_t(d)];
            dq[qi + size_t(d)] += ds * k[kj + size_t(d)];
            dk[kj + size_t(d)] += ds * q[qi + size_t(d)];
          }
        }
      }
}

NodeAttrs mask_attrs(const Attn& a, NodeAttrs at) {
  if (a.causal) at.set("right_bound", int64_t(0));
  if (a.bottom_right) at.set("diagonal_alignment", "BOTTOM_RIGHT");
  return at;
}

void sdpa_fwd_case(Attn a, const char* impl = "COMPOSITE") {
  Graph g;
  g.set_io_data_type(a.dt).set_intermediate_data_type(DataType::FLOAT).set_compute_data_type(DataType::FLOAT);
  auto Q = input(g, "Q", {a.B, a.Hq, a.Sq, a.D}, a.dt);
  auto K = input(g, "K", {a.B, a.Hk, a.Skv, a.D}, a.dt);
  auto V = input(g, "V", {a.B, a.Hk, a.Skv, a.D}, a.dt);
  NodeAttrs at;
  at.set("generate_stats", true).set("attn_scale_value", a.scale).set("implementation", impl);
  auto o = g.sdpa(Q, K, V, mask_attrs(a, at));
  as_output(o[0], {a.B, a.Hq, a.Sq, a.D}, a.dt);
  as_output(o[1], {a.B, a.Hq, a.Sq, 1}, DataType::FLOAT);
  prepare(g);
  Host hq = random(size_t(a.B * a.Hq * a.Sq * a.D), 20, a.dt),
       hk = random(size_t(a.B * a.Hk * a.Skv * a.D), 21, a.dt),
       hv = random(size_t(a.B * a.Hk * a.Skv * a.D), 22, a.dt);
  RunResult r;
  ASSERT_TRUE(run_graph(g, {{Q.get(), hq}, {K.get(), hk}, {V.get(), hv}}, r));
  Host wo, ws;
  sdpa_ref(a, hq, hk, hv, wo, ws);
  expect_close(r.out[o[0].get()], wo, 2e-2, 2e-2, "sdpa O");
  expect_close(r.out[o[1].get()], ws, 1e-2, 1e-3, "sdpa Stats");
}

TEST(CudnnEngine, SdpaForwardBf16D128) {
  SKIP_WITHOUT_CUDNN();
  sdpa_fwd_case({1, 2, 2, 128, 128, 128, false, 1.0 / std::sqrt(128.0)});
}
TEST(CudnnEngine, SdpaForwardCausalGqa) {
  SKIP_WITHOUT_CUDNN();
  sdpa_fwd_case({2, 4, 2, 128, 128, 128, true, 1.0 / std::sqrt(128.0)});
}
TEST(CudnnEngine, SdpaForwardCausalFp16D64) {
  SKIP_WITHOUT_CUDNN();
  sdpa_fwd_case({2, 2, 2, 128, 128, 64, true, 0.125, DataType::HALF});
}
TEST(CudnnEngine, SdpaForwardBottomRightFp16) {
  SKIP_WITHOUT_CUDNN();
  sdpa_fwd_case({1, 2, 1, 64, 192, 64, true, 0.125, DataType::HALF, true});
}
TEST(CudnnEngine, SdpaForwardAutoPicksAPlan) {
  SKIP_WITHOUT_CUDNN();
  sdpa_fwd_case({1, 2, 2, 128, 256, 64, false, 0.125}, "AUTO");
}
TEST(CudnnEngine, SdpaForwardUnified) {
  SKIP_WITHOUT_CUDNN();
  sdpa_fwd_case({1, 2, 2, 128, 256, 128, false, 0.125}, "UNIFIED");
}

void sdpa_bwd_case(Attn a, bool deterministic, const char* impl = "COMPOSITE") {
  Host hq = random(size_t(a.B * a.Hq * a.Sq * a.D), 30, a.dt),
       hk = random(size_t(a.B * a.Hk * a.Skv * a.D), 31, a.dt),
       hv = random(size_t(a.B * a.Hk * a.Skv * a.D), 32, a.dt),
       hdo = random(size_t(a.B * a.Hq * a.Sq * a.D), 33, a.dt);
  Host ho, hs;
  sdpa_ref(a, hq, hk, hv, ho, hs);
  for (auto& x : ho) x = round_to(a.dt, x);
  for (auto& x : hs) x = round_to(DataType::FLOAT, x);
  Graph g;
  g.set_io_data_type(a.dt).set_intermediate_data_type(DataType::FLOAT).set_compute_data_type(DataType::FLOAT);
  auto Q = input(g, "Q", {a.B, a.Hq, a.Sq, a.D}, a.dt);
  auto K = input(g, "K", {a.B, a.Hk, a.Skv, a.D}, a.dt);
  auto V = input(g, "V", {a.B, a.Hk, a.Skv, a.D}, a.dt);
  auto O = input(g, "O", {a.B, a.Hq, a.Sq, a.D}, a.dt);
  auto dO = input(g, "dO", {a.B, a.Hq, a.Sq, a.D}, a.dt);
  auto St = input(g, "Stats", {a.B, a.Hq, a.Sq, 1}, DataType::FLOAT);
  NodeAttrs at;
  at.set("attn_scale_value", a.scale).set("use_deterministic_algorithm", deterministic).set("implementation", impl);
  auto o = g.sdpa_backward(Q, K, V, O, dO, St, mask_attrs(a, at));
  as_output(o[0], {a.B, a.Hq, a.Sq, a.D}, a.dt);
  as_output(o[1], {a.B, a.Hk, a.Skv, a.D}, a.dt);
  as_output(o[2], {a.B, a.Hk, a.Skv, a.D}, a.dt);
  prepare(g);
  RunResult r;
  ASSERT_TRUE(run_graph(g, {{Q.get(), hq}, {K.get(), hk}, {V.get(), hv}, {O.get(), ho}, {dO.get(), hdo}, {St.get(), hs}}, r));
  Host wq, wk, wv;
  sdpa_bwd_ref(a, hq, hk, hv, ho, hdo, hs, wq, wk, wv);
  expect_close(r.out[o[0].get()], wq, 3e-2, 3e-2, "dQ");
  expect_close(r.out[o[1].get()], wk, 3e-2, 3e-2, "dK");
  expect_close(r.out[o[2].get()], wv, 3e-2, 3e-2, "dV");
}

TEST(CudnnEngine, SdpaBackwardBf16D128) {
  SKIP_WITHOUT_CUDNN();
  sdpa_bwd_case({1, 2, 2, 128, 128, 128, false, 1.0 / std::sqrt(128.0)}, false);
}
TEST(CudnnEngine, SdpaBackwardCausal) {
  SKIP_WITHOUT_CUDNN();
  sdpa_bwd_case({2, 2, 2, 128, 128, 128, true, 1.0 / std::sqrt(128.0)}, false);
}
TEST(CudnnEngine, SdpaBackwardDeterministic) {
  SKIP_WITHOUT_CUDNN();
  sdpa_bwd_case({1, 2, 2, 128, 128, 128, true, 1.0 / std::sqrt(128.0)}, true);
}
TEST(CudnnEngine, SdpaBackwardCausalGqaFp16D64) {
  SKIP_WITHOUT_CUDNN();
  sdpa_bwd_case({2, 4, 2, 128, 128, 64, true, 0.125, DataType::HALF}, false);
}
// ---- against the reference engine (the numeric oracle) on the same inputs

// Random inputs for every non-produced, non-constant tensor of g that `data` does not cover.
void fill_random(Graph& g, Data& data, uint32_t seed, double lo = -1, double hi = 1) {
  for (const auto& t : g.tensors()) {
    if (t->get_is_virtual() || t->is_produced() || data.count(t.get())) continue;
    if (t->get_is_pass_by_value() && t->get_value().is_set()) continue;
    DataType dt = t->get_data_type();
    Host v = random(size_t(t->volume()), seed++, dt == DataType::BOOLEAN ? DataType::FLOAT : dt, lo, hi);
    if (dt == DataType::BOOLEAN)
      for (auto& x : v) x = x > 0.5 * (lo + hi) ? 1.0 : 0.0;
    data[t.get()] = std::move(v);
  }
}

// Every produced tensor of the cudnn run `r` against the reference engine's; `valid(t, i)` (optional)
// picks the logical elements compared (padded rows are unspecified), and elements both runs left
// unwritten (NaN poison on both sides) are not compared.
void expect_matches_reference(Graph& g, const Data& data, const RunResult& r, double atol, double rtol,
                              const std::function<bool(const TensorAttr&, size_t)>& valid = nullptr) {
  std::map<const TensorAttr*, Host> ref;
  ASSERT_TRUE(run_reference(g, data, ref));
  for (const auto& [t, want] : ref) {
    if (!t->is_produced()) continue;
    auto it = r.out.find(t);
    ASSERT_NE(it, r.out.end()) << t->get_name();
    Host got_v, want_v;
    for (size_t i = 0; i < want.size(); ++i) {
      if (valid && !valid(*t, i)) continue;
      if (std::isnan(want[i]) && std::isnan(it->second[i])) continue;
      got_v.push_back(it->second[i]);
      want_v.push_back(want[i]);
    }
    expect_close(got_v, want_v, atol, rtol, t->get_name().empty() ? "output" : t->get_name().c_str());
  }
}

// Every pointwise mode of pointwise_modes.def on same-shape FLOAT inputs ([2,8,16]). BINARY_SELECT's
// mask is computed in the graph (CMP_GT of two FLOAT inputs, a virtual BOOLEAN); the LOGICAL modes take
// BOOLEAN inputs and outputs in memory (one byte per element, described to cuDNN as UINT8): each either
// matches the reference or declines. Any decline is reported, not failed. One cuDNN plan per graph keeps
// the sweep short (each plan of the runtime-fusion engine is compiled when proposed).
TEST(CudnnEngine, PointwiseEveryModeMatchesReference) {
  SKIP_WITHOUT_CUDNN();
  struct EnvGuard {
    EnvGuard() { setenv("OPENDNN_CUDNN_MAX_PLANS", "1", 1); }
    ~EnvGuard() { unsetenv("OPENDNN_CUDNN_MAX_PLANS"); }
  } one_plan;
  struct Mode { const char* name; int arity; };
  static const Mode kModes[] = {
#define OPENDNN_PW(e, m, arity) {#e, arity},
#include "opendnn/pointwise_modes.def"
#undef OPENDNN_PW
  };
  int ran = 0;
  for (const Mode& m : kModes) {
    std::string name = m.name;
    bool logical = name.rfind("LOGICAL", 0) == 0;
    bool positive = name == "LOG" || name == "SQRT" || name == "RSQRT" || name == "POW" || name == "RECIPROCAL";
    Graph g;
    g.set_io_data_type(DataType::FLOAT).set_intermediate_data_type(DataType::FLOAT).set_compute_data_type(DataType::FLOAT);
    std::vector<int64_t> d = {2, 8, 16};
    std::vector<TensorPtr> in, data_in;
    for (int i = 0; i < m.arity; ++i) {
      std::string tn = "in" + std::to_string(i);
      if (name == "BINARY_SELECT" && i == 2) {
        TensorPtr l = input(g, "mask_l", d, DataType::FLOAT), r = input(g, "mask_r", d, DataType::FLOAT);
        TensorPtr mask = g.add_node(OpKind::POINTWISE, {l, r}, NodeAttrs().set("mode", std::string("CMP_GT")))[0];
        mask->set_data_type(DataType::BOOLEAN);
        in.push_back(mask);
        data_in.insert(data_in.end(), {l, r});
        continue;
      }
      in.push_back(input(g, tn.c_str(), d, logical ? DataType::BOOLEAN : DataType::FLOAT));
      data_in.push_back(in.back());
    }
    NodeAttrs at;
    at.set("mode", name);
    if (name == "GEN_INDEX") at.set("axis", int64_t(2));
    TensorPtr y = g.add_node(OpKind::POINTWISE, in, at)[0];
    y->set_output(true);
    if (logical || name.rfind("CMP_", 0) == 0) y->set_data_type(DataType::BOOLEAN);  // one byte per element in memory
    if (g.validate().is_bad()) {
      std::printf("  %s: validate fails, skipped\n", m.name);
      continue;
    }
    Proposal p = make_cudnn_engine()->propose_plans(g, cuda_target());
    if (p.plans.empty()) {
      std::printf("  %s: declined: %s\n", m.name, p.declines.empty() ? "" : p.declines[0].c_str());
      continue;
    }
    Data data;
    for (size_t i = 0; i < data_in.size(); ++i) {
      bool second = i == 1 && (name == "DIV" || name == "MOD" || name == "POW");
      double lo = positive || second ? 0.25 : -2.0, hi = 2.0;
      if (name == "TAN") lo = -1.0, hi = 1.0;  // away from the poles at +-pi/2
      data[data_in[i].get()] = random(size_t(data_in[i]->volume()), uint32_t(100 + i), DataType::FLOAT, lo, hi);
      if (logical)
        for (auto& x : data[data_in[i].get()]) x = x > 0 ? 1.0 : 0.0;
    }
    RunResult r;
    ASSERT_TRUE(run_graph(g, data, r)) << m.name;
    SCOPED_TRACE(m.name);
    expect_matches_reference(g, data, r, 1e-4, 1e-3);
    ++ran;
  }
  std::printf("  %d modes ran\n", ran);
  EXPECT_GT(ran, 20);
}

NodeAttrs conv_attrs() {
  return NodeAttrs().set("pre_padding", std::vector<int64_t>{1, 1}).set("post_padding", std::vector<int64_t>{1, 1})
      .set("stride", std::vector<int64_t>{1, 1}).set("dilation", std::vector<int64_t>{1, 1});
}

std::vector<int64_t> nhwc(const std::vector<int64_t>& d) { return {d[1] * d[2] * d[3], 1, d[3] * d[1], d[1]}; }

// Data gradient (DX from DY and W) or weight gradient (DW from X and DY), NHWC half, 3x3 pad 1.
void conv_grad_case(bool wgrad) {
  Graph g;
  g.set_io_data_type(DataType::HALF).set_intermediate_data_type(DataType::FLOAT).set_compute_data_type(DataType::FLOAT);
  std::vector<int64_t> xd = {2, 16, 10, 10}, wd = {32, 16, 3, 3}, yd = {2, 32, 10, 10};
  auto DY = input(g, "DY", yd, DataType::HALF, nhwc(yd));
  TensorPtr out;
  if (wgrad) out = g.conv_wgrad(input(g, "X", xd, DataType::HALF, nhwc(xd)), DY, conv_attrs());
  else out = g.conv_dgrad(DY, input(g, "W", wd, DataType::HALF, nhwc(wd)), conv_attrs());
  const std::vector<int64_t>& od = wgrad ? wd : xd;
  out->set_dim(od).set_stride(nhwc(od));
  as_output(out, od, wgrad ? DataType::FLOAT : DataType::HALF);
  prepare(g);
  Data data;
  fill_random(g, data, 300);
  RunResult r;
  ASSERT_TRUE(run_graph(g, data, r));
  expect_matches_reference(g, data, r, wgrad ? 5e-2 : 3e-2, 5e-3);
}

TEST(CudnnEngine, ConvDgradNhwcHalfMatchesReference) {
  SKIP_WITHOUT_CUDNN();
  conv_grad_case(false);
}
TEST(CudnnEngine, ConvWgradNhwcHalfMatchesReference) {
  SKIP_WITHOUT_CUDNN();
  conv_grad_case(true);
}

TEST(CudnnEngine, MatmulGeluEpilogueMatchesReference) {
  SKIP_WITHOUT_CUDNN();
  Graph g;
  g.set_io_data_type(DataType::BFLOAT16).set_intermediate_data_type(DataType::FLOAT).set_compute_data_type(DataType::FLOAT);
  auto A = input(g, "A", {1, 64, 96}, DataType::BFLOAT16);
  auto Bm = input(g, "B", {1, 96, 128}, DataType::BFLOAT16);
  auto C = g.matmul(A, Bm);
  C->set_data_type(DataType::FLOAT);
  auto Y = g.gelu(C);
  as_output(Y, {1, 64, 128}, DataType::BFLOAT16);
  prepare(g);
  Data data;
  fill_random(g, data, 320);
  RunResult r;
  ASSERT_TRUE(run_graph(g, data, r));
  expect_matches_reference(g, data, r, 2e-2, 1e-2);
}

// Reductions cuDNN 9.19 takes in NHWC (over C) form; declines are reported.
TEST(CudnnEngine, ReductionsNhwcMatchReference) {
  SKIP_WITHOUT_CUDNN();
  for (const char* mode : {"ADD", "MAX", "MIN", "AMAX"}) {
    Graph g;
    g.set_io_data_type(DataType::FLOAT).set_intermediate_data_type(DataType::FLOAT).set_compute_data_type(DataType::FLOAT);
    std::vector<int64_t> xd = {4, 64, 4, 4}, yd = {4, 1, 4, 4};
    auto X = input(g, "X", xd, DataType::FLOAT, nhwc(xd));
    auto Y = g.reduction(X, NodeAttrs().set("mode", mode).set("dims", yd));
    Y->set_dim(yd).set_stride(nhwc(yd));
    as_output(Y, yd, DataType::FLOAT);
    prepare(g);
    Proposal p = make_cudnn_engine()->propose_plans(g, cuda_target());
    if (p.plans.empty()) {
      std::printf("  reduction %s declined: %s\n", mode, p.declines.empty() ? "" : p.declines[0].c_str());
      continue;
    }
    Data data;
    fill_random(g, data, 330);
    RunResult r;
    ASSERT_TRUE(run_graph(g, data, r)) << mode;
    SCOPED_TRACE(mode);
    expect_matches_reference(g, data, r, 1e-4, 1e-4);
  }
}

// ---- norms against the reference: ranks 2-4, run-time (variant-pack) epsilon, every kind

enum class NormKind { LAYER, RMS, BATCH, INSTANCE };

// Forward (training) of `kind` on X of dims `xd` (statistics per row = the leading dim, per channel for
// batchnorm, per (n, c) for instancenorm); epsilon a run-time by-value scalar when `runtime_eps`.
void norm_fwd_vs_reference(NormKind kind, std::vector<int64_t> xd, DataType dt, bool runtime_eps) {
  Graph g;
  g.set_io_data_type(dt).set_intermediate_data_type(DataType::FLOAT).set_compute_data_type(DataType::FLOAT);
  size_t r = xd.size();
  std::vector<int64_t> pd(r, 1), sd(r, 1);  // scale dims; statistics dims
  if (kind == NormKind::BATCH || kind == NormKind::INSTANCE) {
    pd[1] = xd[1];
    sd[1] = xd[1];
    if (kind == NormKind::INSTANCE) sd[0] = xd[0];
  } else {
    for (size_t i = 1; i < r; ++i) pd[i] = xd[i];
    sd[0] = xd[0];
  }
  std::vector<int64_t> xs = r == 4 && kind != NormKind::LAYER && kind != NormKind::RMS ? nhwc(xd) : row_major_strides(xd);
  auto X = input(g, "X", xd, dt, xs);
  auto scale = input(g, "scale", pd, DataType::FLOAT);
  auto bias = input(g, "bias", pd, DataType::FLOAT);
  TensorPtr eps;
  if (runtime_eps) {
    TensorAttr a;
    a.set_name("eps").set_dim(std::vector<int64_t>(r, 1)).set_stride(std::vector<int64_t>(r, 1)).set_data_type(DataType::FLOAT);
    a.set_is_pass_by_value(true);
    eps = g.tensor(a);
  } else {
    eps = g.tensor(Scalar::of_float(1e-5f));
  }
  NodeAttrs at = NodeAttrs().set("forward_phase", "TRAINING");
  std::vector<TensorPtr> outs;
  auto take = [&](const auto& o) { outs.assign(o.begin(), o.end()); };
  switch (kind) {
    case NormKind::LAYER: take(g.layernorm(X, scale, bias, eps, at)); break;
    case NormKind::RMS: take(g.rmsnorm(X, scale, eps, at)); break;
    case NormKind::INSTANCE: take(g.instancenorm(X, scale, bias, eps, at)); break;
    case NormKind::BATCH: take(g.batchnorm(X, scale, bias, eps)); break;
  }
  as_output(outs[0], xd, dt, xs);
  for (size_t i = 1; i < outs.size() && i <= 2; ++i)  // mean, inv_variance (batchnorm's running stats stay unset)
    if (outs[i]) as_output(outs[i], sd, DataType::FLOAT);
  prepare(g);
  SKIP_IF_DECLINED(g);
  Data data;
  if (runtime_eps) data[eps.get()] = {1e-5};
  data[scale.get()] = random(size_t(scale->volume()), 400, DataType::FLOAT, 0.5, 1.5);
  fill_random(g, data, 410, -2, 2);
  RunResult res;
  ASSERT_TRUE(run_graph(g, data, res));
  double tol = dt == DataType::FLOAT ? 1e-4 : 2e-2;
  expect_matches_reference(g, data, res, tol, tol);
}

TEST(CudnnEngine, LayerNormRank2RuntimeEpsBf16) {
  SKIP_WITHOUT_CUDNN();
  norm_fwd_vs_reference(NormKind::LAYER, {64, 256}, DataType::BFLOAT16, true);
}
TEST(CudnnEngine, RmsNormRank3Fp32) {
  SKIP_WITHOUT_CUDNN();
  norm_fwd_vs_reference(NormKind::RMS, {4, 16, 128}, DataType::FLOAT, false);
}
TEST(CudnnEngine, RmsNorm4dRuntimeEpsBf16) {
  SKIP_WITHOUT_CUDNN();
  norm_fwd_vs_reference(NormKind::RMS, {64, 256, 1, 1}, DataType::BFLOAT16, true);
}
TEST(CudnnEngine, BatchNormForwardNhwcFp32) {
  SKIP_WITHOUT_CUDNN();
  norm_fwd_vs_reference(NormKind::BATCH, {4, 32, 6, 6}, DataType::FLOAT, false);
}
TEST(CudnnEngine, InstanceNormForwardNhwcFp32) {
  SKIP_WITHOUT_CUDNN();
  norm_fwd_vs_reference(NormKind::INSTANCE, {4, 32, 6, 6}, DataType::FLOAT, false);
}

// Backward of layer/RMS norm with statistics from the reference forward (consistent inputs).
void norm_bwd_vs_reference(bool rms, std::vector<int64_t> xd, DataType dt) {
  size_t r = xd.size();
  std::vector<int64_t> pd(r, 1), sd(r, 1);
  for (size_t i = 1; i < r; ++i) pd[i] = xd[i];
  sd[0] = xd[0];
  Graph g;
  g.set_io_data_type(dt).set_intermediate_data_type(DataType::FLOAT).set_compute_data_type(DataType::FLOAT);
  auto DY = input(g, "DY", xd, dt), X = input(g, "X", xd, dt);
  auto scale = input(g, "scale", pd, DataType::FLOAT);
  auto mean = rms ? nullptr : input(g, "mean", sd, DataType::FLOAT);
  auto iv = input(g, "inv_variance", sd, DataType::FLOAT);
  std::vector<TensorPtr> o;
  if (rms) {
    auto a = g.rmsnorm_backward(DY, X, scale, iv);
    o.assign(a.begin(), a.end());
  } else {
    auto a = g.layernorm_backward(DY, X, scale, mean, iv);
    o.assign(a.begin(), a.end());
  }
  as_output(o[0], xd, dt);
  as_output(o[1], pd, DataType::FLOAT);
  if (o.size() > 2 && o[2] && !rms) as_output(o[2], pd, DataType::FLOAT);
  prepare(g);
  SKIP_IF_DECLINED(g);
  Data data;
  fill_random(g, data, 500, -2, 2);
  // Statistics of X itself (what a forward would have saved).
  const Host& hx = data[X.get()];
  int64_t rows = xd[0], n = int64_t(hx.size()) / rows;
  Host hm(static_cast<size_t>(rows)), hiv(static_cast<size_t>(rows));
  for (int64_t i = 0; i < rows; ++i) {
    double m = 0, v = 0;
    for (int64_t j = 0; j < n; ++j) m += hx[size_t(i * n + j)];
    m = rms ? 0.0 : m / double(n);
    for (int64_t j = 0; j < n; ++j) v += (hx[size_t(i * n + j)] - m) * (hx[size_t(i * n + j)] - m);
    hm[size_t(i)] = round_to(DataType::FLOAT, m);
    hiv[size_t(i)] = round_to(DataType::FLOAT, 1.0 / std::sqrt(v / double(n) + 1e-5));
  }
  if (mean) data[mean.get()] = hm;
  data[iv.get()] = hiv;
  data[scale.get()] = random(size_t(scale->volume()), 510, DataType::FLOAT, 0.5, 1.5);
  RunResult res;
  ASSERT_TRUE(run_graph(g, data, res));
  expect_matches_reference(g, data, res, 3e-2, 2e-2);
}

TEST(CudnnEngine, LayerNormBackward4dBf16) {
  SKIP_WITHOUT_CUDNN();
  norm_bwd_vs_reference(false, {32, 128, 1, 1}, DataType::BFLOAT16);
}
TEST(CudnnEngine, LayerNormBackwardRank2Fp32) {
  SKIP_WITHOUT_CUDNN();
  norm_bwd_vs_reference(false, {32, 128}, DataType::FLOAT);
}
TEST(CudnnEngine, RmsNormBackwardRank3Bf16) {
  SKIP_WITHOUT_CUDNN();
  norm_bwd_vs_reference(true, {2, 16, 128}, DataType::BFLOAT16);
}

// ---- SDPA options against the reference (forward and backward)

struct SdpaOpts {
  bool causal = false;
  int64_t left = 0;      // sliding window (left_bound) when > 0
  bool bias = false;
  bool padding = false;  // seq_len_q = {S, 77}, seq_len_kv = {S, 50}
  bool ragged = false;   // THD: Q/K/V/O (dO/dQ/dK/dV) packed, one ragged-offset tensor each (needs padding)
  bool paged = false;    // K/V in 32-row pages (forward, unified)
  bool dropout = false;  // user mask (dropout_mask, 0/1) times dropout_scale = 4/3
  bool philox = false;   // generated dropout, p = 0.25 (seed/offset INT64 in device memory); RNG_dump out
  bool dbias = false;    // with bias, backward: dBias [1,H,S,S] as a graph output
  const char* impl = "COMPOSITE";
};

constexpr int64_t kB = 2, kH = 2, kS = 128, kD = 64;
const int32_t kSeqQ[kB] = {kS, 77}, kSeqKv[kB] = {kS, 50};

struct SdpaGraph {
  Graph g;
  TensorPtr Q, K, V, O, dO, St, bias, sq, skv, ptk, ptv, dmask, dscale, seed, offset;
  std::vector<TensorPtr> outs;
  std::vector<std::pair<TensorPtr, bool>> roffs;  // ragged offsets, true: of a K/V-side tensor
};

// Builds the forward (or backward, when `bwd`) SDPA graph of `o` in bf16 [B,H,S,D].
void build_sdpa(SdpaGraph& s, const SdpaOpts& o, bool bwd) {
  Graph& g = s.g;
  g.set_io_data_type(DataType::BFLOAT16).set_intermediate_data_type(DataType::FLOAT).set_compute_data_type(DataType::FLOAT);
  std::vector<int64_t> qd = {kB, kH, kS, kD};
  // BSHD strides (THD packing needs tokens outermost within a batch).
  std::vector<int64_t> bshd = {kS * kH * kD, kD, kH * kD, 1};
  // Each packed tensor gets its own offset tensor "ragged_<name>", as cuDNN Frontend's THD samples do.
  auto pack = [&](const TensorPtr& t, const std::string& name, bool kv_side) {
    if (!o.ragged) return;
    TensorPtr r = input(g, ("ragged_" + name).c_str(), {kB + 1, 1, 1, 1}, DataType::INT32);
    t->set_ragged_offset(r);
    s.roffs.push_back({r, kv_side});
  };
  auto attn = [&](const char* name, std::vector<int64_t> dims, bool kv_side) {
    auto t = input(g, name, dims, DataType::BFLOAT16, dims[2] == kS && dims[0] == kB ? bshd : row_major_strides(dims));
    pack(t, name, kv_side);
    return t;
  };
  int64_t blocks = kB * kS / 32;
  std::vector<int64_t> kvd = o.paged ? std::vector<int64_t>{blocks, kH, 32, kD} : qd;
  s.Q = attn("Q", qd, false);
  s.K = attn("K", kvd, true);
  s.V = attn("V", kvd, true);
  if (o.bias) s.bias = input(g, "bias", {1, kH, kS, kS}, DataType::BFLOAT16);
  if (o.padding) {
    s.sq = input(g, "seq_len_q", {kB, 1, 1, 1}, DataType::INT32);
    s.skv = input(g, "seq_len_kv", {kB, 1, 1, 1}, DataType::INT32);
  }
  if (o.dropout) {
    s.dmask = input(g, "dropout_mask", {kB, kH, kS, kS}, DataType::BFLOAT16);
    s.dscale = g.tensor(Scalar::of_float(4.0f / 3.0f));
  }
  if (o.philox) {
    s.seed = input(g, "seed", {1, 1, 1, 1}, DataType::INT64);
    s.offset = input(g, "offset", {1, 1, 1, 1}, DataType::INT64);
  }
  if (o.paged) {
    s.ptk = input(g, "page_table_k", {kB, 1, kS / 32, 1}, DataType::INT32);
    s.ptv = input(g, "page_table_v", {kB, 1, kS / 32, 1}, DataType::INT32);
  }
  NodeAttrs at;
  at.set("attn_scale_value", 0.125).set("implementation", o.impl);
  if (o.causal) at.set("right_bound", int64_t(0));
  if (o.left > 0) at.set("left_bound", o.left);
  if (o.padding) at.set("use_padding_mask", true);
  if (o.paged) at.set("max_seq_len_kv", kS);
  if (o.philox) at.set("dropout_probability", 0.25);
  std::vector<TensorPtr> in = {s.Q, s.K, s.V};
  if (bwd) {
    s.O = attn("O", qd, false);
    s.dO = attn("dO", qd, false);
    s.St = input(g, "Stats", {kB, kH, kS, 1}, DataType::FLOAT);
    in.insert(in.end(), {s.O, s.dO, s.St});
  } else {
    at.set("generate_stats", true);
  }
  // attn_scale, bias, seq_len_q/kv, cu_seq_len_q/kv, seed, offset, dropout_mask/scale, then dropout_scale_inv
  // (backward) or page tables (forward).
  in.insert(in.end(), {nullptr, s.bias, s.sq, s.skv, nullptr, nullptr, s.seed, s.offset, s.dmask, s.dscale});
  if (bwd && o.dropout) in.push_back(g.tensor(Scalar::of_float(0.75f)));  // dropout_scale_inv (unused by the math)
  if (!bwd && o.paged) in.insert(in.end(), {s.ptk, s.ptv});
  s.outs = g.add_node(bwd ? OpKind::SDPA_BACKWARD : OpKind::SDPA, in, at);
  if (bwd) {
    const char* names[] = {"dQ", "dK", "dV"};
    for (size_t i = 0; i < 3; ++i) {
      as_output(s.outs[i], i == 0 ? qd : kvd, DataType::BFLOAT16, bshd);
      pack(s.outs[i], names[i], i != 0);
    }
    if (o.dbias) as_output(s.outs[3], {1, kH, kS, kS}, DataType::BFLOAT16);
  } else {
    as_output(s.outs[0], qd, DataType::BFLOAT16, bshd);
    pack(s.outs[0], "O", false);
    as_output(s.outs[1], {kB, kH, kS, 1}, DataType::FLOAT);
    if (o.philox) as_output(s.outs[4], {kB, kH, kS, kS}, DataType::FLOAT);  // RNG_dump
  }
  prepare(g);
}

// Inputs shared by the forward and backward graphs (by port name).
void sdpa_inputs(SdpaGraph& s, const SdpaOpts& o, std::map<std::string, Host>& named) {
  auto put = [&](const TensorPtr& t, const char* n, Host v) {
    if (t) named[n] = std::move(v);
  };
  if (o.padding) {
    put(s.sq, "seq_len_q", {double(kSeqQ[0]), double(kSeqQ[1])});
    put(s.skv, "seq_len_kv", {double(kSeqKv[0]), double(kSeqKv[1])});
  }
  // Packed tokens, offsets in elements. Batch 0 is full length, so the packed start of batch 1 is its
  // padded start too: the BSHD host data serves both layouts.
  for (const auto& [r, kv_side] : s.roffs) {
    const int32_t* len = kv_side ? kSeqKv : kSeqQ;
    put(r, r->get_name().c_str(), {0.0, double(len[0] * kH * kD), double((len[0] + len[1]) * kH * kD)});
  }
  if (o.dropout) {
    Host m = random(size_t(kB * kH * kS * kS), 650, DataType::FLOAT, 0, 1);
    for (auto& x : m) x = x < 0.25 ? 0.0 : 1.0;
    put(s.dmask, "dropout_mask", m);
  }
  if (o.paged) {  // pages of batch b in reverse order, so the indirection matters
    Host pt;
    int64_t pages = kS / 32;
    for (int64_t b = 0; b < kB; ++b)
      for (int64_t p = 0; p < pages; ++p) pt.push_back(double(b * pages + (pages - 1 - p)));
    put(s.ptk, "page_table_k", pt);
    put(s.ptv, "page_table_v", pt);
  }
}

Data bind_named(SdpaGraph& s, const std::map<std::string, Host>& named) {
  Data d;
  for (const auto& t : s.g.tensors()) {
    auto it = named.find(t->get_name());
    if (it != named.end() && !t->is_produced()) d[t.get()] = it->second;
  }
  return d;
}

// Valid (non-padded) rows of an SDPA tensor [B,H,S,x] in logical order.
bool sdpa_row_valid(const TensorAttr& t, size_t i, const SdpaOpts& o, bool kv_side) {
  if (!o.padding) return true;
  const auto& d = t.get_dim();
  if (d.size() != 4 || d[0] != kB) return true;
  int64_t row = (int64_t(i) / d[3]) % d[2];
  int64_t b = int64_t(i) / (d[1] * d[2] * d[3]);
  return row < (kv_side ? kSeqKv[b] : kSeqQ[b]);
}

void sdpa_opts_case(const SdpaOpts& o, bool bwd) {
  std::map<std::string, Host> named;
  SdpaGraph f;
  build_sdpa(f, o, false);
  sdpa_inputs(f, o, named);
  for (const char* n : {"Q", "K", "V", "bias"})
    if (TensorPtr t = [&]() -> TensorPtr { for (auto& x : f.g.tensors()) if (x->get_name() == n) return x; return nullptr; }())
      named[n] = random(size_t(t->volume()), uint32_t(600 + n[0]), DataType::BFLOAT16);
  Data fd = bind_named(f, named);
  if (!bwd) {
    SKIP_IF_DECLINED(f.g);
    RunResult r;
    ASSERT_TRUE(run_graph(f.g, fd, r));
    expect_matches_reference(f.g, fd, r, 2e-2, 2e-2, [&](const TensorAttr& t, size_t i) { return sdpa_row_valid(t, i, o, false); });
    return;
  }
  // O and Stats for the backward come from the reference forward (consistent inputs).
  ASSERT_TRUE(f.g.create_execution_plans({HeurMode::A}).is_good());
  std::map<const TensorAttr*, Host> fout;
  ASSERT_TRUE(run_reference(f.g, fd, fout));
  Host o_ref = fout[f.outs[0].get()], st_ref = fout[f.outs[1].get()];
  for (auto& x : o_ref) x = std::isnan(x) ? 0.0 : round_to(DataType::BFLOAT16, x);
  for (auto& x : st_ref) x = std::isnan(x) || std::isinf(x) ? 0.0 : round_to(DataType::FLOAT, x);
  named["O"] = o_ref;
  named["Stats"] = st_ref;
  SdpaGraph b;
  build_sdpa(b, o, true);
  sdpa_inputs(b, o, named);  // the backward's own ragged offsets
  named["dO"] = random(size_t(b.dO->volume()), 700, DataType::BFLOAT16);
  Data bd = bind_named(b, named);
  SKIP_IF_DECLINED(b.g);
  RunResult r;
  ASSERT_TRUE(run_graph(b.g, bd, r));
  expect_matches_reference(b.g, bd, r, 3e-2, 3e-2, [&](const TensorAttr& t, size_t i) {
    return sdpa_row_valid(t, i, o, t.get_name() != b.outs[0]->get_name() && &t != b.outs[0].get());
  });
}

// Padding with implementation AUTO (the composite graph with seq_len overrides; the composite-only case
// is at the end of the file).
TEST(CudnnEngine, SdpaPaddingMaskForward) {
  SKIP_WITHOUT_CUDNN();
  SdpaOpts o;
  o.padding = true;
  o.impl = "AUTO";
  sdpa_opts_case(o, false);
}

TEST(CudnnEngine, SdpaPaddingMaskForwardUnified) {
  SKIP_WITHOUT_CUDNN();
  SdpaOpts o;
  o.padding = true;
  o.impl = "UNIFIED";
  sdpa_opts_case(o, false);
}
TEST(CudnnEngine, SdpaSlidingWindowForward) {
  SKIP_WITHOUT_CUDNN();
  SdpaOpts o;
  o.causal = true;
  o.left = 32;
  sdpa_opts_case(o, false);
}
TEST(CudnnEngine, SdpaSlidingWindowBackward) {
  SKIP_WITHOUT_CUDNN();
  SdpaOpts o;
  o.causal = true;
  o.left = 32;
  sdpa_opts_case(o, true);
}
TEST(CudnnEngine, SdpaBiasForward) {
  SKIP_WITHOUT_CUDNN();
  SdpaOpts o;
  o.bias = true;
  sdpa_opts_case(o, false);
}
TEST(CudnnEngine, SdpaBiasBackward) {
  SKIP_WITHOUT_CUDNN();
  SdpaOpts o;
  o.bias = true;
  sdpa_opts_case(o, true);
}
TEST(CudnnEngine, SdpaBiasBackwardWithDBias) {
  SKIP_WITHOUT_CUDNN();
  SdpaOpts o;
  o.bias = o.dbias = true;
  sdpa_opts_case(o, true);
}
TEST(CudnnEngine, SdpaDropoutMaskForward) {
  SKIP_WITHOUT_CUDNN();
  SdpaOpts o;
  o.dropout = o.causal = true;
  sdpa_opts_case(o, false);
}
TEST(CudnnEngine, SdpaDropoutMaskBackward) {
  SKIP_WITHOUT_CUDNN();
  SdpaOpts o;
  o.dropout = o.causal = true;
  sdpa_opts_case(o, true);
}
TEST(CudnnEngine, SdpaPagedKvForwardUnified) {
  SKIP_WITHOUT_CUDNN();
  SdpaOpts o;
  o.padding = o.paged = true;
  o.impl = "UNIFIED";
  sdpa_opts_case(o, false);
}

// FP8 (E4M3) forward with causal mask on Hopper: O and the amaxes against the reference (P is quantised
// to FP8 by cuDNN, not by the reference: loose tolerances on O and Amax_O).
TEST(CudnnEngine, SdpaFp8ForwardCausal) {
  SKIP_WITHOUT_CUDNN();
  Graph g;
  g.set_io_data_type(DataType::FP8_E4M3).set_intermediate_data_type(DataType::FLOAT).set_compute_data_type(DataType::FLOAT);
  std::vector<int64_t> qd = {1, 2, 128, 64}, one = {1, 1, 1, 1};
  auto Q = input(g, "Q", qd, DataType::FP8_E4M3), K = input(g, "K", qd, DataType::FP8_E4M3), V = input(g, "V", qd, DataType::FP8_E4M3);
  const char* names[] = {"descale_q", "descale_k", "descale_v", "descale_s", "scale_s", "scale_o"};
  const double values[] = {0.5, 0.5, 1.0, 1.0 / 448.0, 448.0, 1.0};
  std::vector<TensorPtr> in = {Q, K, V};
  for (const char* nm : names) in.push_back(input(g, nm, one, DataType::FLOAT));
  auto o = g.add_node(OpKind::SDPA_FP8, in,
                      NodeAttrs().set("generate_stats", true).set("attn_scale_value", 0.125).set("right_bound", int64_t(0)));
  as_output(o[0], qd, DataType::FP8_E4M3);
  as_output(o[1], {1, 2, 128, 1}, DataType::FLOAT);
  as_output(o[2], one, DataType::FLOAT);
  as_output(o[3], one, DataType::FLOAT);
  prepare(g);
  SKIP_IF_DECLINED(g);
  Data data;
  for (size_t i = 0; i < 6; ++i) data[in[3 + i].get()] = {values[i]};
  fill_random(g, data, 800, -1.5, 1.5);
  RunResult r;
  ASSERT_TRUE(run_graph(g, data, r));
  std::map<const TensorAttr*, Host> ref;
  ASSERT_TRUE(run_reference(g, data, ref));
  expect_close(r.out[o[1].get()], ref[o[1].get()], 2e-2, 1e-2, "Stats");
  expect_close(r.out[o[2].get()], ref[o[2].get()], 1e-2, 1e-2, "Amax_S");
  expect_close(r.out[o[3].get()], ref[o[3].get()], 5e-2, 0.1, "Amax_O");
  expect_close(r.out[o[0].get()], ref[o[0].get()], 8e-2, 0.2, "O (fp8)");
}

// Generated dropout (p = 0.25) on the composite graphs. cuDNN draws its own mask (its RNG's mapping is
// not the reference engine's), so the forward dumps it (RNG_dump) and the reference runs the user-mask
// graph with that mask and scale 4/3; the backward draws the mask again from the same seed and offset and
// must match the reference backward with that same mask, and cuDNN's own backward given the dumped mask.
// Where a [B,H,S,D] result misses: the first mismatches by (b, h, row, col) and the rows holding most of
// them, so one GPU run tells a few bad mask elements (scattered rows) from a systematic fault.
void print_mismatch_rows(const Host& got, const Host& want, double atol, double rtol, const char* what) {
  std::map<int64_t, int> rows;
  int shown = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    double err = std::fabs(got[i] - want[i]);
    if (err <= atol + rtol * std::fabs(want[i])) continue;
    int64_t row = int64_t(i) / kD;  // (b * kH + h) * kS + s
    ++rows[row];
    if (shown++ < 8)
      std::printf("  %s mismatch b%lld h%lld s%lld d%lld: got %.5f want %.5f\n", what, (long long)(row / (kH * kS)),
                  (long long)(row / kS % kH), (long long)(row % kS), (long long)(int64_t(i) % kD), got[i], want[i]);
  }
  std::printf("  %s: %zu rows with mismatches:", what, rows.size());
  for (const auto& [r, n] : rows) std::printf(" (b%lld h%lld s%lld: %d)", (long long)(r / (kH * kS)), (long long)(r / kS % kH), (long long)(r % kS), n);
  std::printf("\n");
}

void generated_dropout_case(bool causal) {
  if (causal) setenv("OPENDNN_CUDNN_GENERATED_DROPOUT", "1", 1);  // bands are lowered only when forced
  SdpaOpts po, mo;
  po.philox = mo.dropout = true;
  po.causal = mo.causal = causal;
  std::map<std::string, Host> named = {{"seed", {1234.0}}, {"offset", {77.0}}};
  SdpaGraph f;
  build_sdpa(f, po, false);
  for (const char* n : {"Q", "K", "V"}) named[n] = random(size_t(f.Q->volume()), uint32_t(900 + n[0]), DataType::BFLOAT16);
  Data fd = bind_named(f, named);
  RunResult r;
  ASSERT_TRUE(run_graph(f.g, fd, r));
  const Host& mask = r.out[f.outs[4].get()];
  ASSERT_EQ(mask.size(), size_t(kB * kH * kS * kS));
  double kept = 0;
  for (double x : mask) {
    ASSERT_TRUE(x == 0.0 || x == 1.0) << "RNG_dump holds " << x;
    kept += x;
  }
  EXPECT_NEAR(kept / double(mask.size()), 0.75, 0.02) << "kept fraction";
  named["dropout_mask"] = mask;
  SdpaGraph fm;
  build_sdpa(fm, mo, false);
  Data fmd = bind_named(fm, named);
  ASSERT_TRUE(fm.g.create_execution_plans({HeurMode::A}).is_good());  // lays out the variant pack
  std::map<const TensorAttr*, Host> ref;
  ASSERT_TRUE(run_reference(fm.g, fmd, ref));
  expect_close(r.out[f.outs[0].get()], ref[fm.outs[0].get()], 2e-2, 2e-2, "O");
  expect_close(r.out[f.outs[1].get()], ref[fm.outs[1].get()], 2e-2, 2e-2, "Stats");

  Host o_ref = ref[fm.outs[0].get()], st_ref = ref[fm.outs[1].get()];
  for (auto& x : o_ref) x = round_to(DataType::BFLOAT16, x);
  named["O"] = o_ref;
  named["Stats"] = st_ref;
  SdpaGraph b, bm;
  build_sdpa(b, po, true);
  build_sdpa(bm, mo, true);
  named["dO"] = random(size_t(b.dO->volume()), 901, DataType::BFLOAT16);
  Data bd = bind_named(b, named), bmd = bind_named(bm, named);
  RunResult rb;
  ASSERT_TRUE(run_graph(b.g, bd, rb));
  ASSERT_TRUE(bm.g.create_execution_plans({HeurMode::A}).is_good());
  std::map<const TensorAttr*, Host> bref;
  ASSERT_TRUE(run_reference(bm.g, bmd, bref));
  const char* names[] = {"dQ", "dK", "dV"};
  for (size_t i = 0; i < 3; ++i) {
    expect_close(rb.out[b.outs[i].get()], bref[bm.outs[i].get()], 3e-2, 3e-2, names[i]);
    print_mismatch_rows(rb.out[b.outs[i].get()], bref[bm.outs[i].get()], 3e-2, 3e-2, names[i]);
  }
  // The same backward on cuDNN with the dumped mask as a user mask: agreeing with the generated run means
  // cuDNN drew the forward's mask again (any miss above is the kernels' arithmetic); disagreeing means not.
  RunResult rm;
  ASSERT_TRUE(run_graph(bm.g, bmd, rm));
  for (size_t i = 0; i < 3; ++i) {
    std::string what = std::string(names[i]) + " generated vs user mask on cuDNN";
    expect_close(rb.out[b.outs[i].get()], rm.out[bm.outs[i].get()], 1e-2, 1e-2, what.c_str());
    print_mismatch_rows(rb.out[b.outs[i].get()], rm.out[bm.outs[i].get()], 1e-2, 1e-2, what.c_str());
  }
}

TEST(CudnnEngine, SdpaGeneratedDropoutForwardBackward) {
  SKIP_WITHOUT_CUDNN();
  generated_dropout_case(false);
}

// Disabled: on the H200 (cuDNN 9.19) the causal backward's dQ/dK of query rows 0-2 miss both the reference
// and cuDNN's user-mask backward (dS of row 0 is not 0), so bands are declined (next test). Run it with
// --gtest_also_run_disabled_tests after a cuDNN update.
TEST(CudnnEngine, DISABLED_SdpaGeneratedDropoutCausal) {
  SKIP_WITHOUT_CUDNN();
  generated_dropout_case(true);
  unsetenv("OPENDNN_CUDNN_GENERATED_DROPOUT");
}

TEST(CudnnEngine, SdpaGeneratedDropoutCausalDeclined) {
  SKIP_WITHOUT_CUDNN();
  SdpaOpts o;
  o.philox = o.causal = true;
  for (bool bwd : {false, true}) {
    SdpaGraph g;
    build_sdpa(g, o, bwd);
    Proposal p = make_cudnn_engine()->propose_plans(g.g, cuda_target());
    EXPECT_TRUE(p.plans.empty());
    ASSERT_FALSE(p.declines.empty());
    EXPECT_NE(p.declines[0].find("band"), std::string::npos) << p.declines[0];
  }
}

// What cuDNN 9.19 has no lowering for declines with a reason: generated dropout with seed/offset given by
// value (cuDNN's RNG reads them in device memory), and the unified backward.
TEST(CudnnEngine, SdpaDropoutAndUnifiedBackwardDecline) {
  SKIP_WITHOUT_CUDNN();
  {
    SdpaGraph b;
    SdpaOpts o;
    o.impl = "UNIFIED";
    build_sdpa(b, o, true);
    Proposal p = make_cudnn_engine()->propose_plans(b.g, cuda_target());
    EXPECT_TRUE(p.plans.empty());
    ASSERT_FALSE(p.declines.empty());
    EXPECT_NE(p.declines[0].find("SDPA_BWD"), std::string::npos) << p.declines[0];
    std::printf("  decline: %s\n", p.declines[0].c_str());
  }
  Graph g;
  g.set_io_data_type(DataType::BFLOAT16).set_intermediate_data_type(DataType::FLOAT).set_compute_data_type(DataType::FLOAT);
  auto q = input(g, "Q", {1, 2, 64, 64}, DataType::BFLOAT16);
  auto k = input(g, "K", {1, 2, 64, 64}, DataType::BFLOAT16);
  auto v = input(g, "V", {1, 2, 64, 64}, DataType::BFLOAT16);
  auto seed = g.tensor(Scalar::of_int64(1));
  auto off = g.tensor(Scalar::of_int64(0));
  auto o = g.add_node(OpKind::SDPA, {q, k, v, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, seed, off},
                      NodeAttrs().set("dropout_probability", 0.1).set("generate_stats", true));
  as_output(o[0], {1, 2, 64, 64}, DataType::BFLOAT16);
  as_output(o[1], {1, 2, 64, 1}, DataType::FLOAT);
  prepare(g);
  Proposal p = make_cudnn_engine()->propose_plans(g, cuda_target());
  EXPECT_TRUE(p.plans.empty());
  ASSERT_FALSE(p.declines.empty());
  EXPECT_NE(p.declines[0].find("dropout"), std::string::npos) << p.declines[0];
}

TEST(CudnnEngine, DeclinesUnloweredOpsByName) {
  SKIP_WITHOUT_CUDNN();
  Graph g;
  auto q = input(g, "Q", {1, 2, 64, 64}, DataType::BFLOAT16);
  auto o = g.sdpa(q, q, q, NodeAttrs().set("generate_stats", false).input("sink_token", input(g, "sink", {1, 2, 1, 1}, DataType::FLOAT)));
  as_output(o[0], {1, 2, 64, 64}, DataType::BFLOAT16);
  o[1]->set_dim({1, 2, 64, 1}).set_stride({128, 64, 1, 1}).set_data_type(DataType::FLOAT);
  prepare(g);
  Proposal p = make_cudnn_engine()->propose_plans(g, cuda_target());
  EXPECT_TRUE(p.plans.empty());
  ASSERT_FALSE(p.declines.empty());
  std::printf("  decline: %s\n", p.declines[0].c_str());
}

// ---- Padding and ragged THD through the composite graph, last in the file: gtest runs a suite in
// definition order, and a kernel fault (CUDA error 700 on the first H200 run of an earlier ragged THD
// lowering) poisons the process's CUDA context for every later test. Each must be planned (a decline is
// a failure here, not a skip) and match the reference engine.
void planned_case(const SdpaOpts& o, bool bwd) {
  {
    SdpaGraph g;
    build_sdpa(g, o, bwd);
    Proposal p = make_cudnn_engine()->propose_plans(g.g, cuda_target());
    std::string why;
    for (const auto& d : p.declines) why += d + "\n";
    ASSERT_FALSE(p.plans.empty()) << "declined:\n" << why;
  }
  sdpa_opts_case(o, bwd);
}

TEST(CudnnEngine, SdpaPaddingMaskForwardComposite) {
  SKIP_WITHOUT_CUDNN();
  SdpaOpts o;
  o.padding = true;
  planned_case(o, false);
}
TEST(CudnnEngine, SdpaPaddingCausalForwardComposite) {
  SKIP_WITHOUT_CUDNN();
  SdpaOpts o;
  o.padding = o.causal = true;
  planned_case(o, false);
}
TEST(CudnnEngine, SdpaPaddingCausalBackward) {
  SKIP_WITHOUT_CUDNN();
  SdpaOpts o;
  o.padding = o.causal = true;
  planned_case(o, true);
}
TEST(CudnnEngine, SdpaRaggedThdForward) {
  SKIP_WITHOUT_CUDNN();
  SdpaOpts o;
  o.padding = o.ragged = true;
  planned_case(o, false);
}
TEST(CudnnEngine, SdpaRaggedThdBackward) {
  SKIP_WITHOUT_CUDNN();
  SdpaOpts o;
  o.padding = o.ragged = true;
  planned_case(o, true);
}

// ---- knob search (OPENDNN_CUDNN_KNOB_SEARCH=1, engines/cudnn/knob_search.h)

struct KnobSearchOn {
  explicit KnobSearchOn(const char* max) {
    setenv("OPENDNN_CUDNN_KNOB_SEARCH", "1", 1);
    setenv("OPENDNN_CUDNN_KNOB_SEARCH_MAX", max, 1);
  }
  ~KnobSearchOn() {
    unsetenv("OPENDNN_CUDNN_KNOB_SEARCH");
    unsetenv("OPENDNN_CUDNN_KNOB_SEARCH_MAX");
  }
};

bool searched(const PlanCandidate& c) {
  for (const auto& [k, v] : c.knobs)
    if (k == "searched") return v != 0;
  return false;
}

// A bf16 matmul [1,128,256] x [1,256,192]; returns its output.
TensorPtr small_matmul(Graph& g) {
  g.set_io_data_type(DataType::BFLOAT16).set_intermediate_data_type(DataType::FLOAT).set_compute_data_type(DataType::FLOAT);
  auto C = g.matmul(input(g, "A", {1, 128, 256}, DataType::BFLOAT16), input(g, "B", {1, 256, 192}, DataType::BFLOAT16));
  as_output(C, {1, 128, 192}, DataType::BFLOAT16);
  return C;
}

std::vector<std::string> searched_names(const Proposal& p) {
  std::vector<std::string> v;
  for (const auto& c : p.plans)
    if (searched(c)) v.push_back(c.name);
  return v;
}

// A smaller cap gives a prefix of the same order (the order does not depend on the cap or the run).
TEST(CudnnEngineKnobSearch, CapKeepsTheOrder) {
  SKIP_WITHOUT_CUDNN();
  Graph g;
  small_matmul(g);
  prepare(g);
  std::vector<std::string> three, eight;
  {
    KnobSearchOn on("3");
    three = searched_names(make_cudnn_engine()->propose_plans(g, cuda_target()));
  }
  {
    KnobSearchOn on("8");
    eight = searched_names(make_cudnn_engine()->propose_plans(g, cuda_target()));
    EXPECT_EQ(searched_names(make_cudnn_engine()->propose_plans(g, cuda_target())), eight);
  }
  EXPECT_LE(three.size(), 3u);
  EXPECT_LE(eight.size(), 8u);
  ASSERT_LE(three.size(), eight.size());
  for (size_t i = 0; i < three.size(); ++i) EXPECT_EQ(three[i], eight[i]);
}

// The search leaves the heuristic configs as they are (names, local indices, first place), stays
// within its cap, and every searched config builds, executes and matches the reference engine.
TEST(CudnnEngineKnobSearch, SearchedMatmulPlansMatchReference) {
  SKIP_WITHOUT_CUDNN();
  Graph g;
  TensorPtr C = small_matmul(g);
  prepare(g);
  Proposal off = make_cudnn_engine()->propose_plans(g, cuda_target());
  ASSERT_FALSE(off.plans.empty()) << (off.declines.empty() ? "" : off.declines[0]);
  KnobSearchOn on("32");
  Proposal with = make_cudnn_engine()->propose_plans(g, cuda_target());
  std::set<int64_t> indices;
  size_t n_searched = 0;
  for (const auto& c : with.plans) {
    EXPECT_TRUE(indices.insert(c.local_index).second) << "duplicate local index: " << c.name;
    n_searched += searched(c);
  }
  for (const auto& c : off.plans) {
    auto it = std::find_if(with.plans.begin(), with.plans.end(),
                           [&](const PlanCandidate& w) { return w.local_index == c.local_index; });
    ASSERT_NE(it, with.plans.end()) << c.name << " lost its index";
    EXPECT_EQ(it->name, c.name);
    EXPECT_FALSE(searched(*it));
  }
  EXPECT_EQ(with.plans.size(), off.plans.size() + n_searched);
  EXPECT_LE(n_searched, 32u);
  EXPECT_GT(n_searched, 0u) << "no knob move of any heuristic config finalized";
  std::printf("  %zu heuristic + %zu searched configs\n", off.plans.size(), n_searched);

  ASSERT_TRUE(g.create_execution_plans({HeurMode::A, HeurMode::B, HeurMode::FALLBACK}).is_good());
  std::vector<std::string> others;
  for (int64_t i = 0; i < g.get_execution_plan_count(); ++i) {
    PlanInfo info;
    if (g.get_plan_info_at_index(i, info).is_good() && info.engine != "cudnn") others.push_back(info.engine);
  }
  if (!others.empty()) (void)g.deselect_engines(others);
  for (int64_t i = 0; i < g.get_execution_plan_count(); ++i) {
    PlanInfo info;
    ASSERT_TRUE(g.get_plan_info_at_index(i, info).is_good());
    if (info.deselected) continue;
    // The router's first cudnn plan is a heuristic one, unless an autotuned order was cached.
    if (info.measured_us < 0) {
      EXPECT_TRUE(std::any_of(off.plans.begin(), off.plans.end(),
                              [&](const PlanCandidate& c) { return c.local_index == info.local_index; }))
          << info.plan;
    }
    break;
  }
  Data data;
  fill_random(g, data, 500);
  std::map<const TensorAttr*, Host> ref;
  ASSERT_TRUE(run_reference(g, data, ref));
  const Host& want = ref[C.get()];
  const std::vector<int64_t>& slots = g.variant_uids();
  std::vector<void*> ptrs(slots.size(), nullptr);
  void* out = nullptr;
  for (size_t i = 0; i < slots.size(); ++i) {
    TensorPtr t = g.find_tensor(slots[i]);
    std::vector<unsigned char> host = host_bytes(*t, data);
    cudaMalloc(&ptrs[i], host.size());
    cudaMemcpy(ptrs[i], host.data(), host.size(), cudaMemcpyHostToDevice);
    if (t.get() == C.get()) out = ptrs[i];
  }
  ASSERT_NE(out, nullptr);
  size_t ran = 0;
  for (const auto& c : with.plans) {
    if (!searched(c)) continue;
    SCOPED_TRACE(c.name);
    int64_t index = g.find_plan_index(kCudnnEngineId, c.local_index);
    ASSERT_GE(index, 0);
    Status s = g.select_plan(index);
    ASSERT_TRUE(s.is_good()) << s.to_string();
    int64_t ws_bytes = 0;
    (void)g.get_workspace_size_plan_at_index(index, ws_bytes);
    void* ws = nullptr;
    if (ws_bytes > 0) cudaMalloc(&ws, size_t(ws_bytes));
    cudaMemset(out, 0xFF, size_t(C->storage_bytes()));  // NaN: an unwritten element fails
    s = g.execute(ptrs.data(), ws, nullptr);
    cudaError_t e = cudaDeviceSynchronize();
    if (ws) cudaFree(ws);
    ASSERT_TRUE(s.is_good()) << s.to_string();
    ASSERT_EQ(e, cudaSuccess) << cudaGetErrorString(e);
    std::vector<unsigned char> host(size_t(C->storage_bytes()));
    cudaMemcpy(host.data(), out, host.size(), cudaMemcpyDeviceToHost);
    expect_close(gather(*C, host.data()), want, 2e-2, 1e-2, c.name.c_str());
    std::printf("  ran %s (workspace %lld B)\n", c.name.c_str(), (long long)ws_bytes);
    ++ran;
  }
  EXPECT_EQ(ran, n_searched);
  for (void* p : ptrs) cudaFree(p);
}


// ---- head dims cuDNN serves on Hopper beyond 256 and d_v != d_qk, score_mod sub-graphs, fully masked
// rows: each against the reference engine on the same inputs (a decline is reported, not failed).

struct AttnCase {
  int64_t dqk = 64, dv = 64;
  bool softcap = false;  // score_mod tanh(s / 4) * 4 (and its score_mod_bprop in the backward)
  bool masked_row = false;  // a -inf bias on query row 3 of head 1: every key hidden
  bool alibi = false;       // ALiBi with the causal mask (6 heads: the non-power-of-two slope interleave)
  bool row_stats = false;   // Max and Sum_exp (score_max / score_sum_exp) as graph outputs too
};

// Builds the forward (or backward) bf16 graph of `a` in g, [1,2,128,D]; returns the node's outputs.
std::vector<TensorPtr> build_attn(Graph& g, const AttnCase& a, bool bwd) {
  g.set_io_data_type(DataType::BFLOAT16).set_intermediate_data_type(DataType::FLOAT).set_compute_data_type(DataType::FLOAT);
  const int64_t B = 1, H = a.alibi ? 6 : 2, S = 128;
  auto Q = input(g, "Q", {B, H, S, a.dqk}, DataType::BFLOAT16);
  auto K = input(g, "K", {B, H, S, a.dqk}, DataType::BFLOAT16);
  auto V = input(g, "V", {B, H, S, a.dv}, DataType::BFLOAT16);
  NodeAttrs at;
  at.set("attn_scale_value", 0.125).set("implementation", "COMPOSITE");
  if (a.masked_row) at.input("bias", input(g, "bias", {1, H, S, S}, DataType::BFLOAT16));
  if (a.alibi) at.set("use_alibi_mask", true).set("right_bound", int64_t(0));
  std::vector<TensorPtr> outs;
  if (!bwd) {
    at.set("generate_stats", true);
    auto o = g.sdpa(Q, K, V, at);
    as_output(o[0], {B, H, S, a.dv}, DataType::BFLOAT16);
    as_output(o[1], {B, H, S, 1}, DataType::FLOAT);
    outs = {o[0], o[1]};
    if (a.row_stats) {
      as_output(o[2], {B, H, S, 1}, DataType::FLOAT);
      as_output(o[3], {B, H, S, 1}, DataType::FLOAT);
    }
  } else {
    auto O = input(g, "O", {B, H, S, a.dv}, DataType::BFLOAT16);
    auto dO = input(g, "dO", {B, H, S, a.dv}, DataType::BFLOAT16);
    auto St = input(g, "Stats", {B, H, S, 1}, DataType::FLOAT);
    auto o = g.sdpa_backward(Q, K, V, O, dO, St, at);
    as_output(o[0], {B, H, S, a.dqk}, DataType::BFLOAT16);
    as_output(o[1], {B, H, S, a.dqk}, DataType::BFLOAT16);
    as_output(o[2], {B, H, S, a.dv}, DataType::BFLOAT16);
    outs = {o[0], o[1], o[2]};
  }
  if (a.softcap) {
    Node& owner = *g.mutable_nodes().back();
    auto cap = g.tensor(Scalar::of_float(4.0f));
    cap->set_dim({1, 1, 1, 1}).set_stride({1, 1, 1, 1});
    auto one = g.tensor(Scalar::of_float(1.0f));
    one->set_dim({1, 1, 1, 1}).set_stride({1, 1, 1, 1});
    size_t first = g.nodes().size();
    auto s = std::make_shared<TensorAttr>();
    s->set_is_virtual(true);
    auto t = g.tanh(g.div(s, cap));
    EXPECT_TRUE(g.attach_subgraph(owner, "score_mod", s, g.mul(t, cap), first).is_good());
    if (bwd) {
      first = g.nodes().size();
      auto ds = std::make_shared<TensorAttr>();
      ds->set_is_virtual(true);
      EXPECT_TRUE(g.attach_subgraph(owner, "score_mod_bprop", ds, g.mul(ds, g.sub(one, g.mul(t, t))), first).is_good());
    }
  }
  prepare(g);
  return outs;
}

// Forward, then (when `bwd`) the backward from the reference forward's O and Stats, each cudnn plan
// against the reference engine.
void attn_case(const AttnCase& a, bool bwd) {
  Graph f;
  std::vector<TensorPtr> fo = build_attn(f, a, false);
  Data fd;
  fill_random(f, fd, 900);
  for (const auto& t : f.tensors())
    if (t->get_name() == "bias" && a.masked_row) {
      Host& b = fd[t.get()];
      for (int64_t j = 0; j < 128; ++j) b[size_t((1 * 128 + 3) * 128 + j)] = -INFINITY;
    }
  if (!bwd) {
    SKIP_IF_DECLINED(f);
    RunResult r;
    ASSERT_TRUE(run_graph(f, fd, r));
    if (a.masked_row) {  // O of the hidden row is 0 on both; report cuDNN's Stats for it
      const Host& st = r.out[fo[1].get()];
      std::printf("  cuDNN Stats of the fully masked row: %g\n", st[size_t(1 * 128 + 3)]);
      for (int64_t d = 0; d < a.dv; ++d) EXPECT_EQ(r.out[fo[0].get()][size_t((1 * 128 + 3) * a.dv + d)], 0.0);
    }
    expect_matches_reference(f, fd, r, 2e-2, 2e-2, [&](const TensorAttr& t, size_t i) {
      return !(a.masked_row && &t == fo[1].get() && i == size_t(1 * 128 + 3));
    });
    return;
  }
  ASSERT_TRUE(f.create_execution_plans({HeurMode::A, HeurMode::FALLBACK}).is_good());
  std::map<const TensorAttr*, Host> ref;
  ASSERT_TRUE(run_reference(f, fd, ref));
  Graph b;
  std::vector<TensorPtr> bo = build_attn(b, a, true);
  Data bd;
  for (const auto& t : b.tensors()) {
    for (const auto& [ft, v] : fd)
      if (ft->get_name() == t->get_name() && !t->get_name().empty()) bd[t.get()] = v;
    if (t->get_name() == "O") bd[t.get()] = ref[fo[0].get()];
    if (t->get_name() == "Stats") bd[t.get()] = ref[fo[1].get()];
  }
  fill_random(b, bd, 950);
  SKIP_IF_DECLINED(b);
  RunResult r;
  ASSERT_TRUE(run_graph(b, bd, r));
  for (const auto& t : bo)
    for (double x : r.out[t.get()]) ASSERT_TRUE(std::isfinite(x)) << t->get_name();
  expect_matches_reference(b, bd, r, 3e-2, 3e-2);
}

TEST(CudnnEngine, SdpaHeadDim320Forward) {
  SKIP_WITHOUT_CUDNN();
  attn_case({320, 320}, false);
}
TEST(CudnnEngine, SdpaWiderValueForwardBackward) {
  SKIP_WITHOUT_CUDNN();
  attn_case({64, 128}, false);
  attn_case({64, 128}, true);
}
TEST(CudnnEngine, SdpaAlibiForwardBackward) {
  SKIP_WITHOUT_CUDNN();
  AttnCase a;
  a.alibi = true;
  attn_case(a, false);
  attn_case(a, true);
}
TEST(CudnnEngine, SdpaMaxAndSumExpOutputs) {
  SKIP_WITHOUT_CUDNN();
  AttnCase a;
  a.row_stats = true;
  attn_case(a, false);
}
TEST(CudnnEngine, SdpaScoreModSoftcapForwardBackward) {
  SKIP_WITHOUT_CUDNN();
  attn_case({64, 64, true}, false);
  attn_case({64, 64, true}, true);
}
// The forward only: the backward of a row whose Stats is -inf reads exp(-inf - -inf) in cuDNN's composite
// graph; what cuDNN gives there is left to a cuDNN-side check (the reference engine gives 0).
TEST(CudnnEngine, SdpaFullyMaskedRowByBias) {
  SKIP_WITHOUT_CUDNN();
  attn_case({64, 64, false, true}, false);
}

}  // namespace
}  // namespace opendnn
