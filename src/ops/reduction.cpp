// SPDX-License-Identifier: Apache-2.0
// REDUCTION (to the dims of Y, which the user sets) and GENSTATS (per-channel sum and sum of squares).
#include "ops/infer_util.h"
#include "ops/op_defs.h"

namespace opendnn {
namespace {

const PortSpec kXIn[] = {{"X", true, "input"}};
const PortSpec kYOut[] = {{"Y"}};
const AttrSpec kReductionAttrs[] = {
    {"mode", AttrType::ENUM, {}, "ADD|MUL|MIN|MAX|AMAX|AVG|NORM1|NORM2|MUL_NO_ZEROS"},
    {"is_deterministic", AttrType::BOOL, false},
    {"dims", AttrType::INT_LIST, {}},  // output dims (or set them on Y)
};
const PortSpec kGenstatsOut[] = {{"sum"}, {"sq_sum"}};

}  // namespace

const OpDef def_REDUCTION = {kXIn, kYOut, kReductionAttrs, nullptr};
const OpDef def_GENSTATS = {kXIn, kGenstatsOut, {}, nullptr};

}  // namespace opendnn
