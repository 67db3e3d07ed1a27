// SPDX-License-Identifier: Apache-2.0
#include <cstdio>
#include <cstdlib>
#include <string>
#include <unordered_set>

#include "opendnn/node.h"

namespace opendnn {

namespace {
[[noreturn]] void unknown_name(const Node& n, const char* what, std::string_view name) {
  std::fprintf(stderr, "opendnn internal error: %s has no %s named '%.*s'\n", n.spec().method, what,
               int(name.size()), name.data());
  std::abort();
}
const std::string kEmptyString;
const std::vector<int64_t> kEmptyInts;
const std::vector<double> kEmptyFloats;
}  // namespace

Node::Node(OpKind kind, std::string name) : kind_(kind), name_(std::move(name)) {
  const OpSpec& s = spec();
  if (!s.variadic()) inputs_.resize(s.def->inputs.size());
  outputs_.resize(s.def->outputs.size());
  attrs_.reserve(s.def->attrs.size());
  for (const auto& a : s.def->attrs) attrs_.push_back(a.default_value);
}

size_t Node::num_ports() const { return spec().variadic() ? inputs_.size() : spec().def->inputs.size(); }

const SubGraph* Node::subgraph(std::string_view name) const {
  for (const auto& sg : subgraphs_)
    if (sg->name == name) return sg.get();
  return nullptr;
}

std::vector<TensorPtr> Node::subgraph_tensors() const {
  std::vector<TensorPtr> all;
  for (const auto& sg : subgraphs_) {
    if (sg->input) all.push_back(sg->input);
    for (const auto& n : sg->nodes)
      for (const auto& t : n->outputs())
        if (t) all.push_back(t);
  }
  return all;
}

void Node::add_subgraph(std::shared_ptr<SubGraph> sg) {
  inputs_.resize(num_ports());
  subgraphs_.push_back(std::move(sg));
  // Externals: what the sub-graph nodes read that no sub-graph makes, in first-read order, once each.
  std::unordered_set<const TensorAttr*> inner, seen;
  for (const auto& g : subgraphs_) {
    if (g->input) inner.insert(g->input.get());
    for (const auto& n : g->nodes)
      for (const auto& t : n->outputs())
        if (t) inner.insert(t.get());
  }
  for (const auto& g : subgraphs_)
    for (const auto& n : g->nodes)
      for (const auto& t : n->inputs())
        if (t && !inner.count(t.get()) && seen.insert(t.get()).second) inputs_.push_back(t);
}

const TensorPtr& Node::in(std::string_view port) const {
  int i = spec().input_index(port);
  if (i < 0) unknown_name(*this, "input port", port);
  static const TensorPtr kNull;
  return size_t(i) < inputs_.size() ? inputs_[size_t(i)] : kNull;
}

const TensorPtr& Node::out(std::string_view port) const {
  int i = spec().output_index(port);
  if (i < 0) unknown_name(*this, "output port", port);
  return outputs_[size_t(i)];
}

const AttrValue& Node::attr(std::string_view name) const {
  int i = spec().attr_index(name);
  if (i < 0) unknown_name(*this, "attribute", name);
  return attrs_[size_t(i)];
}

bool Node::attr_bool(std::string_view name) const {
  const auto& v = attr(name);
  if (auto p = std::get_if<bool>(&v)) return *p;
  if (auto p = std::get_if<int64_t>(&v)) return *p != 0;
  return false;
}

int64_t Node::attr_int(std::string_view name) const {
  const auto& v = attr(name);
  if (auto p = std::get_if<int64_t>(&v)) return *p;
  if (auto p = std::get_if<bool>(&v)) return *p;
  if (auto p = std::get_if<double>(&v)) return int64_t(*p);
  return 0;
}

double Node::attr_float(std::string_view name) const {
  const auto& v = attr(name);
  if (auto p = std::get_if<double>(&v)) return *p;
  if (auto p = std::get_if<int64_t>(&v)) return double(*p);
  if (auto p = std::get_if<bool>(&v)) return *p;
  return 0.0;
}

const std::string& Node::attr_str(std::string_view name) const {
  const auto& v = attr(name);
  if (auto p = std::get_if<std::string>(&v)) return *p;
  return kEmptyString;
}

const std::vector<int64_t>& Node::attr_ints(std::string_view name) const {
  const auto& v = attr(name);
  if (auto p = std::get_if<std::vector<int64_t>>(&v)) return *p;
  return kEmptyInts;
}

const std::vector<double>& Node::attr_floats(std::string_view name) const {
  const auto& v = attr(name);
  if (auto p = std::get_if<std::vector<double>>(&v)) return *p;
  return kEmptyFloats;
}

PointwiseMode Node::pointwise_mode() const {
  auto m = pointwise_mode_from_string(attr_str("mode"));
  return m ? *m : PointwiseMode::IDENTITY;
}

Status Node::fail(ErrorCode code, std::string_view what) const {
  std::string msg = spec().method;
  msg += " \"";
  msg += name_;
  msg += "\": ";
  msg += what;
  return {code, std::move(msg)};
}

}  // namespace opendnn
