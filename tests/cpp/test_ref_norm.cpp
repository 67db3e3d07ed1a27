// SPDX-License-Identifier: Apache-2.0
// Reference norm kernels: forward against hand-computed values, backward against finite differences.
#include <gtest/gtest.h>

#include <cmath>

#include "opendnn/graph.h"
#include "support/ref_harness.h"
#include "support/ref_harness2.h"

using namespace opendnn;
using namespace opendnn::test2;
using Dims = std::vector<int64_t>;
using Vec = std::vector<double>;

namespace {

// Row statistics written the "other" way (E[x^2] - E[x]^2), for the forward checks.
struct RowStats {
  double mean, inv;
};
RowStats stats_of(const Vec& row, double eps, bool rms) {
  double s = 0, s2 = 0;
  for (double v : row) s += v, s2 += v * v;
  double n = double(row.size());
  if (rms) return {0.0, 1.0 / std::sqrt(s2 / n + eps)};
  double m = s / n;
  return {m, 1.0 / std::sqrt(s2 / n - m * m + eps)};
}

}  // namespace

TEST(RefNorm, LayerNormForwardByHandStrided) {
  // X logical [2,3] stored transposed (strides {1,2}).
  Vec x = {1, 2, 3, 4, 6, 8};
  RefCall c(OpKind::LAYERNORM);
  c.in("X", {2, 3, 1, 1}, x, {1, 2, 1, 1});
  c.in("scale", {1, 3, 1, 1}, {1.0, 2.0, 0.5});
  c.in("bias", {1, 3, 1, 1}, {0.0, 1.0, -1.0});
  c.scalar("epsilon", Scalar::of_double(1e-5));
  c.out("Y", {2, 3, 1, 1}, {1, 2, 1, 1});
  c.out("mean", {2, 1, 1, 1});
  c.out("inv_variance", {2, 1, 1, 1});
  ASSERT_TRUE(c.run().is_good());
  Vec y, mean, inv;
  for (int r = 0; r < 2; ++r) {
    Vec row(x.begin() + 3 * r, x.begin() + 3 * r + 3);
    RowStats st = stats_of(row, 1e-5, false);
    mean.push_back(st.mean), inv.push_back(st.inv);
    double sc[3] = {1.0, 2.0, 0.5}, bi[3] = {0.0, 1.0, -1.0};
    for (int j = 0; j < 3; ++j) y.push_back((row[j] - st.mean) * st.inv * sc[j] + bi[j]);
  }
  expect_close(c.output("Y").values(), y, 1e-12, "Y");
  expect_close(c.output("mean").values(), mean, 1e-12, "mean");
  expect_close(c.output("inv_variance").values(), inv, 1e-12, "inv_variance");
  // Hand values for row 0: mean 2, var 2/3.
  EXPECT_NEAR(c.output("mean").values()[0], 2.0, 1e-15);
  EXPECT_NEAR(c.output("inv_variance").values()[0], 1.0 / std::sqrt(2.0 / 3.0 + 1e-5), 1e-12);
}

TEST(RefNorm, LayerNormInferenceSkipsStats) {
  // X [2,3,4] with scale [1,1,4]: normalised over the last dim only (rows [2,3]).
  auto run = [](bool inference) {
    RefCall c(OpKind::LAYERNORM);
    if (inference) c.attr("forward_phase", "INFERENCE");
    c.in("X", {2, 3, 4}, rand_vec(24, 1));
    c.in("scale", {1, 1, 4}, rand_vec(4, 2));
    c.in("bias", {1, 1, 4}, rand_vec(4, 3));
    c.scalar("epsilon", Scalar::of_double(1e-5));
    c.out("Y", {2, 3, 4});
    if (!inference) {
      c.out("mean", {2, 3, 1});
      c.out("inv_variance", {2, 3, 1});
    }
    EXPECT_TRUE(c.run().is_good());
    return c.output("Y").values();
  };
  Vec a = run(true), b = run(false);
  expect_close(a, b, 0, "Y");
  Vec x = rand_vec(24, 1);
  Vec row(x.begin() + 4, x.begin() + 8);
  RowStats st = stats_of(row, 1e-5, false);
  EXPECT_NEAR(a[4], (row[0] - st.mean) * st.inv * rand_vec(4, 2)[0] + rand_vec(4, 3)[0], 1e-12);
}

namespace {

enum class Fam { LN, IN, ADA, RMS, BN };

struct NormCase {
  OpKind fwd, bwd;
  Dims x, scale, stats;
  bool rms = false, bias = true;
};

// Loss = sum(w * Y) of the forward; gradient via the backward kernel (with the forward's saved
// statistics) vs central differences.
void check_norm_backward(const NormCase& k, const Dims& x_strides) {
  const int64_t nx = volume(k.x), ns = volume(k.scale);
  Vec x = rand_vec(size_t(nx), 11, -1, 1), sc = rand_vec(size_t(ns), 12, 0.5, 1.5), bi = rand_vec(size_t(ns), 13);
  Vec w = rand_vec(size_t(nx), 14);
  const double eps = 1e-3;
  auto fwd = [&](const Vec& xv, const Vec& sv, const Vec& bv, Vec* mean, Vec* inv) {
    RefCall c(k.fwd);
    c.in("X", k.x, xv, x_strides);
    c.in("scale", k.scale, sv);
    if (k.bias) c.in("bias", k.scale, bv);
    c.scalar("epsilon", Scalar::of_double(eps));
    c.out("Y", k.x);
    if (!k.rms) c.out("mean", k.stats);
    c.out("inv_variance", k.stats);
    if (k.fwd == OpKind::BATCHNORM) {
      c.out("next_running_mean", k.stats);
      c.out("next_running_var", k.stats);
    }
    EXPECT_TRUE(c.run().is_good());
    if (mean && !k.rms) *mean = c.output("mean").values();
    if (inv) *inv = c.output("inv_variance").values();
    return dot(w, c.output("Y").values());
  };
  Vec mean, inv;
  fwd(x, sc, bi, &mean, &inv);
  RefCall b(k.bwd);
  b.in("DY", k.x, w);
  b.in("X", k.x, x, x_strides);
  b.in("scale", k.scale, sc);
  if (!k.rms) b.in("mean", k.stats, mean);
  b.in("inv_variance", k.stats, inv);
  if (k.bwd == OpKind::RMSNORM_BACKWARD) b.attr("has_dbias", true);
  b.out("DX", k.x, {});
  b.out("dscale", k.scale);
  if (k.bias) b.out("dbias", k.scale);
  ASSERT_TRUE(b.run().is_good());
  expect_close(b.output("DX").values(), fd_grad(x, [&](const Vec& v) { return fwd(v, sc, bi, nullptr, nullptr); }), 1e-6,
               "DX");
  expect_close(b.output("dscale").values(), fd_grad(sc, [&](const Vec& v) { return fwd(x, v, bi, nullptr, nullptr); }),
               1e-6, "dscale");
  if (k.bias)
    expect_close(b.output("dbias").values(), fd_grad(bi, [&](const Vec& v) { return fwd(x, sc, v, nullptr, nullptr); }),
                 1e-6, "dbias");
}

}  // namespace

TEST(RefNorm, LayerNormBackwardFD) {
  check_norm_backward({OpKind::LAYERNORM, OpKind::LAYERNORM_BACKWARD, {3, 4, 2}, {1, 4, 2}, {3, 1, 1}}, {1, 6, 3});
}
TEST(RefNorm, RmsNormBackwardFDWithBias) {
  check_norm_backward({OpKind::RMSNORM, OpKind::RMSNORM_BACKWARD, {3, 5}, {1, 5}, {3, 1}, true, true}, {});
}
TEST(RefNorm, RmsNormBackwardFDNoBias) {
  check_norm_backward({OpKind::RMSNORM, OpKind::RMSNORM_BACKWARD, {2, 3, 2}, {1, 3, 2}, {2, 1, 1}, true, false}, {});
}
TEST(RefNorm, InstanceNormBackwardFD) {
  check_norm_backward({OpKind::INSTANCENORM, OpKind::INSTANCENORM_BACKWARD, {2, 3, 2, 2}, {1, 3, 1, 1}, {2, 3, 1, 1}},
                      {1, 2, 6, 24});
}
TEST(RefNorm, AdaLayerNormBackwardFD) {
  check_norm_backward({OpKind::ADALAYERNORM, OpKind::ADALAYERNORM_BACKWARD, {2, 3, 4}, {2, 1, 4}, {2, 3, 1}}, {});
}
TEST(RefNorm, BatchNormBackwardFD) {
  check_norm_backward({OpKind::BATCHNORM, OpKind::BATCHNORM_BACKWARD, {3, 2, 2, 2}, {1, 2, 1, 1}, {1, 2, 1, 1}}, {});
}

TEST(RefNorm, RmsNormForwardByHand) {
  RefCall c(OpKind::RMSNORM);
  c.in("X", {1, 2}, {3.0, 4.0});
  c.in("scale", {1, 2}, {1.0, 2.0});
  c.in("bias", {1, 2}, {0.5, 0.0});
  c.scalar("epsilon", Scalar::of_double(0.0));
  c.out("Y", {1, 2});
  c.out("inv_variance", {1, 1});
  ASSERT_TRUE(c.run().is_good());
  const double r = 1.0 / std::sqrt(12.5);
  expect_close(c.output("Y").values(), {3 * r + 0.5, 8 * r}, 1e-14, "Y");
  expect_close(c.output("inv_variance").values(), {r}, 1e-14, "iv");
}

TEST(RefNorm, BatchNormTrainingStatsAndRunning) {
  // X [2, 2, 1, 2]: channel 0 values {1,2,5,6}, channel 1 values {0,0,0,4}.
  Vec x = {1, 2, 0, 0, 5, 6, 0, 4};
  RefCall c(OpKind::BATCHNORM);
  c.in("X", {2, 2, 1, 2}, x);
  c.in("scale", {1, 2, 1, 1}, {1, 1});
  c.in("bias", {1, 2, 1, 1}, {0, 0});
  c.scalar("epsilon", Scalar::of_double(0.0));
  c.scalar("momentum", Scalar::of_double(0.25));
  c.in("prev_running_mean", {1, 2, 1, 1}, {1, 2});
  c.in("prev_running_var", {1, 2, 1, 1}, {3, 4});
  c.out("Y", {2, 2, 1, 2});
  c.out("mean", {1, 2, 1, 1});
  c.out("inv_variance", {1, 2, 1, 1});
  c.out("next_running_mean", {1, 2, 1, 1});
  c.out("next_running_var", {1, 2, 1, 1});
  ASSERT_TRUE(c.run().is_good());
  // channel 0: mean 3.5, biased var (6.25+2.25+2.25+6.25)/4 = 4.25, unbiased 17/3.
  // channel 1: mean 1, biased var (1+1+1+9)/4 = 3, unbiased 4.
  expect_close(c.output("mean").values(), {3.5, 1.0}, 1e-14, "mean");
  expect_close(c.output("inv_variance").values(), {1 / std::sqrt(4.25), 1 / std::sqrt(3.0)}, 1e-14, "iv");
  expect_close(c.output("next_running_mean").values(), {0.75 * 1 + 0.25 * 3.5, 0.75 * 2 + 0.25 * 1}, 1e-14, "rm");
  expect_close(c.output("next_running_var").values(), {0.75 * 3 + 0.25 * 17.0 / 3.0, 0.75 * 4 + 0.25 * 4}, 1e-14, "rv");

  // Inference with those statistics reproduces Y; finalize from sums reproduces the statistics.
  RefCall inf(OpKind::BATCHNORM_INFERENCE);
  inf.in("X", {2, 2, 1, 2}, x);
  inf.in("mean", {1, 2, 1, 1}, c.output("mean").values());
  inf.in("inv_variance", {1, 2, 1, 1}, c.output("inv_variance").values());
  inf.in("scale", {1, 2, 1, 1}, {1, 1});
  inf.in("bias", {1, 2, 1, 1}, {0, 0});
  inf.out("Y", {2, 2, 1, 2});
  ASSERT_TRUE(inf.run().is_good());
  expect_close(inf.output("Y").values(), c.output("Y").values(), 1e-14, "Y inference");

  RefCall fin(OpKind::BN_FINALIZE);
  fin.in("sum", {1, 2, 1, 1}, {14, 4});
  fin.in("sq_sum", {1, 2, 1, 1}, {1 + 4 + 25 + 36, 16});
  fin.in("scale", {1, 2, 1, 1}, {2, 3});
  fin.in("bias", {1, 2, 1, 1}, {1, -1});
  fin.scalar("epsilon", Scalar::of_double(0.0));
  fin.scalar("accum_count", Scalar::of_int64(4));
  fin.scalar("momentum", Scalar::of_double(0.25));
  fin.in("prev_running_mean", {1, 2, 1, 1}, {1, 2});
  fin.in("prev_running_var", {1, 2, 1, 1}, {3, 4});
  for (const char* o : {"eq_scale", "eq_bias", "mean", "inv_variance", "next_running_mean", "next_running_var"})
    fin.out(o, {1, 2, 1, 1});
  ASSERT_TRUE(fin.run().is_good());
  expect_close(fin.output("mean").values(), c.output("mean").values(), 1e-14, "fin mean");
  expect_close(fin.output("inv_variance").values(), c.output("inv_variance").values(), 1e-14, "fin iv");
  expect_close(fin.output("next_running_var").values(), c.output("next_running_var").values(), 1e-14, "fin rv");
  expect_close(fin.output("eq_scale").values(), {2 / std::sqrt(4.25), 3 / std::sqrt(3.0)}, 1e-14, "eq_scale");
  expect_close(fin.output("eq_bias").values(), {1 - 3.5 * 2 / std::sqrt(4.25), -1 - 3 / std::sqrt(3.0)}, 1e-14, "eq_bias");
}

TEST(RefNorm, DbnWeightMatchesBatchNormBackward) {
  Dims xd = {3, 2, 2, 1}, cd = {1, 2, 1, 1};
  Vec x = rand_vec(12, 21), dy = rand_vec(12, 22), sc = rand_vec(2, 23, 0.5, 1.5);
  RefCall f(OpKind::BATCHNORM);
  f.in("X", xd, x);
  f.in("scale", cd, sc);
  f.in("bias", cd, {0, 0});
  f.scalar("epsilon", Scalar::of_double(1e-3));
  f.out("Y", xd);
  f.out("mean", cd);
  f.out("inv_variance", cd);
  ASSERT_TRUE(f.run().is_good());
  Vec mean = f.output("mean").values(), inv = f.output("inv_variance").values();
  RefCall b(OpKind::BATCHNORM_BACKWARD);
  b.in("DY", xd, dy);
  b.in("X", xd, x);
  b.in("scale", cd, sc);
  b.in("mean", cd, mean);
  b.in("inv_variance", cd, inv);
  b.out("DX", xd);
  b.out("dscale", cd);
  b.out("dbias", cd);
  ASSERT_TRUE(b.run().is_good());
  RefCall w(OpKind::DBN_WEIGHT);
  w.in("DY", xd, dy);
  w.in("X", xd, x);
  w.in("mean", cd, mean);
  w.in("inv_variance", cd, inv);
  w.in("scale", cd, sc);
  for (const char* o : {"dscale", "dbias", "eq_scale_dy", "eq_scale_x", "eq_bias"}) w.out(o, cd);
  ASSERT_TRUE(w.run().is_good());
  expect_close(w.output("dscale").values(), b.output("dscale").values(), 1e-12, "dscale");
  expect_close(w.output("dbias").values(), b.output("dbias").values(), 1e-12, "dbias");
  Vec a = w.output("eq_scale_dy").values(), bx = w.output("eq_scale_x").values(), c0 = w.output("eq_bias").values();
  Vec dx(12);
  for (int i = 0; i < 12; ++i) {
    int ch = (i / 2) % 2;
    dx[size_t(i)] = a[size_t(ch)] * dy[size_t(i)] + bx[size_t(ch)] * x[size_t(i)] + c0[size_t(ch)];
  }
  expect_close(dx, b.output("DX").values(), 1e-12, "DX from eq coefficients");
}

TEST(RefNorm, GraphLayerNormOverLastDim) {
  Graph g;
  g.set_io_data_type(DataType::FLOAT).set_intermediate_data_type(DataType::FLOAT).set_compute_data_type(DataType::FLOAT);
  auto mk = [&](const char* name, Dims d) {
    return g.tensor(TensorAttr().set_name(name).set_dim(d).set_stride(row_major_strides(d)).set_data_type(DataType::FLOAT));
  };
  auto X = mk("X", {2, 3, 4}), scale = mk("scale", {1, 1, 4}), bias = mk("bias", {1, 1, 4});
  auto eps = g.tensor(Scalar::of_float(1e-5f));
  auto [Y, mean, iv] = g.layernorm(X, scale, bias, eps);
  Y->set_output(true);
  mean->set_output(true);
  test::RefRunner r(g);
  Vec x = test::random_values(24, 1, -1, 1, DataType::FLOAT), s = test::random_values(4, 2, -1, 1, DataType::FLOAT),
      b = test::random_values(4, 3, -1, 1, DataType::FLOAT);
  r.set(X, x), r.set(scale, s), r.set(bias, b);
  Status st = r.run_all();
  ASSERT_TRUE(st.is_good()) << st.get_message();
  EXPECT_EQ(mean->get_dim(), (Dims{2, 3, 1}));
  Vec want;
  for (int row = 0; row < 6; ++row) {
    Vec v(x.begin() + 4 * row, x.begin() + 4 * row + 4);
    RowStats rs = stats_of(v, double(1e-5f), false);
    for (int j = 0; j < 4; ++j) want.push_back((v[size_t(j)] - rs.mean) * rs.inv * s[size_t(j)] + b[size_t(j)]);
  }
  expect_close(r.get(Y), want, 1e-6, "Y (float)");
}
