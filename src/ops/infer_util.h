// SPDX-License-Identifier: Apache-2.0
// Helpers shared by the ops' inference and validation rules.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "opendnn/graph.h"
#include "opendnn/node.h"

namespace opendnn::ops {

std::string dims_str(const std::vector<int64_t>& d);

// Sets an output's dims (and packed strides) if the user left them empty; otherwise checks that the
// user's dims equal the inferred ones (SHAPE_DEDUCTION_FAILED naming the port).
Status set_dims(Node& n, std::string_view out_port, const std::vector<int64_t>& dims);
// Sets an output's data type if unset.
void default_type(Node& n, std::string_view out_port, DataType t);

// Fails unless the tensor on `port` has exactly `rank` dims.
Status require_rank(const Node& n, std::string_view port, size_t rank);
// Fails unless the tensor on `port` has rank in [lo, hi].
Status require_rank_between(const Node& n, std::string_view port, size_t lo, size_t hi);
// Fails unless the tensor on `port` has one of the data types.
Status require_type(const Node& n, std::string_view port, std::initializer_list<DataType> allowed);

// Numpy-style broadcast of equal-rank shapes (a dim of 1 stretches); nullopt if incompatible.
std::optional<std::vector<int64_t>> broadcast(const std::vector<int64_t>& a, const std::vector<int64_t>& b);
// True if `small` broadcasts to `big` (same rank, each dim equal or 1).
bool broadcasts_to(const std::vector<int64_t>& small, const std::vector<int64_t>& big);

// The compute type a node runs in: its own, else the graph's, else FLOAT.
DataType compute_type(const Node& n, const GraphContext& ctx);

}  // namespace opendnn::ops
