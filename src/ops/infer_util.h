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

// ---- added for the conv/layout/reduction/norm/misc families (append-only) ----

// The dims of the tensor on an input port (empty if the port is unset).
const std::vector<int64_t>& in_dims(const Node& n, std::string_view port);
// Fails (SHAPE_DEDUCTION_FAILED) unless the tensor on `port`, if set, holds exactly one value.
Status require_scalar(const Node& n, std::string_view port);
// require_scalar, and a pass-by-value value must be a number >= 0 (INVALID_VALUE; a negative epsilon
// makes the variance plus epsilon negative and the output NaN). A value in device memory is not seen.
Status require_epsilon(const Node& n, std::string_view port);
// Fails (SHAPE_DEDUCTION_FAILED) unless the tensor on `port`, if set, has exactly `dims`;
// `what` describes the expected shape ("[1,C,1,1] (per channel)").
Status require_dims(const Node& n, std::string_view port, const std::vector<int64_t>& dims, std::string_view what = {});
// Fails (GRAPH_NOT_SUPPORTED) unless the output on `port` has one of the data types (NOT_SET passes).
Status require_out_type(const Node& n, std::string_view port, std::initializer_list<DataType> allowed);
// Reads a per-spatial-axis INT_LIST attribute: empty means `fallback` on every axis; otherwise it must
// have `count` values, each >= `min_value` (INVALID_VALUE naming the attribute).
Status spatial_attr(const Node& n, std::string_view attr, size_t count, int64_t fallback, int64_t min_value,
                    std::vector<int64_t>& out);
// Output length of a sliding window (convolution, pooling): floor((in + pre + post - eff) / stride) + 1
// with eff = dilation * (window - 1) + 1; 0 when the window does not fit. nullopt when a term
// overflows int64 or stride < 1.
std::optional<int64_t> window_out_len(int64_t in, int64_t pre, int64_t post, int64_t window, int64_t stride,
                                      int64_t dilation);
// The dilated window extent dilation * (window - 1) + 1, or nullopt on int64 overflow.
std::optional<int64_t> dilated_extent(int64_t window, int64_t dilation);
// True if an output tensor was marked as a graph output by the user (set_output(true)).
bool is_user_output(const Node& n, std::string_view out_port);

// ---- added for the sdpa/gdn/causal_conv1d families (append-only) ----

// The tensor on a port, or null when it is unset or the op has no such port (never aborts, unlike
// Node::in/out), so rules shared by op variants with different port lists can probe freely.
const TensorPtr& input_if(const Node& n, std::string_view port);
const TensorPtr& output_if(const Node& n, std::string_view port);
// "HALF, BFLOAT16"
std::string types_str(std::initializer_list<DataType> types);
inline int64_t ceil_div(int64_t a, int64_t b) { return b > 0 ? a / b + (a % b > 0) : 0; }
// Packed strides for `dims` that keep the axis order of a tensor with strides `like_strides`
// (largest stride outermost; equal strides keep axis order), so an output follows its input's layout
// (BSHD in, BSHD out). Row-major when the ranks differ.
std::vector<int64_t> strides_like(const std::vector<int64_t>& like_strides, const std::vector<int64_t>& dims);
// set_dims, then, if the output has no strides yet, strides_like(like).
Status set_dims_like(Node& n, std::string_view out_port, const std::vector<int64_t>& dims, const TensorAttr& like);
// set_dims, then, if the output has no strides yet: like's strides verbatim when like has these dims and
// its strides address each element once (cuDNN Frontend's rule for pointwise and norm outputs: a view's
// result can be written back into the view); else strides_like(like).
Status set_dims_keeping(Node& n, std::string_view out_port, const std::vector<int64_t>& dims, const TensorAttr& like);
// An optional output that this node's configuration does not produce (dBias without bias...): it gets
// zero-size dims of `rank` (all 0, needing no memory). Fails with ATTRIBUTE_NOT_SET, naming `why`, when
// the user marked it as a graph output.
Status set_absent(Node& n, std::string_view out_port, size_t rank, std::string_view why);
// Fails (SHAPE_DEDUCTION_FAILED) unless the tensor on input `port`, if present, has exactly `dims`;
// `what` describes the expected shape ("[B,1,1,1]").
Status expect_dims(const Node& n, std::string_view port, const std::vector<int64_t>& dims, std::string_view what = {});
// Fails (SHAPE_DEDUCTION_FAILED) unless the tensor on input `port`, if present, holds one value.
Status expect_one_value(const Node& n, std::string_view port);
// Fails (GRAPH_NOT_SUPPORTED) unless the tensor on input `port`, if present, has one of the types.
Status expect_type(const Node& n, std::string_view port, std::initializer_list<DataType> allowed);
// Fails (GRAPH_NOT_SUPPORTED) unless the output on `port`, if present and typed, has one of the types.
Status expect_out_type(const Node& n, std::string_view port, std::initializer_list<DataType> allowed);

}  // namespace opendnn::ops
