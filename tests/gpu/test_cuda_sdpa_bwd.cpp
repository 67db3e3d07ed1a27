// SPDX-License-Identifier: Apache-2.0
// The cuda engine's SDPA backward against a double-precision host computation of the reference
// engine's semantics (src/engines/reference/sdpa.cpp): head dims, causal alignments, GQA/MQA, odd
// lengths, sliding windows, per-batch lengths, BSHD strides, and bitwise reproducibility.
// Needs an NVIDIA GPU (sm_90+); skips elsewhere.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <random>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/dtype_convert.h"
#include "engines/cuda/cuda_engine.h"
#include "opendnn/opendnn.h"
#include "support/device.h"

using namespace opendnn;

namespace {

bool have_gpu() { return test::have_sm90_gpu(); }
using test::DevBuf;

struct Case {
  int64_t B = 1, Hq = 2, Hk = 2, Sq = 128, Skv = 128, Dqk = 64, Dv = 64;
  DataType dt = DataType::BFLOAT16;
  bool causal = false, bottom_right = false;
  int64_t left = 0;  // sliding window when > 0
  std::vector<int32_t> len_q, len_kv;  // padding mask when set
  bool bshd = false;
  bool thd = false;  // token-packed with ragged offsets (needs len_q/len_kv)
  bool v2 = false;   // plan with OPENDNN_SDPA_BWD_V2=1 set and require the v2 (wgmma) plan
  bool v2_two_pass = false;  // with v2: OPENDNN_SDPA_BWD_V2_TWO_PASS=1 too (separate dQ kernel)
  bool v3 = false;           // with v2: OPENDNN_SDPA_BWD_V3=1 too (bulk dQ reductions, loads behind T1/T2)
  bool v4 = false;           // with v2: OPENDNN_SDPA_BWD_V4=1 too (TMA producer warp, warpgroup turns)
  bool v4_no_turns = false;  // with v4: OPENDNN_SDPA_BWD_V4_TURNS=0
  // OPENDNN_SDPA_BWD_D256_V2=1 while planning (unset otherwise); with v2 the d256 wgmma plan is required,
  // without it (V2 then unset, not 0) the first kernel is, i.e. the d256 plan must decline the problem.
  bool d256v2 = false;
  bool d256_plain_turns = false;  // with d256v2: OPENDNN_SDPA_BWD_D256_V2_EARLY_TURNS=0
  bool d256v4 = false;            // with d256v2: OPENDNN_SDPA_BWD_D256_V4=1 (TMA producer warp, dQ writer warps), else =0
  // Bytes allocated past the end of every input buffer, all 0xff (NaN) when tail_nan, else zeros: a
  // kernel reading past a tensor's last row then fails visibly (NaN) or deterministically passes.
  int64_t tail = 0;
  bool tail_nan = false;
  // sink_token (logit sink_of(h) per query head) with dSink_token as an output; OPENDNN_SDPA_BWD_SINK=1.
  bool sink = false;
};

double sink_of(int64_t h) { return 0.5 - 0.25 * double(h); }  // exact in fp32

using test::ScopedEnv;

Case shape(int64_t B, int64_t Hq, int64_t Hk, int64_t Sq, int64_t Skv, int64_t Dqk, int64_t Dv,
           DataType dt = DataType::BFLOAT16) {
  Case c;
  c.B = B, c.Hq = Hq, c.Hk = Hk, c.Sq = Sq, c.Skv = Skv, c.Dqk = Dqk, c.Dv = Dv, c.dt = dt;
  return c;
}

// A [B,H,S,D] tensor on host (doubles, exactly representable in the element type) and its strides.
// With `lens` (THD) sequences are packed token-major one after another and `base` holds each
// sequence's first element: the ragged offsets.
struct T4 {
  int64_t B, H, S, D;
  std::vector<int64_t> st;
  std::vector<int32_t> base;
  std::vector<double> v;  // indexed by offset (storage order)
  T4(int64_t b, int64_t h, int64_t s, int64_t d, bool bshd, const std::vector<int32_t>* lens = nullptr)
      : B(b), H(h), S(s), D(d),
        st(bshd || lens ? std::vector<int64_t>{s * h * d, d, h * d, 1} : std::vector<int64_t>{h * s * d, s * d, d, 1}) {
    int64_t elems = b * h * s * d;
    if (lens) {
      elems = 0;
      for (int32_t n : *lens) {
        base.push_back(int32_t(elems));
        elems += n * h * d;
      }
      base.push_back(int32_t(elems));
    }
    v.assign(size_t(elems), 0.0);
  }
  double& at(int64_t b, int64_t h, int64_t s, int64_t d) {
    return v[size_t((base.empty() ? b * st[0] : base[size_t(b)]) + h * st[1] + s * st[2] + d)];
  }
  std::vector<uint16_t> bits(DataType dt) const {
    std::vector<uint16_t> r(v.size());
    for (size_t i = 0; i < v.size(); ++i) r[i] = dt == DataType::HALF ? double_to_half(v[i]) : double_to_bf16(v[i]);
    return r;
  }
};

void fill_random(T4& t, DataType dt, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> d(-1.0, 1.0);
  for (auto& x : t.v) x = round_to(dt, d(rng));
}

struct Ref {
  T4 o, dq, dk, dv;
  std::vector<float> lse;  // [B,Hq,Sq]
  std::vector<double> dsink;  // [Hq] with a sink
};

// Forward (O rounded to the element type, Stats to fp32) and backward in double, as the reference
// engine defines them; D_i is taken from the rounded O, as the kernels do.
Ref reference(const Case& c, T4& q, T4& k, T4& v, T4& dO, double scale) {
  const std::vector<int32_t>* lq = c.thd ? &c.len_q : nullptr;
  const std::vector<int32_t>* lkv = c.thd ? &c.len_kv : nullptr;
  Ref r{T4(c.B, c.Hq, c.Sq, c.Dv, c.bshd, lq), T4(c.B, c.Hq, c.Sq, c.Dqk, c.bshd, lq),
        T4(c.B, c.Hk, c.Skv, c.Dqk, c.bshd, lkv), T4(c.B, c.Hk, c.Skv, c.Dv, c.bshd, lkv),
        std::vector<float>(size_t(c.B * c.Hq * c.Sq), 0.f), std::vector<double>(size_t(c.Hq), 0.0)};
  const int64_t grp = c.Hq / c.Hk;
  std::vector<double> s(size_t(c.Skv)), p(size_t(c.Skv));
  std::vector<char> vis(size_t(c.Skv));
  for (int64_t b = 0; b < c.B; ++b) {
    const int64_t sq = c.len_q.empty() ? c.Sq : c.len_q[size_t(b)];
    const int64_t skv = c.len_kv.empty() ? c.Skv : c.len_kv[size_t(b)];
    for (int64_t h = 0; h < c.Hq; ++h) {
      const int64_t hk = h / grp;
      for (int64_t i = 0; i < sq; ++i) {
        const int64_t ia = c.bottom_right ? i + skv - sq : i;
        double m = -std::numeric_limits<double>::infinity();
        for (int64_t j = 0; j < c.Skv; ++j) {
          vis[size_t(j)] = j < skv && !(c.causal && j > ia) && !(c.left > 0 && j <= ia - c.left);
          if (!vis[size_t(j)]) continue;
          double acc = 0;
          for (int64_t d = 0; d < c.Dqk; ++d) acc += q.at(b, h, i, d) * k.at(b, hk, j, d);
          s[size_t(j)] = acc * scale;
          m = std::max(m, s[size_t(j)]);
        }
        if (c.sink) m = std::max(m, sink_of(h));  // the sink joins the softmax denominator only
        double sum = c.sink ? std::exp(sink_of(h) - m) : 0.0;
        for (int64_t j = 0; j < c.Skv; ++j)
          if (vis[size_t(j)]) sum += std::exp(s[size_t(j)] - m);
        const double lse = sum > 0 ? m + std::log(sum) : -std::numeric_limits<double>::infinity();
        const float lsef = float(lse);
        r.lse[size_t((b * c.Hq + h) * c.Sq + i)] = lsef;
        for (int64_t j = 0; j < c.Skv; ++j) p[size_t(j)] = vis[size_t(j)] ? std::exp(s[size_t(j)] - double(lsef)) : 0.0;
        for (int64_t d = 0; d < c.Dv; ++d) {
          double acc = 0;
          // Visible keys only: in THD the rows past the last sequence are outside the buffer.
          for (int64_t j = 0; j < c.Skv; ++j)
            if (vis[size_t(j)]) acc += p[size_t(j)] * v.at(b, hk, j, d);
          r.o.at(b, h, i, d) = round_to(c.dt, acc);
        }
        double Di = 0;
        for (int64_t d = 0; d < c.Dv; ++d) Di += dO.at(b, h, i, d) * r.o.at(b, h, i, d);
        if (c.sink) r.dsink[size_t(h)] -= std::exp(sink_of(h) - double(lsef)) * Di;
        for (int64_t j = 0; j < c.Skv; ++j) {
          if (!vis[size_t(j)]) continue;
          double dp = 0;
          for (int64_t d = 0; d < c.Dv; ++d) dp += dO.at(b, h, i, d) * v.at(b, hk, j, d);
          const double ds = p[size_t(j)] * (dp - Di);
          for (int64_t d = 0; d < c.Dqk; ++d) {
            r.dq.at(b, h, i, d) += scale * ds * k.at(b, hk, j, d);
            r.dk.at(b, hk, j, d) += scale * ds * q.at(b, h, i, d);
          }
          for (int64_t d = 0; d < c.Dv; ++d) r.dv.at(b, hk, j, d) += p[size_t(j)] * dO.at(b, h, i, d);
        }
      }
    }
  }
  return r;
}

TensorPtr input(Graph& g, const char* name, const T4& t, DataType dt) {
  return g.tensor(TensorAttr().set_name(name).set_dim({t.B, t.H, t.S, t.D}).set_stride(t.st).set_data_type(dt));
}

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

// (b, h, s, d) of storage offset i of t, as text.
std::string where(const T4& t, int64_t i) {
  int64_t b = 0;
  if (t.base.empty()) {
    b = i / t.st[0];
    i -= b * t.st[0];
  } else {
    while (b + 1 < int64_t(t.base.size()) - 1 && i >= t.base[size_t(b + 1)]) ++b;
    i -= t.base[size_t(b)];
  }
  const bool h_outer = t.st[1] > t.st[2];
  const int64_t outer = i / (h_outer ? t.st[1] : t.st[2]), rest = i % (h_outer ? t.st[1] : t.st[2]);
  const int64_t inner = rest / (h_outer ? t.st[2] : t.st[1]), d = rest % (h_outer ? t.st[2] : t.st[1]);
  return "(b " + std::to_string(b) + ", h " + std::to_string(h_outer ? outer : inner) + ", s " +
         std::to_string(h_outer ? inner : outer) + ", d " + std::to_string(d) + ")";
}

// Worst |got - want| / (atol + rtol |want|) over a tensor (> 1 fails); got is raw device storage. On a
// failure `why` says where: the worst element, and the first and last non-finite ones with their count
// (which rows go wrong is what tells a kernel's bounds bug apart from a wrong operand).
double violation(const std::vector<uint8_t>& got, const T4& want, DataType dt, double atol, double rtol,
                 std::string* why = nullptr) {
  double worst = 0;
  int64_t worst_at = -1, bad = 0, first_bad = -1, last_bad = -1;
  const uint16_t* g = reinterpret_cast<const uint16_t*>(got.data());
  for (size_t i = 0; i < want.v.size(); ++i) {
    const double x = dt == DataType::HALF ? half_to_double(g[i]) : bf16_to_double(g[i]);
    if (!std::isfinite(x)) {
      if (bad++ == 0) first_bad = int64_t(i);
      last_bad = int64_t(i);
    }
    const double e = std::fabs(x - want.v[i]) / (atol + rtol * std::fabs(want.v[i]));
    if (!(e <= worst)) {
      worst = std::isnan(e) ? std::numeric_limits<double>::infinity() : e;
      worst_at = int64_t(i);
    }
  }
  if (why && worst > 1.0) {
    const double x = dt == DataType::HALF ? half_to_double(g[worst_at]) : bf16_to_double(g[worst_at]);
    *why = "worst at " + where(want, worst_at) + ": got " + std::to_string(x) + ", want " +
           std::to_string(want.v[size_t(worst_at)]) + "; " + std::to_string(bad) + " non-finite";
    if (bad > 0) *why += ", first at " + where(want, first_bad) + ", last at " + where(want, last_bad);
  }
  return worst;
}

void run_case(const Case& c, bool check_reproducible = false) {
  if (!have_gpu()) GTEST_SKIP() << "needs an sm_90 GPU";
  const double scale = 1.0 / std::sqrt(double(c.Dqk));
  const std::vector<int32_t>* lq = c.thd ? &c.len_q : nullptr;
  const std::vector<int32_t>* lkv = c.thd ? &c.len_kv : nullptr;
  T4 q(c.B, c.Hq, c.Sq, c.Dqk, c.bshd, lq), k(c.B, c.Hk, c.Skv, c.Dqk, c.bshd, lkv),
      v(c.B, c.Hk, c.Skv, c.Dv, c.bshd, lkv), dO(c.B, c.Hq, c.Sq, c.Dv, c.bshd, lq);
  fill_random(q, c.dt, 1);
  fill_random(k, c.dt, 2);
  fill_random(v, c.dt, 3);
  fill_random(dO, c.dt, 4);
  Ref r = reference(c, q, k, v, dO, scale);

  Graph g;
  g.set_io_data_type(c.dt).set_intermediate_data_type(DataType::FLOAT).set_compute_data_type(DataType::FLOAT);
  auto Q = input(g, "q", q, c.dt), K = input(g, "k", k, c.dt), V = input(g, "v", v, c.dt);
  auto O = input(g, "o", r.o, c.dt), DO = input(g, "dO", dO, c.dt);
  auto ST = g.tensor(TensorAttr().set_name("stats").set_dim({c.B, c.Hq, c.Sq, 1}).set_data_type(DataType::FLOAT));
  NodeAttrs at;
  at.set_name("sdpa_bwd").set("attn_scale_value", scale).set("use_deterministic_algorithm", true);
  if (c.causal) at.set("right_bound", int64_t(0));
  if (c.left > 0) at.set("left_bound", c.left);
  if (c.bottom_right) at.set("diagonal_alignment", "BOTTOM_RIGHT");
  TensorPtr SK;
  if (c.sink) {
    SK = g.tensor(TensorAttr().set_name("sink").set_dim({1, c.Hq, 1, 1}).set_data_type(DataType::FLOAT));
    at.input("sink_token", SK);
  }
  TensorPtr SQ, SKV;
  if (!c.len_q.empty()) {
    at.set("use_padding_mask", true);
    SQ = g.tensor(TensorAttr().set_name("seq_q").set_dim({c.B, 1, 1, 1}).set_data_type(DataType::INT32));
    SKV = g.tensor(TensorAttr().set_name("seq_kv").set_dim({c.B, 1, 1, 1}).set_data_type(DataType::INT32));
    at.input("seq_len_q", SQ).input("seq_len_kv", SKV);
  }
  auto outs = g.sdpa_backward(Q, K, V, O, DO, ST, at);
  outs[0]->set_output(true).set_stride(q.st);
  outs[1]->set_output(true).set_stride(k.st);
  outs[2]->set_output(true).set_stride(v.st);
  if (c.sink) outs[4]->set_output(true);  // dSink_token
  TensorPtr RQ, RKV;  // THD ragged offsets (elements), shared by the tensors of each side
  if (c.thd) {
    ASSERT_EQ(c.Dqk, c.Dv) << "the test's THD offsets assume one head dim";
    RQ = g.tensor(TensorAttr().set_name("rag_q").set_dim({c.B + 1, 1, 1, 1}).set_data_type(DataType::INT32));
    RKV = g.tensor(TensorAttr().set_name("rag_kv").set_dim({c.B + 1, 1, 1, 1}).set_data_type(DataType::INT32));
    for (const TensorPtr& x : {Q, O, DO, outs[0]}) x->set_ragged_offset(RQ);
    for (const TensorPtr& x : {K, V, outs[1], outs[2]}) x->set_ragged_offset(RKV);
  }
  {
    // Set only while planning and building (where the adapter reads them); the previous values return.
    // Cases without v2 pin the first kernels (v2 is the default wherever it applies).
    bool built = false;
    {
      ScopedEnv on("OPENDNN_SDPA_BWD_V2", c.v2 ? "1" : c.d256v2 ? nullptr : "0");
      ScopedEnv d256_env("OPENDNN_SDPA_BWD_D256_V2", c.d256v2 ? "1" : nullptr);
      ScopedEnv d256_turns_env("OPENDNN_SDPA_BWD_D256_V2_EARLY_TURNS", c.d256_plain_turns ? "0" : "1");
      ScopedEnv d256_v4_env("OPENDNN_SDPA_BWD_D256_V4", c.d256v4 ? "1" : "0");  // v4 is the default: 0 tests v2
      ScopedEnv two_pass("OPENDNN_SDPA_BWD_V2_TWO_PASS", c.v2_two_pass ? "1" : nullptr);
      // v4 + v3 is the default schedule: cases that do not ask for them pin the plain fused kernel.
      ScopedEnv v3_env("OPENDNN_SDPA_BWD_V3", c.v3 ? "1" : "0");
      ScopedEnv v4_env("OPENDNN_SDPA_BWD_V4", c.v4 ? "1" : "0");
      ScopedEnv turns_env("OPENDNN_SDPA_BWD_V4_TURNS", c.v4_no_turns ? "0" : nullptr);
      ScopedEnv sink_env("OPENDNN_SDPA_BWD_SINK", c.sink ? "1" : nullptr);
      built = build_on_cuda(g);
    }
    ASSERT_TRUE(built);
    std::string plan;
    EXPECT_TRUE(g.get_plan_name_at_index(g.selected_plan(), plan).is_good());
    ASSERT_EQ(plan, std::string(c.v2 ? "cuda:sdpa_bwd_v2_d" : "cuda:sdpa_bwd_d") + std::to_string(c.Dqk));
  }

  const size_t es = 2, tail = size_t(c.tail);
  DevBuf bq(q.v.size() * es + tail), bk(k.v.size() * es + tail), bv(v.v.size() * es + tail),
      bo(r.o.v.size() * es + tail), bdo(dO.v.size() * es + tail), bst(r.lse.size() * 4 + tail), bdq(q.v.size() * es),
      bdk(k.v.size() * es), bdv(v.v.size() * es), bsq(size_t(c.B) * 4), bskv(size_t(c.B) * 4),
      brq(size_t(c.B + 1) * 4), brkv(size_t(c.B + 1) * 4), bsink(size_t(c.Hq) * 4), bdsink(size_t(c.Hq) * 4);
  if (tail > 0) {
    for (DevBuf* d : {&bq, &bk, &bv, &bo, &bdo, &bst}) ASSERT_EQ(cudaMemset(d->p, c.tail_nan ? 0xff : 0, d->n), cudaSuccess);
  }
  bq.put(q.bits(c.dt));
  bk.put(k.bits(c.dt));
  bv.put(v.bits(c.dt));
  bo.put(r.o.bits(c.dt));
  bdo.put(dO.bits(c.dt));
  bst.put(r.lse);
  std::unordered_map<TensorPtr, void*> pack = {{Q, bq.p}, {K, bk.p}, {V, bv.p}, {O, bo.p}, {DO, bdo.p},
                                               {ST, bst.p}, {outs[0], bdq.p}, {outs[1], bdk.p}, {outs[2], bdv.p}};
  if (SQ) {
    bsq.put(c.len_q);
    bskv.put(c.len_kv);
    pack[SQ] = bsq.p;
    pack[SKV] = bskv.p;
  }
  if (SK) {
    std::vector<float> sinks(size_t(c.Hq));
    for (int64_t h = 0; h < c.Hq; ++h) sinks[size_t(h)] = float(sink_of(h));
    bsink.put(sinks);
    pack[SK] = bsink.p;
    pack[outs[4]] = bdsink.p;
  }
  if (RQ) {
    brq.put(q.base);
    brkv.put(k.base);
    pack[RQ] = brq.p;
    pack[RKV] = brkv.p;
  }
  int64_t ws_bytes = 0;
  ASSERT_TRUE(g.get_workspace_size(ws_bytes).is_good());
  DevBuf ws{size_t(ws_bytes)};

  auto run = [&]() -> std::array<std::vector<uint8_t>, 3> {
    for (DevBuf* d : {&bdq, &bdk, &bdv}) EXPECT_EQ(cudaMemset(d->p, 0xff, d->n), cudaSuccess);  // NaN poison
    Status s = g.execute(pack, ws.p);
    EXPECT_TRUE(s.is_good()) << s.to_string();
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    return {bdq.get<uint8_t>(bdq.n), bdk.get<uint8_t>(bdk.n), bdv.get<uint8_t>(bdv.n)};
  };
  auto first = run();
  std::string why[3];
  EXPECT_LE(violation(first[0], r.dq, c.dt, 2e-2, 2e-2, &why[0]), 1.0) << "dQ " << why[0];
  EXPECT_LE(violation(first[1], r.dk, c.dt, 2e-2, 2e-2, &why[1]), 1.0) << "dK " << why[1];
  EXPECT_LE(violation(first[2], r.dv, c.dt, 2e-2, 2e-2, &why[2]), 1.0) << "dV " << why[2];
  if (c.sink) {
    const auto got = bdsink.get<float>(size_t(c.Hq));
    for (int64_t h = 0; h < c.Hq; ++h)
      EXPECT_NEAR(got[size_t(h)], r.dsink[size_t(h)], 2e-2 + 2e-2 * std::fabs(r.dsink[size_t(h)])) << "dSink head " << h;
  }
  if (check_reproducible) {
    auto second = run();
    for (int i = 0; i < 3; ++i)
      EXPECT_EQ(std::memcmp(first[size_t(i)].data(), second[size_t(i)].data(), first[size_t(i)].size()), 0)
          << "run 2 differs in output " << i;
  }
}

TEST(CudaSdpaBwd, D64Gqa) { run_case(shape(2, 4, 2, 128, 128, 64, 64)); }
TEST(CudaSdpaBwd, D128CausalOddLength) {
  Case c = shape(1, 2, 2, 200, 200, 128, 128);
  c.causal = true;
  run_case(c);
}
TEST(CudaSdpaBwd, D256Fp16CausalBottomRightMqa) {
  Case c = shape(1, 4, 1, 100, 257, 256, 256, DataType::HALF);
  c.causal = c.bottom_right = true;
  run_case(c);
}
TEST(CudaSdpaBwd, D192V128) { run_case(shape(1, 2, 1, 130, 70, 192, 128)); }
TEST(CudaSdpaBwd, D64CausalMoreQueriesThanKeys) {
  Case c = shape(1, 2, 2, 150, 90, 64, 64);
  c.causal = true;
  run_case(c);
}
TEST(CudaSdpaBwd, SlidingWindow) {
  Case c = shape(1, 2, 2, 300, 300, 128, 128);
  c.causal = true;
  c.left = 37;
  run_case(c);
}
TEST(CudaSdpaBwd, PaddingPerBatchLengths) {
  Case c = shape(3, 2, 2, 128, 128, 64, 64);
  c.causal = c.bottom_right = true;
  c.len_q = {100, 37, 128};
  c.len_kv = {128, 65, 1};
  run_case(c);
}
TEST(CudaSdpaBwd, ThdRaggedCausalGqa) {
  Case c = shape(3, 4, 2, 128, 130, 64, 64);
  c.thd = c.causal = c.bottom_right = true;
  c.len_q = {50, 128, 7};
  c.len_kv = {64, 100, 130};
  run_case(c);
}
TEST(CudaSdpaBwd, BshdStridesFp16) {
  Case c = shape(2, 4, 4, 96, 160, 64, 64, DataType::HALF);
  c.bshd = true;
  c.causal = true;
  run_case(c);
}
TEST(CudaSdpaBwd, BitwiseReproducible) {
  Case c = shape(2, 8, 2, 257, 257, 128, 128);
  c.causal = true;
  run_case(c, true);
}

// The wgmma kernels (sdpa_bwd_v2.cuh, d64/d128): every mask and layout the first kernels take at
// those head dims. Lengths are chosen to leave partial 128-row resident and 64-row streamed tiles.
// Each schedule is a marker on a Case; a case that runs under several schedules is one test that runs
// it under each of them in turn (run_schedules).
Case v2(Case c) {
  c.v2 = true;
  return c;
}
// The two-pass schedule (OPENDNN_SDPA_BWD_V2_TWO_PASS=1) stays selectable and covered.
Case two_pass(Case c) {
  c.v2 = c.v2_two_pass = true;
  return c;
}
// v3, the fused schedule with bulk dQ reductions (OPENDNN_SDPA_BWD_V3=1): the same turn orders
// (ascending, descending, left bound, empty tiles) and both head dims, bitwise reproducible.
Case v3(Case c) {
  c.v2 = c.v3 = true;
  return c;
}
// v4, the fused schedule with a TMA producer warp and warpgroup turns (OPENDNN_SDPA_BWD_V4=1): the v2
// cases it runs itself (full lengths; odd ones leave partial resident and streamed tiles that TMA
// zero-fills), the turn orders of the fused dQ, both head dims, GQA/MQA, BSHD strides, bitwise
// reproducibility; then turns off, v4 with V3 (dQ writer warps doing v3's bulk adds), and the
// problems that fall back to the fused kernel (per-batch lengths, THD).
Case v4(Case c) {
  c.v2 = c.v4 = true;
  return c;
}
// v4 with V3: TMA producer warp and dQ writer warps doing v3's bulk adds (the default schedule).
Case v4_writer(Case c) {
  c.v3 = true;
  return v4(c);
}

struct Schedule {
  const char* name;
  Case (*mark)(Case);
};
const Schedule kV2{"v2", v2}, kTwoPass{"v2 two-pass", two_pass}, kV3{"v3", v3}, kV4{"v4", v4},
    kV4Writer{"v4 writer", v4_writer};

// The case under each of `schedules` in turn (a failure names the schedule).
void run_schedules(const Case& c, std::initializer_list<Schedule> schedules, bool check_reproducible = false) {
  for (const Schedule& s : schedules) {
    SCOPED_TRACE(s.name);
    run_case(s.mark(c), check_reproducible);
  }
}

// Not one test: v4 checks reproducibility here, v2 does not.
// Fully masked query rows (Stats = -inf): a batch with no keys at all (seq_len_kv 0) in a padded
// BHSD layout, and rows above a bottom-right diagonal; their gradients must be 0 and every value finite.
TEST(CudaSdpaBwd, FullyMaskedRowsZeroKvLength) {
  Case c = shape(2, 2, 2, 128, 128, 64, 64);
  c.causal = c.bottom_right = true;
  c.len_q = {128, 90};
  c.len_kv = {0, 40};
  run_case(c);
  run_case(v2(c));
}

TEST(CudaSdpaBwd, V2D64Gqa) { run_case(v2(shape(2, 4, 2, 128, 128, 64, 64))); }
TEST(CudaSdpaBwd, V4D64Gqa) { run_case(v4(shape(2, 4, 2, 128, 128, 64, 64)), true); }
TEST(CudaSdpaBwd, WgmmaD128MultiTileMqaOdd) { run_schedules(shape(1, 4, 1, 333, 301, 128, 128), {kV2, kV4}); }
TEST(CudaSdpaBwd, WgmmaD128CausalOddLength) {
  Case c = shape(1, 2, 2, 200, 200, 128, 128);
  c.causal = true;
  run_schedules(c, {kV2, kV4});
}
TEST(CudaSdpaBwd, WgmmaD128Fp16CausalBottomRightMqa) {
  Case c = shape(1, 4, 1, 100, 257, 128, 128, DataType::HALF);
  c.causal = c.bottom_right = true;
  run_schedules(c, {kV2, kV4});
}
TEST(CudaSdpaBwd, WgmmaD64CausalMoreQueriesThanKeys) {
  Case c = shape(1, 2, 2, 150, 90, 64, 64);
  c.causal = true;
  run_schedules(c, {kV2, kV4});
}
TEST(CudaSdpaBwd, WgmmaSlidingWindow) {
  Case c = shape(1, 2, 2, 300, 300, 128, 128);
  c.causal = true;
  c.left = 37;
  run_schedules(c, {kV2, kV4});
}
TEST(CudaSdpaBwd, WgmmaSlidingWindowD64BottomRight) {
  Case c = shape(1, 2, 1, 200, 420, 64, 64);
  c.causal = c.bottom_right = true;
  c.left = 150;
  run_schedules(c, {kV2, kV4});
}
TEST(CudaSdpaBwd, WgmmaPaddingPerBatchLengths) {
  Case c = shape(3, 2, 2, 128, 128, 64, 64);
  c.causal = c.bottom_right = true;
  c.len_q = {100, 37, 128};
  c.len_kv = {128, 65, 1};
  run_schedules(c, {kV2, kTwoPass});
}
// Per-batch lengths and THD: v4's 4-D TMA views cannot zero a batch's padded rows, so under v4 these
// run the fused kernel (same plan, same workspace).
TEST(CudaSdpaBwd, WgmmaPaddingD128NoMask) {
  Case c = shape(2, 2, 2, 256, 192, 128, 128);
  c.len_q = {200, 3};
  c.len_kv = {192, 70};
  run_schedules(c, {kV2, kV3, kV4});
}
TEST(CudaSdpaBwd, WgmmaThdRaggedCausalGqa) {
  Case c = shape(3, 4, 2, 128, 130, 64, 64);
  c.thd = c.causal = c.bottom_right = true;
  c.len_q = {50, 128, 7};
  c.len_kv = {64, 100, 130};
  run_schedules(c, {kV2, kV4});
}
TEST(CudaSdpaBwd, WgmmaThdD128) {
  Case c = shape(2, 2, 1, 260, 300, 128, 128, DataType::HALF);
  c.thd = c.causal = true;
  c.len_q = {260, 131};
  c.len_kv = {300, 129};
  run_schedules(c, {kV2, kTwoPass});
}
// Without any setting the wgmma plan is chosen, THD included (its THD runs pass since the test's
// reference was fixed).
TEST(CudaSdpaBwd, DefaultPlanIsV2ForThd) {
  if (!have_gpu()) GTEST_SKIP() << "needs an sm_90 GPU";
  ScopedEnv unset("OPENDNN_SDPA_BWD_V2", nullptr);
  Graph g;
  g.set_io_data_type(DataType::BFLOAT16).set_intermediate_data_type(DataType::FLOAT).set_compute_data_type(DataType::FLOAT);
  const std::vector<int32_t> lens = {100, 28};
  T4 q(2, 2, 100, 128, false, &lens);
  auto Q = input(g, "q", q, DataType::BFLOAT16), K = input(g, "k", q, DataType::BFLOAT16),
       V = input(g, "v", q, DataType::BFLOAT16), O = input(g, "o", q, DataType::BFLOAT16),
       DO = input(g, "dO", q, DataType::BFLOAT16);
  auto ST = g.tensor(TensorAttr().set_name("stats").set_dim({2, 2, 100, 1}).set_data_type(DataType::FLOAT));
  auto SQ = g.tensor(TensorAttr().set_name("seq_q").set_dim({2, 1, 1, 1}).set_data_type(DataType::INT32));
  auto RQ = g.tensor(TensorAttr().set_name("rag").set_dim({3, 1, 1, 1}).set_data_type(DataType::INT32));
  NodeAttrs at;
  at.set_name("sdpa_bwd").set("attn_scale_value", 0.1).set("right_bound", int64_t(0)).set("use_padding_mask", true);
  at.input("seq_len_q", SQ).input("seq_len_kv", SQ);
  auto outs = g.sdpa_backward(Q, K, V, O, DO, ST, at);
  for (const TensorPtr& x : {Q, K, V, O, DO}) x->set_ragged_offset(RQ);
  for (size_t i = 0; i < 3; ++i) outs[i]->set_output(true).set_stride(q.st).set_ragged_offset(RQ);
  ASSERT_TRUE(build_on_cuda(g));
  std::string plan;
  EXPECT_TRUE(g.get_plan_name_at_index(g.selected_plan(), plan).is_good());
  EXPECT_EQ(plan, "cuda:sdpa_bwd_v2_d128");
}
TEST(CudaSdpaBwd, WgmmaBshdStridesFp16) {
  Case c = shape(2, 4, 4, 96, 160, 64, 64, DataType::HALF);
  c.bshd = true;
  c.causal = true;
  run_schedules(c, {kV2, kV4});
}
TEST(CudaSdpaBwd, WgmmaBshdD128) {
  Case c = shape(2, 4, 2, 192, 256, 128, 128);
  c.bshd = true;
  run_schedules(c, {kV2, kV4});
}
TEST(CudaSdpaBwd, WgmmaBitwiseReproducible) {
  Case c = shape(2, 8, 2, 257, 257, 128, 128);
  c.causal = true;
  run_schedules(c, {kV2, kTwoPass, kV4, kV4Writer}, true);
}
TEST(CudaSdpaBwd, WgmmaBitwiseReproducibleD64) {
  run_schedules(shape(2, 8, 2, 513, 300, 64, 64, DataType::HALF), {kV2, kV4}, true);
}
// The fused dQ (v2's default schedule, and v3's and v4's): many key tiles add into one query tile in
// turn, ascending without a right bound, descending (grid reversed) with one; left-only windows start
// the turns at a later key tile; empty sequences leave dQ tiles nobody adds to.
TEST(CudaSdpaBwd, WgmmaManyKeyTilesCausalGqaD128) {
  Case c = shape(1, 4, 2, 700, 700, 128, 128);
  c.causal = true;
  run_schedules(c, {kV2, kV3, kV4, kV4Writer}, true);
}
TEST(CudaSdpaBwd, WgmmaManyKeyTilesD64) {
  run_schedules(shape(2, 2, 1, 333, 900, 64, 64), {kV2, kV3, kV4, kV4Writer}, true);
}
TEST(CudaSdpaBwd, WgmmaLeftBoundOnly) {
  Case c = shape(1, 2, 2, 500, 520, 64, 64);
  c.left = 100;
  run_schedules(c, {kV2, kV3, kV4, kV4Writer});
}
TEST(CudaSdpaBwd, WgmmaWindowBottomRightD128Fp16) {
  Case c = shape(1, 2, 1, 300, 600, 128, 128, DataType::HALF);
  c.causal = c.bottom_right = true;
  c.left = 200;
  run_schedules(c, {kV2, kV3, kV4, kV4Writer});
}
TEST(CudaSdpaBwd, WgmmaThdEmptySequences) {
  Case c = shape(3, 2, 1, 200, 150, 128, 128);
  c.thd = c.causal = c.bottom_right = true;
  c.len_q = {0, 130, 70};
  c.len_kv = {90, 150, 0};
  run_schedules(c, {kV2, kV3});
}
// THD d128 variations (from chasing a failure that was this test's own reference reading V past the
// last sequence: 0 * garbage is NaN). The NaN tails check that no kernel reads past a tensor's last
// row; the others vary one property of WgmmaThdD128 each.
Case thd_d128_probe() {
  Case c = shape(2, 2, 1, 260, 300, 128, 128, DataType::HALF);
  c.thd = c.causal = true;
  c.len_q = {260, 131};
  c.len_kv = {300, 129};
  return c;
}
TEST(CudaSdpaBwd, ThdProbeV1) { run_case(thd_d128_probe()); }
TEST(CudaSdpaBwd, V2ThdProbeBf16) {
  Case c = thd_d128_probe();
  c.dt = DataType::BFLOAT16;
  run_case(v2(c));
}
TEST(CudaSdpaBwd, V2ThdProbeBottomRight) {
  Case c = thd_d128_probe();
  c.bottom_right = true;
  run_case(v2(c));
}
TEST(CudaSdpaBwd, V2ThdProbeNoMask) {
  Case c = thd_d128_probe();
  c.causal = false;
  run_case(v2(c));
}
TEST(CudaSdpaBwd, V2ThdProbeSeqLenNotThd) {
  Case c = thd_d128_probe();
  c.thd = false;
  run_case(v2(c));
}
TEST(CudaSdpaBwd, V2ThdProbeZeroTail) {
  Case c = thd_d128_probe();
  c.tail = 256 * 1024;
  run_case(v2(c));
}
TEST(CudaSdpaBwd, V2ThdProbeNaNTail) {
  Case c = thd_d128_probe();
  c.tail = 256 * 1024;
  c.tail_nan = true;
  run_case(v2(c));
}
TEST(CudaSdpaBwd, V2ThdProbeNaNTailD64) {
  Case c = thd_d128_probe();
  c.Dqk = c.Dv = 64;
  c.tail = 256 * 1024;
  c.tail_nan = true;
  run_case(v2(c));
}
TEST(CudaSdpaBwd, V2ThdProbeAligned) {
  Case c = thd_d128_probe();
  c.Sq = 256, c.Skv = 384;
  c.len_q = {256, 128};
  c.len_kv = {384, 128};
  run_case(v2(c));
}
TEST(CudaSdpaBwd, V2ThdProbeOneSequence) {
  Case c = thd_d128_probe();
  c.B = 1;
  c.len_q = {260};
  c.len_kv = {300};
  run_case(v2(c));
}
// WgmmaThdEmptySequences's lengths (which pass in bf16 bottom-right) in fp16, top-left.
TEST(CudaSdpaBwd, V2ThdProbeShortFp16TopLeft) {
  Case c = shape(3, 2, 1, 200, 150, 128, 128, DataType::HALF);
  c.thd = c.causal = true;
  c.len_q = {0, 130, 70};
  c.len_kv = {90, 150, 0};
  run_case(v2(c));
}
// Neither THD nor per-batch lengths: fp16 d128 top-left causal with more keys than queries (no
// passing test has that combination).
TEST(CudaSdpaBwd, V2ProbeFp16TopLeftFewerQueries) {
  Case c = shape(2, 2, 1, 260, 300, 128, 128, DataType::HALF);
  c.causal = true;
  run_case(v2(c));
}
TEST(CudaSdpaBwd, V2ThdProbeNoGqa) {
  Case c = thd_d128_probe();
  c.Hq = 1;
  run_case(v2(c));
}
// Top-left causal with more keys than queries: key tiles 1 and 2 see no query (v4's CTAs with no
// item: no loads, zeros out, the turn barriers still balanced).
TEST(CudaSdpaBwd, V4CausalKeyTilesWithoutQueries) {
  Case c = shape(1, 2, 1, 64, 300, 128, 128);
  c.causal = true;
  run_case(v4(c));
}
TEST(CudaSdpaBwd, V4NoTurnsCausalGqaD128) {
  Case c = shape(1, 4, 2, 700, 700, 128, 128);
  c.causal = c.v4_no_turns = true;
  run_case(v4(c), true);
}
TEST(CudaSdpaBwd, V4NoTurnsD64Bshd) {
  Case c = shape(2, 4, 2, 333, 300, 64, 64, DataType::HALF);
  c.bshd = c.v4_no_turns = true;
  run_case(v4(c), true);
}
TEST(CudaSdpaBwd, V4WriterKeyTilesWithoutQueries) {
  Case c = shape(1, 2, 1, 64, 300, 64, 64);
  c.causal = true;
  run_case(v4_writer(c));
}
TEST(CudaSdpaBwd, V4WriterNoTurnsBshdFp16) {
  Case c = shape(2, 4, 2, 333, 300, 128, 128, DataType::HALF);
  c.bshd = c.v4_no_turns = true;
  run_case(v4_writer(c), true);
}

// The d256 wgmma backward (sdpa_bwd_v2_d256.cuh), each case on its default v4 schedule (TMA producer warp,
// mbarrier ring, dQ written by writer warps with bulk reductions) and on the v2 schedule
// (OPENDNN_SDPA_BWD_D256_V4=0, kept for tensors TMA cannot describe): unmasked and causal (both alignments),
// lengths that leave partial 64-row key and query tiles (read as zeros), GQA/MQA, BSHD strides, bf16 and
// fp16, bitwise reproducibility, long turn chains; v4 with NaN past the inputs' ends (TMA must not read
// there), v2 without early turns; then problems it declines (they keep sdpa_bwd_d256).
Case d256v2(Case c) {
  c.v2 = c.d256v2 = true;
  return c;
}
void run_d256(Case c, bool check_reproducible = false) {
  c = d256v2(c);
  for (bool v4 : {true, false}) {
    SCOPED_TRACE(v4 ? "d256 v4" : "d256 v2");
    c.d256v4 = v4;
    run_case(c, check_reproducible);
  }
}
TEST(CudaSdpaBwd, D256WgmmaDenseOdd) { run_d256(shape(1, 2, 2, 130, 201, 256, 256), true); }
TEST(CudaSdpaBwd, D256WgmmaDenseFp16Gqa) { run_d256(shape(2, 4, 2, 77, 150, 256, 256, DataType::HALF)); }
TEST(CudaSdpaBwd, D256WgmmaCausalOdd) {
  Case c = shape(1, 2, 2, 200, 200, 256, 256);
  c.causal = true;
  run_d256(c, true);
}
TEST(CudaSdpaBwd, D256WgmmaFp16CausalBottomRightMqa) {
  Case c = shape(1, 4, 1, 100, 257, 256, 256, DataType::HALF);
  c.causal = c.bottom_right = true;
  run_d256(c);
}
TEST(CudaSdpaBwd, D256WgmmaCausalMoreQueriesThanKeys) {
  Case c = shape(1, 2, 2, 150, 90, 256, 256);
  c.causal = true;
  run_d256(c);
}
TEST(CudaSdpaBwd, D256WgmmaCausalBottomRightMoreQueries) {
  Case c = shape(1, 2, 1, 190, 70, 256, 256);
  c.causal = c.bottom_right = true;
  run_d256(c);
}
TEST(CudaSdpaBwd, D256WgmmaBshdCausalGqaFp16) {
  Case c = shape(2, 4, 2, 96, 160, 256, 256, DataType::HALF);
  c.bshd = true;
  c.causal = true;
  run_d256(c);
}
TEST(CudaSdpaBwd, D256WgmmaBitwiseReproducibleManyTiles) {
  Case c = shape(1, 4, 2, 333, 301, 256, 256);
  c.causal = true;
  run_d256(c, true);
}
// Eleven key tiles (64 rows) per head: long turn chains for the dQ adds, GQA, bitwise reproducible.
TEST(CudaSdpaBwd, D256WgmmaManyKeyTilesGqa) { run_d256(shape(1, 4, 2, 320, 700, 256, 256), true); }
TEST(CudaSdpaBwd, D256V4NaNTailCausalGqa) {
  Case c = d256v2(shape(2, 4, 2, 130, 201, 256, 256));
  c.d256v4 = true;
  c.causal = true;
  c.tail = 256 * 1024;
  c.tail_nan = true;
  run_case(c, true);
}
// v2 with the turn's wait and release at the end of each step (no early turns).
TEST(CudaSdpaBwd, D256V2PlainTurnsCausalGqa) {
  Case c = d256v2(shape(1, 4, 2, 333, 301, 256, 256));
  c.causal = true;
  c.d256_plain_turns = true;
  run_case(c, true);
}
TEST(CudaSdpaBwd, D256V2PlainTurnsDenseFp16) {
  Case c = d256v2(shape(1, 2, 1, 130, 201, 256, 256, DataType::HALF));
  c.d256_plain_turns = true;
  run_case(c);
}

TEST(CudaSdpaBwd, D256V2DeclinesPadding) {
  Case c = shape(2, 2, 2, 128, 128, 256, 256);
  c.d256v2 = true;
  c.len_q = {100, 37};
  c.len_kv = {128, 65};
  run_case(c);
}
TEST(CudaSdpaBwd, D256V2DeclinesSlidingWindow) {
  Case c = shape(1, 2, 2, 150, 150, 256, 256);
  c.d256v2 = true;
  c.causal = true;
  c.left = 37;
  run_case(c);
}

TEST(CudaSdpaBwd, DeclinesDropout) {
  if (!have_gpu()) GTEST_SKIP() << "needs an sm_90 GPU";
  Graph g;
  g.set_io_data_type(DataType::BFLOAT16).set_intermediate_data_type(DataType::FLOAT).set_compute_data_type(DataType::FLOAT);
  auto t = [&](const char* n, std::vector<int64_t> d, DataType dt = DataType::BFLOAT16) {
    return g.tensor(TensorAttr().set_name(n).set_dim(d).set_data_type(dt));
  };
  NodeAttrs at;
  at.set_name("sdpa_bwd").set("dropout_probability", 0.1);
  at.input("seed", g.tensor(Scalar::of_int64(1))).input("offset", g.tensor(Scalar::of_int64(0)));
  auto outs = g.sdpa_backward(t("q", {1, 2, 64, 64}), t("k", {1, 2, 64, 64}), t("v", {1, 2, 64, 64}),
                              t("o", {1, 2, 64, 64}), t("dO", {1, 2, 64, 64}), t("st", {1, 2, 64, 1}, DataType::FLOAT), at);
  for (int i = 0; i < 3; ++i) outs[size_t(i)]->set_output(true);
  ASSERT_TRUE(g.validate().is_good()) << g.validate().to_string();
  Proposal p = cuda::make_cuda_engine()->propose_plans(g, default_target());
  EXPECT_TRUE(p.plans.empty());
  bool named = false;
  for (const auto& d : p.declines) named |= d.find("sdpa_bwd: not supported: dropout") != std::string::npos;
  EXPECT_TRUE(named) << "no sdpa_bwd dropout decline";
}

// Attention sinks (OPENDNN_SDPA_BWD_SINK=1 while planning, until a GPU run verifies them): the kernels take
// the sink through Stats alone; dSink_token = -sum exp(sink - Stats) D per head, bitwise reproducible.
Case with_sink(Case c) {
  c.sink = true;
  return c;
}
TEST(CudaSdpaBwd, SinkD128CausalGqa) {
  Case c = shape(2, 4, 2, 150, 150, 128, 128);
  c.causal = true;
  run_case(with_sink(c), true);
}
TEST(CudaSdpaBwd, SinkV2D64Dense) {
  Case c = shape(1, 3, 3, 100, 180, 64, 64);
  c.v2 = true;
  run_case(with_sink(c), true);
}
TEST(CudaSdpaBwd, SinkD256WgmmaCausalFp16) {
  Case c = shape(1, 2, 2, 90, 90, 256, 256, DataType::HALF);
  c.causal = true;
  run_d256(with_sink(c));
}

}  // namespace
