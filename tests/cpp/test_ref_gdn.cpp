// SPDX-License-Identifier: Apache-2.0
// Reference GDN kernels: the token recurrence against the chunked WY form (gated_delta_net.md §1.3)
// computed here in double, state plumbing (checkpoints, state_indices, overwrite), and the backward
// against central differences of the forward kernel.
#include <gtest/gtest.h>

#include <cmath>

#include "opendnn/graph.h"
#include "support/ref_harness.h"
#include "support/ref_harness2.h"

using namespace opendnn;
using namespace opendnn::test2;
using Dims = std::vector<int64_t>;
using Vec = std::vector<double>;
using Mat = std::vector<Vec>;

namespace {

struct GdnProb {
  int64_t H = 1, HK = 1, HV = 2, K = 3, V = 2;
  std::vector<int64_t> cu = {0, 5, 5, 12, 15};
  Vec q, k, v, g, beta, init, alog, dtb;
  bool l2 = false, sig = false, neg = false, safe = false, linear = false, has_init = true, has_dtb = true;
  double scale = 0.0;  // 0: default
  Dims q_strides;      // empty: packed
  int64_t T() const { return cu.back(); }
  int64_t N() const { return int64_t(cu.size()) - 1; }
  int64_t HO() const { return std::max(H, HV); }
  void fill(uint64_t s) {
    const int64_t T = this->T(), HO = this->HO();
    q = rand_vec(size_t(T * H * K), s + 1);
    k = rand_vec(size_t(T * HK * K), s + 2);
    v = rand_vec(size_t(T * HV * V), s + 3);
    if (safe) g = rand_vec(size_t(T * HO), s + 4, -1.0, 1.0);
    else if (linear) g = rand_vec(size_t(T * HO), s + 4, 0.6, 0.98);
    else g = rand_vec(size_t(T * HO), s + 4, -0.5, -0.02);
    beta = sig ? rand_vec(size_t(T * HO), s + 5, -2, 2) : rand_vec(size_t(T * HO), s + 5, 0.1, 0.9);
    init = rand_vec(size_t(N() * HO * V * K), s + 6, -0.5, 0.5);
    alog = rand_vec(size_t(HO), s + 7, -1.0, 0.5);
    dtb = rand_vec(size_t(HO), s + 8, -0.5, 0.5);
  }
};

void bind_gdn(RefCall& c, const GdnProb& p, const Vec& q, const Vec& k, const Vec& v, const Vec& g, const Vec& b,
          const Vec& init, const Vec& alog, const Vec& dtb) {
  const int64_t T = p.T(), HO = p.HO();
  c.in("q", {T, p.H, p.K}, q, p.q_strides);
  c.in("k", {T, p.HK, p.K}, k);
  c.in("v", {T, p.HV, p.V}, v);
  c.in("g", {T, HO}, g);
  c.in("beta", {T, HO}, b);
  c.in("cu_seqlens", {p.N() + 1}, Vec(p.cu.begin(), p.cu.end()), {}, DataType::INT32);
  if (p.has_init) c.in("initial_state", {p.N(), HO, p.V, p.K}, init);
  if (p.safe) {
    c.in("a_log", {HO}, alog);
    if (p.has_dtb) c.in("dt_bias", {HO}, dtb);
  }
  if (p.scale != 0) c.attr("scale", p.scale);
  c.attr("use_qk_l2norm", p.l2).attr("use_beta_sigmoid", p.sig).attr("allow_neg_eigval", p.neg);
  c.attr("safe_gate", p.safe);
  if (p.linear) c.attr("gate_domain", "linear");
}

struct Out {
  Vec o, fin;
};

Out run_fwd(const GdnProb& p, const Vec& q, const Vec& k, const Vec& v, const Vec& g, const Vec& b, const Vec& init,
            const Vec& alog, const Vec& dtb) {
  RefCall c(OpKind::GDN);
  bind_gdn(c, p, q, k, v, g, b, init, alog, dtb);
  c.attr("output_final_state", true);
  c.out("O", {p.T(), p.HO(), p.V});
  c.out("final_state", {p.N(), p.HO(), p.V, p.K});
  Status st = c.run();
  EXPECT_TRUE(st.is_good()) << st.message();
  return {c.output("O").values(), c.output("final_state").values()};
}

// The chunked WY form of §1.3 with chunk size C, k-first state S (K x V), on effective inputs
// (already l2-normalised q/k, log gates, final beta) laid out per head.
Out chunked(const GdnProb& p, int64_t C) {
  const int64_t T = p.T(), HO = p.HO(), K = p.K, V = p.V;
  const double scale = p.scale != 0 ? p.scale : 1.0 / std::sqrt(double(K));
  Out r{Vec(size_t(T * HO * V), 0.0), Vec(size_t(p.N() * HO * V * K), 0.0)};
  auto l2 = [&](Vec x) {
    if (!p.l2) return x;
    double s = 0;
    for (double e : x) s += e * e;
    for (double& e : x) e /= std::sqrt(s + 1e-6);
    return x;
  };
  for (int64_t n = 0; n < p.N(); ++n)
    for (int64_t j = 0; j < HO; ++j) {
      const int64_t hq = j / (HO / p.H), hk = j / (HO / p.HK), hv = j / (HO / p.HV);
      Mat S(static_cast<size_t>(K), Vec(static_cast<size_t>(V), 0.0));
      if (p.has_init)
        for (int64_t a = 0; a < V; ++a)
          for (int64_t b = 0; b < K; ++b) S[size_t(b)][size_t(a)] = p.init[size_t(((n * HO + j) * V + a) * K + b)];
      for (int64_t c0 = p.cu[size_t(n)]; c0 < p.cu[size_t(n) + 1]; c0 += C) {
        const int64_t c = std::min(C, p.cu[size_t(n) + 1] - c0);
        Mat Q, Kc, Vc;
        Vec gam, bet;
        double cum = 0;
        for (int64_t r0 = 0; r0 < c; ++r0) {
          const int64_t t = c0 + r0;
          Vec qv(static_cast<size_t>(K)), kv(static_cast<size_t>(K)), vv(static_cast<size_t>(V));
          for (int64_t d = 0; d < K; ++d) qv[size_t(d)] = p.q[size_t((t * p.H + hq) * K + d)];
          for (int64_t d = 0; d < K; ++d) kv[size_t(d)] = p.k[size_t((t * p.HK + hk) * K + d)];
          for (int64_t d = 0; d < V; ++d) vv[size_t(d)] = p.v[size_t((t * p.HV + hv) * V + d)];
          Q.push_back(l2(qv)), Kc.push_back(l2(kv)), Vc.push_back(vv);
          double graw = p.g[size_t(t * HO + j)], glog;
          if (p.safe)
            glog = -std::exp(p.alog[size_t(j)]) * std::log1p(std::exp(graw + (p.has_dtb ? p.dtb[size_t(j)] : 0.0)));
          else glog = p.linear ? std::log(graw) : graw;
          cum += glog;
          gam.push_back(cum);
          double b = p.beta[size_t(t * HO + j)];
          if (p.sig) b = 1 / (1 + std::exp(-b));
          if (p.neg) b *= 2;
          bet.push_back(b);
        }
        auto Gm = [&](int64_t i, int64_t jj) { return i >= jj ? std::exp(gam[size_t(i)] - gam[size_t(jj)]) : 0.0; };
        auto kdot = [&](const Vec& x, const Vec& y) {
          double s = 0;
          for (size_t i = 0; i < x.size(); ++i) s += x[i] * y[i];
          return s;
        };
        // Solve (I + StrictLower(diag(beta) K K^T . Gamma)) X = B row by row (forward substitution).
        auto solve = [&](Mat B) {
          for (int64_t i = 0; i < c; ++i)
            for (int64_t jj = 0; jj < i; ++jj) {
              const double l = bet[size_t(i)] * kdot(Kc[size_t(i)], Kc[size_t(jj)]) * Gm(i, jj);
              for (size_t d = 0; d < B[size_t(i)].size(); ++d) B[size_t(i)][d] -= l * B[size_t(jj)][d];
            }
          return B;
        };
        Mat Bw(static_cast<size_t>(c)), Bu(static_cast<size_t>(c));
        for (int64_t i = 0; i < c; ++i) {
          for (int64_t d = 0; d < K; ++d) Bw[size_t(i)].push_back(bet[size_t(i)] * std::exp(gam[size_t(i)]) * Kc[size_t(i)][size_t(d)]);
          for (int64_t d = 0; d < V; ++d) Bu[size_t(i)].push_back(bet[size_t(i)] * Vc[size_t(i)][size_t(d)]);
        }
        Mat W = solve(Bw), U = solve(Bu);
        Mat Vn(static_cast<size_t>(c), Vec(static_cast<size_t>(V)));
        for (int64_t i = 0; i < c; ++i)
          for (int64_t a = 0; a < V; ++a) {
            double ws = 0;
            for (int64_t b = 0; b < K; ++b) ws += W[size_t(i)][size_t(b)] * S[size_t(b)][size_t(a)];
            Vn[size_t(i)][size_t(a)] = U[size_t(i)][size_t(a)] - ws;
          }
        for (int64_t i = 0; i < c; ++i)
          for (int64_t a = 0; a < V; ++a) {
            double qs = 0;
            for (int64_t b = 0; b < K; ++b) qs += Q[size_t(i)][size_t(b)] * S[size_t(b)][size_t(a)];
            double o = std::exp(gam[size_t(i)]) * qs;
            for (int64_t jj = 0; jj <= i; ++jj) o += kdot(Q[size_t(i)], Kc[size_t(jj)]) * Gm(i, jj) * Vn[size_t(jj)][size_t(a)];
            r.o[size_t(((c0 + i) * HO + j) * V + a)] = scale * o;
          }
        const double gl = gam[size_t(c - 1)];
        for (int64_t b = 0; b < K; ++b)
          for (int64_t a = 0; a < V; ++a) {
            double s = std::exp(gl) * S[size_t(b)][size_t(a)];
            for (int64_t i = 0; i < c; ++i) s += std::exp(gl - gam[size_t(i)]) * Kc[size_t(i)][size_t(b)] * Vn[size_t(i)][size_t(a)];
            S[size_t(b)][size_t(a)] = s;
          }
      }
      for (int64_t a = 0; a < V; ++a)
        for (int64_t b = 0; b < K; ++b) r.fin[size_t(((n * HO + j) * V + a) * K + b)] = S[size_t(b)][size_t(a)];
    }
  return r;
}

void check_forward(const GdnProb& p) {
  Out got = run_fwd(p, p.q, p.k, p.v, p.g, p.beta, p.init, p.alog, p.dtb);
  for (int64_t C : {1, 3, 4}) {
    Out want = chunked(p, C);
    expect_close(got.o, want.o, 1e-12, "O, chunk " + std::to_string(C));
    expect_close(got.fin, want.fin, 1e-12, "final state, chunk " + std::to_string(C));
  }
}

}  // namespace

TEST(RefGdn, ForwardMatchesChunkedGva) {
  GdnProb p;  // H = 1, HV = 2, sequences 5, 0, 7, 3
  p.fill(1);
  check_forward(p);
}

TEST(RefGdn, ForwardMatchesChunkedReverseGqaAllOptions) {
  GdnProb p;
  p.H = 2, p.HK = 2, p.HV = 1, p.K = 4, p.V = 3;
  p.cu = {0, 0, 6, 11};
  p.l2 = p.sig = p.neg = p.safe = true;
  p.scale = 0.3;
  p.q_strides = {2 * 5, 5, 1};  // padded head stride
  p.fill(2);
  check_forward(p);
}

TEST(RefGdn, LinearGateDomainEqualsLogDomain) {
  GdnProb p;
  p.linear = true;
  p.fill(3);
  Out lin = run_fwd(p, p.q, p.k, p.v, p.g, p.beta, p.init, p.alog, p.dtb);
  GdnProb l = p;
  l.linear = false;
  Vec lg = p.g;
  for (double& x : lg) x = std::log(x);
  Out lo = run_fwd(l, p.q, p.k, p.v, lg, p.beta, p.init, p.alog, p.dtb);
  expect_close(lin.o, lo.o, 1e-13, "O");
  expect_close(lin.fin, lo.fin, 1e-13, "final");
}

TEST(RefGdn, ZeroLengthPassesInitialStateAndNoInitialIsZero) {
  GdnProb p;
  p.cu = {0, 0, 2};
  p.fill(4);
  Out r = run_fwd(p, p.q, p.k, p.v, p.g, p.beta, p.init, p.alog, p.dtb);
  const size_t per = size_t(p.HO() * p.V * p.K);
  expect_close(Vec(r.fin.begin(), r.fin.begin() + long(per)), Vec(p.init.begin(), p.init.begin() + long(per)), 0, "pass");
  p.has_init = false;
  r = run_fwd(p, p.q, p.k, p.v, p.g, p.beta, p.init, p.alog, p.dtb);
  expect_close(Vec(r.fin.begin(), r.fin.begin() + long(per)), Vec(per, 0.0), 0, "zeros");
  check_forward(p);
}

TEST(RefGdn, CheckpointsStateIndicesOverwrite) {
  GdnProb p;
  p.cu = {0, 4, 7};
  p.fill(5);
  // Pool of 3 states; sequence 0 uses row 2, sequence 1 row 0.
  const int64_t HO = p.HO(), per = HO * p.V * p.K;
  Vec pool = rand_vec(size_t(3 * per), 55, -0.5, 0.5);
  RefCall c(OpKind::GDN);
  GdnProb pn = p;
  pn.has_init = false;
  bind_gdn(c, pn, p.q, p.k, p.v, p.g, p.beta, {}, {}, {});
  c.in("initial_state", {3, HO, p.V, p.K}, pool);
  c.in("state_indices", {2}, {2, 0}, {}, DataType::INT32);
  c.attr("checkpoint_every_n_tokens", int64_t(2)).attr("overwrite_initial_state", true).attr("output_final_state", true);
  c.out("O", {p.T(), HO, p.V});
  c.out("final_state", {2, HO, p.V, p.K});
  c.out("state_checkpoints", {p.T() / 2 + 2, HO, p.V, p.K});
  ASSERT_TRUE(c.run().is_good());
  // Same thing without the pool: initial_state rows gathered by hand.
  Vec init(pool.begin() + 2 * per, pool.begin() + 3 * per);
  init.insert(init.end(), pool.begin(), pool.begin() + per);
  Out want = run_fwd(p, p.q, p.k, p.v, p.g, p.beta, init, {}, {});
  expect_close(c.output("O").values(), want.o, 1e-14, "O");
  expect_close(c.output("final_state").values(), want.fin, 1e-14, "final");
  Vec after = c.input("initial_state").values();
  expect_close(Vec(after.begin() + 2 * per, after.begin() + 3 * per), Vec(want.fin.begin(), want.fin.begin() + per), 0, "overwrite 0");
  expect_close(Vec(after.begin(), after.begin() + per), Vec(want.fin.begin() + per, want.fin.end()), 0, "overwrite 1");
  expect_close(Vec(after.begin() + per, after.begin() + 2 * per), Vec(pool.begin() + per, pool.begin() + 2 * per), 0, "untouched");
  // Checkpoint rows: seq 0 (len 4): rows 0,1,2 = after 0,2,4 tokens; seq 1 (len 3): rows 3,4 = after 0,2.
  Vec ck = c.output("state_checkpoints").values();
  auto row = [&](int64_t r) { return Vec(ck.begin() + r * per, ck.begin() + (r + 1) * per); };
  expect_close(row(0), Vec(init.begin(), init.begin() + per), 0, "ck0");
  expect_close(row(2), Vec(want.fin.begin(), want.fin.begin() + per), 0, "ck2");
  expect_close(row(3), Vec(init.begin() + per, init.end()), 0, "ck3");
  GdnProb half = p;
  half.cu = {0, 2};
  Out h = run_fwd(half, p.q, p.k, p.v, p.g, p.beta, init, {}, {});
  expect_close(row(1), h.fin, 1e-15, "ck1");
}

namespace {

void check_backward(GdnProb p) {
  const int64_t T = p.T(), HO = p.HO();
  Vec dO = rand_vec(size_t(T * HO * p.V), 91), dfin = rand_vec(size_t(p.N() * HO * p.V * p.K), 92);
  RefCall b(OpKind::GDN_BACKWARD);
  bind_gdn(b, p, p.q, p.k, p.v, p.g, p.beta, p.init, p.alog, p.dtb);
  b.in("dO", {T, HO, p.V}, dO);
  b.in("d_final_state", {p.N(), HO, p.V, p.K}, dfin);
  b.out("dQ", {T, p.H, p.K});
  b.out("dK", {T, p.HK, p.K});
  b.out("dV", {T, p.HV, p.V});
  b.out("dG", {T, HO});
  b.out("dBeta", {T, HO});
  if (p.has_init) b.out("d_initial_state", {p.N(), HO, p.V, p.K});
  if (p.safe) {
    b.out("d_a_log", {HO});
    if (p.has_dtb) b.out("d_dt_bias", {HO});
  }
  Status st = b.run();
  ASSERT_TRUE(st.is_good()) << st.message();
  GdnProb w = p;
  auto L = [&](const GdnProb& x) {
    Out o = run_fwd(x, x.q, x.k, x.v, x.g, x.beta, x.init, x.alog, x.dtb);
    return dot(dO, o.o) + dot(dfin, o.fin);
  };
  auto grad = [&](Vec GdnProb::*field) {
    return fd_grad(p.*field, [&](const Vec& x) {
      w.*field = x;
      double r = L(w);
      w.*field = p.*field;
      return r;
    });
  };
  expect_close(b.output("dQ").values(), grad(&GdnProb::q), 1e-6, "dQ");
  expect_close(b.output("dK").values(), grad(&GdnProb::k), 1e-6, "dK");
  expect_close(b.output("dV").values(), grad(&GdnProb::v), 1e-6, "dV");
  expect_close(b.output("dG").values(), grad(&GdnProb::g), 1e-6, "dG");
  expect_close(b.output("dBeta").values(), grad(&GdnProb::beta), 1e-6, "dBeta");
  if (p.has_init) expect_close(b.output("d_initial_state").values(), grad(&GdnProb::init), 1e-6, "d_initial_state");
  if (p.safe) {
    expect_close(b.output("d_a_log").values(), grad(&GdnProb::alog), 1e-6, "d_a_log");
    if (p.has_dtb) expect_close(b.output("d_dt_bias").values(), grad(&GdnProb::dtb), 1e-6, "d_dt_bias");
  }
}

}  // namespace

TEST(RefGdn, BackwardFDGvaAllOptions) {
  GdnProb p;
  p.cu = {0, 3, 3, 5};
  p.l2 = p.sig = p.neg = p.safe = true;
  p.fill(6);
  check_backward(p);
}

TEST(RefGdn, BackwardFDReverseGqaLogGate) {
  GdnProb p;
  p.H = 2, p.HK = 2, p.HV = 1, p.K = 2, p.V = 3;
  p.cu = {0, 4, 6};
  p.fill(7);
  check_backward(p);
}

TEST(RefGdn, BackwardFDLinearGateNoInitSafeGateNoDtBias) {
  GdnProb p;
  p.cu = {0, 0, 4};
  p.linear = true, p.has_init = false;
  p.fill(8);
  check_backward(p);
  GdnProb s;
  s.cu = {0, 3};
  s.safe = true, s.has_dtb = false, s.l2 = true;
  s.fill(9);
  check_backward(s);
}

TEST(RefGdn, BackwardThreadCountIndependent) {
  GdnProb p;
  p.H = 1, p.HV = 4;
  p.cu = {0, 3, 7, 9};
  p.l2 = true;
  p.fill(10);
  auto run = [&] {
    RefCall b(OpKind::GDN_BACKWARD);
    bind_gdn(b, p, p.q, p.k, p.v, p.g, p.beta, p.init, p.alog, p.dtb);
    b.in("dO", {p.T(), p.HO(), p.V}, rand_vec(size_t(p.T() * p.HO() * p.V), 3));
    b.out("dQ", {p.T(), p.H, p.K});
    b.out("dK", {p.T(), p.HK, p.K});
    b.out("dV", {p.T(), p.HV, p.V});
    b.out("dG", {p.T(), p.HO()});
    b.out("dBeta", {p.T(), p.HO()});
    EXPECT_TRUE(b.run().is_good());
    return b.output("dQ").values();
  };
  Vec a = run();
  set_threads(2);
  Vec c = run();
  set_threads(1);
  EXPECT_EQ(a, c);
}

TEST(RefGdn, GraphFloatMatchesDoubleKernel) {
  GdnProb p;  // H 1, HV 2, K 3, V 2, sequences 5,0,7,3
  p.fill(12);
  for (Vec* v : {&p.q, &p.k, &p.v, &p.g, &p.beta, &p.init})
    for (double& x : *v) x = double(float(x));
  const int64_t T = p.T(), HO = p.HO();
  Graph gr;
  gr.set_io_data_type(DataType::FLOAT).set_intermediate_data_type(DataType::FLOAT).set_compute_data_type(DataType::FLOAT);
  auto mk = [&](const char* name, Dims d, DataType t = DataType::FLOAT) {
    return gr.tensor(TensorAttr().set_name(name).set_dim(d).set_stride(row_major_strides(d)).set_data_type(t));
  };
  auto q = mk("q", {T, p.H, p.K}), k = mk("k", {T, p.HK, p.K}), v = mk("v", {T, p.HV, p.V});
  auto g = mk("g", {T, HO}), beta = mk("beta", {T, HO}), cu = mk("cu", {p.N() + 1}, DataType::INT32);
  auto init = mk("init", {p.N(), HO, p.V, p.K});
  NodeAttrs a;
  a.set("output_final_state", true).input("initial_state", init);
  auto [O, fin, ck] = gr.gdn(q, k, v, g, beta, cu, a);
  O->set_output(true);
  fin->set_output(true);
  test::RefRunner r(gr);
  r.set(q, p.q), r.set(k, p.k), r.set(v, p.v), r.set(g, p.g), r.set(beta, p.beta), r.set(init, p.init);
  r.set(cu, Vec(p.cu.begin(), p.cu.end()));
  Status st = r.run_all();
  ASSERT_TRUE(st.is_good()) << st.get_message();
  Out want = run_fwd(p, p.q, p.k, p.v, p.g, p.beta, p.init, p.alog, p.dtb);
  expect_close(r.get(O), want.o, 1e-6, "O (float)");
  expect_close(r.get(fin), want.fin, 1e-6, "final_state (float)");
}
