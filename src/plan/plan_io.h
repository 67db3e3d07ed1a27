// SPDX-License-Identifier: Apache-2.0
// Internals shared by the lifecycle, the knob API and plan serialization (private to the library).
#pragma once

#include <string>
#include <vector>

#include "opendnn/engine.h"
#include "opendnn/graph.h"

namespace opendnn {

// Adds the notes a candidate's fields imply (NONDETERMINISTIC for a non-deterministic plan).
void add_implied_notes(PlanCandidate& c);

// The kernel-cache key of a graph: its structure, the target and the heuristic modes.
std::string kernel_cache_key(const Graph& g, const Target& target, const std::vector<HeurMode>& modes);

// The selected built plan as a plan record (JSON text; see plan_io.cpp).
Status plan_record(const Graph& g, std::string& out);

// "cpu" / "cuda:sm90:132sm".
std::string target_label(const Target& t);

}  // namespace opendnn
