// SPDX-License-Identifier: Apache-2.0
// GDN and GDN_BWD: gated delta net linear attention (see shared/reference/gated_delta_net.md).
// THD token-packed: q [T, H, K], k [T, HK, K], v [T, HV, V], g and beta [T, HO] with HO = max(H, HV),
// cu_seqlens [N+1]; state [N, HO, V, K] (V-major, as cuDNN Frontend stores it), fp32 or bf16.
//
// Rules (checked by infer_gdn / infer_gdn_bwd):
// - HK == H (k with HV heads, which cuDNN allows, is not supported); HV % H == 0 (GVA: value head j
//   reads q/k head j / (HV/H)) or H % HV == 0 (output head j reads v head j / (H/HV)).
// - q, k, v: HALF, BFLOAT16 or FLOAT (FLOAT for the reference engine), all the same; g: FLOAT, HALF or
//   BFLOAT16; beta: FLOAT or q's type; K, V <= 256; cu_seqlens int32/int64 with at least one sequence.
// - initial_state [N, HO, V, K], or [P, HO, V, K] for a pool of P states addressed by state_indices [N]
//   int32; FLOAT or BFLOAT16. final_state (output_final_state) is [N, HO, V, K] in initial_state's type,
//   FLOAT without one.
// - a_log, dt_bias [HO] are the fused gate (g = -exp(a_log) * softplus(g + dt_bias)) and need safe_gate;
//   safe_gate needs a_log.
// - state_checkpoints (checkpoint_every_n_tokens = n > 0) is [T/n + N, HO, V, K] in q's type (integer
//   division; a static upper bound): sequence i owns rows r_i .. r_i + floor(len_i/n), with
//   r_i = sum over j < i of (len_j/n + 1); row r_i + c holds the state after the first c*n tokens of the
//   sequence (c = 0 is the initial state). Rows past the last sequence's are left unspecified.
// - Outputs a configuration does not produce (final_state without output_final_state, state_checkpoints
//   with n = 0, d_initial_state without initial_state, ...) get zero-size dims of their rank and may not
//   be marked as graph outputs.
#include <string>
#include <vector>

#include "ops/infer_util.h"
#include "ops/op_defs.h"

namespace opendnn {
namespace {

const PortSpec kFwdIn[] = {{"q"}, {"k"}, {"v"}, {"g"}, {"beta"}, {"cu_seqlens"},
                           {"initial_state", false}, {"state_indices", false}, {"a_log", false}, {"dt_bias", false}};
const PortSpec kFwdOut[] = {{"O"}, {"final_state", false}, {"state_checkpoints", false}};
const AttrSpec kAttrs[] = {
    {"scale", AttrType::FLOAT, {}},  // default 1/sqrt(K)
    {"output_final_state", AttrType::BOOL, false},
    {"use_qk_l2norm", AttrType::BOOL, false},
    {"use_beta_sigmoid", AttrType::BOOL, false},
    {"allow_neg_eigval", AttrType::BOOL, false},
    {"safe_gate", AttrType::BOOL, false},
    {"gate_domain", AttrType::ENUM, "log", "log|linear"},
    {"batch_invariant", AttrType::BOOL, false},
    {"overwrite_initial_state", AttrType::BOOL, false},
    {"checkpoint_every_n_tokens", AttrType::INT, 0},
};
const PortSpec kBwdIn[] = {{"q"}, {"k"}, {"v"}, {"g"}, {"beta"}, {"cu_seqlens"}, {"dO"},
                           {"state_checkpoints", false}, {"initial_state", false}, {"d_final_state", false},
                           {"a_log", false}, {"dt_bias", false}};
const PortSpec kBwdOut[] = {{"dQ"}, {"dK"}, {"dV"}, {"dG"}, {"dBeta"},
                            {"d_initial_state", false}, {"d_a_log", false}, {"d_dt_bias", false}};

std::string num(int64_t v) { return std::to_string(v); }

struct Problem {
  int64_t t = 0, h = 0, hv = 0, ho = 0, k = 0, v = 0, n = 0;
  DataType io = DataType::NOT_SET;
};

bool is_state_type(DataType t) { return t == DataType::FLOAT || t == DataType::BFLOAT16; }

Status check_inputs(const Node& n, Problem& p, bool bwd) {
  OPENDNN_RETURN_IF_ERROR(ops::require_rank(n, "q", 3));
  OPENDNN_RETURN_IF_ERROR(ops::require_rank(n, "k", 3));
  OPENDNN_RETURN_IF_ERROR(ops::require_rank(n, "v", 3));
  OPENDNN_RETURN_IF_ERROR(ops::require_rank(n, "g", 2));
  OPENDNN_RETURN_IF_ERROR(ops::require_rank(n, "beta", 2));
  OPENDNN_RETURN_IF_ERROR(ops::require_rank(n, "cu_seqlens", 1));
  const auto& q = n.in("q")->get_dim();
  const auto& k = n.in("k")->get_dim();
  const auto& v = n.in("v")->get_dim();
  p.t = q[0], p.h = q[1], p.k = q[2], p.hv = v[1], p.v = v[2];
  p.ho = p.h > p.hv ? p.h : p.hv;

  // Types.
  OPENDNN_RETURN_IF_ERROR(ops::expect_type(n, "q", {DataType::HALF, DataType::BFLOAT16, DataType::FLOAT}));
  p.io = n.in("q")->get_data_type();
  for (const char* port : {"k", "v"})
    if (n.in(port)->get_data_type() != p.io)
      return n.fail(ErrorCode::GRAPH_NOT_SUPPORTED, std::string("input ") + port + " has data type " +
                                                        std::string(to_string(n.in(port)->get_data_type())) +
                                                        " but q has " + std::string(to_string(p.io)) + "; q, k, v must match");
  OPENDNN_RETURN_IF_ERROR(ops::expect_type(n, "g", {DataType::FLOAT, DataType::HALF, DataType::BFLOAT16}));
  if (n.in("beta")->get_data_type() != DataType::FLOAT && n.in("beta")->get_data_type() != p.io)
    return n.fail(ErrorCode::GRAPH_NOT_SUPPORTED, "input beta has data type " +
                                                      std::string(to_string(n.in("beta")->get_data_type())) +
                                                      "; allowed: FLOAT or q's type " + std::string(to_string(p.io)));
  OPENDNN_RETURN_IF_ERROR(ops::expect_type(n, "cu_seqlens", {DataType::INT32, DataType::INT64}));

  // Shapes.
  if (p.h < 1 || p.hv < 1 || p.k < 1 || p.v < 1)
    return n.fail(ErrorCode::SHAPE_DEDUCTION_FAILED, "q " + ops::dims_str(q) + " and v " + ops::dims_str(v) +
                                                         " need at least one head and a head dim >= 1");
  if (k[0] != p.t || v[0] != p.t)
    return n.fail(ErrorCode::SHAPE_DEDUCTION_FAILED, "token counts differ: q " + ops::dims_str(q) + ", k " +
                                                         ops::dims_str(k) + ", v " + ops::dims_str(v));
  if (k[2] != p.k)
    return n.fail(ErrorCode::SHAPE_DEDUCTION_FAILED, "head dim of k " + ops::dims_str(k) + " differs from q " +
                                                         ops::dims_str(q));
  if (k[1] != p.h) {
    if (k[1] == p.hv)
      return n.fail(ErrorCode::GRAPH_NOT_SUPPORTED, "k " + ops::dims_str(k) + " has HV = " + num(p.hv) +
                                                        " heads; only HK == H (" + num(p.h) + ") is supported");
    return n.fail(ErrorCode::SHAPE_DEDUCTION_FAILED, "k " + ops::dims_str(k) + " must have H = " + num(p.h) +
                                                         " heads like q");
  }
  if (p.hv % p.h != 0 && p.h % p.hv != 0)
    return n.fail(ErrorCode::SHAPE_DEDUCTION_FAILED, "heads of q (" + num(p.h) + ") and v (" + num(p.hv) +
                                                         ") must divide one another");
  if (p.k > 256) return n.fail(ErrorCode::GRAPH_NOT_SUPPORTED, "head dim K = " + num(p.k) + " of q exceeds 256");
  if (p.v > 256) return n.fail(ErrorCode::GRAPH_NOT_SUPPORTED, "head dim V = " + num(p.v) + " of v exceeds 256");
  OPENDNN_RETURN_IF_ERROR(ops::expect_dims(n, "g", {p.t, p.ho}, "[T,HO] with HO = max(H,HV)"));
  OPENDNN_RETURN_IF_ERROR(ops::expect_dims(n, "beta", {p.t, p.ho}, "[T,HO] with HO = max(H,HV)"));
  const auto& cu = n.in("cu_seqlens")->get_dim();
  if (cu[0] < 2)
    return n.fail(ErrorCode::SHAPE_DEDUCTION_FAILED, "cu_seqlens " + ops::dims_str(cu) + " must be [N+1] with N >= 1");
  p.n = cu[0] - 1;

  // Attributes.
  if (n.has("scale")) {
    double s = n.attr_float("scale");
    if (!(s > 0.0) || s > 1e30)
      return n.fail(ErrorCode::INVALID_VALUE, "scale " + std::to_string(s) + " must be a finite value > 0");
  }
  int64_t every = n.attr_int("checkpoint_every_n_tokens");
  if (every < 0)
    return n.fail(ErrorCode::INVALID_VALUE, "checkpoint_every_n_tokens " + num(every) + " must be >= 0");

  // Gate fusion.
  bool safe_gate = n.attr_bool("safe_gate");
  for (const char* port : {"a_log", "dt_bias"}) {
    if (!ops::input_if(n, port)) continue;
    if (!safe_gate)
      return n.fail(ErrorCode::ATTRIBUTE_NOT_SET, std::string("input ") + port + " is given but safe_gate is not set");
    OPENDNN_RETURN_IF_ERROR(ops::expect_dims(n, port, {p.ho}, "[HO]"));
    OPENDNN_RETURN_IF_ERROR(ops::expect_type(n, port, {DataType::FLOAT, DataType::HALF, DataType::BFLOAT16}));
  }
  if (safe_gate && !ops::input_if(n, "a_log"))
    return n.fail(ErrorCode::ATTRIBUTE_NOT_SET, "safe_gate needs input a_log");

  // States.
  const TensorPtr& init = ops::input_if(n, "initial_state");
  const TensorPtr& indices = ops::input_if(n, "state_indices");
  if (indices) {
    if (!init) return n.fail(ErrorCode::ATTRIBUTE_NOT_SET, "input state_indices is given but initial_state is not set");
    OPENDNN_RETURN_IF_ERROR(ops::expect_dims(n, "state_indices", {p.n}, "[N]"));
    OPENDNN_RETURN_IF_ERROR(ops::expect_type(n, "state_indices", {DataType::INT32}));
  }
  if (!bwd && n.attr_bool("overwrite_initial_state") && !init)
    return n.fail(ErrorCode::ATTRIBUTE_NOT_SET, "overwrite_initial_state needs input initial_state");
  if (init) {
    OPENDNN_RETURN_IF_ERROR(ops::require_rank(n, "initial_state", 4));
    const auto& s = init->get_dim();
    int64_t rows = indices ? s[0] : p.n;
    if (indices && rows < 1)
      return n.fail(ErrorCode::SHAPE_DEDUCTION_FAILED, "initial_state " + ops::dims_str(s) + " is an empty state pool");
    OPENDNN_RETURN_IF_ERROR(ops::expect_dims(n, "initial_state", {rows, p.ho, p.v, p.k},
                                             indices ? "[pool,HO,V,K]" : "[N,HO,V,K]"));
    OPENDNN_RETURN_IF_ERROR(ops::expect_type(n, "initial_state", {DataType::FLOAT, DataType::BFLOAT16}));
  }
  return {};
}

std::vector<int64_t> state_dims(const Problem& p) { return {p.n, p.ho, p.v, p.k}; }

Status infer_gdn(Node& n, const GraphContext&) {
  Problem p;
  OPENDNN_RETURN_IF_ERROR(check_inputs(n, p, false));
  OPENDNN_RETURN_IF_ERROR(ops::set_dims(n, "O", {p.t, p.ho, p.v}));
  ops::default_type(n, "O", p.io);
  OPENDNN_RETURN_IF_ERROR(ops::expect_out_type(n, "O", {DataType::HALF, DataType::BFLOAT16, DataType::FLOAT}));

  const TensorPtr& init = ops::input_if(n, "initial_state");
  if (n.attr_bool("output_final_state")) {
    OPENDNN_RETURN_IF_ERROR(ops::set_dims(n, "final_state", state_dims(p)));
    ops::default_type(n, "final_state", init ? init->get_data_type() : DataType::FLOAT);
    if (!is_state_type(n.out("final_state")->get_data_type()))
      return n.fail(ErrorCode::GRAPH_NOT_SUPPORTED, "output final_state has data type " +
                                                        std::string(to_string(n.out("final_state")->get_data_type())) +
                                                        "; allowed: FLOAT, BFLOAT16");
  } else {
    OPENDNN_RETURN_IF_ERROR(ops::set_absent(n, "final_state", 4, "output_final_state is false"));
  }

  int64_t every = n.attr_int("checkpoint_every_n_tokens");
  if (every > 0) {
    OPENDNN_RETURN_IF_ERROR(ops::set_dims(n, "state_checkpoints", {p.t / every + p.n, p.ho, p.v, p.k}));
    ops::default_type(n, "state_checkpoints", p.io);
  } else {
    OPENDNN_RETURN_IF_ERROR(ops::set_absent(n, "state_checkpoints", 4, "checkpoint_every_n_tokens is 0"));
  }
  return {};
}

Status infer_gdn_bwd(Node& n, const GraphContext&) {
  Problem p;
  OPENDNN_RETURN_IF_ERROR(check_inputs(n, p, true));
  OPENDNN_RETURN_IF_ERROR(ops::require_rank(n, "dO", 3));
  OPENDNN_RETURN_IF_ERROR(ops::expect_dims(n, "dO", {p.t, p.ho, p.v}, "[T,HO,V]"));
  OPENDNN_RETURN_IF_ERROR(ops::expect_type(n, "dO", {DataType::HALF, DataType::BFLOAT16, DataType::FLOAT}));
  if (ops::input_if(n, "d_final_state")) {
    OPENDNN_RETURN_IF_ERROR(ops::expect_dims(n, "d_final_state", state_dims(p), "[N,HO,V,K]"));
    OPENDNN_RETURN_IF_ERROR(ops::expect_type(n, "d_final_state", {DataType::FLOAT, DataType::BFLOAT16}));
  }
  if (ops::input_if(n, "state_checkpoints")) {
    int64_t every = n.attr_int("checkpoint_every_n_tokens");
    if (every <= 0)
      return n.fail(ErrorCode::ATTRIBUTE_NOT_SET,
                    "input state_checkpoints is given but checkpoint_every_n_tokens (its cadence) is not set");
    OPENDNN_RETURN_IF_ERROR(
        ops::expect_dims(n, "state_checkpoints", {p.t / every + p.n, p.ho, p.v, p.k}, "[T/n+N,HO,V,K]"));
    OPENDNN_RETURN_IF_ERROR(
        ops::expect_type(n, "state_checkpoints", {DataType::FLOAT, DataType::HALF, DataType::BFLOAT16}));
  }

  for (auto [in, out] : {std::pair{"q", "dQ"}, std::pair{"k", "dK"}, std::pair{"v", "dV"}, std::pair{"g", "dG"},
                         std::pair{"beta", "dBeta"}}) {
    const TensorAttr& t = *n.in(in);
    OPENDNN_RETURN_IF_ERROR(ops::set_dims_like(n, out, t.get_dim(), t));
    ops::default_type(n, out, t.get_data_type());
  }
  for (auto [in, out] : {std::pair{"initial_state", "d_initial_state"}, std::pair{"a_log", "d_a_log"},
                         std::pair{"dt_bias", "d_dt_bias"}}) {
    if (const TensorPtr& t = ops::input_if(n, in)) {
      std::vector<int64_t> dims = t->get_dim();
      if (std::string_view(in) == "initial_state") dims = state_dims(p);  // per sequence, also for a pool
      OPENDNN_RETURN_IF_ERROR(ops::set_dims(n, out, dims));
      ops::default_type(n, out, t->get_data_type());
    } else {
      OPENDNN_RETURN_IF_ERROR(ops::set_absent(n, out, std::string_view(in) == "initial_state" ? 4 : 1,
                                              "input " + std::string(in) + " is not set"));
    }
  }
  return {};
}

}  // namespace

const OpDef def_GDN = {kFwdIn, kFwdOut, kAttrs, infer_gdn};
const OpDef def_GDN_BACKWARD = {kBwdIn, kBwdOut, kAttrs, infer_gdn_bwd};

}  // namespace opendnn
