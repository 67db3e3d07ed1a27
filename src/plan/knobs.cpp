// SPDX-License-Identifier: Apache-2.0
// cuDNN Frontend's engine/knob API and plan notes over the router (docs/engines_and_knobs.md).
//
// Engine ids number the knob engines of every engine that serves the graph's target, in engine-id order.
// An engine lists its knob engines with Engine::list_knob_engines; the default lists one per proposed
// plan (the plan's kernel), whose knobs are the plan's knobs that name a knob type, each with the range
// the plan declares (PlanCandidate::knob_ranges) or, without one, its one value. An engine that declines
// the graph lists one knob engine that says why. Engine::make_candidate turns a knob engine and knob
// values into a plan candidate; create_execution_plan appends it to the plan list.
#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <set>

#include "opendnn/engine.h"
#include "opendnn/opendnn.h"
#include "plan/exec_state.h"
#include "plan/plan_io.h"

namespace opendnn {

std::string_view to_string(KnobType t) {
  switch (t) {
    case KnobType::NOT_SET: return "NOT_SET";
#define OPENDNN_KNOB_NAME(n, v) \
  case KnobType::n: return #n;
    OPENDNN_KNOB_TYPES(OPENDNN_KNOB_NAME)
#undef OPENDNN_KNOB_NAME
  }
  return "";
}

KnobType knob_type_from_name(std::string_view name) {
  std::string up;
  for (char c : name) up += char(std::toupper(static_cast<unsigned char>(c)));
  if (up.rfind("KNOB", 0) == 0 && up.size() > 4 &&
      std::all_of(up.begin() + 4, up.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)); })) {
    const int v = std::atoi(up.c_str() + 4);
    return to_string(KnobType(v)).empty() ? KnobType::NOT_SET : KnobType(v);
  }
#define OPENDNN_KNOB_MATCH(n, v) \
  if (up == #n) return KnobType::n;
  OPENDNN_KNOB_TYPES(OPENDNN_KNOB_MATCH)
#undef OPENDNN_KNOB_MATCH
  return KnobType::NOT_SET;
}

std::string_view to_string(NumericalNote n) {
  static constexpr const char* kNames[] = {"TENSOR_CORE", "DOWN_CONVERT_INPUTS", "REDUCED_PRECISION_REDUCTION", "FFT",
                                           "NONDETERMINISTIC", "WINOGRAD", "WINOGRAD_TILE_4x4", "WINOGRAD_TILE_6x6",
                                           "WINOGRAD_TILE_13x13", "STRICT_NAN_PROP"};
  const int i = int(n);
  return i >= 0 && i < int(std::size(kNames)) ? kNames[i] : "";
}

std::string_view to_string(BehaviorNote n) {
  static constexpr const char* kNames[] = {"RUNTIME_COMPILATION", "REQUIRES_FILTER_INT8x32_REORDER",
                                           "REQUIRES_BIAS_INT8x32_REORDER", "SUPPORTS_CUDA_GRAPH_NATIVE_API",
                                           "CUBLASLT_DEPENDENCY"};
  const int i = int(n);
  return i >= 0 && i < int(std::size(kNames)) ? kNames[i] : "";
}

bool KnobRange::takes(int64_t v) const {
  if (!values.empty()) return std::find(values.begin(), values.end(), v) != values.end();
  if (v < min_value || v > max_value) return false;
  return stride <= 0 || (v - min_value) % stride == 0;
}

namespace {

std::string describe(const KnobRange& r) {
  if (!r.values.empty()) {
    std::string s = "one of {";
    for (size_t i = 0; i < r.values.size(); ++i) s += (i ? ", " : "") + std::to_string(r.values[i]);
    return s + "}";
  }
  if (r.min_value == r.max_value) return "only " + std::to_string(r.min_value);
  return std::to_string(r.min_value) + ".." + std::to_string(r.max_value) + " by " + std::to_string(r.stride);
}

// The range of a candidate's knob: its declared one, else its one value.
KnobRange range_of(const PlanCandidate& c, const std::string& name, int64_t value) {
  for (const auto& r : c.knob_ranges)
    if (r.name == name) return r;
  return KnobRange{name, value, value, 1, {}};
}

// FE reports min/max/stride only: a value list becomes its span and the gcd of its steps.
KnobRange as_reported(KnobRange r, KnobType t) {
  r.name = std::string(to_string(t));
  if (!r.values.empty()) {
    std::vector<int64_t> v = r.values;
    std::sort(v.begin(), v.end());
    r.min_value = v.front();
    r.max_value = v.back();
    int64_t g = 0;
    for (size_t i = 1; i < v.size(); ++i) {
      int64_t d = v[i] - v[i - 1], a = g;
      while (d) {
        int64_t t2 = a % d;
        a = d;
        d = t2;
      }
      g = a;
    }
    r.stride = g > 0 ? g : 1;
  }
  return r;
}

std::string joined(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : "; ") + x;
  return s;
}

}  // namespace

// ---------------------------------------------------------------- Engine defaults

Status Engine::list_knob_engines(const Graph& graph, const Target& target, std::vector<KnobEngine>& out) {
  out.clear();
  Proposal p = propose_plans(graph, target);
  if (p.plans.empty()) {
    KnobEngine e;
    e.name = std::string(name());
    e.unsupported = std::string(name()) + " cannot run this graph: " +
                    (p.declines.empty() ? std::string("it proposed no plan") : joined(p.declines));
    out.push_back(std::move(e));
    return {};
  }
  for (const auto& c : p.plans) {
    KnobEngine e;
    e.name = std::string(name()) + ":" + c.name;
    for (const auto& [k, v] : c.knobs) {
      KnobType t = knob_type_from_name(k);
      if (t != KnobType::NOT_SET) e.knobs.push_back(as_reported(range_of(c, k, v), t));
    }
    out.push_back(std::move(e));
  }
  return {};
}

Status Engine::make_candidate(const Graph& graph, const Target& target, int64_t index,
                              const std::vector<std::pair<KnobType, int64_t>>& knobs, PlanCandidate& out) {
  Proposal p = propose_plans(graph, target);
  if (index < 0 || size_t(index) >= p.plans.size())
    return {ErrorCode::GRAPH_NOT_SUPPORTED, std::string(name()) + " has no plan " + std::to_string(index) +
                                                " for this graph" +
                                                (p.declines.empty() ? "" : ": " + joined(p.declines))};
  PlanCandidate c = p.plans[size_t(index)];
  for (const auto& [type, value] : knobs) {
    const KnobType wanted = type;  // a structured binding is not captured by clang 14's lambdas
    auto it = std::find_if(c.knobs.begin(), c.knobs.end(),
                           [&](const auto& kv) { return knob_type_from_name(kv.first) == wanted; });
    if (it == c.knobs.end()) {
      std::string have;
      for (const auto& [k, v] : c.knobs)
        if (knob_type_from_name(k) != KnobType::NOT_SET)
          have += (have.empty() ? "" : ", ") + std::string(to_string(knob_type_from_name(k)));
      return {ErrorCode::INVALID_VALUE, std::string(name()) + " plan " + c.name + " has no knob " +
                                            std::string(to_string(type)) +
                                            " (its knobs: " + (have.empty() ? "none" : have) + ")"};
    }
    KnobRange r = range_of(c, it->first, it->second);
    if (!r.takes(value))
      return {ErrorCode::INVALID_VALUE, "knob " + std::string(to_string(type)) + " of " + std::string(name()) +
                                            " plan " + c.name + " takes " + describe(r) + ", not " +
                                            std::to_string(value)};
    if (it->second != value) {
      it->second = value;
      c.name += "_" + std::string(to_string(type)) + "=" + std::to_string(value);
    }
  }
  out = std::move(c);
  return {};
}

std::string Engine::build_id() const { return std::string("opendnn ") + kVersion; }

Status Engine::restore_plan(const Graph& graph, const Target& target, const PlanCandidate& candidate,
                            std::string_view payload, std::unique_ptr<Plan>& out) {
  if (!payload.empty())
    return {ErrorCode::INVALID_VALUE, std::string(name()) + ": the serialized plan carries state this engine does not read"};
  return build_plan(graph, target, candidate, out);
}

Status probe_device_properties(int device, Target& out) {
  if (device < 0) return {ErrorCode::INVALID_VALUE, "device properties: device id " + std::to_string(device) + " is negative"};
  for (const auto& e : registered_engines())
    if (e->probe_device_ordinal(device, out)) return {};
  return {ErrorCode::INVALID_VALUE, "device properties: no engine sees CUDA device " + std::to_string(device) +
                                        " (no GPU, or the cuda/cudnn engines are not in this build); describe the "
                                        "device with its JSON instead"};
}

// ---------------------------------------------------------------- the graph's knob API

namespace {

Status list_engines(Graph& g, ExecState& st) {
  if (st.knob_engines_listed) return {};
  st.knob_engines.clear();
  for (auto& e : registered_engines()) {
    if (!e->serves(st.target)) continue;
    std::vector<KnobEngine> list;
    Status s = e->list_knob_engines(g, st.target, list);
    if (s.is_bad()) {
      KnobEngine k;
      k.name = std::string(e->name());
      k.unsupported = s.message();
      list = {k};
    }
    for (size_t i = 0; i < list.size(); ++i) st.knob_engines.push_back({e, int64_t(i), std::move(list[i])});
  }
  st.knob_engines_listed = true;
  return {};
}

Status knob_engine(Graph& g, ExecState*& st, int64_t engine, const KnobEngineRef*& out) {
  OPENDNN_RETURN_IF_ERROR(list_engines(g, *st));
  if (engine < 0 || size_t(engine) >= st->knob_engines.size())
    return {ErrorCode::INVALID_VALUE, "engine " + std::to_string(engine) + " is out of range (the graph has " +
                                          std::to_string(st->knob_engines.size()) + " engines)"};
  out = &st->knob_engines[size_t(engine)];
  if (!out->info.unsupported.empty())
    return {ErrorCode::GRAPH_NOT_SUPPORTED, "engine " + std::to_string(engine) + " (" + out->info.name +
                                                "): " + out->info.unsupported};
  return {};
}

}  // namespace

Status Graph::get_engine_count(int64_t& count) {
  count = 0;
  if (!exec_) OPENDNN_RETURN_IF_ERROR(init_plan_state());
  OPENDNN_RETURN_IF_ERROR(list_engines(*this, *exec_));
  count = int64_t(exec_->knob_engines.size());
  return {};
}

Status Graph::get_knobs_for_engine(int64_t engine, std::vector<KnobRange>& out) {
  out.clear();
  if (!exec_) OPENDNN_RETURN_IF_ERROR(init_plan_state());
  ExecState* st = exec_.get();
  const KnobEngineRef* ref = nullptr;
  OPENDNN_RETURN_IF_ERROR(knob_engine(*this, st, engine, ref));
  out = ref->info.knobs;
  return {};
}

Status Graph::create_execution_plan(int64_t engine, const std::vector<std::pair<KnobType, int64_t>>& knobs) {
  if (!exec_) OPENDNN_RETURN_IF_ERROR(init_plan_state());
  ExecState* st = exec_.get();
  const KnobEngineRef* ref = nullptr;
  OPENDNN_RETURN_IF_ERROR(knob_engine(*this, st, engine, ref));
  std::set<KnobType> seen;
  for (const auto& [t, v] : knobs)
    if (!seen.insert(t).second)
      return {ErrorCode::INVALID_VALUE, "knob " + std::string(to_string(t)) + " is given twice"};
  PlanCandidate c;
  OPENDNN_RETURN_IF_ERROR(ref->engine->make_candidate(*this, st->target, ref->index, knobs, c));
  add_implied_notes(c);
  for (const auto& e : st->plans)
    if (e.engine_id == ref->engine->engine_id() && e.candidate.local_index == c.local_index &&
        e.candidate.knobs == c.knobs)
      return {};  // already listed
  PlanEntry e;
  e.engine = ref->engine;
  e.engine_name = std::string(ref->engine->name());
  e.engine_id = ref->engine->engine_id();
  e.candidate = std::move(c);
  st->plans.push_back(std::move(e));
  apply_note_filters();
  return {};
}

// ---------------------------------------------------------------- notes

namespace {

template <class T>
bool has(const std::vector<T>& v, T x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

Status entry_at(const ExecState* st, int64_t index, const PlanEntry*& out) {
  if (!st || !st->planned)
    return {ErrorCode::INVALID_VALUE, "no execution plans: call create_execution_plans() (or build()) first"};
  if (index < 0 || size_t(index) >= st->plans.size())
    return {ErrorCode::INVALID_VALUE, "plan index " + std::to_string(index) + " is out of range (the graph has " +
                                          std::to_string(st->plans.size()) + " plans)"};
  out = &st->plans[size_t(index)];
  return {};
}

}  // namespace

Status Graph::get_behavior_notes_for_plan_at_index(int64_t index, std::vector<BehaviorNote>& out) const {
  const PlanEntry* e = nullptr;
  OPENDNN_RETURN_IF_ERROR(entry_at(exec_.get(), index, e));
  out = e->candidate.behavior_notes;
  return {};
}

Status Graph::get_numerical_notes_for_plan_at_index(int64_t index, std::vector<NumericalNote>& out) const {
  const PlanEntry* e = nullptr;
  OPENDNN_RETURN_IF_ERROR(entry_at(exec_.get(), index, e));
  out = e->candidate.numerical_notes;
  return {};
}

Status Graph::get_behavior_notes(std::vector<BehaviorNote>& out) const {
  out.clear();
  const ExecState* st = exec_.get();
  if (st && st->selected >= 0) return get_behavior_notes_for_plan_at_index(st->selected, out);
  if (st)
    for (size_t i = 0; i < st->plans.size(); ++i)
      if (!st->plans[i].deselected) return get_behavior_notes_for_plan_at_index(int64_t(i), out);
  return {ErrorCode::INVALID_VALUE, "no execution plans: call create_execution_plans() (or build()) first"};
}

void Graph::apply_note_filters() {
  ExecState* st = exec_.get();
  if (!st || !settings_) return;
  const PlanSettings& f = *settings_;
  for (auto& e : st->plans) {
    const auto& nn = e.candidate.numerical_notes;
    const auto& bn = e.candidate.behavior_notes;
    bool keep = std::all_of(f.numeric_select.begin(), f.numeric_select.end(), [&](auto n) { return has(nn, n); }) &&
                std::none_of(f.numeric_deselect.begin(), f.numeric_deselect.end(), [&](auto n) { return has(nn, n); }) &&
                std::all_of(f.behavior_select.begin(), f.behavior_select.end(), [&](auto n) { return has(bn, n); }) &&
                std::none_of(f.behavior_deselect.begin(), f.behavior_deselect.end(), [&](auto n) { return has(bn, n); });
    if (!keep) {
      e.deselected = true;
      e.plan.reset();
    }
  }
  if (st->selected >= 0 && st->plans[size_t(st->selected)].deselected) {
    st->selected = -1;
    for (size_t i = 0; i < st->plans.size(); ++i)
      if (!st->plans[i].deselected && st->plans[i].plan) {
        st->selected = int64_t(i);
        break;
      }
  }
}

Status Graph::select_numeric_notes(const std::vector<NumericalNote>& notes) {
  auto& v = settings().numeric_select;
  v.insert(v.end(), notes.begin(), notes.end());
  apply_note_filters();
  return {};
}
Status Graph::deselect_numeric_notes(const std::vector<NumericalNote>& notes) {
  auto& v = settings().numeric_deselect;
  v.insert(v.end(), notes.begin(), notes.end());
  apply_note_filters();
  return {};
}
Status Graph::select_behavior_notes(const std::vector<BehaviorNote>& notes) {
  auto& v = settings().behavior_select;
  v.insert(v.end(), notes.begin(), notes.end());
  apply_note_filters();
  return {};
}
Status Graph::deselect_behavior_notes(const std::vector<BehaviorNote>& notes) {
  auto& v = settings().behavior_deselect;
  v.insert(v.end(), notes.begin(), notes.end());
  apply_note_filters();
  return {};
}

}  // namespace opendnn
