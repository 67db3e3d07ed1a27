// SPDX-License-Identifier: Apache-2.0
// Plans of the cuda engine for single-node SDPA (forward) graphs (sdpa_fwd.h): fp16/bf16, head
// dims 64/128/256 and 192/128, GQA/MQA, causal and sliding windows (either diagonal alignment),
// per-batch lengths, token-packed and THD layouts, attention sinks, Stats (LSE) output.
#include <string>

#include "engines/cuda/cuda_engine.h"
#include "engines/cuda/sdpa/sdpa_fwd.h"
#include "opendnn/graph.h"
#include "opendnn/node.h"

namespace opendnn::cuda {
namespace {

const std::string kNo = "not supported: ";

std::string match(const Graph& g, sdpa::Problem& p, sdpa::Slots& s, sdpa::FwdLauncher& launch) {
  if (g.nodes().size() != 1) return "runs single-node SDPA graphs only";
  const Node& n = *g.nodes()[0];
  if (n.kind() != OpKind::SDPA) return "not an SDPA node";
  std::string why = sdpa::describe(g, n, p, s);
  if (!why.empty()) return why;
  launch = sdpa::fwd_launcher(p.d_qk, p.d_v);
  if (!launch)
    return kNo + "head dims d_qk " + std::to_string(p.d_qk) + " / d_v " + std::to_string(p.d_v) +
           " (kernels exist for 64, 128, 256 and 192/128)";
  if (p.b > 65535 || p.hq > 65535) return kNo + "more than 65535 batches or heads";
  if (n.out("O")->get_data_type() != n.in("Q")->get_data_type()) return kNo + "O must have Q's data type";
  return "";
}

// 2*B*Hq*Sq*Skv*(d_qk+d_v) flops (about half under a causal mask) at ~600 TFLOP/s, plus a launch.
double estimate_us(const sdpa::Problem& p) {
  double flops = 2.0 * double(p.b) * double(p.hq) * double(p.sq) * double(p.skv) * double(p.d_qk + p.d_v);
  if (p.has_right) flops *= 0.5;
  return 5.0 + flops / 600e12 * 1e6;
}

class SdpaFwdPlan : public Plan {
 public:
  SdpaFwdPlan(const sdpa::Problem& p, const sdpa::Slots& s, sdpa::FwdLauncher launch) : p_(p), s_(s), launch_(launch) {}
  Status execute(void* const* slots, void*, void* stream) override {
    sdpa::Problem p = p_;
    sdpa::bind(p, s_, slots);
    if (!p.q.ptr || !p.k.ptr || !p.v.ptr || !p.o.ptr)
      return {ErrorCode::GRAPH_EXECUTION_FAILED, "cuda sdpa: Q, K, V and O need device memory"};
    if (const char* e = launch_(p, stream)) return {ErrorCode::CUDA_API_FAILED, std::string("cuda sdpa: ") + e};
    return {};
  }
  int64_t workspace_size() const override { return 0; }

 private:
  sdpa::Problem p_;
  sdpa::Slots s_;
  sdpa::FwdLauncher launch_;
};

constexpr int64_t kBase = 2000;

void propose(const Graph& g, const Target&, Proposal& out) {
  sdpa::Problem p;
  sdpa::Slots s;
  sdpa::FwdLauncher launch = nullptr;
  std::string why = match(g, p, s, launch);
  if (!why.empty()) {
    out.declines.push_back(why);
    return;
  }
  PlanCandidate c;
  c.name = "sdpa_fwd_d" + std::to_string(p.d_qk) + (p.d_v != p.d_qk ? "_" + std::to_string(p.d_v) : "");
  c.local_index = kBase;
  c.estimated_us = estimate_us(p);
  out.plans.push_back(c);
}

Status build(const Graph& g, const Target&, const PlanCandidate&, std::unique_ptr<Plan>& out) {
  sdpa::Problem p;
  sdpa::Slots s;
  sdpa::FwdLauncher launch = nullptr;
  std::string why = match(g, p, s, launch);
  if (!why.empty()) return {ErrorCode::GRAPH_EXECUTION_PLAN_CREATION_FAILED, "cuda sdpa: " + why};
  out = std::make_unique<SdpaFwdPlan>(p, s, launch);
  return {};
}

const Family kSdpa = {"sdpa", kBase, propose, build};

}  // namespace

const Family& sdpa_family() { return kSdpa; }

}  // namespace opendnn::cuda
