// SPDX-License-Identifier: Apache-2.0
// The cudnn engine on a GPU: every lowered op family against a host (fp64) reference on small shapes,
// declines, the variant-pack refresh and CUDA-graph capture. Skips cleanly without a GPU or libcudnn.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <random>

#include "common/dtype_convert.h"
#include "engines/cudnn/cudnn_engine.h"
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

// Fills inputs (by tensor) from `data`, runs a cudnn plan through Graph::execute's slot-array hot path,
// returns every non-virtual tensor.
::testing::AssertionResult run_graph(Graph& g, const std::map<const TensorAttr*, Host>& data, RunResult& r,
                                     bool capture = false, int plan_index = 0) {
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
    int64_t bytes = std::max<int64_t>(t->storage_bytes(), 16);
    // Outputs start poisoned (all-ones bytes: NaN in every float type) so an unwritten element fails.
    std::vector<unsigned char> host(size_t(bytes), t->is_produced() ? 0xFF : 0);
    if (t->get_is_pass_by_value()) {
      host_scalars[i] = host;
      ptrs[i] = host_scalars[i].data();
    } else {
      cudaMalloc(&ptrs[i], size_t(bytes));
    }
    auto it = data.find(t.get());
    if (it != data.end()) {
      // Data is given in logical row-major order; scatter through the strides.
      const auto& d = t->get_dim();
      const auto& st = t->get_stride();
      std::vector<int64_t> idx(d.size(), 0);
      for (size_t lin = 0; lin < it->second.size(); ++lin) {
        int64_t off = 0;
        for (size_t k = 0; k < d.size(); ++k) off += idx[k] * st[k];
        store_element(t->get_data_type(), host.data(), off, it->second[lin]);
        for (size_t k = d.size(); k-- > 0;) {
          if (++idx[k] < d[k]) break;
          idx[k] = 0;
        }
      }
    }
    if (t->get_is_pass_by_value()) std::memcpy(ptrs[i], host.data(), host.size());
    else cudaMemcpy(ptrs[i], host.data(), size_t(bytes), cudaMemcpyHostToDevice);
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
    int64_t bytes = std::max<int64_t>(t->storage_bytes(), 16);
    std::vector<unsigned char> host(static_cast<size_t>(bytes), 0);
    if (t->get_is_pass_by_value()) {
      std::memcpy(host.data(), ptrs[i], host.size());
    } else {
      cudaMemcpy(host.data(), ptrs[i], size_t(bytes), cudaMemcpyDeviceToHost);
      cudaFree(ptrs[i]);
    }
    Host v(static_cast<size_t>(t->volume()));
    const auto& d = t->get_dim();
    const auto& st = t->get_stride();
    std::vector<int64_t> idx(d.size(), 0);
    for (size_t lin = 0; lin < v.size(); ++lin) {
      int64_t off = 0;
      for (size_t k = 0; k < d.size(); ++k) off += idx[k] * st[k];
      v[lin] = load_element(t->get_data_type(), host.data(), off);
      for (size_t k = d.size(); k-- > 0;) {
        if (++idx[k] < d[k]) break;
        idx[k] = 0;
      }
    }
    r.out[t.get()] = std::move(v);
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
  if (std::string(impl) == "UNIFIED") SKIP_IF_DECLINED(g);  // cuDNN 9.19: SDPA_BWD graph "outputGraph.buildDAG()"
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
TEST(CudnnEngine, SdpaBackwardUnified) {
  SKIP_WITHOUT_CUDNN();
  sdpa_bwd_case({1, 2, 2, 128, 128, 128, false, 0.125}, false, "UNIFIED");
}

TEST(CudnnEngine, DeclinesUnloweredOpsByName) {
  SKIP_WITHOUT_CUDNN();
  Graph g;
  auto q = input(g, "Q", {1, 2, 64, 320}, DataType::BFLOAT16);
  auto o = g.sdpa(q, q, q, NodeAttrs().set("generate_stats", false).set("use_alibi_mask", true));
  as_output(o[0], {1, 2, 64, 320}, DataType::BFLOAT16);
  o[1]->set_dim({1, 2, 64, 1}).set_stride({128, 64, 1, 1}).set_data_type(DataType::FLOAT);
  prepare(g);
  Proposal p = make_cudnn_engine()->propose_plans(g, cuda_target());
  EXPECT_TRUE(p.plans.empty());
  ASSERT_FALSE(p.declines.empty());
  std::printf("  decline: %s\n", p.declines[0].c_str());
}

}  // namespace
}  // namespace opendnn
