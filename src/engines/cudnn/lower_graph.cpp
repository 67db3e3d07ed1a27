// SPDX-License-Identifier: Apache-2.0
// The lowering driver: tensors, the shared op helpers, and the operation graph.
#include <algorithm>
#include <cstring>
#include <limits>

#include "common/dtype_convert.h"
#include "engines/cudnn/lower.h"

namespace opendnn::cudnn {

std::vector<int64_t> LowerCtx::padded_dims(const TensorAttr& t) const {
  std::vector<int64_t> d = t.get_dim();
  while (int(d.size()) < rank) d.insert(d.begin(), 1);
  return d;
}

std::vector<int64_t> LowerCtx::padded_strides(const TensorAttr& t) const {
  std::vector<int64_t> s = t.get_stride();
  const auto& d = t.get_dim();
  int64_t span = 1;
  for (size_t i = 0; i < d.size() && i < s.size(); ++i) span = std::max(span, d[i] * s[i]);
  while (int(s.size()) < rank) s.insert(s.begin(), span);
  return s;
}

DescPtr LowerCtx::make_tensor(const std::vector<int64_t>& dims, const std::vector<int64_t>& strides, DataType dt,
                              bool is_virtual, int64_t uid, bool by_value, const DescPtr& ragged) {
  bool ok = true;
  cudnnDataType_t cdt = to_cudnn(dt, &ok);
  if (!ok) {
    b.fail("data type " + std::string(to_string(dt)) + " has no cuDNN equivalent");
    return nullptr;
  }
  if (uid < 0) uid = next_uid++;
  DescPtr d = b.make(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
  b.set_dtype(d, CUDNN_ATTR_TENSOR_DATA_TYPE, cdt);
  b.set_i64s(d, CUDNN_ATTR_TENSOR_DIMENSIONS, dims);
  b.set_i64s(d, CUDNN_ATTR_TENSOR_STRIDES, strides);
  b.set_i64(d, CUDNN_ATTR_TENSOR_UNIQUE_ID, uid);
  b.set_i64(d, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, 16);
  b.set_bool(d, CUDNN_ATTR_TENSOR_IS_VIRTUAL, is_virtual);
  if (by_value) b.set_bool(d, CUDNN_ATTR_TENSOR_IS_BY_VALUE, true);
  if (ragged) b.set_desc(d, CUDNN_ATTR_TENSOR_RAGGED_OFFSET_DESC, ragged);
  b.finalize(d, "tensor uid " + std::to_string(uid));
  if (d) out.keep.push_back(d);
  return b.ok() ? d : nullptr;
}

DescPtr LowerCtx::user_tensor(const TensorPtr& t, const std::vector<int64_t>& dims, const std::vector<int64_t>& strides) {
  // cuDNN's BOOLEAN tensors in memory are bit-packed (element i is bit i%8 of byte i/8), opendnn's (like
  // torch's and numpy's) are one byte per element: a BOOLEAN operand read through cuDNN as BOOLEAN took its
  // values from the wrong bits. A BOOLEAN tensor in memory is therefore described to cuDNN as UINT8 (one
  // byte, 0 or 1): comparisons write 0/1 bytes and a mask operand reads them as numbers. Virtual BOOLEAN
  // intermediates stay BOOLEAN.
  DataType dt = t->get_data_type();
  if (dt == DataType::BOOLEAN && !t->get_is_virtual()) dt = DataType::UINT8;
  // Ragged (THD) tensors: the offset tensor is an ordinary int tensor, referenced by the data tensor.
  DescPtr ragged = t->get_ragged_offset() ? tensor(t->get_ragged_offset()) : nullptr;
  if (t->get_ragged_offset() && !ragged) return nullptr;
  return make_tensor(dims, strides, dt, t->get_is_virtual(), t->get_uid(), t->get_is_pass_by_value(), ragged);
}

DescPtr LowerCtx::tensor(const TensorPtr& t) {
  if (!t) {
    b.fail("internal: null tensor");
    return nullptr;
  }
  auto it = tensors.find(t.get());
  if (it != tensors.end()) return it->second;
  bool by_value = t->get_is_pass_by_value();
  DescPtr d = user_tensor(t, padded_dims(*t), padded_strides(*t));
  if (by_value && d) {
    // Host copy of the value in the tensor's type.
    LoweredGraph::HostValue hv{};
    hv.uid = t->get_uid();
    const Scalar& s = t->get_value();
    switch (t->get_data_type()) {
      case DataType::FLOAT: case DataType::DOUBLE: case DataType::HALF: case DataType::BFLOAT16:
        store_element(t->get_data_type(), hv.bytes, 0, s.as_double());
        break;
      case DataType::INT32: { int32_t v = int32_t(s.i); std::memcpy(hv.bytes, &v, 4); break; }
      case DataType::INT64: std::memcpy(hv.bytes, &s.i, 8); break;
      default: b.fail("by-value tensor " + t->get_name() + " has an unsupported type"); break;
    }
    out.host_values.push_back(hv);
  }
  tensors[t.get()] = d;
  return d;
}

DescPtr LowerCtx::virt(const std::vector<int64_t>& dims, DataType dt) {
  return make_tensor(dims, row_major_strides(dims), dt, true);
}

DescPtr LowerCtx::scalar_f32(float v) {
  std::vector<int64_t> one(size_t(rank), 1);
  int64_t uid = next_uid;
  DescPtr d = make_tensor(one, one, DataType::FLOAT, false, -1, true);
  LoweredGraph::HostValue hv{};
  hv.uid = uid;
  std::memcpy(hv.bytes, &v, 4);
  out.host_values.push_back(hv);
  return d;
}

DescPtr LowerCtx::scalar_i32(int32_t v) {
  std::vector<int64_t> one(size_t(rank), 1);
  int64_t uid = next_uid;
  DescPtr d = make_tensor(one, one, DataType::INT32, false, -1, true);
  LoweredGraph::HostValue hv{};
  hv.uid = uid;
  std::memcpy(hv.bytes, &v, 4);
  out.host_values.push_back(hv);
  return d;
}

DescPtr LowerCtx::tensor_view(const TensorPtr& t, const std::vector<int64_t>& dims, const std::vector<int64_t>& strides) {
  if (!t) {
    b.fail("internal: null tensor");
    return nullptr;
  }
  if (tensors.count(t.get()) || t->get_is_virtual() || t->get_is_pass_by_value()) {
    // A second descriptor (alias) of the same buffer: cuDNN 9.19 failed such plans at execute with
    // BAD_PARAM_NULL_POINTER (isCompatibleVariantPack), so decline instead.
    b.fail("tensor " + t->get_name() + " is needed in two layouts (e.g. one tensor passed as both K and V), " +
           "which the cudnn engine does not lower");
    return nullptr;
  }
  DescPtr d = user_tensor(t, dims, strides);
  tensors[t.get()] = d;
  return d;
}

DescPtr LowerCtx::ws_tensor(const std::vector<int64_t>& dims, DataType dt, bool zero) {
  int64_t uid = next_uid;
  DescPtr d = make_tensor(dims, row_major_strides(dims), dt, false, -1);
  int64_t n = 1;
  for (int64_t x : dims) n *= x;
  int64_t bytes = n * (bits_of(dt) / 8);
  out.ws_tensors.push_back({uid, out.ws_bytes, bytes, zero});
  out.ws_bytes += (bytes + 255) / 256 * 256;
  return d;
}

DataType LowerCtx::compute_type(const Node& n) const {
  if (n.compute_data_type() != DataType::NOT_SET) return n.compute_data_type();
  if (g.context().compute_data_type != DataType::NOT_SET) return g.context().compute_data_type;
  return DataType::FLOAT;
}

DescPtr LowerCtx::pointwise(cudnnPointwiseMode_t mode, const DescPtr& x, const DescPtr& bb, const DescPtr& y,
                            const DescPtr& t, DataType prec, int64_t axis) {
  bool ok = true;
  DescPtr pw = b.make(CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
  b.set(pw, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode);
  cudnnDataType_t p = to_cudnn(prec, &ok);
  b.set_dtype(pw, CUDNN_ATTR_POINTWISE_MATH_PREC, p);
  if (axis >= 0) b.set_i64(pw, CUDNN_ATTR_POINTWISE_AXIS, axis);
  b.finalize(pw, "pointwise descriptor");
  if (pw) out.keep.push_back(pw);
  DescPtr op = b.make(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
  b.set_desc(op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, pw);
  b.set_desc(op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, x);
  if (bb) b.set_desc(op, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, bb);
  if (t) b.set_desc(op, CUDNN_ATTR_OPERATION_POINTWISE_TDESC, t);
  b.set_desc(op, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, y);
  b.finalize(op, "pointwise operation");
  add_op(op);
  return op;
}

DescPtr LowerCtx::matmul(const DescPtr& a, const DescPtr& bm, const DescPtr& cm, DataType prec, const GemmOverride& ovr) {
  bool ok = true;
  DescPtr md = b.make(CUDNN_BACKEND_MATMUL_DESCRIPTOR);
  b.set_dtype(md, CUDNN_ATTR_MATMUL_COMP_TYPE, to_cudnn(prec, &ok));
  b.finalize(md, "matmul descriptor");
  if (md) out.keep.push_back(md);
  DescPtr op = b.make(CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR);
  b.set_desc(op, CUDNN_ATTR_OPERATION_MATMUL_ADESC, a);
  b.set_desc(op, CUDNN_ATTR_OPERATION_MATMUL_BDESC, bm);
  b.set_desc(op, CUDNN_ATTR_OPERATION_MATMUL_CDESC, cm);
  b.set_desc(op, CUDNN_ATTR_OPERATION_MATMUL_DESC, md);
  if (ovr.m) b.set_desc(op, CUDNN_ATTR_OPERATION_MATMUL_GEMM_M_OVERRIDE_DESC, ovr.m);
  if (ovr.n) b.set_desc(op, CUDNN_ATTR_OPERATION_MATMUL_GEMM_N_OVERRIDE_DESC, ovr.n);
  if (ovr.k) b.set_desc(op, CUDNN_ATTR_OPERATION_MATMUL_GEMM_K_OVERRIDE_DESC, ovr.k);
  b.finalize(op, "matmul operation");
  add_op(op);
  return op;
}

DescPtr LowerCtx::reduction(cudnnReduceTensorOp_t rop, const DescPtr& x, const DescPtr& y, DataType prec,
                            bool deterministic) {
  bool ok = true;
  DescPtr rd = b.make(CUDNN_BACKEND_REDUCTION_DESCRIPTOR);
  b.set(rd, CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &rop);
  b.set_dtype(rd, CUDNN_ATTR_REDUCTION_COMP_TYPE, to_cudnn(prec, &ok));
  if (deterministic) b.set_bool(rd, CUDNN_ATTR_REDUCTION_IS_DETERMINISTIC, true);
  b.finalize(rd, "reduction descriptor");
  if (rd) out.keep.push_back(rd);
  DescPtr op = b.make(CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR);
  b.set_desc(op, CUDNN_ATTR_OPERATION_REDUCTION_XDESC, x);
  b.set_desc(op, CUDNN_ATTR_OPERATION_REDUCTION_YDESC, y);
  b.set_desc(op, CUDNN_ATTR_OPERATION_REDUCTION_DESC, rd);
  b.finalize(op, "reduction operation");
  add_op(op);
  return op;
}

DescPtr LowerCtx::reshape(const DescPtr& x, const DescPtr& y) {
  DescPtr op = b.make(CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR);
  b.set_desc(op, CUDNN_ATTR_OPERATION_RESHAPE_XDESC, x);
  b.set_desc(op, CUDNN_ATTR_OPERATION_RESHAPE_YDESC, y);
  b.finalize(op, "reshape operation");
  add_op(op);
  return op;
}

bool lower_graph(const Graph& g, cudnnHandle_t handle, SdpaImpl impl, size_t version, std::vector<std::string>& declines,
                 std::shared_ptr<LoweredGraph>& result) {
  auto lg = std::make_shared<LoweredGraph>();
  lg->sdpa_impl = impl;
  LowerCtx c(g, *lg);
  c.version = version;
  int64_t max_uid = 0;
  int max_rank = 0;
  for (const auto& t : g.tensors()) {
    if (!t->has_uid()) {
      declines.push_back("cudnn: tensor " + t->get_name() + " has no uid (validate the graph first)");
      return false;
    }
    max_uid = std::max(max_uid, t->get_uid());
    max_rank = std::max(max_rank, int(t->get_dim().size()));
    if (t->get_dim().empty() || t->get_stride().size() != t->get_dim().size()) {
      declines.push_back("cudnn: tensor " + t->get_name() + " has incomplete dims/strides (validate the graph first)");
      return false;
    }
  }
  if (max_rank > 8) {
    declines.push_back("cudnn: tensors of rank " + std::to_string(max_rank) + " exceed cuDNN's 8 dims");
    return false;
  }
  c.rank = std::max(3, max_rank);
  // Rank-2/3 layer/RMS norms are described as 4-D views (lower_ops.cpp), so scalars must be 4-D too.
  for (const auto& n : g.nodes()) {
    OpKind k = n->kind();
    bool ln = k == OpKind::LAYERNORM || k == OpKind::RMSNORM || k == OpKind::LAYERNORM_BACKWARD || k == OpKind::RMSNORM_BACKWARD;
    if (ln && n->in("X") && n->in("X")->get_dim().size() < 4) c.rank = std::max(c.rank, 4);
  }
  c.next_uid = (max_uid / 1000 + 1) * 1000 + 1000000;  // well clear of the user's uids

  lg->plain_matmul = g.nodes().size() == 1 && g.nodes().front()->kind() == OpKind::MATMUL;
  if (g.nodes().size() == 1) {
    const Node& n = *g.nodes().front();
    const OpKind k = n.kind();
    lg->norm_layer = k == OpKind::LAYERNORM || k == OpKind::LAYERNORM_BACKWARD;
    lg->norm_backward = k == OpKind::LAYERNORM_BACKWARD || k == OpKind::RMSNORM_BACKWARD;
    lg->lone_norm = (lg->norm_layer || lg->norm_backward || k == OpKind::RMSNORM) && n.in("X");
    if (lg->lone_norm) {
      const TensorPtr& x = n.in("X");
      lg->norm_x_bytes = double(x->volume()) * bits_of(x->get_data_type()) / 8;
    }
  }
  bool ok = true;
  for (const auto& n : g.nodes()) {
    std::string why;
    bool good;
    if (n->kind() == OpKind::SDPA) {
      lg->has_sdpa = true;
      good = lower_sdpa_node(c, *n, impl, why);
    } else if (n->kind() == OpKind::SDPA_BACKWARD) {
      lg->has_sdpa = true;
      good = lower_sdpa_backward_node(c, *n, impl, why);
    } else if (n->kind() == OpKind::SDPA_FP8) {
      lg->has_sdpa = true;
      good = lower_sdpa_fp8_node(c, *n, impl, why);
    } else if (n->kind() == OpKind::SDPA_MXFP8 || n->kind() == OpKind::SDPA_MXFP8_BACKWARD) {
      good = lower_sdpa_mxfp8_node(c, *n, why);
    } else {
      good = lower_generic_node(c, *n, why);
    }
    if (!good || !c.b.ok()) {
      if (why.empty()) why = c.b.error();
      declines.push_back(std::string("cudnn: ") + n->spec().method + " \"" + n->name() + "\": " + why);
      ok = false;
      c.b.clear_error();
    }
  }
  if (!ok) return false;
  if (c.ops.empty()) {
    declines.push_back("cudnn: the graph has no operations");
    return false;
  }
  // The caller's pointers: every described user tensor except constants (a by-value tensor without a
  // value is a run-time scalar that cuDNN reads through the caller's host pointer at every execute).
  for (const auto& [attr, d] : c.tensors)
    if (!attr->get_is_virtual() && !(attr->get_is_pass_by_value() && attr->get_value().is_set()))
      lg->slot_uids.push_back(attr->get_uid());
  std::sort(lg->slot_uids.begin(), lg->slot_uids.end());
  DescPtr og = c.b.make(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
  c.b.set(og, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle);
  c.b.set_descs(og, CUDNN_ATTR_OPERATIONGRAPH_OPS, c.ops);
  c.b.finalize(og, "operation graph");
  if (!c.b.ok()) {
    declines.push_back("cudnn: cuDNN rejects the operation graph: " + c.b.error());
    return false;
  }
  lg->op_graph = og;
  lg->keep.push_back(og);
  lg->signature = c.b.signature();
  for (const auto& t : g.tensors())
    if (!t->get_is_virtual() && !t->get_is_pass_by_value() && t->storage_bytes() > 0) lg->bytes += double(t->storage_bytes());
  result = std::move(lg);
  return true;
}

}  // namespace opendnn::cudnn
