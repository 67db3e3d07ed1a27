// SPDX-License-Identifier: Apache-2.0
// opendnn dot FILE.json: the graph in Graphviz DOT (tensors are ellipses, ops are boxes).
#include <cstdio>
#include <memory>
#include <string>

#include "commands.h"
#include "graph_io.h"

namespace opendnn::tools {

namespace {
struct DotOptions {
  std::string file;
  bool no_validate = false;
};

std::string escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}

std::string tensor_id(const TensorAttr& t) { return "t" + std::to_string(t.get_uid()); }

int run_dot(const DotOptions& o) {
  Graph g;
  if (!load_graph_file(o.file, g)) return 1;
  Status s;
  if (!o.no_validate) s = g.validate();
  if (o.no_validate || s.is_bad()) (void)g.assign_uids();

  std::string name = g.context().name.empty() ? "graph" : g.context().name;
  std::printf("digraph \"%s\" {\n", escape(name).c_str());
  if (s.is_bad()) std::printf("  // validate: %s\n", escape(s.to_string()).c_str());
  std::printf("  rankdir=TB;\n  node [fontname=\"Helvetica\", fontsize=10];\n  edge [fontname=\"Helvetica\", fontsize=9];\n");
  for (const auto& t : tensors_by_uid(g)) {
    std::string role = tensor_role(*t);
    std::string label = (t->get_name().empty() ? "#" + std::to_string(t->get_uid()) : t->get_name()) + "\n" +
                        std::string(to_string(t->get_data_type())) + " " + dims_text(t->get_dim());
    const char* style = "shape=ellipse";
    if (role == "input") style = "shape=ellipse, style=filled, fillcolor=\"#dbe9f6\"";
    else if (role == "output") style = "shape=ellipse, style=filled, fillcolor=\"#d5f0d5\"";
    else if (role == "virtual") style = "shape=ellipse, style=dashed";
    else if (role == "scalar") {
      style = "shape=note, style=filled, fillcolor=\"#f6f0d5\"";
      const Scalar& v = t->get_value();
      char buf[64];
      if (is_integer(v.type)) std::snprintf(buf, sizeof buf, " = %lld", static_cast<long long>(v.i));
      else std::snprintf(buf, sizeof buf, " = %g", v.f);
      if (v.is_set()) label += buf;
    }
    std::printf("  %s [label=\"%s\", %s];\n", tensor_id(*t).c_str(), escape(label).c_str(), style);
    if (t->get_ragged_offset())
      std::printf("  %s -> %s [style=dotted, label=\"ragged offset\", arrowhead=none];\n",
                  tensor_id(*t->get_ragged_offset()).c_str(), tensor_id(*t).c_str());
  }
  for (size_t i = 0; i < g.nodes().size(); ++i) {
    const Node& n = *g.nodes()[i];
    std::string label = n.name() + "\n" + n.spec().tag;
    std::string attrs = attrs_text(n);
    if (!attrs.empty()) label += "\n" + attrs;
    std::printf("  n%zu [shape=box, style=\"rounded,filled\", fillcolor=\"#eeeeee\", label=\"%s\"];\n", i, escape(label).c_str());
    for (size_t p = 0; p < n.inputs().size(); ++p)
      if (n.inputs()[p])
        std::printf("  %s -> n%zu [label=\"%s\"];\n", tensor_id(*n.inputs()[p]).c_str(), i, escape(input_port_name(n, p)).c_str());
    for (size_t p = 0; p < n.outputs().size(); ++p)
      if (n.outputs()[p])
        std::printf("  n%zu -> %s [label=\"%s\"];\n", i, tensor_id(*n.outputs()[p]).c_str(), n.spec().def->outputs[p].name);
  }
  std::printf("}\n");
  return 0;
}
}  // namespace

void add_dot_command(CLI::App& app) {
  auto o = std::make_shared<DotOptions>();
  CLI::App* cmd = app.add_subcommand("dot", "Write a Graph JSON v2 file as Graphviz DOT (opendnn dot g.json | dot -Tsvg)");
  cmd->add_option("file", o->file, "graph file (- for stdin)")->required();
  cmd->add_flag("--no-validate", o->no_validate, "draw the graph as written, without inferring shapes");
  cmd->callback([o] {
    if (int rc = run_dot(*o)) throw CLI::RuntimeError(rc);
  });
}

}  // namespace opendnn::tools
