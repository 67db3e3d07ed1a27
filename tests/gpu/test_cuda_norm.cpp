// SPDX-License-Identifier: Apache-2.0
// The cuda engine's RMSNorm / LayerNorm plans against a double-precision host computation.
// Needs an NVIDIA GPU (sm_90+); skips elsewhere.
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "common/dtype_convert.h"
#include "opendnn/opendnn.h"

using namespace opendnn;

namespace {

bool have_gpu() {
  Target t = default_target();
  return t.kind == DeviceKind::CUDA && t.sm_version >= 90;
}

struct DevBuf {
  void* p = nullptr;
  size_t n = 0;
  explicit DevBuf(size_t bytes) : n(bytes) { EXPECT_EQ(cudaMalloc(&p, bytes), cudaSuccess); }
  ~DevBuf() { cudaFree(p); }
  template <class T>
  void put(const std::vector<T>& v) { ASSERT_EQ(cudaMemcpy(p, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice), cudaSuccess); }
  template <class T>
  std::vector<T> get(size_t count) {
    std::vector<T> v(count);
    EXPECT_EQ(cudaMemcpy(v.data(), p, count * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
    return v;
  }
};

std::vector<uint16_t> random_bf16(size_t n, std::mt19937& rng, double lo, double hi) {
  std::uniform_real_distribution<double> d(lo, hi);
  std::vector<uint16_t> v(n);
  for (auto& e : v) e = double_to_bf16(d(rng));
  return v;
}

// Plans the graph on the cuda engine alone (the test is about our kernels, not the router's choice).
bool build_on_cuda(Graph& g) {
  if (Status s = g.validate(); s.is_bad()) return ADD_FAILURE() << s.to_string(), false;
  if (Status s = g.create_execution_plans({HeurMode::A}); s.is_bad()) return ADD_FAILURE() << s.to_string(), false;
  if (Status s = g.deselect_engines({"cudnn", "reference"}); s.is_bad()) return ADD_FAILURE() << s.to_string(), false;
  if (Status s = g.check_support(); s.is_bad()) return ADD_FAILURE() << s.to_string(), false;
  if (Status s = g.build_plans(); s.is_bad()) return ADD_FAILURE() << s.to_string(), false;
  std::string engine;
  EXPECT_TRUE(g.get_engine_name_at_index(g.selected_plan(), engine).is_good());
  EXPECT_EQ(engine, "cuda");
  return engine == "cuda";
}

double rel_err(const std::vector<double>& got, const std::vector<double>& want) {
  double num = 0, den = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    num += (got[i] - want[i]) * (got[i] - want[i]);
    den += want[i] * want[i];
  }
  return std::sqrt(num / (den > 0 ? den : 1));
}

// One case: forward then backward of RMSNorm (layer=false) or LayerNorm (layer=true), bf16.
void check_norm(bool layer, int64_t rows, int64_t cols) {
  std::mt19937 rng(1234 + cols);
  auto x = random_bf16(size_t(rows * cols), rng, -2, 2);
  auto w = random_bf16(size_t(cols), rng, 0.5, 1.5);
  auto b = random_bf16(size_t(cols), rng, -1, 1);
  auto dy = random_bf16(size_t(rows * cols), rng, -1, 1);
  const double eps = 1e-5;

  // Host reference in double.
  std::vector<double> ry(size_t(rows * cols)), rdx(size_t(rows * cols)), rdw(size_t(cols), 0.0), rdb(size_t(cols), 0.0);
  std::vector<float> mean(static_cast<size_t>(rows)), inv(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) {
    double m = 0, v = 0;
    for (int64_t c = 0; c < cols; ++c) m += bf16_to_double(x[size_t(r * cols + c)]);
    m = layer ? m / double(cols) : 0.0;
    for (int64_t c = 0; c < cols; ++c) {
      double d = bf16_to_double(x[size_t(r * cols + c)]) - m;
      v += d * d;
    }
    double is = 1.0 / std::sqrt(v / double(cols) + eps);
    mean[size_t(r)] = float(m);
    inv[size_t(r)] = float(is);
    double sgx = 0, sg = 0;
    for (int64_t c = 0; c < cols; ++c) {
      size_t i = size_t(r * cols + c);
      double xh = (bf16_to_double(x[i]) - m) * is;
      ry[i] = xh * bf16_to_double(w[size_t(c)]) + (layer ? bf16_to_double(b[size_t(c)]) : 0.0);
      double g = bf16_to_double(dy[i]) * bf16_to_double(w[size_t(c)]);
      sgx += g * xh;
      sg += g;
      rdw[size_t(c)] += bf16_to_double(dy[i]) * xh;
      rdb[size_t(c)] += bf16_to_double(dy[i]);
    }
    sgx /= double(cols);
    sg = layer ? sg / double(cols) : 0.0;
    for (int64_t c = 0; c < cols; ++c) {
      size_t i = size_t(r * cols + c);
      double xh = (bf16_to_double(x[i]) - m) * is;
      rdx[i] = is * (bf16_to_double(dy[i]) * bf16_to_double(w[size_t(c)]) - sg - xh * sgx);
    }
  }

  DevBuf dx_in(x.size() * 2), dw_in(w.size() * 2), db_in(b.size() * 2), ddy(dy.size() * 2), dy_out(x.size() * 2),
      dmean(size_t(rows) * 4), dinv(size_t(rows) * 4), ddx(x.size() * 2), ddw(w.size() * 2), ddb(w.size() * 2);
  dx_in.put(x);
  dw_in.put(w);
  db_in.put(b);
  ddy.put(dy);

  // Forward.
  {
    Graph g;
    g.set_io_data_type(DataType::BFLOAT16).set_intermediate_data_type(DataType::FLOAT).set_compute_data_type(DataType::FLOAT);
    auto X = g.tensor(TensorAttr().set_name("x").set_dim({rows, cols}));
    auto W = g.tensor(TensorAttr().set_name("w").set_dim({1, cols}));
    auto E = g.tensor(Scalar::of_float(float(eps)));
    TensorPtr Y, M, IV;
    if (layer) {
      auto B = g.tensor(TensorAttr().set_name("b").set_dim({1, cols}));
      auto outs = g.layernorm(X, W, B, E, NodeAttrs().set_name("ln"));
      Y = outs[0], M = outs[1], IV = outs[2];
      M->set_output(true).set_data_type(DataType::FLOAT);
      IV->set_output(true).set_data_type(DataType::FLOAT);
      Y->set_output(true);
      ASSERT_TRUE(build_on_cuda(g));
      std::unordered_map<TensorPtr, void*> pack = {{X, dx_in.p}, {W, dw_in.p}, {B, db_in.p}, {Y, dy_out.p}, {M, dmean.p}, {IV, dinv.p}};
      ASSERT_TRUE(g.execute(pack, nullptr).is_good());
    } else {
      auto outs = g.rmsnorm(X, W, E, NodeAttrs().set_name("rms"));
      Y = outs[0], IV = outs[1];
      Y->set_output(true);
      IV->set_output(true).set_data_type(DataType::FLOAT);
      ASSERT_TRUE(build_on_cuda(g));
      std::unordered_map<TensorPtr, void*> pack = {{X, dx_in.p}, {W, dw_in.p}, {Y, dy_out.p}, {IV, dinv.p}};
      ASSERT_TRUE(g.execute(pack, nullptr).is_good());
    }
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    auto y = dy_out.get<uint16_t>(x.size());
    std::vector<double> yd(y.size());
    for (size_t i = 0; i < y.size(); ++i) yd[i] = bf16_to_double(y[i]);
    EXPECT_LT(rel_err(yd, ry), 8e-3) << (layer ? "layernorm" : "rmsnorm") << " fwd " << rows << "x" << cols;
    auto iv = dinv.get<float>(size_t(rows));
    for (int64_t r = 0; r < rows; ++r) EXPECT_NEAR(iv[size_t(r)], inv[size_t(r)], 1e-3 * inv[size_t(r)]);
  }

  // Backward, fed the host statistics.
  dmean.put(mean);
  dinv.put(inv);
  {
    Graph g;
    g.set_io_data_type(DataType::BFLOAT16).set_intermediate_data_type(DataType::FLOAT).set_compute_data_type(DataType::FLOAT);
    auto DY = g.tensor(TensorAttr().set_name("dy").set_dim({rows, cols}));
    auto X = g.tensor(TensorAttr().set_name("x").set_dim({rows, cols}));
    auto W = g.tensor(TensorAttr().set_name("w").set_dim({1, cols}));
    auto IV = g.tensor(TensorAttr().set_name("iv").set_dim({rows, 1}).set_data_type(DataType::FLOAT));
    std::unordered_map<TensorPtr, void*> pack = {{DY, ddy.p}, {X, dx_in.p}, {W, dw_in.p}, {IV, dinv.p}};
    std::array<TensorPtr, 3> outs;
    if (layer) {
      auto M = g.tensor(TensorAttr().set_name("mean").set_dim({rows, 1}).set_data_type(DataType::FLOAT));
      outs = g.layernorm_backward(DY, X, W, M, IV, NodeAttrs().set_name("ln_bwd"));
      pack[M] = dmean.p;
      outs[2]->set_output(true);
      pack[outs[2]] = ddb.p;
    } else {
      outs = g.rmsnorm_backward(DY, X, W, IV, NodeAttrs().set_name("rms_bwd"));
    }
    outs[0]->set_output(true);
    outs[1]->set_output(true);
    pack[outs[0]] = ddx.p;
    pack[outs[1]] = ddw.p;
    ASSERT_TRUE(build_on_cuda(g));
    DevBuf ws(size_t(std::max<int64_t>(1, g.get_workspace_size())));
    ASSERT_TRUE(g.execute(pack, ws.p).is_good());
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    auto dxv = ddx.get<uint16_t>(x.size());
    auto dwv = ddw.get<uint16_t>(w.size());
    std::vector<double> a(dxv.size()), bw(dwv.size());
    for (size_t i = 0; i < dxv.size(); ++i) a[i] = bf16_to_double(dxv[i]);
    for (size_t i = 0; i < dwv.size(); ++i) bw[i] = bf16_to_double(dwv[i]);
    EXPECT_LT(rel_err(a, rdx), 1e-2) << "dx " << rows << "x" << cols;
    EXPECT_LT(rel_err(bw, rdw), 1e-2) << "dscale " << rows << "x" << cols;
    if (layer) {
      auto dbv = ddb.get<uint16_t>(w.size());
      std::vector<double> c(dbv.size());
      for (size_t i = 0; i < dbv.size(); ++i) c[i] = bf16_to_double(dbv[i]);
      EXPECT_LT(rel_err(c, rdb), 1e-2) << "dbias";
    }
  }
}

}  // namespace

TEST(CudaNorm, RmsNormForwardBackward) {
  if (!have_gpu()) GTEST_SKIP() << "no sm_90 GPU";
  for (auto [r, c] : std::vector<std::pair<int64_t, int64_t>>{{1, 64}, {37, 1000}, {300, 4096}, {64, 16384}})
    check_norm(false, r, c);
}

TEST(CudaNorm, LayerNormForwardBackward) {
  if (!have_gpu()) GTEST_SKIP() << "no sm_90 GPU";
  for (auto [r, c] : std::vector<std::pair<int64_t, int64_t>>{{1, 64}, {37, 1000}, {300, 4096}, {64, 16384}})
    check_norm(true, r, c);
}
