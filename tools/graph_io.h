// SPDX-License-Identifier: Apache-2.0
// Helpers shared by the tool's subcommands: read a Graph JSON v2 file, format dims and roles.
#pragma once

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "opendnn/graph.h"
#include "serialize/file_read.h"
#include "serialize/json_detail.h"

namespace opendnn::tools {

// Reads FILE ("-" for stdin) into g, at most the size limit of a Graph JSON document (an endless
// stream such as /dev/zero stops there). Prints the error and returns false on failure.
inline bool load_graph_file(const std::string& path, Graph& g) {
  std::string text;
  serialize::InputFile in;
  Status s;
  if (path == "-") in.adopt(0, "<stdin>");
  else s = in.open(path, /*regular_only=*/false);
  if (s.is_good()) s = in.read_all(serialize::kMaxDocumentBytes, "Graph JSON document", text);
  if (s.is_bad()) {
    std::fprintf(stderr, "error: %s\n", s.message().c_str());
    return false;
  }
  s = g.deserialize(text);
  if (s.is_bad()) {
    std::fprintf(stderr, "error: %s: %s\n", path.c_str(), s.to_string().c_str());
    return false;
  }
  return true;
}

inline std::string dims_text(const std::vector<int64_t>& d) {
  std::string s = "[";
  for (size_t i = 0; i < d.size(); ++i) s += (i ? "," : "") + std::to_string(d[i]);
  return s + "]";
}

// input / output / virtual / scalar (pass-by-value) / unused.
inline const char* tensor_role(const TensorAttr& t) {
  if (t.get_is_pass_by_value()) return "scalar";
  if (t.is_produced()) return t.get_is_virtual() ? "virtual" : "output";
  return t.get_is_virtual() ? "virtual?" : "input";
}

inline std::string tensor_ref(const TensorPtr& t) {
  if (!t) return "-";
  std::string s = t->get_name().empty() ? std::string("#") : t->get_name() + "#";
  return s + std::to_string(t->get_uid());
}

// Tensors ascending by uid (after validate() or assign_uids() every tensor has one).
inline std::vector<TensorPtr> tensors_by_uid(const Graph& g) {
  auto all = g.tensors();
  std::stable_sort(all.begin(), all.end(), [](const TensorPtr& a, const TensorPtr& b) { return a->get_uid() < b->get_uid(); });
  return all;
}

// Non-default attributes as "name=value" pairs, in catalogue order.
inline std::string attrs_text(const Node& n) {
  std::string out;
  const auto& specs = n.spec().def->attrs;
  for (size_t i = 0; i < specs.size() && i < n.attrs().size(); ++i) {
    const AttrValue& v = n.attrs()[i];
    if (!v.is_set() || v == specs[i].default_value) continue;
    std::string val;
    if (auto p = std::get_if<bool>(&v)) val = *p ? "true" : "false";
    else if (auto p = std::get_if<int64_t>(&v)) val = std::to_string(*p);
    else if (auto p = std::get_if<double>(&v)) {
      char buf[64];
      std::snprintf(buf, sizeof buf, "%g", *p);
      val = buf;
    } else if (auto p = std::get_if<std::string>(&v)) val = *p;
    else if (auto p = std::get_if<std::vector<int64_t>>(&v)) val = dims_text(*p);
    else if (auto p = std::get_if<std::vector<double>>(&v)) {
      val = "[";
      for (size_t k = 0; k < p->size(); ++k) {
        char buf[64];
        std::snprintf(buf, sizeof buf, "%s%g", k ? "," : "", (*p)[k]);
        val += buf;
      }
      val += "]";
    }
    out += (out.empty() ? "" : " ") + std::string(specs[i].name) + "=" + val;
  }
  return out;
}

// Input port names of a node, aligned with its inputs() (variadic ports are "0", "1", ...).
inline std::string input_port_name(const Node& n, size_t i) {
  if (n.spec().variadic()) return std::to_string(i);
  return n.spec().def->inputs[i].name;
}

}  // namespace opendnn::tools
