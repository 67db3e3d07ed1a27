// SPDX-License-Identifier: Apache-2.0
// RNG, RESAMPLE, BLOCK_SCALE_QUANTIZE/DEQUANTIZE, MOE_GROUPED_MATMUL(_BWD), ROPE(_BWD).
//
// Conventions
//   rng: Y's dims from attribute `dims` or from dims set on Y. The seed is a tensor on port `seed` (one
//     INT32/INT64 value) or attribute `seed_value`, exactly one of them; `offset` (optional) is one
//     INT32/INT64 value (0 when absent). BERNOULLI: 0 <= bernoulli_probability <= 1 (the probability of
//     a 1); UNIFORM: uniform_min <= uniform_max; NORMAL: normal_stddev >= 0.
//
//   resample: X [N, C, spatial...] (rank 3 to 5), Y [N, C, out...]. `resample_mode` is required.
//     Pooling modes (MAXPOOL, AVGPOOL_*) need `window` (one value per spatial dim, >= 1); `stride`
//     defaults to the window, paddings to 0; out = floor((in + pre + post - window) / stride) + 1 >= 1.
//     BILINEAR / NEAREST: Y's dims set by the user (any output size), else the same formula with
//     `window` (which is then required). `Index` (the argmax inside each window, row-major within the
//     window) is produced only for MAXPOOL with generate_index; it has Y's dims and is INT32 (default) or
//     INT64. Without generate_index it still gets Y's dims but is not written.
//
//   block_scale_quantize: X (FLOAT, HALF or BFLOAT16) -> Y (FP8_E4M3 (default), FP8_E5M2 or FP4_E2M1) and
//     scale (FP8_E8M0 (default, MX), FP8_E4M3 or FLOAT). Blocks of `block_size` (default 32) consecutive
//     elements along `axis` (default the last; negative counts from the end) share one scale;
//     X.dims[axis] must be a multiple of block_size. Y has X's dims; scale has X's dims with
//     dims[axis] / block_size. With `transpose`, the last two dims of both Y and scale are swapped
//     (Y[..., j, i] = quantized X[..., i, j]); X needs rank >= 2.
//   block_scale_dequantize: X (FP8_E4M3, FP8_E5M2 or FP4_E2M1) and scale (dims: X's with
//     dims[axis] / block_size; FP8_E8M0, FP8_E4M3 or FLOAT) -> Y with X's dims, FLOAT by default
//     (FLOAT, HALF or BFLOAT16).
//
//   moe_grouped_matmul (R = routed rows, E experts, hidden K, output N):
//     token [T, K] or [1, T, K]; weight [E, K, N]; first_token_offset: E values (e.g. [E] or [E, 1, 1]),
//     INT32/INT64, the first routed row of each expert (expert e owns rows [off[e], off[e+1]), the last
//     expert up to R); output has token's rank, [R, N] or [1, R, N].
//     NONE:    token holds the routed rows, R = T.
//     GATHER:  token holds S = T unrouted rows; token_index (R values, R = S * top_k) gives for routed
//              row r the token row it reads, in [0, S).
//     SCATTER: token holds the routed rows, R = T, a multiple of top_k; token_index and token_ks
//              (R values each) send routed row r to output row token_index[r] * top_k + token_ks[r].
//     token_index / token_ks are INT32/INT64 of any shape with R values ([R] or [1, R, 1]); giving them
//     in a mode that does not use them is an error. top_k >= 1.
//   moe_grouped_matmul_bwd: doutput like the forward's output; dtoken like token, dweight like weight.
//     weight is optional: without it only dweight is produced ([E, K, N] with E from first_token_offset,
//     K from token and N from doutput, each expert's K x N matrix column-major: strides [K*N, 1, K]);
//     dtoken is then absent (marking it as a graph output is an error).
//
//   rope / rope_backward: X (or DY) [..., S, D] (rank >= 2; the usual layout is [B, H, S, D]); cos and
//     sin have X's rank, dims [..., S, rotary_dim / 2] where every leading dim is 1 or X's (typically
//     [1, 1, S, rotary_dim / 2]). rotary_dim (default D) is even and <= D; dims past rotary_dim pass
//     through. Pairs are (i, i + rotary_dim/2) (halves) or (2i, 2i+1) when interleaved, both rotated by
//     angle index i: y0 = x0 cos - x1 sin, y1 = x0 sin + x1 cos (the backward rotates by -angle).
//     Y (DX) has X's (DY's) dims and, by default, its data type.
#include "common/checked_math.h"
#include "ops/infer_util.h"
#include "ops/op_defs.h"

namespace opendnn {
namespace {

const PortSpec kYOut[] = {{"Y"}};
const PortSpec kXIn[] = {{"X", true, "input"}};

const PortSpec kRngIn[] = {{"seed", false}, {"offset", false}};
const AttrSpec kRngAttrs[] = {
    {"distribution", AttrType::ENUM, "BERNOULLI", "BERNOULLI|UNIFORM|NORMAL"},
    {"bernoulli_probability", AttrType::FLOAT, 0.5},
    {"uniform_min", AttrType::FLOAT, 0.0},
    {"uniform_max", AttrType::FLOAT, 1.0},
    {"normal_mean", AttrType::FLOAT, 0.0},
    {"normal_stddev", AttrType::FLOAT, 1.0},
    {"seed_value", AttrType::INT, {}},  // used when no seed tensor is given
    {"dims", AttrType::INT_LIST, {}},   // output dims (or set them on Y)
};

const PortSpec kResampleOut[] = {{"Y"}, {"Index", false}};
const AttrSpec kResampleAttrs[] = {
    {"resample_mode", AttrType::ENUM, {}, "MAXPOOL|AVGPOOL_INCLUDE_PADDING|AVGPOOL_EXCLUDE_PADDING|BILINEAR|NEAREST"},
    {"padding_mode", AttrType::ENUM, "ZERO_PAD", "ZERO_PAD|NEG_INF_PAD|EDGE_VAL_PAD"},
    {"window", AttrType::INT_LIST, {}},
    {"stride", AttrType::INT_LIST, {}},
    {"pre_padding", AttrType::INT_LIST, {}},
    {"post_padding", AttrType::INT_LIST, {}},
    {"generate_index", AttrType::BOOL, false},
};

const PortSpec kQuantOut[] = {{"Y"}, {"scale"}};
const AttrSpec kQuantAttrs[] = {
    {"block_size", AttrType::INT, 32},
    {"axis", AttrType::INT, {}},  // default: the last axis
    {"transpose", AttrType::BOOL, false},
};
const PortSpec kDequantIn[] = {{"X", true, "input"}, {"scale", true, "descale"}};
const AttrSpec kDequantAttrs[] = {
    {"block_size", AttrType::INT, 32},
    {"axis", AttrType::INT, {}},
    {"is_negative_scale", AttrType::BOOL, false},
};

const PortSpec kMoeIn[] = {{"token"}, {"weight"}, {"first_token_offset"}, {"token_index", false}, {"token_ks", false}};
const PortSpec kMoeOut[] = {{"output"}};
const AttrSpec kMoeAttrs[] = {
    {"mode", AttrType::ENUM, "NONE", "NONE|GATHER|SCATTER"},
    {"top_k", AttrType::INT, 1},
};
const PortSpec kMoeBwdIn[] = {{"doutput"}, {"token"}, {"first_token_offset"}, {"weight", false}, {"token_index", false}, {"token_ks", false}};
const PortSpec kMoeBwdOut[] = {{"dtoken"}, {"dweight"}};

const PortSpec kRopeIn[] = {{"X", true, "input"}, {"cos"}, {"sin"}};
const PortSpec kRopeBwdIn[] = {{"DY", true, "grad"}, {"cos"}, {"sin"}};
const PortSpec kRopeBwdOut[] = {{"DX"}};
const AttrSpec kRopeAttrs[] = {
    {"interleaved", AttrType::BOOL, false},  // pairs (2i, 2i+1) instead of halves (i, i + d/2)
    {"rotary_dim", AttrType::INT, {}},       // default: the whole last dim
};

using Dims = std::vector<int64_t>;
std::string s(int64_t v) { return std::to_string(v); }
constexpr std::initializer_list<DataType> kIndexTypes = {DataType::INT32, DataType::INT64};

// ---- rng

Status infer_rng(Node& n, const GraphContext&) {
  Dims d = n.attr_ints("dims");
  if (d.empty()) d = n.out("Y")->get_dim();
  if (d.empty()) return n.fail(ErrorCode::ATTRIBUTE_NOT_SET, "the output shape is not set: give attribute dims or set Y's dims");
  OPENDNN_RETURN_IF_ERROR(ops::set_dims(n, "Y", d));
  const std::string& dist = n.attr_str("distribution");
  if (dist == "BERNOULLI") {
    double p = n.attr_float("bernoulli_probability");
    if (!(p >= 0.0 && p <= 1.0))
      return n.fail(ErrorCode::INVALID_VALUE, "bernoulli_probability " + std::to_string(p) + " is not in [0, 1]");
  } else if (dist == "UNIFORM") {
    if (!(n.attr_float("uniform_min") <= n.attr_float("uniform_max")))
      return n.fail(ErrorCode::INVALID_VALUE, "uniform_min " + std::to_string(n.attr_float("uniform_min")) +
                                                  " is greater than uniform_max " + std::to_string(n.attr_float("uniform_max")));
  } else if (dist == "NORMAL") {
    if (!(n.attr_float("normal_stddev") >= 0.0))
      return n.fail(ErrorCode::INVALID_VALUE, "normal_stddev " + std::to_string(n.attr_float("normal_stddev")) + " is negative");
  }
  bool seed_t = n.in("seed") != nullptr, seed_v = n.has("seed_value");
  if (!seed_t && !seed_v) return n.fail(ErrorCode::ATTRIBUTE_NOT_SET, "no seed: give a seed tensor or attribute seed_value");
  if (seed_t && seed_v) return n.fail(ErrorCode::INVALID_VALUE, "both a seed tensor and attribute seed_value are given; give one");
  for (const char* p : {"seed", "offset"}) {
    OPENDNN_RETURN_IF_ERROR(ops::require_scalar(n, p));
    OPENDNN_RETURN_IF_ERROR(ops::require_type(n, p, kIndexTypes));
  }
  return {};
}

// ---- resample

Status infer_resample(Node& n, const GraphContext&) {
  if (!n.has("resample_mode")) return n.fail(ErrorCode::ATTRIBUTE_NOT_SET, "attribute resample_mode is not set");
  const std::string& mode = n.attr_str("resample_mode");
  bool pooling = mode != "BILINEAR" && mode != "NEAREST";
  const Dims& x = ops::in_dims(n, "X");
  if (x.size() < 3 || x.size() > 5)
    return n.fail(ErrorCode::SHAPE_DEDUCTION_FAILED, "X " + ops::dims_str(x) + " must have 3 to 5 dims [N, C, spatial...]");
  size_t nsp = x.size() - 2;
  const Dims& user = n.out("Y")->get_dim();
  Dims y;
  if (!pooling && !user.empty()) {
    if (user.size() != x.size() || user[0] != x[0] || user[1] != x[1])
      return n.fail(ErrorCode::SHAPE_DEDUCTION_FAILED, "output Y " + ops::dims_str(user) + " must be [N, C, out...] like X " +
                                                           ops::dims_str(x));
    for (size_t i = 2; i < user.size(); ++i)
      if (user[i] < 1) return n.fail(ErrorCode::SHAPE_DEDUCTION_FAILED, "output Y " + ops::dims_str(user) + " has an empty spatial dim");
    y = user;
  } else {
    if (n.attr_ints("window").empty())
      return n.fail(ErrorCode::ATTRIBUTE_NOT_SET, pooling ? "attribute window is not set"
                                                          : "attribute window is not set and Y has no dims (give one of them)");
    Dims window, stride, pre, post;
    OPENDNN_RETURN_IF_ERROR(ops::spatial_attr(n, "window", nsp, 1, 1, window));
    if (n.attr_ints("stride").empty()) stride = window;
    else OPENDNN_RETURN_IF_ERROR(ops::spatial_attr(n, "stride", nsp, 1, 1, stride));
    OPENDNN_RETURN_IF_ERROR(ops::spatial_attr(n, "pre_padding", nsp, 0, 0, pre));
    OPENDNN_RETURN_IF_ERROR(ops::spatial_attr(n, "post_padding", nsp, 0, 0, post));
    y = {x[0], x[1]};
    for (size_t i = 0; i < nsp; ++i) {
      auto o = ops::window_out_len(x[i + 2], pre[i], post[i], window[i], stride[i], 1);
      if (!o)
        return n.fail(ErrorCode::INVALID_VALUE, "spatial dim " + s(int64_t(i)) + " of X " + ops::dims_str(x) + " with padding " +
                                                    s(pre[i]) + "+" + s(post[i]) + " and window " + s(window[i]) +
                                                    " overflows int64");
      if (*o < 1)
        return n.fail(ErrorCode::SHAPE_DEDUCTION_FAILED, "window " + ops::dims_str(window) + " does not fit X " + ops::dims_str(x) +
                                                             " with its padding on spatial dim " + s(int64_t(i)));
      y.push_back(*o);
    }
    OPENDNN_RETURN_IF_ERROR(ops::set_dims_like(n, "Y", y, *n.in("X")));
  }
  bool index = n.attr_bool("generate_index");
  if (index && mode != "MAXPOOL")
    return n.fail(ErrorCode::INVALID_VALUE, "generate_index needs resample_mode MAXPOOL, not " + mode);
  if (!index && ops::is_user_output(n, "Index"))
    return n.fail(ErrorCode::INVALID_VALUE, "output Index is marked as a graph output but generate_index is false");
  OPENDNN_RETURN_IF_ERROR(ops::set_dims_like(n, "Index", y, *n.in("X")));
  OPENDNN_RETURN_IF_ERROR(ops::require_out_type(n, "Index", kIndexTypes));
  ops::default_type(n, "Index", DataType::INT32);
  return {};
}

// ---- block scale quantize / dequantize

Status block_axis(const Node& n, const Dims& x, int64_t& axis, int64_t& bs) {
  int64_t rank = int64_t(x.size());
  bs = n.attr_int("block_size");
  if (bs < 1) return n.fail(ErrorCode::INVALID_VALUE, "block_size " + s(bs) + " must be >= 1");
  axis = n.has("axis") ? n.attr_int("axis") : rank - 1;
  if (axis < -rank || axis >= rank)
    return n.fail(ErrorCode::INVALID_VALUE, "axis " + s(axis) + " is out of range for X " + ops::dims_str(x));
  if (axis < 0) axis += rank;
  if (x[size_t(axis)] % bs != 0)
    return n.fail(ErrorCode::SHAPE_DEDUCTION_FAILED, "X " + ops::dims_str(x) + " has " + s(x[size_t(axis)]) + " elements on axis " +
                                                         s(axis) + ", not a multiple of block_size " + s(bs));
  return {};
}

Status infer_quantize(Node& n, const GraphContext&) {
  OPENDNN_RETURN_IF_ERROR(ops::require_type(n, "X", {DataType::FLOAT, DataType::HALF, DataType::BFLOAT16}));
  const Dims& x = ops::in_dims(n, "X");
  int64_t axis = 0, bs = 1;
  OPENDNN_RETURN_IF_ERROR(block_axis(n, x, axis, bs));
  Dims y = x, sc = x;
  sc[size_t(axis)] /= bs;
  if (n.attr_bool("transpose")) {
    if (x.size() < 2) return n.fail(ErrorCode::INVALID_VALUE, "transpose needs X with at least 2 dims, X is " + ops::dims_str(x));
    std::swap(y[y.size() - 1], y[y.size() - 2]);
    std::swap(sc[sc.size() - 1], sc[sc.size() - 2]);
  }
  OPENDNN_RETURN_IF_ERROR(ops::set_dims(n, "Y", y));
  OPENDNN_RETURN_IF_ERROR(ops::set_dims(n, "scale", sc));
  OPENDNN_RETURN_IF_ERROR(ops::require_out_type(n, "Y", {DataType::FP8_E4M3, DataType::FP8_E5M2, DataType::FP4_E2M1}));
  OPENDNN_RETURN_IF_ERROR(ops::require_out_type(n, "scale", {DataType::FP8_E8M0, DataType::FP8_E4M3, DataType::FLOAT}));
  ops::default_type(n, "Y", DataType::FP8_E4M3);
  ops::default_type(n, "scale", DataType::FP8_E8M0);
  return {};
}

Status infer_dequantize(Node& n, const GraphContext&) {
  OPENDNN_RETURN_IF_ERROR(ops::require_type(n, "X", {DataType::FP8_E4M3, DataType::FP8_E5M2, DataType::FP4_E2M1}));
  OPENDNN_RETURN_IF_ERROR(ops::require_type(n, "scale", {DataType::FP8_E8M0, DataType::FP8_E4M3, DataType::FLOAT}));
  const Dims& x = ops::in_dims(n, "X");
  int64_t axis = 0, bs = 1;
  OPENDNN_RETURN_IF_ERROR(block_axis(n, x, axis, bs));
  Dims sc = x;
  sc[size_t(axis)] /= bs;
  OPENDNN_RETURN_IF_ERROR(ops::require_dims(n, "scale", sc, "(X's dims with axis " + s(axis) + " divided by block_size)"));
  OPENDNN_RETURN_IF_ERROR(ops::set_dims_like(n, "Y", x, *n.in("X")));
  OPENDNN_RETURN_IF_ERROR(ops::require_out_type(n, "Y", {DataType::FLOAT, DataType::HALF, DataType::BFLOAT16}));
  ops::default_type(n, "Y", DataType::FLOAT);
  return {};
}

// ---- moe grouped matmul

// Checks token/weight/offsets/indices; gives the routed row count R and the output dims.
// [E, K, N]: weight's dims, or (the backward without weight) the experts of first_token_offset, token's
// hidden size and doutput's last dim.
Status moe_ekn(const Node& n, const Dims& tok, Dims& w) {
  if (n.in("weight")) {
    w = ops::in_dims(n, "weight");
    if (w.size() != 3) return n.fail(ErrorCode::SHAPE_DEDUCTION_FAILED, "weight " + ops::dims_str(w) + " must be [E, K, N]");
    return {};
  }
  const Dims& dout = ops::in_dims(n, "doutput");
  if (dout.size() != tok.size())
    return n.fail(ErrorCode::SHAPE_DEDUCTION_FAILED, "doutput " + ops::dims_str(dout) + " must have token's rank (" +
                                                         ops::dims_str(tok) + ")");
  w = {n.in("first_token_offset")->volume(), tok.back(), dout.back()};
  return {};
}

Status moe_common(const Node& n, int64_t& routed, Dims& out) {
  const Dims& tok = ops::in_dims(n, "token");
  if (tok.size() != 2 && !(tok.size() == 3 && tok[0] == 1))
    return n.fail(ErrorCode::SHAPE_DEDUCTION_FAILED, "token " + ops::dims_str(tok) + " must be [T, K] or [1, T, K]");
  Dims w;
  OPENDNN_RETURN_IF_ERROR(moe_ekn(n, tok, w));
  int64_t t = tok[tok.size() - 2], k = tok.back();
  if (w[1] != k)
    return n.fail(ErrorCode::SHAPE_DEDUCTION_FAILED, "token " + ops::dims_str(tok) + " has hidden size " + s(k) + " but weight " +
                                                         ops::dims_str(w) + " has K=" + s(w[1]));
  int64_t top_k = n.attr_int("top_k");
  if (top_k < 1) return n.fail(ErrorCode::INVALID_VALUE, "top_k " + s(top_k) + " must be >= 1");
  const TensorPtr& off = n.in("first_token_offset");
  if (off->volume() != w[0])
    return n.fail(ErrorCode::SHAPE_DEDUCTION_FAILED, "first_token_offset " + ops::dims_str(off->get_dim()) + " must hold one value per expert (" +
                                                         s(w[0]) + ", from weight " + ops::dims_str(w) + ")");
  OPENDNN_RETURN_IF_ERROR(ops::require_type(n, "first_token_offset", kIndexTypes));
  const std::string& mode = n.attr_str("mode");
  const TensorPtr& idx = n.in("token_index");
  const TensorPtr& ks = n.in("token_ks");
  if (mode == "NONE") {
    routed = t;
    if (idx) return n.fail(ErrorCode::INVALID_VALUE, "token_index is given but mode NONE does not use it");
    if (ks) return n.fail(ErrorCode::INVALID_VALUE, "token_ks is given but mode NONE does not use it");
  } else if (mode == "GATHER") {
    if (!cm::mul(t, top_k, routed))
      return n.fail(ErrorCode::INVALID_VALUE, "token rows " + s(t) + " x top_k " + s(top_k) + " overflows int64");
    if (!idx) return n.fail(ErrorCode::ATTRIBUTE_NOT_SET, "mode GATHER needs input token_index");
    if (ks) return n.fail(ErrorCode::INVALID_VALUE, "token_ks is given but mode GATHER does not use it");
    if (idx->volume() != routed)
      return n.fail(ErrorCode::SHAPE_DEDUCTION_FAILED, "token_index " + ops::dims_str(idx->get_dim()) + " must hold " + s(routed) +
                                                           " values (token rows " + s(t) + " x top_k " + s(top_k) + ")");
  } else {  // SCATTER
    routed = t;
    if (t % top_k != 0)
      return n.fail(ErrorCode::SHAPE_DEDUCTION_FAILED, "token " + ops::dims_str(tok) + " has " + s(t) +
                                                           " routed rows, not a multiple of top_k " + s(top_k));
    if (!idx) return n.fail(ErrorCode::ATTRIBUTE_NOT_SET, "mode SCATTER needs input token_index");
    if (!ks) return n.fail(ErrorCode::ATTRIBUTE_NOT_SET, "mode SCATTER needs input token_ks");
    for (const TensorPtr* p : {&idx, &ks})
      if ((*p)->volume() != routed)
        return n.fail(ErrorCode::SHAPE_DEDUCTION_FAILED, std::string(p == &idx ? "token_index " : "token_ks ") +
                                                             ops::dims_str((*p)->get_dim()) + " must hold " + s(routed) +
                                                             " values (one per routed row of token)");
  }
  OPENDNN_RETURN_IF_ERROR(ops::require_type(n, "token_index", kIndexTypes));
  OPENDNN_RETURN_IF_ERROR(ops::require_type(n, "token_ks", kIndexTypes));
  out = tok;
  out[out.size() - 2] = routed;
  out.back() = w[2];
  return {};
}

Status infer_moe(Node& n, const GraphContext&) {
  int64_t routed = 0;
  Dims out;
  OPENDNN_RETURN_IF_ERROR(moe_common(n, routed, out));
  return ops::set_dims(n, "output", out);
}

Status infer_moe_bwd(Node& n, const GraphContext&) {
  int64_t routed = 0;
  Dims out;
  OPENDNN_RETURN_IF_ERROR(moe_common(n, routed, out));
  OPENDNN_RETURN_IF_ERROR(ops::require_dims(n, "doutput", out, "(like the forward's output)"));
  if (n.in("weight")) {
    OPENDNN_RETURN_IF_ERROR(ops::set_dims(n, "dtoken", ops::in_dims(n, "token")));
    return ops::set_dims(n, "dweight", ops::in_dims(n, "weight"));
  }
  const Dims& tok = ops::in_dims(n, "token");
  OPENDNN_RETURN_IF_ERROR(ops::set_absent(n, "dtoken", tok.size(), "there is no weight input to compute it from"));
  const Dims dw = {n.in("first_token_offset")->volume(), tok.back(), out.back()};
  OPENDNN_RETURN_IF_ERROR(ops::set_dims(n, "dweight", dw));
  const TensorPtr& t = n.out("dweight");
  if (t->get_stride().empty()) t->set_stride({dw[1] * dw[2], 1, dw[1]});
  return {};
}

// ---- rope

Status infer_rope_common(Node& n, const char* in_port, const char* out_port) {
  const TensorPtr& xt = n.in(in_port);
  const Dims& x = xt->get_dim();
  if (x.size() < 2)
    return n.fail(ErrorCode::SHAPE_DEDUCTION_FAILED, std::string(in_port) + " " + ops::dims_str(x) + " must have at least 2 dims [..., S, D]");
  int64_t d = x.back(), seq = x[x.size() - 2];
  int64_t rd = n.has("rotary_dim") ? n.attr_int("rotary_dim") : d;
  if (rd < 2 || rd % 2 != 0 || rd > d)
    return n.fail(ErrorCode::INVALID_VALUE, "rotary_dim " + s(rd) + " must be even, >= 2 and <= the head dim " + s(d) + " of " + in_port);
  for (const char* p : {"cos", "sin"}) {
    const Dims& c = ops::in_dims(n, p);
    bool ok = c.size() == x.size() && c.back() == rd / 2 && c[c.size() - 2] == seq;
    for (size_t i = 0; ok && i + 2 < c.size(); ++i) ok = c[i] == 1 || c[i] == x[i];
    if (!ok)
      return n.fail(ErrorCode::SHAPE_DEDUCTION_FAILED, std::string(p) + " " + ops::dims_str(c) + " must have " + in_port + "'s rank and dims [..., S=" +
                                                           s(seq) + ", rotary_dim/2=" + s(rd / 2) + "], each leading dim 1 or " +
                                                           in_port + "'s (" + in_port + " is " + ops::dims_str(x) + ")");
    if (!is_floating(n.in(p)->get_data_type()))
      return n.fail(ErrorCode::GRAPH_NOT_SUPPORTED, std::string(p) + " must have a floating data type, has " +
                                                        std::string(to_string(n.in(p)->get_data_type())));
  }
  OPENDNN_RETURN_IF_ERROR(ops::set_dims_like(n, out_port, x, *xt));
  ops::default_type(n, out_port, xt->get_data_type());
  return {};
}

Status infer_rope(Node& n, const GraphContext&) { return infer_rope_common(n, "X", "Y"); }
Status infer_rope_bwd(Node& n, const GraphContext&) { return infer_rope_common(n, "DY", "DX"); }

}  // namespace

const OpDef def_RNG = {kRngIn, kYOut, kRngAttrs, infer_rng};
const OpDef def_RESAMPLE = {kXIn, kResampleOut, kResampleAttrs, infer_resample};
const OpDef def_BLOCK_SCALE_QUANTIZE = {kXIn, kQuantOut, kQuantAttrs, infer_quantize};
const OpDef def_BLOCK_SCALE_DEQUANTIZE = {kDequantIn, kYOut, kDequantAttrs, infer_dequantize};
const OpDef def_MOE_GROUPED_MATMUL = {kMoeIn, kMoeOut, kMoeAttrs, infer_moe};
const OpDef def_MOE_GROUPED_MATMUL_BACKWARD = {kMoeBwdIn, kMoeBwdOut, kMoeAttrs, infer_moe_bwd};
const OpDef def_ROPE = {kRopeIn, kYOut, kRopeAttrs, infer_rope};
const OpDef def_ROPE_BACKWARD = {kRopeBwdIn, kRopeBwdOut, kRopeAttrs, infer_rope_bwd};

}  // namespace opendnn
