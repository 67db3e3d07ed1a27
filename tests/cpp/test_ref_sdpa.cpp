// SPDX-License-Identifier: Apache-2.0
// Reference SDPA kernels: forward against a by-hand case and an explicit-matrix formula written
// independently here; backward against central differences of the forward kernel; layouts (BSHD
// strides, THD ragged, cu_seq_len, paged KV) against the padded BHSD result.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <optional>

#include "common/dtype_convert.h"

#include "opendnn/graph.h"
#include "support/ref_harness.h"
#include "support/ref_harness2.h"

using namespace opendnn;
using namespace opendnn::test2;
using Dims = std::vector<int64_t>;
using Vec = std::vector<double>;

namespace {

struct Prob {
  int64_t B = 1, Hq = 2, Hk = 2, Hv = 2, Sq = 3, Skv = 4, D = 3, Dv = 2;
  Vec q, k, v, dO, bias, sink, block_mask;
  Dims bias_dims, block_mask_dims;
  bool causal = false, bottom_right = false, alibi = false;
  std::optional<int64_t> left, right;
  std::vector<int64_t> seq_q, seq_kv;  // padding mask when non-empty
  double scale = 0.7, p = 0.0;
  int64_t seed = 1234, offset = 7;
  bool bshd = false;  // Q/K/V/O stored as [B,S,H,D]

  void fill(uint64_t s) {
    q = rand_vec(size_t(B * Hq * Sq * D), s + 1);
    k = rand_vec(size_t(B * Hk * Skv * D), s + 2);
    v = rand_vec(size_t(B * Hv * Skv * Dv), s + 3);
    dO = rand_vec(size_t(B * Hq * Sq * Dv), s + 4);
  }
};

Dims strides_of(const Dims& d, bool bshd) {
  if (!bshd) return {};
  // [B,H,S,D] logical stored as [B,S,H,D].
  return {d[1] * d[2] * d[3], d[3], d[1] * d[3], 1};
}

void set_common(RefCall& c, const Prob& p, const Vec& q, const Vec& k, const Vec& v) {
  c.in("Q", {p.B, p.Hq, p.Sq, p.D}, q, strides_of({p.B, p.Hq, p.Sq, p.D}, p.bshd));
  c.in("K", {p.B, p.Hk, p.Skv, p.D}, k, strides_of({p.B, p.Hk, p.Skv, p.D}, p.bshd));
  c.in("V", {p.B, p.Hv, p.Skv, p.Dv}, v, strides_of({p.B, p.Hv, p.Skv, p.Dv}, p.bshd));
  c.attr("attn_scale_value", p.scale);
  if (p.causal) c.attr("right_bound", int64_t(0));
  if (p.right) c.attr("right_bound", *p.right);
  if (p.left) c.attr("left_bound", *p.left);
  if (p.bottom_right) c.attr("diagonal_alignment", "BOTTOM_RIGHT");
  if (p.alibi) c.attr("use_alibi_mask", true);
  if (!p.seq_q.empty()) {
    c.attr("use_padding_mask", true);
    c.in("seq_len_q", {p.B, 1, 1, 1}, Vec(p.seq_q.begin(), p.seq_q.end()), {}, DataType::INT32);
    c.in("seq_len_kv", {p.B, 1, 1, 1}, Vec(p.seq_kv.begin(), p.seq_kv.end()), {}, DataType::INT32);
  }
  if (!p.bias_dims.empty()) c.in("bias", p.bias_dims, p.bias);
  if (!p.sink.empty()) c.in("sink_token", {1, p.Hq, 1, 1}, p.sink);
  if (!p.block_mask.empty() && c.node().kind() == OpKind::SDPA) c.in("block_mask", p.block_mask_dims, p.block_mask, {}, DataType::UINT8);
  if (p.p > 0) {
    c.attr("dropout_probability", p.p);
    c.scalar("seed", Scalar::of_int64(p.seed));
    c.scalar("offset", Scalar::of_int64(p.offset));
  }
}

struct Fwd {
  Vec o, stats, mx, sum_exp;
};

Fwd run_fwd(const Prob& p, const Vec& q, const Vec& k, const Vec& v, const Vec* bias = nullptr, const Vec* sink = nullptr) {
  Prob pp = p;
  if (bias) pp.bias = *bias;
  if (sink) pp.sink = *sink;
  RefCall c(OpKind::SDPA);
  set_common(c, pp, q, k, v);
  c.attr("generate_stats", true);
  c.out("O", {p.B, p.Hq, p.Sq, p.Dv}, strides_of({p.B, p.Hq, p.Sq, p.Dv}, p.bshd));
  c.out("Stats", {p.B, p.Hq, p.Sq, 1});
  c.out("Max", {p.B, p.Hq, p.Sq, 1});
  c.out("Sum_exp", {p.B, p.Hq, p.Sq, 1});
  Status st = c.run();
  EXPECT_TRUE(st.is_good()) << st.message();
  return {c.output("O").values(), c.output("Stats").values(), c.output("Max").values(), c.output("Sum_exp").values()};
}

struct Bwd {
  Vec dq, dk, dv, dbias, dsink;
};

Bwd run_bwd(const Prob& p, const Vec& stats) {
  RefCall c(OpKind::SDPA_BACKWARD);
  set_common(c, p, p.q, p.k, p.v);
  c.in("O", {p.B, p.Hq, p.Sq, p.Dv}, Vec(size_t(p.B * p.Hq * p.Sq * p.Dv), 0.0));
  c.in("dO", {p.B, p.Hq, p.Sq, p.Dv}, p.dO, strides_of({p.B, p.Hq, p.Sq, p.Dv}, p.bshd));
  c.in("Stats", {p.B, p.Hq, p.Sq, 1}, stats);
  c.out("dQ", {p.B, p.Hq, p.Sq, p.D}, strides_of({p.B, p.Hq, p.Sq, p.D}, p.bshd));
  c.out("dK", {p.B, p.Hk, p.Skv, p.D});
  c.out("dV", {p.B, p.Hv, p.Skv, p.Dv});
  if (!p.bias_dims.empty()) c.out("dBias", p.bias_dims);
  if (!p.sink.empty()) c.out("dSink_token", {1, p.Hq, 1, 1});
  Status st = c.run();
  EXPECT_TRUE(st.is_good()) << st.message();
  Bwd r{c.output("dQ").values(), c.output("dK").values(), c.output("dV").values(), {}, {}};
  if (!p.bias_dims.empty()) r.dbias = c.output("dBias").values();
  if (!p.sink.empty()) r.dsink = c.output("dSink_token").values();
  return r;
}

// Backward vs central differences of L = sum(dO * O).
void check_grads(const Prob& p) {
  Fwd f = run_fwd(p, p.q, p.k, p.v);
  Bwd g = run_bwd(p, f.stats);
  auto L = [&](const Vec& q, const Vec& k, const Vec& v, const Vec& bias, const Vec& sink) {
    return dot(p.dO, run_fwd(p, q, k, v, &bias, &sink).o);
  };
  expect_close(g.dq, fd_grad(p.q, [&](const Vec& x) { return L(x, p.k, p.v, p.bias, p.sink); }), 1e-6, "dQ");
  expect_close(g.dk, fd_grad(p.k, [&](const Vec& x) { return L(p.q, x, p.v, p.bias, p.sink); }), 1e-6, "dK");
  expect_close(g.dv, fd_grad(p.v, [&](const Vec& x) { return L(p.q, p.k, x, p.bias, p.sink); }), 1e-6, "dV");
  if (!p.bias_dims.empty())
    expect_close(g.dbias, fd_grad(p.bias, [&](const Vec& x) { return L(p.q, p.k, p.v, x, p.sink); }), 1e-6, "dBias");
  if (!p.sink.empty())
    expect_close(g.dsink, fd_grad(p.sink, [&](const Vec& x) { return L(p.q, p.k, p.v, p.bias, x); }), 1e-6, "dSink");
}

// Explicit-matrix forward written independently: builds the whole S matrix with a mask matrix per
// (b, h), appends the sink as an extra column with a zero value row.
Fwd naive_fwd(const Prob& p) {
  Fwd r;
  r.o.assign(size_t(p.B * p.Hq * p.Sq * p.Dv), 0.0);
  r.stats.assign(size_t(p.B * p.Hq * p.Sq), 0.0);
  const double ninf = -std::numeric_limits<double>::infinity();
  for (int64_t b = 0; b < p.B; ++b)
    for (int64_t h = 0; h < p.Hq; ++h) {
      const int64_t sq = p.seq_q.empty() ? p.Sq : p.seq_q[size_t(b)], skv = p.seq_kv.empty() ? p.Skv : p.seq_kv[size_t(b)];
      const int64_t hk = h * p.Hk / p.Hq, hv = h * p.Hv / p.Hq;
      const int64_t shift = p.bottom_right ? skv - sq : 0;
      const int64_t cols = p.Skv + 1;
      std::vector<Vec> S(size_t(sq), Vec(size_t(cols), ninf));
      for (int64_t i = 0; i < sq; ++i) {
        for (int64_t j = 0; j < skv; ++j) {
          int64_t dist = i + shift - j;  // >= 0: key at or before the (aligned) query
          bool ok = true;
          if ((p.causal || p.right) && -dist > (p.right ? *p.right : 0)) ok = false;
          if (p.left && dist >= *p.left) ok = false;
          if (!ok) continue;
          double s = 0;
          for (int64_t d = 0; d < p.D; ++d)
            s += p.q[size_t(((b * p.Hq + h) * p.Sq + i) * p.D + d)] * p.k[size_t(((b * p.Hk + hk) * p.Skv + j) * p.D + d)];
          s *= p.scale;
          if (!p.bias_dims.empty()) {
            const Dims& bd = p.bias_dims;
            int64_t bi = (((bd[0] == 1 ? 0 : b) * bd[1] + (bd[1] == 1 ? 0 : h)) * bd[2] + (bd[2] == 1 ? 0 : i)) * bd[3] +
                         (bd[3] == 1 ? 0 : j);
            s += p.bias[size_t(bi)];
          }
          if (p.alibi) s -= std::pow(2.0, -8.0 * double(h + 1) / double(p.Hq)) * double(dist);
          S[size_t(i)][size_t(j)] = s;
        }
        if (!p.sink.empty()) S[size_t(i)][size_t(p.Skv)] = p.sink[size_t(h)];
        double m = ninf;
        for (double x : S[size_t(i)]) m = std::max(m, x);
        if (m == ninf) {
          r.stats[size_t((b * p.Hq + h) * p.Sq + i)] = ninf;
          continue;
        }
        double z = 0;
        for (double x : S[size_t(i)]) z += std::exp(x - m);
        r.stats[size_t((b * p.Hq + h) * p.Sq + i)] = m + std::log(z);
        for (int64_t j = 0; j < p.Skv; ++j)
          for (int64_t d = 0; d < p.Dv; ++d)
            r.o[size_t(((b * p.Hq + h) * p.Sq + i) * p.Dv + d)] +=
                std::exp(S[size_t(i)][size_t(j)] - m) / z * p.v[size_t(((b * p.Hv + hv) * p.Skv + j) * p.Dv + d)];
      }
    }
  return r;
}

void expect_stats_close(const Vec& a, const Vec& b, const std::string& what) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isinf(b[i])) EXPECT_EQ(a[i], b[i]) << what << " " << i;
    else EXPECT_NEAR(a[i], b[i], 1e-12 * std::max(1.0, std::fabs(b[i]))) << what << " " << i;
  }
}

}  // namespace

TEST(RefSdpa, ByHand) {
  // One query, two keys: logits 0 and ln 3 -> P = [1/4, 3/4]; O = 4/4 + 3*8/4 = 7; Stats = ln 4.
  RefCall c(OpKind::SDPA);
  c.in("Q", {1, 1, 1, 1}, {1.0});
  c.in("K", {1, 1, 2, 1}, {0.0, std::log(3.0)});
  c.in("V", {1, 1, 2, 1}, {4.0, 8.0});
  c.attr("generate_stats", true);
  c.out("O", {1, 1, 1, 1});
  c.out("Stats", {1, 1, 1, 1});
  ASSERT_TRUE(c.run().is_good());
  EXPECT_NEAR(c.output("O").values()[0], 7.0, 1e-14);
  EXPECT_NEAR(c.output("Stats").values()[0], std::log(4.0), 1e-14);
  // A sink of logit ln 4 joins the denominator only: P = [1/8, 3/8], O = 0.5 + 3 = 3.5, Stats = ln 8.
  RefCall s(OpKind::SDPA);
  s.in("Q", {1, 1, 1, 1}, {1.0});
  s.in("K", {1, 1, 2, 1}, {0.0, std::log(3.0)});
  s.in("V", {1, 1, 2, 1}, {4.0, 8.0});
  s.in("sink_token", {1, 1, 1, 1}, {std::log(4.0)});
  s.out("O", {1, 1, 1, 1});
  s.out("Stats", {1, 1, 1, 1});
  ASSERT_TRUE(s.run().is_good());
  EXPECT_NEAR(s.output("O").values()[0], 3.5, 1e-14);
  EXPECT_NEAR(s.output("Stats").values()[0], std::log(8.0), 1e-14);
}

TEST(RefSdpa, ForwardMatchesExplicitMatrices) {
  struct C {
    const char* name;
    void (*setup)(Prob&);
  };
  const C cases[] = {
      {"plain", [](Prob&) {}},
      {"causal top-left", [](Prob& p) { p.causal = true; }},
      {"causal bottom-right", [](Prob& p) { p.causal = true, p.bottom_right = true; }},
      {"band", [](Prob& p) { p.left = 2, p.right = 1; }},
      {"sliding window br", [](Prob& p) { p.causal = true, p.left = 2, p.bottom_right = true; }},
      {"gqa+alibi", [](Prob& p) { p.Hq = 4, p.Hk = 2, p.Hv = 1, p.causal = true, p.alibi = true; }},
      {"bias+sink", [](Prob& p) {
         p.bias_dims = {1, p.Hq, 1, p.Skv}, p.bias = rand_vec(size_t(p.Hq * p.Skv), 9);
         p.sink = {0.3, -0.2};
       }},
      {"padding fully masked", [](Prob& p) {
         p.B = 2, p.seq_q = {3, 3}, p.seq_kv = {4, 1}, p.causal = true, p.bottom_right = true;
       }},
      {"bshd strides", [](Prob& p) { p.bshd = true, p.causal = true; }},
      {"d_v > d_qk", [](Prob& p) { p.D = 2, p.Dv = 5, p.causal = true; }},
      {"head dim 320", [](Prob& p) { p.D = 320, p.Dv = 320, p.scale = 0.05; }},
  };
  for (const C& cs : cases) {
    Prob p;
    cs.setup(p);
    p.fill(3);
    Fwd got = run_fwd(p, p.q, p.k, p.v);
    Fwd want = naive_fwd(p);
    // Padded rows are 0 in both; fully masked rows have O = 0 and Stats = -inf.
    expect_close(got.o, want.o, 1e-12, std::string(cs.name) + " O");
    expect_stats_close(got.stats, want.stats, std::string(cs.name) + " Stats");
    for (size_t i = 0; i < got.stats.size(); ++i) {
      if (std::isfinite(got.stats[i]) && got.sum_exp[i] > 0) {
        EXPECT_NEAR(got.mx[i] + std::log(got.sum_exp[i]), got.stats[i], 1e-12) << cs.name;
      }
    }
  }
}

TEST(RefSdpa, BackwardFDPlain) {
  Prob p;
  p.fill(10);
  check_grads(p);
}

TEST(RefSdpa, BackwardFDWideValueAndLargeHeadDim) {
  Prob p;
  p.D = 2, p.Dv = 6, p.Hq = 4, p.Hk = 2, p.Hv = 1;
  p.fill(14);
  check_grads(p);
  Prob big;
  big.Hq = big.Hk = big.Hv = 1, big.Sq = 2, big.Skv = 3, big.D = 320, big.Dv = 264, big.scale = 0.05;
  big.fill(15);
  check_grads(big);
}

TEST(RefSdpa, BackwardFDGqaCausalBandBiasSinkAlibi) {
  Prob p;
  p.Hq = 4, p.Hk = 2, p.Hv = 1, p.Sq = 3, p.Skv = 5;
  p.causal = true, p.bottom_right = true, p.left = 3, p.alibi = true, p.bshd = true;
  p.bias_dims = {1, 4, 3, 1};
  p.bias = rand_vec(12, 31);
  p.sink = {0.1, -0.3, 0.5, 0.0};
  p.fill(11);
  check_grads(p);
}

TEST(RefSdpa, BackwardFDPaddingFullyMasked) {
  Prob p;
  p.B = 2, p.Hq = 1, p.Hk = 1, p.Hv = 1, p.Sq = 3, p.Skv = 3;
  p.seq_q = {3, 2}, p.seq_kv = {1, 3}, p.causal = true, p.bottom_right = true;
  p.bias_dims = {2, 1, 3, 3};
  p.bias = rand_vec(18, 41);
  p.fill(12);
  check_grads(p);
}

// A query row with no visible key, whatever hides it (a -inf bias, a zero kv length, a bottom-right band
// above the diagonal, a zero block_mask tile), has O = 0 and Stats = -inf in the forward and zero gradients
// in the backward (no NaN anywhere); the gradients elsewhere still match central differences.
TEST(RefSdpa, FullyMaskedRowsGiveZeroGradients) {
  const double ninf = -std::numeric_limits<double>::infinity();
  struct C {
    const char* name;
    void (*setup)(Prob&);
    int64_t b, h, row;  // one fully masked row
  };
  const C cases[] = {
      {"bias -inf",
       [](Prob& p) {
         p.bias_dims = {1, p.Hq, p.Sq, p.Skv};
         p.bias = rand_vec(size_t(p.Hq * p.Sq * p.Skv), 61);
         for (int64_t j = 0; j < p.Skv; ++j) p.bias[size_t(1 * p.Skv + j)] = -std::numeric_limits<double>::infinity();
       },
       0, 0, 1},
      {"seq_len_kv 0", [](Prob& p) { p.B = 2, p.seq_q = {3, 3}, p.seq_kv = {4, 0}; }, 1, 0, 0},
      {"bottom-right band above the keys", [](Prob& p) { p.B = 2, p.seq_q = {3, 3}, p.seq_kv = {4, 1}, p.causal = true, p.bottom_right = true; }, 1, 1, 0},
      {"causal band with a -inf bias on the diagonal",
       [](Prob& p) {
         p.causal = true;
         p.bias_dims = {1, 1, p.Sq, p.Skv};
         p.bias = rand_vec(size_t(p.Sq * p.Skv), 62);
         p.bias[0] = -std::numeric_limits<double>::infinity();  // row 0 sees key 0 only
       },
       0, 1, 0},
      {"block_mask zero tile", [](Prob& p) { p.block_mask_dims = {1, p.Hq, 1, 1}, p.block_mask = {0.0, 1.0}; }, 0, 0, 2},
  };
  for (const C& cs : cases) {
    SCOPED_TRACE(cs.name);
    Prob p;
    cs.setup(p);
    p.fill(60);
    Fwd f = run_fwd(p, p.q, p.k, p.v);
    const size_t r = size_t((cs.b * p.Hq + cs.h) * p.Sq + cs.row);
    EXPECT_EQ(f.stats[r], ninf);
    for (int64_t d = 0; d < p.Dv; ++d) EXPECT_EQ(f.o[r * size_t(p.Dv) + size_t(d)], 0.0);
    Bwd g = run_bwd(p, f.stats);
    for (const Vec* v : {&g.dq, &g.dk, &g.dv, &g.dbias})
      for (double x : *v) ASSERT_TRUE(std::isfinite(x));
    for (int64_t d = 0; d < p.D; ++d) EXPECT_EQ(g.dq[r * size_t(p.D) + size_t(d)], 0.0);
    if (p.block_mask.empty()) check_grads(p);  // the backward has no block_mask: only its Stats say the row is empty
  }
}

TEST(RefSdpa, BackwardFDDropoutPhilox) {
  Prob p;
  p.p = 0.3;
  p.Sq = 4, p.Skv = 5;
  p.causal = true;
  p.fill(13);
  check_grads(p);
  // The mask is the same between calls, and a user mask equal to RNG_dump reproduces O.
  RefCall c(OpKind::SDPA);
  set_common(c, p, p.q, p.k, p.v);
  c.out("O", {p.B, p.Hq, p.Sq, p.Dv});
  c.out("Stats", {p.B, p.Hq, p.Sq, 1});
  c.out("RNG_dump", {p.B, p.Hq, p.Sq, p.Skv});
  ASSERT_TRUE(c.run().is_good());
  Vec dump = c.output("RNG_dump").values();
  int kept = 0;
  for (double x : dump) kept += x != 0;
  EXPECT_GT(kept, 0);
  EXPECT_LT(kept, int(dump.size()));
  Prob pm = p;
  pm.p = 0;
  RefCall u(OpKind::SDPA);
  set_common(u, pm, p.q, p.k, p.v);
  u.in("dropout_mask", {p.B, p.Hq, p.Sq, p.Skv}, dump);
  u.scalar("dropout_scale", Scalar::of_double(1.0 / (1.0 - p.p)));
  u.out("O", {p.B, p.Hq, p.Sq, p.Dv});
  u.out("Stats", {p.B, p.Hq, p.Sq, 1});
  ASSERT_TRUE(u.run().is_good());
  expect_close(u.output("O").values(), c.output("O").values(), 1e-14, "user mask == philox mask");
}

// The backward dumps the same generated mask as the forward (RNG_dump on both), and an fp8 forward with a
// sink and Max/Sum_exp outputs equals the fp16 forward on the dequantised inputs.
TEST(RefSdpa, BackwardRngDumpAndFp8SinkOutputs) {
  Prob p;
  p.p = 0.3, p.Sq = 4, p.Skv = 5;
  p.fill(17);
  RefCall f(OpKind::SDPA);
  set_common(f, p, p.q, p.k, p.v);
  f.out("O", {p.B, p.Hq, p.Sq, p.Dv});
  f.out("Stats", {p.B, p.Hq, p.Sq, 1});
  f.out("RNG_dump", {p.B, p.Hq, p.Sq, p.Skv});
  ASSERT_TRUE(f.run().is_good());
  RefCall b(OpKind::SDPA_BACKWARD);
  set_common(b, p, p.q, p.k, p.v);
  b.in("O", {p.B, p.Hq, p.Sq, p.Dv}, f.output("O").values());
  b.in("dO", {p.B, p.Hq, p.Sq, p.Dv}, p.dO);
  b.in("Stats", {p.B, p.Hq, p.Sq, 1}, f.output("Stats").values());
  b.out("dQ", {p.B, p.Hq, p.Sq, p.D});
  b.out("dK", {p.B, p.Hk, p.Skv, p.D});
  b.out("dV", {p.B, p.Hv, p.Skv, p.Dv});
  b.out("RNG_dump", {p.B, p.Hq, p.Sq, p.Skv});
  ASSERT_TRUE(b.run().is_good());
  expect_close(b.output("RNG_dump").values(), f.output("RNG_dump").values(), 0.0, "backward RNG_dump");

  Prob q;
  q.sink = {0.2, -0.4};
  q.fill(18);
  Fwd want = run_fwd(q, q.q, q.k, q.v);
  RefCall c(OpKind::SDPA_FP8);
  c.in("Q", {q.B, q.Hq, q.Sq, q.D}, q.q);
  c.in("K", {q.B, q.Hk, q.Skv, q.D}, q.k);
  c.in("V", {q.B, q.Hv, q.Skv, q.Dv}, q.v);
  for (const char* port : {"descale_q", "descale_k", "descale_v", "descale_s", "scale_s", "scale_o"})
    c.scalar(port, Scalar::of_double(1.0));
  c.in("sink_token", {1, q.Hq, 1, 1}, q.sink);
  c.attr("attn_scale_value", q.scale);
  c.out("O", {q.B, q.Hq, q.Sq, q.Dv});
  c.out("Stats", {q.B, q.Hq, q.Sq, 1});
  c.out("Amax_S", {1, 1, 1, 1});
  c.out("Amax_O", {1, 1, 1, 1});
  c.out("Max", {q.B, q.Hq, q.Sq, 1});
  c.out("Sum_exp", {q.B, q.Hq, q.Sq, 1});
  ASSERT_TRUE(c.run().is_good());
  expect_close(c.output("O").values(), want.o, 1e-13, "fp8 O with sink");
  expect_close(c.output("Max").values(), want.mx, 1e-13, "fp8 Max");
  expect_close(c.output("Sum_exp").values(), want.sum_exp, 1e-13, "fp8 Sum_exp");
}

TEST(RefSdpa, RaggedAndCuSeqLenMatchPadded) {
  // Two sequences (q lengths 2, 3; kv lengths 3, 2), H = 2, packed THD buffers [T, H, D].
  Prob p;
  p.B = 2, p.Hq = 2, p.Hk = 2, p.Hv = 2, p.Sq = 3, p.Skv = 3, p.D = 2, p.Dv = 2;
  p.seq_q = {2, 3}, p.seq_kv = {3, 2}, p.causal = true, p.bottom_right = true;
  p.fill(21);
  Fwd padded = run_fwd(p, p.q, p.k, p.v);
  Bwd gpad = run_bwd(p, padded.stats);
  // Pack [B,H,S,D] -> [T,H,D] for the valid rows.
  auto pack = [&](const Vec& x, const std::vector<int64_t>& lens, int64_t H, int64_t S, int64_t Dd) {
    Vec r;
    for (int64_t b = 0; b < p.B; ++b)
      for (int64_t s = 0; s < lens[size_t(b)]; ++s)
        for (int64_t h = 0; h < H; ++h)
          for (int64_t d = 0; d < Dd; ++d) r.push_back(x[size_t(((b * H + h) * S + s) * Dd + d)]);
    return r;
  };
  Vec qp = pack(p.q, p.seq_q, p.Hq, p.Sq, p.D), kp = pack(p.k, p.seq_kv, p.Hk, p.Skv, p.D),
      vp = pack(p.v, p.seq_kv, p.Hv, p.Skv, p.Dv), dop = pack(p.dO, p.seq_q, p.Hq, p.Sq, p.Dv);
  for (int mode = 0; mode < 2; ++mode) {  // 0: ragged offsets, 1: cu_seq_len
    auto bind = [&](RefCall& c, const char* port, bool out, const Vec& data, int64_t H, int64_t Dd, int64_t T,
                    const std::vector<int64_t>& lens) {
      // The logical [B,H,S,D] view over a packed [T,H,D] buffer: batch stride unused, S stride H*D.
      Dims dims = {p.B, H, 3, Dd}, strides = {0, Dd, H * Dd, 1};
      if (out) c.out(port, dims, strides);
      else c.in(port, dims, {}, strides);
      Buf& b = out ? c.output(port) : c.input(port);
      b.storage.assign(size_t(T * H * Dd), 0);
      for (size_t i = 0; i < data.size(); ++i) store_element(DataType::DOUBLE, b.storage.data(), int64_t(i), data[i]);
      if (mode == 0) c.ragged(port, out, {0.0, double(lens[0] * H * Dd), double((lens[0] + lens[1]) * H * Dd)});
    };
    auto add_seq = [&](RefCall& c) {
      if (mode == 1) {
        c.in("cu_seq_len_q", {p.B + 1, 1, 1, 1}, {0, 2, 5}, {}, DataType::INT32);
        c.in("cu_seq_len_kv", {p.B + 1, 1, 1, 1}, {0, 3, 5}, {}, DataType::INT32);
      } else {
        c.attr("use_padding_mask", true);
        c.in("seq_len_q", {p.B, 1, 1, 1}, {2, 3}, {}, DataType::INT32);
        c.in("seq_len_kv", {p.B, 1, 1, 1}, {3, 2}, {}, DataType::INT32);
      }
      c.attr("right_bound", int64_t(0));
      c.attr("diagonal_alignment", "BOTTOM_RIGHT");
      c.attr("attn_scale_value", p.scale);
    };
    RefCall f(OpKind::SDPA);
    bind(f, "Q", false, qp, p.Hq, p.D, 5, p.seq_q);
    bind(f, "K", false, kp, p.Hk, p.D, 5, p.seq_kv);
    bind(f, "V", false, vp, p.Hv, p.Dv, 5, p.seq_kv);
    add_seq(f);
    bind(f, "O", true, Vec(size_t(5 * p.Hq * p.Dv), 0.0), p.Hq, p.Dv, 5, p.seq_q);
    f.out("Stats", {p.B, p.Hq, p.Sq, 1});
    ASSERT_TRUE(f.run().is_good());
    Vec o_packed;
    for (int64_t i = 0; i < 5 * p.Hq * p.Dv; ++i) o_packed.push_back(load_element(DataType::DOUBLE, f.output("O").storage.data(), i));
    expect_close(o_packed, pack(padded.o, p.seq_q, p.Hq, p.Sq, p.Dv), 1e-13, "packed O");
    expect_close(f.output("Stats").values(), padded.stats, 1e-13, "Stats");

    RefCall g(OpKind::SDPA_BACKWARD);
    bind(g, "Q", false, qp, p.Hq, p.D, 5, p.seq_q);
    bind(g, "K", false, kp, p.Hk, p.D, 5, p.seq_kv);
    bind(g, "V", false, vp, p.Hv, p.Dv, 5, p.seq_kv);
    bind(g, "O", false, o_packed, p.Hq, p.Dv, 5, p.seq_q);
    bind(g, "dO", false, dop, p.Hq, p.Dv, 5, p.seq_q);
    g.in("Stats", {p.B, p.Hq, p.Sq, 1}, padded.stats);
    add_seq(g);
    bind(g, "dQ", true, Vec(size_t(5 * p.Hq * p.D), 0.0), p.Hq, p.D, 5, p.seq_q);
    bind(g, "dK", true, Vec(size_t(5 * p.Hk * p.D), 0.0), p.Hk, p.D, 5, p.seq_kv);
    bind(g, "dV", true, Vec(size_t(5 * p.Hv * p.Dv), 0.0), p.Hv, p.Dv, 5, p.seq_kv);
    ASSERT_TRUE(g.run().is_good());
    auto raw = [&](const char* port, int64_t n) {
      Vec r;
      for (int64_t i = 0; i < n; ++i) r.push_back(load_element(DataType::DOUBLE, g.output(port).storage.data(), i));
      return r;
    };
    expect_close(raw("dQ", 5 * p.Hq * p.D), pack(gpad.dq, p.seq_q, p.Hq, p.Sq, p.D), 1e-13, "packed dQ");
    expect_close(raw("dK", 5 * p.Hk * p.D), pack(gpad.dk, p.seq_kv, p.Hk, p.Skv, p.D), 1e-13, "packed dK");
    expect_close(raw("dV", 5 * p.Hv * p.Dv), pack(gpad.dv, p.seq_kv, p.Hv, p.Skv, p.Dv), 1e-13, "packed dV");
  }
}

TEST(RefSdpa, PagedKvMatchesContiguous) {
  Prob p;
  p.B = 2, p.Hq = 2, p.Hk = 1, p.Hv = 1, p.Sq = 2, p.Skv = 5, p.D = 2, p.Dv = 3;
  p.seq_q = {2, 1}, p.seq_kv = {5, 3};
  p.fill(31);
  Fwd want = run_fwd(p, p.q, p.k, p.v);
  // Pages of 2 rows; table[b][page] -> block; blocks shuffled.
  const int64_t bs = 2, npages = 3, nblocks = 7;
  std::vector<std::vector<int64_t>> table = {{4, 0, 6}, {2, 5, 1}};
  Vec kc(size_t(nblocks * bs * p.D), 99.0), vc(size_t(nblocks * bs * p.Dv), 99.0);
  for (int64_t b = 0; b < p.B; ++b)
    for (int64_t s = 0; s < p.Skv; ++s) {
      int64_t blk = table[size_t(b)][size_t(s / bs)];
      for (int64_t d = 0; d < p.D; ++d) kc[size_t((blk * bs + s % bs) * p.D + d)] = p.k[size_t((b * p.Skv + s) * p.D + d)];
      for (int64_t d = 0; d < p.Dv; ++d) vc[size_t((blk * bs + s % bs) * p.Dv + d)] = p.v[size_t((b * p.Skv + s) * p.Dv + d)];
    }
  Vec tab;
  for (auto& r : table)
    for (int64_t x : r) tab.push_back(double(x));
  RefCall c(OpKind::SDPA);
  Prob pc = p;
  set_common(c, pc, p.q, p.k, p.v);
  c.in("K", {nblocks, 1, bs, p.D}, kc);
  c.in("V", {nblocks, 1, bs, p.Dv}, vc);
  c.in("page_table_k", {p.B, 1, npages, 1}, tab, {}, DataType::INT32);
  c.in("page_table_v", {p.B, 1, npages, 1}, tab, {}, DataType::INT32);
  c.attr("max_seq_len_kv", p.Skv);
  c.out("O", {p.B, p.Hq, p.Sq, p.Dv});
  c.out("Stats", {p.B, p.Hq, p.Sq, 1});
  ASSERT_TRUE(c.run().is_good());
  expect_close(c.output("O").values(), want.o, 1e-13, "paged O");
  expect_close(c.output("Stats").values(), want.stats, 1e-13, "paged Stats");
}

TEST(RefSdpa, Fp8DescalesScalesAndAmax) {
  Prob p;
  p.fill(41);
  const double dq = 0.5, dk = 2.0, dv = 0.25, so = 4.0;
  auto scaled = [](const Vec& x, double s) {
    Vec r = x;
    for (auto& e : r) e *= s;
    return r;
  };
  Fwd want = run_fwd(p, scaled(p.q, dq), scaled(p.k, dk), scaled(p.v, dv));
  RefCall c(OpKind::SDPA_FP8);
  c.in("Q", {p.B, p.Hq, p.Sq, p.D}, p.q);
  c.in("K", {p.B, p.Hk, p.Skv, p.D}, p.k);
  c.in("V", {p.B, p.Hv, p.Skv, p.Dv}, p.v);
  c.scalar("descale_q", Scalar::of_double(dq));
  c.scalar("descale_k", Scalar::of_double(dk));
  c.scalar("descale_v", Scalar::of_double(dv));
  c.scalar("descale_s", Scalar::of_double(1.0));
  c.scalar("scale_s", Scalar::of_double(1.0));
  c.scalar("scale_o", Scalar::of_double(so));
  c.attr("attn_scale_value", p.scale);
  c.out("O", {p.B, p.Hq, p.Sq, p.Dv});
  c.out("Stats", {p.B, p.Hq, p.Sq, 1});
  c.out("Amax_S", {1, 1, 1, 1});
  c.out("Amax_O", {1, 1, 1, 1});
  ASSERT_TRUE(c.run().is_good());
  expect_close(c.output("O").values(), scaled(want.o, so), 1e-13, "fp8 O");
  double amax_o = 0;
  for (double x : want.o) amax_o = std::max(amax_o, std::fabs(x));
  EXPECT_NEAR(c.output("Amax_O").values()[0], amax_o, 1e-14);
  double amax_s = 0;
  for (size_t i = 0; i < want.stats.size(); ++i) amax_s = std::max(amax_s, std::exp(want.mx[i] - want.stats[i]));
  EXPECT_NEAR(c.output("Amax_S").values()[0], amax_s, 1e-13);
}

TEST(RefSdpa, BackwardThreadCountIndependent) {
  Prob p;
  p.B = 2, p.Hq = 4, p.Hk = 1, p.Hv = 2, p.Sq = 5, p.Skv = 6;
  p.bias_dims = {1, 1, 5, 6};
  p.bias = rand_vec(30, 51);
  p.fill(50);
  Fwd f = run_fwd(p, p.q, p.k, p.v);
  Bwd a = run_bwd(p, f.stats);
  set_threads(2);
  Bwd b = run_bwd(p, f.stats);
  set_threads(1);
  EXPECT_EQ(a.dq, b.dq);
  EXPECT_EQ(a.dk, b.dk);
  EXPECT_EQ(a.dv, b.dv);
  EXPECT_EQ(a.dbias, b.dbias);
}

TEST(RefSdpa, BlockMaskHidesTiles) {
  Prob p;
  p.Hq = p.Hk = p.Hv = 1, p.Sq = 2, p.Skv = 130, p.D = 2, p.Dv = 2;
  p.fill(61);
  RefCall c(OpKind::SDPA);
  set_common(c, p, p.q, p.k, p.v);
  c.in("block_mask", {1, 1, 1, 2}, {1, 0}, {}, DataType::UINT8);
  c.out("O", {1, 1, 2, 2});
  c.out("Stats", {1, 1, 2, 1});
  ASSERT_TRUE(c.run().is_good());
  Prob t = p;
  t.Skv = 128;
  Vec k(p.k.begin(), p.k.begin() + 128 * 2), v(p.v.begin(), p.v.begin() + 128 * 2);
  Fwd want = run_fwd(t, p.q, k, v);
  expect_close(c.output("O").values(), want.o, 1e-13, "O");
  expect_close(c.output("Stats").values(), want.stats, 1e-13, "Stats");
}

TEST(RefSdpa, AttnScaleTensorEqualsValue) {
  Prob p;
  p.fill(62);
  Fwd want = run_fwd(p, p.q, p.k, p.v);
  RefCall c(OpKind::SDPA);
  set_common(c, p, p.q, p.k, p.v);
  c.attr("attn_scale_value", AttrValue());
  c.in("attn_scale", {1, 1, 1, 1}, {p.scale});
  c.out("O", {p.B, p.Hq, p.Sq, p.Dv});
  ASSERT_TRUE(c.run().is_good());
  expect_close(c.output("O").values(), want.o, 0, "O");
}

TEST(RefSdpa, Fp8BackwardDescalesScalesAndAmax) {
  Prob p;
  p.Hq = 2, p.Hk = 1, p.Hv = 1;
  p.causal = true;
  p.fill(63);
  const double dq = 0.5, dk = 2.0, dv = 0.25, ddo = 3.0, sdq = 2.0, sdk = 0.5, sdv = 4.0;
  auto scaled = [](const Vec& x, double s) {
    Vec r = x;
    for (auto& e : r) e *= s;
    return r;
  };
  Prob ps = p;
  ps.q = scaled(p.q, dq), ps.k = scaled(p.k, dk), ps.v = scaled(p.v, dv), ps.dO = scaled(p.dO, ddo);
  Fwd f = run_fwd(ps, ps.q, ps.k, ps.v);
  Bwd want = run_bwd(ps, f.stats);
  RefCall c(OpKind::SDPA_FP8_BACKWARD);
  c.in("Q", {p.B, p.Hq, p.Sq, p.D}, p.q);
  c.in("K", {p.B, p.Hk, p.Skv, p.D}, p.k);
  c.in("V", {p.B, p.Hv, p.Skv, p.Dv}, p.v);
  c.in("O", {p.B, p.Hq, p.Sq, p.Dv}, f.o);
  c.in("dO", {p.B, p.Hq, p.Sq, p.Dv}, p.dO);
  c.in("Stats", {p.B, p.Hq, p.Sq, 1}, f.stats);
  const std::pair<const char*, double> sc[] = {{"descale_q", dq},  {"descale_k", dk},  {"descale_v", dv},
                                               {"descale_o", 1.0}, {"descale_dO", ddo}, {"descale_s", 1.0},
                                               {"descale_dP", 1.0}, {"scale_s", 1.0},   {"scale_dQ", sdq},
                                               {"scale_dK", sdk},  {"scale_dV", sdv},   {"scale_dP", 1.0}};
  for (auto& [name, v] : sc) c.scalar(name, Scalar::of_double(v));
  c.attr("attn_scale_value", p.scale).attr("right_bound", int64_t(0));
  c.out("dQ", {p.B, p.Hq, p.Sq, p.D});
  c.out("dK", {p.B, p.Hk, p.Skv, p.D});
  c.out("dV", {p.B, p.Hv, p.Skv, p.Dv});
  for (const char* a : {"Amax_dQ", "Amax_dK", "Amax_dV", "Amax_dP"}) c.out(a, {1, 1, 1, 1});
  ASSERT_TRUE(c.run().is_good());
  expect_close(c.output("dQ").values(), scaled(want.dq, sdq), 1e-13, "dQ");
  expect_close(c.output("dK").values(), scaled(want.dk, sdk), 1e-13, "dK");
  expect_close(c.output("dV").values(), scaled(want.dv, sdv), 1e-13, "dV");
  auto amax = [](const Vec& x) {
    double m = 0;
    for (double e : x) m = std::max(m, std::fabs(e));
    return m;
  };
  EXPECT_NEAR(c.output("Amax_dQ").values()[0], amax(want.dq), 1e-14);
  EXPECT_NEAR(c.output("Amax_dK").values()[0], amax(want.dk), 1e-14);
  EXPECT_NEAR(c.output("Amax_dV").values()[0], amax(want.dv), 1e-14);
  EXPECT_GT(c.output("Amax_dP").values()[0], 0.0);
}

TEST(RefSdpa, ZeroSizeOptionalOutputsAreSkipped) {
  Prob p;
  p.fill(64);
  Fwd f = run_fwd(p, p.q, p.k, p.v);
  RefCall c(OpKind::SDPA_BACKWARD);
  set_common(c, p, p.q, p.k, p.v);
  c.in("O", {p.B, p.Hq, p.Sq, p.Dv}, f.o);
  c.in("dO", {p.B, p.Hq, p.Sq, p.Dv}, p.dO);
  c.in("Stats", {p.B, p.Hq, p.Sq, 1}, f.stats);
  c.out("dQ", {p.B, p.Hq, p.Sq, p.D});
  c.out("dK", {p.B, p.Hk, p.Skv, p.D});
  c.out("dV", {p.B, p.Hv, p.Skv, p.Dv});
  c.out("dBias", {0, 0, 0, 0});
  c.out("dSink_token", {0, 0, 0, 0});
  ASSERT_TRUE(c.run().is_good());
  expect_close(c.output("dQ").values(), run_bwd(p, f.stats).dq, 0, "dQ");
}

// Through a validated graph (the rules' dims, strides and types) with the graph-level harness.
TEST(RefSdpa, GraphHalfMatchesDoubleKernel) {
  const int64_t B = 1, H = 2, S = 4, D = 8;
  Graph g;
  g.set_io_data_type(DataType::HALF).set_intermediate_data_type(DataType::FLOAT).set_compute_data_type(DataType::FLOAT);
  auto mk = [&](const char* name) {
    return g.tensor(TensorAttr().set_name(name).set_dim({B, H, S, D}).set_stride({H * S * D, S * D, D, 1}).set_data_type(DataType::HALF));
  };
  auto Q = mk("Q"), K = mk("K"), V = mk("V");
  NodeAttrs a;
  a.set("generate_stats", true).set("attn_scale_value", 0.35).set("right_bound", int64_t(0));
  auto [O, Stats, Mx, Se, Dump] = g.sdpa(Q, K, V, a);
  O->set_output(true);
  Stats->set_output(true);
  test::RefRunner r(g);
  Vec q = test::random_values(size_t(B * H * S * D), 1, -1, 1, DataType::HALF);
  Vec k = test::random_values(size_t(B * H * S * D), 2, -1, 1, DataType::HALF);
  Vec v = test::random_values(size_t(B * H * S * D), 3, -1, 1, DataType::HALF);
  r.set(Q, q), r.set(K, k), r.set(V, v);
  Status st = r.run_all();
  ASSERT_TRUE(st.is_good()) << st.get_message();
  Prob p;
  p.B = B, p.Hq = p.Hk = p.Hv = H, p.Sq = p.Skv = S, p.D = p.Dv = D, p.scale = 0.35, p.causal = true;
  Fwd want = run_fwd(p, q, k, v);
  expect_close(r.get(O), want.o, 2e-3, "O (half)");
  expect_close(r.get(Stats), want.stats, 1e-6, "Stats (float)");
}

namespace {

// A score_mod that adds w * (col - row) from the scores' own indices (and, in the backward, the identity
// score_mod_bprop) equals an explicit relative-position bias: forward and backward against the double
// kernel with that bias.
TEST(RefSdpa, ScoreModRelativeBiasEqualsExplicitBias) {
  const int64_t B = 1, H = 2, S = 5, D = 8;
  const double w = 0.25;  // exact in half
  Prob p;
  p.B = B, p.Hq = p.Hk = p.Hv = H, p.Sq = p.Skv = S, p.D = p.Dv = D, p.scale = 0.4;
  p.fill(70);
  auto to_half = [](Vec& v) {
    for (double& x : v) {
      uint16_t b = 0;
      store_element(DataType::HALF, &b, 0, x);
      x = load_element(DataType::HALF, &b, 0);
    }
  };
  for (Vec* v : {&p.q, &p.k, &p.v, &p.dO}) to_half(*v);
  p.bias_dims = {1, 1, S, S};
  for (int64_t i = 0; i < S; ++i)
    for (int64_t j = 0; j < S; ++j) p.bias.push_back(w * double(j - i));
  Fwd want = run_fwd(p, p.q, p.k, p.v);
  Bwd want_g = run_bwd(p, want.stats);

  auto relative = [&](Graph& g, Node& owner, const TensorPtr& weight, bool bwd) {
    size_t first = g.nodes().size();
    auto s = std::make_shared<TensorAttr>();
    s->set_is_virtual(true);
    auto row = g.gen_index(s, NodeAttrs().set("axis", int64_t(2)));
    auto col = g.gen_index(s, NodeAttrs().set("axis", int64_t(3)));
    ASSERT_TRUE(g.attach_subgraph(owner, "score_mod", s, g.add(s, g.mul(g.sub(col, row), weight)), first).is_good());
    if (!bwd) return;
    first = g.nodes().size();
    auto ds = std::make_shared<TensorAttr>();
    ds->set_is_virtual(true);
    ASSERT_TRUE(g.attach_subgraph(owner, "score_mod_bprop", ds, g.identity(ds), first).is_good());
  };
  auto tensor = [](Graph& g, const char* name, Dims d) {
    return g.tensor(TensorAttr().set_name(name).set_dim(d).set_stride(row_major_strides(d)).set_data_type(DataType::HALF));
  };
  {
    Graph g;
    g.set_io_data_type(DataType::HALF).set_intermediate_data_type(DataType::FLOAT).set_compute_data_type(DataType::FLOAT);
    auto Q = tensor(g, "Q", {B, H, S, D}), K = tensor(g, "K", {B, H, S, D}), V = tensor(g, "V", {B, H, S, D});
    auto W = tensor(g, "w", {1, 1, 1, 1});
    auto o = g.sdpa(Q, K, V, NodeAttrs().set("generate_stats", true).set("attn_scale_value", p.scale));
    relative(g, *g.mutable_nodes().front(), W, false);
    o[0]->set_output(true);
    o[1]->set_output(true);
    test::RefRunner r(g);
    r.set(Q, p.q), r.set(K, p.k), r.set(V, p.v), r.set(W, {w});
    Status st = r.run_all();
    ASSERT_TRUE(st.is_good()) << st.to_string();
    expect_close(r.get(o[0]), want.o, 2e-3, "score_mod O");
    expect_close(r.get(o[1]), want.stats, 1e-6, "score_mod Stats");
  }
  Graph g;
  g.set_io_data_type(DataType::HALF).set_intermediate_data_type(DataType::FLOAT).set_compute_data_type(DataType::FLOAT);
  auto Q = tensor(g, "Q", {B, H, S, D}), K = tensor(g, "K", {B, H, S, D}), V = tensor(g, "V", {B, H, S, D});
  auto O = tensor(g, "O", {B, H, S, D}), dO = tensor(g, "dO", {B, H, S, D}), W = tensor(g, "w", {1, 1, 1, 1});
  auto St = g.tensor(TensorAttr().set_name("St").set_dim({B, H, S, 1}).set_stride({H * S, S, 1, 1}).set_data_type(DataType::FLOAT));
  auto d = g.sdpa_backward(Q, K, V, O, dO, St, NodeAttrs().set("attn_scale_value", p.scale));
  relative(g, *g.mutable_nodes().front(), W, true);
  for (int i = 0; i < 3; ++i) d[size_t(i)]->set_output(true);
  test::RefRunner r(g);
  r.set(Q, p.q), r.set(K, p.k), r.set(V, p.v), r.set(O, want.o), r.set(dO, p.dO), r.set(St, want.stats), r.set(W, {w});
  Status st = r.run_all();
  ASSERT_TRUE(st.is_good()) << st.to_string();
  expect_close(r.get(d[0]), want_g.dq, 2e-3, "score_mod dQ");
  expect_close(r.get(d[1]), want_g.dk, 2e-3, "score_mod dK");
  expect_close(r.get(d[2]), want_g.dv, 2e-3, "score_mod dV");
}

}  // namespace
