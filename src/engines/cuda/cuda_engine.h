// SPDX-License-Identifier: Apache-2.0
// The `cuda` engine: our own Hopper kernels. Each kernel family (norm/, and later gemm/, sdpa/,
// gdn/, conv1d/) contributes an adapter that recognises the graphs it runs and builds plans.
#pragma once

#include <memory>
#include <vector>

#include "opendnn/engine.h"

namespace opendnn::cuda {

// What one kernel family offers the engine. Local plan indices of a family start at index_base,
// so (engine id, local index) stays stable when families are added.
struct Family {
  const char* name;
  int64_t index_base;
  void (*propose)(const Graph& graph, const Target& target, Proposal& out);
  Status (*build)(const Graph& graph, const Target& target, const PlanCandidate& candidate,
                  std::unique_ptr<Plan>& out);
};

const Family& norm_family();
const Family& gemm_family();
const Family& gdn_family();
const Family& sdpa_bwd_family();
const Family& sdpa_family();
const Family& pointwise_family();

std::shared_ptr<Engine> make_cuda_engine();

// Slot of the tensor in the graph's variant pack, or -1 (virtual, or a pass-by-value constant).
int64_t slot_of(const Graph& graph, const TensorPtr& t);

}  // namespace opendnn::cuda
