// SPDX-License-Identifier: Apache-2.0
// Plans of the cuda engine for single-node gated delta net graphs, GDN and GDN_BWD.
// What the kernels take is checked here, once, at propose/build time; execute() only fills pointers.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>

#include "engines/cuda/cuda_engine.h"
#include "engines/cuda/gdn/gdn_kernels.h"

namespace opendnn::cuda {
namespace {

constexpr int64_t kBase = 4000;

bool packed(const TensorPtr& t) { return t && t->is_packed_row_major(); }

// What forward and backward share: shapes, types and the attributes the kernels take. Fills the
// common fields of FwdArgs or BwdArgs; returns "" or the reason to decline.
template <class Args>
std::string match_common(const Node& n, Args& a) {
  const TensorPtr &q = n.in("q"), &k = n.in("k"), &v = n.in("v");
  a.io = q->get_data_type();
  if (a.io != DataType::HALF && a.io != DataType::BFLOAT16) return "q, k, v must be HALF or BFLOAT16";
  for (const TensorPtr& t : {q, k, v, n.in("g"), n.in("beta"), n.in("cu_seqlens")})
    if (!packed(t)) return "q, k, v, g, beta and cu_seqlens must be packed row-major";
  a.t = q->get_dim()[0], a.h = q->get_dim()[1], a.k = q->get_dim()[2];
  a.hv = v->get_dim()[1], a.v = v->get_dim()[2];
  a.ho = a.h > a.hv ? a.h : a.hv;
  a.n = n.in("cu_seqlens")->get_dim()[0] - 1;
  if (k->get_dim()[1] != a.h) return "k must have q's head count";
  if (a.t > (int64_t(1) << 30)) return "more than 2^30 tokens";
  if (a.ho > 65535) return "more than 65535 output heads";
  a.g_type = n.in("g")->get_data_type();
  a.beta_type = n.in("beta")->get_data_type();
  a.cu_int64 = n.in("cu_seqlens")->get_data_type() == DataType::INT64;
  if (n.attr_bool("use_beta_sigmoid")) return "not supported: use_beta_sigmoid";
  if (n.attr_bool("allow_neg_eigval")) return "not supported: allow_neg_eigval";
  if (n.attr_bool("safe_gate") || n.in("a_log") || n.in("dt_bias")) return "not supported: the fused gate (safe_gate)";
  if (n.attr_str("gate_domain") != "log") return "not supported: gate_domain linear";
  if (n.attr_int("checkpoint_every_n_tokens") != 0) return "not supported: state checkpoints";
  if (n.spec().input_index("state_indices") >= 0 && n.in("state_indices")) return "not supported: state_indices (a state pool)";
  if (n.attr_bool("overwrite_initial_state")) return "not supported: overwrite_initial_state";
  a.scale = float(n.has("scale") ? n.attr_float("scale") : 1.0 / std::sqrt(double(a.k)));
  a.l2norm = n.attr_bool("use_qk_l2norm");
  if (const TensorPtr& init = n.in("initial_state")) {
    a.init_type = init->get_data_type();
    const auto& st = init->get_stride();
    for (int i = 0; i < 4; ++i) a.init_stride[i] = st[size_t(i)];
  }
  return "";
}

void strides_of(const TensorPtr& t, int64_t (&out)[4]) {
  const auto& st = t->get_stride();
  for (int i = 0; i < 4; ++i) out[i] = st[size_t(i)];
}

// Kernel choices read at propose/build time: the register-state forward pass (OPENDNN_GDN_FWD_V2) and
// the tensor-core chunk_prep (OPENDNN_GDN_PREP_V2) are the default since they passed test_cuda_gdn on the
// H200 (forward 3.0 ms vs 13.9 ms for the first kernels, H16 HV64 32k tokens); =0 selects the first
// kernels (A/B). The sequence split is taken where even the narrowest state slices leave half the SMs
// idle: measured (bench/gdn.py --split) 0.64 ms vs 2.92 ms unsplit at H4 HV8 32k tokens, but 3.25 vs
// 3.02 ms at H16 HV64, where the unsplit pass already has a CTA per SM. OPENDNN_GDN_SPLIT=1/0 forces it.
bool env_flag(const char* name, bool dflt) {
  const char* e = std::getenv(name);
  return e && *e ? std::strcmp(e, "1") == 0 : dflt;
}

// A state-slice width forced from the environment: 16, 32 or 64 dividing v, else 0 (declined).
int forced_slice(const char* e, int64_t v) {
  const int bv = std::atoi(e);
  return (bv == 16 || bv == 32 || bv == 64) && v % bv == 0 ? bv : 0;
}

std::string match_forward(const Node& n, const Target& target, gdn::FwdArgs& a) {
  if (std::string why = match_common(n, a); !why.empty()) return why;
  const TensorPtr& o = n.out("O");
  if (o->get_data_type() != a.io) return "O must have q's data type";
  if (o->get_is_virtual() || !packed(o)) return "O must be a packed graph output";
  if (!gdn::supported_dims(a.k, a.v)) return "head dims K and V must be multiples of 16 up to 256";
  if (n.attr_bool("output_final_state")) {
    const TensorPtr& fin = n.out("final_state");
    if (fin->get_is_virtual()) return "final_state must be a graph output";
    a.final_type = fin->get_data_type();
    strides_of(fin, a.fin_stride);
  }
  const int sms = target.sm_count > 0 ? target.sm_count : 132;
  a.mma_pass = env_flag("OPENDNN_GDN_FWD_V2", true) && gdn::mma_pass_supported(a.k, a.v);
  a.mma_prep = env_flag("OPENDNN_GDN_PREP_V2", true) && gdn::mma_prep_supported(a.k, a.v);
  // Half the SMs idle at the unsplit pass's slices: 64 columns under v4 (the default), 16 otherwise. H200
  // (bench/gdn.py --split, session 11): H16 HV32 32k tokens, 64 CTAs of v4, 1.640 ms unsplit vs 1.466 split,
  // outputs and final states bitwise equal.
  const bool v4_slices = env_flag("OPENDNN_GDN_FWD_V4", true) && env_flag("OPENDNN_GDN_PREP_V3", true) && a.v % 64 == 0;
  const bool underfilled = a.n * a.ho * (a.v / (v4_slices ? 64 : 16)) * 2 <= sms;
  a.split = env_flag("OPENDNN_GDN_SPLIT", underfilled) && gdn::mma_pass_supported(a.k, a.v) && gdn::choose_split(a, sms);
  // Session 5's forward (see FwdArgs): chunk_prep_mma v3 (Tu instead of W and U, fused l2norm, gate
  // prefetch; needs the register-state pass, which then forms v' itself) and three chunk stages in the
  // register-state pass. Default since the H200 run of session 5: CudaGdn.V3* (first runs on a NaN
  // workspace checked; several sequences, partial chunks and 64-column slices among them) and
  // bench/gdn.py 2.23 ms vs 2.89 (H16 HV64 32k); =0 selects the previous kernels.
  a.prep_v3 = env_flag("OPENDNN_GDN_PREP_V3", true) && a.mma_prep && (a.mma_pass || a.split);
  if (env_flag("OPENDNN_GDN_PASS_V3", true) && a.prep_v3) a.stages = 3;
  // The unsplit register-state pass only runs on v3's prep (Tu and the row scales). Without it (W and U
  // from the first chunk_prep or chunk_prep_mma) it gave wrong final states on the H200, O right: session 7
  // at 32/64-column slices, and session 10 at 16-column slices too (CudaGdn.ManyHeadsWideSlices and
  // MidHeadsSlices32, K = V = 64, HV = 5H / 8H: final-state errors ~1e3, both preps). Its two-stage ring
  // without v3 is the one whose cp.async commit nvcc 13.0 dropped (fixed in session 11, see `queue` in
  // gdn_kernels.cu; session 8's racecheck had flagged it): the likely cause, not yet re-run. So OPENDNN_GDN_PREP_V3=0 and
  // OPENDNN_GDN_PREP_V2=0 now run the first pass (state_pass), which passes every case. The split keeps
  // its non-v3 variant (its tests pass) and the backward's recompute its kStates mode (its own tests).
  if (!a.split && !a.prep_v3) a.mma_pass = false;
  // OPENDNN_GDN_BV=16|32|64 forces the width (tests, A/B).
  if (!a.split) a.bv = !a.mma_pass ? gdn::choose_bv(a, sms) : gdn::choose_bv_mma(a, sms);
  if (const char* e = std::getenv("OPENDNN_GDN_BV"); e && !a.split) a.bv = forced_slice(e, a.v);
  if (a.bv == 0) return "no state slice width fits shared memory for V = " + std::to_string(a.v) + " (or OPENDNN_GDN_BV is not 16, 32 or 64 dividing V)";
  // v4 (default since session 9; OPENDNN_GDN_FWD_V4=0 keeps the mma.sync products): the v3 pass with wgmma
  // chunk products; a warpgroup owns 64 state columns. The unsplit pass is bound by its per-chunk step, not
  // by how many SMs it fills (H16 HV32 32k: 128 CTAs of 2 warps at bv = 32, ~3 us a step), so v4 takes
  // 64-column slices even where that leaves SMs idle (64 CTAs there), unless OPENDNN_GDN_BV forces a width;
  // the split keeps its own (64 or 128). H200 (bench/gdn.py --quick): H16 HV64 32k tokens 1.96 ms vs 2.28,
  // H4 HV8 (split) 0.448 vs 0.524, outputs and final states bitwise equal to the v3 pass's.
  if (env_flag("OPENDNN_GDN_FWD_V4", true) && a.prep_v3) {
    if (!a.split && a.v % 64 == 0 && !std::getenv("OPENDNN_GDN_BV")) a.bv = 64;
    a.wg = a.bv % 64 == 0;
  }
  return "";
}

std::string match_backward(const Node& n, const Target& target, gdn::BwdArgs& a) {
  if (std::string why = match_common(n, a); !why.empty()) return why;
  if (n.in("state_checkpoints")) return "not supported: state_checkpoints input";
  if (!gdn::backward_supported_dims(a.k, a.v)) {
    // Larger states (K or V = 256) only fit the V-sliced sweep: correct (CudaGdn.SlicedBackward* passed on
    // the H200, session 10) but a fallback, ~4x the unsliced sweep's time by estimate, with [slices, T, HO, K]
    // fp32 partials in the workspace. OPENDNN_GDN_BWD_SLICED=0 withholds it.
    a.sliced = env_flag("OPENDNN_GDN_BWD_SLICED", true) && gdn::sliced_backward_supported_dims(a.k, a.v);
    if (!a.sliced)
      return std::string("backward needs K * V <= 16384 (the fp32 state and its gradient in shared memory)") +
             (gdn::sliced_backward_supported_dims(a.k, a.v) ? " unless the V-sliced sweep is allowed (OPENDNN_GDN_BWD_SLICED is 0)" : "");
  }
  const TensorPtr& d_o = n.in("dO");
  if (d_o->get_data_type() != a.io || !packed(d_o)) return "dO must be packed with q's data type";
  const char* outs[] = {"dQ", "dK", "dV", "dG", "dBeta"};
  const char* ins[] = {"q", "k", "v", "g", "beta"};
  for (int i = 0; i < 5; ++i) {
    const TensorPtr& t = n.out(outs[i]);
    if (t->get_is_virtual() || !packed(t)) return std::string(outs[i]) + " must be a packed graph output";
    if (t->get_data_type() != n.in(ins[i])->get_data_type())
      return std::string(outs[i]) + " must have the data type of " + ins[i];
  }
  if (const TensorPtr& dfin = n.in("d_final_state")) {
    a.dfin_type = dfin->get_data_type();
    strides_of(dfin, a.dfin_stride);
  }
  if (n.in("initial_state")) {
    const TensorPtr& dinit = n.out("d_initial_state");
    a.dinit_type = dinit->get_data_type();
    if (!dinit->get_is_virtual()) strides_of(dinit, a.dinit_stride);
  }
  a.grid = int(target.sm_count > 0 ? target.sm_count : 132);
  a.bv = gdn::choose_bv_backward(a, a.grid);
  // OPENDNN_GDN_BWD_BV=16|32|64 forces the state-slice width of the backward (and of its forward recompute,
  // the register-state pass without v3, see match_forward).
  if (const char* e = std::getenv("OPENDNN_GDN_BWD_BV")) a.bv = forced_slice(e, a.v);
  if (a.bv == 0) return "OPENDNN_GDN_BWD_BV must be 16, 32 or 64 and divide V";
  // Three chunk stages in the recompute's register-state pass and in state_bwd, and the lean post
  // (BwdArgs::v3; the lean post skips the dv rows that chunk_bwd_v2 writes itself).
  // Default since session 9 (H200: its tests, now test_cuda_gdn's ChunkedBackward* cases, passed; H16 HV64 32k
  // tokens 10.43 ms vs 11.35, gradients equal within 2e-7); OPENDNN_GDN_BWD_V3=0 keeps two stages and the full
  // post (ChunkedBackwardTwoStage*).
  a.v3 = env_flag("OPENDNN_GDN_BWD_V3", true);
  // Few heads: the recompute's pass and state_bwd each walk every chunk of a sequence in order on
  // n * HO * V / bv CTAs of one warp (bv = 16: 64 CTAs at H4 HV8), ~4 us a step (~2 ms each of the backward's
  // 4.79 there); split into segments, as the forward's split runs that walk in ~0.3 ms. Default where the
  // unsplit CTAs leave half the SMs idle since session 12 (H200: CudaGdn.ChunkedBackwardSplitRecompute passed;
  // bench/gdn.py --bwd --bwd-unsplit, H4 HV8 32k tokens: 2.02 ms vs 4.76 unsplit and 3.50 for fla, dq/dk/dv
  // bitwise equal to the unsplit backward's, dg within 2e-7); OPENDNN_GDN_BWD_SPLIT=0 keeps the unsplit walk.
  a.split = env_flag("OPENDNN_GDN_BWD_SPLIT", true) && a.n * a.ho * (a.v / a.bv) * 2 <= a.grid;
  return "";
}

// The chunked backward passed test_cuda_gdn's Chunked cases on the H200 and runs H16 HV64 32k tokens in
// 15.3 ms against 1218 ms for the token-exact plan (gdn_bwd.json), so it is offered by default
// (OPENDNN_GDN_BWD_CHUNKED=0 withholds it); the token-exact plan stays the fallback. Returns "" or why it
// does not apply.
constexpr int64_t kChunkedBwd = kBase + 2;
std::string chunked_bwd_declined(const gdn::BwdArgs& a) {
  if (!env_flag("OPENDNN_GDN_BWD_CHUNKED", true)) return "gdn_bwd_chunked: withheld by OPENDNN_GDN_BWD_CHUNKED=0";
  if (!gdn::chunked_backward_supported(a.k, a.v)) return "gdn_bwd_chunked: K and V must each be 64 or 128";
  return "";
}

// Which pass the graph is, with its arguments; returns "" or the reason to decline.
std::string match(const Graph& g, const Target& target, gdn::FwdArgs& f, gdn::BwdArgs& b, bool& backward) {
  if (g.nodes().size() != 1) return "runs single-node GDN graphs only";
  const Node& n = *g.nodes()[0];
  backward = n.kind() == OpKind::GDN_BACKWARD;
  if (backward) return match_backward(n, target, b);
  if (n.kind() != OpKind::GDN) return "not a GDN node";
  return match_forward(n, target, f);
}

// The work is 4KV FLOP per token and head in the state products plus the chunk-local ones
// (about 2.75x that at K = V = 128); assume ~60 TFLOP/s until measured, plus the sequential
// depth of the state pass (T/64 chunks of the longest sequence, unknown here: T/64/N on average).
double estimate_us(const gdn::FwdArgs& a) {
  const double flops = double(a.t) * double(a.ho) * (6.0 * a.k * a.v + 64.0 * (6.0 * a.k + 4.0 * a.v));
  double depth = double(a.t) / 64.0 / double(a.n > 0 ? a.n : 1);
  // Split: two walks of a segment plus one combine step per segment.
  if (a.split) depth = 2.0 * a.seg_chunks + depth / a.seg_chunks;
  return 10.0 + flops / 60e6 + depth * 1.5;
}

// The token-exact backward: ~3 us of sequential work per token (two forward sweeps and the reverse),
// items spread over the persistent grid.
double estimate_bwd_us(const gdn::BwdArgs& a) {
  // Chunked: the forward recompute plus about 3x its FLOPs (the chunk-local backward products) at the
  // same ~60 TFLOP/s guess, and a reverse sequential pass as deep as the forward's.
  if (a.chunked) {
    const double flops = double(a.t) * double(a.ho) * (6.0 * a.k * a.v + 64.0 * (6.0 * a.k + 4.0 * a.v));
    const double depth = double(a.t) / 64.0 / double(a.n > 0 ? a.n : 1);
    return 20.0 + 4.0 * flops / 60e6 + 2.0 * depth * 1.5;
  }
  // Sliced: each slice is an item whose step costs about what an unsliced one of the same state size does.
  const double items = double(a.n * a.ho * gdn::backward_sweep_slices(a));
  const double waves = std::ceil(items / double(a.grid > 0 ? a.grid : 1));
  return 10.0 + waves * double(a.t) / double(a.n > 0 ? a.n : 1) * 3.0;
}

int64_t bwd_workspace(const gdn::BwdArgs& a) {
  return a.chunked ? gdn::chunked_backward_workspace_bytes(a) : gdn::backward_workspace_bytes(a);
}

// Both passes: the slots are resolved at build time, execute only fills pointers and launches.
class GdnPlan : public Plan {
 public:
  GdnPlan(gdn::FwdArgs f, gdn::BwdArgs b, bool backward, std::vector<int64_t> slots)
      : f_(f), b_(b), backward_(backward), s_(std::move(slots)) {}
  Status execute(void* const* slots, void* workspace, void* stream) override {
    auto ptr = [&](size_t i) -> void* { return s_[i] >= 0 ? slots[s_[i]] : nullptr; };
    for (size_t i = 0; i < s_.size(); ++i)
      if (required(i) && !ptr(i))
        return {ErrorCode::INVALID_VARIANT_PACK, "cuda gdn: every input and output needs device memory"};
    const char* e = nullptr;
    if (!backward_) {
      gdn::FwdArgs a = f_;
      a.q = ptr(0), a.kk = ptr(1), a.vv = ptr(2), a.g = ptr(3), a.beta = ptr(4), a.cu = ptr(5), a.o = ptr(6);
      a.init = ptr(7), a.fin = ptr(8);
      e = gdn::launch_forward(a, workspace, stream);
    } else {
      gdn::BwdArgs a = b_;
      a.q = ptr(0), a.kk = ptr(1), a.vv = ptr(2), a.g = ptr(3), a.beta = ptr(4), a.cu = ptr(5), a.d_o = ptr(6);
      a.init = ptr(7), a.dfin = ptr(8);
      a.dq = ptr(9), a.dk = ptr(10), a.dv = ptr(11), a.dg = ptr(12), a.dbeta = ptr(13), a.dinit = ptr(14);
      e = a.chunked ? gdn::launch_backward_chunked(a, workspace, stream) : gdn::launch_backward(a, workspace, stream);
    }
    if (e) return {ErrorCode::CUDA_API_FAILED, std::string("cuda gdn: ") + e};
    return {};
  }
  int64_t workspace_size() const override {
    return backward_ ? bwd_workspace(b_) : gdn::forward_workspace_bytes(f_);
  }
  // q, k, v, g, beta, cu_seqlens, O or dO; dQ, dK, dV, dG, dBeta. The states are optional.
  bool required(size_t i) const { return i < 7 || (backward_ && i >= 9 && i < 14); }

 private:
  gdn::FwdArgs f_;
  gdn::BwdArgs b_;
  bool backward_;
  std::vector<int64_t> s_;
};

void propose(const Graph& g, const Target& t, Proposal& out) {
  gdn::FwdArgs f;
  gdn::BwdArgs b;
  bool backward = false;
  std::string why = match(g, t, f, b, backward);
  if (!why.empty()) {
    out.declines.push_back(why);
    return;
  }
  if (backward) {
    if (std::string no = chunked_bwd_declined(b); !no.empty()) {
      out.declines.push_back(no);
    } else {
      gdn::BwdArgs cb = b;
      cb.chunked = true;
      PlanCandidate c;
      // Its per-chunk kernel is chunk_bwd_v2 (the first one, chunk_bwd, is gone); the name keeps "_v2" so that
      // plan caches and result files stay comparable with those written while both kernels existed.
      c.name = std::string("gdn_bwd_chunked_v2") + (cb.v3 ? "_bv3" : "") + (cb.split ? "_split" : "");
      c.local_index = kChunkedBwd;
      // Asked for by name (the switch), so ranked ahead of the token-exact plan whatever the guess says.
      c.estimated_us = std::min(estimate_bwd_us(cb), 0.5 * estimate_bwd_us(b));
      c.workspace_bytes = bwd_workspace(cb);
      c.numerical_notes = {NumericalNote::TENSOR_CORE};  // mma.sync
      c.deterministic = false;  // the warps of a chunk add their dgamma terms with fp32 atomicAdd
      out.plans.push_back(c);
    }
  }
  PlanCandidate c;
  c.name = backward ? std::string("gdn_bwd_token_exact") + (b.sliced ? "_sliced" : "")
                    : std::string("gdn_fwd_chunk64") + (f.split ? "_split" : f.mma_pass ? "_mma" : "") +
                          (f.mma_prep ? "_prep2" : "") + (f.prep_v3 ? "_prep3" : "") + (f.stages > 2 ? "_pass3" : "") +
                          (f.wg ? "_v4" : "");
  c.local_index = kBase + (backward ? 1 : 0);
  c.estimated_us = backward ? estimate_bwd_us(b) : estimate_us(f);
  c.workspace_bytes = backward ? bwd_workspace(b) : gdn::forward_workspace_bytes(f);
  out.plans.push_back(c);
}

Status build(const Graph& g, const Target& t, const PlanCandidate& cand, std::unique_ptr<Plan>& out) {
  gdn::FwdArgs f;
  gdn::BwdArgs b;
  bool backward = false;
  std::string why = match(g, t, f, b, backward);
  if (why.empty() && backward && cand.local_index == kChunkedBwd) {
    why = chunked_bwd_declined(b);
    b.chunked = true;
  }
  if (!why.empty()) return {ErrorCode::GRAPH_EXECUTION_PLAN_CREATION_FAILED, "cuda gdn: " + why};
  const Node& n = *g.nodes()[0];
  auto slot = [&](const TensorPtr& p) { return p ? slot_of(g, p) : int64_t(-1); };
  std::vector<int64_t> slots = {slot(n.in("q")), slot(n.in("k")),    slot(n.in("v")),
                                slot(n.in("g")), slot(n.in("beta")), slot(n.in("cu_seqlens"))};
  if (!backward) {
    slots.push_back(slot(n.out("O")));
    slots.push_back(slot(n.in("initial_state")));
    slots.push_back(n.attr_bool("output_final_state") ? slot(n.out("final_state")) : -1);
  } else {
    slots.push_back(slot(n.in("dO")));
    slots.push_back(slot(n.in("initial_state")));
    slots.push_back(slot(n.in("d_final_state")));
    for (const char* p : {"dQ", "dK", "dV", "dG", "dBeta"}) slots.push_back(slot(n.out(p)));
    const TensorPtr& dinit = n.in("initial_state") ? n.out("d_initial_state") : nullptr;
    slots.push_back(dinit && !dinit->get_is_virtual() ? slot(dinit) : -1);
  }
  out = std::make_unique<GdnPlan>(f, b, backward, std::move(slots));
  return {};
}

const Family kGdn = {"gdn", kBase, propose, build};

}  // namespace

const Family& gdn_family() { return kGdn; }

}  // namespace opendnn::cuda
