// SPDX-License-Identifier: Apache-2.0
// The reference engine: one plan ("reference") for every graph whose ops all have a kernel.
#include "engines/reference/engine.h"

#include <algorithm>

#include "engines/reference/plan.h"
#include "engines/reference/ragged_check.h"
#include "engines/reference/ref_kernel.h"

namespace opendnn::ref {

namespace {

double vol(const TensorPtr& t) {
  if (!t) return 0.0;
  double v = 1.0;
  for (int64_t d : t->get_dim()) v *= double(d);
  return v;
}

double last_dim(const TensorPtr& t) { return t && !t->get_dim().empty() ? double(t->get_dim().back()) : 1.0; }

// Rough floating-point work of one node.
double node_flops(const Node& n) {
  const auto& in = n.inputs();
  const auto& out = n.outputs();
  switch (n.kind()) {
    case OpKind::MATMUL:
    case OpKind::MATMUL_FP8:
      return 2.0 * vol(out[0]) * last_dim(in[0]);
    case OpKind::SDPA:
    case OpKind::SDPA_FP8:
    case OpKind::SDPA_MXFP8: {
      // Q [B,H,Sq,D], K [B,Hk,Skv,D]: S = QK^T and O = PV.
      const TensorPtr& q = in[0];
      const TensorPtr& k = in[1];
      if (!q || !k || k->get_dim().size() < 2) break;
      double skv = double(k->get_dim()[k->get_dim().size() - 2]);
      return 4.0 * vol(q) * skv;
    }
    case OpKind::SDPA_BACKWARD:
    case OpKind::SDPA_FP8_BACKWARD:
    case OpKind::SDPA_MXFP8_BACKWARD: {
      const TensorPtr& q = in[0];
      const TensorPtr& k = in[1];
      if (!q || !k || k->get_dim().size() < 2) break;
      return 10.0 * vol(q) * double(k->get_dim()[k->get_dim().size() - 2]);
    }
    case OpKind::CONV_FPROP:
    case OpKind::CONV_DGRAD:
    case OpKind::CONV_WGRAD: {
      const TensorPtr& w = in[1];
      double per = 1.0;
      if (w)
        for (size_t i = 1; i < w->get_dim().size(); ++i) per *= double(w->get_dim()[i]);
      return 2.0 * vol(out[0]) * per;
    }
    case OpKind::GDN:
    case OpKind::GDN_BACKWARD:
      // Per token and head: a K x V state update and readout.
      return 8.0 * vol(in[0]) * last_dim(in[2]) * (n.kind() == OpKind::GDN ? 1.0 : 3.0);
    default:
      break;
  }
  double elems = 0.0;
  for (const auto& t : in) elems += vol(t);
  for (const auto& t : out) elems += vol(t);
  return 4.0 * elems;
}

class ReferenceEngine final : public Engine {
 public:
  std::string_view name() const override { return "reference"; }
  int64_t engine_id() const override { return kReferenceEngineId; }
  bool serves(const Target& target) const override { return target.kind == DeviceKind::CPU; }
  bool is_fallback() const override { return true; }

  Proposal propose_plans(const Graph& graph, const Target&) override {
    Proposal p;
    p.declines = reference_declines(graph);
    if (!p.declines.empty()) return p;
    PlanCandidate c;
    c.name = "reference";
    c.local_index = 0;
    c.estimated_us = estimate_us(graph);
    c.workspace_bytes = layout_workspace(graph).bytes;
    if (c.workspace_bytes < 0) {
      p.declines.push_back("the workspace for this graph's intermediate tensors overflows int64 bytes");
      return p;
    }
    c.deterministic = true;
    p.plans.push_back(std::move(c));
    return p;
  }

  Status build_plan(const Graph& graph, const Target& target, const PlanCandidate& candidate,
                    std::unique_ptr<Plan>& out) override {
    if (!serves(target)) return {ErrorCode::GRAPH_NOT_SUPPORTED, "the reference engine runs on the CPU only"};
    if (candidate.local_index != 0)
      return {ErrorCode::INVALID_VALUE, "the reference engine has no plan " + std::to_string(candidate.local_index)};
    return build_reference_plan(graph, out);
  }
};

}  // namespace

double estimate_us(const Graph& graph) {
  // About 1 GFLOP/s plus a microsecond per node: plain loops, far below any GPU engine.
  double flops = 0.0;
  for (const auto& n : graph.nodes()) flops += node_flops(*n);
  return double(graph.nodes().size()) + flops / 1e3;
}

std::vector<std::string> reference_declines(const Graph& graph) {
  std::vector<std::string> out;
  for (const auto& n : graph.nodes()) {
    const Kernel* k = kernel_for(n->kind());
    if (!k) {
      out.push_back(n->fail(ErrorCode::GRAPH_NOT_SUPPORTED,
                            std::string("no reference kernel for ") + n->spec().tag + " yet")
                        .message());
      continue;
    }
    if (std::string why = ragged_port_error(*n); !why.empty()) {
      out.push_back(n->fail(ErrorCode::GRAPH_NOT_SUPPORTED, "reference: " + why).message());
      continue;
    }
    if (k->check) {
      Status s = k->check(*n);
      if (s.is_bad()) {
        std::string m = s.message();
        // Kernels usually format with Node::fail; make sure the node is named.
        if (m.find(n->name()) == std::string::npos) m = n->fail(s.code(), m).message();
        out.push_back(m);
      }
    }
  }
  return out;
}

std::shared_ptr<Engine> make_reference_engine() { return std::make_shared<ReferenceEngine>(); }

}  // namespace opendnn::ref
