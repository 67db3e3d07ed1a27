// SPDX-License-Identifier: Apache-2.0
// The reference engine's plan: per node, a kernel and its prebuilt Args; execute() binds the
// data pointers into a per-call copy of them and runs the kernels in topological order.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "engines/reference/ref_kernel.h"
#include "opendnn/engine.h"

namespace opendnn::ref {

// Where each virtual tensor lives in the workspace, and the shared kernel scratch.
struct WorkspaceLayout {
  std::unordered_map<const TensorAttr*, int64_t> offsets;  // virtual tensors some node reads
  int64_t scratch_offset = 0;
  int64_t scratch_bytes = 0;  // the largest scratch any kernel needs (kernels run one at a time)
  int64_t bytes = 0;          // total, including 64 bytes of slack to align the caller's pointer
};
WorkspaceLayout layout_workspace(const Graph& graph);

// Why the reference engine cannot run `graph` (empty when it can).
std::vector<std::string> reference_declines(const Graph& graph);

Status build_reference_plan(const Graph& graph, std::unique_ptr<Plan>& out);

}  // namespace opendnn::ref
