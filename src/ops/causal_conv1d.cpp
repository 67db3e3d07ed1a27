// SPDX-License-Identifier: Apache-2.0
// CAUSAL_CONV1D(_BWD): depthwise causal 1-D convolution (Mamba-style), optional bias and SiLU.
// X [B, C, L] in NCW, or [B, L, C] in NWH (channels last); W [C, Kw]; bias [C];
// initial_states [B, C, Kw-1] and final_states [B, C, Kw-1] carry the rolling window across calls.
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
                           {"initial_states", false}};
const PortSpec kBwdOut[] = {{"DX"}, {"DW"}, {"dbias", false}, {"d_initial_states", false}};

}  // namespace

const OpDef def_CAUSAL_CONV1D = {kFwdIn, kFwdOut, kAttrs, nullptr};
const OpDef def_CAUSAL_CONV1D_BACKWARD = {kBwdIn, kBwdOut, kAttrs, nullptr};

}  // namespace opendnn
