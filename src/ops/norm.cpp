// SPDX-License-Identifier: Apache-2.0
// Normalisations, forward and backward: batchnorm (training, inference, backward, finalize, dbn
// weight), layernorm, rmsnorm, instancenorm and adalayernorm. epsilon and momentum are tensors
// (usually pass-by-value scalars), as in cuDNN Frontend.
//
// Conventions (C = X.dims[1]; "per channel" = [1, C, 1, ...] with X's rank)
//   epsilon, momentum, accum_count: tensors holding exactly one value.
//   Saved statistics (mean, inv_variance) and batchnorm running statistics are FLOAT by default.
//
//   batchnorm (training): X [N, C, ...] (rank >= 2), normalised per channel over every other dim.
//     scale, bias, prev_running_mean/var, and the outputs mean, inv_variance, next_running_mean/var are
//     per channel. epsilon is required. prev_running_mean, prev_running_var and momentum come together
//     or not at all; without them next_running_mean/var still get per-channel dims but are not written
//     (marking them as graph outputs is then an error).
//   batchnorm_inference: mean, inv_variance, scale, bias per channel; Y like X.
//   batchnorm_backward (DBN): DY like X; scale, mean, inv_variance per channel; DX like X; dscale and
//     dbias per channel.
//   dbn_weight: DY like X; mean, inv_variance, scale per channel; all five outputs per channel, the
//     eq_* coefficients FLOAT by default.
//   bn_finalize: sum, sq_sum, scale, bias [1, C, 1, ...] (rank >= 2, typically [1,C,1,1]); epsilon a
//     scalar; accum_count an INT64 scalar; optional prev_running_mean/var (per channel) and momentum,
//     all or none. All six outputs per channel, FLOAT by default.
//
//   layernorm / rmsnorm: X [B, ...] (rank >= 2); scale has X's rank with scale.dims[0] == 1 and each
//     other dim either X's (a normalised axis) or 1 (a batch axis). The usual form is
//     scale [1, d1, ..., dn] (normalise over all dims but the first); [1, 1, H] for X [B, S, H]
//     normalises over H only. bias (optional for rmsnorm) has scale's dims. Statistics
//     (mean, inv_variance) take X's dim on batch axes and 1 on normalised axes: [B, 1, ...] in the
//     usual form.
//   instancenorm: X [N, C, spatial...] (rank >= 3), normalised per (n, c) over the spatial dims;
//     scale/bias per channel; mean/inv_variance [N, C, 1, ...].
//   adalayernorm: X [B, ..., H] (rank >= 2), normalised over the last dim H only; scale and bias are
//     per batch element: [B, 1, ..., 1, H] (bias is optional: none adds nothing); mean/inv_variance are X's dims with the last set to 1
//     ([B, S, 1] for X [B, S, H]).
//   forward_phase INFERENCE: mean/inv_variance are not produced. They still get the dims above (every
//     output needs dims) but kernels skip them; marking them as graph outputs is an error.
//   *_backward: DY like X; mean/inv_variance with the forward's statistics dims; DX like X; dscale and
//     dbias with scale's dims. rmsnorm_backward writes dbias only when has_dbias (otherwise marking
//     dbias as a graph output is an error).
#include "ops/infer_util.h"
#include "ops/op_defs.h"

namespace opendnn {
namespace {

const AttrSpec kPhase[] = {{"forward_phase", AttrType::ENUM, "TRAINING", "TRAINING|INFERENCE"}};

// epsilon is required for batchnorm (cuDNN Frontend requires it too).
const PortSpec kBnIn[] = {{"X", true, "input"},         {"scale"},
                          {"bias"},                     {"epsilon", true},
                          {"momentum", false},          {"prev_running_mean", false, "in_running_mean"},
                          {"prev_running_var", false, "in_running_var"}};
const PortSpec kBnOut[] = {{"Y"}, {"mean"}, {"inv_variance"}, {"next_running_mean"}, {"next_running_var"}};

const PortSpec kBnInfIn[] = {{"X", true, "input"}, {"mean"}, {"inv_variance"}, {"scale"}, {"bias"}};
const PortSpec kYOut[] = {{"Y"}};

const PortSpec kBnBwdIn[] = {{"DY", true, "grad"}, {"X", true, "input"}, {"scale"}, {"mean"}, {"inv_variance"}};
const PortSpec kBwdOut[] = {{"DX"}, {"dscale"}, {"dbias"}};

const PortSpec kBnFinIn[] = {{"sum"},           {"sq_sum"},           {"scale"},
                             {"bias"},          {"epsilon"},          {"accum_count"},
                             {"prev_running_mean", false},            {"prev_running_var", false},
                             {"momentum", false}};
const PortSpec kBnFinOut[] = {{"eq_scale"}, {"eq_bias"}, {"mean"}, {"inv_variance"}, {"next_running_mean"}, {"next_running_var"}};

const PortSpec kDbnWIn[] = {{"DY", true, "grad"}, {"X", true, "input"}, {"mean"}, {"inv_variance"}, {"scale"}};
const PortSpec kDbnWOut[] = {{"dscale"}, {"dbias"}, {"eq_scale_dy"}, {"eq_scale_x"}, {"eq_bias"}};

const PortSpec kLnIn[] = {{"X", true, "input"}, {"scale"}, {"bias"}, {"epsilon"}};
const PortSpec kAdaLnIn[] = {{"X", true, "input"}, {"scale"}, {"epsilon"}, {"bias", false}};
const PortSpec kLnOut[] = {{"Y"}, {"mean"}, {"inv_variance"}};
const PortSpec kNormBwdIn[] = {{"DY", true, "grad"}, {"X", true, "input"}, {"scale"}, {"mean"}, {"inv_variance"}, {"epsilon", false}};

const PortSpec kRmsIn[] = {{"X", true, "input"}, {"scale"}, {"epsilon"}, {"bias", false}};
const PortSpec kRmsOut[] = {{"Y"}, {"inv_variance"}};
const PortSpec kRmsBwdIn[] = {{"DY", true, "grad"}, {"X", true, "input"}, {"scale"}, {"inv_variance"}};
const AttrSpec kRmsBwdAttrs[] = {{"has_dbias", AttrType::BOOL, false}};

using Dims = std::vector<int64_t>;

bool has_port(const Node& n, std::string_view port) { return n.spec().input_index(port) >= 0; }

Dims per_channel(const Dims& x) {
  Dims d(x.size(), 1);
  if (x.size() >= 2) d[1] = x[1];
  return d;
}

Status require_rank_at_least(const Node& n, std::string_view port, size_t lo, std::string_view layout) {
  const auto& d = ops::in_dims(n, port);
  if (d.size() < lo)
    return n.fail(ErrorCode::SHAPE_DEDUCTION_FAILED, "input " + std::string(port) + " " + ops::dims_str(d) + " must have at least " +
                                                         std::to_string(lo) + " dims " + std::string(layout));
  return {};
}

Status require_like(const Node& n, std::string_view port, std::string_view like) {
  return ops::require_dims(n, port, ops::in_dims(n, like), "(like " + std::string(like) + ")");
}

// Sets a statistics output, FLOAT by default; in INFERENCE phase it is not produced.
Status stats_output(Node& n, std::string_view port, const Dims& d, bool produced, std::string_view why = "in INFERENCE phase") {
  const TensorPtr& x = ops::input_if(n, "X");
  OPENDNN_RETURN_IF_ERROR(x ? ops::set_dims_like(n, port, d, *x) : ops::set_dims(n, port, d));
  ops::default_type(n, port, DataType::FLOAT);
  if (!produced && ops::is_user_output(n, port))
    return n.fail(ErrorCode::INVALID_VALUE, "output " + std::string(port) + " is marked as a graph output but is not produced " +
                                                std::string(why));
  return {};
}

// Running statistics: prev_running_mean, prev_running_var and momentum come together or not at all.
Status running_stats(const Node& n, const Dims& pc, bool& have) {
  bool m = n.in("prev_running_mean") != nullptr, v = n.in("prev_running_var") != nullptr, mo = n.in("momentum") != nullptr;
  have = m || v || mo;
  if (have && !(m && v && mo))
    return n.fail(ErrorCode::ATTRIBUTE_NOT_SET, std::string("running statistics need prev_running_mean, prev_running_var and momentum "
                                                            "together; missing: ") +
                                                    (!m ? "prev_running_mean " : "") + (!v ? "prev_running_var " : "") +
                                                    (!mo ? "momentum" : ""));
  OPENDNN_RETURN_IF_ERROR(ops::require_dims(n, "prev_running_mean", pc, "(per channel)"));
  OPENDNN_RETURN_IF_ERROR(ops::require_dims(n, "prev_running_var", pc, "(per channel)"));
  return ops::require_scalar(n, "momentum");
}

Status next_running_outputs(Node& n, const Dims& pc, bool have) {
  for (auto [out, in] : {std::pair{"next_running_mean", "prev_running_mean"}, std::pair{"next_running_var", "prev_running_var"}}) {
    if (have) ops::default_type(n, out, n.in(in)->get_data_type());
    OPENDNN_RETURN_IF_ERROR(stats_output(n, out, pc, have, "without prev_running_mean/prev_running_var/momentum"));
  }
  return {};
}

// ---- batchnorm family

Status infer_batchnorm(Node& n, const GraphContext&) {
  OPENDNN_RETURN_IF_ERROR(require_rank_at_least(n, "X", 2, "[N, C, ...]"));
  const Dims& x = ops::in_dims(n, "X");
  Dims pc = per_channel(x);
  for (const char* p : {"scale", "bias"}) OPENDNN_RETURN_IF_ERROR(ops::require_dims(n, p, pc, "(per channel)"));
  OPENDNN_RETURN_IF_ERROR(ops::require_epsilon(n, "epsilon"));
  bool have = false;
  OPENDNN_RETURN_IF_ERROR(running_stats(n, pc, have));
  OPENDNN_RETURN_IF_ERROR(ops::set_dims_keeping(n, "Y", x, *n.in("X")));
  OPENDNN_RETURN_IF_ERROR(stats_output(n, "mean", pc, true));
  OPENDNN_RETURN_IF_ERROR(stats_output(n, "inv_variance", pc, true));
  return next_running_outputs(n, pc, have);
}

Status infer_batchnorm_inference(Node& n, const GraphContext&) {
  OPENDNN_RETURN_IF_ERROR(require_rank_at_least(n, "X", 2, "[N, C, ...]"));
  const Dims& x = ops::in_dims(n, "X");
  Dims pc = per_channel(x);
  for (const char* p : {"mean", "inv_variance", "scale", "bias"})
    OPENDNN_RETURN_IF_ERROR(ops::require_dims(n, p, pc, "(per channel)"));
  return ops::set_dims_keeping(n, "Y", x, *n.in("X"));
}

Status infer_batchnorm_backward(Node& n, const GraphContext&) {
  OPENDNN_RETURN_IF_ERROR(require_rank_at_least(n, "X", 2, "[N, C, ...]"));
  OPENDNN_RETURN_IF_ERROR(require_like(n, "DY", "X"));
  const Dims& x = ops::in_dims(n, "X");
  Dims pc = per_channel(x);
  for (const char* p : {"scale", "mean", "inv_variance"}) OPENDNN_RETURN_IF_ERROR(ops::require_dims(n, p, pc, "(per channel)"));
  OPENDNN_RETURN_IF_ERROR(ops::set_dims_keeping(n, "DX", x, *n.in("X")));
  OPENDNN_RETURN_IF_ERROR(ops::set_dims(n, "dscale", pc));
  return ops::set_dims(n, "dbias", pc);
}

Status infer_dbn_weight(Node& n, const GraphContext&) {
  OPENDNN_RETURN_IF_ERROR(require_rank_at_least(n, "X", 2, "[N, C, ...]"));
  OPENDNN_RETURN_IF_ERROR(require_like(n, "DY", "X"));
  Dims pc = per_channel(ops::in_dims(n, "X"));
  for (const char* p : {"mean", "inv_variance", "scale"}) OPENDNN_RETURN_IF_ERROR(ops::require_dims(n, p, pc, "(per channel)"));
  OPENDNN_RETURN_IF_ERROR(ops::set_dims(n, "dscale", pc));
  OPENDNN_RETURN_IF_ERROR(ops::set_dims(n, "dbias", pc));
  for (const char* o : {"eq_scale_dy", "eq_scale_x", "eq_bias"}) OPENDNN_RETURN_IF_ERROR(stats_output(n, o, pc, true));
  return {};
}

Status infer_bn_finalize(Node& n, const GraphContext&) {
  OPENDNN_RETURN_IF_ERROR(require_rank_at_least(n, "sum", 2, "[1, C, 1, ...]"));
  const Dims& sum = ops::in_dims(n, "sum");
  Dims pc = per_channel(sum);
  OPENDNN_RETURN_IF_ERROR(ops::require_dims(n, "sum", pc, "(per channel: [1, C, 1, ...])"));
  for (const char* p : {"sq_sum", "scale", "bias"}) OPENDNN_RETURN_IF_ERROR(ops::require_dims(n, p, pc, "(like sum)"));
  OPENDNN_RETURN_IF_ERROR(ops::require_epsilon(n, "epsilon"));
  OPENDNN_RETURN_IF_ERROR(ops::require_scalar(n, "accum_count"));
  OPENDNN_RETURN_IF_ERROR(ops::require_type(n, "accum_count", {DataType::INT64}));
  bool have = false;
  OPENDNN_RETURN_IF_ERROR(running_stats(n, pc, have));
  for (const char* o : {"eq_scale", "eq_bias", "mean", "inv_variance"}) OPENDNN_RETURN_IF_ERROR(stats_output(n, o, pc, true));
  return next_running_outputs(n, pc, have);
}

// ---- layernorm, rmsnorm, instancenorm, adalayernorm

enum class NormKind { LAYER, RMS, INSTANCE, ADA };

// The dims scale must have and the dims of the statistics, from X (and, for LAYER/RMS, scale itself).
Status norm_shapes(const Node& n, NormKind k, Dims& scale, Dims& stats) {
  const Dims& x = ops::in_dims(n, "X");
  switch (k) {
    case NormKind::LAYER:
    case NormKind::RMS: {
      OPENDNN_RETURN_IF_ERROR(require_rank_at_least(n, "X", 2, "[B, ...]"));
      const Dims& sc = ops::in_dims(n, "scale");
      bool ok = sc.size() == x.size() && sc[0] == 1;
      for (size_t i = 1; ok && i < x.size(); ++i) ok = sc[i] == x[i] || sc[i] == 1;
      if (!ok)
        return n.fail(ErrorCode::SHAPE_DEDUCTION_FAILED,
                      "scale " + ops::dims_str(sc) + " does not fit X " + ops::dims_str(x) +
                          ": it needs X's rank, 1 on the first (batch) dim, and on each other dim X's size (normalised) or 1");
      scale = sc;
      stats.resize(x.size());
      for (size_t i = 0; i < x.size(); ++i) stats[i] = sc[i] == 1 ? x[i] : 1;
      return {};
    }
    case NormKind::INSTANCE:
      OPENDNN_RETURN_IF_ERROR(require_rank_at_least(n, "X", 3, "[N, C, spatial...]"));
      scale = per_channel(x);
      stats = Dims(x.size(), 1);
      stats[0] = x[0];
      stats[1] = x[1];
      return {};
    case NormKind::ADA:
      OPENDNN_RETURN_IF_ERROR(require_rank_at_least(n, "X", 2, "[B, ..., H]"));
      scale = Dims(x.size(), 1);
      scale[0] = x[0];
      scale.back() = x.back();
      stats = x;
      stats.back() = 1;
      return {};
  }
  return {};
}

const char* scale_layout(NormKind k) {
  switch (k) {
    case NormKind::INSTANCE: return "(per channel)";
    case NormKind::ADA: return "(per batch element: [B, 1, ..., H])";
    default: return "";
  }
}

Status norm_forward(Node& n, NormKind k) {
  Dims sc, st;
  OPENDNN_RETURN_IF_ERROR(norm_shapes(n, k, sc, st));
  OPENDNN_RETURN_IF_ERROR(ops::require_dims(n, "scale", sc, scale_layout(k)));
  OPENDNN_RETURN_IF_ERROR(ops::require_dims(n, "bias", sc, "(like scale)"));
  OPENDNN_RETURN_IF_ERROR(ops::require_epsilon(n, "epsilon"));
  OPENDNN_RETURN_IF_ERROR(ops::set_dims_keeping(n, "Y", ops::in_dims(n, "X"), *n.in("X")));
  bool training = n.attr_str("forward_phase") != "INFERENCE";
  if (k != NormKind::RMS) OPENDNN_RETURN_IF_ERROR(stats_output(n, "mean", st, training));
  return stats_output(n, "inv_variance", st, training);
}

Status norm_backward(Node& n, NormKind k) {
  Dims sc, st;
  OPENDNN_RETURN_IF_ERROR(norm_shapes(n, k, sc, st));
  OPENDNN_RETURN_IF_ERROR(require_like(n, "DY", "X"));
  OPENDNN_RETURN_IF_ERROR(ops::require_dims(n, "scale", sc, scale_layout(k)));
  if (has_port(n, "mean")) OPENDNN_RETURN_IF_ERROR(ops::require_dims(n, "mean", st, "(the forward's statistics)"));
  OPENDNN_RETURN_IF_ERROR(ops::require_dims(n, "inv_variance", st, "(the forward's statistics)"));
  if (has_port(n, "epsilon")) OPENDNN_RETURN_IF_ERROR(ops::require_epsilon(n, "epsilon"));
  OPENDNN_RETURN_IF_ERROR(ops::set_dims_keeping(n, "DX", ops::in_dims(n, "X"), *n.in("X")));
  OPENDNN_RETURN_IF_ERROR(ops::set_dims(n, "dscale", sc));
  OPENDNN_RETURN_IF_ERROR(ops::set_dims(n, "dbias", sc));
  if (k == NormKind::RMS && !n.attr_bool("has_dbias") && ops::is_user_output(n, "dbias"))
    return n.fail(ErrorCode::INVALID_VALUE, "output dbias is marked as a graph output but has_dbias is false");
  return {};
}

Status infer_layernorm(Node& n, const GraphContext&) { return norm_forward(n, NormKind::LAYER); }
Status infer_layernorm_bwd(Node& n, const GraphContext&) { return norm_backward(n, NormKind::LAYER); }
Status infer_rmsnorm(Node& n, const GraphContext&) { return norm_forward(n, NormKind::RMS); }
Status infer_rmsnorm_bwd(Node& n, const GraphContext&) { return norm_backward(n, NormKind::RMS); }
Status infer_instancenorm(Node& n, const GraphContext&) { return norm_forward(n, NormKind::INSTANCE); }
Status infer_instancenorm_bwd(Node& n, const GraphContext&) { return norm_backward(n, NormKind::INSTANCE); }
Status infer_adalayernorm(Node& n, const GraphContext&) { return norm_forward(n, NormKind::ADA); }
Status infer_adalayernorm_bwd(Node& n, const GraphContext&) { return norm_backward(n, NormKind::ADA); }

}  // namespace

const OpDef def_BATCHNORM = {kBnIn, kBnOut, {}, infer_batchnorm};
const OpDef def_BATCHNORM_INFERENCE = {kBnInfIn, kYOut, {}, infer_batchnorm_inference};
const OpDef def_BATCHNORM_BACKWARD = {kBnBwdIn, kBwdOut, {}, infer_batchnorm_backward};
const OpDef def_BN_FINALIZE = {kBnFinIn, kBnFinOut, {}, infer_bn_finalize};
const OpDef def_DBN_WEIGHT = {kDbnWIn, kDbnWOut, {}, infer_dbn_weight};
const OpDef def_LAYERNORM = {kLnIn, kLnOut, kPhase, infer_layernorm};
const OpDef def_LAYERNORM_BACKWARD = {kNormBwdIn, kBwdOut, {}, infer_layernorm_bwd};
const OpDef def_RMSNORM = {kRmsIn, kRmsOut, kPhase, infer_rmsnorm};
const OpDef def_RMSNORM_BACKWARD = {kRmsBwdIn, kBwdOut, kRmsBwdAttrs, infer_rmsnorm_bwd};
const OpDef def_INSTANCENORM = {kLnIn, kLnOut, kPhase, infer_instancenorm};
const OpDef def_INSTANCENORM_BACKWARD = {kNormBwdIn, kBwdOut, {}, infer_instancenorm_bwd};
const OpDef def_ADALAYERNORM = {kAdaLnIn, kLnOut, kPhase, infer_adalayernorm};
const OpDef def_ADALAYERNORM_BACKWARD = {kNormBwdIn, kBwdOut, {}, infer_adalayernorm_bwd};

}  // namespace opendnn
