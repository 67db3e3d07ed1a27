// SPDX-License-Identifier: Apache-2.0
// The graph: tensors and nodes, validation, serialization, and the plan lifecycle.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <type_traits>
#include <unordered_map>
#include <vector>

#include "opendnn/node.h"
#include "opendnn/status.h"
#include "opendnn/tensor.h"
#include "opendnn/types.h"

namespace opendnn {

struct GraphContext {
  std::string name;
  DataType io_data_type = DataType::NOT_SET;
  DataType intermediate_data_type = DataType::NOT_SET;
  DataType compute_data_type = DataType::NOT_SET;
  int64_t sm_count = -1;
  int64_t sm_version = -1;
  bool operator==(const GraphContext&) const = default;
};

template <int N>
using BuilderOutput = std::conditional_t<N == 1, TensorPtr, std::array<TensorPtr, N>>;

class ExecState;     // plans and router state (src/plan)
struct PlanSettings;  // per-graph target, kernel cache and note filters (src/plan)
struct Target;        // engine.h
struct KnobRange;     // engine.h
enum class KnobType : int32_t;
enum class NumericalNote : int32_t;
enum class BehaviorNote : int32_t;

// Built plans by graph (cuDNN Frontend's kernel cache): a graph built with a cache reuses the plan
// built for the same graph structure, target and heuristic modes, without planning again. Shared by
// the graphs given it; thread-safe.
class KernelCache {
 public:
  // JSON text: {"opendnn_kernel_cache": 1, "entries": {key: plan record}}.
  Status serialize(std::string& out) const;
  // Loads entries serialized by serialize(); only onto an empty cache.
  Status deserialize(std::string_view text);
  size_t size() const;
  bool find(const std::string& key, std::string& record) const;
  void put(const std::string& key, std::string record);

 private:
  mutable std::mutex mu_;
  std::map<std::string, std::string> entries_;
};

// One entry of the ranked plan list (Graph::get_plan_info_at_index).
struct PlanInfo {
  int64_t engine_id = -1;
  int64_t local_index = -1;  // the plan's stable index within its engine
  std::string engine;        // engine name
  std::string plan;          // plan name within the engine
  double estimated_us = 0.0;
  double measured_us = -1.0;  // autotune's measurement, -1 if not timed
  int64_t workspace_bytes = 0;
  bool built = false;
  bool deselected = false;
  std::string build_error;  // why building failed, if it was tried and failed
};

class Graph {
 public:
  Graph();
  ~Graph();
  Graph(Graph&&) noexcept;
  Graph& operator=(Graph&&) noexcept;
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;

  // ---- context
  Graph& set_name(std::string n) { ctx_.name = std::move(n); return *this; }
  Graph& set_io_data_type(DataType t) { ctx_.io_data_type = t; return *this; }
  Graph& set_intermediate_data_type(DataType t) { ctx_.intermediate_data_type = t; return *this; }
  Graph& set_compute_data_type(DataType t) { ctx_.compute_data_type = t; return *this; }
  Graph& set_sm_count(int64_t n) { ctx_.sm_count = n; return *this; }
  Graph& set_sm_version(int64_t v) { ctx_.sm_version = v; return *this; }
  const GraphContext& context() const { return ctx_; }
  GraphContext& context() { return ctx_; }

  // ---- tensors
  TensorPtr tensor(const TensorAttr& attr);
  TensorPtr tensor(Scalar value);  // a pass-by-value constant
  TensorPtr tensor_like(const TensorPtr& like, std::string name = {});

  // ---- ops: one builder per catalogue entry, generated from ops.def.
  // Each takes the op's positional input ports, then optionally a NodeAttrs.
#define OPENDNN_OP(e, m, tag, npos, nout)                                               \
  template <class... Args>                                                              \
  BuilderOutput<nout> m(Args&&... args) {                                               \
    static_assert(npos >= 0 || sizeof...(Args) == 9999, "pass a std::vector<TensorPtr>");    \
    static_assert(npos < 0 || sizeof...(Args) == npos || sizeof...(Args) == npos + 1,  \
                  #m ": pass its positional inputs, then optionally NodeAttrs");        \
    return unpack<nout>(add_node(OpKind::e, collect<npos>(std::forward<Args>(args)...), \
                                 attrs_of<npos>(std::forward<Args>(args)...)));         \
  }
#include "opendnn/ops.def"
#undef OPENDNN_OP
  TensorPtr concatenate(std::vector<TensorPtr> inputs, NodeAttrs attrs = {}) {
    return add_node(OpKind::CONCATENATE, std::move(inputs), std::move(attrs))[0];
  }
  // Pointwise: one builder per mode (add, relu, cmp_lt, binary_select...).
#define OPENDNN_PW(e, m, arity)                                                      \
  template <class... Args>                                                           \
  TensorPtr m(Args&&... args) {                                                      \
    static_assert(sizeof...(Args) == arity || sizeof...(Args) == arity + 1,          \
                  #m ": pass its inputs, then optionally NodeAttrs");                \
    NodeAttrs a = attrs_of<arity>(std::forward<Args>(args)...);                      \
    a.set("mode", #e);                                                               \
    return add_pointwise(collect<arity>(std::forward<Args>(args)...), std::move(a)); \
  }
#include "opendnn/pointwise_modes.def"
#undef OPENDNN_PW

  // The generic builder underneath: positional inputs fill the first ports in order.
  std::vector<TensorPtr> add_node(OpKind kind, std::vector<TensorPtr> positional, NodeAttrs attrs);
  // Moves the nodes added since `first_node` (a count of nodes()) into a sub-graph `name` of `owner`
  // (e.g. SDPA's "score_mod"), reading `input` and giving `output`. The moved nodes must all be
  // POINTWISE; `owner` must be a node of this graph added before them.
  Status attach_subgraph(const Node& owner, std::string name, TensorPtr input, TensorPtr output, size_t first_node);

  // ---- structure
  const std::vector<std::unique_ptr<Node>>& nodes() const { return nodes_; }
  std::vector<std::unique_ptr<Node>>& mutable_nodes() { return nodes_; }
  // Every tensor known to the graph: created by tensor() or attached to a node port.
  std::vector<TensorPtr> tensors() const;
  TensorPtr find_tensor(int64_t uid) const;

  // ---- validation: infers dims, strides and types of every tensor and checks every rule.
  Status validate();
  // True after a successful validate() until the graph or one of its tensors changes (a node added,
  // a tensor's dims, strides, data type, value, role or uid set to something else).
  bool is_validated() const;
  // OK while is_validated(); otherwise the error execute() returns, naming the changed tensor.
  Status check_unchanged() const;
  // Gives every tensor without a uid a fresh one, keeping user-given uids (duplicates are an error).
  Status assign_uids();

  // ---- Graph JSON v2 (src/serialize)
  Status serialize(std::string& out, bool serialize_structure = false) const;
  std::string serialize(bool serialize_structure = false) const;  // "" if the graph cannot be written
  // Replaces this graph with the document's on success; on failure the graph is untouched.
  Status deserialize(std::string_view json);
  // A stable 64-bit hash of the structure (same graph, same key, on every process and machine).
  uint64_t key() const;

  // ---- plan lifecycle (src/plan)
  Status build_operation_graph();
  Status create_execution_plans(const std::vector<HeurMode>& modes);
  Status check_support();
  Status build_plans(BuildPlanPolicy policy = BuildPlanPolicy::HEURISTICS_CHOICE);
  Status build_plan_at_index(int64_t index);
  Status build(const std::vector<HeurMode>& modes, BuildPlanPolicy policy = BuildPlanPolicy::HEURISTICS_CHOICE);
  int64_t get_execution_plan_count() const;
  Status get_plan_name_at_index(int64_t index, std::string& name) const;
  Status get_engine_name_at_index(int64_t index, std::string& name) const;
  Status get_workspace_size(int64_t& bytes) const;
  int64_t get_workspace_size() const;
  Status get_workspace_size_plan_at_index(int64_t index, int64_t& bytes) const;
  Status select_plan(int64_t index);
  int64_t selected_plan() const;
  Status deselect_engines(const std::vector<std::string>& engine_names);
  Status deselect_workspace_greater_than(int64_t bytes);
  Status get_plan_info_at_index(int64_t index, PlanInfo& info) const;
  // The flat index of the plan (engine_id, local_index), or -1 if the list has none.
  int64_t find_plan_index(int64_t engine_id, int64_t local_index) const;

  // The variant pack's slots: uids of the non-virtual tensors that need a pointer, ascending.
  const std::vector<int64_t>& variant_uids() const;
  // The slot of a uid in variant_uids(), or -1 when it has none (virtual, constant, or not planned).
  int64_t variant_slot_of(int64_t uid) const;
  Status execute(const std::unordered_map<int64_t, void*>& pack, void* workspace, void* stream = nullptr);
  Status execute(const std::unordered_map<TensorPtr, void*>& pack, void* workspace, void* stream = nullptr);
  // The hot path: one pointer per variant slot, in variant_uids() order. No allocation, no lookup.
  Status execute(void* const* slot_pointers, void* workspace, void* stream = nullptr);
  Status execute_plan_at_index(const std::unordered_map<int64_t, void*>& pack, void* workspace,
                               int64_t index, void* stream = nullptr);
  // Times every built plan on this data, reorders plans fastest first and records the order in
  // the on-disk plan cache.
  Status autotune(const std::unordered_map<int64_t, void*>& pack, void* workspace, void* stream = nullptr);

  // ---- cuDNN Frontend's engine/knob API (src/plan/knobs.cpp, docs/engines_and_knobs.md). Engine ids
  // number the knob engines of every engine that serves the target, in engine-id order (the cudnn
  // engine's come first and are cuDNN's global engine ids).
  Status get_engine_count(int64_t& count);
  Status get_knobs_for_engine(int64_t engine, std::vector<KnobRange>& out);
  // Adds the plan of knob engine `engine` with these knob values to the plan list (after any plans
  // there; a plan already listed is not added twice).
  Status create_execution_plan(int64_t engine, const std::vector<std::pair<KnobType, int64_t>>& knobs);

  // ---- notes: what is true of each plan, and filters on them. A selected note must be on a plan, a
  // deselected one must not; plans that fail are deselected, now and whenever plans are created.
  Status get_behavior_notes(std::vector<BehaviorNote>& out) const;  // of the selected (else first usable) plan
  Status get_behavior_notes_for_plan_at_index(int64_t index, std::vector<BehaviorNote>& out) const;
  Status get_numerical_notes_for_plan_at_index(int64_t index, std::vector<NumericalNote>& out) const;
  Status select_numeric_notes(const std::vector<NumericalNote>& notes);
  Status deselect_numeric_notes(const std::vector<NumericalNote>& notes);
  Status select_behavior_notes(const std::vector<BehaviorNote>& notes);
  Status deselect_behavior_notes(const std::vector<BehaviorNote>& notes);

  // ---- where plans run: this graph's target instead of default_target() (device properties).
  void set_target(const Target& target);
  void clear_target();
  Target planning_target() const;
  void set_kernel_cache(std::shared_ptr<KernelCache> cache);
  std::shared_ptr<KernelCache> kernel_cache() const;

  // ---- plans that travel (src/plan/plan_io.cpp): the graph and its selected built plan (engine, plan,
  // knobs, workspace, variant-pack uids, pass-by-value values, the engine's payload) as JSON text, and
  // back: deserialize_plan() gives a graph that executes without planning again, or an error when the
  // plan does not match this library, engine build or device.
  Status serialize_plan(std::string& out) const;
  Status deserialize_plan(std::string_view text);

  // Records the selected plan's work into a CUDA graph (cudaGraph_t), for engines that can.
  Status populate_cuda_graph(const std::unordered_map<int64_t, void*>& pack, void* workspace, void* cuda_graph,
                             bool update = false);

  ExecState* exec_state() const { return exec_.get(); }

 private:
  template <int N, class... Args>
  static std::vector<TensorPtr> collect(Args&&... args) {
    std::vector<TensorPtr> v;
    v.reserve(N);
    (push_if_tensor(v, std::forward<Args>(args)), ...);
    return v;
  }
  static void push_if_tensor(std::vector<TensorPtr>& v, const TensorPtr& t) { v.push_back(t); }
  static void push_if_tensor(std::vector<TensorPtr>& v, std::nullptr_t) { v.push_back(nullptr); }
  static void push_if_tensor(std::vector<TensorPtr>&, const NodeAttrs&) {}
  template <int N, class... Args>
  static NodeAttrs attrs_of(Args&&... args) {
    NodeAttrs out;
    (take_attrs(out, std::forward<Args>(args)), ...);
    return out;
  }
  template <class T>
  static void take_attrs(NodeAttrs& out, T&& a) {
    if constexpr (std::is_same_v<std::decay_t<T>, NodeAttrs>) out = std::forward<T>(a);
  }
  template <int N>
  static BuilderOutput<N> unpack(std::vector<TensorPtr> outs) {
    if constexpr (N == 1) {
      return outs.at(0);
    } else {
      BuilderOutput<N> r;
      for (int i = 0; i < N; ++i) r[i] = outs.at(i);
      return r;
    }
  }
  TensorPtr add_pointwise(std::vector<TensorPtr> inputs, NodeAttrs attrs);
  Status validate_rules();  // validate() without the bookkeeping of what it inferred

  GraphContext ctx_;
  std::vector<TensorPtr> user_tensors_;
  std::vector<std::unique_ptr<Node>> nodes_;
  bool validated_ = false;
  struct EditWatch;  // the tensors validate() saw and the edit clock then (src/graph/graph.cpp)
  std::unique_ptr<EditWatch> watch_;
  std::unique_ptr<ExecState> exec_;
  std::shared_ptr<PlanSettings> settings_;  // shared_ptr: kept by deserialize(), which replaces the rest

  PlanSettings& settings();
  Status init_plan_state();  // an empty plan list with the variant slots laid out (lifecycle.cpp)
  Status restore_plan_record(std::string_view record);  // plan_io.cpp
  void apply_note_filters();
};

}  // namespace opendnn
