// SPDX-License-Identifier: Apache-2.0
// Lowering of the ops that map one-to-one onto backend operations: pointwise (every mode), matmul,
// convolutions, reduction, reshape, normalisations (layer/rms/instance/batch, forward and backward)
// and genstats.
#include <cmath>

#include "engines/cudnn/lower.h"

namespace opendnn::cudnn {
namespace {

bool pw_mode(PointwiseMode m, cudnnPointwiseMode_t& out) {
  switch (m) {
#define M(ours, theirs) \
  case PointwiseMode::ours: out = theirs; return true;
    M(ADD, CUDNN_POINTWISE_ADD) M(MUL, CUDNN_POINTWISE_MUL) M(SUB, CUDNN_POINTWISE_SUB) M(DIV, CUDNN_POINTWISE_DIV)
    M(ADD_SQUARE, CUDNN_POINTWISE_ADD_SQUARE) M(MAX, CUDNN_POINTWISE_MAX) M(MIN, CUDNN_POINTWISE_MIN)
    M(MOD, CUDNN_POINTWISE_MOD) M(POW, CUDNN_POINTWISE_POW) M(NEG, CUDNN_POINTWISE_NEG) M(ABS, CUDNN_POINTWISE_ABS)
    M(RECIPROCAL, CUDNN_POINTWISE_RECIPROCAL) M(IDENTITY, CUDNN_POINTWISE_IDENTITY) M(SQRT, CUDNN_POINTWISE_SQRT)
    M(RSQRT, CUDNN_POINTWISE_RSQRT) M(EXP, CUDNN_POINTWISE_EXP) M(LOG, CUDNN_POINTWISE_LOG) M(ERF, CUDNN_POINTWISE_ERF)
    M(SIN, CUDNN_POINTWISE_SIN) M(COS, CUDNN_POINTWISE_COS) M(TAN, CUDNN_POINTWISE_TAN) M(CEIL, CUDNN_POINTWISE_CEIL)
    M(FLOOR, CUDNN_POINTWISE_FLOOR) M(RELU_FWD, CUDNN_POINTWISE_RELU_FWD) M(RELU_BWD, CUDNN_POINTWISE_RELU_BWD)
    M(TANH_FWD, CUDNN_POINTWISE_TANH_FWD) M(TANH_BWD, CUDNN_POINTWISE_TANH_BWD)
    M(SIGMOID_FWD, CUDNN_POINTWISE_SIGMOID_FWD) M(SIGMOID_BWD, CUDNN_POINTWISE_SIGMOID_BWD)
    M(ELU_FWD, CUDNN_POINTWISE_ELU_FWD) M(ELU_BWD, CUDNN_POINTWISE_ELU_BWD) M(GELU_FWD, CUDNN_POINTWISE_GELU_FWD)
    M(GELU_BWD, CUDNN_POINTWISE_GELU_BWD) M(GELU_APPROX_TANH_FWD, CUDNN_POINTWISE_GELU_APPROX_TANH_FWD)
    M(GELU_APPROX_TANH_BWD, CUDNN_POINTWISE_GELU_APPROX_TANH_BWD) M(SOFTPLUS_FWD, CUDNN_POINTWISE_SOFTPLUS_FWD)
    M(SOFTPLUS_BWD, CUDNN_POINTWISE_SOFTPLUS_BWD) M(SWISH_FWD, CUDNN_POINTWISE_SWISH_FWD)
    M(SWISH_BWD, CUDNN_POINTWISE_SWISH_BWD) M(CMP_EQ, CUDNN_POINTWISE_CMP_EQ) M(CMP_NEQ, CUDNN_POINTWISE_CMP_NEQ)
    M(CMP_GT, CUDNN_POINTWISE_CMP_GT) M(CMP_GE, CUDNN_POINTWISE_CMP_GE) M(CMP_LT, CUDNN_POINTWISE_CMP_LT)
    M(CMP_LE, CUDNN_POINTWISE_CMP_LE) M(LOGICAL_AND, CUDNN_POINTWISE_LOGICAL_AND)
    M(LOGICAL_OR, CUDNN_POINTWISE_LOGICAL_OR) M(LOGICAL_NOT, CUDNN_POINTWISE_LOGICAL_NOT)
    M(GEN_INDEX, CUDNN_POINTWISE_GEN_INDEX) M(BINARY_SELECT, CUDNN_POINTWISE_BINARY_SELECT)
#undef M
  }
  return false;
}

bool is_backward_activation(PointwiseMode m) {
  switch (m) {
    case PointwiseMode::RELU_BWD: case PointwiseMode::TANH_BWD: case PointwiseMode::SIGMOID_BWD:
    case PointwiseMode::ELU_BWD: case PointwiseMode::GELU_BWD: case PointwiseMode::GELU_APPROX_TANH_BWD:
    case PointwiseMode::SOFTPLUS_BWD: case PointwiseMode::SWISH_BWD: return true;
    default: return false;
  }
}

// A graph of pointwise (and reduction) ops only: served by cuDNN's generic pointwise fusion engine.
bool elementwise_only(const Graph& g) {
  for (const auto& n : g.nodes())
    if (n->kind() != OpKind::POINTWISE && n->kind() != OpKind::REDUCTION) return false;
  return true;
}

bool lower_pointwise(LowerCtx& c, const Node& n, std::string& why) {
  PointwiseMode m = n.pointwise_mode();
  cudnnPointwiseMode_t mode;
  if (!pw_mode(m, mode)) {
    why = "pointwise mode " + std::string(to_string(m)) + " has no cuDNN equivalent";
    return false;
  }
  // cuDNN 9.19's pointwise fusion engine (H200) gave wrong values past the first batch for a [1,1,32] bias
  // added to a [2,16,32] tensor (packed strides {32,32,1}): an operand broadcast along the outermost dim.
  // Zero strides or a channels-last description instead are rejected ("get_matrix_layout != RowMajor").
  // Declined until a layout that computes right is found (the same add after a matmul is correct).
  if (elementwise_only(c.g) && n.out("OUT_0")) {
    int64_t out0 = c.padded_dims(*n.out("OUT_0"))[0];
    for (const auto& t : n.inputs())
      if (t && !t->get_is_pass_by_value() && c.padded_dims(*t)[0] == 1 && out0 > 1) {
        why = "input " + t->get_name() + " broadcasts along the outermost dim, which cuDNN 9.19's pointwise engine " +
              "computes wrongly for batch > 0 in a pointwise-only graph";
        return false;
      }
  }
  auto& b = c.b;
  bool ok = true;
  DescPtr pw = b.make(CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
  b.set(pw, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode);
  b.set_dtype(pw, CUDNN_ATTR_POINTWISE_MATH_PREC, to_cudnn(c.compute_type(n), &ok));
  if (m == PointwiseMode::GEN_INDEX) {
    int64_t axis = n.attr_int("axis") + (c.rank - int64_t(n.out("OUT_0")->get_dim().size()));
    b.set_i64(pw, CUDNN_ATTR_POINTWISE_AXIS, axis);
  }
  // Activation parameters are doubles in the backend API.
  auto dbl = [&](const char* ours, cudnnBackendAttributeName_t theirs) {
    if (n.has(ours)) b.set_double(pw, theirs, n.attr_float(ours));
  };
  dbl("relu_lower_clip", CUDNN_ATTR_POINTWISE_RELU_LOWER_CLIP);
  dbl("relu_upper_clip", CUDNN_ATTR_POINTWISE_RELU_UPPER_CLIP);
  dbl("relu_lower_clip_slope", CUDNN_ATTR_POINTWISE_RELU_LOWER_CLIP_SLOPE);
  dbl("elu_alpha", CUDNN_ATTR_POINTWISE_ELU_ALPHA);
  dbl("softplus_beta", CUDNN_ATTR_POINTWISE_SOFTPLUS_BETA);
  dbl("swish_beta", CUDNN_ATTR_POINTWISE_SWISH_BETA);
  b.finalize(pw, "pointwise descriptor");
  if (pw) c.out.keep.push_back(pw);
  DescPtr op = b.make(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
  b.set_desc(op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, pw);
  const auto& in = n.inputs();
  if (is_backward_activation(m)) {  // (dY, X) -> dX
    b.set_desc(op, CUDNN_ATTR_OPERATION_POINTWISE_DYDESC, c.tensor(in[0]));
    b.set_desc(op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, c.tensor(in[1]));
    b.set_desc(op, CUDNN_ATTR_OPERATION_POINTWISE_DXDESC, c.tensor(n.out("OUT_0")));
  } else {
    b.set_desc(op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, c.tensor(in[0]));
    if (in.size() > 1 && in[1]) b.set_desc(op, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, c.tensor(in[1]));
    if (in.size() > 2 && in[2]) b.set_desc(op, CUDNN_ATTR_OPERATION_POINTWISE_TDESC, c.tensor(in[2]));
    b.set_desc(op, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, c.tensor(n.out("OUT_0")));
  }
  b.finalize(op, "pointwise operation");
  c.add_op(op);
  return b.ok();
}

bool lower_matmul(LowerCtx& c, const Node& n, std::string& why) {
  if (n.attr_float("padding") != 0.0) {
    why = "matmul padding is not lowered";
    return false;
  }
  auto& b = c.b;
  bool ok = true;
  DescPtr md = b.make(CUDNN_BACKEND_MATMUL_DESCRIPTOR);
  b.set_dtype(md, CUDNN_ATTR_MATMUL_COMP_TYPE, to_cudnn(c.compute_type(n), &ok));
  b.finalize(md, "matmul descriptor");
  if (md) c.out.keep.push_back(md);
  DescPtr op = b.make(CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR);
  b.set_desc(op, CUDNN_ATTR_OPERATION_MATMUL_ADESC, c.tensor(n.in("A")));
  b.set_desc(op, CUDNN_ATTR_OPERATION_MATMUL_BDESC, c.tensor(n.in("B")));
  b.set_desc(op, CUDNN_ATTR_OPERATION_MATMUL_CDESC, c.tensor(n.out("C")));
  b.set_desc(op, CUDNN_ATTR_OPERATION_MATMUL_DESC, md);
  if (n.in("M_override")) b.set_desc(op, CUDNN_ATTR_OPERATION_MATMUL_GEMM_M_OVERRIDE_DESC, c.tensor(n.in("M_override")));
  if (n.in("N_override")) b.set_desc(op, CUDNN_ATTR_OPERATION_MATMUL_GEMM_N_OVERRIDE_DESC, c.tensor(n.in("N_override")));
  if (n.in("K_override")) b.set_desc(op, CUDNN_ATTR_OPERATION_MATMUL_GEMM_K_OVERRIDE_DESC, c.tensor(n.in("K_override")));
  b.finalize(op, "matmul operation");
  c.add_op(op);
  c.out.flops += 2.0 * double(n.out("C")->volume()) * double(n.in("A")->get_dim().back());
  return b.ok();
}

bool lower_conv(LowerCtx& c, const Node& n, std::string& why) {
  const TensorPtr* x = nullptr; const TensorPtr* w = nullptr; const TensorPtr* y = nullptr;
  cudnnBackendDescriptorType_t type;
  cudnnBackendAttributeName_t ax, aw, ay, aalpha, abeta, adesc;
  if (n.kind() == OpKind::CONV_FPROP) {
    x = &n.in("X"); w = &n.in("W"); y = &n.out("Y");
    type = CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR;
    ax = CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X; aw = CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W;
    ay = CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y; aalpha = CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA;
    abeta = CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA; adesc = CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC;
  } else if (n.kind() == OpKind::CONV_DGRAD) {
    x = &n.out("DX"); w = &n.in("W"); y = &n.in("DY");
    type = CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR;
    ax = CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DX; aw = CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_W;
    ay = CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DY; aalpha = CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_ALPHA;
    abeta = CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_BETA; adesc = CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_CONV_DESC;
  } else {
    x = &n.in("X"); w = &n.out("DW"); y = &n.in("DY");
    type = CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR;
    ax = CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_X; aw = CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DW;
    ay = CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DY; aalpha = CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_ALPHA;
    abeta = CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_BETA; adesc = CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_CONV_DESC;
  }
  int rank = int((*x)->get_dim().size());
  if (rank < 3 || rank > 5 || rank != c.rank) {
    why = "convolution tensors must all have rank 3 to 5 (got " + std::to_string(rank) + ")";
    return false;
  }
  int64_t sd = rank - 2;
  auto list = [&](const char* name, int64_t dflt) {
    std::vector<int64_t> v = n.attr_ints(name);
    if (v.empty()) v.assign(size_t(sd), dflt);
    return v;
  };
  std::vector<int64_t> pre = list("pre_padding", 0), post = list("post_padding", 0), stride = list("stride", 1),
                       dil = list("dilation", 1);
  if (int64_t(pre.size()) != sd || int64_t(post.size()) != sd || int64_t(stride.size()) != sd || int64_t(dil.size()) != sd) {
    why = "padding/stride/dilation must have " + std::to_string(sd) + " entries";
    return false;
  }
  auto& b = c.b;
  bool ok = true;
  DataType ct = c.compute_type(n);
  DescPtr cd = b.make(CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR);
  b.set_dtype(cd, CUDNN_ATTR_CONVOLUTION_COMP_TYPE, to_cudnn(ct, &ok));
  cudnnConvolutionMode_t mode = n.attr_str("convolution_mode") == "CONVOLUTION" ? CUDNN_CONVOLUTION : CUDNN_CROSS_CORRELATION;
  b.set(cd, CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, 1, &mode);
  b.set_i64(cd, CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, sd);
  b.set_i64s(cd, CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, pre);
  b.set_i64s(cd, CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, post);
  b.set_i64s(cd, CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, stride);
  b.set_i64s(cd, CUDNN_ATTR_CONVOLUTION_DILATIONS, dil);
  b.finalize(cd, "convolution descriptor");
  if (cd) c.out.keep.push_back(cd);
  DescPtr op = b.make(type);
  b.set_desc(op, ax, c.tensor(*x));
  b.set_desc(op, aw, c.tensor(*w));
  b.set_desc(op, ay, c.tensor(*y));
  b.set_desc(op, adesc, cd);
  if (ct == DataType::DOUBLE) {
    b.set_double(op, aalpha, 1.0);
    b.set_double(op, abeta, 0.0);
  } else {
    b.set_float(op, aalpha, 1.0f);
    b.set_float(op, abeta, 0.0f);
  }
  b.finalize(op, "convolution operation");
  c.add_op(op);
  // FLOPs: 2 * |Y| * C_in/groups * prod(filter spatial), with |Y| the output-activation volume.
  const auto& wd = (*w)->get_dim();
  double k = 1;
  for (size_t i = 1; i < wd.size(); ++i) k *= double(wd[i]);
  c.out.flops += 2.0 * double((*y)->volume()) * k;
  return b.ok();
}

bool lower_reduction(LowerCtx& c, const Node& n, std::string& why) {
  static const std::pair<const char*, cudnnReduceTensorOp_t> kModes[] = {
      {"ADD", CUDNN_REDUCE_TENSOR_ADD},     {"MUL", CUDNN_REDUCE_TENSOR_MUL},     {"MIN", CUDNN_REDUCE_TENSOR_MIN},
      {"MAX", CUDNN_REDUCE_TENSOR_MAX},     {"AMAX", CUDNN_REDUCE_TENSOR_AMAX},   {"AVG", CUDNN_REDUCE_TENSOR_AVG},
      {"NORM1", CUDNN_REDUCE_TENSOR_NORM1}, {"NORM2", CUDNN_REDUCE_TENSOR_NORM2}, {"MUL_NO_ZEROS", CUDNN_REDUCE_TENSOR_MUL_NO_ZEROS}};
  const std::string& m = n.attr_str("mode");
  for (auto& [name, op] : kModes) {
    if (m != name) continue;
    c.reduction(op, c.tensor(n.in("X")), c.tensor(n.out("Y")), c.compute_type(n), n.attr_bool("is_deterministic"));
    return c.b.ok();
  }
  why = "reduction mode '" + m + "' is not set or unknown";
  return false;
}

// Groups a rank-r tensor's axes into [0,k) and [k,r) and describes it as [prod, prod, 1, 1] under its
// own uid; false if a group is not one dense run of memory.
bool flat_view(LowerCtx& c, const TensorPtr& t, size_t k, std::string& why) {
  const auto& d = t->get_dim();
  const auto& st = t->get_stride();
  std::vector<int64_t> dims = {1, 1, 1, 1}, strides = {1, 1, 1, 1};
  for (size_t g = 0; g < 2; ++g) {
    size_t lo = g == 0 ? 0 : k, hi = g == 0 ? k : d.size();
    int64_t inner = -1;  // stride of the innermost non-1 axis of the group seen so far, times its extent
    for (size_t i = hi; i-- > lo;) {
      if (d[i] == 1) continue;
      if (inner >= 0 && st[i] != inner) {
        why = "tensor " + t->get_name() + " cannot be viewed as 4-D for cuDNN's norms (axes not dense)";
        return false;
      }
      if (inner < 0) strides[g] = st[i];
      dims[g] *= d[i];
      inner = st[i] * d[i];
    }
  }
  if (dims[0] == 1) strides[0] = dims[1] * strides[1];
  return c.tensor_view(t, dims, strides) != nullptr;
}

// The 4-D views of a rank-2/3 layer/RMS norm's tensors: row axes (where the statistics have X's extent,
// or by default axis 0 and every axis where scale has extent 1) must lead.
bool norm_views(LowerCtx& c, const Node& n, std::string& why) {
  OpKind k = n.kind();
  if (k != OpKind::LAYERNORM && k != OpKind::RMSNORM && k != OpKind::LAYERNORM_BACKWARD && k != OpKind::RMSNORM_BACKWARD) {
    why = "cuDNN norms of this kind are lowered for 4-D/5-D X only";
    return false;
  }
  if (c.rank != 4) {
    why = "a rank-2/3 norm is lowered only in a graph whose tensors have rank <= 4";
    return false;
  }
  const auto& xd = n.in("X")->get_dim();
  TensorPtr stats = n.spec().output_index("inv_variance") >= 0 ? n.out("inv_variance") : n.in("inv_variance");
  if (stats && stats->get_dim().size() != xd.size()) stats = nullptr;
  const TensorPtr& scale = n.in("scale");
  size_t rows = 0;
  for (size_t i = 0; i < xd.size(); ++i) {
    bool row = stats ? stats->get_dim()[i] == xd[i] : (i == 0 || (scale && scale->get_dim().size() == xd.size() && scale->get_dim()[i] == 1));
    if (row && rows != i) {
      why = "cuDNN norms need the row (statistics) axes first";
      return false;
    }
    if (row) rows = i + 1;
  }
  for (const auto& t : n.inputs())
    if (t && t->get_dim().size() == xd.size() && !t->get_is_pass_by_value() && !flat_view(c, t, rows, why)) return false;
  for (const auto& t : n.outputs()) {
    if (!t || t->get_dim().size() != xd.size()) continue;
    // A virtual output would chain into other ops in X's rank, which the views do not cover.
    if (t->get_is_virtual()) continue;
    if (!flat_view(c, t, rows, why)) return false;
  }
  return true;
}

// NORM_FORWARD / NORM_BACKWARD for layer, rms, instance and batch norms.
bool lower_norm(LowerCtx& c, const Node& n, std::string& why) {
  auto& b = c.b;
  cudnnBackendNormMode_t mode;
  bool fwd = true;
  switch (n.kind()) {
    case OpKind::LAYERNORM: mode = CUDNN_LAYER_NORM; break;
    case OpKind::RMSNORM: mode = CUDNN_RMS_NORM; break;
    case OpKind::INSTANCENORM: mode = CUDNN_INSTANCE_NORM; break;
    case OpKind::ADALAYERNORM: mode = CUDNN_ADA_LAYER_NORM; break;
    case OpKind::BATCHNORM: mode = CUDNN_BATCH_NORM; break;
    case OpKind::BATCHNORM_INFERENCE: mode = CUDNN_BATCH_NORM; break;
    case OpKind::LAYERNORM_BACKWARD: mode = CUDNN_LAYER_NORM; fwd = false; break;
    case OpKind::RMSNORM_BACKWARD: mode = CUDNN_RMS_NORM; fwd = false; break;
    case OpKind::INSTANCENORM_BACKWARD: mode = CUDNN_INSTANCE_NORM; fwd = false; break;
    case OpKind::ADALAYERNORM_BACKWARD: mode = CUDNN_ADA_LAYER_NORM; fwd = false; break;
    case OpKind::BATCHNORM_BACKWARD: mode = CUDNN_BATCH_NORM; fwd = false; break;
    default: why = "not a normalisation"; return false;
  }
  // cuDNN's norms take 4-D/5-D [N,C,...] tensors and normalise per N. Lower-rank layer/RMS norms are
  // described as [rows, normalised, 1, 1] views (leading 1s, the generic padding, would make N = 1).
  if (n.in("X")->get_dim().size() < 4 && !norm_views(c, n, why)) return false;
  auto opt = [&](const char* port) -> DescPtr {
    const TensorPtr& t = n.in(port);
    return t ? c.tensor(t) : nullptr;
  };
  auto opt_out = [&](const char* port) -> DescPtr {
    const TensorPtr& t = n.out(port);
    return t ? c.tensor(t) : nullptr;
  };
  if (fwd) {
    DescPtr op = b.make(CUDNN_BACKEND_OPERATION_NORM_FORWARD_DESCRIPTOR);
    b.set(op, CUDNN_ATTR_OPERATION_NORM_FWD_MODE, CUDNN_TYPE_NORM_MODE, 1, &mode);
    cudnnBackendNormFwdPhase_t phase = CUDNN_NORM_FWD_TRAINING;
    if (n.kind() == OpKind::BATCHNORM_INFERENCE) phase = CUDNN_NORM_FWD_INFERENCE;
    else if (n.kind() != OpKind::BATCHNORM && n.attr_str("forward_phase") == "INFERENCE") phase = CUDNN_NORM_FWD_INFERENCE;
    b.set(op, CUDNN_ATTR_OPERATION_NORM_FWD_PHASE, CUDNN_TYPE_NORM_FWD_PHASE, 1, &phase);
    b.set_desc(op, CUDNN_ATTR_OPERATION_NORM_FWD_XDESC, c.tensor(n.in("X")));
    b.set_desc(op, CUDNN_ATTR_OPERATION_NORM_FWD_YDESC, c.tensor(n.out("Y")));
    b.set_desc(op, CUDNN_ATTR_OPERATION_NORM_FWD_SCALE_DESC, c.tensor(n.in("scale")));
    if (DescPtr bias = opt("bias")) b.set_desc(op, CUDNN_ATTR_OPERATION_NORM_FWD_BIAS_DESC, bias);
    if (n.kind() == OpKind::BATCHNORM_INFERENCE) {
      b.set_desc(op, CUDNN_ATTR_OPERATION_NORM_FWD_MEAN_DESC, c.tensor(n.in("mean")));
      b.set_desc(op, CUDNN_ATTR_OPERATION_NORM_FWD_INV_VARIANCE_DESC, c.tensor(n.in("inv_variance")));
    } else {
      if (DescPtr e = opt("epsilon")) b.set_desc(op, CUDNN_ATTR_OPERATION_NORM_FWD_EPSILON_DESC, e);
      if (phase == CUDNN_NORM_FWD_TRAINING) {
        if (n.kind() != OpKind::RMSNORM) b.set_desc(op, CUDNN_ATTR_OPERATION_NORM_FWD_MEAN_DESC, opt_out("mean"));
        b.set_desc(op, CUDNN_ATTR_OPERATION_NORM_FWD_INV_VARIANCE_DESC, opt_out("inv_variance"));
      }
      if (n.kind() == OpKind::BATCHNORM) {
        if (DescPtr m = opt("momentum")) b.set_desc(op, CUDNN_ATTR_OPERATION_NORM_FWD_EXP_AVG_FACTOR_DESC, m);
        if (DescPtr m = opt("prev_running_mean")) {
          b.set_desc(op, CUDNN_ATTR_OPERATION_NORM_FWD_INPUT_RUNNING_MEAN_DESC, m);
          b.set_desc(op, CUDNN_ATTR_OPERATION_NORM_FWD_INPUT_RUNNING_VAR_DESC, opt("prev_running_var"));
          b.set_desc(op, CUDNN_ATTR_OPERATION_NORM_FWD_OUTPUT_RUNNING_MEAN_DESC, opt_out("next_running_mean"));
          b.set_desc(op, CUDNN_ATTR_OPERATION_NORM_FWD_OUTPUT_RUNNING_VAR_DESC, opt_out("next_running_var"));
        }
      }
    }
    b.finalize(op, "norm forward operation");
    c.add_op(op);
  } else {
    DescPtr op = b.make(CUDNN_BACKEND_OPERATION_NORM_BACKWARD_DESCRIPTOR);
    b.set(op, CUDNN_ATTR_OPERATION_NORM_BWD_MODE, CUDNN_TYPE_NORM_MODE, 1, &mode);
    b.set_desc(op, CUDNN_ATTR_OPERATION_NORM_BWD_XDESC, c.tensor(n.in("X")));
    b.set_desc(op, CUDNN_ATTR_OPERATION_NORM_BWD_DYDESC, c.tensor(n.in("DY")));
    b.set_desc(op, CUDNN_ATTR_OPERATION_NORM_BWD_SCALE_DESC, c.tensor(n.in("scale")));
    if (n.kind() != OpKind::RMSNORM_BACKWARD) b.set_desc(op, CUDNN_ATTR_OPERATION_NORM_BWD_MEAN_DESC, c.tensor(n.in("mean")));
    b.set_desc(op, CUDNN_ATTR_OPERATION_NORM_BWD_INV_VARIANCE_DESC, c.tensor(n.in("inv_variance")));
    if (n.kind() != OpKind::RMSNORM_BACKWARD && n.kind() != OpKind::BATCHNORM_BACKWARD)
      if (DescPtr e = opt("epsilon")) b.set_desc(op, CUDNN_ATTR_OPERATION_NORM_BWD_EPSILON_DESC, e);
    b.set_desc(op, CUDNN_ATTR_OPERATION_NORM_BWD_DXDESC, c.tensor(n.out("DX")));
    b.set_desc(op, CUDNN_ATTR_OPERATION_NORM_BWD_DSCALE_DESC, c.tensor(n.out("dscale")));
    bool dbias = n.kind() != OpKind::RMSNORM_BACKWARD || n.attr_bool("has_dbias");
    if (dbias) b.set_desc(op, CUDNN_ATTR_OPERATION_NORM_BWD_DBIAS_DESC, c.tensor(n.out("dbias")));
    b.finalize(op, "norm backward operation");
    c.add_op(op);
  }
  (void)why;
  return b.ok();
}

bool lower_genstats(LowerCtx& c, const Node& n, std::string&) {
  auto& b = c.b;
  bool ok = true;
  DescPtr op = b.make(CUDNN_BACKEND_OPERATION_GEN_STATS_DESCRIPTOR);
  cudnnGenStatsMode_t mode = CUDNN_GENSTATS_SUM_SQSUM;
  b.set(op, CUDNN_ATTR_OPERATION_GENSTATS_MODE, CUDNN_TYPE_GENSTATS_MODE, 1, &mode);
  b.set_dtype(op, CUDNN_ATTR_OPERATION_GENSTATS_MATH_PREC, to_cudnn(c.compute_type(n), &ok));
  b.set_desc(op, CUDNN_ATTR_OPERATION_GENSTATS_XDESC, c.tensor(n.in("X")));
  b.set_desc(op, CUDNN_ATTR_OPERATION_GENSTATS_SUMDESC, c.tensor(n.out("sum")));
  b.set_desc(op, CUDNN_ATTR_OPERATION_GENSTATS_SQSUMDESC, c.tensor(n.out("sq_sum")));
  b.finalize(op, "genstats operation");
  c.add_op(op);
  return b.ok();
}

// SLICE of a graph input into a virtual tensor: the slice is the input's memory seen with other dims,
// strides and start, so it becomes a user tensor of its own at the input's pointer plus an offset.
bool lower_slice(LowerCtx& c, const Node& n, std::string& why) {
  const TensorPtr& x = n.in("X");
  const TensorPtr& y = n.out("Y");
  if (x->get_is_virtual() || x->is_produced()) {
    why = "not supported: a slice of an intermediate tensor (cuDNN has no slice operation; only a slice of a graph input is lowered)";
    return false;
  }
  if (!y->get_is_virtual()) {
    why = "not supported: a slice as a graph output (it is a view of the input: read the input instead)";
    return false;
  }
  const auto& xd = x->get_dim();
  const auto& xs = x->get_stride();
  const auto& start = n.attr_ints("start");
  const auto& step = n.attr_ints("stride");
  TensorAttr view;
  std::vector<int64_t> vs(xd.size());
  int64_t offset = 0;
  for (size_t i = 0; i < xd.size(); ++i) {
    int64_t d = xd[i], b = i < start.size() ? start[i] : 0;
    if (b < 0) b = b < -d ? 0 : b + d;  // the catalogue's clamp (ops/layout.cpp)
    b = std::min(b, d);
    offset += b * xs[i];
    vs[i] = xs[i] * (i < step.size() ? step[i] : 1);
  }
  int64_t bytes = offset * int64_t(bits_of(x->get_data_type())) / 8;
  if (offset * int64_t(bits_of(x->get_data_type())) % 8 != 0 || bytes % 16 != 0) {
    why = "not supported: the slice starts " + std::to_string(bytes) + " bytes into " + x->get_name() +
          ", not a multiple of cuDNN's 16-byte alignment";
    return false;
  }
  view.set_dim(y->get_dim());
  view.set_stride(vs);
  int64_t uid = c.next_uid;
  DescPtr d = c.make_tensor(c.padded_dims(view), c.padded_strides(view), x->get_data_type(), false);
  if (!d) return false;
  c.tensors[y.get()] = d;
  c.out.offset_views.push_back({uid, x->get_uid(), bytes});
  return c.b.ok();
}

}  // namespace

bool lower_generic_node(LowerCtx& c, const Node& n, std::string& why) {
  switch (n.kind()) {
    case OpKind::POINTWISE: return lower_pointwise(c, n, why);
    case OpKind::MATMUL: return lower_matmul(c, n, why);
    case OpKind::CONV_FPROP: case OpKind::CONV_DGRAD: case OpKind::CONV_WGRAD: return lower_conv(c, n, why);
    case OpKind::REDUCTION: return lower_reduction(c, n, why);
    case OpKind::RESHAPE:
      c.reshape(c.tensor(n.in("X")), c.tensor(n.out("Y")));
      return c.b.ok();
    case OpKind::LAYERNORM: case OpKind::RMSNORM: case OpKind::INSTANCENORM: case OpKind::BATCHNORM:
    case OpKind::BATCHNORM_INFERENCE: case OpKind::LAYERNORM_BACKWARD: case OpKind::RMSNORM_BACKWARD:
    case OpKind::INSTANCENORM_BACKWARD: case OpKind::BATCHNORM_BACKWARD:
      return lower_norm(c, n, why);
    case OpKind::ADALAYERNORM: case OpKind::ADALAYERNORM_BACKWARD:
      if (c.version < 91100) {
        why = "adaptive layernorm needs cuDNN 9.11 or newer";
        return false;
      }
      return lower_norm(c, n, why);
    case OpKind::GENSTATS: return lower_genstats(c, n, why);
    case OpKind::SLICE: return lower_slice(c, n, why);
    default:
      why = "the cudnn engine does not lower this op yet";
      return false;
  }
}

}  // namespace opendnn::cudnn
