// SPDX-License-Identifier: Apache-2.0
// Declares the per-family OpDefs so their definitions have external linkage.
#pragma once

#include "opendnn/node.h"

namespace opendnn {
#define OPENDNN_OP(e, m, tag, npos, nout) extern const OpDef def_##e;
#include "opendnn/ops.def"
#undef OPENDNN_OP
}  // namespace opendnn
