// SPDX-License-Identifier: Apache-2.0
// The cuda engine's gated delta net forward against a double-precision host recurrence (the
// reference engine's semantics, src/engines/reference/gdn.cpp). Needs an NVIDIA GPU (sm_90+).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "common/dtype_convert.h"
#include "opendnn/opendnn.h"
#include "support/device.h"

using namespace opendnn;

namespace {

bool have_gpu() { return test::have_sm90_gpu(); }
using test::DevBuf;

// Host values already rounded to their device type, and the device copy.
struct Input {
  DataType type;
  std::vector<double> v;
  DevBuf dev;
  std::vector<uint8_t> raw;
  Input(DataType t, std::vector<double> vals)
      : type(t), v(std::move(vals)), dev(v.size() * size_t(bits_of(t) / 8)), raw(v.size() * size_t(bits_of(t) / 8)) {
    for (size_t i = 0; i < v.size(); ++i) {
      v[i] = round_to(t, v[i]);
      store_element(t, raw.data(), int64_t(i), v[i]);
    }
    dev.put(raw.data(), raw.size());
  }
};

std::vector<double> uniform(size_t n, std::mt19937& rng, double lo, double hi) {
  std::uniform_real_distribution<double> d(lo, hi);
  std::vector<double> v(n);
  for (auto& e : v) e = d(rng);
  return v;
}

// bench/gdn.py's inputs: normal rows (unnormalised: the kernel's l2norm sees |x| ~ sqrt(K)), log gates
// log(sigmoid(x + 3)) with x normal (alpha mostly 0.9..1), beta = sigmoid(U(0, 1)).
std::vector<double> normal(size_t n, std::mt19937& rng, double sd) {
  std::normal_distribution<double> d(0.0, sd);
  std::vector<double> v(n);
  for (auto& e : v) e = d(rng);
  return v;
}
std::vector<double> log_sigmoid_gates(size_t n, std::mt19937& rng) {
  std::vector<double> v = normal(n, rng, 1.0);
  for (auto& e : v) e = -std::log1p(std::exp(-(e + 3.0)));
  return v;
}
std::vector<double> sigmoid_uniform(size_t n, std::mt19937& rng) {
  std::vector<double> v = uniform(n, rng, 0.0, 1.0);
  for (auto& e : v) e = 1.0 / (1.0 + std::exp(-e));
  return v;
}

// Rows of q or k, normalised here when the kernel does not (unnormalised keys make the delta rule
// diverge, as with any implementation).
std::vector<double> unit_rows(size_t rows, int64_t K, bool normalise, std::mt19937& rng) {
  std::vector<double> x = uniform(rows * size_t(K), rng, -1, 1);
  if (normalise)
    for (size_t r = 0; r < rows; ++r) {
      double s = 0;
      for (int64_t d = 0; d < K; ++d) s += x[r * size_t(K) + size_t(d)] * x[r * size_t(K) + size_t(d)];
      for (int64_t d = 0; d < K; ++d) x[r * size_t(K) + size_t(d)] /= std::sqrt(s);
    }
  return x;
}

double rel_err(const std::vector<double>& got, const std::vector<double>& want) {
  double num = 0, den = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    num += (got[i] - want[i]) * (got[i] - want[i]);
    den += want[i] * want[i];
  }
  return std::sqrt(num / (den > 0 ? den : 1));
}

struct Case {
  std::string name;
  std::vector<int32_t> cu;
  int64_t h, hv, k, v;
  DataType io = DataType::BFLOAT16;
  bool l2 = true;
  double g_lo = -0.3, g_hi = -0.01;  // log gates
  bool init = true;
  DataType state_type = DataType::FLOAT;
  bool torch_state_layout = false;  // states as transposed views of [N, HO, K, V], as torch passes them
  double scale = 0;                 // 0: default 1/sqrt(K)
  bool bench_data = false;          // bench/gdn.py's distributions (normal q/k/v, log-sigmoid gates, 0.1 N(0,1) h0)
  bool beta_f32 = false;            // beta in FLOAT, as bench/gdn.py passes it (else the io type)
  bool poison_workspace = false;    // the workspace all NaN before the first run, and both runs checked
  std::vector<int64_t> heads;       // the output heads the reference covers and the check compares (empty: all)
};

// The random inputs of a case, rounded to their device types, on host and device.
struct Problem {
  int64_t T, N, HO, K, V;
  std::mt19937 rng;
  Input q, k, v, g, beta, cu, h0;
  std::vector<int64_t> st_stride;  // state (n, j, vv, kk); torch's layout is the transposed [N, HO, K, V]
  Problem(const Case& c, uint32_t seed)
      : T(c.cu.back()), N(int64_t(c.cu.size()) - 1), HO(std::max(c.h, c.hv)), K(c.k), V(c.v), rng(seed),
        q(c.io, c.bench_data ? normal(size_t(T * c.h * K), rng, 1.0) : unit_rows(size_t(T * c.h), K, !c.l2, rng)),
        k(c.io, c.bench_data ? normal(size_t(T * c.h * K), rng, 1.0) : unit_rows(size_t(T * c.h), K, !c.l2, rng)),
        v(c.io, c.bench_data ? normal(size_t(T * c.hv * V), rng, 1.0) : uniform(size_t(T * c.hv * V), rng, -1, 1)),
        g(DataType::FLOAT, c.bench_data ? log_sigmoid_gates(size_t(T * HO), rng)
                                        : uniform(size_t(T * HO), rng, c.g_lo, c.g_hi)),
        beta(c.beta_f32 ? DataType::FLOAT : c.io,
             c.bench_data ? sigmoid_uniform(size_t(T * HO), rng) : uniform(size_t(T * HO), rng, 0.05, 1.0)),
        cu(DataType::INT32, std::vector<double>(c.cu.begin(), c.cu.end())),
        h0(c.state_type, c.bench_data ? normal(size_t(N * HO * V * K), rng, 0.1)
                                      : uniform(size_t(N * HO * V * K), rng, -0.5, 0.5)),
        st_stride(c.torch_state_layout ? std::vector<int64_t>{HO * V * K, V * K, 1, V}
                                       : std::vector<int64_t>{HO * V * K, V * K, K, 1}) {}
};

// mma_pass: the register-state sequential pass (OPENDNN_GDN_FWD_V2, default on); prep2: the tensor-core
// chunk_prep (OPENDNN_GDN_PREP_V2, default on); split: that pass with sequences cut into segments
// (OPENDNN_GDN_SPLIT; unset, the adapter decides); v3: session 5's opt-in chunk_prep_mma v3 and three-stage
// pass (OPENDNN_GDN_PREP_V3, and OPENDNN_GDN_PASS_V3 unless pass3 is false: prep3 alone). Each set
// explicitly to 1 or 0; read when the plan is built.
void check_once(const Case& c, bool mma_pass, bool prep2, bool split = false, bool v3 = false, bool pass3 = true) {
  pass3 = pass3 && v3;
  SCOPED_TRACE(c.name + (mma_pass ? " (mma pass)" : "") + (prep2 ? " (prep2)" : "") + (split ? " (split)" : "") +
               (v3 ? (pass3 ? " (v3)" : " (prep3)") : ""));
  auto env = [](const char* name, bool on) { setenv(name, on ? "1" : "0", 1); };
  env("OPENDNN_GDN_FWD_V2", mma_pass);
  env("OPENDNN_GDN_PREP_V2", prep2);
  env("OPENDNN_GDN_SPLIT", split);
  env("OPENDNN_GDN_PREP_V3", v3);
  env("OPENDNN_GDN_PASS_V3", pass3);
  Problem pb(c, uint32_t(c.cu.back() * 7 + std::max(c.h, c.hv) * 131 + c.k));
  const int64_t T = pb.T, N = pb.N, HO = pb.HO, K = pb.K, V = pb.V;
  Input &q = pb.q, &k = pb.k, &v = pb.v, &g = pb.g, &beta = pb.beta, &cu = pb.cu, &h0 = pb.h0;
  const std::vector<int64_t>& st_stride = pb.st_stride;
  auto soff = [&](int64_t n, int64_t j, int64_t vv, int64_t kk) {
    return size_t(n * st_stride[0] + j * st_stride[1] + vv * st_stride[2] + kk * st_stride[3]);
  };
  const double scale = c.scale > 0 ? c.scale : 1.0 / std::sqrt(double(K));

  std::vector<int64_t> heads = c.heads;
  if (heads.empty())
    for (int64_t j = 0; j < HO; ++j) heads.push_back(j);

  // Host recurrence in double, state M = S^T (V x K).
  std::vector<double> ro(size_t(T * HO * V), 0.0), rfin(size_t(N * HO * V * K), 0.0);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t j : heads) {
      const int64_t hq = j / (HO / c.h), hv = j / (HO / c.hv);
      std::vector<double> M(size_t(V * K), 0.0), qn(static_cast<size_t>(K)), kn(static_cast<size_t>(K));
      if (c.init)
        for (int64_t a = 0; a < V; ++a)
          for (int64_t b = 0; b < K; ++b) M[size_t(a * K + b)] = h0.v[soff(n, j, a, b)];
      for (int64_t t = c.cu[size_t(n)]; t < c.cu[size_t(n) + 1]; ++t) {
        double sq = 0, sk = 0;
        for (int64_t d = 0; d < K; ++d) {
          qn[size_t(d)] = q.v[size_t((t * c.h + hq) * K + d)];
          kn[size_t(d)] = k.v[size_t((t * c.h + hq) * K + d)];
          sq += qn[size_t(d)] * qn[size_t(d)], sk += kn[size_t(d)] * kn[size_t(d)];
        }
        if (c.l2)
          for (int64_t d = 0; d < K; ++d) qn[size_t(d)] /= std::sqrt(sq + 1e-6), kn[size_t(d)] /= std::sqrt(sk + 1e-6);
        const double alpha = std::exp(g.v[size_t(t * HO + j)]), b = beta.v[size_t(t * HO + j)];
        for (int64_t a = 0; a < V; ++a) {
          double* row = &M[size_t(a * K)];
          double u = 0;
          for (int64_t d = 0; d < K; ++d) u += (row[d] *= alpha) * kn[size_t(d)];
          const double e = v.v[size_t((t * c.hv + hv) * V + a)] - u;
          double o = 0;
          for (int64_t d = 0; d < K; ++d) o += (row[d] += b * e * kn[size_t(d)]) * qn[size_t(d)];
          ro[size_t((t * HO + j) * V + a)] = scale * o;
        }
      }
      for (int64_t a = 0; a < V; ++a)
        for (int64_t b = 0; b < K; ++b) rfin[size_t(((n * HO + j) * V + a) * K + b)] = M[size_t(a * K + b)];
    }

  Graph gr;
  gr.set_io_data_type(c.io).set_intermediate_data_type(DataType::FLOAT).set_compute_data_type(DataType::FLOAT);
  auto tq = gr.tensor(TensorAttr().set_name("q").set_dim({T, c.h, K}).set_data_type(c.io));
  auto tk = gr.tensor(TensorAttr().set_name("k").set_dim({T, c.h, K}).set_data_type(c.io));
  auto tv = gr.tensor(TensorAttr().set_name("v").set_dim({T, c.hv, V}).set_data_type(c.io));
  auto tg = gr.tensor(TensorAttr().set_name("g").set_dim({T, HO}).set_data_type(DataType::FLOAT));
  auto tb = gr.tensor(TensorAttr().set_name("beta").set_dim({T, HO}).set_data_type(beta.type));
  auto tcu = gr.tensor(TensorAttr().set_name("cu_seqlens").set_dim({N + 1}).set_data_type(DataType::INT32));
  NodeAttrs attrs = NodeAttrs().set_name("gdn").set("use_qk_l2norm", c.l2).set("output_final_state", true);
  if (c.scale > 0) attrs.set("scale", c.scale);
  TensorPtr th0;
  if (c.init) {
    th0 = gr.tensor(TensorAttr().set_name("h0").set_dim({N, HO, V, K}).set_stride(st_stride).set_data_type(c.state_type));
    attrs.input("initial_state", th0);
  }
  auto outs = gr.gdn(tq, tk, tv, tg, tb, tcu, attrs);
  TensorPtr to = outs[0], tfin = outs[1];
  to->set_output(true).set_data_type(c.io);
  tfin->set_output(true).set_data_type(DataType::FLOAT).set_dim({N, HO, V, K}).set_stride(st_stride);

  ASSERT_TRUE(gr.validate().is_good());
  ASSERT_TRUE(gr.create_execution_plans(test::kOurEngines).is_good());
  ASSERT_TRUE(gr.deselect_engines({"cudnn", "reference"}).is_good());
  if (Status s = gr.check_support(); s.is_bad()) FAIL() << s.to_string();
  if (Status s = gr.build_plans(); s.is_bad()) FAIL() << s.to_string();
  std::string engine;
  EXPECT_TRUE(gr.get_engine_name_at_index(gr.selected_plan(), engine).is_good());
  ASSERT_EQ(engine, "cuda");
  std::string plan;
  EXPECT_TRUE(gr.get_plan_name_at_index(gr.selected_plan(), plan).is_good());
  const bool split_applies = split && (K == 64 || K == 128);
  EXPECT_EQ(plan.find("_split") != std::string::npos, split_applies) << plan;
  // The unsplit register-state pass needs v3's prep (the adapter runs the first pass without it).
  const bool mma_applies = mma_pass && !split_applies && (K == 64 || K == 128) && v3 && prep2 && (V == 64 || V == 128);
  EXPECT_EQ(plan.find("_mma") != std::string::npos, mma_applies) << plan;
  const bool prep2_applies = prep2 && (K == 64 || K == 128) && (V == 64 || V == 128);
  EXPECT_EQ(plan.find("_prep2") != std::string::npos, prep2_applies) << plan;
  EXPECT_EQ(plan.find("_prep3") != std::string::npos, v3 && prep2_applies && (mma_applies || split_applies)) << plan;
  EXPECT_EQ(plan.find("_pass3") != std::string::npos, pass3 && (mma_applies || split_applies)) << plan;
  // v4 (the default; OPENDNN_GDN_FWD_V4=0 withholds it): wherever prep3 applies with state slices a multiple of
  // 64 columns: the split's always, the unsplit pass's where V is and OPENDNN_GDN_BV does not force 16 or 32.
  const char* v4_env = std::getenv("OPENDNN_GDN_FWD_V4");
  const char* bv_env = std::getenv("OPENDNN_GDN_BV");
  const bool wide = V % 64 == 0 && (!bv_env || std::atoi(bv_env) % 64 == 0);
  const bool v4 = !(v4_env && std::strcmp(v4_env, "0") == 0) && v3 && prep2_applies &&
                  (split_applies || (mma_applies && wide));
  EXPECT_EQ(plan.find("_v4") != std::string::npos, v4) << plan;

  int64_t ws = 0;
  ASSERT_TRUE(gr.get_workspace_size(ws).is_good());
  DevBuf work{size_t(ws)}, dout{size_t(T * HO * V * bits_of(c.io) / 8)}, dfin{size_t(N * HO * V * K * 4)};
  dout.poison();
  dfin.poison();
  std::unordered_map<TensorPtr, void*> pack = {{tq, q.dev.p},   {tk, k.dev.p},      {tv, v.dev.p},    {tg, g.dev.p},
                                               {tb, beta.dev.p}, {tcu, cu.dev.p},   {to, dout.p},     {tfin, dfin.p}};
  if (th0) pack[th0] = h0.dev.p;
  // The compared part of O and of the final state (gathered into packed [N, HO, V, K] order through the
  // strides the graph settled on), over `heads`.
  const std::vector<int64_t> fs = tfin->get_stride();
  ASSERT_EQ(fs.size(), 4u);
  auto errors = [&](double& eo, double& ef) {
    auto o_all = dout.values(c.io, size_t(T * HO * V));
    auto fin_raw = dfin.values(DataType::FLOAT, size_t(N * HO * V * K));
    std::vector<double> o, want_o, fin, want_fin;
    for (int64_t t = 0; t < T; ++t)
      for (int64_t j : heads)
        for (int64_t a = 0; a < V; ++a) {
          o.push_back(o_all[size_t((t * HO + j) * V + a)]);
          want_o.push_back(ro[size_t((t * HO + j) * V + a)]);
        }
    for (int64_t n = 0; n < N; ++n)
      for (int64_t j : heads)
        for (int64_t a = 0; a < V; ++a)
          for (int64_t b = 0; b < K; ++b) {
            fin.push_back(fin_raw[size_t(n * fs[0] + j * fs[1] + a * fs[2] + b * fs[3])]);
            want_fin.push_back(rfin[size_t(((n * HO + j) * V + a) * K + b)]);
          }
    eo = rel_err(o, want_o), ef = rel_err(fin, want_fin);
    if (std::isfinite(eo) && std::isfinite(ef)) return;
    // Where it went wrong, over every head: the first non-finite O element in (token, head) order.
    size_t bad = 0, first = o_all.size();
    for (size_t i = 0; i < o_all.size(); ++i)
      if (!std::isfinite(o_all[i])) bad++, first = std::min(first, i);
    size_t bad_fin = 0;
    for (double x : fin_raw) bad_fin += !std::isfinite(x);
    if (bad)
      ADD_FAILURE() << bad << " non-finite O elements, the first at token " << first / size_t(HO * V) << " head "
                    << (first / size_t(V)) % size_t(HO) << " column " << first % size_t(V) << "; " << bad_fin
                    << " non-finite final-state elements";
  };
  // Twice: the second run must not depend on workspace left over by the first. With poison_workspace
  // the first run starts from an all-NaN workspace (what a caching allocator may hand out) and is
  // checked too: an element read before this run wrote it shows as NaN.
  if (c.poison_workspace) work.poison();
  double eo = 0, ef = 0;
  for (int rep = 0; rep < 2; ++rep) {
    if (Status s = gr.execute(pack, work.p); s.is_bad()) FAIL() << s.to_string();
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    if (rep == 0 && !c.poison_workspace) continue;
    errors(eo, ef);
    EXPECT_LT(eo, 2e-2) << "O, run " << rep + 1;
    EXPECT_LT(ef, 2e-2) << "final_state, run " << rep + 1;
  }
  std::printf("[ gdn fwd%s%s%s%s%s ] %-28s rms err O %.2e, final state %.2e\n", mma_pass ? " mma" : "",
              prep2 ? " prep2" : "", split ? " split" : "", v3 ? (pass3 ? " v3" : " prep3") : "", v4 ? " v4" : "",
              c.name.c_str(), eo, ef);
}


void check(const Case& c);  // every forward path on one case; defined after check_v3_v4

// The split pass (segments of at least 8 chunks, so sequences over 512 tokens have several; the
// combine runs for three segments and more) with both chunk_preps.
void check_split(const Case& c) {
  for (bool prep2 : {false, true}) check_once(c, false, prep2, true);
  unsetenv("OPENDNN_GDN_SPLIT");
  unsetenv("OPENDNN_GDN_PREP_V2");
}

void unset_v3_env() {
  for (const char* e : {"OPENDNN_GDN_FWD_V2", "OPENDNN_GDN_PREP_V2", "OPENDNN_GDN_SPLIT", "OPENDNN_GDN_PREP_V3",
                        "OPENDNN_GDN_PASS_V3"})
    unsetenv(e);
}

using test::ScopedEnv;

// v3 (chunk_prep_mma v3 with the fused l2norm and gate prefetch, three chunk stages in the register-state
// pass), unsplit and split, with prep2 and the mma pass on, its products on mma.sync (OPENDNN_GDN_FWD_V4=0:
// v4, the default, has check_v4 below).
void check_v3(Case c) {
  ScopedEnv mma("OPENDNN_GDN_FWD_V4", "0");
  c.name = "v3 " + c.name;
  check_once(c, true, true, false, true);
  check_once(c, false, true, true, true);
  unset_v3_env();
}

// Backward: the cuda plan against the reference engine (run on the CPU on the same rounded inputs,
// gradients in FLOAT). Gradients of q, k, v, g, beta and the initial state within 4e-2 (RMS).
// `chunked`: the plan must be the chunked one, gdn_bwd_chunked_v2 (its per-chunk kernel, chunk_bwd_v2), with the
// suffix _bv3 unless OPENDNN_GDN_BWD_V3 is set to anything but 1 (as the adapter reads it), else
// gdn_bwd_token_exact (_sliced where K * V > 16384 unless OPENDNN_GDN_BWD_SLICED=0); `switch_on` sets
// OPENDNN_GDN_BWD_CHUNKED to 1 (else 0) while the plan is built.
// `twice`: a second run on an all-NaN workspace must give the same gradients, bit for bit.
void check_bwd(const Case& c, bool chunked = false, bool switch_on = false, bool twice = false) {
  const char* v3_env = std::getenv("OPENDNN_GDN_BWD_V3");
  const bool v3 = !v3_env || !*v3_env || std::string(v3_env) == "1";
  const std::string bv3 = chunked && v3 ? "_bv3" : "";
  SCOPED_TRACE("bwd " + c.name + (chunked ? " (chunked)" : "") + bv3);
  setenv("OPENDNN_GDN_BWD_CHUNKED", chunked || switch_on ? "1" : "0", 1);
  Problem pb(c, uint32_t(c.cu.back() * 11 + std::max(c.h, c.hv) * 17 + c.k));
  const int64_t T = pb.T, N = pb.N, HO = pb.HO, K = pb.K, V = pb.V;
  Input &q = pb.q, &k = pb.k, &v = pb.v, &g = pb.g, &beta = pb.beta, &cu = pb.cu, &h0 = pb.h0;
  const std::vector<int64_t>& st_stride = pb.st_stride;
  Input d_o(c.io, uniform(size_t(T * HO * V), pb.rng, -1, 1));
  Input dfin(DataType::FLOAT, uniform(size_t(N * HO * V * K), pb.rng, -0.2, 0.2));

  // One backward graph; `oracle` builds it for the reference engine with FLOAT gradients.
  struct Built {
    Graph gr;
    std::vector<TensorPtr> ins, outs;  // q k v g beta cu dO [h0 dfin]; dQ dK dV dG dBeta [dH0]
  };
  auto make = [&](Built& b, bool oracle) {
    b.gr.set_io_data_type(c.io).set_intermediate_data_type(DataType::FLOAT).set_compute_data_type(DataType::FLOAT);
    auto t = [&](const char* name, std::vector<int64_t> dims, DataType type, std::vector<int64_t> stride = {}) {
      TensorAttr a = TensorAttr().set_name(name).set_dim(std::move(dims)).set_data_type(type);
      if (!stride.empty()) a.set_stride(std::move(stride));
      b.ins.push_back(b.gr.tensor(a));
      return b.ins.back();
    };
    auto tq = t("q", {T, c.h, K}, c.io), tk = t("k", {T, c.h, K}, c.io), tv = t("v", {T, c.hv, V}, c.io);
    auto tg = t("g", {T, HO}, DataType::FLOAT), tb = t("beta", {T, HO}, beta.type);
    auto tcu = t("cu_seqlens", {N + 1}, DataType::INT32), tdo = t("dO", {T, HO, V}, c.io);
    NodeAttrs attrs = NodeAttrs().set_name("gdn_bwd").set("use_qk_l2norm", c.l2);
    if (c.scale > 0) attrs.set("scale", c.scale);
    if (c.init) {
      attrs.input("initial_state", t("h0", {N, HO, V, K}, c.state_type, st_stride));
      attrs.input("d_final_state", t("dfin", {N, HO, V, K}, DataType::FLOAT, st_stride));
    }
    auto o = b.gr.gdn_bwd(tq, tk, tv, tg, tb, tcu, tdo, attrs);
    const DataType types[] = {c.io, c.io, c.io, DataType::FLOAT, beta.type, c.state_type};
    for (size_t i = 0; i < (c.init ? 6u : 5u); ++i) {
      o[i]->set_output(true).set_data_type(oracle ? DataType::FLOAT : types[i]);
      b.outs.push_back(o[i]);
    }
    if (c.init) o[5]->set_dim({N, HO, V, K}).set_stride(st_stride);
    const std::vector<std::string> other = oracle ? std::vector<std::string>{"cudnn", "cuda"}
                                                  : std::vector<std::string>{"cudnn", "reference"};
    EXPECT_TRUE(b.gr.validate().is_good());
    EXPECT_TRUE(b.gr.create_execution_plans(test::kOurEngines).is_good());
    EXPECT_TRUE(b.gr.deselect_engines(other).is_good());
    if (Status s = b.gr.check_support(); s.is_bad()) ADD_FAILURE() << s.to_string();
    if (Status s = b.gr.build_plans(); s.is_bad()) ADD_FAILURE() << s.to_string();
  };
  std::vector<const Input*> inputs = {&q, &k, &v, &g, &beta, &cu, &d_o};
  if (c.init) inputs.push_back(&h0), inputs.push_back(&dfin);
  const size_t sizes[] = {size_t(T * c.h * K), size_t(T * c.h * K), size_t(T * c.hv * V), size_t(T * HO),
                          size_t(T * HO), size_t(N * HO * V * K)};

  // The oracle on the CPU.
  std::vector<std::vector<double>> want;
  {
    const Target gpu = default_target();
    set_default_target(Target{});
    Built b;
    make(b, true);
    std::vector<std::vector<float>> host;
    std::unordered_map<TensorPtr, void*> pack;
    for (size_t i = 0; i < inputs.size(); ++i) pack[b.ins[i]] = const_cast<uint8_t*>(inputs[i]->raw.data());
    for (size_t i = 0; i < b.outs.size(); ++i) host.emplace_back(sizes[i], 0.f);
    for (size_t i = 0; i < b.outs.size(); ++i) pack[b.outs[i]] = host[i].data();
    int64_t ws = 0;
    EXPECT_TRUE(b.gr.get_workspace_size(ws).is_good());
    std::vector<uint8_t> work(size_t(ws) + 16);
    Status st = b.gr.execute(pack, work.data());
    set_default_target(gpu);
    ASSERT_TRUE(st.is_good()) << st.to_string();
    for (auto& h : host) want.emplace_back(h.begin(), h.end());
  }

  Built b;
  make(b, false);
  std::string engine, plan;
  EXPECT_TRUE(b.gr.get_engine_name_at_index(b.gr.selected_plan(), engine).is_good());
  ASSERT_EQ(engine, "cuda");
  EXPECT_TRUE(b.gr.get_plan_name_at_index(b.gr.selected_plan(), plan).is_good());
  unsetenv("OPENDNN_GDN_BWD_CHUNKED");
  const char* sliced_env = std::getenv("OPENDNN_GDN_BWD_SLICED");
  const bool sliced = !chunked && K * V > 16384 && (!sliced_env || !*sliced_env || std::string(sliced_env) == "1");
  // Plan names carry the engine.
  // The fixture sets OPENDNN_GDN_BWD_SPLIT=0 (the unsplit walks); only cases whose recompute leaves half the
  // SMs idle unset it (the default takes the split there) or set it to 1.
  const char* split_env = std::getenv("OPENDNN_GDN_BWD_SPLIT");
  const std::string split = chunked && !(split_env && std::string(split_env) == "0") ? "_split" : "";
  EXPECT_EQ(plan, chunked ? "cuda:gdn_bwd_chunked_v2" + bv3 + split
                          : std::string("cuda:gdn_bwd_token_exact") + (sliced ? "_sliced" : ""));
  const DataType types[] = {c.io, c.io, c.io, DataType::FLOAT, beta.type, c.state_type};
  std::vector<std::unique_ptr<DevBuf>> dev;
  std::unordered_map<TensorPtr, void*> pack;
  for (size_t i = 0; i < inputs.size(); ++i) pack[b.ins[i]] = inputs[i]->dev.p;
  for (size_t i = 0; i < b.outs.size(); ++i) {
    dev.push_back(std::make_unique<DevBuf>(sizes[i] * size_t(bits_of(types[i]) / 8)));
    dev.back()->poison();
    pack[b.outs[i]] = dev.back()->p;
  }
  int64_t ws = 0;
  ASSERT_TRUE(b.gr.get_workspace_size(ws).is_good());
  DevBuf work{size_t(ws)};
  if (Status s = b.gr.execute(pack, work.p); s.is_bad()) FAIL() << s.to_string();
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const char* names[] = {"dq", "dk", "dv", "dg", "dbeta", "d_initial_state"};
  for (size_t i = 0; i < b.outs.size(); ++i) {
    const double e = rel_err(dev[i]->values(types[i], sizes[i]), want[i]);
    EXPECT_LT(e, 4e-2) << names[i];
    std::printf("[ gdn bwd%s%s ] %-28s rms err %-16s %.2e\n", chunked ? " chunked" : "", bv3.c_str(),
                c.name.c_str(), names[i], e);
  }
  if (!twice) return;
  std::vector<std::vector<uint8_t>> first;
  for (size_t i = 0; i < b.outs.size(); ++i) first.push_back(dev[i]->get<uint8_t>(dev[i]->n));
  work.poison();
  for (auto& d : dev) d->poison();
  if (Status s = b.gr.execute(pack, work.p); s.is_bad()) FAIL() << s.to_string();
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  for (size_t i = 0; i < b.outs.size(); ++i)
    EXPECT_TRUE(dev[i]->get<uint8_t>(dev[i]->n) == first[i]) << names[i] << " differs between runs";
}

class CudaGdn : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!have_gpu()) GTEST_SKIP() << "no sm_90+ CUDA device";
  }
  // Most cases are small enough for the backward split's default (few CTAs): they keep testing the unsplit
  // walks, and ChunkedBackwardSplitRecompute the split.
  ScopedEnv unsplit_{"OPENDNN_GDN_BWD_SPLIT", "0"};
};

TEST_F(CudaGdn, VarlenGvaL2) {
  check({"varlen GVA HV=2H K=V=64", {0, 100, 100, 300, 364, 365}, 2, 4, 64, 64});
}

TEST_F(CudaGdn, ReverseGroupsStrongDecayNoL2) {
  Case c{"H=2HV strong decay K=V=128", {0, 150, 150, 277}, 4, 2, 128, 128};
  c.l2 = false;
  c.g_lo = -8.0, c.g_hi = -0.5;  // a chunk's cumulative log decay reaches hundreds
  check(c);
}

TEST_F(CudaGdn, HeadDim256Fp16TorchStateLayout) {
  Case c{"fp16 K=V=256 bf16 h0", {0, 70, 200}, 1, 2, 256, 256, DataType::HALF};
  c.state_type = DataType::BFLOAT16;
  c.torch_state_layout = true;
  c.scale = 0.2;
  check(c);
}

TEST_F(CudaGdn, ManyHeadsWideSlices) {
  // N * HO * (V/64) >= 132 CTAs: the widest state slice (64 columns).
  check({"HV=5H K=V=64 wide slices", {0, 64, 129, 129, 300}, 8, 40, 64, 64});
}

TEST_F(CudaGdn, MidHeadsSlices32) {
  // 96 CTAs with 64-column slices, 192 with 32 (on a 132-SM H200): the 32-column path.
  check({"HV=8H K=V=64 32-col slices", {0, 64, 100, 170}, 4, 32, 64, 64});
}

TEST_F(CudaGdn, BenchHeadsK128Slices64) {
  // The benchmark's head dims and grouping (HV = 4H, K = V = 128): 64-column slices in the mma pass,
  // a partial last chunk and a chunk-aligned sequence.
  check({"HV=4H K=V=128 64-col slices", {0, 64, 64, 250}, 8, 32, 128, 128});
}

TEST_F(CudaGdn, FewHeadsLongSequence) {
  // Few heads: 16-column slices (one warp per CTA in the mma pass), 10 chunks in sequence.
  Case c{"H=1 HV=2 K=V=128 640 tokens", {0, 600, 640}, 1, 2, 128, 128};
  c.g_lo = -0.05, c.g_hi = 0.0;  // weak decay: the state carries over many chunks
  check(c);
}

TEST_F(CudaGdn, NoInitialStateMixedDims) {
  Case c{"no h0, K=128 V=64", {0, 1, 66, 130}, 2, 2, 128, 64};
  c.init = false;
  check(c);
}

TEST_F(CudaGdn, SplitFewHeadsLongSequence) {
  // 8 segments of 8 chunks, the last one ending in a partial chunk; weak decay so that the state
  // entering a segment matters to its outputs.
  Case c{"split H=2 HV=4 K=V=128 4090 tokens", {0, 4090}, 2, 4, 128, 128};
  c.g_lo = -0.05, c.g_hi = 0.0;
  check_split(c);
}

TEST_F(CudaGdn, SplitVarlenGvaInitialState) {
  // Sequences of 3, 1, 0, 3 and 2 segments (512 tokens each) with an initial state, HV = 2H.
  Case c{"split varlen HV=2H K=V=64", {0, 1500, 1501, 1501, 3000, 3700}, 2, 4, 64, 64};
  c.g_lo = -0.1, c.g_hi = 0.0;
  check_split(c);
}

TEST_F(CudaGdn, SplitReverseGroupsFp16TorchState) {
  // H = 2HV, fp16, a bf16 initial state in torch's layout; 5 segments then 1.
  Case c{"split H=2HV fp16 K=V=128", {0, 2100, 2200}, 4, 2, 128, 128, DataType::HALF};
  c.state_type = DataType::BFLOAT16;
  c.torch_state_layout = true;
  c.g_lo = -0.2, c.g_hi = -0.01;
  check_split(c);
}

TEST_F(CudaGdn, SplitNoInitialStateMixedDims) {
  Case c{"split no h0 K=128 V=64", {0, 1300, 1400}, 2, 2, 128, 64};
  c.init = false;
  c.g_lo = -0.05, c.g_hi = 0.0;
  check_split(c);
}

// v4 (the default; forced here with OPENDNN_GDN_FWD_V4=1): the v3 pass with wgmma chunk products. Unsplit with
// 64-column slices (one warpgroup a CTA; OPENDNN_GDN_BV=64 so the small cases take it too), then split (bv = 128
// at K = V = 128: two warpgroups a CTA; 64 otherwise). Both with prep3 (v4 needs it) and three stages where
// they fit.
void check_v4(Case c) {
  ScopedEnv v4("OPENDNN_GDN_FWD_V4", "1");
  c.name = "v4 " + c.name;
  {
    ScopedEnv bv("OPENDNN_GDN_BV", "64");
    check_once(c, true, true, false, true);
  }
  check_once(c, false, true, true, true);
  unset_v3_env();
}

// The register-state pass on prep3 (OPENDNN_GDN_PREP_V3 + OPENDNN_GDN_PASS_V3, the default chunk_prep and pass
// depth) with both product paths: mma.sync (check_v3) and wgmma (check_v4, the default).
// GTEST_FILTER='CudaGdn.V3*'
void check_v3_v4(const Case& c) {
  check_v3(c);
  check_v4(c);
}

// The first sequential pass with both chunk_preps, then (K = 64 or 128) the register-state passes on v3's
// prep: mma.sync and wgmma products, unsplit and split. Asking for the register-state pass without v3
// (OPENDNN_GDN_PREP_V3=0) gets the first pass: the mma_pass=true, v3=false runs check that.
void check(const Case& c) {
  for (bool prep2 : {false, true})
    for (bool mma_pass : {false, true}) check_once(c, mma_pass, prep2);
  unset_v3_env();
  if (c.k == 64 || c.k == 128) check_v3_v4(c);
}

TEST_F(CudaGdn, V3V4VarlenGvaL2) {
  // Empty sequences (one at the end), partial chunks, a one-token sequence, HV = 2H, the fused l2norm at
  // K = V = 64.
  check_v3_v4({"varlen GVA HV=2H K=V=64", {0, 100, 100, 300, 364, 365, 365}, 2, 4, 64, 64});
}

TEST_F(CudaGdn, V3V4ReverseGroupsStrongDecayL2) {
  // H = 2HV, gates strong enough that a chunk's cumulative log decay reaches hundreds.
  Case c{"H=2HV strong decay K=V=128", {0, 150, 150, 277}, 4, 2, 128, 128};
  c.g_lo = -8.0, c.g_hi = -0.5;
  check_v3_v4(c);
}

TEST_F(CudaGdn, V3V4StrongDecayNoL2Fp16) {
  // Without l2norm v3 only prefetches gates; fp16 io (the f16 wgmma), a bf16 initial state in torch's layout.
  Case c{"no l2 fp16 strong decay", {0, 64, 65, 200}, 2, 4, 128, 128, DataType::HALF};
  c.l2 = false;
  c.g_lo = -8.0, c.g_hi = -0.5;
  c.state_type = DataType::BFLOAT16;
  c.torch_state_layout = true;
  check_v3_v4(c);
}

TEST_F(CudaGdn, V3V4BenchHeadsK128) {
  // The benchmark's grouping (HV = 4H, K = V = 128), a chunk-aligned and a partial sequence: v3's 64-column
  // slices with three stages in 225 KB.
  check_v3_v4({"HV=4H K=V=128", {0, 64, 64, 250, 700}, 8, 32, 128, 128});
}

TEST_F(CudaGdn, V3V4LongSequenceWeakDecay) {
  // Many chunks and segments (the stage ring wraps many times), a partial last chunk.
  Case c{"H=2 HV=4 K=V=128 4090 tokens", {0, 4090}, 2, 4, 128, 128};
  c.g_lo = -0.05, c.g_hi = 0.0;
  check_v3_v4(c);
}

TEST_F(CudaGdn, V3V4MixedDims) {
  Case c{"no h0 K=128 V=64", {0, 1, 66, 130, 1400}, 2, 2, 128, 64};
  c.init = false;
  check_v3_v4(c);
  Case d{"K=64 V=128 scale 0.5", {0, 64, 65, 200}, 3, 3, 64, 128};
  d.scale = 0.5;
  check_v3_v4(d);
}

// bench/gdn.py's h16_hv64 case (H = 16, HV = 64, K = V = 128, one sequence, its input distributions, FLOAT
// beta, an fp32 initial state in torch's layout) at 1600 tokens: 26 x 16 chunk_prep_mma CTAs, three an SM.
// prep3 alone and v3 on mma.sync, each first run on an all-NaN workspace, then v4; the reference covers four
// heads (every q/k head group position). GTEST_FILTER=CudaGdn.V3*Bench*
Case bench_case(const char* name) {
  Case c{name, {0, 1600}, 16, 64, 128, 128};
  c.bench_data = true;
  c.beta_f32 = true;
  c.torch_state_layout = true;
  c.poison_workspace = true;
  c.heads = {0, 21, 42, 63};
  return c;
}

TEST_F(CudaGdn, V3V4BenchGates) {
  {
    ScopedEnv mma("OPENDNN_GDN_FWD_V4", "0");
    const Case c = bench_case("v3 bench H16 HV64 1600 tok");
    check_once(c, true, true, false, true, false);  // prep3 alone (two stages)
    check_once(c, true, true, false, true);         // v3
    check_once(c, false, true, true, true);         // v3, split
    unset_v3_env();
  }
  check_v4(bench_case("bench H16 HV64 1600 tok"));
}

TEST_F(CudaGdn, V3BenchGatesVariants) {
  // One change to bench_case at a time (which input makes the difference if V3V4BenchGates fails).
  ScopedEnv mma("OPENDNN_GDN_FWD_V4", "0");
  Case c = bench_case("v3 bench, bf16 beta");
  c.beta_f32 = false;
  check_once(c, true, true, false, true, false);
  c = bench_case("v3 bench, h0 [N,HO,V,K]");
  c.torch_state_layout = false;
  check_once(c, true, true, false, true, false);
  c = bench_case("v3 bench, 60 tokens");  // one chunk: no state from an earlier one
  c.cu = {0, 60};
  check_once(c, true, true, false, true, false);
  c = bench_case("v3 bench, H2 HV8");  // 52 prep CTAs: one an SM
  c.h = 2, c.hv = 8, c.heads = {0, 3, 5, 7};
  check_once(c, true, true, false, true, false);
  c = bench_case("v3 bench, no poison");
  c.poison_workspace = false;
  check_once(c, true, true, false, true, false);
  unset_v3_env();
}

TEST_F(CudaGdn, V3HeadDim256FallsBack) {
  // K = V = 256: neither v3 kernel applies; the plan must be the first kernels', still correct.
  check_v3({"K=V=256 falls back", {0, 70, 200}, 1, 2, 256, 256});
}

TEST_F(CudaGdn, V4FewHeadsSplitInitialState) {
  // The few-heads grouping (H = 4, HV = 8) on two sequences with an initial state: the split's
  // summaries (S and M columns), the combine and the apply all on the wgmma pass.
  Case c{"H=4 HV=8 K=V=128 varlen", {0, 2600, 2601, 3300}, 4, 8, 128, 128};
  c.g_lo = -0.1, c.g_hi = 0.0;
  check_v4(c);
}

TEST_F(CudaGdn, V4Off) {
  // The switch at 0: no v4 plan (the v3 pass with mma.sync products).
  ScopedEnv off("OPENDNN_GDN_FWD_V4", "0");
  check_once({"v4 off HV=4H K=V=128", {0, 250}, 2, 8, 128, 128}, true, true, false, true);
  unset_v3_env();
}

}  // namespace

namespace {

TEST_F(CudaGdn, BackwardVarlenGva) {
  check_bwd({"varlen GVA HV=2H K=V=64", {0, 100, 100, 230}, 2, 4, 64, 64});
}

TEST_F(CudaGdn, BackwardReverseGroupsStrongDecay) {
  Case c{"H=2HV strong decay K=V=32", {0, 70, 71, 135}, 4, 2, 32, 32};
  c.g_lo = -8.0, c.g_hi = -0.5;
  c.torch_state_layout = true;
  check_bwd(c);
}

TEST_F(CudaGdn, BackwardNoStateFp16) {
  Case c{"fp16 no h0 K=128 V=64", {0, 1, 66}, 2, 2, 128, 64, DataType::HALF};
  c.init = false;
  c.l2 = false;
  check_bwd(c);
}

}  // namespace

// The chunked backward (the default for K and V in {64, 128}: chunk_bwd_v2 with the backward's v3, three chunk
// stages in state_bwd and in the recompute's register-state pass, and the lean post) on the exact backward's
// kinds of cases: varlen with empty and partial chunks, GVA both ways, strong decay, initial state, no l2norm;
// plus one-warp 16-column slices, K = V = 64 with empty sequences at both ends and with many heads, tokens
// before the first sequence, and the benchmark's input distributions. Which ring each case takes (small
// grids: both passes three stages; WideSlices: 192 CTAs > 132 SMs, so the recompute keeps two while
// state_bwd, one CTA an SM at K = 128 either way, takes three; K = 64 above the SM count: both keep two) is
// in the comments. Most cases also run with two stages (check_chunked).
namespace {

// The case on the default chunked plan, then with two chunk stages and the full post (OPENDNN_GDN_BWD_V3=0, the
// backward before v3, still selectable).
void check_chunked(Case c) {
  check_bwd(c, true);
  ScopedEnv two_stages("OPENDNN_GDN_BWD_V3", "0");
  c.name = "two-stage " + c.name;
  check_bwd(c, true);
}

TEST_F(CudaGdn, ChunkedBackwardVarlenGva) {
  check_chunked({"varlen GVA HV=2H K=V=64", {0, 100, 100, 230}, 2, 4, 64, 64});
}

// The backward split (the recompute and state_bwd by segments of 8 chunks; the default where the unsplit CTAs
// leave half the SMs idle). First case, under the default: both sequences span three segments (the reverse
// combine runs), the last ones ending in partial chunks; second, OPENDNN_GDN_BWD_SPLIT=1: two segments each
// around an empty sequence (its dh0 is dFinal). Weak decay, so that the state at a segment boundary matters;
// with the two-stage variant too (check_chunked).
TEST_F(CudaGdn, ChunkedBackwardSplitRecompute) {
  ScopedEnv by_default("OPENDNN_GDN_BWD_SPLIT", nullptr);
  Case c{"split recompute H=1 HV=2 K=V=128", {0, 1500, 2700}, 1, 2, 128, 128};
  c.g_lo = -0.05, c.g_hi = 0.0;
  check_chunked(c);
  ScopedEnv split("OPENDNN_GDN_BWD_SPLIT", "1");
  Case d{"split recompute HV=2H K=V=64 empty", {0, 700, 700, 1300}, 2, 4, 64, 64};
  d.g_lo = -0.1, d.g_hi = 0.0;
  d.torch_state_layout = true;
  check_chunked(d);
}

TEST_F(CudaGdn, ChunkedBackwardReverseGroupsStrongDecay) {
  Case c{"H=2HV strong decay K=V=128", {0, 70, 71, 135}, 4, 2, 128, 128};
  c.g_lo = -8.0, c.g_hi = -0.5;
  c.torch_state_layout = true;
  check_chunked(c);
}

TEST_F(CudaGdn, ChunkedBackwardNoStateFp16) {
  Case c{"fp16 no h0 K=128 V=64", {0, 1, 66}, 2, 2, 128, 64, DataType::HALF};
  c.init = false;
  c.l2 = false;
  check_chunked(c);
}

TEST_F(CudaGdn, ChunkedBackwardLongSequencesK128) {
  // Chunks carried over many steps (weak decay), a chunk-aligned and a ragged sequence, HV = 4H, the
  // benchmark's head dims, a bf16 initial state. 10 and 6 chunks: the three-stage ring wraps several times,
  // and its tail (empty groups) at both ends.
  Case c{"HV=4H K=V=128 long", {0, 640, 640, 1000}, 2, 8, 128, 128};
  c.g_lo = -0.05, c.g_hi = 0.0;
  c.state_type = DataType::BFLOAT16;
  check_chunked(c);
}

TEST_F(CudaGdn, ChunkedBackwardWideSlices) {
  // Enough heads for 64-column state slices (four warps a CTA in state_bwd and in the recompute's
  // register-state pass), several sequences, an empty one and partial chunks: the conditions under which
  // the forward's pass without v3 went wrong with wide slices (session 7).
  check_chunked({"HV=4H K=V=128 wide slices", {0, 64, 64, 250}, 8, 32, 128, 128});
}

TEST_F(CudaGdn, ChunkedBackwardMixedDims) {
  Case c{"K=64 V=128 scale 0.5", {0, 64, 65, 200}, 3, 3, 64, 128};
  c.scale = 0.5;
  check_chunked(c);
  // The same case on the token-exact plan: both must agree with the reference.
  check_bwd(c, false);
}

TEST_F(CudaGdn, ChunkedBackwardDeclinesHeadDim32) {
  // K = V = 32: the chunked plan declines, the token-exact one runs under the switch.
  check_bwd({"K=V=32 under the switch", {0, 70}, 1, 1, 32, 32}, false, true);
}

TEST_F(CudaGdn, ChunkedBackwardSlices16) {
  // One-warp CTAs (bv = 16), 3 x 4 x 8 = 96 of them: three stages in both passes; several sequences with
  // partial chunks, fp16.
  ScopedEnv bv("OPENDNN_GDN_BWD_BV", "16");
  check_bwd({"bv16 fp16 HV=4H K=V=128", {0, 200, 457, 458}, 1, 4, 128, 128, DataType::HALF}, true);
}

TEST_F(CudaGdn, ChunkedBackwardK64GvaEmptyEnds) {
  Case c{"HV=4H K=V=64 empty ends", {0, 0, 17, 81, 81, 209, 209}, 2, 8, 64, 64};
  c.g_lo = -6.0, c.g_hi = -0.2;
  check_chunked(c);
}

TEST_F(CudaGdn, ChunkedBackwardManyHeadsK64) {
  // 2 x 64 heads x 1 slice = 128 CTAs at bv = 64 (K = 64: 92 KB at two stages, two CTAs an SM would fit):
  // under the SM count, so both passes take three stages.
  check_bwd({"HV=4H K=V=64 many heads", {0, 130, 300}, 16, 64, 64, 64}, true);
}

TEST_F(CudaGdn, ChunkedBackwardLeadingTokens) {
  // 40 tokens before the first sequence: their gradients must be zero (the outputs start poisoned). At HV = 2H
  // (chunk_bwd_v2 writes dv) the lean post has no dv rows, so the dq rows of those tokens zero dv, q/k head h
  // taking value heads [2h, 2h + 2); at H = 2HV (dv summed in post) it keeps its dv rows, with 8-byte stores.
  // Two stages and the full post first, so that a failure of both points at the leading tokens rather than
  // at v3.
  for (auto [h, hv] : {std::pair<int64_t, int64_t>{2, 4}, {4, 2}}) {
    Case c{"leading tokens H=" + std::to_string(h) + " HV=" + std::to_string(hv) + " K=V=64", {40, 100, 230}, h, hv,
           64, 64};
    {
      ScopedEnv two_stages("OPENDNN_GDN_BWD_V3", "0");
      check_bwd(c, true);
    }
    check_bwd(c, true);
  }
}

TEST_F(CudaGdn, ChunkedBackwardBenchData) {
  // The benchmark's inputs (beta in FLOAT).
  Case c{"bench data HV=4H K=V=128", {0, 300, 577}, 2, 8, 128, 128};
  c.bench_data = true;
  c.beta_f32 = true;
  check_chunked(c);
}

}  // namespace

// The V-sliced token-exact backward (the default where K * V > 16384, which the unsliced sweep declines; pinned with
// OPENDNN_GDN_BWD_SLICED=1):
// K = V = 256, K = 256 V = 128 and K = 128 V = 256. Which slicing each case takes on a 132-SM H200 (the widest,
// 16384 / K rows, unless few (sequence, head) items let thinner ones, down to 16 rows, fill the grid) is in the
// comments. GTEST_FILTER='CudaGdn.SlicedBackward*'
namespace {

void check_bwd_sliced(const Case& c, bool twice = false) {
  ScopedEnv sliced("OPENDNN_GDN_BWD_SLICED", "1");
  check_bwd(c, false, false, twice);
}

TEST_F(CudaGdn, SlicedBackwardVarlenGva) {
  // HV = 2H, an empty sequence, partial chunks, fp32 h0, l2norm; 3 x 8 items: 4 slices of 64 rows.
  check_bwd_sliced({"sliced HV=2H K=V=256 varlen", {0, 70, 70, 200}, 4, 8, 256, 256});
}

TEST_F(CudaGdn, SlicedBackwardReverseGroupsFp16NoState) {
  // H = 2HV, fp16, no initial state, no l2norm, a one-token sequence; 3 x 2 items: 16 slices of 16 rows.
  Case c{"sliced H=2HV fp16 no h0 K=V=256", {0, 1, 66, 130}, 2, 1, 256, 256, DataType::HALF};
  c.init = false;
  c.l2 = false;
  check_bwd_sliced(c);
}

TEST_F(CudaGdn, SlicedBackwardK256V128) {
  // A bf16 initial state in torch's layout, strong decay, scale 0.5; 2 x 2 items: 8 slices of 16 rows.
  Case c{"sliced K=256 V=128 bf16 h0", {0, 64, 150}, 1, 2, 256, 128};
  c.state_type = DataType::BFLOAT16;
  c.torch_state_layout = true;
  c.g_lo = -8.0, c.g_hi = -0.5;
  c.scale = 0.5;
  check_bwd_sliced(c);
}

TEST_F(CudaGdn, SlicedBackwardK128V256Fp16) {
  // fp16, HV = 2H, an empty sequence; 3 x 16 items: 2 slices of 128 rows.
  Case c{"sliced K=128 V=256 fp16", {0, 100, 100, 165}, 8, 16, 128, 256, DataType::HALF};
  check_bwd_sliced(c);
}

TEST_F(CudaGdn, SlicedBackwardReproducible) {
  // 2 x 4 items: 16 slices of 16 rows, the longest sums; the second run on an all-NaN workspace, bitwise equal.
  Case c{"sliced K=V=256 twice", {0, 90, 150}, 2, 4, 256, 256};
  c.g_lo = -0.05, c.g_hi = 0.0;
  check_bwd_sliced(c, true);
}

}  // namespace
