// SPDX-License-Identifier: Apache-2.0
// REDUCTION (to the dims of Y, which the user sets) and GENSTATS (per-channel sum and sum of squares).
//
// Conventions
//   REDUCTION: Y's dims come from attribute `dims` or from dims set on Y (both: they must agree). Y has
//     X's rank; each Y dim equals X's (kept) or is 1 (reduced). `mode` is required. Y's type follows the
//     graph's defaults (intermediate for virtual, io for outputs).
//   GENSTATS: X [N, C, ...] (rank >= 2) -> sum and sq_sum [1, C, 1, ...] (X's rank), FLOAT by default:
//     sum[c] = sum of X over every dim but 1, sq_sum[c] = sum of X^2 likewise.
#include "ops/infer_util.h"
#include "ops/op_defs.h"

namespace opendnn {
namespace {

const PortSpec kXIn[] = {{"X", true, "input"}};
const PortSpec kYOut[] = {{"Y"}};
const AttrSpec kReductionAttrs[] = {
    {"mode", AttrType::ENUM, {}, "ADD|MUL|MIN|MAX|AMAX|AVG|NORM1|NORM2|MUL_NO_ZEROS"},
    {"is_deterministic", AttrType::BOOL, false},
    {"dims", AttrType::INT_LIST, {}},  // output dims (or set them on Y)
};
const PortSpec kGenstatsOut[] = {{"sum"}, {"sq_sum"}};

Status infer_reduction(Node& n, const GraphContext&) {
  if (!n.has("mode")) return n.fail(ErrorCode::ATTRIBUTE_NOT_SET, "attribute mode is not set");
  const auto& x = ops::in_dims(n, "X");
  std::vector<int64_t> y = n.attr_ints("dims");
  if (y.empty()) y = n.out("Y")->get_dim();
  if (y.empty())
    return n.fail(ErrorCode::ATTRIBUTE_NOT_SET, "the output shape is not set: give attribute dims or set Y's dims");
  if (y.size() != x.size())
    return n.fail(ErrorCode::SHAPE_DEDUCTION_FAILED, "Y " + ops::dims_str(y) + " must have the rank of X " + ops::dims_str(x));
  for (size_t i = 0; i < x.size(); ++i)
    if (y[i] != x[i] && y[i] != 1)
      return n.fail(ErrorCode::SHAPE_DEDUCTION_FAILED, "Y " + ops::dims_str(y) + " dim " + std::to_string(i) +
                                                           " must be 1 (reduced) or X's " + std::to_string(x[i]) + " (kept); X is " +
                                                           ops::dims_str(x));
  return ops::set_dims_like(n, "Y", y, *n.in("X"));
}

Status infer_genstats(Node& n, const GraphContext&) {
  const auto& x = ops::in_dims(n, "X");
  if (x.size() < 2)
    return n.fail(ErrorCode::SHAPE_DEDUCTION_FAILED, "X " + ops::dims_str(x) + " must have at least 2 dims [N, C, ...]");
  std::vector<int64_t> stats(x.size(), 1);
  stats[1] = x[1];
  for (const char* o : {"sum", "sq_sum"}) {
    OPENDNN_RETURN_IF_ERROR(ops::set_dims_like(n, o, stats, *n.in("X")));
    ops::default_type(n, o, DataType::FLOAT);
  }
  return {};
}

}  // namespace

const OpDef def_REDUCTION = {kXIn, kYOut, kReductionAttrs, infer_reduction};
const OpDef def_GENSTATS = {kXIn, kGenstatsOut, {}, infer_genstats};

}  // namespace opendnn
