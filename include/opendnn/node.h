// SPDX-License-Identifier: Apache-2.0
// Nodes, their attributes, and the op catalogue they are described by.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "opendnn/status.h"
#include "opendnn/tensor.h"
#include "opendnn/types.h"

namespace opendnn {

enum class OpKind : uint16_t {
#define OPENDNN_OP(e, m, tag, npos, nout) e,
#include "opendnn/ops.def"
#undef OPENDNN_OP
};
inline constexpr int kNumOps = 0
#define OPENDNN_OP(e, m, tag, npos, nout) +1
#include "opendnn/ops.def"
#undef OPENDNN_OP
    ;

enum class PointwiseMode : uint8_t {
#define OPENDNN_PW(e, m, arity) e,
#include "opendnn/pointwise_modes.def"
#undef OPENDNN_PW
};

// An attribute value. Enumerated attributes hold their member name as a string ("TOP_LEFT").
// monostate means "not set" (for attributes without a default).
using AttrVariant =
    std::variant<std::monostate, bool, int64_t, double, std::string, std::vector<int64_t>, std::vector<double>>;

struct AttrValue : AttrVariant {
  AttrValue() = default;
  AttrValue(bool v) : AttrVariant(v) {}
  AttrValue(int v) : AttrVariant(int64_t(v)) {}
  AttrValue(int64_t v) : AttrVariant(v) {}
  AttrValue(double v) : AttrVariant(v) {}
  AttrValue(float v) : AttrVariant(double(v)) {}
  AttrValue(const char* v) : AttrVariant(std::string(v)) {}
  AttrValue(std::string v) : AttrVariant(std::move(v)) {}
  AttrValue(std::vector<int64_t> v) : AttrVariant(std::move(v)) {}
  AttrValue(std::vector<double> v) : AttrVariant(std::move(v)) {}
  AttrValue(std::initializer_list<int64_t> v) : AttrVariant(std::vector<int64_t>(v)) {}
  bool is_set() const { return !std::holds_alternative<std::monostate>(*this); }
};

enum class AttrType : uint8_t { BOOL, INT, FLOAT, ENUM, STRING, INT_LIST, FLOAT_LIST };
std::string_view to_string(AttrType t);

struct PortSpec {
  const char* name;
  bool required = true;
  const char* py_name = nullptr;  // keyword in cuDNN Frontend's Python API when it differs from name
};

struct AttrSpec {
  const char* name;
  AttrType type;
  AttrValue default_value = {};  // unset (monostate) means optional without default
  const char* choices = nullptr;  // ENUM members separated by '|'
};

class Node;
struct GraphContext;
// Infers the node's output dims/strides/data types and checks every rule of the op.
using InferFn = Status (*)(Node& node, const GraphContext& ctx);

// The per-op part of the catalogue, defined in src/ops/<family>.cpp as `const OpDef def_<ENUM>`.
struct OpDef {
  std::span<const PortSpec> inputs;  // for a variadic op: the single repeated port (named by index)
  std::span<const PortSpec> outputs;
  std::span<const AttrSpec> attrs;
  InferFn infer = nullptr;
};

struct OpSpec {
  OpKind kind;
  const char* tag;     // JSON tag
  const char* method;  // builder method and Python method name
  int positional;      // -1: variadic inputs
  int num_outputs;
  const OpDef* def;

  bool variadic() const { return positional < 0; }
  int input_index(std::string_view port) const;   // -1 if absent
  int output_index(std::string_view port) const;  // -1 if absent
  int attr_index(std::string_view attr) const;    // -1 if absent
};

std::span<const OpSpec> all_op_specs();
const OpSpec& op_spec(OpKind k);
const OpSpec* op_spec_by_tag(std::string_view tag);
const OpSpec* op_spec_by_method(std::string_view method);
int pointwise_arity(PointwiseMode m);
std::string_view to_string(PointwiseMode m);
std::string_view pointwise_method(PointwiseMode m);
// The catalogue's generic rules of one node (required ports set, attribute types and enum members).
Status check_node_rules(const Node& n);
std::optional<PointwiseMode> pointwise_mode_from_string(std::string_view s);

// What a builder call carries besides its positional inputs: the node name, the compute type,
// attributes and optional inputs by name. Unknown names are reported by validate(), naming the node.
class NodeAttrs {
 public:
  NodeAttrs& set_name(std::string n) { name_ = std::move(n); return *this; }
  NodeAttrs& set_compute_data_type(DataType t) { compute_ = t; return *this; }
  NodeAttrs& set(std::string attr, AttrValue v) { attrs_.emplace_back(std::move(attr), std::move(v)); return *this; }
  NodeAttrs& input(std::string port, TensorPtr t) { inputs_.emplace_back(std::move(port), std::move(t)); return *this; }

  const std::string& name() const { return name_; }
  DataType compute_data_type() const { return compute_; }
  const std::vector<std::pair<std::string, AttrValue>>& attrs() const { return attrs_; }
  const std::vector<std::pair<std::string, TensorPtr>>& inputs() const { return inputs_; }

 private:
  std::string name_;
  DataType compute_ = DataType::NOT_SET;
  std::vector<std::pair<std::string, AttrValue>> attrs_;
  std::vector<std::pair<std::string, TensorPtr>> inputs_;
};

class Node;

// A sub-graph a node evaluates inside itself, element by element: SDPA's score_mod (the scores in, the
// modified scores out) and score_mod_bprop (the gradient of the modified scores in, of the scores out).
// Its nodes are POINTWISE, in topological order. Besides `input` they may read graph tensors (inputs,
// pass-by-value constants, or tensors of an earlier sub-graph of the same owner); the graph tensors among
// them are the owner's "externals", kept after the owner's ports in Node::inputs() so that everything
// that walks node inputs (variant slots, plans, topological order) sees them.
struct SubGraph {
  std::string name;
  TensorPtr input;
  TensorPtr output;
  std::vector<std::unique_ptr<Node>> nodes;
};

class Node {
 public:
  Node(OpKind kind, std::string name);

  OpKind kind() const { return kind_; }
  const OpSpec& spec() const { return op_spec(kind_); }
  const std::string& name() const { return name_; }
  void set_name(std::string n) { name_ = std::move(n); }
  DataType compute_data_type() const { return compute_; }
  void set_compute_data_type(DataType t) { compute_ = t; }

  // Ports, indexed like the spec's port lists (a variadic op has one input per element).
  std::vector<TensorPtr>& inputs() { return inputs_; }
  const std::vector<TensorPtr>& inputs() const { return inputs_; }
  std::vector<TensorPtr>& outputs() { return outputs_; }
  const std::vector<TensorPtr>& outputs() const { return outputs_; }
  std::vector<AttrValue>& attrs() { return attrs_; }
  const std::vector<AttrValue>& attrs() const { return attrs_; }

  // Lookups by name, for validation and plan building (never on the execute path).
  // An absent optional port gives a null pointer; an unknown name is a programming error (aborts).
  const TensorPtr& in(std::string_view port) const;
  const TensorPtr& out(std::string_view port) const;
  const AttrValue& attr(std::string_view name) const;
  bool has(std::string_view attr_name) const { return attr(attr_name).is_set(); }
  bool attr_bool(std::string_view name) const;
  int64_t attr_int(std::string_view name) const;
  double attr_float(std::string_view name) const;  // INT attributes convert too
  const std::string& attr_str(std::string_view name) const;
  const std::vector<int64_t>& attr_ints(std::string_view name) const;
  const std::vector<double>& attr_floats(std::string_view name) const;
  PointwiseMode pointwise_mode() const;  // POINTWISE nodes only

  // A rule failure message prefixed with the node: `sdpa "attn": <what>`.
  Status fail(ErrorCode code, std::string_view what) const;

  // A problem found while the node was built (unknown attribute...), reported by validate().
  std::string build_error;

  // Sub-graphs (see SubGraph), of non-variadic ops only. add_subgraph takes ownership and recomputes the
  // externals, which follow the num_ports() port inputs in inputs().
  const std::vector<std::shared_ptr<SubGraph>>& subgraphs() const { return subgraphs_; }
  const SubGraph* subgraph(std::string_view name) const;
  void add_subgraph(std::shared_ptr<SubGraph> sg);
  size_t num_ports() const;
  // Every tensor inside the sub-graphs (their inputs and node outputs), for uids and serialization.
  std::vector<TensorPtr> subgraph_tensors() const;

 private:
  OpKind kind_;
  std::string name_;
  DataType compute_ = DataType::NOT_SET;
  std::vector<TensorPtr> inputs_;
  std::vector<TensorPtr> outputs_;
  std::vector<AttrValue> attrs_;
  std::vector<std::shared_ptr<SubGraph>> subgraphs_;
};

}  // namespace opendnn
