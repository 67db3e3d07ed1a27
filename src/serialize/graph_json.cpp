// SPDX-License-Identifier: Apache-2.0
// Placeholder until Graph JSON v2 lands.
#include "opendnn/graph.h"

namespace opendnn {

Status Graph::serialize(std::string&, bool) const {
  return {ErrorCode::UNSUPPORTED_GRAPH_FORMAT, "not supported: serialization is not implemented yet"};
}
std::string Graph::serialize(bool) const { return {}; }
Status Graph::deserialize(std::string_view) {
  return {ErrorCode::UNSUPPORTED_GRAPH_FORMAT, "not supported: deserialization is not implemented yet"};
}
uint64_t Graph::key() const { return 0; }

}  // namespace opendnn
