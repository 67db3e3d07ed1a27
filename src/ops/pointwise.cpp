// SPDX-License-Identifier: Apache-2.0
// POINTWISE: every elementwise mode of pointwise_modes.def, over broadcastable inputs.
#include "ops/infer_util.h"
#include "ops/op_defs.h"

namespace opendnn {
namespace {

#define OPENDNN_PW(e, m, arity) #e "|"
constexpr const char* kModes =
#include "opendnn/pointwise_modes.def"
    "";
#undef OPENDNN_PW

const PortSpec kIn[] = {{"IN_0", true, "input"}, {"IN_1", false}, {"IN_2", false}};
const PortSpec kOut[] = {{"OUT_0"}};
const AttrSpec kAttrs[] = {
    {"mode", AttrType::ENUM, {}, kModes},
    {"axis", AttrType::INT, {}},                   // GEN_INDEX
    {"relu_lower_clip", AttrType::FLOAT, {}},
    {"relu_upper_clip", AttrType::FLOAT, {}},
    {"relu_lower_clip_slope", AttrType::FLOAT, {}},
    {"swish_beta", AttrType::FLOAT, {}},
    {"elu_alpha", AttrType::FLOAT, {}},
    {"softplus_beta", AttrType::FLOAT, {}},
};

Status infer_pointwise(Node& n, const GraphContext&) {
  if (!n.has("mode")) return n.fail(ErrorCode::ATTRIBUTE_NOT_SET, "attribute mode is not set");
  PointwiseMode mode = n.pointwise_mode();
  int arity = pointwise_arity(mode);
  static const char* kPorts[] = {"IN_0", "IN_1", "IN_2"};
  for (int i = 0; i < 3; ++i) {
    bool given = n.inputs()[size_t(i)] != nullptr;
    if (i < arity && !given)
      return n.fail(ErrorCode::ATTRIBUTE_NOT_SET, std::string("mode ") + std::string(to_string(mode)) + " needs input " + kPorts[i]);
    if (i >= arity && given)
      return n.fail(ErrorCode::INVALID_VALUE, std::string("mode ") + std::string(to_string(mode)) + " takes " +
                                                  std::to_string(arity) + " input(s) but " + kPorts[i] + " is set");
  }
  std::vector<int64_t> dims = n.inputs()[0]->get_dim();
  for (int i = 1; i < arity; ++i) {
    const auto& d = n.inputs()[size_t(i)]->get_dim();
    auto b = ops::broadcast(dims, d);
    if (!b)
      return n.fail(ErrorCode::SHAPE_DEDUCTION_FAILED, std::string("input ") + kPorts[i] + " " + ops::dims_str(d) +
                                                           " does not broadcast with " + ops::dims_str(dims));
    dims = *b;
  }
  if (mode == PointwiseMode::GEN_INDEX) {
    if (!n.has("axis")) return n.fail(ErrorCode::ATTRIBUTE_NOT_SET, "GEN_INDEX needs attribute axis");
    int64_t axis = n.attr_int("axis");
    if (axis < 0 || axis >= int64_t(dims.size()))
      return n.fail(ErrorCode::INVALID_VALUE, "axis " + std::to_string(axis) + " is out of range for " + ops::dims_str(dims));
    ops::default_type(n, "OUT_0", DataType::INT32);
  }
  // The output keeps the layout of the first input that has the output's dims (its strides verbatim
  // when they address each element once: set_dims_keeping); failing that, the stride order of the first
  // input of the output's rank. A broadcast operand never decides the layout.
  const TensorAttr* like = nullptr;
  for (int i = 0; i < arity && !like; ++i)
    if (n.inputs()[size_t(i)]->get_dim() == dims) like = n.inputs()[size_t(i)].get();
  if (like) return ops::set_dims_keeping(n, "OUT_0", dims, *like);
  for (int i = 0; i < arity && !like; ++i)
    if (n.inputs()[size_t(i)]->get_dim().size() == dims.size()) like = n.inputs()[size_t(i)].get();
  return like ? ops::set_dims_like(n, "OUT_0", dims, *like) : ops::set_dims(n, "OUT_0", dims);
}

}  // namespace

const OpDef def_POINTWISE = {kIn, kOut, kAttrs, infer_pointwise};

}  // namespace opendnn
