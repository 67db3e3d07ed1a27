// SPDX-License-Identifier: Apache-2.0
// CONV_FPROP, CONV_DGRAD, CONV_WGRAD: N-D convolution (1D/2D/3D spatial) in NC(D)HW logical order,
// with per-axis padding, stride, dilation and groups (inferred from channel counts).
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

}  // namespace

const OpDef def_CONV_FPROP = {kFpropIn, kFpropOut, kConvAttrs, nullptr};
const OpDef def_CONV_DGRAD = {kDgradIn, kDgradOut, kConvAttrs, nullptr};
const OpDef def_CONV_WGRAD = {kWgradIn, kWgradOut, kConvAttrs, nullptr};

}  // namespace opendnn
