// SPDX-License-Identifier: Apache-2.0
// Graph construction and validation (the rules of each op live in src/ops).
#include <algorithm>
#include <atomic>
#include <climits>
#include <cmath>
#include <map>
#include <set>
#include <string>
#include <unordered_map>
#include <unordered_set>

#include "common/alloc_guard.h"
#include "common/checked_math.h"
#include "opendnn/graph.h"
#include "plan/exec_state.h"

namespace opendnn {

// What validate() saw and did. Validation fills the dims, strides and data types a user left unset;
// when the graph changes, those inferred values are cleared again before it is validated anew (unless
// the user has set them since), so a rebuilt graph is inferred from its current inputs.
struct Graph::EditWatch {
  struct Inferred {
    TensorPtr t;
    bool dims = false, strides = false, dtype = false;  // unset before validation filled them
  };
  std::vector<Inferred> inferred;
  std::vector<TensorPtr> tensors;  // every tensor of the graph when it was validated
  uint64_t validated_at = 0;       // the edit clock when validation ended: a tensor stamped later changed
  std::atomic<uint64_t> seen{0};   // a clock value at which no tensor had changed (the cheap check)
};

namespace {
std::string label_of(const TensorAttr& t) {
  std::string s = "uid " + std::to_string(t.get_uid());
  if (!t.get_name().empty()) s += " (\"" + t.get_name() + "\")";
  return s;
}
}  // namespace

Graph::Graph() = default;
Graph::~Graph() = default;
Graph::Graph(Graph&&) noexcept = default;
Graph& Graph::operator=(Graph&&) noexcept = default;

TensorPtr Graph::tensor(const TensorAttr& attr) {
  auto t = std::make_shared<TensorAttr>(attr);
  user_tensors_.push_back(t);
  validated_ = false;
  return t;
}

TensorPtr Graph::tensor(Scalar value) {
  TensorAttr a;
  a.set_dim({1}).set_stride({1}).set_value(value).set_data_type(value.type);
  return tensor(a);
}

TensorPtr Graph::tensor_like(const TensorPtr& like, std::string name) {
  TensorAttr a = like ? *like : TensorAttr{};
  a.clear_uid().set_is_virtual(false).set_name(std::move(name)).set_ragged_offset(like ? like->get_ragged_offset() : nullptr);
  a.mark_produced(false);
  return tensor(a);
}

TensorPtr Graph::add_pointwise(std::vector<TensorPtr> inputs, NodeAttrs attrs) {
  static const char* kPorts[] = {"IN_0", "IN_1", "IN_2"};
  NodeAttrs a = std::move(attrs);
  for (size_t i = 1; i < inputs.size() && i < 3; ++i) a.input(kPorts[i], inputs[i]);
  std::vector<TensorPtr> first{inputs.empty() ? nullptr : inputs[0]};
  return add_node(OpKind::POINTWISE, std::move(first), std::move(a))[0];
}

std::vector<TensorPtr> Graph::add_node(OpKind kind, std::vector<TensorPtr> positional, NodeAttrs attrs) {
  const OpSpec& spec = op_spec(kind);
  std::string name = attrs.name();
  if (name.empty()) name = std::string(spec.method) + "_" + std::to_string(nodes_.size());
  auto node = std::make_unique<Node>(kind, name);
  node->set_compute_data_type(attrs.compute_data_type());
  auto note = [&](const std::string& e) {
    if (node->build_error.empty()) node->build_error = e;
  };

  if (spec.variadic()) {
    node->inputs() = std::move(positional);
  } else {
    for (size_t i = 0; i < positional.size(); ++i) {
      if (i >= node->inputs().size()) {
        note("too many inputs: " + std::string(spec.method) + " takes " + std::to_string(node->inputs().size()));
        break;
      }
      node->inputs()[i] = positional[i];
    }
  }
  for (const auto& [port, t] : attrs.inputs()) {
    int i = spec.input_index(port);
    if (i < 0 || spec.variadic()) {
      note("unknown input port '" + port + "'");
      continue;
    }
    node->inputs()[size_t(i)] = t;
  }
  for (const auto& [key, value] : attrs.attrs()) {
    int i = spec.attr_index(key);
    if (i < 0) {
      note("unknown attribute '" + key + "'");
      continue;
    }
    node->attrs()[size_t(i)] = value;
  }

  std::vector<TensorPtr> outs;
  for (size_t i = 0; i < spec.def->outputs.size(); ++i) {
    auto t = std::make_shared<TensorAttr>();
    t->set_is_virtual(true).set_name(name + "::" + spec.def->outputs[i].name);
    t->mark_produced(true);
    node->outputs()[i] = t;
    outs.push_back(t);
  }
  nodes_.push_back(std::move(node));
  validated_ = false;
  return outs;
}

std::vector<TensorPtr> Graph::tensors() const {
  std::vector<TensorPtr> all;
  std::unordered_set<const TensorAttr*> seen;
  auto add = [&](TensorPtr t) {
    // Follows the ragged-offset chain iteratively (a chain of any length cannot overflow the stack).
    while (t && seen.insert(t.get()).second) {
      all.push_back(t);
      t = t->get_ragged_offset();
    }
  };
  for (const auto& t : user_tensors_) add(t);
  for (const auto& n : nodes_) {
    for (const auto& t : n->inputs()) add(t);
    for (const auto& t : n->outputs()) add(t);
    for (const auto& t : n->subgraph_tensors()) add(t);
  }
  return all;
}

Status Graph::attach_subgraph(const Node& owner, std::string name, TensorPtr input, TensorPtr output, size_t first_node) {
  size_t at = nodes_.size();
  for (size_t i = 0; i < nodes_.size(); ++i)
    if (nodes_[i].get() == &owner) at = i;
  if (at == nodes_.size()) return {ErrorCode::INVALID_VALUE, "attach_subgraph: the owner is not a node of this graph"};
  if (first_node <= at || first_node > nodes_.size())
    return owner.fail(ErrorCode::INVALID_VALUE, "sub-graph " + name + ": its nodes must be added after the owner");
  if (!input || !output) return owner.fail(ErrorCode::ATTRIBUTE_NOT_SET, "sub-graph " + name + " needs an input and an output");
  if (owner.spec().variadic() || owner.subgraph(name))
    return owner.fail(ErrorCode::INVALID_VALUE, "cannot take a sub-graph named " + name);
  for (size_t i = first_node; i < nodes_.size(); ++i)
    if (nodes_[i]->kind() != OpKind::POINTWISE)
      return owner.fail(ErrorCode::GRAPH_NOT_SUPPORTED, "sub-graph " + name + " may hold only pointwise ops, not " +
                                                            nodes_[i]->spec().method + " \"" + nodes_[i]->name() + "\"");
  auto sg = std::make_shared<SubGraph>();
  sg->name = std::move(name);
  sg->input = std::move(input);
  sg->output = std::move(output);
  for (size_t i = first_node; i < nodes_.size(); ++i) sg->nodes.push_back(std::move(nodes_[i]));
  nodes_.resize(first_node);
  nodes_[at]->add_subgraph(std::move(sg));
  validated_ = false;
  return {};
}

TensorPtr Graph::find_tensor(int64_t uid) const {
  for (const auto& t : tensors())
    if (t->has_uid() && t->get_uid() == uid) return t;
  return nullptr;
}

Status Graph::assign_uids() {
  auto all = tensors();
  std::unordered_map<int64_t, const TensorAttr*> used;
  for (const auto& t : all) {
    if (!t->has_uid()) continue;
    auto [it, fresh] = used.emplace(t->get_uid(), t.get());
    if (!fresh)
      return {ErrorCode::INVALID_VALUE, "tensors \"" + it->second->get_name() + "\" and \"" + t->get_name() +
                                            "\" share uid " + std::to_string(t->get_uid())};
  }
  int64_t next = 1;
  for (const auto& t : all) {
    if (t->has_uid()) continue;
    while (used.count(next)) ++next;
    t->set_uid(next);
    used.emplace(next, t.get());
  }
  return {};
}

namespace {

std::string tensor_label(const TensorAttr& t) {
  if (!t.get_name().empty()) return "\"" + t.get_name() + "\"";
  return "uid " + std::to_string(t.get_uid());
}

std::string dims_str(const std::vector<int64_t>& d) {
  std::string s = "[";
  for (size_t i = 0; i < d.size(); ++i) s += (i ? "," : "") + std::to_string(d[i]);
  return s + "]";
}

// The generic rules every node obeys: required ports present, attribute types and enum members.
Status check_node_generic(const Node& n) {
  const OpSpec& spec = n.spec();
  if (!n.build_error.empty()) return n.fail(ErrorCode::INVALID_VALUE, n.build_error);
  if (spec.variadic()) {
    if (n.inputs().empty()) return n.fail(ErrorCode::ATTRIBUTE_NOT_SET, "needs at least one input");
    for (size_t i = 0; i < n.inputs().size(); ++i)
      if (!n.inputs()[i]) return n.fail(ErrorCode::ATTRIBUTE_NOT_SET, "input " + std::to_string(i) + " is null");
  } else {
    for (size_t i = 0; i < spec.def->inputs.size(); ++i)
      if (spec.def->inputs[i].required && !n.inputs()[i])
        return n.fail(ErrorCode::ATTRIBUTE_NOT_SET, std::string("input ") + spec.def->inputs[i].name + " is not set");
  }
  for (size_t i = 0; i < spec.def->attrs.size(); ++i) {
    const AttrSpec& as = spec.def->attrs[i];
    const AttrValue& v = n.attrs()[i];
    if (!v.is_set()) continue;
    bool ok = false;
    switch (as.type) {
      case AttrType::BOOL: ok = std::holds_alternative<bool>(v); break;
      case AttrType::INT: ok = std::holds_alternative<int64_t>(v); break;
      case AttrType::FLOAT: ok = std::holds_alternative<double>(v) || std::holds_alternative<int64_t>(v); break;
      case AttrType::ENUM:
      case AttrType::STRING: ok = std::holds_alternative<std::string>(v); break;
      case AttrType::INT_LIST: ok = std::holds_alternative<std::vector<int64_t>>(v); break;
      case AttrType::FLOAT_LIST: ok = std::holds_alternative<std::vector<double>>(v); break;
    }
    if (!ok)
      return n.fail(ErrorCode::INVALID_VALUE,
                    std::string("attribute ") + as.name + " must be of type " + std::string(to_string(as.type)));
    if (as.type == AttrType::ENUM) {
      const std::string& s = std::get<std::string>(v);
      std::string_view choices = as.choices ? as.choices : "";
      bool member = false;
      size_t pos = 0;
      while (pos <= choices.size()) {
        size_t bar = choices.find('|', pos);
        if (bar == std::string_view::npos) bar = choices.size();
        if (bar > pos && choices.substr(pos, bar - pos) == s) member = true;
        pos = bar + 1;
      }
      if (!member)
        return n.fail(ErrorCode::INVALID_VALUE, std::string("attribute ") + as.name + " is '" + s +
                                                    "', not one of " + std::string(choices));
    }
  }
  return {};
}

Status check_dims(const TensorAttr& t) {
  for (int64_t d : t.get_dim())
    if (d < 0) return {ErrorCode::INVALID_VALUE, "tensor " + tensor_label(t) + " has a negative dim " + dims_str(t.get_dim())};
  return {};
}

Status check_tensor_shape(const TensorAttr& t, const char* role) {
  if (t.get_dim().empty())
    return {ErrorCode::ATTRIBUTE_NOT_SET, std::string(role) + " tensor " + tensor_label(t) + " has no dims"};
  OPENDNN_RETURN_IF_ERROR(check_dims(t));
  if (t.get_stride().size() != t.get_dim().size())
    return {ErrorCode::INVALID_VALUE, "tensor " + tensor_label(t) + " has " + std::to_string(t.get_dim().size()) +
                                          " dims but " + std::to_string(t.get_stride().size()) + " strides"};
  for (int64_t s : t.get_stride())
    if (s < 0) return {ErrorCode::INVALID_VALUE, "tensor " + tensor_label(t) + " has a negative stride"};
  if (t.volume() < 0 || t.storage_bytes() < 0)
    return {ErrorCode::INVALID_VALUE, "tensor " + tensor_label(t) + " with dims " + dims_str(t.get_dim()) +
                                          " overflows int64 when sized"};
  if (t.get_data_type() == DataType::NOT_SET)
    return {ErrorCode::ATTRIBUTE_NOT_SET, "tensor " + tensor_label(t) + " has no data type"};
  if (!is_storable(t.get_data_type()))
    return {ErrorCode::GRAPH_NOT_SUPPORTED, "not supported: tensor " + tensor_label(t) + " has data type " +
                                                std::string(to_string(t.get_data_type())) +
                                                ", which no opendnn engine stores (vectorised int8, INT4 and "
                                                "FAST_FLOAT_FOR_FP8 have no kernels)"};
  return {};
}

// A pass-by-value value must be representable in its tensor's data type: an integer type takes an
// integral value in its range (BOOLEAN: 0 or 1); a floating type takes any value, NaN and inf included.
Status check_scalar_value(const TensorAttr& t) {
  if (!t.get_is_pass_by_value() || !t.get_value().is_set()) return {};
  const DataType dt = t.get_data_type();
  if (!is_integer(dt)) return {};
  const Scalar& v = t.get_value();
  int64_t x = v.i;
  std::string shown = std::to_string(v.i);
  if (!is_integer(v.type)) {
    // 2^63 is the first double past INT64_MAX.
    if (!std::isfinite(v.f) || v.f != std::trunc(v.f) || v.f < -9223372036854775808.0 || v.f >= 9223372036854775808.0)
      return {ErrorCode::INVALID_VALUE, "pass-by-value tensor " + tensor_label(t) + " of type " +
                                            std::string(to_string(dt)) + " has the value " + std::to_string(v.f) +
                                            ", which is not an integer of that type"};
    x = int64_t(v.f);
    shown = std::to_string(x);
  }
  int64_t lo = INT64_MIN, hi = INT64_MAX;
  switch (dt) {
    case DataType::INT8: lo = -128, hi = 127; break;
    case DataType::UINT8: lo = 0, hi = 255; break;
    case DataType::INT32: lo = INT32_MIN, hi = INT32_MAX; break;
    case DataType::BOOLEAN: lo = 0, hi = 1; break;
    default: break;
  }
  if (x < lo || x > hi)
    return {ErrorCode::INVALID_VALUE, "pass-by-value tensor " + tensor_label(t) + " has the value " + shown +
                                          ", outside the range of " + std::string(to_string(dt)) + " [" +
                                          std::to_string(lo) + ", " + std::to_string(hi) + "]"};
  return {};
}

// A tensor that kernels write (a graph output) must give each element its own memory: ordered by
// stride, each dim's stride must reach past everything the faster dims cover. A tensor with a zero-size
// dim holds nothing and passes; dims of size 1 take any stride.
Status check_no_overlap(const TensorAttr& t) {
  if (t.addresses_each_element_once()) return {};
  const auto& d = t.get_dim();
  const auto& st = t.get_stride();
  int64_t smallest = INT64_MAX;  // the stride the check fails on first, when it is below 1
  for (size_t i = 0; i < d.size(); ++i)
    if (d[i] > 1) smallest = std::min(smallest, st[i]);
  return {ErrorCode::INVALID_VALUE, "output tensor " + tensor_label(t) + " has dims " + dims_str(d) + " and strides " +
                                        dims_str(st) + ": " +
                                        (smallest == 0 ? std::string("a stride of 0") : std::string("strides that overlap")) +
                                        ": its elements would share memory"};
}

// A pass-by-value scalar of one element (a Python number, tensor_scalar) broadcasts to any rank: in a
// pointwise node it takes dims of all ones at the rank of the node's widest input.
void widen_scalars(Node& n) {
  if (n.spec().kind != OpKind::POINTWISE) return;
  size_t rank = 0;
  for (const auto& t : n.inputs())
    if (t) rank = std::max(rank, t->get_dim().size());
  for (const auto& t : n.inputs())
    if (t && t->get_is_pass_by_value() && t->volume() == 1 && t->get_dim().size() < rank)
      t->set_dim(std::vector<int64_t>(rank, 1)).set_stride(std::vector<int64_t>(rank, 1));
}

}  // namespace

bool Graph::is_validated() const { return check_unchanged().is_good(); }

Status Graph::check_unchanged() const {
  if (validated_ && watch_) {
    // The hot path: one integer compare while no tensor anywhere has been edited since the last check.
    const uint64_t now = tensor_edit_clock();
    if (watch_->seen.load(std::memory_order_relaxed) == now) return {};
    for (const auto& t : watch_->tensors)
      if (t->edit_stamp() > watch_->validated_at)
        return {ErrorCode::GRAPH_EXECUTION_FAILED,
                "graph changed since build: tensor " + label_of(*t) + " had its " + t->last_edit() +
                    " changed after validation; build the graph again (validate() and create_execution_plans())"};
    watch_->seen.store(now, std::memory_order_relaxed);
    return {};
  }
  return {ErrorCode::GRAPH_EXECUTION_FAILED,
          "graph changed since build: it has not been validated since its last change; build the graph again "
          "(validate() and create_execution_plans())"};
}

Status check_node_rules(const Node& n) { return check_node_generic(n); }

Status Graph::validate() {
  std::vector<EditWatch::Inferred> inferred;
  if (is_validated()) {
    inferred = std::move(watch_->inferred);  // nothing changed: validating again infers the same
  } else {
    // Plans made for an older version of the graph must never run on the new one.
    exec_.reset();
    if (watch_)
      for (const auto& r : watch_->inferred) {
        if (r.dims && r.t->dims_stamp() <= watch_->validated_at) r.t->set_dim({});
        if (r.strides && r.t->strides_stamp() <= watch_->validated_at) r.t->set_stride({});
        if (r.dtype && r.t->data_type_stamp() <= watch_->validated_at) r.t->set_data_type(DataType::NOT_SET);
      }
    for (const auto& t : tensors())
      if (t->get_dim().empty() || t->get_stride().empty() || t->get_data_type() == DataType::NOT_SET)
        inferred.push_back({t, t->get_dim().empty(), t->get_stride().empty(), t->get_data_type() == DataType::NOT_SET});
  }
  validated_ = false;
  Status s;
  try {
    s = validate_rules();
  } catch (...) {
    s = alloc_error(ErrorCode::INVALID_VALUE, "while validating the graph");
  }
  watch_ = std::make_unique<EditWatch>();
  watch_->inferred = std::move(inferred);
  if (s.is_good()) watch_->tensors = tensors();
  watch_->validated_at = tensor_edit_clock();
  watch_->seen.store(watch_->validated_at, std::memory_order_relaxed);
  validated_ = s.is_good();
  return s;
}

Status Graph::validate_rules() {
  // Who produces each tensor; a tensor written twice is an error.
  std::unordered_map<const TensorAttr*, size_t> producer;
  for (size_t i = 0; i < nodes_.size(); ++i) {
    for (const auto& t : nodes_[i]->outputs()) {
      if (!t) return nodes_[i]->fail(ErrorCode::ATTRIBUTE_NOT_SET, "an output tensor is null");
      if (!producer.emplace(t.get(), i).second)
        return nodes_[i]->fail(ErrorCode::INVALID_VALUE, "output " + tensor_label(*t) + " is already written by node \"" +
                                                             nodes_[producer[t.get()]]->name() + "\"");
    }
  }
  for (const auto& n : nodes_) OPENDNN_RETURN_IF_ERROR(check_node_generic(*n));
  std::set<std::string> names;
  for (const auto& n : nodes_)
    if (!names.insert(n->name()).second)
      return {ErrorCode::INVALID_VALUE, "two nodes are named \"" + n->name() + "\""};

  // Topological order (stable): producers before consumers; a cycle is an error. Iterative, so a
  // deserialized graph of any length cannot overflow the stack.
  std::vector<int> state(nodes_.size(), 0);  // 0 new, 1 on the stack, 2 done
  std::vector<size_t> order;
  order.reserve(nodes_.size());
  std::vector<std::pair<size_t, size_t>> stack;  // (node, next input to look at)
  for (size_t root = 0; root < nodes_.size(); ++root) {
    if (state[root]) continue;
    stack.push_back({root, 0});
    state[root] = 1;
    while (!stack.empty()) {
      auto& [i, next] = stack.back();
      const auto& ins = nodes_[i]->inputs();
      if (next < ins.size()) {
        const TensorPtr& t = ins[next++];
        if (!t) continue;
        auto it = producer.find(t.get());
        if (it == producer.end() || state[it->second] == 2) continue;
        if (state[it->second] == 1)
          return {ErrorCode::INVALID_VALUE, "the graph has a cycle through node \"" + nodes_[it->second]->name() + "\""};
        state[it->second] = 1;
        stack.push_back({it->second, 0});
        continue;
      }
      state[i] = 2;
      order.push_back(i);
      stack.pop_back();
    }
  }
  {
    std::vector<std::unique_ptr<Node>> sorted;
    for (size_t i : order) sorted.push_back(std::move(nodes_[i]));
    nodes_ = std::move(sorted);
  }

  // Graph inputs: complete, not virtual; default their type and strides. Sub-graph tensors are made
  // by their owner (its inference gives their dims).
  std::unordered_set<const TensorAttr*> inner;
  for (const auto& n : nodes_)
    for (const auto& t : n->subgraph_tensors())
      if (!inner.insert(t.get()).second)
        return n->fail(ErrorCode::INVALID_VALUE, "tensor " + tensor_label(*t) + " is written twice inside its sub-graphs");
  for (const auto& n : nodes_)
    for (const auto* ports : {&n->inputs(), &n->outputs()})
      for (const auto& t : *ports)
        if (t && inner.count(t.get()))
          return n->fail(ErrorCode::INVALID_VALUE, "tensor " + tensor_label(*t) + " belongs to a sub-graph; only its own "
                                                                                  "pointwise nodes may use it");
  for (const auto& t : tensors()) {
    t->mark_produced(producer.count(t.get()) > 0 || inner.count(t.get()) > 0);
    if (t->is_produced()) continue;
    if (t->get_is_virtual())
      return {ErrorCode::INVALID_VALUE, "tensor " + tensor_label(*t) + " is virtual but no node produces it"};
    if (t->get_data_type() == DataType::NOT_SET) t->set_data_type(ctx_.io_data_type);
    if (t->get_stride().empty() && !t->get_dim().empty()) {
      OPENDNN_RETURN_IF_ERROR(check_dims(*t));
      if (t->volume() < 0) return {ErrorCode::INVALID_VALUE, "tensor " + tensor_label(*t) + " overflows int64 when sized"};
      t->set_stride(row_major_strides(t->get_dim()));
    }
    OPENDNN_RETURN_IF_ERROR(check_tensor_shape(*t, "input"));
    OPENDNN_RETURN_IF_ERROR(check_scalar_value(*t));
  }

  for (const auto& n : nodes_) {
    const OpDef& def = *n->spec().def;
    if (!def.infer) return n->fail(ErrorCode::GRAPH_NOT_SUPPORTED, "not supported: this op has no inference rules yet");
    widen_scalars(*n);
    OPENDNN_RETURN_IF_ERROR(def.infer(*n, ctx_));
    for (const auto& t : n->outputs()) {
      if (t->get_data_type() == DataType::NOT_SET)
        t->set_data_type(t->get_is_virtual() ? ctx_.intermediate_data_type : ctx_.io_data_type);
      if (t->get_data_type() == DataType::NOT_SET) t->set_data_type(DataType::FLOAT);
      if (t->get_stride().empty()) {
        if (t->volume() < 0) return n->fail(ErrorCode::INVALID_VALUE, "output " + tensor_label(*t) + " overflows int64");
        t->set_stride(row_major_strides(t->get_dim()));
      }
      Status s = check_tensor_shape(*t, "output");
      if (s.is_good() && !t->get_is_virtual()) s = check_no_overlap(*t);
      if (s.is_bad()) return n->fail(s.code(), s.message());
    }
  }
  return assign_uids();
}

}  // namespace opendnn
