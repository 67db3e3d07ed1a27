// SPDX-License-Identifier: Apache-2.0
// The graph's plan lifecycle: the router (collect, rank, filter), building, the variant pack,
// execution and autotune.
//
// Semantics, in one place:
//  - create_execution_plans(modes) asks every registered engine that serves the target for
//    candidates. For each mode in order, the engines it admits (A, B: all; FALLBACK: engines with
//    is_fallback(); OPENSOURCE: ids >= kCppEngineIdBase, i.e. not backend-delegating) contribute
//    their plans, ranked: A, FALLBACK and OPENSOURCE by estimated µs ascending (ties: engine id,
//    local index); B groups plans by engine (engines by their best estimate) and keeps each engine's
//    own proposal order. Later modes append only plans not already listed. Then, if the plan cache
//    has an autotuned order for this graph, device and version, those plans move to the front in
//    that order. Re-planning replaces the whole list.
//  - Plan indices: see exec_state.h. Stable across select/build/deselect; autotune renumbers.
//  - build_plans(HEURISTICS_CHOICE) builds the first non-deselected plan that builds; ALL builds
//    every non-deselected plan and succeeds if at least one builds. Either keeps a selection that
//    is already built, else selects the first built plan in rank order.
//  - select_plan(i) builds plan i if needed and selects it. build_plan_at_index(i) builds plan i
//    and selects it only when nothing is selected yet.
//  - create_execution_plan(engine, knobs) (knobs.cpp) appends one plan to the list, creating an empty
//    list (variant slots laid out, no proposals) when there is none; note filters (select/deselect_*
//    _notes) deselect plans in every list, now and later.
//  - build(modes) with a kernel cache restores the cached plan record of this graph, target and modes
//    (plan_io.cpp) instead of planning, and records the plan it built otherwise.
//  - execute() runs the selected plan. A graph changed after validation (a node added, a tensor's
//    dims, strides, type or value edited) refuses to execute, naming the tensor, until it is built
//    again; validating it again drops its plans.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <set>
#include <unordered_set>

#include "common/alloc_guard.h"
#include "opendnn/engine.h"
#include "plan/exec_state.h"
#include "plan/plan_cache.h"
#include "plan/plan_io.h"

namespace opendnn {

int64_t ExecState::slot_of(int64_t uid) const {
  auto it = std::lower_bound(variant_uids.begin(), variant_uids.end(), uid);
  return (it != variant_uids.end() && *it == uid) ? int64_t(it - variant_uids.begin()) : -1;
}

namespace {

const std::vector<int64_t> kNoUids;

std::string label(const TensorAttr& t) {
  std::string s = "uid " + std::to_string(t.get_uid());
  if (!t.get_name().empty()) s += " (\"" + t.get_name() + "\")";
  return s;
}

bool needs_slot(const TensorAttr& t) {
  return !t.get_is_virtual() && !(t.get_is_pass_by_value() && t.get_value().is_set());
}

// Tensors attached to a node port, and their ragged-offset tensors.
std::vector<TensorPtr> node_tensors(const Graph& g) {
  std::vector<TensorPtr> all;
  std::unordered_set<const TensorAttr*> seen;
  auto add = [&](const TensorPtr& t, auto&& self) -> void {
    if (!t || !seen.insert(t.get()).second) return;
    all.push_back(t);
    self(t->get_ragged_offset(), self);
  };
  for (const auto& n : g.nodes()) {
    for (const auto& t : n->inputs()) add(t, add);
    for (const auto& t : n->outputs()) add(t, add);
  }
  return all;
}

Status not_planned() {
  return {ErrorCode::INVALID_VALUE, "no execution plans: call create_execution_plans() (or build()) first"};
}

Status bad_index(int64_t i, size_t n) {
  return {ErrorCode::INVALID_VALUE,
          "plan index " + std::to_string(i) + " is out of range (the graph has " + std::to_string(n) + " plans)"};
}

std::string plan_label(const PlanEntry& e) { return e.engine_name + ":" + e.candidate.name; }

bool admits(HeurMode m, const Engine& e) {
  switch (m) {
    case HeurMode::A:
    case HeurMode::B: return true;
    case HeurMode::FALLBACK: return e.is_fallback();
    case HeurMode::OPENSOURCE: return e.engine_id() >= kCppEngineIdBase;
  }
  return false;
}

class HostTimer final : public Timer {
 public:
  void start(void*) override { t0_ = std::chrono::steady_clock::now(); }
  double stop_us(void*) override {
    return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0_).count();
  }

 private:
  std::chrono::steady_clock::time_point t0_;
};

int64_t entry_workspace(const PlanEntry& e) {
  return e.plan ? e.plan->workspace_size() : e.candidate.workspace_bytes;
}

Status build_entry(const Graph& g, const Target& target, PlanEntry& e) {
  if (e.plan) return {};
  if (e.deselected)
    return {ErrorCode::INVALID_VALUE, "plan " + plan_label(e) + " was deselected and cannot be built"};
  std::unique_ptr<Plan> p;
  Status s = e.engine->build_plan(g, target, e.candidate, p);
  if (s.is_good() && !p) s = {ErrorCode::GRAPH_EXECUTION_PLAN_CREATION_FAILED, "the engine returned no plan"};
  if (s.is_bad()) {
    e.build_error = s.message();
    return {ErrorCode::GRAPH_EXECUTION_PLAN_CREATION_FAILED, plan_label(e) + ": " + s.message()};
  }
  e.build_error.clear();
  e.plan = std::move(p);
  return {};
}

}  // namespace

void add_implied_notes(PlanCandidate& c) {
  if (!c.deterministic && std::find(c.numerical_notes.begin(), c.numerical_notes.end(),
                                    NumericalNote::NONDETERMINISTIC) == c.numerical_notes.end())
    c.numerical_notes.push_back(NumericalNote::NONDETERMINISTIC);
}

namespace {

// After a deselect: keep the selection if still usable, else the first built usable plan.
void fix_selection(ExecState& st) {
  if (st.selected >= 0 && !st.plans[size_t(st.selected)].deselected && st.plans[size_t(st.selected)].plan) return;
  st.selected = -1;
  for (size_t i = 0; i < st.plans.size(); ++i)
    if (!st.plans[i].deselected && st.plans[i].plan) {
      st.selected = int64_t(i);
      return;
    }
}

}  // namespace

// ---------------------------------------------------------------- planning

Status Graph::build_operation_graph() { return is_validated() ? Status{} : validate(); }

PlanSettings& Graph::settings() {
  if (!settings_) settings_ = std::make_shared<PlanSettings>();
  return *settings_;
}

void Graph::set_target(const Target& target) { settings().target = target; }
void Graph::clear_target() { settings().target.reset(); }
Target Graph::planning_target() const {
  return settings_ && settings_->target ? *settings_->target : default_target();
}
void Graph::set_kernel_cache(std::shared_ptr<KernelCache> cache) { settings().kernel_cache = std::move(cache); }
std::shared_ptr<KernelCache> Graph::kernel_cache() const { return settings_ ? settings_->kernel_cache : nullptr; }

Status Graph::init_plan_state() {
  OPENDNN_RETURN_IF_ERROR(build_operation_graph());
  // The new state is installed first: engines look tensors' variant slots up through the graph
  // (variant_slot_of) while they propose and build plans.
  exec_ = std::make_unique<ExecState>();
  ExecState* st = exec_.get();
  st->target = planning_target();
  std::vector<const TensorAttr*> slot_tensors;
  for (const auto& t : node_tensors(*this))
    if (needs_slot(*t)) slot_tensors.push_back(t.get());
  std::sort(slot_tensors.begin(), slot_tensors.end(),
            [](const TensorAttr* a, const TensorAttr* b) { return a->get_uid() < b->get_uid(); });
  for (const TensorAttr* t : slot_tensors) {
    st->variant_uids.push_back(t->get_uid());
    st->slot_labels.push_back(label(*t));
    st->slot_tensors.push_back(t);
  }
  st->planned = true;
  return {};
}

Status Graph::create_execution_plans(const std::vector<HeurMode>& modes_in) try {
  std::vector<HeurMode> modes = modes_in.empty() ? std::vector<HeurMode>{HeurMode::A} : modes_in;
  OPENDNN_RETURN_IF_ERROR(init_plan_state());
  ExecState* st = exec_.get();
  st->planned = false;

  // Proposals from every engine.
  struct Offer {
    std::shared_ptr<Engine> engine;
    std::string name;
    std::vector<PlanCandidate> plans;
  };
  std::vector<Offer> offers;
  const std::string device = plan_cache::device_string(st->target);
  for (auto& e : registered_engines()) {
    std::string name(e->name());
    if (!e->serves(st->target)) {
      st->declines.push_back(name + ": does not run on target " + device);
      continue;
    }
    // An engine no requested mode admits is not asked (its proposal, e.g. cuDNN's heuristics queries,
    // would be thrown away).
    if (std::none_of(modes.begin(), modes.end(), [&](HeurMode m) { return admits(m, *e); })) {
      std::string ms;
      for (HeurMode m : modes) ms += (ms.empty() ? "" : ", ") + std::string(to_string(m));
      st->declines.push_back(name + ": excluded by heuristic mode(s) " + ms);
      continue;
    }
    Proposal p = e->propose_plans(*this, st->target);
    for (const auto& d : p.declines) st->declines.push_back(name + ": " + d);
    if (p.plans.empty()) {
      if (p.declines.empty()) st->declines.push_back(name + ": proposed no plan");
      continue;
    }
    Offer o{e, name, {}};
    std::set<int64_t> locals;
    for (auto& c : p.plans) {
      if (!locals.insert(c.local_index).second) {
        st->declines.push_back(name + ": duplicate local index " + std::to_string(c.local_index) + " (plan " + c.name +
                               ") ignored");
        continue;
      }
      o.plans.push_back(std::move(c));
    }
    offers.push_back(std::move(o));
  }

  // Rank per mode, appending plans not listed yet.
  std::set<std::pair<int64_t, int64_t>> listed;
    for (HeurMode m : modes) {
    struct Item {
      size_t offer;
      size_t pos;  // position in the engine's proposal
      double engine_best;
    };
    std::vector<Item> items;
    for (size_t oi = 0; oi < offers.size(); ++oi) {
      if (!admits(m, *offers[oi].engine)) continue;
      double best = 1e300;
      for (const auto& c : offers[oi].plans) best = std::min(best, c.estimated_us);
      for (size_t pi = 0; pi < offers[oi].plans.size(); ++pi) items.push_back({oi, pi, best});
    }
    auto cand = [&](const Item& it) -> const PlanCandidate& { return offers[it.offer].plans[it.pos]; };
    auto id = [&](const Item& it) { return offers[it.offer].engine->engine_id(); };
    if (m == HeurMode::B) {
      std::stable_sort(items.begin(), items.end(), [&](const Item& a, const Item& b) {
        if (a.engine_best != b.engine_best) return a.engine_best < b.engine_best;
        if (id(a) != id(b)) return id(a) < id(b);
        return a.pos < b.pos;
      });
    } else {
      std::stable_sort(items.begin(), items.end(), [&](const Item& a, const Item& b) {
        if (cand(a).estimated_us != cand(b).estimated_us) return cand(a).estimated_us < cand(b).estimated_us;
        if (id(a) != id(b)) return id(a) < id(b);
        return cand(a).local_index < cand(b).local_index;
      });
    }
    for (const Item& it : items) {
      const Offer& o = offers[it.offer];
      if (!listed.insert({o.engine->engine_id(), cand(it).local_index}).second) continue;
      PlanEntry e;
      e.engine = o.engine;
      e.engine_name = o.name;
      e.engine_id = o.engine->engine_id();
      e.candidate = cand(it);
      add_implied_notes(e.candidate);
      st->plans.push_back(std::move(e));
    }
  }
  // An autotuned order from the plan cache takes precedence over the estimates.
  st->cache_path = plan_cache::cache_path(*this, st->target);
  std::vector<plan_cache::Entry> cached;
  if (!st->plans.empty() && plan_cache::read(st->cache_path, plan_cache::graph_fingerprint(*this), device, cached)) {
    std::vector<PlanEntry> front;
    for (const auto& c : cached) {
      for (auto& e : st->plans) {
        if (e.engine && e.engine_id == c.engine_id && e.candidate.local_index == c.local_index) {
          e.measured_us = c.measured_us;
          front.push_back(std::move(e));
          e.engine = nullptr;  // moved-from marker
          break;
        }
      }
    }
    if (!front.empty()) {
      st->from_cache = true;
      for (auto& e : st->plans)
        if (e.engine) front.push_back(std::move(e));
      st->plans = std::move(front);
    }
  }
  st->planned = true;
  apply_note_filters();
  return {};
} catch (...) {
  return alloc_error(ErrorCode::GRAPH_EXECUTION_PLAN_CREATION_FAILED, "while creating execution plans");
}

Status Graph::check_support() {
  ExecState* st = exec_.get();
  if (!st || !st->planned) return not_planned();
  size_t usable = 0;
  for (const auto& e : st->plans) usable += !e.deselected;
  if (usable > 0) return {};
  std::string msg = st->plans.empty() ? "not supported: no engine can run this graph"
                                      : "not supported: all " + std::to_string(st->plans.size()) +
                                            " plans were deselected";
  for (const auto& d : st->declines) msg += "\n  " + d;
  return {ErrorCode::GRAPH_NOT_SUPPORTED, msg};
}

Status Graph::build_plans(BuildPlanPolicy policy) try {
  OPENDNN_RETURN_IF_ERROR(check_support());
  ExecState& st = *exec_;
  std::string failures;
  bool any = false;
  for (auto& e : st.plans) {
    if (e.deselected) continue;
    Status s = build_entry(*this, st.target, e);
    if (s.is_bad()) {
      failures += "\n  " + s.message();
      continue;
    }
    any = true;
    if (policy == BuildPlanPolicy::HEURISTICS_CHOICE) break;
  }
  fix_selection(st);
  if (!any) return {ErrorCode::GRAPH_EXECUTION_PLAN_CREATION_FAILED, "no plan could be built:" + failures};
  return {};
} catch (...) {
  return alloc_error(ErrorCode::GRAPH_EXECUTION_PLAN_CREATION_FAILED, "while building plans");
}

Status Graph::build_plan_at_index(int64_t index) try {
  ExecState* st = exec_.get();
  if (!st || !st->planned) return not_planned();
  if (index < 0 || size_t(index) >= st->plans.size()) return bad_index(index, st->plans.size());
  OPENDNN_RETURN_IF_ERROR(build_entry(*this, st->target, st->plans[size_t(index)]));
  if (st->selected < 0) st->selected = index;
  return {};
} catch (...) {
  return alloc_error(ErrorCode::GRAPH_EXECUTION_PLAN_CREATION_FAILED, "while building a plan");
}

Status Graph::build(const std::vector<HeurMode>& modes, BuildPlanPolicy policy) {
  OPENDNN_RETURN_IF_ERROR(build_operation_graph());
  std::shared_ptr<KernelCache> cache = kernel_cache();
  std::string key;
  if (cache) {
    key = kernel_cache_key(*this, planning_target(), modes);
    std::string record;
    // A cached plan that no longer restores (another device, engine build) is planned afresh.
    if (cache->find(key, record) && restore_plan_record(record).is_good()) return {};
  }
  OPENDNN_RETURN_IF_ERROR(create_execution_plans(modes));
  OPENDNN_RETURN_IF_ERROR(check_support());
  OPENDNN_RETURN_IF_ERROR(build_plans(policy));
  if (cache) {
    std::string record;
    if (plan_record(*this, record).is_good()) cache->put(key, std::move(record));
  }
  return {};
}

// ---------------------------------------------------------------- queries and filters

int64_t Graph::get_execution_plan_count() const { return exec_ ? int64_t(exec_->plans.size()) : 0; }

Status Graph::get_plan_name_at_index(int64_t index, std::string& name) const {
  if (!exec_ || !exec_->planned) return not_planned();
  if (index < 0 || size_t(index) >= exec_->plans.size()) return bad_index(index, exec_->plans.size());
  name = plan_label(exec_->plans[size_t(index)]);
  return {};
}

Status Graph::get_engine_name_at_index(int64_t index, std::string& name) const {
  if (!exec_ || !exec_->planned) return not_planned();
  if (index < 0 || size_t(index) >= exec_->plans.size()) return bad_index(index, exec_->plans.size());
  name = exec_->plans[size_t(index)].engine_name;
  return {};
}

Status Graph::get_plan_info_at_index(int64_t index, PlanInfo& info) const {
  if (!exec_ || !exec_->planned) return not_planned();
  if (index < 0 || size_t(index) >= exec_->plans.size()) return bad_index(index, exec_->plans.size());
  const PlanEntry& e = exec_->plans[size_t(index)];
  info.engine_id = e.engine_id;
  info.local_index = e.candidate.local_index;
  info.engine = e.engine_name;
  info.plan = e.candidate.name;
  info.estimated_us = e.candidate.estimated_us;
  info.measured_us = e.measured_us;
  info.workspace_bytes = entry_workspace(e);
  info.built = e.plan != nullptr;
  info.deselected = e.deselected;
  info.build_error = e.build_error;
  return {};
}

int64_t Graph::find_plan_index(int64_t engine_id, int64_t local_index) const {
  if (!exec_) return -1;
  for (size_t i = 0; i < exec_->plans.size(); ++i)
    if (exec_->plans[i].engine_id == engine_id && exec_->plans[i].candidate.local_index == local_index)
      return int64_t(i);
  return -1;
}

Status Graph::get_workspace_size(int64_t& bytes) const {
  bytes = 0;
  if (!exec_ || !exec_->planned) return not_planned();
  if (exec_->selected < 0) return {ErrorCode::INVALID_VALUE, "no plan is selected: call build_plans() first"};
  bytes = entry_workspace(exec_->plans[size_t(exec_->selected)]);
  return {};
}

int64_t Graph::get_workspace_size() const {
  int64_t b = 0;
  return get_workspace_size(b).is_good() ? b : 0;
}

Status Graph::get_workspace_size_plan_at_index(int64_t index, int64_t& bytes) const {
  bytes = 0;
  if (!exec_ || !exec_->planned) return not_planned();
  if (index < 0 || size_t(index) >= exec_->plans.size()) return bad_index(index, exec_->plans.size());
  bytes = entry_workspace(exec_->plans[size_t(index)]);
  return {};
}

Status Graph::select_plan(int64_t index) try {
  ExecState* st = exec_.get();
  if (!st || !st->planned) return not_planned();
  if (index < 0 || size_t(index) >= st->plans.size()) return bad_index(index, st->plans.size());
  OPENDNN_RETURN_IF_ERROR(build_entry(*this, st->target, st->plans[size_t(index)]));
  st->selected = index;
  return {};
} catch (...) {
  return alloc_error(ErrorCode::GRAPH_EXECUTION_PLAN_CREATION_FAILED, "while building the selected plan");
}

int64_t Graph::selected_plan() const { return exec_ ? exec_->selected : -1; }

Status Graph::deselect_engines(const std::vector<std::string>& engine_names) {
  ExecState* st = exec_.get();
  if (!st || !st->planned) return not_planned();
  std::set<std::string> names(engine_names.begin(), engine_names.end());
  for (auto& e : st->plans)
    if (names.count(e.engine_name)) {
      e.deselected = true;
      e.plan.reset();
    }
  fix_selection(*st);
  return {};
}

Status Graph::deselect_workspace_greater_than(int64_t bytes) {
  ExecState* st = exec_.get();
  if (!st || !st->planned) return not_planned();
  for (auto& e : st->plans)
    if (entry_workspace(e) > bytes) {
      e.deselected = true;
      e.plan.reset();
    }
  fix_selection(*st);
  return {};
}

// ---------------------------------------------------------------- variant pack and execution

const std::vector<int64_t>& Graph::variant_uids() const { return exec_ ? exec_->variant_uids : kNoUids; }
int64_t Graph::variant_slot_of(int64_t uid) const { return exec_ ? exec_->slot_of(uid) : -1; }

namespace {

Status no_plan_built() {
  return {ErrorCode::GRAPH_EXECUTION_FAILED,
          "no plan is built: call build() (or create_execution_plans() then build_plans()) before execute()"};
}

// Explains why `uid` has no slot.
Status extra_uid(const Graph& g, int64_t uid) {
  TensorPtr t = g.find_tensor(uid);
  if (!t)
    return {ErrorCode::INVALID_VARIANT_PACK,
            "variant pack: uid " + std::to_string(uid) + " is not a tensor of this graph"};
  std::string why = t->get_is_virtual() ? "is virtual"
                    : t->get_is_pass_by_value() && t->get_value().is_set()
                        ? "is a pass-by-value constant"
                        : "is not used by any node";
  return {ErrorCode::INVALID_VARIANT_PACK, "variant pack: " + label(*t) + " " + why + " and takes no pointer"};
}

// One call's slot array (never shared between calls, so concurrent execute() calls are independent):
// on the stack for up to kInline slots, on the heap beyond.
class CallSlots {
 public:
  explicit CallSlots(size_t n) : n_(n) {
    if (n > kInline) heap_.resize(n);
  }
  void** data() { return n_ > kInline ? heap_.data() : inline_; }
  void** begin() { return data(); }
  void** end() { return data() + n_; }
  size_t size() const { return n_; }
  void*& operator[](size_t k) { return data()[k]; }

 private:
  static constexpr size_t kInline = 64;
  size_t n_;
  void* inline_[kInline] = {};
  std::vector<void*> heap_;
};

// Fills `slots` from (uid, pointer) pairs; on error the slots are left cleared.
template <class It, class UidOf>
Status fill_slots(const Graph& g, const ExecState& st, CallSlots& slots, It begin, It end, UidOf uid_of) {
  std::fill(slots.begin(), slots.end(), nullptr);
  Status bad;
  for (It it = begin; it != end && bad.is_good(); ++it) {
    int64_t uid = 0;
    bad = uid_of(it->first, uid);
    if (bad.is_bad()) break;
    int64_t k = st.slot_of(uid);
    if (k < 0) {
      bad = extra_uid(g, uid);
    } else if (!it->second) {
      bad = {ErrorCode::INVALID_VARIANT_PACK, "variant pack: null pointer for " + st.slot_labels[size_t(k)]};
    } else if (slots[size_t(k)]) {
      bad = {ErrorCode::INVALID_VARIANT_PACK, "variant pack: " + st.slot_labels[size_t(k)] + " is given twice"};
    } else {
      slots[size_t(k)] = it->second;
    }
  }
  if (bad.is_good()) {
    for (size_t k = 0; k < slots.size(); ++k)
      if (!slots[k]) {
        bad = {ErrorCode::INVALID_VARIANT_PACK, "variant pack: no pointer for " + st.slot_labels[k]};
        break;
      }
  }
  if (bad.is_bad()) std::fill(slots.begin(), slots.end(), nullptr);
  return bad;
}

Status fill_slots(const Graph& g, const ExecState& st, CallSlots& slots, const std::unordered_map<int64_t, void*>& pack) {
  return fill_slots(g, st, slots, pack.begin(), pack.end(), [](int64_t uid, int64_t& out) {
    out = uid;
    return Status{};
  });
}

Status fill_slots(const Graph& g, const ExecState& st, CallSlots& slots,
                  const std::unordered_map<TensorPtr, void*>& pack) {
  return fill_slots(g, st, slots, pack.begin(), pack.end(), [](const TensorPtr& t, int64_t& out) -> Status {
    if (!t) return {ErrorCode::INVALID_VARIANT_PACK, "variant pack: a null tensor is given a pointer"};
    if (!t->has_uid())
      return {ErrorCode::INVALID_VARIANT_PACK,
              "variant pack: tensor \"" + t->get_name() + "\" has no uid (is it part of this graph?)"};
    out = t->get_uid();
    return {};
  });
}

Status run_entry(const ExecState& st, size_t index, void* const* slots, void* workspace, void* stream) {
  const PlanEntry& e = st.plans[index];
  if (e.deselected)
    return {ErrorCode::GRAPH_EXECUTION_FAILED, "plan " + std::to_string(index) + " (" + plan_label(e) + ") was deselected"};
  if (!e.plan)
    return {ErrorCode::GRAPH_EXECUTION_FAILED,
            "plan " + std::to_string(index) + " (" + plan_label(e) + ") is not built: call build_plan_at_index(" +
                std::to_string(index) + ") first"};
  const size_t n = st.variant_uids.size();
  if (n > 0 && !slots)
    return {ErrorCode::INVALID_VARIANT_PACK, "variant pack: the slot array is null but the graph has " +
                                                 std::to_string(n) + " variant tensors"};
  for (size_t k = 0; k < n; ++k)
    if (!slots[k]) return {ErrorCode::INVALID_VARIANT_PACK, "variant pack: null pointer for " + st.slot_labels[k]};
  if (!workspace) {
    int64_t need = e.plan->workspace_size();
    if (need > 0)
      return {ErrorCode::INVALID_VALUE,
              "workspace is null but plan " + plan_label(e) + " needs " + std::to_string(need) + " bytes"};
  }
  return e.plan->execute(slots, workspace, stream);
}

// The map overloads of execute(): resolve the pack into this call's own slot array, then run the
// selected plan.
template <class Pack>
Status execute_pack(const Graph& g, const ExecState* st, const Pack& pack, void* workspace, void* stream) try {
  if (!st || st->selected < 0) return no_plan_built();
  OPENDNN_RETURN_IF_ERROR(g.check_unchanged());
  CallSlots slots(st->variant_uids.size());
  OPENDNN_RETURN_IF_ERROR(fill_slots(g, *st, slots, pack));
  return run_entry(*st, size_t(st->selected), slots.data(), workspace, stream);
} catch (...) {
  return alloc_error(ErrorCode::GRAPH_EXECUTION_FAILED, "while executing the graph");
}

}  // namespace

Status Graph::execute(void* const* slot_pointers, void* workspace, void* stream) try {
  const ExecState* st = exec_.get();
  if (!st || st->selected < 0) return no_plan_built();
  OPENDNN_RETURN_IF_ERROR(check_unchanged());
  return run_entry(*st, size_t(st->selected), slot_pointers, workspace, stream);
} catch (...) {
  return alloc_error(ErrorCode::GRAPH_EXECUTION_FAILED, "while executing the graph");
}

Status Graph::execute(const std::unordered_map<int64_t, void*>& pack, void* workspace, void* stream) {
  return execute_pack(*this, exec_.get(), pack, workspace, stream);
}

Status Graph::execute(const std::unordered_map<TensorPtr, void*>& pack, void* workspace, void* stream) {
  return execute_pack(*this, exec_.get(), pack, workspace, stream);
}

Status Graph::execute_plan_at_index(const std::unordered_map<int64_t, void*>& pack, void* workspace, int64_t index,
                                    void* stream) try {
  ExecState* st = exec_.get();
  if (!st || !st->planned) return not_planned();
  if (index < 0 || size_t(index) >= st->plans.size()) return bad_index(index, st->plans.size());
  OPENDNN_RETURN_IF_ERROR(check_unchanged());
  CallSlots slots(st->variant_uids.size());
  OPENDNN_RETURN_IF_ERROR(fill_slots(*this, *st, slots, pack));
  return run_entry(*st, size_t(index), slots.data(), workspace, stream);
} catch (...) {
  return alloc_error(ErrorCode::GRAPH_EXECUTION_FAILED, "while executing the graph");
}

Status Graph::populate_cuda_graph(const std::unordered_map<int64_t, void*>& pack, void* workspace, void* cuda_graph,
                                  bool update) {
  ExecState* st = exec_.get();
  if (!st || st->selected < 0) return no_plan_built();
  OPENDNN_RETURN_IF_ERROR(check_unchanged());
  if (!cuda_graph) return {ErrorCode::INVALID_VALUE, "populate_cuda_graph: the CUDA graph is null"};
  CallSlots slots(st->variant_uids.size());
  OPENDNN_RETURN_IF_ERROR(fill_slots(*this, *st, slots, pack));
  PlanEntry& e = st->plans[size_t(st->selected)];
  if (!e.plan) return no_plan_built();
  if (!workspace && e.plan->workspace_size() > 0)
    return {ErrorCode::INVALID_VALUE, "workspace is null but plan " + plan_label(e) + " needs " +
                                          std::to_string(e.plan->workspace_size()) + " bytes"};
  Status s = e.plan->populate_cuda_graph(slots.data(), workspace, cuda_graph, update);
  if (s.is_bad()) return {s.code(), plan_label(e) + ": " + s.message()};
  return {};
}

Status Graph::autotune(const std::unordered_map<int64_t, void*>& pack, void* workspace, void* stream) try {
  ExecState* st = exec_.get();
  if (!st || !st->planned) return not_planned();
  OPENDNN_RETURN_IF_ERROR(check_unchanged());
  CallSlots slots(st->variant_uids.size());
  OPENDNN_RETURN_IF_ERROR(fill_slots(*this, *st, slots, pack));

  std::vector<size_t> timed;
  std::string failures;
  for (size_t i = 0; i < st->plans.size(); ++i) {
    PlanEntry& e = st->plans[i];
    if (e.deselected || !e.plan) continue;
    std::unique_ptr<Timer> timer = e.engine->make_timer(st->target);
    if (!timer) timer = std::make_unique<HostTimer>();
    // One warm-up run, then the median of up to 5 runs (one when a run takes over 50 ms).
    timer->start(stream);
    Status s = run_entry(*st, i, slots.data(), workspace, stream);
    double first = timer->stop_us(stream);
    if (s.is_bad()) {
      failures += "\n  " + plan_label(e) + ": " + s.message();
      e.measured_us = -1.0;
      continue;
    }
    const int reps = first > 50000.0 ? 1 : 5;
    std::vector<double> times;
    for (int r = 0; r < reps && s.is_good(); ++r) {
      timer->start(stream);
      s = run_entry(*st, i, slots.data(), workspace, stream);
      times.push_back(timer->stop_us(stream));
    }
    if (s.is_bad()) {
      failures += "\n  " + plan_label(e) + ": " + s.message();
      e.measured_us = -1.0;
      continue;
    }
    std::sort(times.begin(), times.end());
    e.measured_us = times[times.size() / 2];
    timed.push_back(i);
  }
  if (timed.empty())
    return {ErrorCode::GRAPH_EXECUTION_FAILED,
            "autotune: no built plan ran (build plans first, e.g. build_plans(BuildPlanPolicy::ALL))" + failures};

  // Timed plans first, fastest first; the rest keep their order after them.
  std::stable_sort(timed.begin(), timed.end(),
                   [&](size_t a, size_t b) { return st->plans[a].measured_us < st->plans[b].measured_us; });
  std::vector<bool> moved(st->plans.size(), false);
  std::vector<PlanEntry> order;
  for (size_t i : timed) {
    order.push_back(std::move(st->plans[i]));
    moved[i] = true;
  }
  for (size_t i = 0; i < st->plans.size(); ++i)
    if (!moved[i]) order.push_back(std::move(st->plans[i]));
  st->plans = std::move(order);
  st->selected = 0;

  std::vector<plan_cache::Entry> entries;
  for (size_t k = 0; k < timed.size(); ++k)
    entries.push_back({st->plans[k].engine_id, st->plans[k].candidate.local_index, st->plans[k].measured_us});
  Status w = plan_cache::write(st->cache_path, plan_cache::graph_fingerprint(*this),
                               plan_cache::device_string(st->target), entries);
  if (w.is_bad()) std::fprintf(stderr, "opendnn: warning: plan cache not written: %s\n", w.message().c_str());
  return {};
} catch (...) {
  return alloc_error(ErrorCode::GRAPH_EXECUTION_FAILED, "while autotuning");
}

}  // namespace opendnn
