// SPDX-License-Identifier: Apache-2.0
// Plans of the cuda engine for single-node gated delta net graphs (GDN; GDN_BWD declines for now).
// What the kernels take is checked here, once, at propose/build time; execute() only fills pointers.
#include <cmath>
#include <string>

#include "engines/cuda/cuda_engine.h"
#include "engines/cuda/gdn/gdn_kernels.h"

namespace opendnn::cuda {
namespace {

constexpr int64_t kBase = 4000;

bool packed(const TensorPtr& t) { return t && t->is_packed_row_major(); }

// Fills the kernel arguments from the node; returns "" or the reason to decline.
std::string match(const Graph& g, const Target& target, gdn::FwdArgs& a) {
  if (g.nodes().size() != 1) return "runs single-node GDN graphs only";
  const Node& n = *g.nodes()[0];
  if (n.kind() == OpKind::GDN_BACKWARD) return "not supported: the GDN backward kernels are not written yet";
  if (n.kind() != OpKind::GDN) return "not a GDN node";
  const TensorPtr &q = n.in("q"), &k = n.in("k"), &v = n.in("v"), &o = n.out("O");
  a.io = q->get_data_type();
  if (a.io != DataType::HALF && a.io != DataType::BFLOAT16) return "q, k, v must be HALF or BFLOAT16";
  if (o->get_data_type() != a.io) return "O must have q's data type";
  if (o->get_is_virtual()) return "O must be a graph output";
  for (const TensorPtr& t : {q, k, v, o, n.in("g"), n.in("beta"), n.in("cu_seqlens")})
    if (!packed(t)) return "q, k, v, g, beta, cu_seqlens and O must be packed row-major";
  a.t = q->get_dim()[0], a.h = q->get_dim()[1], a.k = q->get_dim()[2];
  a.hv = v->get_dim()[1], a.v = v->get_dim()[2];
  a.ho = a.h > a.hv ? a.h : a.hv;
  a.n = n.in("cu_seqlens")->get_dim()[0] - 1;
  if (k->get_dim()[1] != a.h) return "k must have q's head count";
  if (!gdn::supported_dims(a.k, a.v)) return "head dims K and V must be multiples of 16 up to 256";
  if (a.t > (int64_t(1) << 30)) return "more than 2^30 tokens";
  a.g_type = n.in("g")->get_data_type();
  a.beta_type = n.in("beta")->get_data_type();
  a.cu_int64 = n.in("cu_seqlens")->get_data_type() == DataType::INT64;

  if (n.attr_bool("use_beta_sigmoid")) return "not supported: use_beta_sigmoid";
  if (n.attr_bool("allow_neg_eigval")) return "not supported: allow_neg_eigval";
  if (n.attr_bool("safe_gate") || n.in("a_log") || n.in("dt_bias")) return "not supported: the fused gate (safe_gate)";
  if (n.attr_str("gate_domain") != "log") return "not supported: gate_domain linear";
  if (n.attr_int("checkpoint_every_n_tokens") != 0) return "not supported: state checkpoints";
  if (n.in("state_indices")) return "not supported: state_indices (a state pool)";
  if (n.attr_bool("overwrite_initial_state")) return "not supported: overwrite_initial_state";
  a.scale = float(n.has("scale") ? n.attr_float("scale") : 1.0 / std::sqrt(double(a.k)));
  a.l2norm = n.attr_bool("use_qk_l2norm");

  if (const TensorPtr& init = n.in("initial_state")) {
    a.init_type = init->get_data_type();
    const auto& st = init->get_stride();
    for (int i = 0; i < 4; ++i) a.init_stride[i] = st[size_t(i)];
  }
  if (n.attr_bool("output_final_state")) {
    const TensorPtr& fin = n.out("final_state");
    if (fin->get_is_virtual()) return "final_state must be a graph output";
    a.final_type = fin->get_data_type();
    const auto& st = fin->get_stride();
    for (int i = 0; i < 4; ++i) a.fin_stride[i] = st[size_t(i)];
  }
  a.bv = gdn::choose_bv(a, target.sm_count > 0 ? target.sm_count : 132);
  if (a.bv == 0) return "no state slice width fits shared memory for V = " + std::to_string(a.v);
  return "";
}

// The work is 4KV FLOP per token and head in the state products plus the chunk-local ones
// (about 2.75x that at K = V = 128); assume ~60 TFLOP/s until measured, plus the sequential
// depth of the state pass (T/64 chunks of the longest sequence, unknown here: T/64/N on average).
double estimate_us(const gdn::FwdArgs& a) {
  const double flops = double(a.t) * double(a.ho) * (6.0 * a.k * a.v + 64.0 * (6.0 * a.k + 4.0 * a.v));
  const double depth = double(a.t) / 64.0 / double(a.n > 0 ? a.n : 1);
  return 10.0 + flops / 60e6 + depth * 1.5;
}

class GdnFwdPlan : public Plan {
 public:
  GdnFwdPlan(gdn::FwdArgs a, std::vector<int64_t> slots) : a_(a), s_(std::move(slots)) {}
  Status execute(void* const* slots, void* workspace, void* stream) override {
    gdn::FwdArgs a = a_;
    auto ptr = [&](size_t i) -> void* { return s_[i] >= 0 ? slots[s_[i]] : nullptr; };
    a.q = ptr(0), a.kk = ptr(1), a.vv = ptr(2), a.g = ptr(3), a.beta = ptr(4), a.cu = ptr(5);
    a.init = ptr(6), a.o = ptr(7), a.fin = ptr(8);
    if (!a.q || !a.kk || !a.vv || !a.g || !a.beta || !a.cu || !a.o)
      return {ErrorCode::INVALID_VARIANT_PACK, "cuda gdn: q, k, v, g, beta, cu_seqlens and O need device memory"};
    if (const char* e = gdn::launch_forward(a, workspace, stream))
      return {ErrorCode::CUDA_API_FAILED, std::string("cuda gdn: ") + e};
    return {};
  }
  int64_t workspace_size() const override { return gdn::forward_workspace_bytes(a_); }

 private:
  gdn::FwdArgs a_;
  std::vector<int64_t> s_;
};

void propose(const Graph& g, const Target& t, Proposal& out) {
  gdn::FwdArgs a;
  std::string why = match(g, t, a);
  if (!why.empty()) {
    out.declines.push_back(why);
    return;
  }
  PlanCandidate c;
  c.name = "gdn_fwd_chunk64";
  c.local_index = kBase;
  c.estimated_us = estimate_us(a);
  c.workspace_bytes = gdn::forward_workspace_bytes(a);
  out.plans.push_back(c);
}

Status build(const Graph& g, const Target& t, const PlanCandidate&, std::unique_ptr<Plan>& out) {
  gdn::FwdArgs a;
  std::string why = match(g, t, a);
  if (!why.empty()) return {ErrorCode::GRAPH_EXECUTION_PLAN_CREATION_FAILED, "cuda gdn: " + why};
  const Node& n = *g.nodes()[0];
  auto slot = [&](const TensorPtr& p) { return slot_of(g, p); };
  std::vector<int64_t> slots = {slot(n.in("q")),    slot(n.in("k")),    slot(n.in("v")),
                                slot(n.in("g")),    slot(n.in("beta")), slot(n.in("cu_seqlens")),
                                slot(n.in("initial_state")), slot(n.out("O")),
                                n.attr_bool("output_final_state") ? slot(n.out("final_state")) : -1};
  out = std::make_unique<GdnFwdPlan>(a, std::move(slots));
  return {};
}

const Family kGdn = {"gdn", kBase, propose, build};

}  // namespace

const Family& gdn_family() { return kGdn; }

}  // namespace opendnn::cuda
