// SPDX-License-Identifier: Apache-2.0
// The cuda engine's RMSNorm / LayerNorm plans against a double-precision host computation.
// Needs an NVIDIA GPU (sm_90+); skips elsewhere.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "common/dtype_convert.h"
#include "opendnn/engine.h"
#include "opendnn/opendnn.h"
#include "support/device.h"

using namespace opendnn;

namespace {

bool have_gpu() { return test::have_sm90_gpu(); }
using test::DevBuf;

// cuDNN's propose finalizes (runtime-compiles) plans for every graph, about a second each; these
// tests pin the cuda engine anyway, so the cudnn engine leaves this process's registry.
void drop_cudnn_engine() {
  for (const auto& e : registered_engines())
    if (e->name() == "cudnn") unregister_engine(e->engine_id());
}

// Runs fn(begin, end) over [0, n) on all host cores (the fp64 oracle of the larger shapes).
template <class F>
void parallel_for(int64_t n, F fn) {
  const int64_t k = std::clamp<int64_t>(std::thread::hardware_concurrency(), 1, 64);
  std::vector<std::thread> pool;
  for (int64_t t = 0; t < k; ++t) {
    const int64_t b = n * t / k, e = n * (t + 1) / k;
    if (b < e) pool.emplace_back(fn, b, e);
  }
  for (auto& th : pool) th.join();
}

// Host data of one element type: values already rounded to it, and their bytes for the device.
// Row r draws from its own generator, so the values do not depend on the number of threads.
struct HostTensor {
  DataType type;
  std::vector<double> v;
  std::vector<uint8_t> bytes;
  HostTensor(DataType t, int64_t rows, int64_t cols, uint32_t seed, double lo, double hi)
      : type(t), v(size_t(rows * cols)), bytes(v.size() * size_t(bits_of(t) / 8)) {
    parallel_for(rows, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        std::mt19937 rng(seed + uint32_t(r) * 7919u);
        std::uniform_real_distribution<double> d(lo, hi);
        for (int64_t i = r * cols; i < (r + 1) * cols; ++i) set(i, d(rng));
      }
    });
  }
  void set(int64_t i, double value) {
    v[size_t(i)] = round_to(type, value);
    store_element(type, bytes.data(), i, v[size_t(i)]);
  }
};

bool env_on(const char* name) {
  const char* v = std::getenv(name);
  return v && std::string(v) == "1";
}

const char* type_name(DataType t) { return t == DataType::FLOAT ? "fp32" : t == DataType::HALF ? "fp16" : "bf16"; }

// Relative error allowed for outputs of type t (the fp32 math rounded once to t).
double tolerance(DataType t) { return t == DataType::FLOAT ? 1e-4 : t == DataType::HALF ? 3e-3 : 1e-2; }

// Plans the graph on the cuda engine alone (the test is about our kernels, not the router's choice).
bool build_on_cuda(Graph& g) {
  if (Status s = g.validate(); s.is_bad()) return ADD_FAILURE() << s.to_string(), false;
  if (Status s = g.create_execution_plans(test::kOurEngines); s.is_bad()) return ADD_FAILURE() << s.to_string(), false;
  if (Status s = g.deselect_engines({"cudnn", "reference"}); s.is_bad()) return ADD_FAILURE() << s.to_string(), false;
  if (Status s = g.check_support(); s.is_bad()) return ADD_FAILURE() << s.to_string(), false;
  if (Status s = g.build_plans(); s.is_bad()) return ADD_FAILURE() << s.to_string(), false;
  std::string engine;
  EXPECT_TRUE(g.get_engine_name_at_index(g.selected_plan(), engine).is_good());
  EXPECT_EQ(engine, "cuda");
  return engine == "cuda";
}

// sqrt(sum (got - want)^2 / sum want^2), with got as raw elements of type t.
double rel_err(DataType t, const std::vector<uint8_t>& got, const std::vector<double>& want) {
  const int64_t n = int64_t(want.size()), chunks = 64;
  std::vector<double> num(chunks, 0.0), den(chunks, 0.0);
  parallel_for(chunks, [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c)
      for (int64_t i = n * c / chunks; i < n * (c + 1) / chunks; ++i) {
        const double g = load_element(t, got.data(), i), w = want[size_t(i)];
        num[size_t(c)] += (g - w) * (g - w);
        den[size_t(c)] += w * w;
      }
  });
  double a = 0, b = 0;
  for (int64_t c = 0; c < chunks; ++c) a += num[size_t(c)], b += den[size_t(c)];
  return std::sqrt(a / (b > 0 ? b : 1));
}

// One case: forward then backward of RMSNorm (layer=false) or LayerNorm (layer=true) with X/Y/DY/DX
// of type xt and scale/bias/dscale/dbias of type wt, against a double-precision host computation.
// The backward runs twice and must give bitwise equal results.
void check_norm(bool layer, int64_t rows, int64_t cols, DataType xt, DataType wt) {
  SCOPED_TRACE(std::string(layer ? "layernorm " : "rmsnorm ") + type_name(xt) + "/" + type_name(wt) + " " +
               std::to_string(rows) + "x" + std::to_string(cols));
  const uint32_t seed = uint32_t(1234 + cols + rows);
  const size_t n = size_t(rows * cols), xs = size_t(bits_of(xt) / 8), ws = size_t(bits_of(wt) / 8);
  HostTensor x(xt, rows, cols, seed, -2, 2), w(wt, 1, cols, seed + 1, 0.5, 1.5), b(wt, 1, cols, seed + 2, -1, 1),
      dy(xt, rows, cols, seed + 3, -1, 1);
  // A per-row offset so LayerNorm's mean is far from zero in some rows (cancellation check).
  for (int64_t r = 0; r < rows; r += 3)
    for (int64_t i = r * cols; i < (r + 1) * cols; ++i) x.set(i, x.v[size_t(i)] + 8.0);
  const double eps = 1e-5;

  // Host reference in double, rows split over the host's cores; dscale/dbias per chunk of rows,
  // added in chunk order.
  std::vector<double> ry(n), rdx(n), rdw(size_t(cols), 0.0), rdb(size_t(cols), 0.0);
  std::vector<float> mean(static_cast<size_t>(rows)), inv(static_cast<size_t>(rows));
  const int64_t chunks = std::min<int64_t>(rows, 64);
  std::vector<std::vector<double>> pdw(size_t(chunks), std::vector<double>(size_t(cols), 0.0)), pdb = pdw;
  parallel_for(chunks, [&](int64_t c0, int64_t c1) {
    for (int64_t ch = c0; ch < c1; ++ch)
      for (int64_t r = rows * ch / chunks; r < rows * (ch + 1) / chunks; ++r) {
        const double* xr = x.v.data() + r * cols;
        const double* dr = dy.v.data() + r * cols;
        double m = 0, v = 0;
        for (int64_t c = 0; c < cols; ++c) m += xr[c];
        m = layer ? m / double(cols) : 0.0;
        for (int64_t c = 0; c < cols; ++c) v += (xr[c] - m) * (xr[c] - m);
        double is = 1.0 / std::sqrt(v / double(cols) + eps);
        mean[size_t(r)] = float(m);
        inv[size_t(r)] = float(is);
        double sgx = 0, sg = 0;
        for (int64_t c = 0; c < cols; ++c) {
          double xh = (xr[c] - m) * is, g = dr[c] * w.v[size_t(c)];
          ry[size_t(r * cols + c)] = xh * w.v[size_t(c)] + (layer ? b.v[size_t(c)] : 0.0);
          sgx += g * xh;
          sg += g;
          pdw[size_t(ch)][size_t(c)] += dr[c] * xh;
          pdb[size_t(ch)][size_t(c)] += dr[c];
        }
        sgx /= double(cols);
        sg = layer ? sg / double(cols) : 0.0;
        for (int64_t c = 0; c < cols; ++c) {
          double xh = (xr[c] - m) * is;
          rdx[size_t(r * cols + c)] = is * (dr[c] * w.v[size_t(c)] - sg - xh * sgx);
        }
      }
  });
  for (int64_t ch = 0; ch < chunks; ++ch)
    for (int64_t c = 0; c < cols; ++c) rdw[size_t(c)] += pdw[size_t(ch)][size_t(c)], rdb[size_t(c)] += pdb[size_t(ch)][size_t(c)];

  DevBuf dx_in(n * xs), dw_in(size_t(cols) * ws), db_in(size_t(cols) * ws), ddy(n * xs), dy_out(n * xs),
      dmean(size_t(rows) * 4), dinv(size_t(rows) * 4), ddx(n * xs), ddw(size_t(cols) * ws), ddb(size_t(cols) * ws);
  dx_in.put(x.bytes);
  dw_in.put(w.bytes);
  db_in.put(b.bytes);
  ddy.put(dy.bytes);
  auto poison = [](DevBuf& d) { d.poison(); };

  // Forward.
  {
    Graph g;
    g.set_io_data_type(xt).set_intermediate_data_type(DataType::FLOAT).set_compute_data_type(DataType::FLOAT);
    auto X = g.tensor(TensorAttr().set_name("x").set_dim({rows, cols}).set_data_type(xt));
    auto W = g.tensor(TensorAttr().set_name("w").set_dim({1, cols}).set_data_type(wt));
    auto E = g.tensor(Scalar::of_float(float(eps)));
    poison(dy_out);
    poison(dinv);
    poison(dmean);
    TensorPtr Y, M, IV;
    // The narrow forward (opt-in) takes rows of 129-512 16-byte vectors.
    auto expect_plan = [&] {
      std::string plan;
      EXPECT_TRUE(g.get_plan_name_at_index(g.selected_plan(), plan).is_good());
      const int64_t vecs = cols * int64_t(xs) / 16;
      if (env_on("OPENDNN_NORM_FWD_NARROW")) EXPECT_EQ(plan.find("_narrow") != std::string::npos, vecs > 128 && vecs <= 512) << plan;
    };
    if (layer) {
      auto B = g.tensor(TensorAttr().set_name("b").set_dim({1, cols}).set_data_type(wt));
      auto outs = g.layernorm(X, W, B, E, NodeAttrs().set_name("ln"));
      Y = outs[0], M = outs[1], IV = outs[2];
      M->set_output(true).set_data_type(DataType::FLOAT);
      IV->set_output(true).set_data_type(DataType::FLOAT);
      Y->set_output(true).set_data_type(xt);
      ASSERT_TRUE(build_on_cuda(g));
      expect_plan();
      std::unordered_map<TensorPtr, void*> pack = {{X, dx_in.p}, {W, dw_in.p}, {B, db_in.p}, {Y, dy_out.p}, {M, dmean.p}, {IV, dinv.p}};
      ASSERT_TRUE(g.execute(pack, nullptr).is_good());
    } else {
      auto outs = g.rmsnorm(X, W, E, NodeAttrs().set_name("rms"));
      Y = outs[0], IV = outs[1];
      Y->set_output(true).set_data_type(xt);
      IV->set_output(true).set_data_type(DataType::FLOAT);
      ASSERT_TRUE(build_on_cuda(g));
      expect_plan();
      std::unordered_map<TensorPtr, void*> pack = {{X, dx_in.p}, {W, dw_in.p}, {Y, dy_out.p}, {IV, dinv.p}};
      ASSERT_TRUE(g.execute(pack, nullptr).is_good());
    }
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_LT(rel_err(xt, dy_out.get<uint8_t>(n * xs), ry), tolerance(xt)) << "y";
    auto iv = dinv.get<float>(size_t(rows));
    for (int64_t r = 0; r < rows; ++r) EXPECT_NEAR(iv[size_t(r)], inv[size_t(r)], 1e-3 * inv[size_t(r)]) << "rstd row " << r;
    if (layer) {
      auto mv = dmean.get<float>(size_t(rows));
      for (int64_t r = 0; r < rows; ++r) EXPECT_NEAR(mv[size_t(r)], mean[size_t(r)], 1e-3 * (1 + std::fabs(mean[size_t(r)]))) << "mean row " << r;
    }
  }

  // Backward, fed the host statistics, twice.
  dmean.put(mean);
  dinv.put(inv);
  {
    Graph g;
    g.set_io_data_type(xt).set_intermediate_data_type(DataType::FLOAT).set_compute_data_type(DataType::FLOAT);
    auto DY = g.tensor(TensorAttr().set_name("dy").set_dim({rows, cols}).set_data_type(xt));
    auto X = g.tensor(TensorAttr().set_name("x").set_dim({rows, cols}).set_data_type(xt));
    auto W = g.tensor(TensorAttr().set_name("w").set_dim({1, cols}).set_data_type(wt));
    auto IV = g.tensor(TensorAttr().set_name("iv").set_dim({rows, 1}).set_data_type(DataType::FLOAT));
    std::unordered_map<TensorPtr, void*> pack = {{DY, ddy.p}, {X, dx_in.p}, {W, dw_in.p}, {IV, dinv.p}};
    std::array<TensorPtr, 3> outs;
    if (layer) {
      auto M = g.tensor(TensorAttr().set_name("mean").set_dim({rows, 1}).set_data_type(DataType::FLOAT));
      outs = g.layernorm_backward(DY, X, W, M, IV, NodeAttrs().set_name("ln_bwd"));
      pack[M] = dmean.p;
      outs[2]->set_output(true).set_data_type(wt);
      pack[outs[2]] = ddb.p;
    } else {
      outs = g.rmsnorm_backward(DY, X, W, IV, NodeAttrs().set_name("rms_bwd"));
    }
    outs[0]->set_output(true).set_data_type(xt);
    outs[1]->set_output(true).set_data_type(wt);
    pack[outs[0]] = ddx.p;
    pack[outs[1]] = ddw.p;
    ASSERT_TRUE(build_on_cuda(g));
    std::string plan;
    EXPECT_TRUE(g.get_plan_name_at_index(g.selected_plan(), plan).is_good());
    if (env_on("OPENDNN_NORM_BWD_V3")) {
      // rows of up to 1024 16-byte vectors (16-bit 8192, fp32 4096); wider ones keep the ring kernel
      EXPECT_EQ(plan.find("_bwd_v3") != std::string::npos, cols * int64_t(xs) <= 16384) << plan;
    } else if (env_on("OPENDNN_NORM_BWD_V2")) {
      // fp32 rows past 8192 keep the ring kernel
      EXPECT_EQ(plan.find("_bwd_v2") != std::string::npos, xt != DataType::FLOAT || cols <= 8192) << plan;
    } else {
      // the default: v3 for 16-bit rows of 257-512 16-byte vectors, the ring kernel elsewhere
      EXPECT_EQ(plan.find("_bwd_v3") != std::string::npos, xt != DataType::FLOAT && cols > 2048 && cols <= 4096) << plan;
    }
    DevBuf wsb(size_t(std::max<int64_t>(1, g.get_workspace_size())));
    std::vector<uint8_t> first[3];
    for (int run = 0; run < 2; ++run) {
      poison(ddx);
      poison(ddw);
      poison(ddb);
      poison(wsb);
      ASSERT_TRUE(g.execute(pack, wsb.p).is_good());
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      std::vector<uint8_t> got[3] = {ddx.get<uint8_t>(n * xs), ddw.get<uint8_t>(size_t(cols) * ws),
                                     layer ? ddb.get<uint8_t>(size_t(cols) * ws) : std::vector<uint8_t>{}};
      if (run == 0) {
        EXPECT_LT(rel_err(xt, got[0], rdx), tolerance(xt)) << "dx";
        EXPECT_LT(rel_err(wt, got[1], rdw), tolerance(wt)) << "dscale";
        if (layer) {
          EXPECT_LT(rel_err(wt, got[2], rdb), tolerance(wt)) << "dbias";
        }
        for (int k = 0; k < 3; ++k) first[k] = std::move(got[k]);
      } else {
        EXPECT_TRUE(got[0] == first[0]) << "dx differs between two runs";
        EXPECT_TRUE(got[1] == first[1]) << "dscale differs between two runs";
        EXPECT_TRUE(got[2] == first[2]) << "dbias differs between two runs";
      }
    }
  }
}

// Hidden sizes from one vector per row to kMaxCols, non-powers-of-two, and row counts that leave
// the persistent backward grid uneven and wrap its ring several times. The forward (one CTA per
// row, the row in registers) takes 1, 2, 4 or 8 vectors a thread: 16-bit hidden 1000 / 3000,
// 4096 / 6000, 8192 / 16384 and fp32 64, 1000 / 2000 / 4096 / 16384 (3000, 6000, 2000: threads
// whose last vector is past the row; fp32 16384: 512 threads). LayerNorm's one-pass variance,
// shifted by the row's first element, meets the rows offset by +8.
const std::vector<std::pair<int64_t, int64_t>> kShapes = {{1, 64}, {37, 1000}, {999, 1000}, {300, 4096}, {64, 16384},
                                                         {301, 16384}};

void check_all(bool layer) {
  drop_cudnn_engine();
  for (DataType t : {DataType::BFLOAT16, DataType::HALF, DataType::FLOAT})
    for (auto [r, c] : kShapes) check_norm(layer, r, c, t, t);
  // The largest case once: many rows per CTA of the persistent backward grid.
  check_norm(layer, 2000, 4096, DataType::BFLOAT16, DataType::BFLOAT16);
  check_norm(layer, 129, 3000, DataType::HALF, DataType::HALF);
  check_norm(layer, 97, 8192, DataType::BFLOAT16, DataType::BFLOAT16);
  check_norm(layer, 65, 6000, DataType::HALF, DataType::HALF);
  // Mixed precision: 16-bit activations with fp32 weights and the other way round.
  check_norm(layer, 333, 4096, DataType::BFLOAT16, DataType::FLOAT);
  check_norm(layer, 77, 1000, DataType::FLOAT, DataType::HALF);
  check_norm(layer, 50, 2000, DataType::FLOAT, DataType::BFLOAT16);
}

// The norm adapter reads OPENDNN_NORM_BWD_V2/V3 and OPENDNN_NORM_FWD_NARROW when it proposes and builds a plan.
using test::ScopedEnv;

// The register-row backward (opt-in) on every case of check_all, each run twice and compared
// bit for bit, plus the bench's smaller shape and an uneven split of rows over the row slots.
void check_all_v2(bool layer) {
  ScopedEnv v2("OPENDNN_NORM_BWD_V2", "1");
  check_all(layer);
  check_norm(layer, 8192, 4096, DataType::BFLOAT16, DataType::BFLOAT16);
  check_norm(layer, 1031, 8192, DataType::BFLOAT16, DataType::BFLOAT16);
}

// The TMA-ring backward (forced with OPENDNN_NORM_BWD_V3=1) on every case of check_all (16-bit hidden 16384 and fp32 past
// 4096 check that the ring kernel still takes them), plus: the bench's 8k-token shapes; token
// counts that split unevenly over the teams' chunks (8191 over 2 x 132: 31 and 32 rows; 1031 and
// 263 over one team of 1024 threads a CTA: 7-8 and 1-2 rows); mixed precision; hidden 6000 and
// 3000 (teams of 768 and 384 threads, lanes past the row idle); more rows than 132 x 2 x 1024,
// where the grid grows past one CTA per SM to keep a team's statistics in shared memory.
void check_all_v3(bool layer) {
  ScopedEnv v3("OPENDNN_NORM_BWD_V3", "1");
  check_all(layer);
  const auto bf16 = DataType::BFLOAT16, fp16 = DataType::HALF, fp32 = DataType::FLOAT;
  check_norm(layer, 8192, 4096, bf16, bf16);
  check_norm(layer, 8191, 4096, bf16, bf16);
  check_norm(layer, 8192, 8192, bf16, bf16);
  check_norm(layer, 1031, 8192, fp16, fp16);
  check_norm(layer, 263, 4096, fp32, fp32);
  check_norm(layer, 2049, 6000, bf16, fp32);
  check_norm(layer, 517, 3000, fp16, bf16);
  check_norm(layer, 300001, 64, bf16, bf16);
}

// The narrow forward (opt-in) on every case of check_all (rows outside 129-512 vectors check that
// the default shape still takes them) and the bench's 8k-token shape.
void check_all_narrow(bool layer) {
  ScopedEnv narrow("OPENDNN_NORM_FWD_NARROW", "1");
  check_all(layer);
  check_norm(layer, 8192, 4096, DataType::BFLOAT16, DataType::BFLOAT16);
}

}  // namespace

TEST(CudaNorm, RmsNormForwardBackward) {
  if (!have_gpu()) GTEST_SKIP() << "no sm_90 GPU";
  check_all(false);
}

TEST(CudaNorm, LayerNormForwardBackward) {
  if (!have_gpu()) GTEST_SKIP() << "no sm_90 GPU";
  check_all(true);
}

TEST(CudaNorm, RmsNormBackwardV2) {
  if (!have_gpu()) GTEST_SKIP() << "no sm_90 GPU";
  check_all_v2(false);
}

TEST(CudaNorm, LayerNormBackwardV2) {
  if (!have_gpu()) GTEST_SKIP() << "no sm_90 GPU";
  check_all_v2(true);
}

TEST(CudaNorm, RmsNormBackwardV3) {
  if (!have_gpu()) GTEST_SKIP() << "no sm_90 GPU";
  check_all_v3(false);
}

TEST(CudaNorm, LayerNormBackwardV3) {
  if (!have_gpu()) GTEST_SKIP() << "no sm_90 GPU";
  check_all_v3(true);
}

TEST(CudaNorm, RmsNormForwardNarrow) {
  if (!have_gpu()) GTEST_SKIP() << "no sm_90 GPU";
  check_all_narrow(false);
}

TEST(CudaNorm, LayerNormForwardNarrow) {
  if (!have_gpu()) GTEST_SKIP() << "no sm_90 GPU";
  check_all_narrow(true);
}
