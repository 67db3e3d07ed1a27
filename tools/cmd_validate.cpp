// SPDX-License-Identifier: Apache-2.0
// opendnn validate FILE.json: infers every tensor's dims, strides and type, or prints the error.
#include <cstdio>
#include <memory>
#include <string>

#include "commands.h"
#include "graph_io.h"

namespace opendnn::tools {

namespace {
struct ValidateOptions {
  std::string file;
  bool json = false;
  bool quiet = false;
};

int run_validate(const ValidateOptions& o) {
  Graph g;
  if (!load_graph_file(o.file, g)) return 1;
  Status s = g.validate();
  if (s.is_bad()) {
    std::fprintf(stderr, "error: %s: %s\n", o.file.c_str(), s.to_string().c_str());
    return 1;
  }
  if (o.json) {
    std::fputs(g.serialize().c_str(), stdout);
    return 0;
  }
  if (!o.quiet) {
    std::printf("%-5s %-28s %-8s %-9s %-22s %s\n", "uid", "name", "role", "type", "dims", "strides");
    for (const auto& t : tensors_by_uid(g)) {
      std::printf("%-5lld %-28s %-8s %-9s %-22s %s\n", static_cast<long long>(t->get_uid()), t->get_name().c_str(),
                  tensor_role(*t), std::string(to_string(t->get_data_type())).c_str(), dims_text(t->get_dim()).c_str(),
                  dims_text(t->get_stride()).c_str());
    }
  }
  std::printf("OK: %s: %zu nodes, %zu tensors, key %016llx\n", o.file.c_str(), g.nodes().size(), g.tensors().size(),
              static_cast<unsigned long long>(g.key()));
  return 0;
}
}  // namespace

void add_validate_command(CLI::App& app) {
  auto o = std::make_shared<ValidateOptions>();
  CLI::App* cmd = app.add_subcommand("validate", "Read a Graph JSON v2 file, infer every tensor and check every rule");
  cmd->add_option("file", o->file, "graph file (- for stdin)")->required();
  cmd->add_flag("--json", o->json, "print the validated graph as JSON instead of the table");
  cmd->add_flag("-q,--quiet", o->quiet, "print only the summary line");
  cmd->callback([o] {
    if (int rc = run_validate(*o)) throw CLI::RuntimeError(rc);
  });
}

}  // namespace opendnn::tools
