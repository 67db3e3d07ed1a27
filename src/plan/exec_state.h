// SPDX-License-Identifier: Apache-2.0
// The graph's planning and execution state: candidates from every engine, built plans, the
// selected plan and the variant-pack slot table.
#pragma once

#include <memory>
#include <vector>

#include "opendnn/engine.h"

namespace opendnn {

class ExecState {
 public:
  std::vector<int64_t> variant_uids;
};

}  // namespace opendnn
