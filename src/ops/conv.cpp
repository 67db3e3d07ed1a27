// SPDX-License-Identifier: Apache-2.0
// CONV_FPROP, CONV_DGRAD, CONV_WGRAD: N-D convolution (1D/2D/3D spatial) in NC(D)HW logical order,
// with per-axis padding, stride, dilation and groups (inferred from channel counts).
//
// Conventions
//   X  [N, C, s...]          (rank 3, 4 or 5: 1, 2 or 3 spatial dims; any strides, e.g. NHWC)
//   W  [K, C/groups, k...]   (same rank as X)
//   Y  [N, K, o...]          o = floor((s + pre + post - dilation*(k-1) - 1) / stride) + 1, must be >= 1
//   groups = C / W.dims[1]; it must divide both C and K.
//   pre_padding / post_padding / stride / dilation: one value per spatial dim; empty means 0 / 0 / 1 / 1.
//   convolution_mode CONVOLUTION flips the kernel; CROSS_CORRELATION (the default) does not.
//   Compute types: FLOAT (default), DOUBLE, HALF, INT32 (int8 convolutions).
//
//   conv_dgrad(DY, W) -> DX: DX's dims may be set by the user (they are then checked: the forward formula
//     applied to DX must give DY's spatial dims); if unset, DX gets the minimal input size,
//     s = (o-1)*stride + dilation*(k-1) + 1 - pre - post, and groups = 1 (C = W.dims[1]). A grouped dgrad
//     therefore needs DX's dims set.
//   conv_wgrad(X, DY) -> DW: DW's dims [K, C/groups, k...] must be set by the user (the kernel size cannot
//     be inferred); they are checked against X and DY.
#include "common/checked_math.h"
#include "ops/infer_util.h"
#include "ops/op_defs.h"

namespace opendnn {
namespace {

const AttrSpec kConvAttrs[] = {
    {"pre_padding", AttrType::INT_LIST, {}},
    {"post_padding", AttrType::INT_LIST, {}},
    {"stride", AttrType::INT_LIST, {}},
    {"dilation", AttrType::INT_LIST, {}},
    {"convolution_mode", AttrType::ENUM, "CROSS_CORRELATION", "CROSS_CORRELATION|CONVOLUTION"},
};
const PortSpec kFpropIn[] = {{"X", true, "image"}, {"W", true, "weight"}};
const PortSpec kFpropOut[] = {{"Y"}};
const PortSpec kDgradIn[] = {{"DY", true, "loss"}, {"W", true, "filter"}};
const PortSpec kDgradOut[] = {{"DX"}};
const PortSpec kWgradIn[] = {{"X", true, "image"}, {"DY", true, "loss"}};
const PortSpec kWgradOut[] = {{"DW"}};

using Dims = std::vector<int64_t>;

struct ConvParams {
  size_t nsp = 0;  // spatial dims
  Dims pre, post, stride, dilation;
};

std::string s(int64_t v) { return std::to_string(v); }

// Checks the compute type, the rank of the activation-like tensor and reads the attributes.
Status conv_common(const Node& n, const GraphContext& ctx, const char* act_port, const Dims& act, ConvParams& p) {
  DataType ct = ops::compute_type(n, ctx);
  if (ct != DataType::FLOAT && ct != DataType::DOUBLE && ct != DataType::HALF && ct != DataType::INT32)
    return n.fail(ErrorCode::GRAPH_NOT_SUPPORTED, "compute data type " + std::string(to_string(ct)) +
                                                      " is not supported; use FLOAT, DOUBLE, HALF or INT32");
  if (act.size() < 3 || act.size() > 5)
    return n.fail(ErrorCode::SHAPE_DEDUCTION_FAILED, std::string(act_port) + " " + ops::dims_str(act) +
                                                         " must have 3 to 5 dims [N, C, spatial...] (1D, 2D or 3D)");
  p.nsp = act.size() - 2;
  OPENDNN_RETURN_IF_ERROR(ops::spatial_attr(n, "pre_padding", p.nsp, 0, 0, p.pre));
  OPENDNN_RETURN_IF_ERROR(ops::spatial_attr(n, "post_padding", p.nsp, 0, 0, p.post));
  OPENDNN_RETURN_IF_ERROR(ops::spatial_attr(n, "stride", p.nsp, 1, 1, p.stride));
  OPENDNN_RETURN_IF_ERROR(ops::spatial_attr(n, "dilation", p.nsp, 1, 1, p.dilation));
  return {};
}

Status check_weight(const Node& n, const char* w_port, const Dims& w, size_t rank) {
  if (w.size() != rank)
    return n.fail(ErrorCode::SHAPE_DEDUCTION_FAILED, std::string(w_port) + " " + ops::dims_str(w) + " must have " +
                                                         s(int64_t(rank)) + " dims [K, C/groups, kernel...]");
  for (int64_t d : w)
    if (d < 1)
      return n.fail(ErrorCode::SHAPE_DEDUCTION_FAILED, std::string(w_port) + " " + ops::dims_str(w) + " has an empty dim");
  return {};
}

// groups from X's channel count C, the per-group count of W (Cg) and the output channels K.
Status deduce_groups(const Node& n, const char* x_port, int64_t c, const char* w_port, int64_t cg, int64_t k,
                     int64_t& groups) {
  if (c < 1)
    return n.fail(ErrorCode::SHAPE_DEDUCTION_FAILED, std::string(x_port) + " has " + s(c) + " channels; a convolution needs at least one");
  if (cg < 1 || c % cg != 0)
    return n.fail(ErrorCode::SHAPE_DEDUCTION_FAILED, std::string(w_port) + " has " + s(cg) +
                                                         " input channels per group, which does not divide the " + s(c) +
                                                         " channels of " + x_port);
  groups = c / cg;
  if (k % groups != 0)
    return n.fail(ErrorCode::SHAPE_DEDUCTION_FAILED, std::string(w_port) + " has " + s(k) + " output channels, not a multiple of the " +
                                                         s(groups) + " groups (" + x_port + " has " + s(c) + " channels, " +
                                                         w_port + " " + s(cg) + " per group)");
  return {};
}

// The forward output spatial dims for an input (spatial dims from index 2) and kernel (index 2 of w).
Status forward_spatial(const Node& n, const ConvParams& p, const Dims& x, const char* x_port, const Dims& w, Dims& out) {
  out.clear();
  for (size_t i = 0; i < p.nsp; ++i) {
    auto o = ops::window_out_len(x[i + 2], p.pre[i], p.post[i], w[i + 2], p.stride[i], p.dilation[i]);
    if (!o)
      return n.fail(ErrorCode::INVALID_VALUE, "spatial dim " + s(int64_t(i)) + " of " + x_port + " " + ops::dims_str(x) +
                                                  ": size " + s(x[i + 2]) + " + padding " + s(p.pre[i]) + "+" + s(p.post[i]) +
                                                  " against kernel " + s(w[i + 2]) + " dilated by " + s(p.dilation[i]) +
                                                  " overflows int64");
    if (*o < 1)
      return n.fail(ErrorCode::SHAPE_DEDUCTION_FAILED,
                    "spatial dim " + s(int64_t(i)) + " of " + x_port + " " + ops::dims_str(x) + " (" + s(x[i + 2]) +
                        " + padding " + s(p.pre[i]) + "+" + s(p.post[i]) + ") is smaller than the dilated kernel " +
                        s(*ops::dilated_extent(w[i + 2], p.dilation[i])));
    out.push_back(*o);
  }
  return {};
}

Status infer_conv_fprop(Node& n, const GraphContext& ctx) {
  const Dims& x = ops::in_dims(n, "X");
  const Dims& w = ops::in_dims(n, "W");
  ConvParams p;
  OPENDNN_RETURN_IF_ERROR(conv_common(n, ctx, "X", x, p));
  OPENDNN_RETURN_IF_ERROR(check_weight(n, "W", w, x.size()));
  int64_t groups = 1;
  OPENDNN_RETURN_IF_ERROR(deduce_groups(n, "X", x[1], "W", w[1], w[0], groups));
  Dims sp;
  OPENDNN_RETURN_IF_ERROR(forward_spatial(n, p, x, "X", w, sp));
  Dims y{x[0], w[0]};
  y.insert(y.end(), sp.begin(), sp.end());
  return ops::set_dims_like(n, "Y", y, *n.in("X"));
}

Status infer_conv_dgrad(Node& n, const GraphContext& ctx) {
  const Dims& dy = ops::in_dims(n, "DY");
  const Dims& w = ops::in_dims(n, "W");
  ConvParams p;
  OPENDNN_RETURN_IF_ERROR(conv_common(n, ctx, "DY", dy, p));
  OPENDNN_RETURN_IF_ERROR(check_weight(n, "W", w, dy.size()));
  if (dy[1] != w[0])
    return n.fail(ErrorCode::SHAPE_DEDUCTION_FAILED, "DY " + ops::dims_str(dy) + " has " + s(dy[1]) +
                                                         " channels but W " + ops::dims_str(w) + " has " + s(w[0]) +
                                                         " output channels");
  const Dims& user = n.out("DX")->get_dim();
  if (!user.empty()) {
    if (user.size() != dy.size())
      return n.fail(ErrorCode::SHAPE_DEDUCTION_FAILED, "output DX was given dims " + ops::dims_str(user) + " but DY " +
                                                           ops::dims_str(dy) + " has " + s(int64_t(dy.size())) + " dims");
    if (user[0] != dy[0])
      return n.fail(ErrorCode::SHAPE_DEDUCTION_FAILED, "output DX " + ops::dims_str(user) + " and DY " + ops::dims_str(dy) +
                                                           " differ in batch size");
    int64_t groups = 1;
    OPENDNN_RETURN_IF_ERROR(deduce_groups(n, "DX", user[1], "W", w[1], w[0], groups));
    Dims sp;
    OPENDNN_RETURN_IF_ERROR(forward_spatial(n, p, user, "DX", w, sp));
    for (size_t i = 0; i < p.nsp; ++i)
      if (sp[i] != dy[i + 2])
        return n.fail(ErrorCode::SHAPE_DEDUCTION_FAILED,
                      "output DX " + ops::dims_str(user) + " convolved with W " + ops::dims_str(w) + " gives spatial dims " +
                          ops::dims_str(sp) + " but DY " + ops::dims_str(dy) + " has different ones");
    return ops::set_dims_like(n, "DX", user, *n.in("DY"));
  }
  Dims dx{dy[0], w[1]};
  for (size_t i = 0; i < p.nsp; ++i) {
    // An empty DY axis has no DX the forward formula maps to it (that needs at least one window).
    if (dy[i + 2] < 1)
      return n.fail(ErrorCode::SHAPE_DEDUCTION_FAILED, "cannot infer DX: spatial dim " + s(int64_t(i)) + " of DY " +
                                                           ops::dims_str(dy) + " is empty");
    // (o - 1) * stride + dilation * (k - 1) + 1 - pre - post
    auto eff = ops::dilated_extent(w[i + 2], p.dilation[i]);
    int64_t in = 0;
    if (!eff || !cm::mul(dy[i + 2] - 1, p.stride[i], in) || !cm::add(in, *eff, in) || !cm::sub(in, p.pre[i], in) ||
        !cm::sub(in, p.post[i], in))
      return n.fail(ErrorCode::INVALID_VALUE, "cannot infer DX: spatial dim " + s(int64_t(i)) + " from DY " + ops::dims_str(dy) +
                                                  " with its stride, dilation and padding overflows int64");
    if (in < 1)
      return n.fail(ErrorCode::SHAPE_DEDUCTION_FAILED, "cannot infer DX: spatial dim " + s(int64_t(i)) +
                                                           " would be " + s(in) + " (padding exceeds the receptive field); set DX's dims");
    dx.push_back(in);
  }
  return ops::set_dims_like(n, "DX", dx, *n.in("DY"));
}

Status infer_conv_wgrad(Node& n, const GraphContext& ctx) {
  const Dims& x = ops::in_dims(n, "X");
  const Dims& dy = ops::in_dims(n, "DY");
  ConvParams p;
  OPENDNN_RETURN_IF_ERROR(conv_common(n, ctx, "X", x, p));
  if (dy.size() != x.size())
    return n.fail(ErrorCode::SHAPE_DEDUCTION_FAILED, "DY " + ops::dims_str(dy) + " and X " + ops::dims_str(x) +
                                                         " must have the same rank");
  if (dy[0] != x[0])
    return n.fail(ErrorCode::SHAPE_DEDUCTION_FAILED, "DY " + ops::dims_str(dy) + " and X " + ops::dims_str(x) +
                                                         " differ in batch size");
  const Dims& dw = n.out("DW")->get_dim();
  if (dw.empty())
    return n.fail(ErrorCode::ATTRIBUTE_NOT_SET, "output DW needs its dims set to [K, C/groups, kernel...]: the kernel size "
                                                "cannot be inferred from X and DY");
  OPENDNN_RETURN_IF_ERROR(check_weight(n, "output DW", dw, x.size()));
  OPENDNN_RETURN_IF_ERROR(ops::set_dims_like(n, "DW", dw, *n.in("X")));
  if (dw[0] != dy[1])
    return n.fail(ErrorCode::SHAPE_DEDUCTION_FAILED, "output DW " + ops::dims_str(dw) + " has " + s(dw[0]) +
                                                         " output channels but DY " + ops::dims_str(dy) + " has " + s(dy[1]));
  int64_t groups = 1;
  OPENDNN_RETURN_IF_ERROR(deduce_groups(n, "X", x[1], "DW", dw[1], dw[0], groups));
  Dims sp;
  OPENDNN_RETURN_IF_ERROR(forward_spatial(n, p, x, "X", dw, sp));
  for (size_t i = 0; i < p.nsp; ++i)
    if (sp[i] != dy[i + 2])
      return n.fail(ErrorCode::SHAPE_DEDUCTION_FAILED, "X " + ops::dims_str(x) + " convolved with a kernel of DW " +
                                                           ops::dims_str(dw) + " gives spatial dims " + ops::dims_str(sp) +
                                                           " but DY " + ops::dims_str(dy) + " has different ones");
  return {};
}

}  // namespace

const OpDef def_CONV_FPROP = {kFpropIn, kFpropOut, kConvAttrs, infer_conv_fprop};
const OpDef def_CONV_DGRAD = {kDgradIn, kDgradOut, kConvAttrs, infer_conv_dgrad};
const OpDef def_CONV_WGRAD = {kWgradIn, kWgradOut, kConvAttrs, infer_conv_wgrad};

}  // namespace opendnn
