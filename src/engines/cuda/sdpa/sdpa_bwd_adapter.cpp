// SPDX-License-Identifier: Apache-2.0
// Plans of the cuda engine for single-node SDPA_BACKWARD graphs (sdpa_bwd_kernels.h): fp16/bf16,
// head dims 64/128/256 and 192/128, GQA/MQA with Hk == Hv, causal and sliding windows (either
// diagonal alignment), per-batch lengths, token-packed and THD layouts. Deterministic.
// d64/d128 also get the wgmma plan (sdpa_bwd_v2.cuh), ranked ahead of the first one, unless
// OPENDNN_SDPA_BWD_V2=0 (read when proposing and building; see v2_declined). Its default schedule
// fuses dQ into the dK/dV kernel (workspace grows by fp32 dQ); OPENDNN_SDPA_BWD_V2_TWO_PASS=1 keeps
// the earlier two kernels.
// The fused schedule runs as v4 + v3 by default: a TMA producer warp fills the Q/dO/LSE/D ring, the
// consumer warpgroups take turns issuing their first GEMMs, and dQ writer warps add each step's dQ
// with one bulk reduction (H200, S=2048 bf16: 1.9-2.2x the plain fused kernel, all tests pass,
// bitwise reproducible). OPENDNN_SDPA_BWD_V4=0 drops the producer warp and writers (plain v3 bulk
// adds in the consumers), OPENDNN_SDPA_BWD_V3=0 keeps the adds in the consumers, both =0 give the
// plain fused kernel; OPENDNN_SDPA_BWD_V4_TURNS=0 turns the turns off. Problems TMA cannot describe
// (per-batch lengths, THD, unaligned pointers) run the fused kernel without the producer warp.
// d256 gets a wgmma plan of its own (sdpa_bwd_v2_d256.cuh, same plan name scheme and index; H200: 3.0-3.2x
// the first kernel at S=2048, every D256V2 test passed); OPENDNN_SDPA_BWD_D256_V2=0 withholds it (read when
// proposing and building; see d256_declined); it takes BHSD at full lengths, unmasked or causal, GQA; the
// rest keeps the first kernel. Its v4 (a TMA producer warp and dQ writer warps) is the default where TMA can
// describe the tensors (H200, session 8: 1.9x the v2 schedule); OPENDNN_SDPA_BWD_D256_V4=0 keeps v2.
#include <cstdlib>
#include <cstring>
#include <string>

#include "engines/cuda/cuda_engine.h"
#include "engines/cuda/sdpa/sdpa_bwd_kernels.h"
#include "opendnn/graph.h"
#include "opendnn/node.h"

namespace opendnn::cuda {
namespace {

const std::string kNo = "not supported: ";

struct GradSlots {
  int64_t ptr = -1, ragged = -1;
};
struct BwdSlots {
  sdpa::Slots common;
  GradSlots dout, dq, dk, dv;
  int64_t dsink = -1;  // dSink_token, when sink_token is given and the gradient is a graph output
};

bool env_is_1(const char* name) {
  const char* e = std::getenv(name);
  return e && std::strcmp(e, "1") == 0;
}
bool env_is_0(const char* name) {
  const char* e = std::getenv(name);
  return e && std::strcmp(e, "0") == 0;
}

// With sink_token: dQ/dK/dV need no change (the sink is in Stats); dSink_token is one small reduction
// (sdpa_bwd_launch.cu). H200, session 8: the three *Sink* tests of test_cuda_sdpa_bwd passed (d64/d128/d256,
// GQA, causal, fp16). OPENDNN_SDPA_BWD_SINK=0 withholds it.
std::string sink_slots(const Graph& g, const Node& n, const sdpa::Problem& p, BwdSlots& s) {
  if (env_is_0("OPENDNN_SDPA_BWD_SINK")) return kNo + "sink_token in the backward pass (OPENDNN_SDPA_BWD_SINK=0)";
  const TensorPtr& ds = n.out("dSink_token");
  if (!ds || ds->get_is_virtual()) return "";
  if (ds->get_data_type() != DataType::FLOAT || ds->volume() != p.hq || ds->get_stride()[1] != 1)
    return kNo + "dSink_token must be FLOAT, one contiguous value per query head";
  s.dsink = slot_of(g, ds);
  return s.dsink < 0 ? kNo + "dSink_token has no variant-pack slot" : "";
}

// dO, dQ, dK, dV: a memory-backed tensor with the dims and element type of its counterpart `like`.
std::string grad_tensor(const Graph& g, const Node& n, const char* port, bool input, const TensorPtr& like,
                        sdpa::TokenTensor& t, GradSlots& s) {
  const TensorPtr& x = input ? n.in(port) : n.out(port);
  if (!x || x->get_is_virtual()) return kNo + port + " must be a graph tensor";
  if (x->get_dim() != like->get_dim()) return kNo + port + " must have the dims of its forward counterpart";
  if (x->get_data_type() != n.in("Q")->get_data_type()) return kNo + port + " must have Q's data type";
  const auto& st = x->get_stride();
  if (st.size() != 4 || st[3] != 1) return kNo + port + " must have a contiguous head dim (stride 1)";
  for (size_t i = 0; i < 3; ++i) {
    if (st[i] < 0 || (i > 0 && st[i] % 8 != 0)) return kNo + port + " strides must be non-negative multiples of 8";
    t.stride[i] = st[i];
  }
  s.ptr = slot_of(g, x);
  if (s.ptr < 0) return kNo + port + " has no variant-pack slot";
  if (const TensorPtr& r = x->get_ragged_offset()) {
    s.ragged = slot_of(g, r);
    if (s.ragged < 0) return kNo + std::string("the ragged offset of ") + port + " must be a device tensor";
    t.ragged.is64 = r->get_data_type() == DataType::INT64;
  }
  return "";
}

std::string match(const Graph& g, sdpa::BwdProblem& a, BwdSlots& s) {
  if (g.nodes().size() != 1) return "runs single-node SDPA_BACKWARD graphs only";
  const Node& n = *g.nodes()[0];
  if (n.kind() != OpKind::SDPA_BACKWARD) return "not an SDPA_BACKWARD node";
  std::string why = sdpa::describe(g, n, a.p, s.common);
  if (!why.empty()) return why;
  const sdpa::Problem& p = a.p;
  if (!sdpa::bwd_dims_supported(p.d_qk, p.d_v))
    return kNo + "head dims d_qk " + std::to_string(p.d_qk) + " / d_v " + std::to_string(p.d_v) +
           " (kernels exist for 64, 128, 256 and 192/128)";
  if (s.common.sink >= 0 && !(why = sink_slots(g, n, p, s)).empty()) return why;
  if (p.hk != p.hv) return kNo + "different K and V head counts";
  if (p.b > 65535 || p.hq > 65535) return kNo + "more than 65535 batches or heads";
  if (s.common.o < 0) return kNo + "O must be a graph tensor";
  if (n.in("O")->get_data_type() != n.in("Q")->get_data_type()) return kNo + "O must have Q's data type";
  if (!(why = grad_tensor(g, n, "dO", true, n.in("O"), a.dout, s.dout)).empty()) return why;
  if (!(why = grad_tensor(g, n, "dQ", false, n.in("Q"), a.dq, s.dq)).empty()) return why;
  if (!(why = grad_tensor(g, n, "dK", false, n.in("K"), a.dk, s.dk)).empty()) return why;
  if (!(why = grad_tensor(g, n, "dV", false, n.in("V"), a.dv, s.dv)).empty()) return why;
  return "";
}

// The router's tile model (plan/attention_cost.h) fitted by bench/fit_sdpa_cost.py to the default wgmma
// backward in bench/results/sdpa_bwd.json (H200): d64 / d128 from session 12's rows (within 6% / 3% of the
// measured times), d256 (v4; the v2 schedule it falls back to where TMA cannot describe the tensors takes
// ~1.9x) from session 11's (within 13%). With cuDNN's fit from the same runs the cheaper estimate is the
// faster plan, or within 3% of it, at all 36 shapes (tests/python/test_router_sdpa_costs.py). The mma.sync
// kernel took 3.1x (d64) and 3.6x (d128) the wgmma one's time at S=2048 (session 6); at d192 it is costed
// like d256.
constexpr cost::TileCost kV2Cost[3] = {{15.219, 4.162, -3.183}, {19.441, 5.847, -2.916}, {45.73, 16.307, -16.307}};
constexpr cost::TileCost kV1CostD256 = {0.0, 129.94, 0.0};
int sms(const Target& t) { return t.sm_count > 0 ? t.sm_count : 132; }
double estimate_v2_us(const sdpa::Problem& p, const Target& t) {
  const int i = p.d_qk <= 64 ? 0 : p.d_qk <= 128 ? 1 : 2;
  return cost::attention_us(sdpa::attention_shape(p, true), kV2Cost[i], sms(t), 10.0);
}
double estimate_us(const sdpa::Problem& p, const Target& t) {
  if (p.d_qk > 128) return cost::attention_us(sdpa::attention_shape(p, true), kV1CostD256, sms(t), 10.0);
  return 10.0 + 3.0 * (estimate_v2_us(p, t) - 10.0);
}

// The d256 wgmma backward (default; =0 withholds it): what it does not implement stays with the first kernel.
std::string d256_declined(const sdpa::BwdProblem& a, const BwdSlots& s) {
  const sdpa::Problem& p = a.p;
  const sdpa::Slots& c = s.common;
  if (env_is_0("OPENDNN_SDPA_BWD_D256_V2")) return "sdpa_bwd_v2_d256 is withheld by OPENDNN_SDPA_BWD_D256_V2=0";
  if (c.seq_len_q >= 0 || c.seq_len_kv >= 0 || c.cu_q >= 0 || c.cu_kv >= 0)
    return "sdpa_bwd_v2_d256 does not take per-batch sequence lengths (padding masks)";
  if (c.rag_q >= 0 || c.rag_k >= 0 || c.rag_v >= 0 || c.rag_o >= 0 || c.rag_lse >= 0 || s.dout.ragged >= 0 ||
      s.dq.ragged >= 0 || s.dk.ragged >= 0 || s.dv.ragged >= 0)
    return "sdpa_bwd_v2_d256 does not take ragged (THD) layouts";
  if (p.has_left) return "sdpa_bwd_v2_d256 does not take sliding windows (left bound)";
  if (p.has_right && p.right != 0) return "sdpa_bwd_v2_d256 takes a right bound of 0 (causal) only";
  return "";
}
// The wgmma backward (v2) is offered by default wherever it is instantiated, packed layouts included
// (THD d128 "faults" of sessions 4-5 were the test's reference reading past its buffer);
// OPENDNN_SDPA_BWD_V2=0 withholds it (the d256 one too).
std::string v2_declined(const sdpa::BwdProblem& a, const BwdSlots& s) {
  if (env_is_0("OPENDNN_SDPA_BWD_V2")) return "sdpa_bwd_v2 is withheld by OPENDNN_SDPA_BWD_V2=0";
  if (a.p.d_qk == 256 && a.p.d_v == 256) return d256_declined(a, s);
  if (!sdpa::bwd_v2_supported(a.p.d_qk, a.p.d_v)) return "sdpa_bwd_v2 runs d_qk == d_v in {64, 128, 256} only";
  return "";
}
bool v2_two_pass() { return env_is_1("OPENDNN_SDPA_BWD_V2_TWO_PASS"); }
// d256's kernel always fuses dQ.
bool v2_fused_dq(const sdpa::Problem& p) { return p.d_qk == 256 || !v2_two_pass(); }
bool v3_enabled() { return !env_is_0("OPENDNN_SDPA_BWD_V3"); }
bool v4_enabled() { return !env_is_0("OPENDNN_SDPA_BWD_V4"); }
bool v4_turns() { return !env_is_0("OPENDNN_SDPA_BWD_V4_TURNS"); }

class SdpaBwdPlan : public Plan {
 public:
  SdpaBwdPlan(const sdpa::BwdProblem& a, const BwdSlots& s) : a_(a), s_(s) {}
  Status execute(void* const* slots, void* workspace, void* stream) override {
    sdpa::BwdProblem a = a_;
    sdpa::bind(a.p, s_.common, slots);
    auto grad = [&](sdpa::TokenTensor& t, const GradSlots& gs) {
      t.ptr = slots[gs.ptr];
      t.ragged.ptr = gs.ragged >= 0 ? slots[gs.ragged] : nullptr;
    };
    grad(a.dout, s_.dout);
    grad(a.dq, s_.dq);
    grad(a.dk, s_.dk);
    grad(a.dv, s_.dv);
    a.dsink = s_.dsink >= 0 ? static_cast<float*>(slots[s_.dsink]) : nullptr;
    if (const char* e = sdpa::launch_backward(a, workspace, stream))
      return {ErrorCode::CUDA_API_FAILED, std::string("cuda sdpa backward: ") + e};
    return {};
  }
  int64_t workspace_size() const override { return sdpa::bwd_workspace_bytes(a_.p, a_.v2 && !a_.v2_two_pass); }

 private:
  sdpa::BwdProblem a_;
  BwdSlots s_;
};

constexpr int64_t kBase = 3000;
constexpr int64_t kV2Index = kBase + 1;

void propose(const Graph& g, const Target& target, Proposal& out) {
  sdpa::BwdProblem a;
  BwdSlots s;
  std::string why = match(g, a, s);
  if (!why.empty()) {
    out.declines.push_back(why);
    return;
  }
  PlanCandidate c;
  c.name = "sdpa_bwd_d" + std::to_string(a.p.d_qk);
  c.local_index = kBase;
  c.estimated_us = estimate_us(a.p, target);
  c.workspace_bytes = sdpa::bwd_workspace_bytes(a.p, false);
  c.deterministic = true;
  c.numerical_notes = {NumericalNote::TENSOR_CORE};  // wgmma
  // Problems v2 does not take keep the first plan alone.
  if (v2_declined(a, s).empty()) {
    PlanCandidate v2 = c;
    v2.name = "sdpa_bwd_v2_d" + std::to_string(a.p.d_qk);
    v2.local_index = kV2Index;
    v2.estimated_us = estimate_v2_us(a.p, target);
    v2.workspace_bytes = sdpa::bwd_workspace_bytes(a.p, v2_fused_dq(a.p));
    out.plans.push_back(v2);
  }
  out.plans.push_back(c);
}

Status build(const Graph& g, const Target&, const PlanCandidate& c, std::unique_ptr<Plan>& out) {
  sdpa::BwdProblem a;
  BwdSlots s;
  std::string why = match(g, a, s);
  if (why.empty() && c.local_index == kV2Index) {
    why = v2_declined(a, s);
    a.v2 = true;
    a.v2_two_pass = !v2_fused_dq(a.p);
    a.v3 = !a.v2_two_pass && v3_enabled();
    a.v4 = !a.v2_two_pass && v4_enabled() && sdpa::bwd_v4_available();  // the encoder's lookup happens here
    a.v4_turns = v4_turns();
    // Early dQ turns pay under a causal mask and cost without one (H200, B8 H8 S2048 bf16: 2.43 vs 2.73 ms
    // causal, 5.82 vs 5.26 dense, session 7); =1 / =0 force them.
    a.d256_early_turns = env_is_1("OPENDNN_SDPA_BWD_D256_V2_EARLY_TURNS") ||
                         (!env_is_0("OPENDNN_SDPA_BWD_D256_V2_EARLY_TURNS") && a.p.has_right);
    // v4 (sdpa_bwd_v2_d256.cuh): H200, session 8, every D256V4 test passed; B8 H8 S2048 bf16 2.71 ms dense,
    // 1.26 causal (v2 5.23 / 2.43, cuDNN 2.28 / 1.26). =0 keeps v2.
    a.d256_v4 = a.p.d_qk == 256 && !env_is_0("OPENDNN_SDPA_BWD_D256_V4") && sdpa::bwd_v4_available();
  }
  if (!why.empty()) return {ErrorCode::GRAPH_EXECUTION_PLAN_CREATION_FAILED, "cuda sdpa backward: " + why};
  out = std::make_unique<SdpaBwdPlan>(a, s);
  return {};
}

const Family kSdpaBwd = {"sdpa_bwd", kBase, propose, build};

}  // namespace

const Family& sdpa_bwd_family() { return kSdpaBwd; }

}  // namespace opendnn::cuda
