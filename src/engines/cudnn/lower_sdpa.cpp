// SPDX-License-Identifier: Apache-2.0
// SDPA forward and backward, as cuDNN's fused flash-attention operation graphs ("composite") or, when
// the loaded cuDNN has it and the node needs no mask, as the single SDPA_FWD/SDPA_BWD backend op
// ("unified").
//
// Composite forward (logical [B, H, S, D] tensors, fp32 intermediates):
//   S = Q·Kᵀ  (Kᵀ: an alias of K with its last two dims and strides swapped)
//   S = S * scale                              (attn_scale tensor or attn_scale_value, by value)
//   causal/right band: keep col <= row + right_bound (+ s_kv - s_q when BOTTOM_RIGHT):
//     r = gen_index(S, axis 2) [+ shift], k = gen_index(S, axis 3), m = r >= k, S = select(S, -inf, m)
//   M = max_k S; Z = sum_k exp(S - M); Stats = M + log Z; P = exp(S - Stats)
//   O = P·V
// Composite backward:
//   Dsum = sum_d(dO * O)                       (fp32, a workspace tensor)
//   S as above; P = exp(S - Stats); dV = Pᵀ·dO (Pᵀ: a reshape of P with swapped strides)
//   dP = dO·Vᵀ; dS = P * (dP - Dsum) * scale; dK = dSᵀ·Q
//   dQ = dS·K, accumulated in an fp32 workspace tensor (zeroed before each run) then copied to dQ,
//   unless use_deterministic_algorithm, where dQ is written directly.
#include <cmath>
#include <limits>

#include "engines/cudnn/lower.h"

namespace opendnn::cudnn {
namespace {

std::vector<int64_t> swap_last2(std::vector<int64_t> v) {
  std::swap(v[v.size() - 1], v[v.size() - 2]);
  return v;
}

// Rejects what neither implementation lowers yet, naming the option.
bool common_checks(const Node& n, std::string& why) {
  auto has_in = [&](const char* p) { return n.in(p) != nullptr; };
  for (const char* p : {"bias", "seq_len_q", "seq_len_kv", "cu_seq_len_q", "cu_seq_len_kv", "seed", "offset",
                        "dropout_mask", "dropout_scale", "sink_token"}) {
    if (has_in(p)) {
      why = std::string("input ") + p + " is not lowered by the cudnn engine yet";
      return false;
    }
  }
  if (n.kind() == OpKind::SDPA)
    for (const char* p : {"page_table_k", "page_table_v", "block_mask"})
      if (has_in(p)) {
        why = std::string("input ") + p + " is not lowered by the cudnn engine yet";
        return false;
      }
  if (n.attr_bool("use_padding_mask")) { why = "use_padding_mask is not lowered yet"; return false; }
  if (n.attr_bool("use_alibi_mask")) { why = "use_alibi_mask is not lowered yet"; return false; }
  if (n.attr_float("dropout_probability") != 0.0) { why = "dropout is not lowered yet"; return false; }
  if (n.has("left_bound")) { why = "left_bound (sliding window) is not lowered yet"; return false; }
  if (n.has("right_bound") && n.attr_int("right_bound") < 0) { why = "right_bound must be >= 0"; return false; }
  for (const char* p : {"Q", "K", "V"}) {
    const auto& t = n.in(p);
    if (t->get_dim().size() != 4) { why = std::string(p) + " must have rank 4 [B,H,S,D]"; return false; }
    if (t->get_ragged_offset()) { why = std::string(p) + " has a ragged offset (THD), not lowered yet"; return false; }
    DataType dt = t->get_data_type();
    if (dt != DataType::HALF && dt != DataType::BFLOAT16) {
      why = std::string(p) + " must be HALF or BFLOAT16 (fp8 attention goes through sdpa_fp8)";
      return false;
    }
  }
  const auto& q = n.in("Q")->get_dim();
  const auto& k = n.in("K")->get_dim();
  const auto& v = n.in("V")->get_dim();
  if (q[3] % 8 || v[3] % 8 || q[3] > 256 || v[3] > 256) {
    why = "head dims must be multiples of 8 and at most 256 (Q d=" + std::to_string(q[3]) + ", V d=" + std::to_string(v[3]) + ")";
    return false;
  }
  if (k[1] == 0 || q[1] % k[1] || v[1] == 0 || q[1] % v[1]) {
    why = "H_q (" + std::to_string(q[1]) + ") must be a multiple of H_k and H_v";
    return false;
  }
  return true;
}

bool needs_mask(const Node& n) { return n.has("right_bound"); }

// Scale tensor (nullptr: no scaling).
DescPtr scale_tensor(LowerCtx& c, const Node& n) {
  if (n.in("attn_scale")) return c.tensor(n.in("attn_scale"));
  if (n.has("attn_scale_value")) return c.scalar_f32(float(n.attr_float("attn_scale_value")));
  return nullptr;
}

// S (virtual fp32 [B,Hq,Sq,Skv]) = mask(scale * Q·Kᵀ); returns the last tensor.
DescPtr scores(LowerCtx& c, const Node& n, DescPtr scale) {
  const TensorPtr& Q = n.in("Q");
  const TensorPtr& K = n.in("K");
  const auto& qd = Q->get_dim();
  const auto& kd = K->get_dim();
  std::vector<int64_t> sdims = {qd[0], qd[1], qd[2], kd[2]};
  DescPtr kt = c.alias(K, swap_last2(kd), swap_last2(K->get_stride()));
  DescPtr s = c.virt(sdims);
  c.matmul(c.tensor(Q), kt, s);
  if (scale) {
    DescPtr s2 = c.virt(sdims);
    c.pointwise(CUDNN_POINTWISE_MUL, s, scale, s2);
    s = s2;
  }
  if (needs_mask(n)) {
    int64_t shift = n.attr_int("right_bound");
    if (n.attr_str("diagonal_alignment") == "BOTTOM_RIGHT") shift += kd[2] - qd[2];
    DescPtr row = c.virt(sdims, DataType::INT32);
    c.pointwise(CUDNN_POINTWISE_GEN_INDEX, s, nullptr, row, nullptr, DataType::FLOAT, 2);
    DescPtr col = c.virt(sdims, DataType::INT32);
    c.pointwise(CUDNN_POINTWISE_GEN_INDEX, s, nullptr, col, nullptr, DataType::FLOAT, 3);
    if (shift != 0) {
      DescPtr row2 = c.virt(sdims, DataType::INT32);
      c.pointwise(CUDNN_POINTWISE_ADD, row, c.scalar_i32(int32_t(shift)), row2);
      row = row2;
    }
    DescPtr keep = c.virt(sdims, DataType::BOOLEAN);
    c.pointwise(CUDNN_POINTWISE_CMP_GE, row, col, keep);
    DescPtr s2 = c.virt(sdims);
    c.pointwise(CUDNN_POINTWISE_BINARY_SELECT, s, c.scalar_f32(-std::numeric_limits<float>::infinity()), s2, keep);
    s = s2;
  }
  return s;
}

double attn_flops(const Node& n) {
  const auto& q = n.in("Q")->get_dim();
  const auto& k = n.in("K")->get_dim();
  const auto& v = n.in("V")->get_dim();
  double f = 2.0 * double(q[0]) * double(q[1]) * double(q[2]) * double(k[2]) * double(q[3] + v[3]);
  if (needs_mask(n) && n.attr_int("right_bound") == 0) f *= 0.5;
  return f;
}

bool unified_ok(LowerCtx& c, const Node& n, std::string& why) {
  if (c.version < 91301) { why = "the unified SDPA op needs cuDNN 9.13.1+"; return false; }
  if (needs_mask(n)) { why = "the unified SDPA op of this cuDNN has no mask attributes"; return false; }
  return true;
}

}  // namespace

bool lower_sdpa_node(LowerCtx& c, const Node& n, SdpaImpl impl, std::string& why) {
  if (!common_checks(n, why)) return false;
  if (c.rank != 4) { why = "every tensor of an SDPA graph must have rank <= 4"; return false; }
  bool stats = n.attr_bool("generate_stats");
  const TensorPtr& O = n.out("O");
  const TensorPtr& St = n.out("Stats");
  for (const char* p : {"Max", "Sum_exp", "RNG_dump"})
    if (n.out(p) && !n.out(p)->get_is_virtual()) { why = std::string("output ") + p + " is not lowered yet"; return false; }
  if (stats && St->get_is_virtual()) { why = "generate_stats is set but Stats is virtual"; return false; }
  c.out.flops += attn_flops(n);
  DescPtr scale = scale_tensor(c, n);
  if (impl == SdpaImpl::UNIFIED) {
    if (!unified_ok(c, n, why)) return false;
    auto& b = c.b;
    DescPtr op = b.make(CUDNN_BACKEND_OPERATION_SDPA_FWD_DESCRIPTOR);
    b.set_desc(op, CUDNN_ATTR_OPERATION_SDPA_FWD_QDESC, c.tensor(n.in("Q")));
    b.set_desc(op, CUDNN_ATTR_OPERATION_SDPA_FWD_KDESC, c.tensor(n.in("K")));
    b.set_desc(op, CUDNN_ATTR_OPERATION_SDPA_FWD_VDESC, c.tensor(n.in("V")));
    b.set_desc(op, CUDNN_ATTR_OPERATION_SDPA_FWD_ODESC, c.tensor(O));
    if (stats) b.set_desc(op, CUDNN_ATTR_OPERATION_SDPA_FWD_STATSDESC, c.tensor(St));
    if (!scale) scale = c.scalar_f32(1.0f);
    b.set_desc(op, CUDNN_ATTR_OPERATION_SDPA_FWD_SCALEDESC, scale);
    b.finalize(op, "SDPA_FWD operation");
    if (op) {
      c.out.keep.push_back(op);
      c.ops.push_back(op);
    }
    return b.ok();
  }
  const auto& qd = n.in("Q")->get_dim();
  const auto& kd = n.in("K")->get_dim();
  std::vector<int64_t> sdims = {qd[0], qd[1], qd[2], kd[2]};
  std::vector<int64_t> rdims = {qd[0], qd[1], qd[2], 1};
  DescPtr s = scores(c, n, scale);
  DescPtr mx = c.virt(rdims);
  c.reduction(CUDNN_REDUCE_TENSOR_MAX, s, mx);
  DescPtr sub = c.virt(sdims);
  c.pointwise(CUDNN_POINTWISE_SUB, s, mx, sub);
  DescPtr e = c.virt(sdims);
  c.pointwise(CUDNN_POINTWISE_EXP, sub, nullptr, e);
  DescPtr z = c.virt(rdims);
  c.reduction(CUDNN_REDUCE_TENSOR_ADD, e, z);
  // Stats = M + log Z, then P = exp(S - Stats): the same normalisation the backward graph uses (a
  // max/sub/exp/sum/div softmax found no engine config on cuDNN 9.19, first GPU run).
  DescPtr lz = c.virt(rdims);
  c.pointwise(CUDNN_POINTWISE_LOG, z, nullptr, lz);
  DescPtr lse = stats ? c.tensor(St) : c.virt(rdims);
  c.pointwise(CUDNN_POINTWISE_ADD, mx, lz, lse);
  DescPtr sub2 = c.virt(sdims);
  c.pointwise(CUDNN_POINTWISE_SUB, s, lse, sub2);
  DescPtr p = c.virt(sdims);
  c.pointwise(CUDNN_POINTWISE_EXP, sub2, nullptr, p);
  c.matmul(p, c.tensor(n.in("V")), c.tensor(O));
  return c.b.ok();
}

bool lower_sdpa_backward_node(LowerCtx& c, const Node& n, SdpaImpl impl, std::string& why) {
  if (!common_checks(n, why)) return false;
  if (c.rank != 4) { why = "every tensor of an SDPA graph must have rank <= 4"; return false; }
  for (const char* p : {"dBias", "dSink_token"})
    if (n.out(p) && !n.out(p)->get_is_virtual()) { why = std::string("output ") + p + " is not lowered yet"; return false; }
  c.out.flops += 2.5 * attn_flops(n);
  const TensorPtr& Q = n.in("Q");
  const TensorPtr& K = n.in("K");
  const TensorPtr& V = n.in("V");
  const auto& qd = Q->get_dim();
  const auto& kd = K->get_dim();
  const auto& vd = V->get_dim();
  DescPtr scale = scale_tensor(c, n);
  if (impl == SdpaImpl::UNIFIED) {
    if (!unified_ok(c, n, why)) return false;
    auto& b = c.b;
    DescPtr op = b.make(CUDNN_BACKEND_OPERATION_SDPA_BWD_DESCRIPTOR);
    b.set_desc(op, CUDNN_ATTR_OPERATION_SDPA_BWD_QDESC, c.tensor(Q));
    b.set_desc(op, CUDNN_ATTR_OPERATION_SDPA_BWD_KDESC, c.tensor(K));
    b.set_desc(op, CUDNN_ATTR_OPERATION_SDPA_BWD_VDESC, c.tensor(V));
    b.set_desc(op, CUDNN_ATTR_OPERATION_SDPA_BWD_ODESC, c.tensor(n.in("O")));
    b.set_desc(op, CUDNN_ATTR_OPERATION_SDPA_BWD_DODDESC, c.tensor(n.in("dO")));
    b.set_desc(op, CUDNN_ATTR_OPERATION_SDPA_BWD_STATSDESC, c.tensor(n.in("Stats")));
    if (!scale) scale = c.scalar_f32(1.0f);
    b.set_desc(op, CUDNN_ATTR_OPERATION_SDPA_BWD_SCALEDESC, scale);
    b.set_desc(op, CUDNN_ATTR_OPERATION_SDPA_BWD_DQDESC, c.tensor(n.out("dQ")));
    b.set_desc(op, CUDNN_ATTR_OPERATION_SDPA_BWD_DKDESC, c.tensor(n.out("dK")));
    b.set_desc(op, CUDNN_ATTR_OPERATION_SDPA_BWD_DVDESC, c.tensor(n.out("dV")));
    b.finalize(op, "SDPA_BWD operation");
    if (op) {
      c.out.keep.push_back(op);
      c.ops.push_back(op);
    }
    return b.ok();
  }
  if (kd[1] != qd[1] || vd[1] != qd[1]) {
    why = "grouped-query backward (H_k or H_v < H_q) is lowered only by the unified op, which this graph or cuDNN cannot use";
    return false;
  }
  std::vector<int64_t> sdims = {qd[0], qd[1], qd[2], kd[2]};
  std::vector<int64_t> rdims = {qd[0], qd[1], qd[2], 1};
  std::vector<int64_t> odims = {qd[0], qd[1], qd[2], vd[3]};
  // Dsum = rowsum(dO * O)
  DescPtr doo = c.virt(odims);
  c.pointwise(CUDNN_POINTWISE_MUL, c.tensor(n.in("dO")), c.tensor(n.in("O")), doo);
  DescPtr dsum = c.ws_tensor(rdims, DataType::FLOAT, false);
  c.reduction(CUDNN_REDUCE_TENSOR_ADD, doo, dsum);
  // P = exp(S - Stats)
  DescPtr s = scores(c, n, scale);
  DescPtr sub = c.virt(sdims);
  c.pointwise(CUDNN_POINTWISE_SUB, s, c.tensor(n.in("Stats")), sub);
  DescPtr p = c.virt(sdims);
  c.pointwise(CUDNN_POINTWISE_EXP, sub, nullptr, p);
  // dV = Pᵀ·dO
  std::vector<int64_t> tdims = {qd[0], qd[1], kd[2], qd[2]};
  std::vector<int64_t> tstr = swap_last2(row_major_strides(sdims));
  DescPtr pt = c.make_tensor(tdims, tstr, DataType::FLOAT, true);
  c.reshape(p, pt);
  c.matmul(pt, c.tensor(n.in("dO")), c.tensor(n.out("dV")));
  // dP = dO·Vᵀ
  DescPtr vt = c.alias(V, swap_last2(vd), swap_last2(V->get_stride()));
  DescPtr dp = c.virt(sdims);
  c.matmul(c.tensor(n.in("dO")), vt, dp);
  DescPtr t = c.virt(sdims);
  c.pointwise(CUDNN_POINTWISE_SUB, dp, dsum, t);
  DescPtr ds = c.virt(sdims);
  c.pointwise(CUDNN_POINTWISE_MUL, t, p, ds);
  if (scale) {
    DescPtr ds2 = c.virt(sdims);
    c.pointwise(CUDNN_POINTWISE_MUL, ds, scale, ds2);
    ds = ds2;
  }
  // dK = dSᵀ·Q
  DescPtr dst = c.make_tensor(tdims, tstr, DataType::FLOAT, true);
  c.reshape(ds, dst);
  c.matmul(dst, c.tensor(Q), c.tensor(n.out("dK")));
  // dQ = dS·K
  if (n.attr_bool("use_deterministic_algorithm")) {
    c.matmul(ds, c.tensor(K), c.tensor(n.out("dQ")));
  } else {
    std::vector<int64_t> qdims = {qd[0], qd[1], qd[2], qd[3]};
    DescPtr acc = c.ws_tensor(qdims, DataType::FLOAT, true);
    c.matmul(ds, c.tensor(K), acc);
    c.pointwise(CUDNN_POINTWISE_IDENTITY, acc, nullptr, c.tensor(n.out("dQ")));
  }
  return c.b.ok();
}

}  // namespace opendnn::cudnn
