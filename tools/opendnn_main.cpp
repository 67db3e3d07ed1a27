// SPDX-License-Identifier: Apache-2.0
// The `opendnn` command-line tool (subcommands land with the JSON reader).
#include <cstdio>

#include "opendnn/opendnn.h"

int main() {
  std::printf("opendnn %s\n", opendnn::kVersion);
  return 0;
}
