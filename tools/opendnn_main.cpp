// SPDX-License-Identifier: Apache-2.0
// The `opendnn` command-line tool: a CLI11 dispatcher over the subcommands of commands.h.
// A subcommand reports failure by throwing CLI::RuntimeError(exit_code) from its callback.
#include <cstdio>
#include <exception>
#include <new>
#include <string>

#include <CLI/CLI.hpp>

#include "commands.h"
#include "opendnn/opendnn.h"

namespace opendnn::tools {

// Defaults until tools/cmd_run.cpp and tools/cmd_demo.cpp define these (their definitions win).
namespace {
void add_unsupported(CLI::App& app, const char* name, const char* what) {
  CLI::App* cmd = app.add_subcommand(name, std::string(what) + " (not supported yet)");
  cmd->allow_extras();
  cmd->callback([name] {
    std::fprintf(stderr, "opendnn %s: not supported yet\n", name);
    throw CLI::RuntimeError(1);
  });
}
}  // namespace

__attribute__((weak)) void add_run_command(CLI::App& app) { add_unsupported(app, "run", "Run a graph on an engine"); }
__attribute__((weak)) void add_demo_command(CLI::App& app) { add_unsupported(app, "demo", "The opendnn demo"); }

}  // namespace opendnn::tools

int main(int argc, char** argv) {
  CLI::App app{"opendnn: a graph API for deep-learning primitives (Graph JSON v2 tools)", "opendnn"};
  app.set_version_flag("--version", std::string("opendnn ") + opendnn::kVersion);
  app.require_subcommand(1);
  opendnn::tools::add_validate_command(app);
  opendnn::tools::add_print_command(app);
  opendnn::tools::add_dot_command(app);
  opendnn::tools::add_run_command(app);
  opendnn::tools::add_demo_command(app);
  try {
    CLI11_PARSE(app, argc, argv);
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "opendnn: out of memory\n");
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "opendnn: %s\n", e.what());
    return 2;
  }
  return 0;
}
