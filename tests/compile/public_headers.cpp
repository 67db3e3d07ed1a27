// SPDX-License-Identifier: Apache-2.0
// Compiled with -fno-rtti -fno-exceptions: the public headers must serve consumers built that way.
#include "opendnn/opendnn.h"

namespace {
[[maybe_unused]] opendnn::Status build_a_graph() {
  opendnn::Graph g;
  g.set_io_data_type(opendnn::DataType::HALF);
  auto x = g.tensor(opendnn::TensorAttr().set_name("x").set_dim({2, 8}));
  auto y = g.relu(x, opendnn::NodeAttrs().set_name("act"));
  y->set_output(true);
  return g.validate();
}
}  // namespace
