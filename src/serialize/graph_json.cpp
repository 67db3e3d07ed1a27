// SPDX-License-Identifier: Apache-2.0
// Graph JSON v2: Graph::serialize / deserialize / key. The document:
//   {"version": "2.0",
//    "context": {name, io_data_type, intermediate_data_type, compute_data_type, sm_count, sm_version},
//    "tensors": [{uid, name, dim, stride, data_type, is_virtual, is_pass_by_value, value?,
//                 ragged_offset_uid?, reordering_type?}, ...]          (ascending uid)
//    "nodes":   [{tag, name, compute_data_type, attributes: {non-default ones},
//                 inputs: {port: uid}, outputs: {port: uid}}, ...]}   (graph order)
// See json_read.cpp and json_write.cpp; nothing here throws.
#include <exception>
#include <new>

#include "opendnn/graph.h"
#include "serialize/json_detail.h"

namespace opendnn {

Status Graph::serialize(std::string& out, bool serialize_structure) const {
  try {
    serialize::OJson doc;
    OPENDNN_RETURN_IF_ERROR(serialize::write_graph(*this, serialize_structure, doc));
    out = serialize::to_text(doc, /*pretty=*/true);
    return {};
  } catch (const std::bad_alloc&) {
    return {ErrorCode::INVALID_VALUE, "serialize: out of memory"};
  } catch (const std::exception& e) {
    return {ErrorCode::INVALID_VALUE, std::string("serialize: ") + e.what()};
  }
}

std::string Graph::serialize(bool serialize_structure) const {
  std::string s;
  if (serialize(s, serialize_structure).is_bad()) return {};
  return s;
}

Status Graph::deserialize(std::string_view json) {
  try {
    serialize::Json doc;
    OPENDNN_RETURN_IF_ERROR(serialize::parse_document(json, doc));
    serialize::ParsedGraph parsed;
    OPENDNN_RETURN_IF_ERROR(serialize::read_graph(doc, parsed));
    Graph fresh;
    fresh.ctx_ = std::move(parsed.ctx);
    fresh.user_tensors_ = std::move(parsed.free_tensors);
    fresh.nodes_ = std::move(parsed.nodes);
    fresh.settings_ = settings_;  // the graph's target, kernel cache and note filters stay
    *this = std::move(fresh);
    return {};
  } catch (const std::bad_alloc&) {
    return {ErrorCode::UNSUPPORTED_GRAPH_FORMAT, "deserialize: out of memory"};
  } catch (const std::exception& e) {
    return {ErrorCode::UNSUPPORTED_GRAPH_FORMAT, std::string("deserialize: ") + e.what()};
  }
}

uint64_t Graph::key() const {
  // FNV-1a 64 of the compact structure document: the same on every process and machine.
  try {
    serialize::OJson doc;
    Status s = serialize::write_graph(*this, /*structure=*/true, doc);
    if (s.is_bad()) return serialize::fnv1a64("unserializable graph: " + s.message());
    return serialize::fnv1a64(serialize::to_text(doc, /*pretty=*/false));
  } catch (...) {
    return 0;
  }
}

}  // namespace opendnn
