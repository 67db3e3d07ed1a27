// SPDX-License-Identifier: Apache-2.0
// Subcommands of the `opendnn` tool; each lives in its own tools/cmd_<name>.cpp.
#pragma once

#include <CLI/CLI.hpp>

namespace opendnn::tools {
void add_validate_command(CLI::App& app);  // opendnn validate FILE.json
void add_print_command(CLI::App& app);     // opendnn print FILE.json
void add_dot_command(CLI::App& app);       // opendnn dot FILE.json
void add_run_command(CLI::App& app);       // opendnn run FILE.json [--engine] [--inputs] [--plans]
void add_demo_command(CLI::App& app);      // opendnn demo: the main job of `make demo`
}  // namespace opendnn::tools
