// SPDX-License-Identifier: Apache-2.0
// RESHAPE, TRANSPOSE, SLICE, CONCATENATE: ops that move or view data without arithmetic.
//
// Conventions
//   Y's data type defaults to X's (these ops move data, they do not convert it).
//   Y's strides default to packed row-major of Y's dims (the op writes a fresh tensor), except for
//   RESHAPE VIEW_ONLY, whose Y aliases X's memory: its strides are derived from X's.
//   RESHAPE: target dims from attribute `dims` (one entry may be -1: inferred) or from dims set on Y;
//     volumes must match. VIEW_ONLY needs X's strides to allow the new shape without a copy.
//   TRANSPOSE: `permutation` (required) is a permutation of 0..rank-1; Y.dims[i] = X.dims[perm[i]].
//   SLICE: `start`, `end`, `stride` hold one value per leading axis (fewer than rank: the remaining axes
//     are kept whole; empty: whole axis / stride 1). Python semantics: negative start/end count from the
//     end, both are clamped to [0, dim], end may be any large value (INT64_MAX = "to the end"); stride must
//     be > 0; an empty slice gives dim 0. Y.dims[i] = max(0, ceil((end - start) / stride)).
//   CONCATENATE: inputs "0", "1", ... of equal rank, equal data type and equal dims except on `axis`
//     (required; negative counts from the end). `in_place_index`, if set, names the input that already
//     lives inside Y's memory (0 <= index < number of inputs).
#include <algorithm>
#include <limits>

#include "ops/infer_util.h"
#include "ops/op_defs.h"

namespace opendnn {
namespace {

const PortSpec kXIn[] = {{"X", true, "input"}};
const PortSpec kYOut[] = {{"Y"}};
const AttrSpec kReshapeAttrs[] = {
    {"reshape_mode", AttrType::ENUM, "LOGICAL", "VIEW_ONLY|LOGICAL"},
    {"dims", AttrType::INT_LIST, {}},  // target dims (or set them on Y)
};
const AttrSpec kTransposeAttrs[] = {{"permutation", AttrType::INT_LIST, {}}};
const AttrSpec kSliceAttrs[] = {
    {"start", AttrType::INT_LIST, {}},
    {"end", AttrType::INT_LIST, {}},
    {"stride", AttrType::INT_LIST, {}},
};
const PortSpec kConcatIn[] = {{"X"}};  // repeated; ports are named "0", "1", ...
const AttrSpec kConcatAttrs[] = {
    {"axis", AttrType::INT, {}},
    {"in_place_index", AttrType::INT, {}},
};

using Dims = std::vector<int64_t>;
std::string s(int64_t v) { return std::to_string(v); }

void default_type_from(Node& n, const char* out, const TensorPtr& from) {
  if (from) ops::default_type(n, out, from->get_data_type());
}

int64_t volume_of(const Dims& d) {
  int64_t v = 1;
  for (int64_t x : d) {
    if (x == 0) return 0;
    if (v > std::numeric_limits<int64_t>::max() / x) return -1;
    v *= x;
  }
  return v;
}

// Strides that let `new_dims` view the memory of (old_dims, old_strides) without a copy, if any.
// Walks X's dims from the fastest, grouping runs of dims that are contiguous with each other; each run
// must be split exactly by a run of the new dims.
std::optional<Dims> view_strides(const Dims& old_dims, const Dims& old_strides, const Dims& new_dims) {
  Dims out(new_dims.size(), 0);
  if (volume_of(old_dims) == 0 || old_dims.empty()) return row_major_strides(new_dims);
  int64_t vd = int64_t(new_dims.size()) - 1;
  int64_t base = old_strides.back();
  int64_t run = 1, view_run = 1;
  for (int64_t od = int64_t(old_dims.size()) - 1; od >= 0; --od) {
    run *= old_dims[size_t(od)];
    bool run_ends = od == 0 || (old_dims[size_t(od - 1)] != 1 && old_strides[size_t(od - 1)] != run * base);
    if (!run_ends) continue;
    while (vd >= 0 && (view_run < run || new_dims[size_t(vd)] == 1)) {
      out[size_t(vd)] = view_run * base;
      view_run *= new_dims[size_t(vd)];
      --vd;
    }
    if (view_run != run) return std::nullopt;
    if (od > 0) {
      base = old_strides[size_t(od - 1)];
      run = 1;
      view_run = 1;
    }
  }
  if (vd != -1) return std::nullopt;
  return out;
}

Status infer_reshape(Node& n, const GraphContext&) {
  const TensorPtr& x = n.in("X");
  const Dims& xd = x->get_dim();
  int64_t xvol = volume_of(xd);
  Dims target = n.attr_ints("dims");
  const Dims& user = n.out("Y")->get_dim();
  if (target.empty() && user.empty())
    return n.fail(ErrorCode::ATTRIBUTE_NOT_SET, "the target shape is not set: give attribute dims or set Y's dims");
  if (target.empty()) target = user;
  // One -1 in the attribute is inferred from X's volume.
  int64_t unknown = -1, known = 1;
  for (size_t i = 0; i < target.size(); ++i) {
    if (target[i] == -1 && unknown < 0) {
      unknown = int64_t(i);
      continue;
    }
    if (target[i] < 0)
      return n.fail(ErrorCode::INVALID_VALUE, "target dims " + ops::dims_str(target) + " have a negative value (only one -1 is allowed)");
    if (__builtin_mul_overflow(known, target[i], &known))
      return n.fail(ErrorCode::INVALID_VALUE, "target dims " + ops::dims_str(target) + " overflow int64");
  }
  if (unknown >= 0) {
    if (known == 0 || xvol % known != 0)
      return n.fail(ErrorCode::SHAPE_DEDUCTION_FAILED, "cannot infer the -1 of target dims " + ops::dims_str(target) +
                                                           " from X " + ops::dims_str(xd));
    target[size_t(unknown)] = xvol / known;
  }
  if (volume_of(target) != xvol)
    return n.fail(ErrorCode::SHAPE_DEDUCTION_FAILED, "X " + ops::dims_str(xd) + " has " + s(xvol) + " elements but the target " +
                                                         ops::dims_str(target) + " has " + s(volume_of(target)));
  OPENDNN_RETURN_IF_ERROR(ops::set_dims(n, "Y", target));
  default_type_from(n, "Y", x);
  if (n.attr_str("reshape_mode") == "VIEW_ONLY") {
    auto vs = view_strides(xd, x->get_stride(), target);
    if (!vs)
      return n.fail(ErrorCode::GRAPH_NOT_SUPPORTED, "VIEW_ONLY reshape of X " + ops::dims_str(xd) + " with strides " +
                                                        ops::dims_str(x->get_stride()) + " to " + ops::dims_str(target) +
                                                        " needs a copy; use LOGICAL");
    const TensorPtr& y = n.out("Y");
    if (y->get_stride().empty()) {
      y->set_stride(*vs);
    } else {
      for (size_t i = 0; i < target.size(); ++i)
        if (target[i] != 1 && y->get_stride().size() == target.size() && y->get_stride()[i] != (*vs)[i])
          return n.fail(ErrorCode::SHAPE_DEDUCTION_FAILED, "VIEW_ONLY output Y was given strides " +
                                                               ops::dims_str(y->get_stride()) + " but viewing X gives " +
                                                               ops::dims_str(*vs));
    }
  }
  return {};
}

Status infer_transpose(Node& n, const GraphContext&) {
  const TensorPtr& x = n.in("X");
  const Dims& xd = x->get_dim();
  if (!n.has("permutation")) return n.fail(ErrorCode::ATTRIBUTE_NOT_SET, "attribute permutation is not set");
  const Dims& perm = n.attr_ints("permutation");
  if (perm.size() != xd.size())
    return n.fail(ErrorCode::INVALID_VALUE, "permutation " + ops::dims_str(perm) + " has " + s(int64_t(perm.size())) +
                                                " entries but X " + ops::dims_str(xd) + " has " + s(int64_t(xd.size())) + " dims");
  std::vector<bool> seen(xd.size(), false);
  Dims y;
  for (int64_t p : perm) {
    if (p < 0 || p >= int64_t(xd.size()) || seen[size_t(p)])
      return n.fail(ErrorCode::INVALID_VALUE, "permutation " + ops::dims_str(perm) + " is not a permutation of 0.." +
                                                  s(int64_t(xd.size()) - 1));
    seen[size_t(p)] = true;
    y.push_back(xd[size_t(p)]);
  }
  OPENDNN_RETURN_IF_ERROR(ops::set_dims(n, "Y", y));
  default_type_from(n, "Y", x);
  return {};
}

Status infer_slice(Node& n, const GraphContext&) {
  const TensorPtr& x = n.in("X");
  const Dims& xd = x->get_dim();
  const Dims& start = n.attr_ints("start");
  const Dims& end = n.attr_ints("end");
  const Dims& stride = n.attr_ints("stride");
  for (auto [name, v] : {std::pair{"start", &start}, std::pair{"end", &end}, std::pair{"stride", &stride}})
    if (v->size() > xd.size())
      return n.fail(ErrorCode::INVALID_VALUE, std::string("attribute ") + name + " " + ops::dims_str(*v) + " has more values than X " +
                                                  ops::dims_str(xd) + " has dims");
  Dims y;
  for (size_t i = 0; i < xd.size(); ++i) {
    int64_t d = xd[i];
    int64_t st = i < stride.size() ? stride[i] : 1;
    if (st <= 0)
      return n.fail(ErrorCode::INVALID_VALUE, "slice stride " + s(st) + " on axis " + s(int64_t(i)) + " must be > 0");
    auto clamp = [d](int64_t v) {
      if (v < 0) v = v < -d ? 0 : v + d;
      return std::min(v, d);
    };
    int64_t b = i < start.size() ? clamp(start[i]) : 0;
    int64_t e = i < end.size() ? clamp(end[i]) : d;
    int64_t len = e > b ? (e - b - 1) / st + 1 : 0;  // ceil((e - b) / st) without overflow
    y.push_back(len);
  }
  OPENDNN_RETURN_IF_ERROR(ops::set_dims(n, "Y", y));
  default_type_from(n, "Y", x);
  return {};
}

Status infer_concatenate(Node& n, const GraphContext&) {
  const auto& ins = n.inputs();
  if (!n.has("axis")) return n.fail(ErrorCode::ATTRIBUTE_NOT_SET, "attribute axis is not set");
  const Dims& first = ins[0]->get_dim();
  int64_t rank = int64_t(first.size());
  int64_t axis = n.attr_int("axis");
  if (axis < -rank || axis >= rank)
    return n.fail(ErrorCode::INVALID_VALUE, "axis " + s(axis) + " is out of range for input 0 " + ops::dims_str(first));
  if (axis < 0) axis += rank;
  Dims y = first;
  y[size_t(axis)] = 0;
  for (size_t i = 0; i < ins.size(); ++i) {
    const Dims& d = ins[i]->get_dim();
    if (int64_t(d.size()) != rank)
      return n.fail(ErrorCode::SHAPE_DEDUCTION_FAILED, "input " + s(int64_t(i)) + " " + ops::dims_str(d) +
                                                           " has a different rank than input 0 " + ops::dims_str(first));
    for (int64_t j = 0; j < rank; ++j)
      if (j != axis && d[size_t(j)] != first[size_t(j)])
        return n.fail(ErrorCode::SHAPE_DEDUCTION_FAILED, "input " + s(int64_t(i)) + " " + ops::dims_str(d) +
                                                             " differs from input 0 " + ops::dims_str(first) + " on axis " +
                                                             s(j) + ", which is not the concatenation axis " + s(axis));
    if (ins[i]->get_data_type() != ins[0]->get_data_type())
      return n.fail(ErrorCode::INVALID_VALUE, "input " + s(int64_t(i)) + " has data type " +
                                                  std::string(to_string(ins[i]->get_data_type())) + " but input 0 has " +
                                                  std::string(to_string(ins[0]->get_data_type())));
    y[size_t(axis)] += d[size_t(axis)];
  }
  if (n.has("in_place_index")) {
    int64_t ip = n.attr_int("in_place_index");
    if (ip < 0 || ip >= int64_t(ins.size()))
      return n.fail(ErrorCode::INVALID_VALUE, "in_place_index " + s(ip) + " is not an input index (there are " +
                                                  s(int64_t(ins.size())) + " inputs)");
  }
  OPENDNN_RETURN_IF_ERROR(ops::set_dims(n, "Y", y));
  default_type_from(n, "Y", ins[0]);
  return {};
}

}  // namespace

const OpDef def_RESHAPE = {kXIn, kYOut, kReshapeAttrs, infer_reshape};
const OpDef def_TRANSPOSE = {kXIn, kYOut, kTransposeAttrs, infer_transpose};
const OpDef def_SLICE = {kXIn, kYOut, kSliceAttrs, infer_slice};
const OpDef def_CONCATENATE = {kConcatIn, kYOut, kConcatAttrs, infer_concatenate};

}  // namespace opendnn
