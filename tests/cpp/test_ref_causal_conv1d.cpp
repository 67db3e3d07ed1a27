// SPDX-License-Identifier: Apache-2.0
// Reference causal conv1d kernels: forward by hand, against a lag-sum formula, streaming through
// final/initial states, both layouts; backward against central differences.
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

struct ConvProb {
  int64_t B = 2, C = 3, L = 5, Kw = 3;
  bool nwh = false, silu = false, has_bias = true, has_init = true;
  Vec x, w, bias, init;  // x logical [B, C, L] (NCW order) regardless of layout
  void fill(uint64_t s) {
    x = rand_vec(size_t(B * C * L), s + 1);
    w = rand_vec(size_t(C * Kw), s + 2);
    bias = rand_vec(size_t(C), s + 3);
    init = rand_vec(size_t(B * C * (Kw - 1)), s + 4);
  }
  Dims xdims() const { return nwh ? Dims{B, L, C} : Dims{B, C, L}; }
  // Logical NCW values -> the layout's row-major order.
  Vec to_layout(const Vec& v) const {
    if (!nwh) return v;
    Vec r(v.size());
    for (int64_t b = 0; b < B; ++b)
      for (int64_t c = 0; c < C; ++c)
        for (int64_t t = 0; t < L; ++t) r[size_t((b * L + t) * C + c)] = v[size_t((b * C + c) * L + t)];
    return r;
  }
  Vec from_layout(const Vec& v) const {
    if (!nwh) return v;
    Vec r(v.size());
    for (int64_t b = 0; b < B; ++b)
      for (int64_t c = 0; c < C; ++c)
        for (int64_t t = 0; t < L; ++t) r[size_t((b * C + c) * L + t)] = v[size_t((b * L + t) * C + c)];
    return r;
  }
};

void bind_conv(RefCall& c, const ConvProb& p, const Vec& x, const Vec& w, const Vec& bias, const Vec& init) {
  c.in("X", p.xdims(), p.to_layout(x));
  c.in("W", {p.C, p.Kw}, w);
  if (p.has_bias) c.in("bias", {p.C}, bias);
  if (p.has_init) c.in("initial_states", {p.B, p.C, p.Kw - 1}, init);
  c.attr("layout", p.nwh ? "NWH" : "NCW");
  c.attr("activation", p.silu ? "SILU" : "NONE");
}

struct ConvOut {
  Vec y, fin;
};
ConvOut fwd(const ConvProb& p, const Vec& x, const Vec& w, const Vec& bias, const Vec& init) {
  RefCall c(OpKind::CAUSAL_CONV1D);
  bind_conv(c, p, x, w, bias, init);
  c.out("Y", p.xdims());
  c.out("final_states", {p.B, p.C, p.Kw - 1});
  EXPECT_TRUE(c.run().is_good());
  return {p.from_layout(c.output("Y").values()), c.output("final_states").values()};
}

// y[t] = bias + sum over lags l of W[Kw-1-l] * x[t-l], reading the initial state for t-l < 0.
ConvOut lag_sum(const ConvProb& p) {
  ConvOut r{Vec(size_t(p.B * p.C * p.L)), Vec(size_t(p.B * p.C * (p.Kw - 1)))};
  for (int64_t b = 0; b < p.B; ++b)
    for (int64_t c = 0; c < p.C; ++c) {
      auto xat = [&](int64_t t) {
        if (t >= 0) return p.x[size_t((b * p.C + c) * p.L + t)];
        return p.has_init ? p.init[size_t((b * p.C + c) * (p.Kw - 1) + (p.Kw - 1 + t))] : 0.0;
      };
      for (int64_t t = 0; t < p.L; ++t) {
        double s = p.has_bias ? p.bias[size_t(c)] : 0.0;
        for (int64_t l = 0; l < p.Kw; ++l) s += p.w[size_t(c * p.Kw + p.Kw - 1 - l)] * xat(t - l);
        r.y[size_t((b * p.C + c) * p.L + t)] = p.silu ? s / (1 + std::exp(-s)) : s;
      }
      for (int64_t m = 0; m < p.Kw - 1; ++m) r.fin[size_t((b * p.C + c) * (p.Kw - 1) + m)] = xat(p.L - (p.Kw - 1) + m);
    }
  return r;
}

}  // namespace

TEST(RefCausalConv1d, ByHand) {
  ConvProb p;
  p.B = 1, p.C = 1, p.L = 3, p.Kw = 3, p.has_init = false;
  p.x = {1, 2, 3}, p.w = {1, 2, 3}, p.bias = {0.5};
  ConvOut r = fwd(p, p.x, p.w, p.bias, {});
  expect_close(r.y, {3.5, 8.5, 14.5}, 1e-15, "Y");
  expect_close(r.fin, {2, 3}, 0, "final_states");
}

TEST(RefCausalConv1d, ForwardMatchesLagSumBothLayouts) {
  for (bool nwh : {false, true})
    for (bool silu : {false, true})
      for (bool init : {false, true}) {
        ConvProb p;
        p.nwh = nwh, p.silu = silu, p.has_init = init, p.Kw = 4;
        p.fill(7);
        ConvOut got = fwd(p, p.x, p.w, p.bias, p.init), want = lag_sum(p);
        expect_close(got.y, want.y, 1e-14, "Y");
        expect_close(got.fin, want.fin, 0, "final_states");
      }
  // L shorter than the window: final_states reach into initial_states.
  ConvProb s;
  s.L = 1, s.Kw = 4;
  s.fill(8);
  ConvOut got = fwd(s, s.x, s.w, s.bias, s.init), want = lag_sum(s);
  expect_close(got.y, want.y, 1e-14, "short Y");
  expect_close(got.fin, want.fin, 0, "short final_states");
}

TEST(RefCausalConv1d, StreamingThroughStates) {
  ConvProb whole;
  whole.B = 1, whole.C = 2, whole.L = 6, whole.Kw = 3, whole.has_init = false;
  whole.fill(9);
  ConvOut all = fwd(whole, whole.x, whole.w, whole.bias, {});
  ConvProb half = whole;
  half.L = 3;
  Vec x1, x2;
  for (int64_t c = 0; c < 2; ++c)
    for (int64_t t = 0; t < 6; ++t) (t < 3 ? x1 : x2).push_back(whole.x[size_t(c * 6 + t)]);
  ConvOut a = fwd(half, x1, whole.w, whole.bias, {});
  half.has_init = true;
  ConvOut b = fwd(half, x2, whole.w, whole.bias, a.fin);
  Vec y;
  for (int64_t c = 0; c < 2; ++c) {
    for (int64_t t = 0; t < 3; ++t) y.push_back(a.y[size_t(c * 3 + t)]);
    for (int64_t t = 0; t < 3; ++t) y.push_back(b.y[size_t(c * 3 + t)]);
  }
  expect_close(y, all.y, 1e-14, "streamed Y");
  expect_close(b.fin, all.fin, 0, "streamed final_states");
}

TEST(RefCausalConv1d, BackwardFD) {
  for (bool nwh : {false, true})
    for (bool silu : {false, true}) {
      ConvProb p;
      p.nwh = nwh, p.silu = silu, p.Kw = 3, p.L = 4;
      p.fill(nwh * 2 + silu);
      Vec dy = rand_vec(size_t(p.B * p.C * p.L), 71), dfin = rand_vec(size_t(p.B * p.C * (p.Kw - 1)), 72);
      RefCall b(OpKind::CAUSAL_CONV1D_BACKWARD);
      bind_conv(b, p, p.x, p.w, p.bias, p.init);
      b.in("DY", p.xdims(), p.to_layout(dy));
      b.in("d_final_states", {p.B, p.C, p.Kw - 1}, dfin);
      b.out("DX", p.xdims());
      b.out("DW", {p.C, p.Kw});
      b.out("dbias", {p.C});
      b.out("d_initial_states", {p.B, p.C, p.Kw - 1});
      ASSERT_TRUE(b.run().is_good());
      auto L = [&](const Vec& x, const Vec& w, const Vec& bias, const Vec& init) {
        ConvOut o = fwd(p, x, w, bias, init);
        return dot(dy, o.y) + dot(dfin, o.fin);
      };
      const std::string tag = std::string(nwh ? "NWH" : "NCW") + (silu ? " silu " : " ");
      expect_close(p.from_layout(b.output("DX").values()),
                   fd_grad(p.x, [&](const Vec& v) { return L(v, p.w, p.bias, p.init); }), 1e-6, tag + "DX");
      expect_close(b.output("DW").values(), fd_grad(p.w, [&](const Vec& v) { return L(p.x, v, p.bias, p.init); }), 1e-6,
                   tag + "DW");
      expect_close(b.output("dbias").values(), fd_grad(p.bias, [&](const Vec& v) { return L(p.x, p.w, v, p.init); }),
                   1e-6, tag + "dbias");
      expect_close(b.output("d_initial_states").values(),
                   fd_grad(p.init, [&](const Vec& v) { return L(p.x, p.w, p.bias, v); }), 1e-6, tag + "d_initial_states");
    }
}

TEST(RefCausalConv1d, GraphNwhSilu) {
  ConvProb p;
  p.nwh = true, p.silu = true, p.has_init = false;
  p.fill(21);
  for (Vec* v : {&p.x, &p.w, &p.bias})
    for (double& e : *v) e = double(float(e));
  Graph g;
  g.set_io_data_type(DataType::FLOAT).set_intermediate_data_type(DataType::FLOAT).set_compute_data_type(DataType::FLOAT);
  auto mk = [&](const char* name, Dims d) {
    return g.tensor(TensorAttr().set_name(name).set_dim(d).set_stride(row_major_strides(d)).set_data_type(DataType::FLOAT));
  };
  auto X = mk("X", p.xdims()), W = mk("W", {p.C, p.Kw}), bias = mk("bias", {p.C});
  NodeAttrs a;
  a.set("layout", "NWH").set("activation", "SILU").input("bias", bias);
  auto [Y, fin] = g.causal_conv1d(X, W, a);
  Y->set_output(true);
  test::RefRunner r(g);
  r.set(X, p.to_layout(p.x)), r.set(W, p.w), r.set(bias, p.bias);
  Status st = r.run_all();
  ASSERT_TRUE(st.is_good()) << st.get_message();
  expect_close(p.from_layout(r.get(Y)), lag_sum(p).y, 1e-6, "Y (float)");
}
