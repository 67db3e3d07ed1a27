// SPDX-License-Identifier: Apache-2.0
// Graph JSON v2 writer: generic over the op catalogue (ports and attributes come from OpSpec).
#include <algorithm>
#include <cmath>
#include <string>
#include <unordered_map>

#include "serialize/json_detail.h"

namespace opendnn::serialize {

namespace {

// JSON has no NaN or infinity: those are written as the strings "nan", "inf" and "-inf".
OJson number_json(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  return v;
}

const char* held_kind(const AttrValue& v) {
  switch (v.index()) {
    case 0: return "nothing";
    case 1: return "a bool";
    case 2: return "an int";
    case 3: return "a float";
    case 4: return "a string";
    case 5: return "an int list";
    default: return "a float list";
  }
}

// The value in the alternative its spec type is written from (FLOAT accepts an int). False if the
// value holds another type.
bool canonical(const AttrSpec& s, const AttrValue& v, AttrValue& out) {
  out = v;
  if (!v.is_set()) return true;
  switch (s.type) {
    case AttrType::BOOL: return std::holds_alternative<bool>(v);
    case AttrType::INT: return std::holds_alternative<int64_t>(v);
    case AttrType::FLOAT:
      if (auto p = std::get_if<int64_t>(&v)) out = double(*p);
      return std::holds_alternative<double>(out);
    case AttrType::ENUM:
    case AttrType::STRING: return std::holds_alternative<std::string>(v);
    case AttrType::INT_LIST: return std::holds_alternative<std::vector<int64_t>>(v);
    case AttrType::FLOAT_LIST: return std::holds_alternative<std::vector<double>>(v);
  }
  return false;
}

OJson attr_json(const AttrValue& v) {
  if (auto p = std::get_if<bool>(&v)) return *p;
  if (auto p = std::get_if<int64_t>(&v)) return *p;
  if (auto p = std::get_if<double>(&v)) return number_json(*p);
  if (auto p = std::get_if<std::string>(&v)) return *p;
  if (auto p = std::get_if<std::vector<int64_t>>(&v)) return *p;
  if (auto p = std::get_if<std::vector<double>>(&v)) {
    OJson a = OJson::array();
    for (double d : *p) a.push_back(number_json(d));
    return a;
  }
  return nullptr;
}

OJson scalar_number(const Scalar& s) {
  if (is_integer(s.type)) return s.i;
  return number_json(s.f);
}

Status node_json(const Node& n, bool structure, const std::unordered_map<const TensorAttr*, int64_t>& uid, OJson& out) {
  const OpSpec& spec = n.spec();
  if (!n.build_error.empty()) return n.fail(ErrorCode::INVALID_VALUE, n.build_error);
  out = OJson::object();
  out["tag"] = spec.tag;
  if (!structure) out["name"] = n.name();
  out["compute_data_type"] = std::string(to_string(n.compute_data_type()));

  OJson attrs = OJson::object();
  for (size_t i = 0; i < spec.def->attrs.size() && i < n.attrs().size(); ++i) {
    const AttrSpec& as = spec.def->attrs[i];
    AttrValue v, d;
    if (!canonical(as, n.attrs()[i], v))
      return n.fail(ErrorCode::INVALID_VALUE, std::string("attribute ") + as.name + " holds " + held_kind(n.attrs()[i]) +
                                                  ", expected " + std::string(to_string(as.type)));
    if (as.type == AttrType::ENUM && v.is_set() && !enum_member(as.choices, std::get<std::string>(v)))
      return n.fail(ErrorCode::INVALID_VALUE, std::string("attribute ") + as.name + " is '" + std::get<std::string>(v) +
                                                  "', not one of " + (as.choices ? as.choices : ""));
    (void)canonical(as, as.default_value, d);
    if (v == d) continue;  // the default (or unset without a default) is not written
    attrs[as.name] = attr_json(v);  // null: explicitly unset although the op has a default
  }
  out["attributes"] = std::move(attrs);

  auto ref = [&](const TensorPtr& t) -> OJson { return t ? OJson(uid.at(t.get())) : OJson(nullptr); };
  OJson ins = OJson::object();
  if (spec.variadic()) {
    for (size_t i = 0; i < n.inputs().size(); ++i) ins[std::to_string(i)] = ref(n.inputs()[i]);
  } else {
    for (size_t i = 0; i < spec.def->inputs.size() && i < n.inputs().size(); ++i)
      if (n.inputs()[i]) ins[spec.def->inputs[i].name] = ref(n.inputs()[i]);
  }
  out["inputs"] = std::move(ins);
  OJson outs = OJson::object();
  for (size_t i = 0; i < spec.def->outputs.size() && i < n.outputs().size(); ++i)
    outs[spec.def->outputs[i].name] = ref(n.outputs()[i]);
  out["outputs"] = std::move(outs);
  if (!n.subgraphs().empty()) {
    // Sub-graphs (SDPA's score_mod...): their nodes in order; the owner's externals are implied.
    OJson subs = OJson::array();
    for (const auto& sg : n.subgraphs()) {
      OJson j = OJson::object();
      j["name"] = sg->name;
      j["input"] = ref(sg->input);
      j["output"] = ref(sg->output);
      OJson nodes = OJson::array();
      for (const auto& sub : sg->nodes) {
        OJson sj;
        OPENDNN_RETURN_IF_ERROR(node_json(*sub, structure, uid, sj));
        nodes.push_back(std::move(sj));
      }
      j["nodes"] = std::move(nodes);
      subs.push_back(std::move(j));
    }
    out["subgraphs"] = std::move(subs);
  }
  return {};
}

}  // namespace

Status write_graph(const Graph& g, bool structure, OJson& doc) {
  std::unordered_map<const TensorAttr*, int64_t> uid;
  std::vector<TensorPtr> order;
  if (structure) {
    // Canonical numbering by first use, so names, user uids and creation order do not matter.
    // Tensors that no node uses do not affect a plan and are left out.
    auto add = [&](TensorPtr t) {
      while (t && !uid.count(t.get())) {
        uid.emplace(t.get(), int64_t(order.size()) + 1);
        order.push_back(t);
        t = t->get_ragged_offset();
      }
    };
    for (const auto& n : g.nodes()) {
      for (const auto& t : n->inputs()) add(t);
      for (const auto& t : n->outputs()) add(t);
      for (const auto& t : n->subgraph_tensors()) add(t);
    }
  } else {
    // The uids Graph::assign_uids() would give, computed without touching the graph.
    order = g.tensors();
    std::unordered_map<int64_t, const TensorAttr*> used;
    for (const auto& t : order) {
      if (!t->has_uid()) continue;
      auto [it, fresh] = used.emplace(t->get_uid(), t.get());
      if (!fresh)
        return {ErrorCode::INVALID_VALUE, "tensors \"" + it->second->get_name() + "\" and \"" + t->get_name() +
                                              "\" share uid " + std::to_string(t->get_uid())};
      uid.emplace(t.get(), t->get_uid());
    }
    int64_t next = 1;
    for (const auto& t : order) {
      if (t->has_uid()) continue;
      while (used.count(next)) ++next;
      used.emplace(next, t.get());
      uid.emplace(t.get(), next);
    }
    std::stable_sort(order.begin(), order.end(),
                     [&](const TensorPtr& a, const TensorPtr& b) { return uid.at(a.get()) < uid.at(b.get()); });
  }

  doc = OJson::object();
  doc["version"] = std::string(kVersion);
  const GraphContext& c = g.context();
  OJson ctx = OJson::object();
  if (!structure) ctx["name"] = c.name;
  ctx["io_data_type"] = std::string(to_string(c.io_data_type));
  ctx["intermediate_data_type"] = std::string(to_string(c.intermediate_data_type));
  ctx["compute_data_type"] = std::string(to_string(c.compute_data_type));
  ctx["sm_count"] = c.sm_count;
  ctx["sm_version"] = c.sm_version;
  doc["context"] = std::move(ctx);

  OJson tensors = OJson::array();
  for (const auto& t : order) {
    OJson j = OJson::object();
    j["uid"] = uid.at(t.get());
    if (!structure) j["name"] = t->get_name();
    j["dim"] = t->get_dim();
    j["stride"] = t->get_stride();
    j["data_type"] = std::string(to_string(t->get_data_type()));
    j["is_virtual"] = t->get_is_virtual();
    j["is_pass_by_value"] = t->get_is_pass_by_value();
    const Scalar& v = t->get_value();
    if (!structure && v.is_set()) {
      if (v.type == t->get_data_type())
        j["value"] = scalar_number(v);
      else
        j["value"] = OJson{{"data_type", std::string(to_string(v.type))}, {"value", scalar_number(v)}};
    }
    if (const auto& r = t->get_ragged_offset()) j["ragged_offset_uid"] = uid.at(r.get());
    if (t->get_reordering_type() != TensorReordering::NONE)
      j["reordering_type"] = std::string(to_string(t->get_reordering_type()));
    tensors.push_back(std::move(j));
  }
  doc["tensors"] = std::move(tensors);

  OJson nodes = OJson::array();
  for (const auto& n : g.nodes()) {
    OJson j;
    OPENDNN_RETURN_IF_ERROR(node_json(*n, structure, uid, j));
    nodes.push_back(std::move(j));
  }
  doc["nodes"] = std::move(nodes);
  return {};
}

}  // namespace opendnn::serialize
