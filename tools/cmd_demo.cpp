// SPDX-License-Identifier: Apache-2.0
// opendnn demo: builds a transformer block (RMSNorm -> QKV projections -> causal GQA SDPA -> output
// projection + residual -> RMSNorm -> SwiGLU MLP + residual) and a gated-delta-net layer in C++,
// runs each graph on the best plan the router offers, checks the result (against the reference
// engine, or against an fp64 computation when the best plan is the reference engine's) and prints
// timings. Graphs are joined on the host where a reshape would be needed.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "commands.h"
#include "common/dtype_convert.h"
#include "engines/reference/ref_kernel.h"
#include "opendnn/opendnn.h"

namespace opendnn::tools {

namespace {

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

// Host buffers for a graph's variant tensors, filled from / read into packed row-major doubles.
class Buffers {
 public:
  void* ptr(const TensorPtr& t) {
    auto& b = bufs_[t.get()];
    if (b.empty()) b.assign(size_t(std::max<int64_t>(t->storage_bytes(), 16)) + 64, std::byte{0});
    auto p = reinterpret_cast<uintptr_t>(b.data());
    return b.data() + ((64 - p % 64) % 64);
  }
  void set(const TensorPtr& t, const std::vector<double>& v) {
    void* d = ptr(t);
    int64_t i = 0;
    ref::for_each_index(t->get_dim(), [&](const int64_t* idx, int64_t) {
      int64_t off = 0;
      for (size_t k = 0; k < t->get_dim().size(); ++k) off += idx[k] * t->get_stride()[k];
      store_element(t->get_data_type(), d, off, v[size_t(i++)]);
    });
  }
  std::vector<double> get(const TensorPtr& t) {
    const void* d = ptr(t);
    std::vector<double> v;
    v.reserve(size_t(t->volume()));
    ref::for_each_index(t->get_dim(), [&](const int64_t* idx, int64_t) {
      int64_t off = 0;
      for (size_t k = 0; k < t->get_dim().size(); ++k) off += idx[k] * t->get_stride()[k];
      v.push_back(load_element(t->get_data_type(), d, off));
    });
    return v;
  }

 private:
  std::map<const TensorAttr*, std::vector<std::byte>> bufs_;
};

struct Ran {
  bool ok = false;
  bool skipped = false;
  std::string engine;
  double build_ms = 0, exec_ms = 0;
};

// Plans g (best plan first), executes it and reports; pack maps every variant tensor.
Ran plan_and_run(Graph& g, Buffers& b, const std::vector<HeurMode>& modes, const char* what) {
  Ran r;
  auto t0 = Clock::now();
  Status s = g.build(modes);
  r.build_ms = ms_since(t0);
  if (s.is_bad()) {
    r.skipped = s.code() == ErrorCode::GRAPH_NOT_SUPPORTED;
    std::printf("  %-22s %s: %s\n", what, r.skipped ? "skipped" : "FAILED", s.to_string().c_str());
    return r;
  }
  std::string name;
  (void)g.get_engine_name_at_index(g.selected_plan(), name);
  r.engine = name;
  std::vector<void*> slots;
  for (int64_t uid : g.variant_uids()) slots.push_back(b.ptr(g.find_tensor(uid)));
  std::vector<std::byte> ws(size_t(g.get_workspace_size()) + 1);
  std::vector<double> times;
  for (int i = 0; i < 3; ++i) {
    auto t1 = Clock::now();
    s = g.execute(slots.data(), ws.data());
    times.push_back(ms_since(t1));
    if (s.is_bad()) {
      std::printf("  %-22s FAILED: %s\n", what, s.to_string().c_str());
      return r;
    }
    if (times.back() > 2000) break;  // slow: one timing is enough
  }
  std::sort(times.begin(), times.end());
  r.exec_ms = times[times.size() / 2];
  r.ok = true;
  std::printf("  %-22s engine %-10s build %8.2f ms   execute %9.3f ms\n", what, r.engine.c_str(), r.build_ms, r.exec_ms);
  return r;
}

// Validates before buffers are sized (validation infers strides and types).
bool validated(Graph& g, const char* what) {
  Status s = g.validate();
  if (s.is_bad()) std::printf("  %-22s FAILED to validate: %s\n", what, s.to_string().c_str());
  return s.is_good();
}

std::vector<double> random_values(std::mt19937_64& rng, size_t n, double scale, DataType round_as) {
  std::uniform_real_distribution<double> u(-scale, scale);
  std::vector<double> v(n);
  for (auto& x : v) x = round_to(round_as, u(rng));
  return v;
}

// ---- fp64 building blocks (row-major)
std::vector<double> mm(const std::vector<double>& a, const std::vector<double>& b, int64_t M, int64_t K, int64_t N) {
  std::vector<double> c(size_t(M * N), 0.0);
  for (int64_t i = 0; i < M; ++i)
    for (int64_t k = 0; k < K; ++k) {
      double av = a[size_t(i * K + k)];
      for (int64_t j = 0; j < N; ++j) c[size_t(i * N + j)] += av * b[size_t(k * N + j)];
    }
  return c;
}
std::vector<double> rms(const std::vector<double>& x, const std::vector<double>& w, int64_t M, int64_t N, double eps) {
  std::vector<double> y(x.size());
  for (int64_t i = 0; i < M; ++i) {
    double ss = 0;
    for (int64_t j = 0; j < N; ++j) ss += x[size_t(i * N + j)] * x[size_t(i * N + j)];
    double r = 1.0 / std::sqrt(ss / double(N) + eps);
    for (int64_t j = 0; j < N; ++j) y[size_t(i * N + j)] = x[size_t(i * N + j)] * r * w[size_t(j)];
  }
  return y;
}
void round_all(std::vector<double>& v, DataType t) {
  for (auto& x : v) x = round_to(t, x);
}

struct Compare {
  double max_abs = 0, max_ref = 0;
  bool within(double tol) const { return max_abs <= tol * std::max(1.0, max_ref); }
};
Compare compare(const std::vector<double>& got, const std::vector<double>& want) {
  Compare c;
  for (size_t i = 0; i < got.size() && i < want.size(); ++i) {
    double d = std::fabs(got[i] - want[i]);
    c.max_abs = std::isnan(d) ? INFINITY : std::max(c.max_abs, d);
    c.max_ref = std::max(c.max_ref, std::fabs(want[i]));
  }
  return c;
}

// Checks `got` (from the best plans): against the reference engine's result when the best plan
// was another engine's, else against the fp64 result.
bool report_check(const char* what, bool all_reference, const std::vector<double>& got,
                  const std::vector<double>& reference_engine, const std::vector<double>& fp64, double tol) {
  Compare c = all_reference ? compare(got, fp64) : compare(got, reference_engine);
  bool ok = c.within(tol);
  std::printf("  check %-16s vs %-16s max |err| %.3e (max |ref| %.3e, tolerance %.1e x max(1,|ref|)): %s\n", what,
              all_reference ? "fp64" : "reference engine", c.max_abs, c.max_ref, tol, ok ? "OK" : "MISMATCH");
  return ok;
}

// ------------------------------------------------------------------ transformer block

int transformer_block(std::mt19937_64& rng, bool& any_skipped) {
  const int64_t S = 128, D = 256, H = 8, HK = 2, DH = 32, F = 512;
  const double eps = 1e-5;
  const DataType bf = DataType::BFLOAT16;
  std::printf("transformer block: seq %lld, model %lld, %lld query heads / %lld kv heads of %lld, MLP %lld (bf16 I/O)\n",
              (long long)S, (long long)D, (long long)H, (long long)HK, (long long)DH, (long long)F);

  auto x = random_values(rng, size_t(S * D), 1.0, bf);
  auto n1 = random_values(rng, size_t(D), 0.5, bf);
  for (auto& v : n1) v = round_to(bf, 1.0 + v);
  auto n2 = random_values(rng, size_t(D), 0.5, bf);
  for (auto& v : n2) v = round_to(bf, 1.0 + v);
  auto wq = random_values(rng, size_t(H * D * DH), std::sqrt(3.0 / double(D)), bf);   // [H, D, DH]
  auto wk = random_values(rng, size_t(HK * D * DH), std::sqrt(3.0 / double(D)), bf);  // [HK, D, DH]
  auto wv = random_values(rng, size_t(HK * D * DH), std::sqrt(3.0 / double(D)), bf);
  auto wo = random_values(rng, size_t(H * DH * D), std::sqrt(3.0 / double(H * DH)), bf);  // [H*DH, D]
  auto w1 = random_values(rng, size_t(D * F), std::sqrt(3.0 / double(D)), bf);
  auto w3 = random_values(rng, size_t(D * F), std::sqrt(3.0 / double(D)), bf);
  auto w2 = random_values(rng, size_t(F * D), std::sqrt(3.0 / double(F)), bf);

  // Graph 1: RMSNorm -> per-head Q/K/V projections (batched matmul over heads) -> causal GQA SDPA.
  auto make_attention = [&](Graph& g, std::map<std::string, TensorPtr>& t) {
    g.set_name("attention").set_io_data_type(bf).set_intermediate_data_type(DataType::FLOAT).set_compute_data_type(DataType::FLOAT);
    t["x"] = g.tensor(TensorAttr().set_name("x").set_dim({1, 1, S, D}));
    t["n1"] = g.tensor(TensorAttr().set_name("norm1.scale").set_dim({1, 1, 1, D}));
    auto e = g.tensor(TensorAttr().set_name("eps").set_dim({1, 1, 1, 1}).set_stride({1, 1, 1, 1}).set_value(Scalar::of_float(float(eps))));
    auto [xn, inv] = g.rmsnorm(t["x"], t["n1"], e, NodeAttrs().set_name("norm1").set("forward_phase", "INFERENCE"));
    (void)inv;
    t["wq"] = g.tensor(TensorAttr().set_name("wq").set_dim({1, H, D, DH}));
    t["wk"] = g.tensor(TensorAttr().set_name("wk").set_dim({1, HK, D, DH}));
    t["wv"] = g.tensor(TensorAttr().set_name("wv").set_dim({1, HK, D, DH}));
    auto q = g.matmul(xn, t["wq"], NodeAttrs().set_name("q_proj"));
    auto k = g.matmul(xn, t["wk"], NodeAttrs().set_name("k_proj"));
    auto v = g.matmul(xn, t["wv"], NodeAttrs().set_name("v_proj"));
    for (auto& p : {q, k, v}) p->set_data_type(bf);
    auto outs = g.sdpa(q, k, v,
                       NodeAttrs()
                           .set_name("attn")
                           .set("attn_scale_value", 1.0 / std::sqrt(double(DH)))
                           .set("diagonal_alignment", "TOP_LEFT")
                           .set("right_bound", int64_t(0)));
    t["o"] = outs[0];
    t["o"]->set_output(true).set_name("o").set_data_type(bf);
  };
  // Graph 2: output projection + residual -> RMSNorm -> SwiGLU MLP + residual.
  auto make_mlp = [&](Graph& g, std::map<std::string, TensorPtr>& t) {
    g.set_name("mlp").set_io_data_type(bf).set_intermediate_data_type(DataType::FLOAT).set_compute_data_type(DataType::FLOAT);
    t["a"] = g.tensor(TensorAttr().set_name("attn").set_dim({1, 1, S, H * DH}));
    t["wo"] = g.tensor(TensorAttr().set_name("wo").set_dim({1, 1, H * DH, D}));
    t["x"] = g.tensor(TensorAttr().set_name("x").set_dim({1, 1, S, D}));
    t["n2"] = g.tensor(TensorAttr().set_name("norm2.scale").set_dim({1, 1, 1, D}));
    t["w1"] = g.tensor(TensorAttr().set_name("w_gate").set_dim({1, 1, D, F}));
    t["w3"] = g.tensor(TensorAttr().set_name("w_up").set_dim({1, 1, D, F}));
    t["w2"] = g.tensor(TensorAttr().set_name("w_down").set_dim({1, 1, F, D}));
    auto e = g.tensor(TensorAttr().set_name("eps").set_dim({1, 1, 1, 1}).set_stride({1, 1, 1, 1}).set_value(Scalar::of_float(float(eps))));
    auto proj = g.matmul(t["a"], t["wo"], NodeAttrs().set_name("o_proj"));
    auto h = g.add(proj, t["x"], NodeAttrs().set_name("residual1"));
    auto [hn, inv] = g.rmsnorm(h, t["n2"], e, NodeAttrs().set_name("norm2").set("forward_phase", "INFERENCE"));
    (void)inv;
    auto gate = g.matmul(hn, t["w1"], NodeAttrs().set_name("gate_proj"));
    auto up = g.matmul(hn, t["w3"], NodeAttrs().set_name("up_proj"));
    auto act = g.swish(gate, NodeAttrs().set_name("silu"));
    auto m = g.mul(act, up, NodeAttrs().set_name("swiglu"));
    auto down = g.matmul(m, t["w2"], NodeAttrs().set_name("down_proj"));
    t["y"] = g.add(down, h, NodeAttrs().set_name("residual2"));
    t["y"]->set_output(true).set_name("y");
  };

  // fp64 forward, rounding where the graphs materialise bf16 tensors (q, k, v, o, y).
  auto xn = rms(x, n1, S, D, eps);
  std::vector<double> q(size_t(H * S * DH)), k(size_t(HK * S * DH)), v(size_t(HK * S * DH));
  for (int64_t h = 0; h < H; ++h) {
    auto r = mm(xn, std::vector<double>(wq.begin() + h * D * DH, wq.begin() + (h + 1) * D * DH), S, D, DH);
    std::copy(r.begin(), r.end(), q.begin() + h * S * DH);
  }
  for (int64_t h = 0; h < HK; ++h) {
    auto rk = mm(xn, std::vector<double>(wk.begin() + h * D * DH, wk.begin() + (h + 1) * D * DH), S, D, DH);
    auto rv = mm(xn, std::vector<double>(wv.begin() + h * D * DH, wv.begin() + (h + 1) * D * DH), S, D, DH);
    std::copy(rk.begin(), rk.end(), k.begin() + h * S * DH);
    std::copy(rv.begin(), rv.end(), v.begin() + h * S * DH);
  }
  round_all(q, bf), round_all(k, bf), round_all(v, bf);
  std::vector<double> attn(size_t(S * H * DH));  // [S, H*DH]
  const double scale = 1.0 / std::sqrt(double(DH));
  for (int64_t h = 0; h < H; ++h) {
    int64_t kh = h / (H / HK);
    for (int64_t i = 0; i < S; ++i) {
      std::vector<double> p(size_t(i + 1));
      double mx = -INFINITY;
      for (int64_t j = 0; j <= i; ++j) {
        double s = 0;
        for (int64_t e = 0; e < DH; ++e) s += q[size_t((h * S + i) * DH + e)] * k[size_t((kh * S + j) * DH + e)];
        p[size_t(j)] = s * scale;
        mx = std::max(mx, p[size_t(j)]);
      }
      double den = 0;
      for (auto& pj : p) den += (pj = std::exp(pj - mx));
      for (int64_t e = 0; e < DH; ++e) {
        double acc = 0;
        for (int64_t j = 0; j <= i; ++j) acc += p[size_t(j)] * v[size_t((kh * S + j) * DH + e)];
        attn[size_t(i * H * DH + h * DH + e)] = round_to(bf, acc / den);
      }
    }
  }
  auto hres = mm(attn, wo, S, H * DH, D);
  for (size_t i = 0; i < hres.size(); ++i) hres[i] += x[i];
  auto hn = rms(hres, n2, S, D, eps);
  auto gate = mm(hn, w1, S, D, F), up = mm(hn, w3, S, D, F);
  std::vector<double> m(gate.size());
  for (size_t i = 0; i < m.size(); ++i) m[i] = gate[i] / (1.0 + std::exp(-gate[i])) * up[i];
  auto y64 = mm(m, w2, S, F, D);
  for (size_t i = 0; i < y64.size(); ++i) y64[i] = round_to(bf, y64[i] + hres[i]);

  // Runs both graphs with the given modes; returns the attention output merged to [S, H*DH] and y.
  struct Result {
    bool ok = false, reference_only = true;
    std::vector<double> attn, y;
  };
  auto run_block = [&](const std::vector<HeurMode>& modes, const char* tag) {
    Result res;
    Graph g1, g2;
    std::map<std::string, TensorPtr> t1, t2;
    make_attention(g1, t1);
    make_mlp(g2, t2);
    if (!validated(g1, "attention graph") || !validated(g2, "mlp graph")) return res;
    Buffers b1, b2;
    b1.set(t1["x"], x), b1.set(t1["n1"], n1), b1.set(t1["wq"], wq), b1.set(t1["wk"], wk), b1.set(t1["wv"], wv);
    std::printf(" %s\n", tag);
    Ran r1 = plan_and_run(g1, b1, modes, "attention graph");
    if (!r1.ok) {
      any_skipped = any_skipped || r1.skipped;
      return res;
    }
    // Host glue: O [1, H, S, DH] (any strides) -> attn [S, H*DH], what a reshape node would do.
    auto o = b1.get(t1["o"]);
    res.attn.resize(size_t(S * H * DH));
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < S; ++i)
        for (int64_t e = 0; e < DH; ++e) res.attn[size_t(i * H * DH + h * DH + e)] = o[size_t((h * S + i) * DH + e)];
    b2.set(t2["a"], res.attn), b2.set(t2["wo"], wo), b2.set(t2["x"], x), b2.set(t2["n2"], n2);
    b2.set(t2["w1"], w1), b2.set(t2["w3"], w3), b2.set(t2["w2"], w2);
    Ran r2 = plan_and_run(g2, b2, modes, "mlp graph");
    if (!r2.ok) {
      any_skipped = any_skipped || r2.skipped;
      return res;
    }
    res.y = b2.get(t2["y"]);
    res.reference_only = r1.engine == "reference" && r2.engine == "reference";
    res.ok = true;
    return res;
  };

  Result best = run_block({HeurMode::A, HeurMode::FALLBACK}, "best plans:");
  if (!best.ok) return any_skipped ? 0 : 1;
  Result refr;
  if (!best.reference_only) {
    refr = run_block({HeurMode::FALLBACK}, "reference engine:");
    if (!refr.ok) return 1;
  }
  bool ok = report_check("attention", best.reference_only, best.attn, refr.attn, attn, 2e-2);
  ok = report_check("block output", best.reference_only, best.y, refr.y, y64, 3e-2) && ok;
  return ok ? 0 : 1;
}

// ------------------------------------------------------------------ gated delta net layer

int gdn_layer(std::mt19937_64& rng, bool& any_skipped) {
  const int64_t D = 256, H = 4, K = 64, V = 64;
  const std::vector<int64_t> lens{100, 156};
  const int64_t T = lens[0] + lens[1];
  const double eps = 1e-5;
  const DataType f32 = DataType::FLOAT;
  std::printf("gated delta net layer: %lld tokens in %zu sequences, model %lld, %lld heads, K=V=%lld (fp32)\n",
              (long long)T, lens.size(), (long long)D, (long long)H, (long long)K);

  auto x = random_values(rng, size_t(T * D), 1.0, f32);
  auto nw = random_values(rng, size_t(D), 0.5, f32);
  for (auto& v : nw) v += 1.0;
  double a = std::sqrt(3.0 / double(D));
  auto wq = random_values(rng, size_t(D * H * K), a, f32), wk = random_values(rng, size_t(D * H * K), a, f32);
  auto wv = random_values(rng, size_t(D * H * V), a, f32);
  auto wg = random_values(rng, size_t(D * H), a, f32), wb = random_values(rng, size_t(D * H), a, f32);
  auto wo = random_values(rng, size_t(H * V * D), std::sqrt(3.0 / double(H * V)), f32);
  std::vector<double> cu{0, double(lens[0]), double(T)};

  // fp64: projections, gates, the recurrence, output projection + residual.
  auto xn = rms(x, nw, T, D, eps);
  auto q = mm(xn, wq, T, D, H * K), k = mm(xn, wk, T, D, H * K), v = mm(xn, wv, T, D, H * V);
  auto gl = mm(xn, wg, T, D, H), bl = mm(xn, wb, T, D, H);
  std::vector<double> g(gl.size()), beta(bl.size());
  for (size_t i = 0; i < g.size(); ++i) {
    g[i] = -std::log1p(std::exp(gl[i]));
    beta[i] = 1.0 / (1.0 + std::exp(-bl[i]));
  }
  std::vector<double> o(size_t(T * H * V), 0.0);
  {
    auto l2 = [&](std::vector<double>& m, int64_t t, int64_t h) {
      double ss = 0;
      for (int64_t e = 0; e < K; ++e) ss += m[size_t((t * H + h) * K + e)] * m[size_t((t * H + h) * K + e)];
      double r = 1.0 / std::sqrt(ss + 1e-6);
      for (int64_t e = 0; e < K; ++e) m[size_t((t * H + h) * K + e)] *= r;
    };
    auto qn = q, kn = k;
    const double s = 1.0 / std::sqrt(double(K));
    for (size_t n = 0; n < lens.size(); ++n)
      for (int64_t h = 0; h < H; ++h) {
        std::vector<double> S(size_t(K * V), 0.0);  // [K, V]
        for (int64_t t = int64_t(cu[n]); t < int64_t(cu[n + 1]); ++t) {
          l2(qn, t, h), l2(kn, t, h);
          const double al = std::exp(g[size_t(t * H + h)]), be = beta[size_t(t * H + h)];
          const double* kt = &kn[size_t((t * H + h) * K)];
          const double* vt = &v[size_t((t * H + h) * V)];
          const double* qt = &qn[size_t((t * H + h) * K)];
          for (auto& sv : S) sv *= al;
          std::vector<double> err(static_cast<size_t>(V));
          for (int64_t j = 0; j < V; ++j) {
            double p = 0;
            for (int64_t i = 0; i < K; ++i) p += S[size_t(i * V + j)] * kt[i];
            err[size_t(j)] = vt[j] - p;
          }
          for (int64_t i = 0; i < K; ++i)
            for (int64_t j = 0; j < V; ++j) S[size_t(i * V + j)] += be * kt[i] * err[size_t(j)];
          for (int64_t j = 0; j < V; ++j) {
            double acc = 0;
            for (int64_t i = 0; i < K; ++i) acc += S[size_t(i * V + j)] * qt[i] * s;
            o[size_t((t * H + h) * V + j)] = acc;
          }
        }
      }
  }
  auto y64 = mm(o, wo, T, H * V, D);
  for (size_t i = 0; i < y64.size(); ++i) y64[i] += x[i];

  struct Result {
    bool ok = false, reference_only = true;
    std::vector<double> o, y;
  };
  auto run_layer = [&](const std::vector<HeurMode>& modes, const char* tag) {
    Result res;
    std::printf(" %s\n", tag);
    // Graph 1: RMSNorm -> q/k/v/gate/beta projections -> gate activations.
    Graph g1;
    g1.set_name("gdn_proj").set_io_data_type(f32).set_intermediate_data_type(f32).set_compute_data_type(f32);
    auto tx = g1.tensor(TensorAttr().set_name("x").set_dim({1, 1, T, D}));
    auto tn = g1.tensor(TensorAttr().set_name("norm.scale").set_dim({1, 1, 1, D}));
    auto te = g1.tensor(TensorAttr().set_name("eps").set_dim({1, 1, 1, 1}).set_stride({1, 1, 1, 1}).set_value(Scalar::of_float(float(eps))));
    auto [xn_t, inv] = g1.rmsnorm(tx, tn, te, NodeAttrs().set_name("norm").set("forward_phase", "INFERENCE"));
    (void)inv;
    std::map<std::string, TensorPtr> w;
    auto proj = [&](const char* name, const std::vector<double>&, int64_t n) {
      w[name] = g1.tensor(TensorAttr().set_name(std::string("w_") + name).set_dim({1, 1, D, n}));
      return g1.matmul(xn_t, w[name], NodeAttrs().set_name(std::string(name) + "_proj"));
    };
    auto tq = proj("q", wq, H * K), tk = proj("k", wk, H * K), tv = proj("v", wv, H * V);
    auto tg = g1.neg(g1.softplus(proj("g", wg, H), NodeAttrs().set_name("g_softplus")), NodeAttrs().set_name("g_log"));
    auto tb = g1.sigmoid(proj("b", wb, H), NodeAttrs().set_name("beta"));
    for (auto& [t, n] : std::vector<std::pair<TensorPtr, const char*>>{{tq, "q"}, {tk, "k"}, {tv, "v"}, {tg, "g"}, {tb, "beta"}})
      t->set_output(true).set_name(n);
    if (!validated(g1, "projection graph")) return res;
    Buffers b1;
    b1.set(tx, x), b1.set(tn, nw), b1.set(w["q"], wq), b1.set(w["k"], wk), b1.set(w["v"], wv), b1.set(w["g"], wg),
        b1.set(w["b"], wb);
    Ran r1 = plan_and_run(g1, b1, modes, "projection graph");
    if (!r1.ok) {
      any_skipped = any_skipped || r1.skipped;
      return res;
    }
    // Graph 2: the recurrence on the projections (the same memory, viewed as [T, H, K]).
    Graph g2;
    g2.set_name("gdn").set_io_data_type(f32).set_intermediate_data_type(f32).set_compute_data_type(f32);
    auto q2 = g2.tensor(TensorAttr().set_name("q").set_dim({T, H, K}));
    auto k2 = g2.tensor(TensorAttr().set_name("k").set_dim({T, H, K}));
    auto v2 = g2.tensor(TensorAttr().set_name("v").set_dim({T, H, V}));
    auto gg = g2.tensor(TensorAttr().set_name("g").set_dim({T, H}));
    auto bb = g2.tensor(TensorAttr().set_name("beta").set_dim({T, H}));
    auto cs = g2.tensor(TensorAttr().set_name("cu_seqlens").set_dim({3}).set_data_type(DataType::INT32));
    auto outs = g2.gdn(q2, k2, v2, gg, bb, cs, NodeAttrs().set_name("gated_delta_net").set("use_qk_l2norm", true));
    auto to = outs[0];
    to->set_output(true).set_name("o");
    if (!validated(g2, "gdn graph")) return res;
    Buffers b2;
    b2.set(q2, b1.get(tq)), b2.set(k2, b1.get(tk)), b2.set(v2, b1.get(tv)), b2.set(gg, b1.get(tg)), b2.set(bb, b1.get(tb));
    b2.set(cs, cu);
    Ran r2 = plan_and_run(g2, b2, modes, "gdn graph");
    if (!r2.ok) {
      any_skipped = any_skipped || r2.skipped;
      return res;
    }
    res.o = b2.get(to);
    // Graph 3: output projection + residual.
    Graph g3;
    g3.set_name("gdn_out").set_io_data_type(f32).set_intermediate_data_type(f32).set_compute_data_type(f32);
    auto o3 = g3.tensor(TensorAttr().set_name("o").set_dim({1, 1, T, H * V}));
    auto w3 = g3.tensor(TensorAttr().set_name("w_o").set_dim({1, 1, H * V, D}));
    auto x3 = g3.tensor(TensorAttr().set_name("x").set_dim({1, 1, T, D}));
    auto y3 = g3.add(g3.matmul(o3, w3, NodeAttrs().set_name("o_proj")), x3, NodeAttrs().set_name("residual"));
    y3->set_output(true).set_name("y");
    if (!validated(g3, "output graph")) return res;
    Buffers b3;
    b3.set(o3, res.o), b3.set(w3, wo), b3.set(x3, x);
    Ran r3 = plan_and_run(g3, b3, modes, "output graph");
    if (!r3.ok) {
      any_skipped = any_skipped || r3.skipped;
      return res;
    }
    res.y = b3.get(y3);
    res.reference_only = r1.engine == "reference" && r2.engine == "reference" && r3.engine == "reference";
    res.ok = true;
    return res;
  };

  Result best = run_layer({HeurMode::A, HeurMode::FALLBACK}, "best plans:");
  if (!best.ok) return any_skipped ? 0 : 1;
  Result refr;
  if (!best.reference_only) {
    refr = run_layer({HeurMode::FALLBACK}, "reference engine:");
    if (!refr.ok) return 1;
  }
  bool ok = report_check("gdn output", best.reference_only, best.o, refr.o, o, 1e-3);
  ok = report_check("layer output", best.reference_only, best.y, refr.y, y64, 1e-3) && ok;
  return ok ? 0 : 1;
}

int run_demo(uint64_t seed) {
  auto t0 = Clock::now();
  std::printf("opendnn %s demo\nengines:", kVersion);
  for (const auto& e : registered_engines()) std::printf(" %s(%lld)", std::string(e->name()).c_str(), (long long)e->engine_id());
  Target target = default_target();
  std::printf("\ntarget: %s\n\n", target.kind == DeviceKind::CPU ? "cpu" : "cuda");
  if (target.kind != DeviceKind::CPU) {
    // The demo's buffers are host memory: plan for the CPU.
    std::printf("(a CUDA device is present; this demo uses host buffers, so it plans for the CPU)\n\n");
    set_default_target(Target{});
  }
  std::mt19937_64 rng(seed);
  bool skipped = false;
  int rc = transformer_block(rng, skipped);
  std::printf("\n");
  rc |= gdn_layer(rng, skipped);
  std::printf("\ndemo %s in %.2f s%s\n", rc == 0 ? "passed" : "FAILED", ms_since(t0) / 1000.0,
              skipped ? " (some graphs were skipped: an op has no kernel yet)" : "");
  return rc;
}

}  // namespace

void add_demo_command(CLI::App& app) {
  auto seed = std::make_shared<uint64_t>(2026);
  CLI::App* cmd = app.add_subcommand("demo", "Build and run a transformer block and a gated-delta-net layer");
  cmd->add_option("--seed", *seed, "seed of the weights and inputs");
  cmd->callback([seed] {
    if (int rc = run_demo(*seed)) throw CLI::RuntimeError(rc);
  });
}

}  // namespace opendnn::tools
