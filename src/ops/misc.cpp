// SPDX-License-Identifier: Apache-2.0
// RNG, RESAMPLE, BLOCK_SCALE_QUANTIZE/DEQUANTIZE, MOE_GROUPED_MATMUL(_BWD), ROPE(_BWD).
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
const PortSpec kMoeBwdIn[] = {{"doutput"}, {"token"}, {"weight"}, {"first_token_offset"}, {"token_index", false}, {"token_ks", false}};
const PortSpec kMoeBwdOut[] = {{"dtoken"}, {"dweight"}};

const PortSpec kRopeIn[] = {{"X", true, "input"}, {"cos"}, {"sin"}};
const PortSpec kRopeBwdIn[] = {{"DY", true, "grad"}, {"cos"}, {"sin"}};
const PortSpec kRopeBwdOut[] = {{"DX"}};
const AttrSpec kRopeAttrs[] = {
    {"interleaved", AttrType::BOOL, false},  // pairs (2i, 2i+1) instead of halves (i, i + d/2)
    {"rotary_dim", AttrType::INT, {}},       // default: the whole last dim
};

}  // namespace

const OpDef def_RNG = {kRngIn, kYOut, kRngAttrs, nullptr};
const OpDef def_RESAMPLE = {kXIn, kResampleOut, kResampleAttrs, nullptr};
const OpDef def_BLOCK_SCALE_QUANTIZE = {kXIn, kQuantOut, kQuantAttrs, nullptr};
const OpDef def_BLOCK_SCALE_DEQUANTIZE = {kDequantIn, kYOut, kDequantAttrs, nullptr};
const OpDef def_MOE_GROUPED_MATMUL = {kMoeIn, kMoeOut, kMoeAttrs, nullptr};
const OpDef def_MOE_GROUPED_MATMUL_BACKWARD = {kMoeBwdIn, kMoeBwdOut, kMoeAttrs, nullptr};
const OpDef def_ROPE = {kRopeIn, kYOut, kRopeAttrs, nullptr};
const OpDef def_ROPE_BACKWARD = {kRopeBwdIn, kRopeBwdOut, kRopeAttrs, nullptr};

}  // namespace opendnn
