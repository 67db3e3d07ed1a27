// SPDX-License-Identifier: Apache-2.0
// Helpers shared by the inference/validation rule tests (tests/cpp/test_ops_*.cpp).
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "opendnn/graph.h"

namespace opendnn::test {

using Dims = std::vector<int64_t>;

// A graph input with a name, dims, a data type and (optionally) strides.
inline TensorPtr input(Graph& g, const std::string& name, Dims dims, DataType t = DataType::FLOAT, Dims strides = {}) {
  TensorAttr a;
  a.set_name(name).set_dim(std::move(dims)).set_data_type(t);
  if (!strides.empty()) a.set_stride(std::move(strides));
  return g.tensor(a);
}

// Validates and expects a failure with `code` whose message names the node (`method "name"`) and
// contains every fragment.
inline void expect_fail(Graph& g, ErrorCode code, const std::string& node,
                        std::initializer_list<std::string> fragments = {}) {
  Status s = g.validate();
  ASSERT_TRUE(s.is_bad()) << "validate() passed but should fail with " << to_string(code);
  EXPECT_EQ(s.code(), code) << s.to_string();
  EXPECT_NE(s.message().find(node), std::string::npos) << "message does not name " << node << ": " << s.message();
  for (const auto& f : fragments) EXPECT_NE(s.message().find(f), std::string::npos) << "missing '" << f << "' in: " << s.message();
}
inline void expect_fail(Graph& g, ErrorCode code, const std::string& node, const std::string& what) {
  expect_fail(g, code, node, {what});
}

}  // namespace opendnn::test

#define EXPECT_VALID(g)                          \
  do {                                           \
    ::opendnn::Status s_ = (g).validate();       \
    ASSERT_TRUE(s_.is_good()) << s_.to_string(); \
  } while (0)
