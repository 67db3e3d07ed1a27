// SPDX-License-Identifier: Apache-2.0
// Graph JSON v2 internals shared by the reader and the writer (private to the library).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "opendnn/graph.h"

namespace opendnn::serialize {

using Json = nlohmann::json;           // documents being read (objects keyed by std::map)
using OJson = nlohmann::ordered_json;  // documents being written (fields in a fixed order)

inline constexpr std::string_view kVersion = "2.0";
inline constexpr int kMaxDepth = 64;                       // nesting of arrays and objects
inline constexpr size_t kMaxDocumentBytes = size_t(64) << 20;
inline constexpr size_t kMaxValues = size_t(1) << 22;      // JSON values in one document
inline constexpr size_t kMaxRank = 16;                     // dims and strides of a tensor
inline constexpr size_t kMaxListLength = 4096;             // INT_LIST / FLOAT_LIST attributes
inline constexpr size_t kMaxVariadicInputs = 4096;         // CONCATENATE ports "0", "1", ...
inline constexpr size_t kMaxRaggedChain = 4;               // tensor -> offset -> offset ...

// Parses text into a DOM without recursion and within the limits above. Rejects duplicate keys.
Status parse_document(std::string_view text, Json& out);

// True if s is one of the '|'-separated members of choices.
bool enum_member(const char* choices, std::string_view s);

// Writes a document: compact (no spaces) or pretty (objects indented, short values on one line).
std::string to_text(const OJson& j, bool pretty);

// Builds the document of a graph. structure=true leaves out names and pass-by-value values and
// renumbers tensors canonically (by first use), so it describes exactly what a plan depends on.
Status write_graph(const Graph& g, bool structure, OJson& out);

// What a document describes, ready to be moved into a Graph.
struct ParsedGraph {
  GraphContext ctx;
  std::vector<TensorPtr> free_tensors;  // tensors no node writes, in document order
  std::vector<std::unique_ptr<Node>> nodes;
};
Status read_graph(const Json& doc, ParsedGraph& out);

// 64-bit FNV-1a.
uint64_t fnv1a64(std::string_view bytes);

}  // namespace opendnn::serialize
