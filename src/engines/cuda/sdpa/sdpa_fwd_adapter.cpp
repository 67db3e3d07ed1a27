// SPDX-License-Identifier: Apache-2.0
// Plans of the cuda engine for single-node SDPA (forward) graphs (sdpa_fwd.h): fp16/bf16, head
// dims 64/128/256 and 192/128, GQA/MQA, causal and sliding windows (either diagonal alignment),
// per-batch lengths, token-packed and THD layouts, attention sinks, Stats (LSE) output.
// The TMA/producer-warp kernel (sdpa_fwd_v2.h, FlashAttention-3 style) is offered beside the first one
// for the cases it covers and ranked ahead of it (it passed test_cuda_sdpa on the H200 at 2.3-2.7x the
// first kernel); OPENDNN_SDPA_FWD_V2=0 at plan time withholds it. v2's persistent schedule (d64/d128) with two
// Q buffers (the next tile's Q loaded during the current one; d128 then has a 2-stage K/V ring) is offered
// too and ranked ahead of v2 (OPENDNN_SDPA_FWD_PERSISTENT unset or 2); `1` offers the one-buffer variant
// instead, `0` neither.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>

#include "engines/cuda/cuda_engine.h"
#include "engines/cuda/sdpa/sdpa_fwd.h"
#include "engines/cuda/sdpa/sdpa_fwd_v2.h"
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

// The router's tile model (plan/attention_cost.h) fitted per head dim 64/128/256 to the default forward in
// bench/results/sdpa.json (H200, session 12: the persistent v2 at d64/d128, whose plan is costed at 0.9x
// this, and v2 at d256) by bench/fit_sdpa_cost.py, least squares in relative error, with cuDNN's fit
// (cudnn_engine.cpp) from the same run's cudnn_engine_ms. In sample the estimates are within 3% (d64), 9%
// (d128), 5% (d256) of the measured times and the cheaper estimate is the faster plan, or within 3% of it,
// at all 36 shapes (session 11's constants took ours at d128 S2048, 4% slower than cuDNN's plan there).
// The first kernel ran at 2.3-2.7x v2's time (sdpa_v2.json).
constexpr cost::TileCost kV2Cost[3] = {{2.325, 1.326, 0.325}, {3.304, 1.76, 0.824}, {7.143, 2.876, 1.029}};
double estimate_v2_us(const sdpa::Problem& p, const Target& t) {
  const int i = p.d_qk <= 64 ? 0 : p.d_qk <= 128 ? 1 : 2;
  return cost::attention_us(sdpa::attention_shape(p, false), kV2Cost[i], t.sm_count > 0 ? t.sm_count : 132, 5.0);
}
double estimate_us(const sdpa::Problem& p, const Target& t) { return 5.0 + 2.5 * (estimate_v2_us(p, t) - 5.0); }

// `base` with this execution's pointers in `p`; an error naming the plan when Q, K, V or O has none.
Status bind_checked(const sdpa::Problem& base, const sdpa::Slots& s, void* const* slots, const char* who,
                    sdpa::Problem& p) {
  p = base;
  sdpa::bind(p, s, slots);
  if (!p.q.ptr || !p.k.ptr || !p.v.ptr || !p.o.ptr)
    return {ErrorCode::GRAPH_EXECUTION_FAILED, std::string(who) + ": Q, K, V and O need device memory"};
  return {};
}

class SdpaFwdPlan : public Plan {
 public:
  SdpaFwdPlan(const sdpa::Problem& p, const sdpa::Slots& s, sdpa::FwdLauncher launch) : p_(p), s_(s), launch_(launch) {}
  Status execute(void* const* slots, void*, void* stream) override {
    sdpa::Problem p;
    if (Status st = bind_checked(p_, s_, slots, "cuda sdpa", p); st.is_bad()) return st;
    if (const char* e = launch_(p, stream)) return {ErrorCode::CUDA_API_FAILED, std::string("cuda sdpa: ") + e};
    return {};
  }
  int64_t workspace_size() const override { return 0; }

 private:
  sdpa::Problem p_;
  sdpa::Slots s_;
  sdpa::FwdLauncher launch_;
};

// The v2 kernel needs TMA descriptors holding the tensor addresses. They are encoded on the first
// execute and again only when a Q/K/V pointer differs from the last one (host work of a few
// microseconds, no allocation and no device call, so execute stays graph-capturable; a plan is
// not meant to be executed from two threads at once). Pointers TMA cannot take (not 16-byte
// aligned) and an O that is not 16-byte aligned run the first kernel instead, which the plan
// keeps for that, as does a scale that is not positive (read at execute time).
// persistent_ctas > 0: the persistent schedule on that many SMs at most with q_bufs Q buffers, its tile
// counter in the workspace (zeroed by each launch).
class SdpaFwdV2Plan : public Plan {
 public:
  SdpaFwdV2Plan(const sdpa::Problem& p, const sdpa::Slots& s, sdpa::FwdLauncher v1, int persistent_ctas = 0,
                int q_bufs = 1)
      : p_(p), s_(s), v1_(v1), ctas_(persistent_ctas), q_bufs_(q_bufs) {}
  Status execute(void* const* slots, void* workspace, void* stream) override {
    sdpa::Problem p;
    if (Status st = bind_checked(p_, s_, slots, "cuda sdpa v2", p); st.is_bad()) return st;
    // The plan keeps the TMA descriptors of its last Q, K, V pointers for one call at a time: a call that
    // finds them taken (a concurrent execute of the same plan) encodes its own on the stack.
    const int q_rows = ctas_ > 0 ? sdpa::kFwdV2PersistentQRows : 128;
    std::unique_lock<std::mutex> lock(descs_mutex_, std::try_to_lock);
    sdpa::FwdV2Descs own{};
    const sdpa::FwdV2Descs* descs = &descs_;
    bool tma_ok = false;
    if (lock.owns_lock()) {
      if (!encoded_ || p.q.ptr != q_ || p.k.ptr != k_ || p.v.ptr != v_) {
        tma_ok_ = sdpa::fwd_v2_encode(p, descs_, q_rows) == nullptr;
        encoded_ = true, q_ = p.q.ptr, k_ = p.k.ptr, v_ = p.v.ptr;
      }
      tma_ok = tma_ok_;
    } else {
      tma_ok = sdpa::fwd_v2_encode(p, own, q_rows) == nullptr;
      descs = &own;
    }
    // O leaves in 16-byte stores; the kernel's softmax relies on a positive scale.
    const bool v2 = tma_ok && reinterpret_cast<uintptr_t>(p.o.ptr) % 16 == 0 && p.scale > 0.0f;
    sdpa::FwdV2Persistent pers;
    pers.counter = static_cast<int*>(workspace), pers.ctas = ctas_, pers.q_bufs = q_bufs_;
    if (v2 && ctas_ > 0 && !workspace)
      return {ErrorCode::INVALID_VALUE, "cuda sdpa v2 persistent: needs a workspace of " +
                                            std::to_string(sdpa::kFwdV2PersistentWorkspace) + " bytes"};
    if (const char* e = v2 ? sdpa::launch_fwd_v2(p, *descs, stream, ctas_ > 0 ? &pers : nullptr) : v1_(p, stream))
      return {ErrorCode::CUDA_API_FAILED, std::string("cuda sdpa v2: ") + e};
    return {};
  }
  int64_t workspace_size() const override { return ctas_ > 0 ? sdpa::kFwdV2PersistentWorkspace : 0; }

 private:
  sdpa::Problem p_;
  sdpa::Slots s_;
  sdpa::FwdLauncher v1_;
  int ctas_ = 0, q_bufs_ = 1;
  sdpa::FwdV2Descs descs_{};
  bool encoded_ = false, tma_ok_ = false;
  const void *q_ = nullptr, *k_ = nullptr, *v_ = nullptr;
  std::mutex descs_mutex_;
};

bool v2_enabled() {
  const char* e = std::getenv("OPENDNN_SDPA_FWD_V2");
  return !(e && std::strcmp(e, "0") == 0);
}
// OPENDNN_SDPA_FWD_PERSISTENT: 2 (unset: two Q buffers, the default), 1 (one Q buffer) or 0 (off).
int persistent_mode() {
  const char* e = std::getenv("OPENDNN_SDPA_FWD_PERSISTENT");
  return !e ? 2 : std::strcmp(e, "1") == 0 ? 1 : std::strcmp(e, "0") == 0 ? 0 : 2;
}

constexpr int64_t kBase = 2000;
constexpr int64_t kV2Index = kBase + 1;
constexpr int64_t kV2PersistentIndex = kBase + 2;    // one Q buffer
constexpr int64_t kV2PersistentQ2Index = kBase + 3;  // two Q buffers
// The persistent schedule's estimate: v2's, less the per-tile launch and set-up it hides. H200 (session 9,
// bench/sdpa.py --quick --persistent, two Q buffers over v2): 0.82-0.87 at S=512, 0.89-0.94 at 1k,
// 0.95-0.99 at 2k, 0.99 at 4k.
constexpr double kPersistentFactor = 0.9;

void propose(const Graph& g, const Target& target, Proposal& out) {
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
  c.estimated_us = estimate_us(p, target);
  c.numerical_notes = {NumericalNote::TENSOR_CORE};  // wgmma
  if (v2_enabled()) {
    // Cases v2 does not cover simply keep the v1 plan alone.
    if (sdpa::fwd_v2_supports(p, s).empty()) {
      PlanCandidate v2 = c;
      v2.name = "sdpa_fwd_v2_" + c.name.substr(std::strlen("sdpa_fwd_"));
      v2.local_index = kV2Index;
      v2.estimated_us = estimate_v2_us(p, target);
      if (const int mode = persistent_mode(); mode > 0 && sdpa::fwd_v2_persistent_supports(p).empty()) {
        PlanCandidate pv2 = v2;
        pv2.name += mode == 2 ? "_persistent_q2" : "_persistent";
        pv2.local_index = mode == 2 ? kV2PersistentQ2Index : kV2PersistentIndex;
        pv2.estimated_us = v2.estimated_us * kPersistentFactor;
        pv2.workspace_bytes = sdpa::kFwdV2PersistentWorkspace;
        out.plans.push_back(pv2);
      }
      out.plans.push_back(v2);
    }
  }
  out.plans.push_back(c);
}

Status build(const Graph& g, const Target& target, const PlanCandidate& c, std::unique_ptr<Plan>& out) {
  sdpa::Problem p;
  sdpa::Slots s;
  sdpa::FwdLauncher launch = nullptr;
  std::string why = match(g, p, s, launch);
  if (!why.empty()) return {ErrorCode::GRAPH_EXECUTION_PLAN_CREATION_FAILED, "cuda sdpa: " + why};
  if (c.local_index == kV2Index) {
    if (!v2_enabled()) why = "sdpa_fwd_v2 is withheld by OPENDNN_SDPA_FWD_V2=0";
    else why = sdpa::fwd_v2_supports(p, s);
    if (!why.empty()) return {ErrorCode::GRAPH_EXECUTION_PLAN_CREATION_FAILED, "cuda sdpa: " + why};
    out = std::make_unique<SdpaFwdV2Plan>(p, s, launch);
    return {};
  }
  if (c.local_index == kV2PersistentIndex || c.local_index == kV2PersistentQ2Index) {
    const int q_bufs = c.local_index == kV2PersistentQ2Index ? 2 : 1;
    if (!v2_enabled()) why = "sdpa_fwd_v2 is withheld by OPENDNN_SDPA_FWD_V2=0";
    else if (persistent_mode() != q_bufs)
      why = "the persistent sdpa_fwd_v2 needs OPENDNN_SDPA_FWD_PERSISTENT=" + std::to_string(q_bufs);
    else why = sdpa::fwd_v2_supports(p, s);
    if (why.empty()) why = sdpa::fwd_v2_persistent_supports(p);
    if (!why.empty()) return {ErrorCode::GRAPH_EXECUTION_PLAN_CREATION_FAILED, "cuda sdpa: " + why};
    // The graph's sm_count (as cuDNN's SM_COUNT_TARGET) caps the CTAs: fewer SMs for other work, and
    // many tiles a CTA in the tests.
    int ctas = target.sm_count > 0 ? target.sm_count : 132;
    if (g.context().sm_count > 0 && g.context().sm_count < ctas) ctas = int(g.context().sm_count);
    out = std::make_unique<SdpaFwdV2Plan>(p, s, launch, ctas, q_bufs);
    return {};
  }
  out = std::make_unique<SdpaFwdPlan>(p, s, launch);
  return {};
}

const Family kSdpa = {"sdpa", kBase, propose, build};

}  // namespace

const Family& sdpa_family() { return kSdpa; }

}  // namespace opendnn::cuda
