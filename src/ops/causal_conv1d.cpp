// SPDX-License-Identifier: Apache-2.0
// CAUSAL_CONV1D(_BWD): depthwise causal 1-D convolution (Mamba-style), optional bias and SiLU.
// X [B, C, L] in NCW, or [B, L, C] in NWH (channels last); W [C, Kw]; bias [C];
// initial_states [B, C, Kw-1] and final_states [B, C, Kw-1] carry the rolling window across calls.
//
// Rules: kernel width Kw in 2..256 (NCW) or 2..128 (NWH), else GRAPH_NOT_SUPPORTED; X HALF, BFLOAT16 or
// FLOAT; W, bias, initial_states floating. Y has X's dims, layout (stride order) and type. final_states
// always has dims [B, C, Kw-1] (initial_states' type, else X's): an engine writes it when it is a graph
// output or read by another node. Backward: DY like X; DX like X, DW like W, dbias like bias (absent,
// zero-size, without bias), d_initial_states like initial_states (absent without); the optional input
// d_final_states [B, C, Kw-1] is the gradient flowing into the forward's final_states.
#include <string>
#include <utility>
#include <vector>

#include "ops/infer_util.h"
#include "ops/op_defs.h"

namespace opendnn {
namespace {

const PortSpec kFwdIn[] = {{"X", true, "input"}, {"W", true, "weight"}, {"bias", false}, {"initial_states", false}};
const PortSpec kFwdOut[] = {{"Y"}, {"final_states", false}};
const AttrSpec kAttrs[] = {
    {"activation", AttrType::ENUM, "NONE", "NONE|SILU"},
    {"layout", AttrType::ENUM, "NCW", "NCW|NWH"},
};
const PortSpec kBwdIn[] = {{"X", true, "input"}, {"W", true, "weight"}, {"DY", true, "grad"}, {"bias", false},
                           {"initial_states", false}, {"d_final_states", false}};
const PortSpec kBwdOut[] = {{"DX"}, {"DW"}, {"dbias", false}, {"d_initial_states", false}};

std::string num(int64_t v) { return std::to_string(v); }

struct Problem {
  int64_t b = 0, c = 0, l = 0, kw = 0;
};

constexpr std::initializer_list<DataType> kFloatTypes = {DataType::HALF, DataType::BFLOAT16, DataType::FLOAT};

Status check_inputs(const Node& n, Problem& p) {
  OPENDNN_RETURN_IF_ERROR(ops::require_rank(n, "X", 3));
  OPENDNN_RETURN_IF_ERROR(ops::require_rank(n, "W", 2));
  OPENDNN_RETURN_IF_ERROR(ops::expect_type(n, "X", kFloatTypes));
  OPENDNN_RETURN_IF_ERROR(ops::expect_type(n, "W", kFloatTypes));
  bool nwh = n.attr_str("layout") == "NWH";
  const auto& x = n.in("X")->get_dim();
  const auto& w = n.in("W")->get_dim();
  p.b = x[0];
  p.c = nwh ? x[2] : x[1];
  p.l = nwh ? x[1] : x[2];
  p.kw = w[1];
  if (w[0] != p.c)
    return n.fail(ErrorCode::SHAPE_DEDUCTION_FAILED, "W " + ops::dims_str(w) + " must be [C,Kw] with C = " + num(p.c) +
                                                         " channels of X " + ops::dims_str(x) + " (" +
                                                         (nwh ? "NWH [B,L,C]" : "NCW [B,C,L]") + ")");
  if (p.kw < 1)
    return n.fail(ErrorCode::SHAPE_DEDUCTION_FAILED, "kernel width of W " + ops::dims_str(w) + " must be >= 1");
  int64_t max_kw = nwh ? 128 : 256;
  if (p.kw < 2 || p.kw > max_kw)
    return n.fail(ErrorCode::GRAPH_NOT_SUPPORTED, "kernel width " + num(p.kw) + " of W is outside 2.." + num(max_kw) +
                                                      " for layout " + (nwh ? "NWH" : "NCW"));
  if (ops::input_if(n, "bias")) {
    OPENDNN_RETURN_IF_ERROR(ops::expect_dims(n, "bias", {p.c}, "[C]"));
    OPENDNN_RETURN_IF_ERROR(ops::expect_type(n, "bias", kFloatTypes));
  }
  for (const char* port : {"initial_states", "d_final_states"}) {
    if (!ops::input_if(n, port)) continue;
    OPENDNN_RETURN_IF_ERROR(ops::expect_dims(n, port, {p.b, p.c, p.kw - 1}, "[B,C,Kw-1]"));
    OPENDNN_RETURN_IF_ERROR(ops::expect_type(n, port, kFloatTypes));
  }
  return {};
}

Status infer_causal_conv1d(Node& n, const GraphContext&) {
  Problem p;
  OPENDNN_RETURN_IF_ERROR(check_inputs(n, p));
  const TensorAttr& x = *n.in("X");
  OPENDNN_RETURN_IF_ERROR(ops::set_dims_like(n, "Y", x.get_dim(), x));
  ops::default_type(n, "Y", x.get_data_type());
  OPENDNN_RETURN_IF_ERROR(ops::expect_out_type(n, "Y", kFloatTypes));
  OPENDNN_RETURN_IF_ERROR(ops::set_dims(n, "final_states", {p.b, p.c, p.kw - 1}));
  const TensorPtr& init = ops::input_if(n, "initial_states");
  ops::default_type(n, "final_states", init ? init->get_data_type() : x.get_data_type());
  return ops::expect_out_type(n, "final_states", kFloatTypes);
}

Status infer_causal_conv1d_bwd(Node& n, const GraphContext&) {
  Problem p;
  OPENDNN_RETURN_IF_ERROR(check_inputs(n, p));
  const TensorAttr& x = *n.in("X");
  OPENDNN_RETURN_IF_ERROR(ops::expect_dims(n, "DY", x.get_dim(), "(like X)"));
  OPENDNN_RETURN_IF_ERROR(ops::expect_type(n, "DY", kFloatTypes));
  for (auto [in, out] : {std::pair{"X", "DX"}, std::pair{"W", "DW"}}) {
    const TensorAttr& t = *n.in(in);
    OPENDNN_RETURN_IF_ERROR(ops::set_dims_like(n, out, t.get_dim(), t));
    ops::default_type(n, out, t.get_data_type());
    OPENDNN_RETURN_IF_ERROR(ops::expect_out_type(n, out, kFloatTypes));
  }
  for (auto [in, out] : {std::pair{"bias", "dbias"}, std::pair{"initial_states", "d_initial_states"}}) {
    if (const TensorPtr& t = ops::input_if(n, in)) {
      OPENDNN_RETURN_IF_ERROR(ops::set_dims_like(n, out, t->get_dim(), *t));
      ops::default_type(n, out, t->get_data_type());
      OPENDNN_RETURN_IF_ERROR(ops::expect_out_type(n, out, kFloatTypes));
    } else {
      OPENDNN_RETURN_IF_ERROR(ops::set_absent(n, out, std::string_view(in) == "bias" ? 1 : 3,
                                              "input " + std::string(in) + " is not set"));
    }
  }
  return {};
}

}  // namespace

const OpDef def_CAUSAL_CONV1D = {kFwdIn, kFwdOut, kAttrs, infer_causal_conv1d};
const OpDef def_CAUSAL_CONV1D_BACKWARD = {kBwdIn, kBwdOut, kAttrs, infer_causal_conv1d_bwd};

}  // namespace opendnn
