// SPDX-License-Identifier: Apache-2.0
// Plans that travel: serialize_plan / deserialize_plan, plan records and the kernel cache.
//
// A serialized plan is JSON text:
//   {"opendnn_serialized_plan": 1, "graph": <Graph JSON v2>, "plan": <plan record>}
// and a plan record (also what a kernel cache holds per graph):
//   {"opendnn_plan": 1, "library": "opendnn 0.1.0", "graph_key": "<Graph::key() in hex>",
//    "target": {"kind": "cuda", "sm_version": 90, "sm_count": 132},
//    "engine": {"id": 10100, "name": "cuda", "build": "<Engine::build_id()>"},
//    "candidate": {"name", "local_index", "knobs": [[name, value], ...], "deterministic",
//                  "numerical_notes": [...], "behavior_notes": [...]},
//    "workspace_size": 4096, "variant_uids": [1, 2, 3], "pass_by_values": [[uid, value], ...],
//    "payload": "<Plan::serialize_payload(): the cudnn engine's execution-plan JSON, else empty>"}
// Restoring checks, before any kernel is chosen, that the record was written by this library for this
// graph, that the engine is registered with the same build, that the target is the same kind of device
// with the same SM version, and that the variant-pack uids and pass-by-value values are the same; then
// the engine rebuilds the plan from its identity, knobs and payload (Engine::restore_plan), without
// proposing plans again. Any mismatch is an error naming both sides.
#include <cinttypes>
#include <cstdio>

#include "opendnn/engine.h"
#include "opendnn/opendnn.h"
#include "plan/exec_state.h"
#include "plan/plan_io.h"
#include "serialize/json_detail.h"

namespace opendnn {

namespace {

using serialize::Json;
using serialize::OJson;

std::string hex64(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016" PRIx64, v);
  return buf;
}

std::string library_id() { return std::string("opendnn ") + kVersion; }

Status bad(const std::string& m) { return {ErrorCode::INVALID_VALUE, "deserialize: " + m}; }

OJson target_json(const Target& t) {
  OJson j;
  j["kind"] = t.kind == DeviceKind::CUDA ? "cuda" : "cpu";
  j["sm_version"] = t.sm_version;
  j["sm_count"] = t.sm_count;
  return j;
}

std::vector<std::pair<int64_t, double>> pass_by_values(const Graph& g) {
  std::vector<std::pair<int64_t, double>> out;
  for (const auto& t : g.tensors())
    if (t->get_is_pass_by_value() && t->get_value().is_set() && t->has_uid())
      out.emplace_back(t->get_uid(), t->get_value().as_double());
  std::sort(out.begin(), out.end());
  return out;
}

// Field access that names what is missing or mistyped.
template <class T>
Status field(const Json& j, const char* key, T& out) {
  auto it = j.find(key);
  if (it == j.end()) return bad(std::string("the plan record has no \"") + key + "\"");
  try {
    out = it->template get<T>();
  } catch (const std::exception&) {
    return bad(std::string("the plan record's \"") + key + "\" has the wrong type");
  }
  return {};
}

Status check_target(const Json& jt, const Target& now) {
  std::string kind;
  int sm = 0;
  OPENDNN_RETURN_IF_ERROR(field(jt, "kind", kind));
  OPENDNN_RETURN_IF_ERROR(field(jt, "sm_version", sm));
  const std::string here = now.kind == DeviceKind::CUDA ? "cuda" : "cpu";
  if (kind != here)
    return bad("the plan was built for a " + kind + " target but this graph plans for " + target_label(now) +
               (kind == "cuda" ? " (no CUDA device is seen, or the graph's device properties say otherwise)" : ""));
  if (kind == "cuda" && sm != now.sm_version)
    return bad("the plan was built for sm_" + std::to_string(sm) + " but this device is sm_" +
               std::to_string(now.sm_version));
  return {};
}

Status parse_candidate(const Json& jc, PlanCandidate& c) {
  OPENDNN_RETURN_IF_ERROR(field(jc, "name", c.name));
  OPENDNN_RETURN_IF_ERROR(field(jc, "local_index", c.local_index));
  OPENDNN_RETURN_IF_ERROR(field(jc, "knobs", c.knobs));
  OPENDNN_RETURN_IF_ERROR(field(jc, "deterministic", c.deterministic));
  std::vector<int> nn, bn;
  OPENDNN_RETURN_IF_ERROR(field(jc, "numerical_notes", nn));
  OPENDNN_RETURN_IF_ERROR(field(jc, "behavior_notes", bn));
  for (int n : nn) {
    if (to_string(NumericalNote(n)).empty()) return bad("the plan record has an unknown numerical note " + std::to_string(n));
    c.numerical_notes.push_back(NumericalNote(n));
  }
  for (int n : bn) {
    if (to_string(BehaviorNote(n)).empty()) return bad("the plan record has an unknown behaviour note " + std::to_string(n));
    c.behavior_notes.push_back(BehaviorNote(n));
  }
  return {};
}

}  // namespace

std::string target_label(const Target& t) {
  if (t.kind == DeviceKind::CPU) return "cpu";
  return "cuda:sm" + std::to_string(t.sm_version) + ":" + std::to_string(t.sm_count) + "sm";
}

std::string kernel_cache_key(const Graph& g, const Target& target, const std::vector<HeurMode>& modes) {
  std::string k = hex64(g.key()) + "|" + target_label(target) + "|";
  for (HeurMode m : modes) k += std::string(to_string(m)) + ",";
  return k;
}

Status plan_record(const Graph& g, std::string& out) {
  const ExecState* st = g.exec_state();
  if (!st || st->selected < 0 || !st->plans[size_t(st->selected)].plan)
    return {ErrorCode::INVALID_VALUE, "serialize: no plan is built: build() the graph before serializing its plan"};
  const PlanEntry& e = st->plans[size_t(st->selected)];
  std::string payload;
  OPENDNN_RETURN_IF_ERROR(e.plan->serialize_payload(payload));
  OJson j;
  j["opendnn_plan"] = 1;
  j["library"] = library_id();
  j["graph_key"] = hex64(g.key());
  j["target"] = target_json(st->target);
  j["engine"] = {{"id", e.engine_id}, {"name", e.engine_name}, {"build", e.engine->build_id()}};
  OJson c;
  c["name"] = e.candidate.name;
  c["local_index"] = e.candidate.local_index;
  c["knobs"] = e.candidate.knobs;
  c["deterministic"] = e.candidate.deterministic;
  std::vector<int> nn, bn;
  for (auto n : e.candidate.numerical_notes) nn.push_back(int(n));
  for (auto n : e.candidate.behavior_notes) bn.push_back(int(n));
  c["numerical_notes"] = nn;
  c["behavior_notes"] = bn;
  j["candidate"] = c;
  j["workspace_size"] = e.plan->workspace_size();
  j["variant_uids"] = st->variant_uids;
  j["pass_by_values"] = pass_by_values(g);
  j["payload"] = payload;
  out = j.dump();
  return {};
}

Status Graph::restore_plan_record(std::string_view text) {
  try {
    Json j;
    OPENDNN_RETURN_IF_ERROR(serialize::parse_document(text, j));
    if (!j.is_object() || j.value("opendnn_plan", 0) != 1) return bad("not an opendnn plan record");
    std::string lib, key, payload;
    OPENDNN_RETURN_IF_ERROR(field(j, "library", lib));
    if (lib != library_id()) return bad("the plan was serialized by " + lib + "; this is " + library_id());
    OPENDNN_RETURN_IF_ERROR(build_operation_graph());
    OPENDNN_RETURN_IF_ERROR(field(j, "graph_key", key));
    if (key != hex64(this->key()))
      return bad("the plan was built for another graph (key " + key + "; this graph's key is " + hex64(this->key()) + ")");
    const Target target = planning_target();
    if (!j.contains("target") || !j["target"].is_object()) return bad("the plan record has no \"target\"");
    OPENDNN_RETURN_IF_ERROR(check_target(j["target"], target));
    const Json& je = j.contains("engine") ? j["engine"] : Json::object();
    int64_t id = -1;
    std::string name, build;
    OPENDNN_RETURN_IF_ERROR(field(je, "id", id));
    OPENDNN_RETURN_IF_ERROR(field(je, "name", name));
    OPENDNN_RETURN_IF_ERROR(field(je, "build", build));
    std::shared_ptr<Engine> engine;
    for (auto& e : registered_engines())
      if (e->engine_id() == id) engine = e;
    if (!engine) return bad("the plan's engine " + name + " (id " + std::to_string(id) + ") is not registered here");
    if (engine->name() != name)
      return bad("engine id " + std::to_string(id) + " is " + std::string(engine->name()) + " here, not " + name);
    if (engine->build_id() != build)
      return bad("the plan was built by " + name + " build \"" + build + "\"; this process has \"" +
                 engine->build_id() + "\"");
    if (!engine->serves(target)) return bad(name + " does not run on " + target_label(target) + " here");
    PlanCandidate c;
    OPENDNN_RETURN_IF_ERROR(parse_candidate(j.contains("candidate") ? j["candidate"] : Json::object(), c));
    std::vector<int64_t> uids;
    std::vector<std::pair<int64_t, double>> pbv;
    int64_t ws = 0;
    OPENDNN_RETURN_IF_ERROR(field(j, "variant_uids", uids));
    OPENDNN_RETURN_IF_ERROR(field(j, "pass_by_values", pbv));
    OPENDNN_RETURN_IF_ERROR(field(j, "workspace_size", ws));
    OPENDNN_RETURN_IF_ERROR(field(j, "payload", payload));
    if (pbv != pass_by_values(*this)) return bad("the graph's pass-by-value values differ from the plan's");
    OPENDNN_RETURN_IF_ERROR(init_plan_state());
    ExecState* st = exec_.get();
    if (uids != st->variant_uids) return bad("the graph's variant-pack uids differ from the plan's");
    std::unique_ptr<Plan> plan;
    Status s = engine->restore_plan(*this, target, c, payload, plan);
    if (s.is_good() && !plan) s = {ErrorCode::GRAPH_EXECUTION_PLAN_CREATION_FAILED, "the engine returned no plan"};
    if (s.is_good() && plan->workspace_size() != ws)
      s = bad("the restored plan " + c.name + " needs " + std::to_string(plan->workspace_size()) +
              " bytes of workspace, the serialized one " + std::to_string(ws));
    if (s.is_bad()) {
      exec_.reset();
      return {s.code(), "deserialize: " + name + ":" + c.name + ": " + s.message()};
    }
    c.workspace_bytes = ws;
    PlanEntry e;
    e.engine = engine;
    e.engine_name = name;
    e.engine_id = id;
    e.candidate = std::move(c);
    e.plan = std::move(plan);
    st->plans.push_back(std::move(e));
    st->selected = 0;
    st->restored = true;
    return {};
  } catch (const std::exception& e) {
    return bad(e.what());
  }
}

Status Graph::serialize_plan(std::string& out) const {
  try {
    std::string record;
    OPENDNN_RETURN_IF_ERROR(plan_record(*this, record));
    OJson graph;
    OPENDNN_RETURN_IF_ERROR(serialize::write_graph(*this, /*structure=*/false, graph));
    OJson doc;
    doc["opendnn_serialized_plan"] = 1;
    doc["graph"] = std::move(graph);
    doc["plan"] = OJson::parse(record);
    out = doc.dump();
    return {};
  } catch (const std::exception& e) {
    return {ErrorCode::INVALID_VALUE, std::string("serialize: ") + e.what()};
  }
}

Status Graph::deserialize_plan(std::string_view text) {
  try {
    Json doc;
    OPENDNN_RETURN_IF_ERROR(serialize::parse_document(text, doc));
    if (!doc.is_object() || !doc.contains("opendnn_serialized_plan")) return deserialize(text);  // a graph only
    if (doc["opendnn_serialized_plan"] != 1 || !doc.contains("graph") || !doc.contains("plan"))
      return bad("not an opendnn serialized plan");
    Graph fresh;
    fresh.settings_ = settings_;
    OPENDNN_RETURN_IF_ERROR(fresh.deserialize(doc["graph"].dump()));
    OPENDNN_RETURN_IF_ERROR(fresh.restore_plan_record(doc["plan"].dump()));
    *this = std::move(fresh);
    return {};
  } catch (const std::exception& e) {
    return bad(e.what());
  }
}

// ---------------------------------------------------------------- kernel cache

Status KernelCache::serialize(std::string& out) const {
  std::lock_guard<std::mutex> lock(mu_);
  OJson j;
  j["opendnn_kernel_cache"] = 1;
  j["library"] = library_id();
  OJson entries = OJson::object();
  for (const auto& [k, v] : entries_) entries[k] = v;
  j["entries"] = std::move(entries);
  out = j.dump();
  return {};
}

Status KernelCache::deserialize(std::string_view text) {
  Json j;
  OPENDNN_RETURN_IF_ERROR(serialize::parse_document(text, j));
  if (!j.is_object() || j.value("opendnn_kernel_cache", 0) != 1 || !j.contains("entries") || !j["entries"].is_object())
    return {ErrorCode::INVALID_VALUE, "kernel cache: not an opendnn kernel cache"};
  if (j.value("library", std::string()) != library_id())
    return {ErrorCode::INVALID_VALUE, "kernel cache: written by " + j.value("library", std::string("?")) +
                                          "; this is " + library_id()};
  std::map<std::string, std::string> loaded;
  for (const auto& [k, v] : j["entries"].items()) {
    if (!v.is_string()) return {ErrorCode::INVALID_VALUE, "kernel cache: entry " + k + " is not a plan record"};
    loaded[k] = v.get<std::string>();
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (!entries_.empty())
    return {ErrorCode::INVALID_VALUE, "kernel cache: deserialize onto a cache that already holds " +
                                          std::to_string(entries_.size()) + " plans (use a new cache)"};
  entries_ = std::move(loaded);
  return {};
}

size_t KernelCache::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return entries_.size();
}

bool KernelCache::find(const std::string& key, std::string& record) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = entries_.find(key);
  if (it == entries_.end()) return false;
  record = it->second;
  return true;
}

void KernelCache::put(const std::string& key, std::string record) {
  std::lock_guard<std::mutex> lock(mu_);
  entries_[key] = std::move(record);
}

}  // namespace opendnn
