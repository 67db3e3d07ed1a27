// SPDX-License-Identifier: Apache-2.0
// The whole public API.
#pragma once

#include "opendnn/engine.h"
#include "opendnn/graph.h"
#include "opendnn/node.h"
#include "opendnn/status.h"
#include "opendnn/tensor.h"
#include "opendnn/types.h"

namespace opendnn {
inline constexpr const char* kVersion = "0.1.0";
inline constexpr int kVersionNumber = 100;  // major*10000 + minor*100 + patch
}  // namespace opendnn
