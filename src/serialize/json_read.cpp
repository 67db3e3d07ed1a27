// SPDX-License-Identifier: Apache-2.0
// Graph JSON v2 reader: checks the document against the op catalogue and names the JSON path of
// the first problem (`nodes[3].inputs.Q: no tensor with uid 17`).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <unordered_map>
#include <unordered_set>

#include "serialize/json_detail.h"

namespace opendnn::serialize {

namespace {

constexpr ErrorCode kFormat = ErrorCode::UNSUPPORTED_GRAPH_FORMAT;
constexpr ErrorCode kValue = ErrorCode::INVALID_VALUE;

Status fail(ErrorCode code, const std::string& path, const std::string& what) {
  return {code, (path.empty() ? std::string("(document)") : path) + ": " + what};
}

// A key as it appears in a path; long or odd keys are shortened so messages stay readable.
std::string key_text(const std::string& k) {
  std::string out;
  for (char c : k.substr(0, 64)) out += (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) ? '?' : c;
  if (k.size() > 64) out += "...";
  return out;
}

std::string join(const std::string& path, const std::string& key) {
  return path.empty() ? key_text(key) : path + "." + key_text(key);
}
std::string at(const std::string& path, size_t i) { return path + "[" + std::to_string(i) + "]"; }

const char* kind(const Json& j) {
  switch (j.type()) {
    case Json::value_t::null: return "null";
    case Json::value_t::boolean: return "a bool";
    case Json::value_t::number_integer:
    case Json::value_t::number_unsigned: return "an integer";
    case Json::value_t::number_float: return "a number";
    case Json::value_t::string: return "a string";
    case Json::value_t::array: return "an array";
    case Json::value_t::object: return "an object";
    default: return "a binary value";
  }
}

Status wrong_type(const std::string& path, const char* expected, const Json& j) {
  return fail(kFormat, path, std::string("expected ") + expected + ", found " + kind(j));
}

bool as_int64(const Json& j, int64_t& out) {
  if (j.is_number_unsigned()) {
    auto u = j.get<uint64_t>();
    if (u > uint64_t(std::numeric_limits<int64_t>::max())) return false;
    out = int64_t(u);
    return true;
  }
  if (j.is_number_integer()) {
    out = j.get<int64_t>();
    return true;
  }
  return false;
}

Status read_int(const Json& j, const std::string& path, int64_t& out) {
  if (j.is_number_unsigned() && !as_int64(j, out)) return fail(kFormat, path, "integer does not fit in int64");
  if (!as_int64(j, out)) return wrong_type(path, "an integer", j);
  return {};
}

// A number, or one of the strings "nan", "inf", "-inf" (JSON has no literal for them).
Status read_number(const Json& j, const std::string& path, double& out) {
  if (j.is_number()) {
    out = j.get<double>();
    return {};
  }
  if (j.is_string()) {
    const auto& s = j.get_ref<const std::string&>();
    if (s == "nan") out = std::numeric_limits<double>::quiet_NaN();
    else if (s == "inf") out = std::numeric_limits<double>::infinity();
    else if (s == "-inf") out = -std::numeric_limits<double>::infinity();
    else return fail(kFormat, path, "expected a number (or \"nan\", \"inf\", \"-inf\"), found the string \"" + key_text(s) + "\"");
    return {};
  }
  return wrong_type(path, "a number", j);
}

Status read_bool(const Json& j, const std::string& path, bool& out) {
  if (!j.is_boolean()) return wrong_type(path, "a bool", j);
  out = j.get<bool>();
  return {};
}

Status read_string(const Json& j, const std::string& path, std::string& out) {
  if (!j.is_string()) return wrong_type(path, "a string", j);
  out = j.get<std::string>();
  return {};
}

Status read_int_list(const Json& j, const std::string& path, size_t max_len, std::vector<int64_t>& out) {
  if (!j.is_array()) return wrong_type(path, "an array of integers", j);
  if (j.size() > max_len)
    return fail(kFormat, path, "has " + std::to_string(j.size()) + " elements, at most " + std::to_string(max_len) + " allowed");
  out.clear();
  for (size_t i = 0; i < j.size(); ++i) {
    int64_t v;
    OPENDNN_RETURN_IF_ERROR(read_int(j[i], at(path, i), v));
    out.push_back(v);
  }
  return {};
}

Status read_float_list(const Json& j, const std::string& path, std::vector<double>& out) {
  if (!j.is_array()) return wrong_type(path, "an array of numbers", j);
  if (j.size() > kMaxListLength)
    return fail(kFormat, path, "has " + std::to_string(j.size()) + " elements, at most " + std::to_string(kMaxListLength) + " allowed");
  out.clear();
  for (size_t i = 0; i < j.size(); ++i) {
    double v;
    OPENDNN_RETURN_IF_ERROR(read_number(j[i], at(path, i), v));
    out.push_back(v);
  }
  return {};
}

Status read_data_type(const Json& j, const std::string& path, DataType& out) {
  std::string s;
  OPENDNN_RETURN_IF_ERROR(read_string(j, path, s));
  auto t = data_type_from_string(s);
  if (!t) return fail(kValue, path, "unknown data type \"" + key_text(s) + "\"");
  out = *t;
  return {};
}

Status check_object(const Json& j, const std::string& path, std::initializer_list<std::string_view> fields) {
  if (!j.is_object()) return wrong_type(path, "an object", j);
  for (auto it = j.begin(); it != j.end(); ++it) {
    bool known = false;
    for (auto f : fields) known = known || it.key() == f;
    if (!known) return fail(kFormat, join(path, it.key()), "unknown field");
  }
  return {};
}

const Json* field(const Json& obj, const char* name) {
  auto it = obj.find(name);
  return it == obj.end() ? nullptr : &*it;
}

// "A|B|C|" -> "A, B, C".
std::string choices_text(const char* choices) {
  std::string out;
  std::string_view c = choices ? choices : "";
  size_t pos = 0;
  while (pos < c.size()) {
    size_t bar = c.find('|', pos);
    if (bar == std::string_view::npos) bar = c.size();
    if (bar > pos) out += (out.empty() ? "" : ", ") + std::string(c.substr(pos, bar - pos));
    pos = bar + 1;
  }
  return out;
}

std::string port_list(std::span<const PortSpec> ports) {
  std::string s;
  for (const auto& p : ports) s += (s.empty() ? "" : ", ") + std::string(p.name);
  return s;
}

std::string attr_list(std::span<const AttrSpec> attrs) {
  std::string s;
  for (const auto& a : attrs) s += (s.empty() ? "" : ", ") + std::string(a.name);
  return s.empty() ? "none" : s;
}

Status read_context(const Json& j, const std::string& path, GraphContext& ctx) {
  OPENDNN_RETURN_IF_ERROR(check_object(j, path, {"name", "io_data_type", "intermediate_data_type", "compute_data_type",
                                                 "sm_count", "sm_version"}));
  if (auto v = field(j, "name")) OPENDNN_RETURN_IF_ERROR(read_string(*v, join(path, "name"), ctx.name));
  if (auto v = field(j, "io_data_type")) OPENDNN_RETURN_IF_ERROR(read_data_type(*v, join(path, "io_data_type"), ctx.io_data_type));
  if (auto v = field(j, "intermediate_data_type"))
    OPENDNN_RETURN_IF_ERROR(read_data_type(*v, join(path, "intermediate_data_type"), ctx.intermediate_data_type));
  if (auto v = field(j, "compute_data_type"))
    OPENDNN_RETURN_IF_ERROR(read_data_type(*v, join(path, "compute_data_type"), ctx.compute_data_type));
  if (auto v = field(j, "sm_count")) OPENDNN_RETURN_IF_ERROR(read_int(*v, join(path, "sm_count"), ctx.sm_count));
  if (auto v = field(j, "sm_version")) OPENDNN_RETURN_IF_ERROR(read_int(*v, join(path, "sm_version"), ctx.sm_version));
  return {};
}

Status read_scalar_number(const Json& j, const std::string& path, DataType type, Scalar& out) {
  out = Scalar{};
  out.type = type;
  if (is_integer(type)) {
    OPENDNN_RETURN_IF_ERROR(read_int(j, path, out.i));
    out.f = double(out.i);
  } else if (is_floating(type)) {
    OPENDNN_RETURN_IF_ERROR(read_number(j, path, out.f));
  } else {
    return fail(kValue, path, "a pass-by-value scalar needs a data type");
  }
  return {};
}

// "value": 0.5 (typed by the tensor's data_type) or {"data_type": "FLOAT", "value": 0.5}.
Status read_value(const Json& j, const std::string& path, DataType tensor_type, Scalar& out) {
  if (j.is_object()) {
    OPENDNN_RETURN_IF_ERROR(check_object(j, path, {"data_type", "value"}));
    auto t = field(j, "data_type");
    auto v = field(j, "value");
    if (!t) return fail(kFormat, join(path, "data_type"), "missing");
    if (!v) return fail(kFormat, join(path, "value"), "missing");
    DataType type;
    OPENDNN_RETURN_IF_ERROR(read_data_type(*t, join(path, "data_type"), type));
    return read_scalar_number(*v, join(path, "value"), type, out);
  }
  DataType type = tensor_type;
  if (type == DataType::NOT_SET) type = (j.is_number_integer()) ? DataType::INT64 : DataType::FLOAT;
  return read_scalar_number(j, path, type, out);
}

Status read_attr(const Json& j, const std::string& path, const AttrSpec& spec, AttrValue& out) {
  if (j.is_null()) {
    out = AttrValue{};
    return {};
  }
  switch (spec.type) {
    case AttrType::BOOL: {
      bool b;
      OPENDNN_RETURN_IF_ERROR(read_bool(j, path, b));
      out = b;
      return {};
    }
    case AttrType::INT: {
      int64_t i;
      OPENDNN_RETURN_IF_ERROR(read_int(j, path, i));
      out = i;
      return {};
    }
    case AttrType::FLOAT: {
      double d;
      OPENDNN_RETURN_IF_ERROR(read_number(j, path, d));
      out = d;
      return {};
    }
    case AttrType::ENUM:
    case AttrType::STRING: {
      std::string s;
      OPENDNN_RETURN_IF_ERROR(read_string(j, path, s));
      if (spec.type == AttrType::ENUM && !enum_member(spec.choices, s))
        return fail(kValue, path, "\"" + key_text(s) + "\" is not one of " + choices_text(spec.choices));
      out = std::move(s);
      return {};
    }
    case AttrType::INT_LIST: {
      std::vector<int64_t> v;
      OPENDNN_RETURN_IF_ERROR(read_int_list(j, path, kMaxListLength, v));
      out = std::move(v);
      return {};
    }
    case AttrType::FLOAT_LIST: {
      std::vector<double> v;
      OPENDNN_RETURN_IF_ERROR(read_float_list(j, path, v));
      out = std::move(v);
      return {};
    }
  }
  return fail(kFormat, path, "attribute of an unknown type");
}

struct TensorTable {
  std::unordered_map<int64_t, TensorPtr> by_uid;
  Status lookup(const Json& j, const std::string& path, TensorPtr& out) const {
    int64_t uid;
    if (!as_int64(j, uid)) return wrong_type(path, "a tensor uid (an integer)", j);
    auto it = by_uid.find(uid);
    if (it == by_uid.end()) return fail(kFormat, path, "no tensor with uid " + std::to_string(uid));
    out = it->second;
    return {};
  }
};

Status read_subgraphs(const Json& j, const std::string& path, const TensorTable& table, Node& owner);

Status read_node(const Json& j, const std::string& path, size_t index, const TensorTable& table,
                 std::unique_ptr<Node>& out, bool in_subgraph = false) {
  OPENDNN_RETURN_IF_ERROR(
      check_object(j, path, {"tag", "name", "compute_data_type", "attributes", "inputs", "outputs", "subgraphs"}));
  auto tag_j = field(j, "tag");
  if (!tag_j) return fail(kFormat, join(path, "tag"), "missing");
  std::string tag;
  OPENDNN_RETURN_IF_ERROR(read_string(*tag_j, join(path, "tag"), tag));
  const OpSpec* spec = op_spec_by_tag(tag);
  if (!spec) return fail(kFormat, join(path, "tag"), "unknown op tag \"" + key_text(tag) + "\"");

  std::string name = std::string(spec->method) + "_" + std::to_string(index);
  if (auto v = field(j, "name")) OPENDNN_RETURN_IF_ERROR(read_string(*v, join(path, "name"), name));
  auto node = std::make_unique<Node>(spec->kind, name);
  if (auto v = field(j, "compute_data_type")) {
    DataType t;
    OPENDNN_RETURN_IF_ERROR(read_data_type(*v, join(path, "compute_data_type"), t));
    node->set_compute_data_type(t);
  }

  if (auto attrs = field(j, "attributes")) {
    std::string apath = join(path, "attributes");
    if (!attrs->is_object()) return wrong_type(apath, "an object", *attrs);
    for (auto it = attrs->begin(); it != attrs->end(); ++it) {
      int i = spec->attr_index(it.key());
      if (i < 0)
        return fail(kFormat, join(apath, it.key()),
                    std::string("unknown attribute of ") + spec->tag + " (attributes: " + attr_list(spec->def->attrs) + ")");
      OPENDNN_RETURN_IF_ERROR(read_attr(it.value(), join(apath, it.key()), spec->def->attrs[size_t(i)], node->attrs()[size_t(i)]));
    }
  }

  if (auto ins = field(j, "inputs")) {
    std::string ipath = join(path, "inputs");
    if (!ins->is_object()) return wrong_type(ipath, "an object", *ins);
    if (spec->variadic()) {
      std::vector<TensorPtr> list;
      std::vector<bool> given;
      for (auto it = ins->begin(); it != ins->end(); ++it) {
        int i = spec->input_index(it.key());
        if (i < 0 || std::to_string(i) != it.key() || size_t(i) >= kMaxVariadicInputs)
          return fail(kFormat, join(ipath, it.key()),
                      std::string("unknown input port of ") + spec->tag + " (its ports are \"0\", \"1\", ... up to \"" +
                          std::to_string(kMaxVariadicInputs - 1) + "\")");
        if (size_t(i) >= list.size()) {
          list.resize(size_t(i) + 1);
          given.resize(size_t(i) + 1, false);
        }
        given[size_t(i)] = true;
        if (!it.value().is_null()) OPENDNN_RETURN_IF_ERROR(table.lookup(it.value(), join(ipath, it.key()), list[size_t(i)]));
      }
      for (size_t i = 0; i < given.size(); ++i)
        if (!given[i]) return fail(kFormat, join(ipath, std::to_string(i)), "missing (variadic ports are numbered without gaps)");
      node->inputs() = std::move(list);
    } else {
      for (auto it = ins->begin(); it != ins->end(); ++it) {
        int i = spec->input_index(it.key());
        if (i < 0)
          return fail(kFormat, join(ipath, it.key()),
                      std::string("unknown input port of ") + spec->tag + " (ports: " + port_list(spec->def->inputs) + ")");
        if (!it.value().is_null())
          OPENDNN_RETURN_IF_ERROR(table.lookup(it.value(), join(ipath, it.key()), node->inputs()[size_t(i)]));
      }
    }
  }

  std::vector<bool> out_given(spec->def->outputs.size(), false);
  if (auto outs = field(j, "outputs")) {
    std::string opath = join(path, "outputs");
    if (!outs->is_object()) return wrong_type(opath, "an object", *outs);
    for (auto it = outs->begin(); it != outs->end(); ++it) {
      int i = spec->output_index(it.key());
      if (i < 0)
        return fail(kFormat, join(opath, it.key()),
                    std::string("unknown output port of ") + spec->tag + " (ports: " + port_list(spec->def->outputs) + ")");
      out_given[size_t(i)] = true;
      if (!it.value().is_null())
        OPENDNN_RETURN_IF_ERROR(table.lookup(it.value(), join(opath, it.key()), node->outputs()[size_t(i)]));
    }
  }
  // An output port the document leaves out gets a fresh virtual tensor, as the builder would make.
  for (size_t i = 0; i < out_given.size(); ++i) {
    if (out_given[i]) continue;
    auto t = std::make_shared<TensorAttr>();
    t->set_is_virtual(true).set_name(name + "::" + spec->def->outputs[i].name);
    node->outputs()[i] = std::move(t);
  }
  for (const auto& t : node->outputs())
    if (t) t->mark_produced(true);
  if (auto subs = field(j, "subgraphs")) {
    if (in_subgraph) return fail(kFormat, join(path, "subgraphs"), "a sub-graph node cannot hold sub-graphs");
    OPENDNN_RETURN_IF_ERROR(read_subgraphs(*subs, join(path, "subgraphs"), table, *node));
  }
  if (in_subgraph && node->kind() != OpKind::POINTWISE)
    return fail(kFormat, join(path, "tag"), "a sub-graph holds only POINTWISE nodes, not " + key_text(tag));
  out = std::move(node);
  return {};
}

// [{"name", "input", "output", "nodes": [...]}, ...]: the sub-graphs of `owner` (see SubGraph).
Status read_subgraphs(const Json& j, const std::string& path, const TensorTable& table, Node& owner) {
  if (!j.is_array()) return wrong_type(path, "an array", j);
  if (owner.spec().variadic()) return fail(kFormat, path, std::string(owner.spec().tag) + " takes no sub-graphs");
  for (size_t i = 0; i < j.size(); ++i) {
    const std::string sp = at(path, i);
    OPENDNN_RETURN_IF_ERROR(check_object(j[i], sp, {"name", "input", "output", "nodes"}));
    auto sg = std::make_shared<SubGraph>();
    const Json* name = field(j[i], "name");
    const Json* input = field(j[i], "input");
    const Json* output = field(j[i], "output");
    const Json* nodes = field(j[i], "nodes");
    if (!name || !input || !output || !nodes) return fail(kFormat, sp, "needs name, input, output and nodes");
    OPENDNN_RETURN_IF_ERROR(read_string(*name, join(sp, "name"), sg->name));
    if (owner.subgraph(sg->name)) return fail(kFormat, join(sp, "name"), "a second sub-graph named " + key_text(sg->name));
    OPENDNN_RETURN_IF_ERROR(table.lookup(*input, join(sp, "input"), sg->input));
    OPENDNN_RETURN_IF_ERROR(table.lookup(*output, join(sp, "output"), sg->output));
    if (!nodes->is_array()) return wrong_type(join(sp, "nodes"), "an array", *nodes);
    for (size_t k = 0; k < nodes->size(); ++k) {
      std::unique_ptr<Node> sub;
      OPENDNN_RETURN_IF_ERROR(read_node((*nodes)[k], at(join(sp, "nodes"), k), k, table, sub, true));
      sg->nodes.push_back(std::move(sub));
    }
    owner.add_subgraph(std::move(sg));
  }
  return {};
}

}  // namespace

Status read_graph(const Json& doc, ParsedGraph& out) {
  if (!doc.is_object()) return wrong_type("", "an object", doc);
  auto version = field(doc, "version");
  if (!version) return fail(kFormat, "version", "missing (expected \"" + std::string(kVersion) + "\")");
  if (!version->is_string()) return wrong_type("version", "the string \"2.0\"", *version);
  if (version->get_ref<const std::string&>() != kVersion)
    return fail(kFormat, "version", "unsupported version \"" + key_text(version->get<std::string>()) +
                                        "\" (this reader reads \"" + std::string(kVersion) + "\")");
  OPENDNN_RETURN_IF_ERROR(check_object(doc, "", {"version", "context", "tensors", "nodes"}));

  ParsedGraph g;
  if (auto c = field(doc, "context")) OPENDNN_RETURN_IF_ERROR(read_context(*c, "context", g.ctx));

  // Tensors.
  TensorTable table;
  std::vector<TensorPtr> tensors;
  std::unordered_map<int64_t, size_t> index_of_uid;
  struct Ragged {
    size_t tensor;
    const Json* ref;
  };
  std::vector<Ragged> ragged;
  if (auto ts = field(doc, "tensors")) {
    if (!ts->is_array()) return wrong_type("tensors", "an array", *ts);
    for (size_t i = 0; i < ts->size(); ++i) {
      const Json& j = (*ts)[i];
      std::string path = at("tensors", i);
      OPENDNN_RETURN_IF_ERROR(check_object(j, path, {"uid", "name", "dim", "stride", "data_type", "is_virtual",
                                                     "is_pass_by_value", "value", "ragged_offset_uid", "reordering_type"}));
      auto t = std::make_shared<TensorAttr>();
      auto uid_j = field(j, "uid");
      if (!uid_j) return fail(kFormat, join(path, "uid"), "missing (every tensor needs an integer uid)");
      int64_t uid;
      OPENDNN_RETURN_IF_ERROR(read_int(*uid_j, join(path, "uid"), uid));
      auto [it, fresh] = index_of_uid.emplace(uid, i);
      if (!fresh)
        return fail(kFormat, join(path, "uid"),
                    "uid " + std::to_string(uid) + " is already used by " + at("tensors", it->second));
      t->set_uid(uid);
      if (auto v = field(j, "name")) {
        std::string s;
        OPENDNN_RETURN_IF_ERROR(read_string(*v, join(path, "name"), s));
        t->set_name(std::move(s));
      }
      std::vector<int64_t> list;
      if (auto v = field(j, "dim")) {
        OPENDNN_RETURN_IF_ERROR(read_int_list(*v, join(path, "dim"), kMaxRank, list));
        t->set_dim(list);
      }
      if (auto v = field(j, "stride")) {
        OPENDNN_RETURN_IF_ERROR(read_int_list(*v, join(path, "stride"), kMaxRank, list));
        t->set_stride(list);
      }
      if (auto v = field(j, "data_type")) {
        DataType dt;
        OPENDNN_RETURN_IF_ERROR(read_data_type(*v, join(path, "data_type"), dt));
        t->set_data_type(dt);
      }
      bool b;
      if (auto v = field(j, "is_virtual")) {
        OPENDNN_RETURN_IF_ERROR(read_bool(*v, join(path, "is_virtual"), b));
        t->set_is_virtual(b);
      }
      if (auto v = field(j, "value")) {
        Scalar s;
        OPENDNN_RETURN_IF_ERROR(read_value(*v, join(path, "value"), t->get_data_type(), s));
        t->set_value(s);
      }
      if (auto v = field(j, "is_pass_by_value")) {
        OPENDNN_RETURN_IF_ERROR(read_bool(*v, join(path, "is_pass_by_value"), b));
        t->set_is_pass_by_value(b);
      }
      if (auto v = field(j, "reordering_type")) {
        std::string s;
        OPENDNN_RETURN_IF_ERROR(read_string(*v, join(path, "reordering_type"), s));
        auto r = reordering_from_string(s);
        if (!r) return fail(kValue, join(path, "reordering_type"), "unknown reordering \"" + key_text(s) + "\"");
        t->set_reordering_type(*r);
      }
      if (auto v = field(j, "ragged_offset_uid"); v && !v->is_null()) ragged.push_back({i, v});
      table.by_uid.emplace(uid, t);
      tensors.push_back(std::move(t));
    }
  }
  for (const auto& r : ragged) {
    TensorPtr target;
    OPENDNN_RETURN_IF_ERROR(table.lookup(*r.ref, join(at("tensors", r.tensor), "ragged_offset_uid"), target));
    tensors[r.tensor]->set_ragged_offset(std::move(target));
  }
  // Ragged offsets must not form a cycle (a tensor that is, through offsets, its own offset), and
  // chains stay short (an offset tensor is a plain integer tensor; nothing needs deep chains).
  for (size_t i = 0; i < tensors.size(); ++i) {
    std::string why;
    std::vector<const TensorAttr*> chain;
    for (const TensorAttr* t = tensors[i].get(); t && why.empty(); t = t->get_ragged_offset().get()) {
      if (std::find(chain.begin(), chain.end(), t) != chain.end()) why = "ragged offsets form a cycle";
      else if (chain.size() > kMaxRaggedChain) why = "ragged offsets nest deeper than " + std::to_string(kMaxRaggedChain);
      chain.push_back(t);
    }
    if (!why.empty()) {
      for (auto& u : tensors) u->set_ragged_offset(nullptr);  // no cycle may outlive this function
      return fail(kFormat, join(at("tensors", i), "ragged_offset_uid"), why);
    }
  }

  // Nodes.
  std::unordered_set<const TensorAttr*> produced;
  Status status;
  if (auto ns = field(doc, "nodes")) {
    if (!ns->is_array()) status = wrong_type("nodes", "an array", *ns);
    for (size_t i = 0; status.is_good() && i < ns->size(); ++i) {
      std::unique_ptr<Node> node;
      status = read_node((*ns)[i], at("nodes", i), i, table, node);
      if (status.is_bad()) break;
      for (const auto& t : node->outputs())
        if (t) produced.insert(t.get());
      g.nodes.push_back(std::move(node));
    }
  }
  if (status.is_bad()) {
    for (auto& t : tensors) t->set_ragged_offset(nullptr);
    return status;
  }
  for (auto& t : tensors)
    if (!produced.count(t.get())) g.free_tensors.push_back(t);
  out = std::move(g);
  return {};
}

}  // namespace opendnn::serialize
