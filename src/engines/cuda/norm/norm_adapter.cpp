// SPDX-License-Identifier: Apache-2.0
// Plans of the cuda engine for single-node RMSNorm / LayerNorm graphs, forward and backward.
// Rows are the leading dims of X where scale has dim 1; the trailing dims (scale's) form a row.
#include <cstdlib>
#include <string>

#include "common/dtype_convert.h"
#include "engines/cuda/cuda_engine.h"
#include "engines/cuda/norm/norm_kernels.h"

namespace opendnn::cuda {
namespace {

using norm::Kind;

bool packed(const TensorPtr& t) { return t && t->is_packed_row_major(); }

// Where a scalar comes from at execute time: a constant, or a host pointer in the variant pack.
struct ScalarSource {
  double constant = 0.0;
  int64_t slot = -1;
  DataType type = DataType::FLOAT;
  float read(void* const* slots) const {
    return slot < 0 ? float(constant) : float(load_element(type, slots[slot], 0));
  }
};

struct NormShape {
  Kind kind;
  bool backward;
  int64_t rows = 0, cols = 0;
};

// Checks the node against what the kernels take; returns "" or the reason to decline.
std::string match(const Graph& g, NormShape& s) {
  if (g.nodes().size() != 1) return "runs single-node norm graphs only";
  const Node& n = *g.nodes()[0];
  switch (n.kind()) {
    case OpKind::RMSNORM: s = {Kind::RMS, false}; break;
    case OpKind::LAYERNORM: s = {Kind::LAYER, false}; break;
    case OpKind::RMSNORM_BACKWARD: s = {Kind::RMS, true}; break;
    case OpKind::LAYERNORM_BACKWARD: s = {Kind::LAYER, true}; break;
    default: return "not a rmsnorm/layernorm node";
  }
  const TensorPtr& x = n.in("X");
  const TensorPtr& scale = n.in("scale");
  const DataType xt = x->get_data_type(), wt = scale->get_data_type();
  if (!norm::supported_type(xt) || !norm::supported_type(wt))
    return "X and scale must be FLOAT, HALF or BFLOAT16";
  const auto& xd = x->get_dim();
  const auto& sd = scale->get_dim();
  if (sd.size() != xd.size()) return "scale must have X's rank";
  size_t first = 0;
  while (first < sd.size() && sd[first] == 1 && xd[first] != 1) ++first;
  for (size_t i = first; i < sd.size(); ++i)
    if (sd[i] != xd[i]) return "scale must be 1 on the batch dims and equal X on the normalised dims";
  s.cols = scale->volume();
  s.rows = s.cols ? x->volume() / s.cols : 0;
  if (s.cols > norm::kMaxCols) return "hidden size " + std::to_string(s.cols) + " exceeds 16384";
  if ((s.cols * bits_of(xt) / 8) % 16 != 0) return "a row must be a multiple of 16 bytes";
  std::vector<TensorPtr> rows_tensors = {x};
  if (!s.backward) {
    rows_tensors.push_back(n.out("Y"));
    if (const TensorPtr& b = n.in("bias"); b && (b->get_data_type() != wt || !packed(b))) return "bias must be packed like scale";
    const TensorPtr& eps = n.in("epsilon");
    if (!eps->get_is_pass_by_value()) return "epsilon must be a pass-by-value scalar";
  } else {
    rows_tensors.push_back(n.in("DY"));
    rows_tensors.push_back(n.out("DX"));
    if (n.out("dscale")->get_is_virtual()) return "dscale must be a graph output";
    for (const char* p : {"dscale", "dbias"})
      if (!n.out(p)->get_is_virtual() && n.out(p)->get_data_type() != wt) return std::string(p) + " must have scale's data type";
    if (s.kind == Kind::LAYER && n.in("mean")->get_data_type() != DataType::FLOAT) return "mean must be FLOAT";
    if (n.in("inv_variance")->get_data_type() != DataType::FLOAT) return "inv_variance must be FLOAT";
  }
  if ((s.backward ? n.out("DX") : n.out("Y"))->get_is_virtual()) return "the normalised output must be a graph output";
  for (const auto& t : rows_tensors) {
    if (t->get_data_type() != xt) return "X, Y, DY and DX must share a data type";
    if (!packed(t)) return "X, Y, DY and DX must be packed row-major";
  }
  if (!packed(scale)) return "scale must be packed";
  return "";
}

// Fixed cost + bytes / achieved bandwidth, both fitted to bench/results/norm.json (H200, bf16,
// 8192x4096 and 32768x8192). The router compares these with the cudnn engine's estimates, so they
// must rank the faster engine first: cuDNN's RMSNorm backward wins at 8k tokens, ours elsewhere. RMSNorm
// forward refitted to session 11's run (37.0 / 261 us; the old 6 us + 4.24 B/ns tied cuDNN's 37.6 us at
// 8192x4096, where the router took cuDNN's plan, 1.7% slower than ours).
double estimate_us(const NormShape& s, DataType xt) {
  const double bytes = double(s.rows) * double(s.cols) * (bits_of(xt) / 8) * (s.backward ? 3 : 2);
  const bool ln = s.kind == norm::Kind::LAYER;
  if (s.backward) return ln ? 39.0 + bytes / 3.86e6 : 20.0 + bytes / 4.17e6;
  return ln ? 8.0 + bytes / 4.02e6 : 5.0 + bytes / 4.19e6;
}

class NormFwdPlan : public Plan {
 public:
  NormFwdPlan(norm::FwdArgs a, norm::Launch l, int64_t sx, int64_t sscale, int64_t sbias, int64_t sy, int64_t smean,
              int64_t sinv, ScalarSource eps)
      : a_(a), l_(l), sx_(sx), sscale_(sscale), sbias_(sbias), sy_(sy), smean_(smean), sinv_(sinv), eps_(eps) {}
  Status execute(void* const* slots, void*, void* stream) override {
    norm::FwdArgs a = a_;
    a.x = slots[sx_];
    a.scale = slots[sscale_];
    a.bias = sbias_ >= 0 ? slots[sbias_] : nullptr;
    a.y = slots[sy_];
    a.mean = smean_ >= 0 ? static_cast<float*>(slots[smean_]) : nullptr;
    a.inv_variance = sinv_ >= 0 ? static_cast<float*>(slots[sinv_]) : nullptr;
    a.epsilon = eps_.read(slots);
    if (const char* e = norm::launch_forward(a, l_, stream)) return {ErrorCode::CUDA_API_FAILED, std::string("cuda norm: ") + e};
    return {};
  }
  int64_t workspace_size() const override { return 0; }

 private:
  norm::FwdArgs a_;
  norm::Launch l_;
  int64_t sx_, sscale_, sbias_, sy_, smean_, sinv_;
  ScalarSource eps_;
};

class NormBwdPlan : public Plan {
 public:
  NormBwdPlan(norm::BwdArgs a, norm::Launch l, std::vector<int64_t> s) : a_(a), l_(l), s_(std::move(s)) {}
  Status execute(void* const* slots, void* workspace, void* stream) override {
    norm::BwdArgs a = a_;
    auto ptr = [&](int i) -> void* { return s_[size_t(i)] >= 0 ? slots[s_[size_t(i)]] : nullptr; };
    a.dy = ptr(0);
    a.x = ptr(1);
    a.scale = ptr(2);
    a.mean = static_cast<const float*>(ptr(3));
    a.inv_variance = static_cast<const float*>(ptr(4));
    a.dx = ptr(5);
    a.dscale = ptr(6);
    a.dbias = ptr(7);
    if (!a.dscale) return {ErrorCode::GRAPH_EXECUTION_FAILED, "cuda norm: dscale has no memory"};
    if (const char* e = norm::launch_backward(a, l_, workspace, stream))
      return {ErrorCode::CUDA_API_FAILED, std::string("cuda norm: ") + e};
    return {};
  }
  int64_t workspace_size() const override { return norm::backward_workspace_bytes(a_, l_); }

 private:
  norm::BwdArgs a_;
  norm::Launch l_;
  std::vector<int64_t> s_;
};

int sm_count(const Target& t) { return t.sm_count > 0 ? t.sm_count : 132; }

bool env_on(const char* name) {
  const char* e = std::getenv(name);
  return e && std::string(e) == "1";
}

// The backward kernel (norm_kernels.cu), read when a plan is proposed and built. The TMA-ring
// backward (v3, bwd_tma_kernel) passed its tests on the H200 and, at 8192x4096 bf16, ran rms 0.0662 ms
// vs the cp.async ring's (v1) 0.0678 and LayerNorm 0.0802 vs 0.0909, but 20-33% slower at hidden 8192
// (one 1024-thread team a CTA instead of two): so it is the default for 16-bit rows of 257-512
// vectors (hidden 2056-4096, two teams of 257-512 threads a CTA, as at the measured 4096), the ring
// elsewhere. OPENDNN_NORM_BWD_V3=1 takes v3 wherever it fits, =0 never; the register-row backward (v2,
// bwd_rows_kernel), no faster than v1 at 8k tokens and slower at 32k, stays opt-in (OPENDNN_NORM_BWD_V2=1).
bool two_teams(DataType x_type, int64_t cols) {
  const bool sixteen_bit = x_type == DataType::HALF || x_type == DataType::BFLOAT16;
  return sixteen_bit && cols > 256 * 8 && cols <= 512 * 8;
}
int backward_version(DataType x_type, int64_t cols) {
  if (env_on("OPENDNN_NORM_BWD_V3")) return 3;
  if (env_on("OPENDNN_NORM_BWD_V2")) return 2;
  const char* v3 = std::getenv("OPENDNN_NORM_BWD_V3");
  return two_teams(x_type, cols) && !(v3 && std::string(v3) == "0") ? 3 : 1;
}
// The forward on 128-thread CTAs for rows of up to 512 vectors, opt-in: OPENDNN_NORM_FWD_NARROW=1 (passes the
// *ForwardNarrow tests; norm.json, session 12: 0.98-1.00x the default's speed, no gain).
bool forward_narrow() { return env_on("OPENDNN_NORM_FWD_NARROW"); }

constexpr int64_t kBase = 0;  // the norm family's index_base (gemm 1000, sdpa 2000, ...)

void propose(const Graph& g, const Target& t, Proposal& out) {
  NormShape s{};
  std::string why = match(g, s);
  if (!why.empty()) {
    out.declines.push_back(why);
    return;
  }
  const Node& n = *g.nodes()[0];
  PlanCandidate c;
  c.name = std::string(s.kind == Kind::RMS ? "rmsnorm" : "layernorm") + (s.backward ? "_bwd" : "_fwd");
  c.local_index = kBase + (s.kind == Kind::RMS ? 0 : 2) + (s.backward ? 1 : 0);
  c.estimated_us = estimate_us(s, n.in("X")->get_data_type());
  if (!s.backward && forward_narrow()) {
    norm::FwdArgs a{};
    a.kind = s.kind;
    a.x_type = n.in("X")->get_data_type();
    a.w_type = n.in("scale")->get_data_type();
    a.rows = s.rows;
    a.cols = s.cols;
    if (norm::plan_forward(a, true).version == 2) c.name += "_narrow";
  }
  if (s.backward) {
    // The workspace depends on the launch shape, which depends on the kind and data types.
    norm::BwdArgs a{};
    a.kind = s.kind;
    a.x_type = n.in("X")->get_data_type();
    a.w_type = n.in("scale")->get_data_type();
    a.rows = s.rows;
    a.cols = s.cols;
    const norm::Launch l = norm::plan_backward(a, sm_count(t), backward_version(a.x_type, a.cols));
    c.workspace_bytes = norm::backward_workspace_bytes(a, l);
    if (l.version > 1) c.name += "_v" + std::to_string(l.version);  // not the ring kernel it falls back to
    // v3 where it is the default (two teams a CTA): its 8192x4096 times over the ring's (session 5).
    if (l.version == 3 && two_teams(a.x_type, a.cols)) c.estimated_us *= s.kind == Kind::LAYER ? 0.88 : 0.98;
  }
  out.plans.push_back(c);
}

Status build(const Graph& g, const Target& t, const PlanCandidate&, std::unique_ptr<Plan>& out) {
  NormShape s{};
  std::string why = match(g, s);
  if (!why.empty()) return {ErrorCode::GRAPH_EXECUTION_PLAN_CREATION_FAILED, "cuda norm: " + why};
  const Node& n = *g.nodes()[0];
  auto slot = [&](const TensorPtr& p) { return slot_of(g, p); };
  const DataType xt = n.in("X")->get_data_type(), wt = n.in("scale")->get_data_type();
  if (!s.backward) {
    norm::FwdArgs a{};
    a.kind = s.kind;
    a.x_type = xt;
    a.w_type = wt;
    a.rows = s.rows;
    a.cols = s.cols;
    const TensorPtr& eps = n.in("epsilon");
    ScalarSource e;
    e.type = eps->get_data_type();
    e.slot = slot(eps);
    e.constant = eps->get_value().as_double();
    bool inference = n.attr_str("forward_phase") == "INFERENCE";
    int64_t smean = (s.kind == Kind::LAYER && !inference) ? slot(n.out("mean")) : -1;
    int64_t sinv = inference ? -1 : slot(n.out("inv_variance"));
    const norm::Launch l = norm::plan_forward(a, forward_narrow());
    if (!l.kernel) return {ErrorCode::GRAPH_EXECUTION_PLAN_CREATION_FAILED, "cuda norm: no forward kernel for this shape"};
    out = std::make_unique<NormFwdPlan>(a, l, slot(n.in("X")), slot(n.in("scale")), slot(n.in("bias")), slot(n.out("Y")),
                                        smean, sinv, e);
    return {};
  }
  norm::BwdArgs a{};
  a.kind = s.kind;
  a.x_type = xt;
  a.w_type = wt;
  a.rows = s.rows;
  a.cols = s.cols;
  bool dbias = s.kind == Kind::LAYER || n.attr_bool("has_dbias");
  std::vector<int64_t> slots = {slot(n.in("DY")),
                                slot(n.in("X")),
                                slot(n.in("scale")),
                                s.kind == Kind::LAYER ? slot(n.in("mean")) : -1,
                                slot(n.in("inv_variance")),
                                slot(n.out("DX")),
                                slot(n.out("dscale")),
                                dbias ? slot(n.out("dbias")) : -1};
  const norm::Launch l = norm::plan_backward(a, sm_count(t), backward_version(a.x_type, a.cols));
  if (!l.kernel) return {ErrorCode::GRAPH_EXECUTION_PLAN_CREATION_FAILED, "cuda norm: no backward kernel for this shape"};
  out = std::make_unique<NormBwdPlan>(a, l, std::move(slots));
  return {};
}

const Family kNorm = {"norm", kBase, propose, build};

}  // namespace

const Family& norm_family() { return kNorm; }

}  // namespace opendnn::cuda
