// SPDX-License-Identifier: Apache-2.0
// The graph's planning and execution state: candidates from every engine, built plans, the
// selected plan and the variant-pack slot table.
//
// Plan list semantics (see also Graph's lifecycle in lifecycle.cpp):
//  - create_execution_plans() fills `plans` in rank order. Each entry carries its two-level id
//    (engine_id, local_index), which never changes for the life of the list.
//  - deselect_*() marks entries; it never removes or moves them, so the count and every index stay
//    valid. A deselected entry cannot be built, selected or executed, and its built plan is freed.
//  - autotune() is the one call that renumbers: it moves the timed plans to the front, fastest
//    first (the others keep their relative order after them), and selects index 0. Use
//    find_plan_index(engine_id, local_index) to find a plan again afterwards.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "opendnn/engine.h"

namespace opendnn {

struct PlanEntry {
  std::shared_ptr<Engine> engine;
  std::string engine_name;
  int64_t engine_id = 0;
  PlanCandidate candidate;
  std::unique_ptr<Plan> plan;  // non-null once built
  std::string build_error;     // non-empty if building was tried and failed
  bool deselected = false;
  double measured_us = -1.0;
};

// Settings that outlive re-planning and deserialize(): set on the graph, read by the router.
struct PlanSettings {
  std::optional<Target> target;  // device properties: plan for this target instead of default_target()
  std::shared_ptr<KernelCache> kernel_cache;
  std::vector<NumericalNote> numeric_select, numeric_deselect;
  std::vector<BehaviorNote> behavior_select, behavior_deselect;
};

// One engine of the engine/knob API: the router's engine and its knob-engine index.
struct KnobEngineRef {
  std::shared_ptr<Engine> engine;
  int64_t index = 0;
  KnobEngine info;
};

class ExecState {
 public:
  // ---- variant pack: one slot per variant uid, ascending.
  std::vector<int64_t> variant_uids;
  std::vector<std::string> slot_labels;          // "uid 3 (\"x\")", for error messages
  std::vector<const TensorAttr*> slot_tensors;   // the tensor behind each slot
  // Nothing here changes during execute(): each call fills its own slot array, so concurrent calls on
  // one built graph are independent.

  // ---- plans
  Target target;
  std::vector<PlanEntry> plans;         // rank order
  std::vector<std::string> declines;    // "engine: reason", one per line, from every engine
  int64_t selected = -1;
  bool planned = false;                 // create_execution_plans() has run
  bool from_cache = false;              // the order came from the on-disk plan cache
  std::string cache_path;               // where autotune() records the order
  std::vector<KnobEngineRef> knob_engines;  // listed on first use (get_engine_count)
  bool knob_engines_listed = false;
  bool restored = false;                // the plan came from serialize_plan() or a kernel cache

  // Index of uid in variant_uids, or -1 (binary search; no allocation).
  int64_t slot_of(int64_t uid) const;
};

}  // namespace opendnn
