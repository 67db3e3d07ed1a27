// SPDX-License-Identifier: Apache-2.0
// MATMUL and MATMUL_FP8: batched C[..., M, N] = A[..., M, K] · B[..., K, N], batch dims broadcast.
#include "ops/infer_util.h"
#include "ops/op_defs.h"

namespace opendnn {
namespace {

const PortSpec kMatmulIn[] = {{"A"}, {"B"}, {"M_override", false}, {"N_override", false}, {"K_override", false}};
const PortSpec kMatmulOut[] = {{"C"}};
const AttrSpec kMatmulAttrs[] = {{"padding", AttrType::FLOAT, 0.0}};

Status infer_matmul_dims(Node& n) {
  const auto& a = n.in("A")->get_dim();
  const auto& b = n.in("B")->get_dim();
  if (a.size() < 2 || a.size() != b.size())
    return n.fail(ErrorCode::SHAPE_DEDUCTION_FAILED,
                  "A " + ops::dims_str(a) + " and B " + ops::dims_str(b) + " must have the same rank, at least 2");
  size_t r = a.size();
  if (a[r - 1] != b[r - 2])
    return n.fail(ErrorCode::SHAPE_DEDUCTION_FAILED, "inner dims differ: A " + ops::dims_str(a) + " has K=" +
                                                         std::to_string(a[r - 1]) + ", B " + ops::dims_str(b) + " has K=" +
                                                         std::to_string(b[r - 2]));
  std::vector<int64_t> batch_a(a.begin(), a.end() - 2), batch_b(b.begin(), b.end() - 2);
  auto batch = ops::broadcast(batch_a, batch_b);
  if (!batch)
    return n.fail(ErrorCode::SHAPE_DEDUCTION_FAILED,
                  "batch dims of A " + ops::dims_str(a) + " and B " + ops::dims_str(b) + " do not broadcast");
  std::vector<int64_t> c = *batch;
  c.push_back(a[r - 2]);
  c.push_back(b[r - 1]);
  return ops::set_dims(n, "C", c);
}

// An override holds one value, one per batch ([batch count]), or C's batch dims (each may be 1)
// followed by [1, 1]: every batch the kernels run reads a value inside the tensor.
Status check_override(const Node& n, const char* port) {
  const TensorPtr& o = n.in(port);
  if (!o || o->volume() == 1) return {};
  const auto& od = o->get_dim();
  const auto& c = n.out("C")->get_dim();
  int64_t batch = 1;
  for (size_t i = 0; i + 2 < c.size(); ++i) batch *= c[i];
  bool ok = od.size() == 1 && od[0] == batch;
  if (!ok && od.size() == c.size()) {
    ok = od[od.size() - 1] == 1 && od[od.size() - 2] == 1;
    for (size_t i = 0; ok && i + 2 < c.size(); ++i) ok = od[i] == c[i] || od[i] == 1;
  }
  if (ok) return {};
  return n.fail(ErrorCode::SHAPE_DEDUCTION_FAILED, std::string(port) + " " + ops::dims_str(od) + " must hold one value, one per batch ([" +
                                                       std::to_string(batch) + "]), or have C's batch dims then [1,1] (C " +
                                                       ops::dims_str(c) + ")");
}

Status infer_matmul(Node& n, const GraphContext&) {
  for (const char* p : {"M_override", "N_override", "K_override"})
    OPENDNN_RETURN_IF_ERROR(ops::require_type(n, p, {DataType::INT32, DataType::INT64}));
  OPENDNN_RETURN_IF_ERROR(infer_matmul_dims(n));
  for (const char* p : {"M_override", "N_override", "K_override"}) OPENDNN_RETURN_IF_ERROR(check_override(n, p));
  return {};
}

const PortSpec kFp8In[] = {{"A"}, {"B"}, {"descale_A"}, {"descale_B"}, {"scale_C"}};
const PortSpec kFp8Out[] = {{"C"}, {"amax_C"}};

Status infer_matmul_fp8(Node& n, const GraphContext&) {
  for (const char* p : {"A", "B"})
    OPENDNN_RETURN_IF_ERROR(ops::require_type(n, p, {DataType::FP8_E4M3, DataType::FP8_E5M2}));
  for (const char* p : {"descale_A", "descale_B", "scale_C"}) {
    if (n.in(p)->volume() != 1)
      return n.fail(ErrorCode::SHAPE_DEDUCTION_FAILED, std::string(p) + " must hold one value (per-tensor scaling)");
    OPENDNN_RETURN_IF_ERROR(ops::require_type(n, p, {DataType::FLOAT}));
  }
  OPENDNN_RETURN_IF_ERROR(infer_matmul_dims(n));
  std::vector<int64_t> one(n.in("A")->get_dim().size(), 1);
  ops::default_type(n, "amax_C", DataType::FLOAT);
  return ops::set_dims(n, "amax_C", one);
}

}  // namespace

const OpDef def_MATMUL = {kMatmulIn, kMatmulOut, kMatmulAttrs, infer_matmul};
const OpDef def_MATMUL_FP8 = {kFp8In, kFp8Out, {}, infer_matmul_fp8};

}  // namespace opendnn
