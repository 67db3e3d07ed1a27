// SPDX-License-Identifier: Apache-2.0
#include "ops/infer_util.h"

#include <algorithm>
#include <cstdint>
#include "common/checked_math.h"

namespace opendnn::ops {

std::string dims_str(const std::vector<int64_t>& d) {
  std::string s = "[";
  for (size_t i = 0; i < d.size(); ++i) s += (i ? "," : "") + std::to_string(d[i]);
  return s + "]";
}

Status set_dims(Node& n, std::string_view out_port, const std::vector<int64_t>& dims) {
  const TensorPtr& t = n.out(out_port);
  if (t->get_dim().empty()) {
    t->set_dim(dims);
    return {};
  }
  if (t->get_dim() != dims)
    return n.fail(ErrorCode::SHAPE_DEDUCTION_FAILED, "output " + std::string(out_port) + " was given dims " +
                                                         dims_str(t->get_dim()) + " but the op produces " + dims_str(dims));
  return {};
}

void default_type(Node& n, std::string_view out_port, DataType t) {
  const TensorPtr& o = n.out(out_port);
  if (o->get_data_type() == DataType::NOT_SET) o->set_data_type(t);
}

Status require_rank(const Node& n, std::string_view port, size_t rank) {
  const TensorPtr& t = n.in(port);
  if (t && t->get_dim().size() != rank)
    return n.fail(ErrorCode::SHAPE_DEDUCTION_FAILED, "input " + std::string(port) + " must have " + std::to_string(rank) +
                                                         " dims, has " + dims_str(t->get_dim()));
  return {};
}

Status require_rank_between(const Node& n, std::string_view port, size_t lo, size_t hi) {
  const TensorPtr& t = n.in(port);
  if (t && (t->get_dim().size() < lo || t->get_dim().size() > hi))
    return n.fail(ErrorCode::SHAPE_DEDUCTION_FAILED, "input " + std::string(port) + " must have " + std::to_string(lo) +
                                                         " to " + std::to_string(hi) + " dims, has " + dims_str(t->get_dim()));
  return {};
}

Status require_type(const Node& n, std::string_view port, std::initializer_list<DataType> allowed) {
  const TensorPtr& t = n.in(port);
  if (!t) return {};
  for (DataType a : allowed)
    if (t->get_data_type() == a) return {};
  std::string names;
  for (DataType a : allowed) names += (names.empty() ? "" : ", ") + std::string(to_string(a));
  return n.fail(ErrorCode::GRAPH_NOT_SUPPORTED, "input " + std::string(port) + " has data type " +
                                                    std::string(to_string(t->get_data_type())) + "; allowed: " + names);
}

std::optional<std::vector<int64_t>> broadcast(const std::vector<int64_t>& a, const std::vector<int64_t>& b) {
  if (a.size() != b.size()) return std::nullopt;
  std::vector<int64_t> r(a.size());
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i] == b[i] || b[i] == 1) r[i] = a[i];
    else if (a[i] == 1) r[i] = b[i];
    else return std::nullopt;
  }
  return r;
}

bool broadcasts_to(const std::vector<int64_t>& small, const std::vector<int64_t>& big) {
  if (small.size() != big.size()) return false;
  for (size_t i = 0; i < big.size(); ++i)
    if (small[i] != big[i] && small[i] != 1) return false;
  return true;
}

DataType compute_type(const Node& n, const GraphContext& ctx) {
  if (n.compute_data_type() != DataType::NOT_SET) return n.compute_data_type();
  if (ctx.compute_data_type != DataType::NOT_SET) return ctx.compute_data_type;
  return DataType::FLOAT;
}


// ---- added for the conv/layout/reduction/norm/misc families (append-only) ----

const std::vector<int64_t>& in_dims(const Node& n, std::string_view port) {
  static const std::vector<int64_t> kNone;
  const TensorPtr& t = n.in(port);
  return t ? t->get_dim() : kNone;
}

Status require_scalar(const Node& n, std::string_view port) {
  const TensorPtr& t = n.in(port);
  if (t && t->volume() != 1)
    return n.fail(ErrorCode::SHAPE_DEDUCTION_FAILED, "input " + std::string(port) + " must hold one value, has dims " +
                                                         dims_str(t->get_dim()));
  return {};
}

Status require_epsilon(const Node& n, std::string_view port) {
  OPENDNN_RETURN_IF_ERROR(require_scalar(n, port));
  const TensorPtr& t = n.in(port);
  if (!t || !t->get_is_pass_by_value() || !t->get_value().is_set()) return {};
  const double v = t->get_value().as_double();
  if (!(v >= 0.0))
    return n.fail(ErrorCode::INVALID_VALUE, "input " + std::string(port) + " is " + std::to_string(v) + "; it must be >= 0");
  return {};
}

Status require_dims(const Node& n, std::string_view port, const std::vector<int64_t>& dims, std::string_view what) {
  const TensorPtr& t = n.in(port);
  if (t && t->get_dim() != dims)
    return n.fail(ErrorCode::SHAPE_DEDUCTION_FAILED, "input " + std::string(port) + " has dims " + dims_str(t->get_dim()) +
                                                         " but must be " + dims_str(dims) +
                                                         (what.empty() ? std::string() : " " + std::string(what)));
  return {};
}

Status require_out_type(const Node& n, std::string_view port, std::initializer_list<DataType> allowed) {
  const TensorPtr& t = n.out(port);
  if (!t || t->get_data_type() == DataType::NOT_SET) return {};
  for (DataType a : allowed)
    if (t->get_data_type() == a) return {};
  std::string names;
  for (DataType a : allowed) names += (names.empty() ? "" : ", ") + std::string(to_string(a));
  return n.fail(ErrorCode::GRAPH_NOT_SUPPORTED, "output " + std::string(port) + " has data type " +
                                                    std::string(to_string(t->get_data_type())) + "; allowed: " + names);
}

Status spatial_attr(const Node& n, std::string_view attr, size_t count, int64_t fallback, int64_t min_value,
                    std::vector<int64_t>& out) {
  const auto& v = n.attr_ints(attr);
  if (v.empty()) {
    out.assign(count, fallback);
    return {};
  }
  if (v.size() != count)
    return n.fail(ErrorCode::INVALID_VALUE, "attribute " + std::string(attr) + " " + dims_str(v) + " has " +
                                                std::to_string(v.size()) + " values but there are " + std::to_string(count) +
                                                " spatial dims");
  for (int64_t x : v)
    if (x < min_value)
      return n.fail(ErrorCode::INVALID_VALUE, "attribute " + std::string(attr) + " " + dims_str(v) +
                                                  " has a value below " + std::to_string(min_value));
  out = v;
  return {};
}

std::optional<int64_t> dilated_extent(int64_t window, int64_t dilation) {
  int64_t e = 0;
  if (!cm::mul(dilation, window - 1, e) || !cm::add(e, 1, e)) return std::nullopt;
  return e;
}

std::optional<int64_t> window_out_len(int64_t in, int64_t pre, int64_t post, int64_t window, int64_t stride,
                                      int64_t dilation) {
  auto eff = dilated_extent(window, dilation);
  int64_t span = 0;
  if (!eff || stride < 1 || !cm::add(in, pre, span) || !cm::add(span, post, span) || !cm::sub(span, *eff, span))
    return std::nullopt;
  if (span < 0) return 0;
  return span / stride + 1;
}

bool is_user_output(const Node& n, std::string_view out_port) {
  const TensorPtr& t = n.out(out_port);
  return t && !t->get_is_virtual();
}

}  // namespace opendnn::ops

// ---- added for the sdpa/gdn/causal_conv1d families (append-only) ----

namespace opendnn::ops {

namespace {
const TensorPtr kNoTensor;
}  // namespace

const TensorPtr& input_if(const Node& n, std::string_view port) {
  int i = n.spec().input_index(port);
  if (i < 0 || size_t(i) >= n.inputs().size()) return kNoTensor;
  return n.inputs()[size_t(i)];
}

const TensorPtr& output_if(const Node& n, std::string_view port) {
  int i = n.spec().output_index(port);
  if (i < 0 || size_t(i) >= n.outputs().size()) return kNoTensor;
  return n.outputs()[size_t(i)];
}

std::string types_str(std::initializer_list<DataType> types) {
  std::string s;
  for (DataType t : types) s += (s.empty() ? "" : ", ") + std::string(to_string(t));
  return s;
}

std::vector<int64_t> strides_like(const std::vector<int64_t>& like_strides, const std::vector<int64_t>& dims) {
  if (like_strides.size() != dims.size()) return row_major_strides(dims);
  // Axes from outermost to innermost: larger stride first; ties keep the axis order.
  std::vector<size_t> order(dims.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  // A broadcast axis (stride 0) says nothing of the layout: it sorts as outermost.
  auto key = [&](size_t a) { return like_strides[a] == 0 ? INT64_MAX : like_strides[a]; };
  for (size_t i = 1; i < order.size(); ++i)  // insertion sort: stable and tiny
    for (size_t j = i; j > 0 && key(order[j]) > key(order[j - 1]); --j) std::swap(order[j], order[j - 1]);
  std::vector<int64_t> s(dims.size(), 1);
  int64_t step = 1;
  for (auto it = order.rbegin(); it != order.rend(); ++it) {  // innermost first
    s[*it] = step;
    if (!cm::mul(step, dims[*it] > 0 ? dims[*it] : 1, step)) step = INT64_MAX;  // rejected by volume
  }
  return s;
}

Status set_dims_like(Node& n, std::string_view out_port, const std::vector<int64_t>& dims, const TensorAttr& like) {
  OPENDNN_RETURN_IF_ERROR(set_dims(n, out_port, dims));
  const TensorPtr& t = n.out(out_port);
  if (t->get_stride().empty()) {
    TensorAttr probe;
    probe.set_dim(dims);
    if (probe.volume() >= 0) t->set_stride(strides_like(like.get_stride(), dims));
  }
  return {};
}

Status set_dims_keeping(Node& n, std::string_view out_port, const std::vector<int64_t>& dims, const TensorAttr& like) {
  const TensorPtr& t = n.out(out_port);
  if (t->get_stride().empty() && like.get_dim() == dims && like.addresses_each_element_once()) {
    OPENDNN_RETURN_IF_ERROR(set_dims(n, out_port, dims));
    t->set_stride(like.get_stride());
    return {};
  }
  return set_dims_like(n, out_port, dims, like);
}

Status set_absent(Node& n, std::string_view out_port, size_t rank, std::string_view why) {
  const TensorPtr& t = n.out(out_port);
  if (!t->get_is_virtual())
    return n.fail(ErrorCode::ATTRIBUTE_NOT_SET, "output " + std::string(out_port) + " is marked as a graph output but " +
                                                    std::string(why));
  std::vector<int64_t> zeros(rank, 0);
  t->set_dim(zeros);
  t->set_stride(std::vector<int64_t>(rank, 1));
  return {};
}

Status expect_dims(const Node& n, std::string_view port, const std::vector<int64_t>& dims, std::string_view what) {
  const TensorPtr& t = input_if(n, port);
  if (t && t->get_dim() != dims)
    return n.fail(ErrorCode::SHAPE_DEDUCTION_FAILED, "input " + std::string(port) + " has dims " + dims_str(t->get_dim()) +
                                                         " but must be " + dims_str(dims) +
                                                         (what.empty() ? std::string() : " " + std::string(what)));
  return {};
}

Status expect_one_value(const Node& n, std::string_view port) {
  const TensorPtr& t = input_if(n, port);
  if (t && t->volume() != 1)
    return n.fail(ErrorCode::SHAPE_DEDUCTION_FAILED, "input " + std::string(port) + " must hold one value, has dims " +
                                                         dims_str(t->get_dim()));
  return {};
}

Status expect_type(const Node& n, std::string_view port, std::initializer_list<DataType> allowed) {
  const TensorPtr& t = input_if(n, port);
  if (!t) return {};
  for (DataType a : allowed)
    if (t->get_data_type() == a) return {};
  return n.fail(ErrorCode::GRAPH_NOT_SUPPORTED, "input " + std::string(port) + " has data type " +
                                                    std::string(to_string(t->get_data_type())) + "; allowed: " +
                                                    types_str(allowed));
}

Status expect_out_type(const Node& n, std::string_view port, std::initializer_list<DataType> allowed) {
  const TensorPtr& t = output_if(n, port);
  if (!t || t->get_data_type() == DataType::NOT_SET) return {};
  for (DataType a : allowed)
    if (t->get_data_type() == a) return {};
  return n.fail(ErrorCode::GRAPH_NOT_SUPPORTED, "output " + std::string(port) + " has data type " +
                                                    std::string(to_string(t->get_data_type())) + "; allowed: " +
                                                    types_str(allowed));
}

}  // namespace opendnn::ops
