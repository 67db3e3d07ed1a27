// SPDX-License-Identifier: Apache-2.0
// RESHAPE, TRANSPOSE, SLICE, CONCATENATE: ops that move or view data without arithmetic.
#include "ops/infer_util.h"
#include "ops/op_defs.h"

namespace opendnn {
namespace {

const PortSpec kXIn[] = {{"X", true, "input"}};
const PortSpec kYOut[] = {{"Y"}};
const AttrSpec kReshapeAttrs[] = {
    {"reshape_mode", AttrType::ENUM, "LOGICAL", "VIEW_ONLY|LOGICAL"},
    {"dims", AttrType::INT_LIST, {}},  // target dims (or set them on Y)
};
const AttrSpec kTransposeAttrs[] = {{"permutation", AttrType::INT_LIST, {}}};
const AttrSpec kSliceAttrs[] = {
    {"start", AttrType::INT_LIST, {}},
    {"end", AttrType::INT_LIST, {}},
    {"stride", AttrType::INT_LIST, {}},
};
const PortSpec kConcatIn[] = {{"X"}};  // repeated; ports are named "0", "1", ...
const AttrSpec kConcatAttrs[] = {
    {"axis", AttrType::INT, {}},
    {"in_place_index", AttrType::INT, {}},
};

}  // namespace

const OpDef def_RESHAPE = {kXIn, kYOut, kReshapeAttrs, nullptr};
const OpDef def_TRANSPOSE = {kXIn, kYOut, kTransposeAttrs, nullptr};
const OpDef def_SLICE = {kXIn, kYOut, kSliceAttrs, nullptr};
const OpDef def_CONCATENATE = {kConcatIn, kYOut, kConcatAttrs, nullptr};

}  // namespace opendnn
