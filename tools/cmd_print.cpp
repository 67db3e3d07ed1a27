// SPDX-License-Identifier: Apache-2.0
// opendnn print FILE.json: the graph as readable tables of tensors and nodes.
#include <cstdio>
#include <memory>
#include <string>

#include "commands.h"
#include "graph_io.h"

namespace opendnn::tools {

namespace {
struct PrintOptions {
  std::string file;
  bool no_validate = false;
};

int run_print(const PrintOptions& o) {
  Graph g;
  if (!load_graph_file(o.file, g)) return 1;
  Status s;
  if (!o.no_validate) s = g.validate();
  if (o.no_validate || s.is_bad()) {
    // Shown as written; give uid-less tensors (fresh outputs) their uids so they can be named.
    (void)g.assign_uids();
  }
  const GraphContext& c = g.context();
  std::printf("graph \"%s\"  io=%s intermediate=%s compute=%s", c.name.c_str(), std::string(to_string(c.io_data_type)).c_str(),
              std::string(to_string(c.intermediate_data_type)).c_str(), std::string(to_string(c.compute_data_type)).c_str());
  if (c.sm_version >= 0) std::printf(" sm_version=%lld", static_cast<long long>(c.sm_version));
  if (c.sm_count >= 0) std::printf(" sm_count=%lld", static_cast<long long>(c.sm_count));
  std::printf("\n\nTensors (%zu)\n", g.tensors().size());
  std::printf("  %-5s %-28s %-8s %-9s %-22s %-18s %s\n", "uid", "name", "role", "type", "dims", "strides", "notes");
  for (const auto& t : tensors_by_uid(g)) {
    std::string notes;
    if (t->get_value().is_set()) {
      char buf[64];
      const Scalar& v = t->get_value();
      if (is_integer(v.type)) std::snprintf(buf, sizeof buf, "value=%lld", static_cast<long long>(v.i));
      else std::snprintf(buf, sizeof buf, "value=%g", v.f);
      notes += buf;
    }
    if (t->get_ragged_offset()) notes += (notes.empty() ? "" : " ") + std::string("ragged_offset=") + tensor_ref(t->get_ragged_offset());
    if (t->get_reordering_type() != TensorReordering::NONE)
      notes += (notes.empty() ? "" : " ") + std::string("reordering=") + std::string(to_string(t->get_reordering_type()));
    std::printf("  %-5lld %-28s %-8s %-9s %-22s %-18s %s\n", static_cast<long long>(t->get_uid()), t->get_name().c_str(),
                tensor_role(*t), std::string(to_string(t->get_data_type())).c_str(), dims_text(t->get_dim()).c_str(),
                dims_text(t->get_stride()).c_str(), notes.c_str());
  }
  std::printf("\nNodes (%zu)\n", g.nodes().size());
  for (size_t i = 0; i < g.nodes().size(); ++i) {
    const Node& n = *g.nodes()[i];
    std::printf("  [%zu] %s \"%s\"", i, n.spec().tag, n.name().c_str());
    if (n.compute_data_type() != DataType::NOT_SET) std::printf(" compute=%s", std::string(to_string(n.compute_data_type())).c_str());
    std::string attrs = attrs_text(n);
    if (!attrs.empty()) std::printf(" {%s}", attrs.c_str());
    std::printf("\n      in: ");
    bool any = false;
    for (size_t p = 0; p < n.inputs().size(); ++p) {
      if (!n.inputs()[p]) continue;
      std::printf("%s%s=%s", any ? " " : "", input_port_name(n, p).c_str(), tensor_ref(n.inputs()[p]).c_str());
      any = true;
    }
    std::printf("\n      out:");
    for (size_t p = 0; p < n.outputs().size(); ++p)
      std::printf(" %s=%s", n.spec().def->outputs[p].name, tensor_ref(n.outputs()[p]).c_str());
    std::printf("\n");
  }
  if (o.no_validate) return 0;
  if (s.is_bad()) {
    std::printf("\nvalidate: %s\n", s.to_string().c_str());
    return 1;
  }
  std::printf("\nvalidate: OK (key %016llx)\n", static_cast<unsigned long long>(g.key()));
  return 0;
}
}  // namespace

void add_print_command(CLI::App& app) {
  auto o = std::make_shared<PrintOptions>();
  CLI::App* cmd = app.add_subcommand("print", "Print a Graph JSON v2 file as tables of tensors and nodes");
  cmd->add_option("file", o->file, "graph file (- for stdin)")->required();
  cmd->add_flag("--no-validate", o->no_validate, "show the graph as written, without inferring shapes");
  cmd->callback([o] {
    if (int rc = run_print(*o)) throw CLI::RuntimeError(rc);
  });
}

}  // namespace opendnn::tools
