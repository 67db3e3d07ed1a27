// SPDX-License-Identifier: Apache-2.0
// Normalisations, forward and backward: batchnorm (training, inference, backward, finalize, dbn
// weight), layernorm, rmsnorm, instancenorm and adalayernorm. epsilon and momentum are tensors
// (usually pass-by-value scalars), as in cuDNN Frontend.
#include "ops/infer_util.h"
#include "ops/op_defs.h"

namespace opendnn {
namespace {

const AttrSpec kPhase[] = {{"forward_phase", AttrType::ENUM, "TRAINING", "TRAINING|INFERENCE"}};

const PortSpec kBnIn[] = {{"X", true, "input"},         {"scale"},
                          {"bias"},                     {"epsilon", false},
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
const PortSpec kLnOut[] = {{"Y"}, {"mean"}, {"inv_variance"}};
const PortSpec kNormBwdIn[] = {{"DY", true, "grad"}, {"X", true, "input"}, {"scale"}, {"mean"}, {"inv_variance"}, {"epsilon", false}};

const PortSpec kRmsIn[] = {{"X", true, "input"}, {"scale"}, {"epsilon"}, {"bias", false}};
const PortSpec kRmsOut[] = {{"Y"}, {"inv_variance"}};
const PortSpec kRmsBwdIn[] = {{"DY", true, "grad"}, {"X", true, "input"}, {"scale"}, {"inv_variance"}};
const AttrSpec kRmsBwdAttrs[] = {{"has_dbias", AttrType::BOOL, false}};

}  // namespace

const OpDef def_BATCHNORM = {kBnIn, kBnOut, {}, nullptr};
const OpDef def_BATCHNORM_INFERENCE = {kBnInfIn, kYOut, {}, nullptr};
const OpDef def_BATCHNORM_BACKWARD = {kBnBwdIn, kBwdOut, {}, nullptr};
const OpDef def_BN_FINALIZE = {kBnFinIn, kBnFinOut, {}, nullptr};
const OpDef def_DBN_WEIGHT = {kDbnWIn, kDbnWOut, {}, nullptr};
const OpDef def_LAYERNORM = {kLnIn, kLnOut, kPhase, nullptr};
const OpDef def_LAYERNORM_BACKWARD = {kNormBwdIn, kBwdOut, {}, nullptr};
const OpDef def_RMSNORM = {kRmsIn, kRmsOut, kPhase, nullptr};
const OpDef def_RMSNORM_BACKWARD = {kRmsBwdIn, kBwdOut, kRmsBwdAttrs, nullptr};
const OpDef def_INSTANCENORM = {kLnIn, kLnOut, kPhase, nullptr};
const OpDef def_INSTANCENORM_BACKWARD = {kNormBwdIn, kBwdOut, {}, nullptr};
const OpDef def_ADALAYERNORM = {kLnIn, kLnOut, kPhase, nullptr};
const OpDef def_ADALAYERNORM_BACKWARD = {kNormBwdIn, kBwdOut, {}, nullptr};

}  // namespace opendnn
