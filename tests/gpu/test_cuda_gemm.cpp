// SPDX-License-Identifier: Apache-2.0
// The cuda engine's GEMM plans (MATMUL + fused pointwise epilogue) against a double-precision host
// computation on edge shapes. Needs an NVIDIA GPU (sm_90+); skips elsewhere.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <random>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/dtype_convert.h"
#include "opendnn/opendnn.h"
#include "support/device.h"

using namespace opendnn;

namespace {

bool have_gpu() { return test::have_sm90_gpu(); }

// Device memory holding a host vector of values rounded to `type` (or poison when empty).
struct Buf {
  DataType type;
  std::vector<double> v;  // the values, exactly representable in `type`
  void* p = nullptr;
  size_t bytes = 0;
  Buf(DataType t, size_t n, std::mt19937* rng, double lo = -1, double hi = 1) : type(t), v(n), bytes(n * size_t(bits_of(t) / 8)) {
    std::vector<uint8_t> host(bytes, 0xff);  // 0xffff is NaN in bf16 and fp16: a poisoned output
    if (rng) {
      std::uniform_real_distribution<double> d(lo, hi);
      for (size_t i = 0; i < n; ++i) {
        v[i] = round_to(t, d(*rng));
        store_element(t, host.data(), int64_t(i), v[i]);
      }
    }
    EXPECT_EQ(cudaMalloc(&p, bytes ? bytes : 1), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(p, host.data(), bytes, cudaMemcpyHostToDevice), cudaSuccess);
  }
  ~Buf() { cudaFree(p); }
  std::vector<double> read() const {
    std::vector<uint8_t> host(bytes);
    EXPECT_EQ(cudaMemcpy(host.data(), p, bytes, cudaMemcpyDeviceToHost), cudaSuccess);
    std::vector<double> out(v.size());
    for (size_t i = 0; i < out.size(); ++i) out[i] = load_element(type, host.data(), int64_t(i));
    return out;
  }
};

// SWIGLU and BIAS_SWIGLU: silu(A · B [+ bias]) * up, `up` a graph input of the output's shape.
enum class Epi { NONE, BIAS, BIAS_RELU, BIAS_GELU, BIAS_GELU_TANH, BIAS_SILU, SCALE_BIAS_RESIDUAL, RESIDUAL, SWIGLU, BIAS_SWIGLU };

struct Case {
  DataType type;
  int64_t L, M, N, K;
  bool b_k_major;
  Epi epi;
  bool shared_b = false;  // B [1, K, N] broadcast over the batch
  DataType out = DataType::NOT_SET;  // the output's (and residual's) type; NOT_SET: `type`
  DataType out_type() const { return out == DataType::NOT_SET ? type : out; }
};

std::string describe(const Case& c) {
  return std::string(c.type == DataType::HALF ? "fp16" : "bf16") + " L" + std::to_string(c.L) + " M" +
         std::to_string(c.M) + " N" + std::to_string(c.N) + " K" + std::to_string(c.K) + (c.b_k_major ? " Bk" : " Bn") +
         " epi" + std::to_string(int(c.epi)) + (c.shared_b ? " sharedB" : "") +
         (c.out_type() == DataType::FLOAT ? " f32out" : "");
}

double act(Epi e, double x) {
  switch (e) {
    case Epi::BIAS_RELU: return x > 0 ? x : 0;
    case Epi::BIAS_GELU: return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0)));
    case Epi::BIAS_GELU_TANH: return 0.5 * x * (1 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
    case Epi::BIAS_SILU:
    case Epi::SWIGLU:
    case Epi::BIAS_SWIGLU: return x / (1 + std::exp(-x));
    default: return x;
  }
}

bool has_bias(Epi e) { return e != Epi::NONE && e != Epi::RESIDUAL && e != Epi::SWIGLU; }
bool gated(Epi e) { return e == Epi::SWIGLU || e == Epi::BIAS_SWIGLU; }
bool has_residual(Epi e) { return e == Epi::SCALE_BIAS_RESIDUAL || e == Epi::RESIDUAL; }

struct GemmGraph {
  Graph g;
  TensorPtr A, B, bias, res, out;  // res: the residual, or the gated MUL's `up`
};

// Builds the graph of a case: matmul, then the case's epilogue nodes.
void make_graph(const Case& c, GemmGraph& gg, float alpha) {
  Graph& g = gg.g;
  g.set_io_data_type(c.type).set_intermediate_data_type(DataType::FLOAT).set_compute_data_type(DataType::FLOAT);
  const int64_t LB = c.shared_b ? 1 : c.L;
  gg.A = g.tensor(TensorAttr().set_name("A").set_dim({c.L, c.M, c.K}).set_stride({c.M * c.K, c.K, 1}).set_data_type(c.type));
  std::vector<int64_t> bstride = c.b_k_major ? std::vector<int64_t>{c.K * c.N, 1, c.K} : std::vector<int64_t>{c.K * c.N, c.N, 1};
  gg.B = g.tensor(TensorAttr().set_name("B").set_dim({LB, c.K, c.N}).set_stride(bstride).set_data_type(c.type));
  TensorPtr y = g.matmul(gg.A, gg.B, NodeAttrs().set_name("mm"));
  if (c.epi == Epi::SCALE_BIAS_RESIDUAL) {
    TensorPtr s = g.tensor(Scalar::of_float(alpha));
    s->set_dim({1, 1, 1}).set_stride({1, 1, 1});  // pointwise inputs broadcast at equal rank
    y = g.mul(y, s, NodeAttrs().set_name("scale"));
  }
  if (has_bias(c.epi)) {
    gg.bias = g.tensor(TensorAttr().set_name("bias").set_dim({1, 1, c.N}).set_stride({c.N, c.N, 1}).set_data_type(c.type));
    y = g.add(y, gg.bias, NodeAttrs().set_name("bias_add"));
  }
  if (has_residual(c.epi)) {
    gg.res = g.tensor(TensorAttr().set_name("res").set_dim({c.L, c.M, c.N}).set_stride({c.M * c.N, c.N, 1}).set_data_type(c.out_type()));
    y = g.add(gg.res, y, NodeAttrs().set_name("res_add"));  // the residual on the left: ADD commutes
  }
  switch (c.epi) {
    case Epi::BIAS_RELU: y = g.relu(y, NodeAttrs().set_name("act")); break;
    case Epi::BIAS_GELU: y = g.gelu(y, NodeAttrs().set_name("act")); break;
    case Epi::BIAS_GELU_TANH: y = g.gelu_approx_tanh(y, NodeAttrs().set_name("act")); break;
    case Epi::BIAS_SILU:
    case Epi::SWIGLU:
    case Epi::BIAS_SWIGLU: y = g.swish(y, NodeAttrs().set_name("act")); break;
    default: break;
  }
  if (gated(c.epi)) {
    gg.res = g.tensor(TensorAttr().set_name("up").set_dim({c.L, c.M, c.N}).set_stride({c.M * c.N, c.N, 1}).set_data_type(c.out_type()));
    y = g.mul(gg.res, y, NodeAttrs().set_name("gate"));  // `up` on the left: MUL commutes
  }
  y->set_output(true).set_data_type(c.out_type());
  gg.out = y;
}

using test::ScopedEnv;

// Plans on the cuda engine alone; false (no failure) when it has no plan. With `plan`, selects the
// cuda plan whose name contains it, and fails when there is none.
bool plan_on_cuda(Graph& g, const char* plan = nullptr) {
  if (Status s = g.validate(); s.is_bad()) return ADD_FAILURE() << s.to_string(), false;
  if (Status s = g.create_execution_plans(test::kOurEngines); s.is_bad()) return false;
  if (Status s = g.deselect_engines({"cudnn", "reference"}); s.is_bad()) return false;
  if (g.check_support().is_bad() || g.get_execution_plan_count() == 0) return false;
  if (Status s = g.build_plans(); s.is_bad()) return ADD_FAILURE() << s.to_string(), false;
  if (plan) {
    int64_t found = -1;
    std::string name, engine;
    for (int64_t i = 0; i < g.get_execution_plan_count() && found < 0; ++i)
      if (g.get_engine_name_at_index(i, engine).is_good() && engine == "cuda" &&
          g.get_plan_name_at_index(i, name).is_good() && name.find(plan) != std::string::npos)
        found = i;
    if (found < 0) return ADD_FAILURE() << "no cuda plan named *" << plan << "*", false;
    if (Status s = g.select_plan(found); s.is_bad()) return ADD_FAILURE() << s.to_string(), false;
  }
  std::string engine;
  EXPECT_TRUE(g.get_engine_name_at_index(g.selected_plan(), engine).is_good());
  return engine == "cuda";
}

// `runs` launches in a row must each write the same result (a stream-K plan's flags reset between launches).
void check_gemm(const Case& c, const char* plan = nullptr, int runs = 1) {
  SCOPED_TRACE(describe(c) + (plan ? std::string(" plan *") + plan + "*" : ""));
  std::mt19937 rng(uint32_t(7 + c.M * 31 + c.N * 7 + c.K + int(c.epi)));
  const float alpha = 0.75f;
  const int64_t LB = c.shared_b ? 1 : c.L;
  Buf a(c.type, size_t(c.L * c.M * c.K), &rng), b(c.type, size_t(LB * c.K * c.N), &rng),
      bias(c.type, size_t(c.N), &rng), res(c.out_type(), size_t(c.L * c.M * c.N), &rng),
      out(c.out_type(), size_t(c.L * c.M * c.N), nullptr);
  GemmGraph gg;
  make_graph(c, gg, alpha);
  ASSERT_TRUE(plan_on_cuda(gg.g, plan)) << "the cuda engine declined";
  int64_t ws_bytes = gg.g.get_workspace_size();
  void* ws = nullptr;
  if (ws_bytes > 0) {
    ASSERT_EQ(cudaMalloc(&ws, size_t(ws_bytes)), cudaSuccess);
  }
  std::unordered_map<TensorPtr, void*> pack = {{gg.A, a.p}, {gg.B, b.p}, {gg.out, out.p}};
  if (gg.bias) pack[gg.bias] = bias.p;
  if (gg.res) pack[gg.res] = res.p;
  for (int run = 0; run < runs; ++run) {
    Status s = gg.g.execute(pack, ws);
    ASSERT_TRUE(s.is_good()) << s.to_string();
  }
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  if (ws) cudaFree(ws);

  std::vector<double> got = out.read();
  double num = 0, den = 0, worst = 0;
  for (int64_t l = 0; l < c.L; ++l)
    for (int64_t m = 0; m < c.M; ++m)
      for (int64_t n = 0; n < c.N; ++n) {
        double acc = 0;
        const int64_t lb = c.shared_b ? 0 : l;
        for (int64_t k = 0; k < c.K; ++k) {
          const size_t bi = size_t(lb * c.K * c.N + (c.b_k_major ? n * c.K + k : k * c.N + n));
          acc += a.v[size_t((l * c.M + m) * c.K + k)] * b.v[bi];
        }
        const size_t o = size_t((l * c.M + m) * c.N + n);
        double want = (c.epi == Epi::SCALE_BIAS_RESIDUAL ? alpha : 1.0) * acc;
        if (has_bias(c.epi)) want += bias.v[size_t(n)];
        if (has_residual(c.epi)) want += res.v[o];
        want = act(c.epi, want);
        if (gated(c.epi)) want *= res.v[o];
        num += (got[o] - want) * (got[o] - want);
        den += want * want;
        worst = std::max(worst, std::fabs(got[o] - want) / (1 + std::fabs(want)));
      }
  // An fp32 output is not rounded to 16 bits: a tolerance that a bf16-rounded result would fail.
  const double tol = c.out_type() == DataType::FLOAT ? 1e-4 : c.type == DataType::HALF ? 3e-3 : 1e-2;
  EXPECT_LT(std::sqrt(num / (den > 0 ? den : 1)), tol);
  EXPECT_LT(worst, 8 * tol) << "worst element";
}

class CudaGemm : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!have_gpu()) GTEST_SKIP() << "no sm_90 CUDA device";
    // Cases that name no plan test the cooperative kernels; the pingpong plan (offered by default, ranked
    // first where it exists) has its own cases, which set the variable back to 1.
    setenv("OPENDNN_GEMM_PINGPONG", "0", 1);
  }
};

TEST_F(CudaGemm, EdgeShapesBothLayoutsBothTypes) {
  for (DataType t : {DataType::BFLOAT16, DataType::HALF})
    for (bool bk : {false, true}) {
      check_gemm({t, 1, 1, 256, 64, bk, Epi::NONE});     // M = 1
      check_gemm({t, 1, 77, 200, 8, bk, Epi::NONE});     // K = 8, odd M, N not a tile multiple
      check_gemm({t, 1, 129, 264, 72, bk, Epi::NONE});   // every dim off the tile
      check_gemm({t, 3, 65, 136, 40, bk, Epi::NONE});    // batch = 3
      check_gemm({t, 3, 33, 64, 48, bk, Epi::BIAS, true});  // weight shared by the batch: folds into M
      check_gemm({t, 1, 512, 512, 512, bk, Epi::NONE});  // several tiles per CTA (persistent loop)
    }
}

TEST_F(CudaGemm, FusedEpilogues) {
  for (DataType t : {DataType::BFLOAT16, DataType::HALF})
    for (Epi e : {Epi::BIAS, Epi::BIAS_RELU, Epi::BIAS_GELU, Epi::BIAS_GELU_TANH, Epi::BIAS_SILU,
                  Epi::SCALE_BIAS_RESIDUAL, Epi::RESIDUAL})
      check_gemm({t, 2, 97, 152, 136, t == DataType::HALF, e});
}

// MATMUL_FP8, e4m3 A and column-major B, bf16 C = (A · B) * descale_A * descale_B * scale_C; with
// `amax`, also amax_C = max |(A · B) * descale_A * descale_B| (the reference engine's definition: before
// scale_C), run twice so the second launch must reset it.
void check_fp8(int64_t M, int64_t N, int64_t K, const char* plan = nullptr, bool amax = false) {
  SCOPED_TRACE("fp8 M" + std::to_string(M) + " N" + std::to_string(N) + " K" + std::to_string(K) +
               (plan ? std::string(" plan *") + plan + "*" : "") + (amax ? " amax" : ""));
  std::mt19937 rng(uint32_t(M * 3 + N * 5 + K));
  const DataType F8 = DataType::FP8_E4M3;
  Buf a(F8, size_t(M * K), &rng, -4, 4), b(F8, size_t(K * N), &rng, -4, 4), out(DataType::BFLOAT16, size_t(M * N), nullptr);
  Buf scales(DataType::FLOAT, 3, &rng, 0.25, 1.5);
  Buf amax_out(DataType::FLOAT, 1, nullptr);  // poisoned with NaN, which would stick
  Graph g;
  g.set_io_data_type(DataType::BFLOAT16).set_intermediate_data_type(DataType::FLOAT).set_compute_data_type(DataType::FLOAT);
  auto A = g.tensor(TensorAttr().set_name("A").set_dim({1, M, K}).set_stride({M * K, K, 1}).set_data_type(F8));
  auto B = g.tensor(TensorAttr().set_name("B").set_dim({1, K, N}).set_stride({K * N, 1, K}).set_data_type(F8));
  std::vector<TensorPtr> s;
  for (const char* name : {"descale_a", "descale_b", "scale_c"})
    s.push_back(g.tensor(TensorAttr().set_name(name).set_dim({1, 1, 1}).set_stride({1, 1, 1}).set_data_type(DataType::FLOAT)));
  auto outs = g.matmul_fp8(A, B, s[0], s[1], s[2], NodeAttrs().set_name("mm8"));
  outs[0]->set_output(true).set_data_type(DataType::BFLOAT16);
  outs[1]->set_data_type(DataType::FLOAT);
  if (amax) outs[1]->set_output(true);
  ASSERT_TRUE(plan_on_cuda(g, plan)) << "the cuda engine declined";
  std::unordered_map<TensorPtr, void*> pack = {{A, a.p}, {B, b.p}, {outs[0], out.p}};
  for (int i = 0; i < 3; ++i) pack[s[size_t(i)]] = static_cast<float*>(scales.p) + i;
  if (amax) pack[outs[1]] = amax_out.p;
  void* ws = nullptr;
  if (g.get_workspace_size() > 0) {
    ASSERT_EQ(cudaMalloc(&ws, size_t(g.get_workspace_size())), cudaSuccess);
  }
  for (int run = 0; run < (amax ? 2 : 1); ++run) {
    Status st = g.execute(pack, ws);
    ASSERT_TRUE(st.is_good()) << st.to_string();
  }
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  if (ws) cudaFree(ws);
  std::vector<double> got = out.read();
  const double scale = scales.v[0] * scales.v[1] * scales.v[2];
  double num = 0, den = 0, want_amax = 0;
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      double acc = 0;
      for (int64_t k = 0; k < K; ++k) acc += a.v[size_t(m * K + k)] * b.v[size_t(n * K + k)];
      const double want = acc * scale, d = got[size_t(m * N + n)] - want;
      num += d * d;
      den += want * want;
      want_amax = std::max(want_amax, std::fabs(acc * scales.v[0] * scales.v[1]));
    }
  EXPECT_LT(std::sqrt(num / (den > 0 ? den : 1)), 1e-2);
  if (amax) {  // fp32 accumulation against double: a relative tolerance
    const double got_amax = amax_out.read()[0];
    EXPECT_NEAR(got_amax, want_amax, 1e-3 * want_amax) << "amax_C";
  }
}

TEST_F(CudaGemm, Fp8E4m3) {
  check_fp8(1, 64, 32);
  check_fp8(77, 200, 16);
  check_fp8(129, 264, 144);
  check_fp8(512, 512, 1024);
}

// The second tile configuration, selected explicitly: the edge shapes and the epilogues its kernels
// (no activation, GELU erf) take.
TEST_F(CudaGemm, PingpongPlan) {
  ScopedEnv on("OPENDNN_GEMM_PINGPONG", "1");
  const DataType t = DataType::BFLOAT16;
  check_gemm({t, 1, 1, 256, 64, true, Epi::NONE}, "pingpong");
  check_gemm({t, 1, 77, 200, 8, true, Epi::NONE}, "pingpong");
  check_gemm({t, 1, 129, 264, 72, true, Epi::NONE}, "pingpong");
  check_gemm({t, 3, 65, 136, 40, true, Epi::NONE}, "pingpong");
  check_gemm({t, 3, 33, 64, 48, true, Epi::BIAS, true}, "pingpong");
  check_gemm({t, 1, 512, 512, 512, true, Epi::NONE}, "pingpong");
  check_gemm({t, 2, 97, 152, 136, true, Epi::SCALE_BIAS_RESIDUAL}, "pingpong");
  check_gemm({t, 2, 97, 152, 136, true, Epi::RESIDUAL}, "pingpong");
  check_gemm({t, 2, 97, 152, 136, true, Epi::BIAS_GELU}, "pingpong");
  check_gemm({t, 1, 129, 264, 72, true, Epi::BIAS_GELU}, "pingpong");
}

// The scheduler knobs: a swizzle pads the tile grid and runs the padding tiles (M 1900, N 1224: coop
// 16 x 5 tiles, swizzle 4, to 16 x 8; pingpong 16 x 10, swizzle 8, to 16 x 16); every raster order
// must still write exactly the output.
TEST_F(CudaGemm, SwizzleAndRasterKnobs) {
  ScopedEnv pp("OPENDNN_GEMM_PINGPONG", "1");
  for (const char* raster : {"m", "n", "h"}) {
    ScopedEnv sw("OPENDNN_GEMM_SWIZZLE", "8"), r("OPENDNN_GEMM_RASTER", raster);
    SCOPED_TRACE(std::string("raster ") + raster);
    check_gemm({DataType::BFLOAT16, 1, 1900, 1224, 64, true, Epi::BIAS_GELU}, "coop");
    check_gemm({DataType::HALF, 2, 1000, 1000, 32, false, Epi::NONE}, "coop");
    check_gemm({DataType::BFLOAT16, 1, 1900, 1224, 64, true, Epi::BIAS}, "pingpong");
  }
}

// fp8 without fp32 promotion, 128x256x128 (opt-in: OPENDNN_GEMM_FP8_FAST=1), selected explicitly.
TEST_F(CudaGemm, Fp8E4m3FastAccum) {
  ScopedEnv on("OPENDNN_GEMM_FP8_FAST", "1");
  check_fp8(1, 64, 32, "fastacc");
  check_fp8(77, 200, 16, "fastacc");
  check_fp8(129, 264, 144, "fastacc");
  check_fp8(512, 512, 1024, "fastacc");
}

// The variants below are opt-in until this test passes on a GPU (gemm_adapter.cpp, offered()).

// SwiGLU: silu(A · W_gate [+ bias]) * up in the epilogue of the bf16 pingpong kernel (B column-major).
TEST_F(CudaGemm, SwigluPlan) {
  ScopedEnv pp("OPENDNN_GEMM_PINGPONG", "1"), on("OPENDNN_GEMM_SWIGLU", "1");
  const DataType t = DataType::BFLOAT16;
  check_gemm({t, 1, 1, 256, 64, true, Epi::SWIGLU}, "swiglu");  // M = 1
  check_gemm({t, 1, 77, 200, 8, true, Epi::SWIGLU}, "swiglu");
  check_gemm({t, 1, 129, 264, 72, true, Epi::BIAS_SWIGLU}, "swiglu");  // every dim off the tile
  check_gemm({t, 3, 65, 136, 40, true, Epi::SWIGLU}, "swiglu");       // batch = 3
  check_gemm({t, 3, 33, 64, 48, true, Epi::BIAS_SWIGLU, true}, "swiglu");  // shared weight: folds into M
  check_gemm({t, 1, 512, 512, 512, true, Epi::BIAS_SWIGLU}, "swiglu");
}

// Without the switch, or for an activation other than SWISH, the gated graph is declined, not run unfused.
TEST_F(CudaGemm, SwigluDeclinedWhenOff) {
  ScopedEnv off("OPENDNN_GEMM_SWIGLU", "0");
  GemmGraph gg;
  make_graph({DataType::BFLOAT16, 1, 64, 64, 64, true, Epi::SWIGLU}, gg, 1.0f);
  EXPECT_FALSE(plan_on_cuda(gg.g));
}

// bf16 inputs, fp32 output (and fp32 residual) from the cooperative kernel with a run-time activation.
TEST_F(CudaGemm, Fp32OutputPlan) {
  ScopedEnv on("OPENDNN_GEMM_F32_OUT", "1");
  const DataType t = DataType::BFLOAT16, f = DataType::FLOAT;
  for (Case c : {Case{t, 1, 1, 256, 64, true, Epi::NONE}, Case{t, 1, 77, 200, 8, true, Epi::NONE},
                 Case{t, 1, 129, 264, 72, true, Epi::NONE}, Case{t, 3, 65, 136, 40, true, Epi::NONE},
                 Case{t, 3, 33, 64, 48, true, Epi::BIAS, true}, Case{t, 1, 512, 512, 512, true, Epi::NONE},
                 Case{t, 2, 97, 152, 136, true, Epi::BIAS_GELU}, Case{t, 2, 97, 152, 136, true, Epi::BIAS_SILU},
                 Case{t, 2, 97, 152, 136, true, Epi::SCALE_BIAS_RESIDUAL}, Case{t, 2, 97, 152, 136, true, Epi::RESIDUAL}}) {
    c.out = f;
    check_gemm(c, "f32out");
  }
}

// MATMUL_FP8 with amax_C as a graph output.
TEST_F(CudaGemm, Fp8E4m3Amax) {
  ScopedEnv on("OPENDNN_GEMM_FP8_AMAX", "1");
  check_fp8(1, 64, 32, "amax", true);
  check_fp8(77, 200, 16, "amax", true);
  check_fp8(129, 264, 144, "amax", true);
  check_fp8(512, 512, 1024, "amax", true);
}

// The 256x128 cooperative tile (bf16, B column-major, no activation).
TEST_F(CudaGemm, Tile256x128Plan) {
  ScopedEnv on("OPENDNN_GEMM_M256", "1");
  const DataType t = DataType::BFLOAT16;
  check_gemm({t, 1, 1, 256, 64, true, Epi::NONE}, "gemm_256x128");
  check_gemm({t, 1, 77, 200, 8, true, Epi::NONE}, "gemm_256x128");
  check_gemm({t, 1, 129, 264, 72, true, Epi::NONE}, "gemm_256x128");
  check_gemm({t, 1, 300, 264, 72, true, Epi::BIAS}, "gemm_256x128");  // M off the 256 tile, two M tiles
  check_gemm({t, 3, 65, 136, 40, true, Epi::NONE}, "gemm_256x128");
  check_gemm({t, 3, 33, 64, 48, true, Epi::BIAS, true}, "gemm_256x128");
  check_gemm({t, 1, 512, 512, 512, true, Epi::NONE}, "gemm_256x128");
  check_gemm({t, 2, 97, 152, 136, true, Epi::SCALE_BIAS_RESIDUAL}, "gemm_256x128");
}

// The session-5 candidates (opt-in; these pass on the H200): bf16, B column-major, no activation.
// The edge shapes of the other plans, the epilogues without an activation, and shapes where stream-K splits tiles
// along K: 4 tiles of 64 k-blocks over 132 SMs, and 143 tiles (a full wave and 11). `runs`: launches per case.
void check_candidate(const char* plan, int runs = 1) {
  const DataType t = DataType::BFLOAT16;
  for (const Case& c : {Case{t, 1, 1, 256, 64, true, Epi::NONE}, Case{t, 1, 77, 200, 8, true, Epi::NONE},
                        Case{t, 1, 129, 264, 72, true, Epi::NONE}, Case{t, 3, 65, 136, 40, true, Epi::NONE},
                        Case{t, 3, 33, 64, 48, true, Epi::BIAS, true}, Case{t, 1, 512, 512, 512, true, Epi::NONE},
                        Case{t, 2, 97, 152, 136, true, Epi::SCALE_BIAS_RESIDUAL},
                        Case{t, 2, 97, 152, 136, true, Epi::RESIDUAL},
                        Case{t, 1, 256, 512, 4096, true, Epi::BIAS}, Case{t, 1, 1664, 2816, 256, true, Epi::NONE}})
    check_gemm(c, plan, runs);
}

TEST_F(CudaGemm, Pingpong64x256Plan) {
  ScopedEnv on("OPENDNN_GEMM_PP64X256", "1");
  check_candidate("gemm_64x256x64");
  check_gemm({DataType::BFLOAT16, 2, 97, 152, 136, true, Epi::BIAS_GELU}, "gemm_64x256x64");
  check_gemm({DataType::BFLOAT16, 1, 129, 264, 72, true, Epi::BIAS_GELU}, "gemm_64x256x64");
}

// The knob model (OPENDNN_GEMM_KNOBS=model) picks swizzles and raster orders the knob test covers; at 2048 x 11008
// it walks along N where CUTLASS's heuristic walks along M (pingpong swizzle 4 instead of 8).
TEST_F(CudaGemm, ModelKnobs) {
  ScopedEnv pp("OPENDNN_GEMM_PINGPONG", "1"), on("OPENDNN_GEMM_KNOBS", "model");
  check_gemm({DataType::BFLOAT16, 1, 1900, 1224, 64, true, Epi::BIAS_GELU}, "coop");
  check_gemm({DataType::BFLOAT16, 1, 1900, 1224, 64, true, Epi::BIAS}, "pingpong");
  check_gemm({DataType::BFLOAT16, 1, 2048, 11008, 16, true, Epi::NONE}, "pingpong");
  check_gemm({DataType::BFLOAT16, 1, 2048, 11008, 16, true, Epi::NONE}, "coop");
}

// fp8 with fp32 promotion in a pingpong 64x128x128 tile.
TEST_F(CudaGemm, Fp8E4m3Pingpong) {
  ScopedEnv pp("OPENDNN_GEMM_FP8_PINGPONG", "1");
  check_fp8(1, 64, 32, "pingpong_e4m3");
  check_fp8(77, 200, 16, "pingpong_e4m3");
  check_fp8(129, 264, 144, "pingpong_e4m3");
  check_fp8(512, 512, 1024, "pingpong_e4m3");
}

// The fp8 promotion interval (OPENDNN_GEMM_FP8_PROMOTION=16: every 4 k-tiles of 128, so K = 144 and 1152, 2 and 9
// k-tiles, end with a partial interval that the residue promotion must add).
TEST_F(CudaGemm, Fp8E4m3PromotionInterval) {
  ScopedEnv pp("OPENDNN_GEMM_FP8_PINGPONG", "1"), p("OPENDNN_GEMM_FP8_PROMOTION", "16");
  for (const char* plan : {"coop_e4m3", "pingpong_e4m3"}) {
    check_fp8(77, 200, 16, plan);
    check_fp8(129, 264, 144, plan);
    check_fp8(512, 512, 1152, plan);
    check_fp8(256, 256, 4096, plan);
  }
}

// Shapes TMA cannot address decline with a reason instead of running.
TEST_F(CudaGemm, DeclinesMisalignedRows) {
  for (int64_t n : {13, 100 + 1}) {
    GemmGraph gg;
    make_graph({DataType::BFLOAT16, 1, 16, n, 64, false, Epi::NONE}, gg, 1.0f);
    EXPECT_FALSE(plan_on_cuda(gg.g)) << "N=" << n;
  }
  GemmGraph gg;
  make_graph({DataType::BFLOAT16, 1, 16, 64, 12, true, Epi::NONE}, gg, 1.0f);
  EXPECT_FALSE(plan_on_cuda(gg.g)) << "K=12";
}

}  // namespace
