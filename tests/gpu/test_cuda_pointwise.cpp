// SPDX-License-Identifier: Apache-2.0
// The cuda engine's fused pointwise chains (one NVRTC-compiled kernel per graph) against the
// reference engine run on the same graph and inputs. Needs an NVIDIA GPU (sm_90+) and NVRTC;
// skips elsewhere.
#include <cuda_runtime.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <functional>
#include <limits>
#include <string>
#include <unordered_map>
#include <random>
#include <vector>

#include "common/dtype_convert.h"
#include "engines/cuda/pointwise/pw_codegen.h"
#include "engines/cuda/pointwise/pw_nvrtc.h"
#include "opendnn/opendnn.h"
#include "support/device.h"

using namespace opendnn;
namespace pw = opendnn::cuda::pw;

namespace {

Target gpu_target() { return default_target(); }
bool have_gpu() { return test::have_sm90_gpu() && pw::nvrtc().ok; }
using test::DevBuf;

TensorPtr tensor(Graph& g, const char* name, std::vector<int64_t> dims, DataType dt, std::vector<int64_t> strides = {}) {
  if (strides.empty()) strides = row_major_strides(dims);
  return g.tensor(TensorAttr().set_name(name).set_dim(std::move(dims)).set_stride(std::move(strides)).set_data_type(dt));
}

TensorPtr scalar(Graph& g, float v, size_t rank) {
  auto s = g.tensor(Scalar::of_float(v));
  s->set_dim(std::vector<int64_t>(rank, 1)).set_stride(std::vector<int64_t>(rank, 1));
  return s;
}

// Builds the graph under test; returns its graph inputs (device tensors) and non-virtual outputs.
using Builder = std::function<void(Graph&, std::vector<TensorPtr>& ins, std::vector<TensorPtr>& outs)>;

struct Range {
  double lo = -2, hi = 2;
};

Status plan_for(Graph& g, bool cuda) {
  if (Status s = g.validate(); s.is_bad()) return s;
  const Target keep = default_target();
  if (!cuda) set_default_target(Target{});  // the reference engine on the CPU
  Status s = g.create_execution_plans(test::kOurEngines);
  if (!cuda) set_default_target(keep);
  if (s.is_bad()) return s;
  if (s = g.deselect_engines(cuda ? std::vector<std::string>{"cudnn", "reference"} : std::vector<std::string>{"cudnn", "cuda"});
      s.is_bad())
    return s;
  if (s = g.check_support(); s.is_bad()) return s;
  return g.build_plans();
}

// Runs the graph on the cuda engine and on the reference, with the same random inputs, and
// compares every output element: |got - want| <= atol + rtol * |want| (NaN matches NaN).
void compare(const Builder& build, std::vector<Range> ranges, double rtol, double atol, uint32_t seed = 7) {
  Graph gc, gr;
  std::vector<TensorPtr> ic, oc, ir, orr;
  build(gc, ic, oc);
  build(gr, ir, orr);
  ASSERT_EQ(ic.size(), ir.size());
  if (Status s = plan_for(gc, true); s.is_bad()) FAIL() << "cuda: " << s.to_string();
  std::string engine;
  ASSERT_TRUE(gc.get_engine_name_at_index(gc.selected_plan(), engine).is_good());
  ASSERT_EQ(engine, "cuda");
  if (Status s = plan_for(gr, false); s.is_bad()) FAIL() << "reference: " << s.to_string();

  std::mt19937 rng(seed);
  std::vector<std::vector<unsigned char>> host_in(ic.size());
  std::vector<std::unique_ptr<DevBuf>> dev;
  std::unordered_map<TensorPtr, void*> pc, pr;
  for (size_t i = 0; i < ic.size(); ++i) {
    const Range r = i < ranges.size() ? ranges[i] : ranges.back();
    std::uniform_real_distribution<double> d(r.lo, r.hi);
    const int64_t n = ic[i]->storage_elements();
    host_in[i].assign(size_t(ic[i]->storage_bytes()), 0);
    const DataType t = ic[i]->get_data_type();
    for (int64_t k = 0; k < n; ++k)  // booleans: about half true (any nonzero double would store as true)
      store_element(t, host_in[i].data(), k, t == DataType::BOOLEAN ? double(d(rng) > 0.5 * (r.lo + r.hi)) : d(rng));
    dev.push_back(std::make_unique<DevBuf>(host_in[i].size()));
    ASSERT_EQ(cudaMemcpy(dev.back()->p, host_in[i].data(), host_in[i].size(), cudaMemcpyHostToDevice), cudaSuccess);
    // A pass-by-value scalar without a value travels as a host pointer, to both engines.
    pc[ic[i]] = ic[i]->get_is_pass_by_value() ? static_cast<void*>(host_in[i].data()) : dev.back()->p;
    pr[ir[i]] = host_in[i].data();
  }
  std::vector<std::vector<unsigned char>> want(orr.size());
  for (size_t i = 0; i < oc.size(); ++i) {
    const size_t bytes = size_t(oc[i]->storage_bytes());
    dev.push_back(std::make_unique<DevBuf>(bytes));
    ASSERT_EQ(cudaMemset(dev.back()->p, 0xff, bytes), cudaSuccess);  // poison: unwritten elements show as NaN
    pc[oc[i]] = dev.back()->p;
    want[i].assign(bytes, 0xff);
    pr[orr[i]] = want[i].data();
  }
  std::vector<unsigned char> ws(size_t(std::max<int64_t>(gr.get_workspace_size(), 1)));
  ASSERT_EQ(gc.get_workspace_size(), 0);
  if (Status s = gr.execute(pr, ws.data()); s.is_bad()) FAIL() << "reference execute: " << s.to_string();
  if (Status s = gc.execute(pc, nullptr); s.is_bad()) FAIL() << "cuda execute: " << s.to_string();
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);

  for (size_t i = 0; i < oc.size(); ++i) {
    std::vector<unsigned char> got(want[i].size());
    ASSERT_EQ(cudaMemcpy(got.data(), pc[oc[i]], got.size(), cudaMemcpyDeviceToHost), cudaSuccess);
    const DataType t = oc[i]->get_data_type();
    const int64_t n = oc[i]->storage_elements();
    int bad = 0;
    for (int64_t k = 0; k < n && bad < 5; ++k) {
      const double g = load_element(t, got.data(), k), w = load_element(t, want[i].data(), k);
      const bool same = (std::isnan(g) && std::isnan(w)) || g == w || std::fabs(g - w) <= atol + rtol * std::fabs(w);
      if (!same) {
        ++bad;
        ADD_FAILURE() << "output '" << oc[i]->get_name() << "' (" << to_string(t) << ") element " << k << ": got " << g
                      << ", want " << w;
      }
    }
  }
}

// Tolerances by output type: fp32 compute vs the reference's double, then one rounding.
double rtol_of(DataType t) {
  switch (t) {
    case DataType::BFLOAT16: return 1.0 / 128;
    case DataType::HALF: return 1.0 / 1024;
    default: return 2e-6;
  }
}

}  // namespace

// y = tanh(gelu(x * s + bias) * rowscale - 0.25) -> io type, with the fp32 pre-activation also stored.
class CudaPointwiseChain : public ::testing::TestWithParam<DataType> {};

TEST_P(CudaPointwiseChain, SixOpsWithBroadcasting) {
  if (!have_gpu()) GTEST_SKIP() << "needs an sm_90+ GPU and NVRTC";
  const DataType io = GetParam();
  const int64_t M = 96, N = 320;
  auto build = [&](Graph& g, std::vector<TensorPtr>& ins, std::vector<TensorPtr>& outs) {
    g.set_intermediate_data_type(DataType::FLOAT).set_compute_data_type(DataType::FLOAT);
    auto x = tensor(g, "x", {M, N}, io);
    auto bias = tensor(g, "bias", {1, N}, io);
    auto rowscale = tensor(g, "rowscale", {M, 1}, DataType::FLOAT);
    auto h = g.add(g.mul(x, scalar(g, 0.75f, 2)), bias);
    h->set_output(true).set_data_type(DataType::FLOAT).set_name("h");
    auto y = g.tanh(g.sub(g.mul(g.gelu(h), rowscale), scalar(g, 0.25f, 2)));
    y->set_output(true).set_data_type(io).set_name("y");
    ins = {x, bias, rowscale};
    outs = {h, y};
  };
  compare(build, {{-3, 3}}, rtol_of(io), 1e-6);
}

TEST_P(CudaPointwiseChain, TransposedInputAndStridedOutput) {
  if (!have_gpu()) GTEST_SKIP() << "needs an sm_90+ GPU and NVRTC";
  const DataType io = GetParam();
  const int64_t M = 72, N = 136;
  auto build = [&](Graph& g, std::vector<TensorPtr>& ins, std::vector<TensorPtr>& outs) {
    g.set_intermediate_data_type(DataType::FLOAT).set_compute_data_type(DataType::FLOAT);
    auto xt = tensor(g, "xt", {M, N}, io, {1, M});  // stored column-major
    auto b = tensor(g, "b", {M, N}, io);
    auto y = g.swish(g.add(xt, b));
    y->set_output(true).set_data_type(io).set_name("y").set_stride({1, M});  // a strided output too
    auto z = g.mul(xt, b);
    z->set_output(true).set_data_type(io).set_name("z");
    ins = {xt, b};
    outs = {y, z};
  };
  compare(build, {{-2, 2}}, rtol_of(io), 1e-6);
}

TEST_P(CudaPointwiseChain, HostScalarReadAtExecute) {
  if (!have_gpu()) GTEST_SKIP() << "needs an sm_90+ GPU and NVRTC";
  const DataType io = GetParam();
  auto build = [&](Graph& g, std::vector<TensorPtr>& ins, std::vector<TensorPtr>& outs) {
    auto x = tensor(g, "x", {33, 48}, io);
    auto s = tensor(g, "s", {1, 1}, DataType::FLOAT);
    s->set_is_pass_by_value(true);
    auto y = g.max(g.mul(x, s), g.neg(x));
    y->set_output(true).set_data_type(io).set_name("y");
    ins = {x, s};
    outs = {y};
  };
  compare(build, {{-2, 2}, {0.5, 1.5}}, rtol_of(io), 1e-6);
}

INSTANTIATE_TEST_SUITE_P(IoTypes, CudaPointwiseChain,
                         ::testing::Values(DataType::BFLOAT16, DataType::HALF, DataType::FLOAT),
                         [](const auto& info) { return std::string(to_string(info.param)); });

// Every mode of pointwise_modes.def as a single-node graph: [37, 64] fp32 with the second input
// broadcast as [1, 64] and the third (BINARY_SELECT's mask) as [37, 1].
TEST(CudaPointwise, EveryMode) {
  if (!have_gpu()) GTEST_SKIP() << "needs an sm_90+ GPU and NVRTC";
  struct ModeCase {
    const char* name;
    int arity;
  };
  const ModeCase modes[] = {
#define OPENDNN_PW(e, m, arity) {#e, arity},
#include "opendnn/pointwise_modes.def"
#undef OPENDNN_PW
  };
  for (const ModeCase& mc : modes) {
    SCOPED_TRACE(mc.name);
    const std::string mode = mc.name;
    const bool positive = mode == "LOG" || mode == "SQRT" || mode == "RSQRT" || mode == "POW";
    const bool boolean = mode.rfind("CMP_", 0) == 0 || mode.rfind("LOGICAL_", 0) == 0;
    auto build = [&](Graph& g, std::vector<TensorPtr>& ins, std::vector<TensorPtr>& outs) {
      g.set_intermediate_data_type(DataType::FLOAT).set_compute_data_type(DataType::FLOAT);
      auto a = tensor(g, "a", {37, 64}, DataType::FLOAT);
      NodeAttrs attrs;
      attrs.set("mode", mode);
      ins = {a};
      if (mc.arity >= 2) {
        auto b = tensor(g, "b", {1, 64}, DataType::FLOAT);
        attrs.input("IN_1", b);
        ins.push_back(b);
      }
      if (mc.arity >= 3) {
        auto c = tensor(g, "mask", {37, 1}, DataType::BOOLEAN);
        attrs.input("IN_2", c);
        ins.push_back(c);
      }
      if (mode == "GEN_INDEX") attrs.set("axis", int64_t(1));
      if (mode == "RELU_FWD" || mode == "RELU_BWD") attrs.set("relu_lower_clip", 0.1).set("relu_upper_clip", 1.5).set("relu_lower_clip_slope", 0.01);
      if (mode == "ELU_FWD" || mode == "ELU_BWD") attrs.set("elu_alpha", 0.7);
      if (mode == "SWISH_FWD" || mode == "SWISH_BWD") attrs.set("swish_beta", 1.3);
      if (mode == "SOFTPLUS_FWD" || mode == "SOFTPLUS_BWD") attrs.set("softplus_beta", 2.0);
      auto y = g.pointwise(a, attrs);
      y->set_output(true).set_name("y").set_data_type(mode == "GEN_INDEX" ? DataType::INT32
                                                      : boolean          ? DataType::BOOLEAN
                                                                         : DataType::FLOAT);
      outs = {y};
    };
    const Range r = positive ? Range{0.1, 2.0} : Range{-1.2, 1.2};
    compare(build, {r, r, {0, 1}}, 4e-6, 1e-6);
    if (HasFailure()) break;  // one broken mode at a time keeps the log readable
  }
}

// The second build of the same chain (after dropping the in-memory kernels) reads the disk cache
// instead of running NVRTC again.
TEST(CudaPointwise, DiskCacheHitOnSecondBuild) {
  if (!have_gpu()) GTEST_SKIP() << "needs an sm_90+ GPU and NVRTC";
  const auto dir = std::filesystem::temp_directory_path() / ("opendnn_pw_gpu_cache_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  ::setenv("OPENDNN_CACHE_DIR", dir.c_str(), 1);
  auto build = [&](Graph& g, std::vector<TensorPtr>& ins, std::vector<TensorPtr>& outs) {
    auto a = tensor(g, "a", {3, 5, 7}, DataType::FLOAT);
    auto y = g.exp(g.neg(a));
    y->set_output(true).set_data_type(DataType::FLOAT).set_name("y");
    ins = {a};
    outs = {y};
  };
  const int64_t c0 = pw::nvrtc_compile_count();
  compare(build, {{-1, 1}}, 2e-6, 0);
  const int64_t c1 = pw::nvrtc_compile_count();
  EXPECT_EQ(c1, c0 + 1);
  size_t files = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir / "kernels")) files += e.path().extension() == ".cubin";
  EXPECT_EQ(files, 1u);
  pw::forget_loaded_kernels();
  compare(build, {{-1, 1}}, 2e-6, 0);
  EXPECT_EQ(pw::nvrtc_compile_count(), c1);  // served from disk
  compare(build, {{-1, 1}}, 2e-6, 0);        // and now from memory
  EXPECT_EQ(pw::nvrtc_compile_count(), c1);
  ::unsetenv("OPENDNN_CACHE_DIR");
  std::filesystem::remove_all(dir);
}

// Every activation, forward and backward, at the edges (+-inf, NaN, +-0, huge, and where float
// compute overflows an intermediate): the generated kernel takes the same limits as the reference
// (no inf * 0 = NaN) and follows the same NaN rules. dY = 1.5 for the backward modes.
TEST(CudaPointwise, ActivationEdgeValuesMatchTheReference) {
  if (!have_gpu()) GTEST_SKIP() << "needs an sm_90+ GPU and NVRTC";
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> x = {-inf, -3e38f, -1e20f, -1e13f, -40.f, -7.f, -1.f, -0.f, 0.f, 1.f, 7.f, 40.f,
                                1e13f, 1e20f, 3e38f, inf, nan};
  const int64_t n = int64_t(x.size());
  const char* modes[] = {"RELU_FWD", "RELU_BWD", "TANH_FWD", "TANH_BWD", "SIGMOID_FWD", "SIGMOID_BWD",
                         "ELU_FWD", "ELU_BWD", "GELU_FWD", "GELU_BWD", "GELU_APPROX_TANH_FWD",
                         "GELU_APPROX_TANH_BWD", "SOFTPLUS_FWD", "SOFTPLUS_BWD", "SWISH_FWD", "SWISH_BWD"};
  for (const char* mode : modes) {
    SCOPED_TRACE(mode);
    const bool bwd = std::string(mode).find("_BWD") != std::string::npos;
    Graph g[2];
    TensorPtr a[2], dy[2], y[2];
    for (int e = 0; e < 2; ++e) {
      g[e].set_intermediate_data_type(DataType::FLOAT).set_compute_data_type(DataType::FLOAT);
      a[e] = tensor(g[e], "x", {n}, DataType::FLOAT);
      NodeAttrs attrs;
      attrs.set("mode", mode);
      if (bwd) {
        dy[e] = tensor(g[e], "dy", {n}, DataType::FLOAT);
        attrs.input("IN_1", a[e]);
      }
      y[e] = g[e].pointwise(bwd ? dy[e] : a[e], attrs);
      y[e]->set_output(true).set_name("y").set_data_type(DataType::FLOAT);
      ASSERT_TRUE(plan_for(g[e], e == 0).is_good());
    }
    std::vector<float> ones(x.size(), 1.5f), want(x.size()), got(x.size());
    std::vector<unsigned char> ws(size_t(std::max<int64_t>(g[1].get_workspace_size(), 1)));
    std::unordered_map<TensorPtr, void*> pr{{a[1], (void*)x.data()}, {y[1], want.data()}};
    if (bwd) pr[dy[1]] = ones.data();
    ASSERT_TRUE(g[1].execute(pr, ws.data()).is_good());
    DevBuf dx(x.size() * 4), ddy(x.size() * 4), dyo(x.size() * 4);
    ASSERT_EQ(cudaMemcpy(dx.p, x.data(), x.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(ddy.p, ones.data(), x.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
    std::unordered_map<TensorPtr, void*> pc{{a[0], dx.p}, {y[0], dyo.p}};
    if (bwd) pc[dy[0]] = ddy.p;
    ASSERT_TRUE(g[0].execute(pc, nullptr).is_good());
    ASSERT_EQ(cudaMemcpy(got.data(), dyo.p, x.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
    for (size_t i = 0; i < x.size(); ++i) {
      const bool same = (std::isnan(got[i]) && std::isnan(want[i])) || got[i] == want[i] ||
                        std::fabs(double(got[i]) - want[i]) <= 1e-6 + 4e-6 * std::fabs(double(want[i]));
      EXPECT_TRUE(same) << "x = " << x[i] << ": cuda " << got[i] << ", reference " << want[i];
    }
  }
}
