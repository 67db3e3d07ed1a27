// SPDX-License-Identifier: Apache-2.0
// Reference RNG, RESAMPLE, BLOCK_SCALE_(DE)QUANTIZE, MOE_GROUPED_MATMUL(_BWD) and ROPE(_BWD) kernels.
#include <gtest/gtest.h>

#include <cmath>

#include "common/philox.h"
#include "support/ref_harness.h"

using namespace opendnn;

namespace {
TensorPtr t(Graph& g, std::vector<int64_t> dims, DataType dt = DataType::FLOAT, std::vector<int64_t> strides = {}) {
  if (strides.empty()) strides = row_major_strides(dims);
  return g.tensor(TensorAttr().set_dim(std::move(dims)).set_stride(std::move(strides)).set_data_type(dt));
}
#define RUN_OK(r)                                 \
  do {                                            \
    Status s_ = (r).run_all();                    \
    ASSERT_TRUE(s_.is_good()) << s_.get_message(); \
  } while (0)
}  // namespace

TEST(RefMisc, RngFollowsThePhiloxMapping) {
  Graph g;
  auto seed = g.tensor(Scalar::of_int64(0x1234567890abcdefll));
  auto off = g.tensor(Scalar::of_int64(6));
  auto u = g.rng(NodeAttrs().input("seed", seed).input("offset", off).set("distribution", "UNIFORM").set("dims", {3, 5}).set("uniform_min", -2.0).set("uniform_max", 2.0));
  u->set_output(true).set_data_type(DataType::DOUBLE);
  auto b = g.rng(NodeAttrs().set("seed_value", 7).set("dims", {4000}).set("bernoulli_probability", 0.25));
  b->set_output(true).set_data_type(DataType::FLOAT);
  test::RefRunner r(g);
  RUN_OK(r);
  auto uv = r.get(u);
  for (size_t i = 0; i < uv.size(); ++i)
    EXPECT_EQ(uv[i], -2.0 + 4.0 * philox_uniform(philox_word(0x1234567890abcdefull, 0, 6 + i))) << i;
  double ones = 0;
  for (double v : r.get(b)) ones += v;
  EXPECT_NEAR(ones / 4000, 0.25, 0.03);
}

TEST(RefMisc, RngNormalMoments) {
  Graph g;
  auto y = g.rng(NodeAttrs().set("seed_value", 3).set("dims", {20000}).set("distribution", "NORMAL").set("normal_mean", 1.0).set("normal_stddev", 2.0));
  y->set_output(true).set_data_type(DataType::FLOAT);
  test::RefRunner r(g);
  RUN_OK(r);
  double s = 0, s2 = 0;
  auto v = r.get(y);
  for (double x : v) {
    s += x;
    s2 += x * x;
  }
  double mean = s / double(v.size()), var = s2 / double(v.size()) - mean * mean;
  EXPECT_NEAR(mean, 1.0, 0.05);
  EXPECT_NEAR(var, 4.0, 0.15);
}

TEST(RefMisc, Pooling) {
  Graph g;
  auto x = t(g, {1, 1, 3, 3});
  NodeAttrs pa;
  pa.set("window", {2, 2}).set("stride", {1, 1}).set("pre_padding", {1, 1}).set("post_padding", {0, 0});
  auto [ymax, idx] = g.resample(x, NodeAttrs(pa).set("resample_mode", "MAXPOOL").set("generate_index", true).set("padding_mode", "NEG_INF_PAD"));
  ymax->set_output(true);
  idx->set_output(true);
  auto [yin, i2] = g.resample(x, NodeAttrs(pa).set("resample_mode", "AVGPOOL_INCLUDE_PADDING"));
  yin->set_output(true);
  auto [yex, i3] = g.resample(x, NodeAttrs(pa).set("resample_mode", "AVGPOOL_EXCLUDE_PADDING"));
  yex->set_output(true);
  test::RefRunner r(g);
  r.set(x, {1, 2, 3, 4, 5, 6, 7, 8, 9});
  RUN_OK(r);
  EXPECT_EQ(ymax->get_dim(), (std::vector<int64_t>{1, 1, 3, 3}));
  EXPECT_EQ(r.get(ymax), (std::vector<double>{1, 2, 3, 4, 5, 6, 7, 8, 9}));
  EXPECT_EQ(r.get(idx), (std::vector<double>{3, 3, 3, 3, 3, 3, 3, 3, 3}));
  EXPECT_EQ(r.get(yin), (std::vector<double>{0.25, 0.75, 1.25, 1.25, 3, 4, 2.75, 6, 7}));
  EXPECT_EQ(r.get(yex), (std::vector<double>{1, 1.5, 2.5, 2.5, 3, 4, 5.5, 6, 7}));
}

TEST(RefMisc, NearestAndBilinear) {
  Graph g;
  auto x = t(g, {1, 1, 2});
  auto [yn, i1] = g.resample(x, NodeAttrs().set("resample_mode", "NEAREST"));
  yn->set_dim({1, 1, 4}).set_output(true);
  auto [yb, i2] = g.resample(x, NodeAttrs().set("resample_mode", "BILINEAR"));
  yb->set_dim({1, 1, 4}).set_output(true);
  test::RefRunner r(g);
  r.set(x, {0, 4});
  RUN_OK(r);
  EXPECT_EQ(r.get(yn), (std::vector<double>{0, 0, 4, 4}));
  // src = (o + 0.5)/2 - 0.5 = -0.25 (->0), 0.25, 0.75, 1.25 (clamped neighbour)
  EXPECT_EQ(r.get(yb), (std::vector<double>{0, 1, 3, 4}));
}

TEST(RefMisc, BlockScaleQuantizeMx) {
  Graph g;
  auto x = t(g, {2, 4});
  auto [y, sc] = g.block_scale_quantize(x, NodeAttrs().set("block_size", 2));
  y->set_output(true);
  sc->set_output(true);
  test::RefRunner r(g);
  // blocks: {1, -3} amax 3 -> 3/448 -> 2^-7; {0, 0} -> 1; {1000, 10} -> 2^2 (1000/448=2.23 -> 4);
  // {0.001, 0.002} -> 0.002/448 -> 2^-17
  r.set(x, {1, -3, 0, 0, 1000, 10, 0.001, 0.002});
  RUN_OK(r);
  EXPECT_EQ(y->get_data_type(), DataType::FP8_E4M3);
  EXPECT_EQ(sc->get_dim(), (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(r.get(sc), (std::vector<double>{std::ldexp(1.0, -7), 1, 4, std::ldexp(1.0, -17)}));
  auto yv = r.get(y);
  EXPECT_EQ(yv[0], 128);
  EXPECT_EQ(yv[1], -384);
  EXPECT_EQ(yv[4], 256);  // 250 -> 256 in e4m3 (step 16 between 128 and 256)
  EXPECT_EQ(yv[5], 2.5);
  EXPECT_EQ(yv[6], round_to(DataType::FP8_E4M3, 0.001 * 131072));
  // Dequantize restores within fp8 precision.
  Graph g2;
  auto q = t(g2, {2, 4}, DataType::FP8_E4M3), s = t(g2, {2, 2}, DataType::FP8_E8M0);
  auto d = g2.block_scale_dequantize(q, s, NodeAttrs().set("block_size", 2));
  d->set_output(true);
  test::RefRunner r2(g2);
  r2.set(q, yv);
  r2.set(s, r.get(sc));
  RUN_OK(r2);
  EXPECT_ALL_NEAR(r2.get(d), (std::vector<double>{1, -3, 0, 0, 1000, 10, 0.001, 0.002}), 0, 0.07);
}

TEST(RefMisc, BlockScaleQuantizeTransposedFp4) {
  Graph g;
  auto x = t(g, {2, 2});
  auto [y, sc] = g.block_scale_quantize(x, NodeAttrs().set("block_size", 2).set("transpose", true));
  y->set_output(true).set_data_type(DataType::FP4_E2M1);
  sc->set_output(true).set_data_type(DataType::FLOAT);
  test::RefRunner r(g);
  r.set(x, {6, 3, -1.5, 0.75});
  RUN_OK(r);
  EXPECT_EQ(sc->get_dim(), (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(r.get(sc), (std::vector<double>{1, 0.25}));
  // Y[j][i] = q(X[i][j]): rows of X scaled by 1 and 0.25: {6, 3}, {-6, 3}
  EXPECT_EQ(r.get(y), (std::vector<double>{6, -6, 3, 3}));
}

namespace {
void moe_case(const char* mode) {
  const int64_t T = 3, K = 4, N = 5, E = 2, top_k = 2;
  const bool gather = std::string(mode) == "GATHER", scatter = std::string(mode) == "SCATTER";
  const int64_t R = gather ? T * top_k : 6;
  const int64_t TT = gather ? T : R;
  Graph g;
  auto token = t(g, {TT, K}), weight = t(g, {E, K, N});
  auto fto = t(g, {E}, DataType::INT32);
  NodeAttrs a;
  a.set("mode", mode).set("top_k", top_k);
  TensorPtr ti, tk;
  std::vector<double> tiv, tkv;
  if (gather) {
    ti = t(g, {R}, DataType::INT64);
    tiv = {2, 0, 1, 1, 0, 2};
    a.input("token_index", ti);
  }
  if (scatter) {
    ti = t(g, {R}, DataType::INT32);
    tk = t(g, {R}, DataType::INT32);
    tiv = {1, 0, 2, 2, 1, 0};
    tkv = {0, 1, 1, 0, 1, 0};
    a.input("token_index", ti).input("token_ks", tk);
  }
  auto out = g.moe_grouped_matmul(token, weight, fto, a);
  out->set_output(true).set_data_type(DataType::DOUBLE);
  auto dout = t(g, {R, N});
  NodeAttrs ab = a;
  auto [dtok, dw] = g.moe_grouped_matmul_bwd(dout, token, fto, ab.input("weight", weight));
  dtok->set_output(true).set_data_type(DataType::DOUBLE);
  dw->set_output(true).set_data_type(DataType::DOUBLE);
  test::RefRunner r(g);
  auto tv = test::random_values(size_t(TT * K), 5, -1, 1, DataType::FLOAT);
  auto wv = test::random_values(size_t(E * K * N), 6, -1, 1, DataType::FLOAT);
  auto dv = test::random_values(size_t(R * N), 7, -1, 1, DataType::FLOAT);
  std::vector<double> fv = {1, 4};  // row 0 belongs to no expert
  r.set(token, tv);
  r.set(weight, wv);
  r.set(fto, fv);
  r.set(dout, dv);
  if (ti) r.set(ti, tiv);
  if (tk) r.set(tk, tkv);
  RUN_OK(r);
  std::vector<double> want(size_t(R * N), 0.0), wdt(size_t(TT * K), 0.0), wdw(size_t(E * K * N), 0.0);
  for (int64_t row = 1; row < R; ++row) {
    int64_t e = row < 4 ? 0 : 1;
    int64_t ir = gather ? int64_t(tiv[size_t(row)]) : row;
    int64_t orow = scatter ? int64_t(tiv[size_t(row)]) * top_k + int64_t(tkv[size_t(row)]) : row;
    for (int64_t j = 0; j < N; ++j)
      for (int64_t k = 0; k < K; ++k) {
        double w = wv[size_t((e * K + k) * N + j)];
        want[size_t(orow * N + j)] += tv[size_t(ir * K + k)] * w;
        wdt[size_t(ir * K + k)] += dv[size_t(orow * N + j)] * w;
        wdw[size_t((e * K + k) * N + j)] += tv[size_t(ir * K + k)] * dv[size_t(orow * N + j)];
      }
  }
  EXPECT_ALL_NEAR(r.get(out), want, 1e-14, 1e-13);
  EXPECT_ALL_NEAR(r.get(dtok), wdt, 1e-14, 1e-13);
  EXPECT_ALL_NEAR(r.get(dw), wdw, 1e-14, 1e-13);
}
}  // namespace

TEST(RefMisc, MoeGroupedMatmul) {
  moe_case("NONE");
  moe_case("GATHER");
  moe_case("SCATTER");
}

TEST(RefMisc, Rope) {
  for (bool inter : {false, true}) {
    Graph g;
    auto x = t(g, {1, 2, 6});  // S=2, D=6, rotary_dim 4
    auto c = t(g, {1, 2, 2}), s = t(g, {1, 2, 2});
    auto y = g.rope(x, c, s, NodeAttrs().set("rotary_dim", 4).set("interleaved", inter));
    y->set_output(true).set_data_type(DataType::DOUBLE);
    auto back = g.rope_backward(y, c, s, NodeAttrs().set("rotary_dim", 4).set("interleaved", inter));
    back->set_output(true).set_data_type(DataType::DOUBLE);
    test::RefRunner r(g);
    std::vector<double> xv = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
    r.set(x, xv);
    r.set(c, {0, 1, 0.5, 0.5});
    r.set(s, {1, 0, 0.5, -0.5});
    RUN_OK(r);
    auto yv = r.get(y);
    if (!inter) {
      // s=0 pairs (0,2) angle (c0,s0)=(0,1): (1,3) -> (-3, 1); (1,3) pair (2,4) angle (1,0): unchanged.
      EXPECT_EQ(std::vector<double>(yv.begin(), yv.begin() + 6), (std::vector<double>{-3, 2, 1, 4, 5, 6}));
    } else {
      // pairs (0,1) angle (0,1): (1,2) -> (-2, 1); (2,3) angle (1,0): unchanged.
      EXPECT_EQ(std::vector<double>(yv.begin(), yv.begin() + 6), (std::vector<double>{-2, 1, 3, 4, 5, 6}));
    }
    // At s=0 (cos, sin) is a true rotation, so the backward (rotation by -angle) inverts it.
    auto bv = r.get(back);
    for (int i = 0; i < 6; ++i) EXPECT_DOUBLE_EQ(bv[size_t(i)], xv[size_t(i)]) << i;
  }
}
