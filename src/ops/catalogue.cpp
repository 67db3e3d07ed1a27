// SPDX-License-Identifier: Apache-2.0
// Assembles the catalogue from ops.def and the per-family OpDefs.
#include <cstdio>
#include <cstdlib>
#include <string>

#include "opendnn/node.h"
#include "ops/op_defs.h"

namespace opendnn {


namespace {
const OpSpec kSpecs[] = {
#define OPENDNN_OP(e, m, tag, npos, nout) {OpKind::e, tag, #m, npos, nout, &def_##e},
#include "opendnn/ops.def"
#undef OPENDNN_OP
};

struct PointwiseInfo {
  PointwiseMode mode;
  std::string_view name;
  std::string_view method;
  int arity;
};
constexpr PointwiseInfo kPointwise[] = {
#define OPENDNN_PW(e, m, arity) {PointwiseMode::e, #e, #m, arity},
#include "opendnn/pointwise_modes.def"
#undef OPENDNN_PW
};

int index_of(std::span<const PortSpec> ports, std::string_view name) {
  for (size_t i = 0; i < ports.size(); ++i)
    if (name == ports[i].name) return int(i);
  return -1;
}
}  // namespace

int OpSpec::input_index(std::string_view port) const {
  if (variadic()) {
    // Variadic ports are named by position: "0", "1", ...
    if (port.empty() || port.size() > 6) return -1;
    int v = 0;
    for (char c : port) {
      if (c < '0' || c > '9') return -1;
      v = v * 10 + (c - '0');
    }
    return v;
  }
  return index_of(def->inputs, port);
}
int OpSpec::output_index(std::string_view port) const { return index_of(def->outputs, port); }
int OpSpec::attr_index(std::string_view attr) const {
  for (size_t i = 0; i < def->attrs.size(); ++i)
    if (attr == def->attrs[i].name) return int(i);
  return -1;
}

std::span<const OpSpec> all_op_specs() { return kSpecs; }
const OpSpec& op_spec(OpKind k) { return kSpecs[static_cast<size_t>(k)]; }
const OpSpec* op_spec_by_tag(std::string_view tag) {
  for (const auto& s : kSpecs)
    if (tag == s.tag) return &s;
  return nullptr;
}
const OpSpec* op_spec_by_method(std::string_view method) {
  for (const auto& s : kSpecs)
    if (method == s.method) return &s;
  return nullptr;
}

int pointwise_arity(PointwiseMode m) { return kPointwise[static_cast<size_t>(m)].arity; }
std::string_view to_string(PointwiseMode m) { return kPointwise[static_cast<size_t>(m)].name; }
std::string_view pointwise_method(PointwiseMode m) { return kPointwise[static_cast<size_t>(m)].method; }
std::optional<PointwiseMode> pointwise_mode_from_string(std::string_view s) {
  for (const auto& p : kPointwise)
    if (p.name == s) return p.mode;
  return std::nullopt;
}

}  // namespace opendnn
