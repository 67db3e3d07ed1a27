// SPDX-License-Identifier: Apache-2.0
// SDPA forward and backward, as cuDNN's fused flash-attention operation graphs ("composite") or, for the
// forward when the loaded cuDNN has it, as the single SDPA_FWD backend op ("unified"; SDPA_BWD declines).
//
// Options: padding (use_padding_mask + seq_len_q/kv [B,1,1,1] INT32) unified only (the composite mask
// chain was wrong past batch 0 on the H200); ragged THD declines (cuDNN faulted on it); causal/right and
// left (sliding window) bounds and bias composite only (9.19's unified op has no band or bias
// attributes); paged K/V and block_mask unified only (9.15+/9.14+); user-mask dropout (dropout_mask * dropout_scale) composite only. Generated (Philox)
// dropout, ALiBi, sink tokens and cu_seq_len decline. sdpa_fp8 forward: composite,
// causal mask (lower_sdpa_fp8_node).
//
// The composite graphs follow the operation patterns cuDNN's fused flash-attention engines match (the
// developer guide's "fused flash attention fprop/bprop" patterns, as cuDNN Frontend emits them for
// cuDNN < 9.21): K and V appear only in their transposed form (the user's tensor, same uid, last two
// dims and strides swapped), the scale and the mask value are FLOAT by-value scalars, intermediates are
// FLOAT virtual tensors except the matmul operands noted below.
//
// Forward (logical [B, H, S, D] tensors):
//   S = Q·Kᵀ; S = S * scale
//   [S = S + bias]
//   masks (apply_mask): gen_index rows/columns (INT32), comparisons (BOOLEAN), S = select(S, -inf, m) per mask
//   M = max_k S; E = exp(S - M); Z = sum_k E; [Stats = M + log Z]; P = E / Z, P in the io data type
//   O = P·V
// Backward:
//   softmax_sum = sum_d(dO * O) * 1      (FLOAT, non-virtual: a workspace tensor)
//   S = Q·Kᵀ * scale; P = exp(mask(S - Stats))                      (FLOAT)
//   dV = Pᵀ·dO                                                       (Pᵀ: reshape of P, io data type)
//   dS = (dO·Vᵀ - softmax_sum) * P * scale                           (FLOAT)
//   dK = dSᵀ·Q                                                       (dSᵀ: reshape of dS, io data type)
//   dQ = dS·K (K: reshape of Kᵀ), accumulated in an FP32 workspace tensor (zeroed before each run) then
//   copied to dQ, unless use_deterministic_algorithm, where dQ is written directly.
//   Grouped-query (H_k or H_v < H_q): dK/dV are computed per query head and summed over each group.
#include <cmath>
#include <limits>
#include <utility>

#include "engines/cudnn/lower.h"

namespace opendnn::cudnn {
namespace {

std::vector<int64_t> swap_last2(std::vector<int64_t> v) {
  std::swap(v[v.size() - 1], v[v.size() - 2]);
  return v;
}

bool has_in(const Node& n, const char* port) { return n.spec().input_index(port) >= 0 && n.in(port) != nullptr; }

bool padded(const Node& n) { return n.attr_bool("use_padding_mask") && has_in(n, "seq_len_q") && has_in(n, "seq_len_kv"); }

bool paged(const Node& n) { return has_in(n, "page_table_k") || has_in(n, "page_table_v"); }

// Rejects what neither implementation lowers, naming the option.
bool common_checks(const Node& n, std::string& why, bool fp8 = false) {
  for (const char* p : {"cu_seq_len_q", "cu_seq_len_kv", "sink_token"})
    if (has_in(n, p)) {
      why = std::string("not supported: input ") + p + " needs a cuDNN newer than 9.19's unified SDPA op (9.21+/9.24+)";
      return false;
    }
  // Generated (Philox) dropout: 9.19's unified op has no dropout attributes (9.22 adds them), and cuDNN's
  // element-to-counter mapping of its RNG op is not known to match opendnn's definition (the reference
  // engine's), so the composite RNG pattern is not lowered. A user mask (dropout_mask/scale) is.
  for (const char* p : {"seed", "offset"})
    if (has_in(n, p)) {
      why = std::string("not supported: generated dropout (input ") + p + ") is not lowered by the cudnn engine";
      return false;
    }
  if (n.attr_float("dropout_probability") != 0.0 && !has_in(n, "dropout_mask"))
    { why = "not supported: generated dropout is not lowered by the cudnn engine"; return false; }
  if (n.attr_bool("use_alibi_mask")) { why = "not supported: use_alibi_mask is not lowered by the cudnn engine"; return false; }
  if ((has_in(n, "seq_len_q") || has_in(n, "seq_len_kv")) && !padded(n)) {
    why = "seq_len_q/seq_len_kv need use_padding_mask and both tensors";
    return false;
  }
  if (n.has("right_bound") && n.attr_int("right_bound") < 0) { why = "right_bound must be >= 0"; return false; }
  if (n.has("left_bound") && n.attr_int("left_bound") < 1) { why = "left_bound must be >= 1"; return false; }
  // Ragged (THD) offsets: the first H200 run of the composite forward (BSHD strides, padded [B,H,S,D]
  // dims, INT32 offsets in elements) died with an illegal address inside cuDNN's kernel, which poisons
  // the CUDA context for the whole process. Until a THD description is verified on the device, no
  // tensor with a ragged offset is handed to cuDNN (a crash is worse than a decline).
  for (const auto* list : {&n.inputs(), &n.outputs()})
    for (const auto& t : *list)
      if (t && t->get_ragged_offset()) {
        why = "not supported: ragged (THD) offset on " + t->get_name() +
              ": cuDNN 9.19's attention kernel faulted (illegal address) on this lowering; declined until verified";
        return false;
      }
  for (const char* p : {"Q", "K", "V"}) {
    const auto& t = n.in(p);
    if (t->get_dim().size() != 4) { why = std::string(p) + " must have rank 4 [B,H,S,D]"; return false; }
    DataType dt = t->get_data_type();
    if (fp8 && dt != DataType::FP8_E4M3 && dt != DataType::FP8_E5M2) {
      why = std::string(p) + " must be FP8_E4M3 or FP8_E5M2";
      return false;
    }
    if (!fp8 && dt != DataType::HALF && dt != DataType::BFLOAT16) {
      why = std::string(p) + " must be HALF or BFLOAT16 (fp8 attention goes through sdpa_fp8)";
      return false;
    }
  }
  const auto& q = n.in("Q")->get_dim();
  const auto& k = n.in("K")->get_dim();
  const auto& v = n.in("V")->get_dim();
  int64_t mult = fp8 ? 16 : 8;
  if (q[3] % mult || v[3] % mult || q[3] > 256 || v[3] > 256) {
    why = "head dims must be multiples of " + std::to_string(mult) + " and at most 256 (Q d=" + std::to_string(q[3]) +
          ", V d=" + std::to_string(v[3]) + ")";
    return false;
  }
  if (k[1] == 0 || q[1] % k[1] || v[1] == 0 || q[1] % v[1]) {
    why = "H_q (" + std::to_string(q[1]) + ") must be a multiple of H_k and H_v";
    return false;
  }
  return true;
}

bool needs_mask(const Node& n) { return n.has("right_bound") || n.has("left_bound") || padded(n); }

// The visibility mask of the reference engine on x (virtual FLOAT [B,Hq,Sq,Skv]), as pointwise ops
// cuDNN's fused attention engines fuse: with r = row index, c = column index and r_a = r (TOP_LEFT) or
// r + s_kv - s_q (BOTTOM_RIGHT; per batch from seq_len tensors when padded), key c is kept iff
// c <= r_a + right_bound, c > r_a - left_bound, r < seq_len_q and c < seq_len_kv (each when set).
// Returns the masked tensor. The seq_len branches are unreachable while composite_ok declines padding
// (kept: they are the pattern to re-check when a cuDNN computes it right).
DescPtr apply_mask(LowerCtx& c, const Node& n, DescPtr x, const std::vector<int64_t>& sdims) {
  const auto& qd = n.in("Q")->get_dim();
  const auto& kd = n.in("K")->get_dim();
  auto index = [&](int64_t axis) {
    DescPtr i = c.virt(sdims, DataType::INT32);
    c.pointwise(CUDNN_POINTWISE_GEN_INDEX, x, nullptr, i, nullptr, DataType::FLOAT, axis);
    return i;
  };
  auto binary = [&](cudnnPointwiseMode_t mode, const DescPtr& a, const DescPtr& b, DataType out, DataType prec) {
    DescPtr y = c.virt(sdims, out);
    c.pointwise(mode, a, b, y, nullptr, prec);
    return y;
  };
  auto shift = [&](const DescPtr& a, int64_t v) {
    return v == 0 ? a : binary(CUDNN_POINTWISE_ADD, a, c.scalar_i32(int32_t(v)), DataType::INT32, DataType::INT32);
  };
  DescPtr row = index(2), col = index(3);
  DescPtr seq_q = padded(n) ? c.tensor(n.in("seq_len_q")) : nullptr;
  DescPtr seq_kv = padded(n) ? c.tensor(n.in("seq_len_kv")) : nullptr;
  DescPtr row_a = row;
  if (n.attr_str("diagonal_alignment") == "BOTTOM_RIGHT") {
    if (padded(n)) {
      row_a = binary(CUDNN_POINTWISE_ADD, row_a, seq_kv, DataType::INT32, DataType::INT32);
      row_a = binary(CUDNN_POINTWISE_SUB, row_a, seq_q, DataType::INT32, DataType::INT32);
    } else {
      row_a = shift(row_a, kd[2] - qd[2]);
    }
  }
  // One select per mask, in the order padding, right bound, left bound (the chain of selects cuDNN's
  // fused attention patterns are written in), each hiding scores with -inf.
  auto hide_unless = [&](const DescPtr& keep) {
    DescPtr y = c.virt(sdims);
    c.pointwise(CUDNN_POINTWISE_BINARY_SELECT, x, c.scalar_f32(-std::numeric_limits<float>::infinity()), y, keep);
    x = y;
  };
  if (padded(n)) {
    DescPtr rows = binary(CUDNN_POINTWISE_CMP_LT, row, seq_q, DataType::BOOLEAN, DataType::BOOLEAN);
    DescPtr cols = binary(CUDNN_POINTWISE_CMP_LT, col, seq_kv, DataType::BOOLEAN, DataType::BOOLEAN);
    hide_unless(binary(CUDNN_POINTWISE_LOGICAL_AND, rows, cols, DataType::BOOLEAN, DataType::BOOLEAN));
  }
  if (n.has("right_bound"))
    hide_unless(binary(CUDNN_POINTWISE_CMP_GE, shift(row_a, n.attr_int("right_bound")), col, DataType::BOOLEAN, DataType::BOOLEAN));
  if (n.has("left_bound"))
    hide_unless(binary(CUDNN_POINTWISE_CMP_LT, shift(row_a, -n.attr_int("left_bound")), col, DataType::BOOLEAN, DataType::BOOLEAN));
  return x;
}

// Scale tensor (nullptr: no scaling).
DescPtr scale_tensor(LowerCtx& c, const Node& n) {
  if (n.in("attn_scale")) return c.tensor(n.in("attn_scale"));
  if (n.has("attn_scale_value")) return c.scalar_f32(float(n.attr_float("attn_scale_value")));
  return nullptr;
}

// S + bias (the bias broadcasts over [B,Hq,Sq,Skv]).
// The unnormalised softmax of the logits s: e = exp(s - rowmax), z = rowsum(e), and, when Stats is
// given, Stats = rowmax + log(z) (the log-sum-exp); the caller divides e by z into its own P.
std::pair<DescPtr, DescPtr> exp_and_sum(LowerCtx& c, const DescPtr& s, const std::vector<int64_t>& sdims,
                                        const std::vector<int64_t>& rdims, const TensorPtr& stats) {
  DescPtr mx = c.virt(rdims);
  c.reduction(CUDNN_REDUCE_TENSOR_MAX, s, mx);
  DescPtr sub = c.virt(sdims);
  c.pointwise(CUDNN_POINTWISE_SUB, s, mx, sub);
  DescPtr e = c.virt(sdims);
  c.pointwise(CUDNN_POINTWISE_EXP, sub, nullptr, e);
  DescPtr z = c.virt(rdims);
  c.reduction(CUDNN_REDUCE_TENSOR_ADD, e, z);
  if (stats) {
    DescPtr lz = c.virt(rdims);
    c.pointwise(CUDNN_POINTWISE_LOG, z, nullptr, lz);
    c.pointwise(CUDNN_POINTWISE_ADD, mx, lz, c.tensor(stats));
  }
  return {e, z};
}

DescPtr add_bias(LowerCtx& c, const Node& n, DescPtr s, const std::vector<int64_t>& sdims) {
  if (!has_in(n, "bias")) return s;
  DescPtr y = c.virt(sdims);
  c.pointwise(CUDNN_POINTWISE_ADD, s, c.tensor(n.in("bias")), y);
  return y;
}

double attn_flops(const Node& n) {
  const auto& q = n.in("Q")->get_dim();
  const auto& k = n.in("K")->get_dim();
  const auto& v = n.in("V")->get_dim();
  double f = 2.0 * double(q[0]) * double(q[1]) * double(q[2]) * double(k[2]) * double(q[3] + v[3]);
  if (n.has("right_bound") && n.attr_int("right_bound") == 0) f *= 0.5;
  return f;
}

bool unified_ok(LowerCtx& c, const Node& n, std::string& why) {
  if (c.version < 91301) { why = "not supported: the unified SDPA op needs cuDNN 9.13.1+"; return false; }
  if (n.has("right_bound") || n.has("left_bound"))
    { why = "not supported: the unified SDPA op of this cuDNN has no diagonal-band (causal/sliding window) attributes"; return false; }
  if (has_in(n, "bias")) { why = "not supported: bias on the unified SDPA op needs cuDNN 9.21+"; return false; }
  if ((padded(n) || paged(n)) && c.version < 91500)
    { why = "not supported: seq_len/paged K-V on the unified SDPA op need cuDNN 9.15+"; return false; }
  if (has_in(n, "block_mask") && c.version < 91400) { why = "not supported: block_mask needs cuDNN 9.14+"; return false; }
  if (has_in(n, "dropout_mask")) { why = "not supported: dropout on the unified SDPA op needs cuDNN 9.22+"; return false; }
  return true;
}

// P * dropout_mask * dropout_scale (the user-mask dropout), in `dt`; P itself when there is no mask.
DescPtr dropped(LowerCtx& c, const Node& n, const DescPtr& p, const std::vector<int64_t>& sdims, DataType dt) {
  DescPtr m = c.virt(sdims);
  c.pointwise(CUDNN_POINTWISE_MUL, p, c.tensor(n.in("dropout_mask")), m);
  DescPtr y = c.virt(sdims, dt);
  c.pointwise(CUDNN_POINTWISE_MUL, m, c.tensor(n.in("dropout_scale")), y);
  return y;
}

bool has_dropout_mask(const Node& n) { return has_in(n, "dropout_mask"); }

// Paged K/V and block masks exist only as attributes of the unified op.
bool composite_ok(const Node& n, std::string& why) {
  if (has_dropout_mask(n) && !has_in(n, "dropout_scale")) { why = "dropout_mask needs dropout_scale"; return false; }
  if (paged(n)) { why = "not supported: paged K/V is lowered only to the unified SDPA op (implementation UNIFIED or AUTO)"; return false; }
  if (has_in(n, "block_mask")) { why = "not supported: block_mask is lowered only to the unified SDPA op"; return false; }
  // The padding mask as pointwise ops (seq_len_q/kv compared with the row/column indices) built and ran,
  // but on the H200 (cuDNN 9.19) every batch after the first was computed with the first batch's
  // lengths (Stats of batch 1 = log-sum-exp over all 128 keys instead of 50). The unified op reads
  // seq_len per batch correctly, so padding goes there only.
  if (padded(n)) {
    why = "not supported: the padding mask (seq_len_q/kv) in cuDNN 9.19's composite attention graph applied batch 0's "
          "lengths to every batch; padding is lowered only to the unified SDPA op (implementation UNIFIED or AUTO)";
    return false;
  }
  return true;
}

// The transposed view of a [B,H,S,D] user tensor: [B,H,D,S] with the last two strides swapped.
DescPtr transposed(LowerCtx& c, const TensorPtr& t) {
  return c.tensor_view(t, swap_last2(t->get_dim()), swap_last2(t->get_stride()));
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
    if (padded(n)) {
      b.set_desc(op, CUDNN_ATTR_OPERATION_SDPA_FWD_SEQ_LEN_QDESC, c.tensor(n.in("seq_len_q")));
      b.set_desc(op, CUDNN_ATTR_OPERATION_SDPA_FWD_SEQ_LEN_KVDESC, c.tensor(n.in("seq_len_kv")));
    }
    if (paged(n)) {
      b.set_desc(op, CUDNN_ATTR_OPERATION_SDPA_FWD_PAGE_TABLE_KDESC, c.tensor(n.in("page_table_k")));
      b.set_desc(op, CUDNN_ATTR_OPERATION_SDPA_FWD_PAGE_TABLE_VDESC, c.tensor(n.in("page_table_v")));
    }
    if (has_in(n, "block_mask")) b.set_desc(op, CUDNN_ATTR_OPERATION_SDPA_FWD_BLOCK_MASK_DESC, c.tensor(n.in("block_mask")));
    b.finalize(op, "SDPA_FWD operation");
    c.add_op(op);
    return b.ok();
  }
  if (!composite_ok(n, why)) return false;
  const TensorPtr& Q = n.in("Q");
  const auto& qd = Q->get_dim();
  const auto& kd = n.in("K")->get_dim();
  DataType io = Q->get_data_type();
  std::vector<int64_t> sdims = {qd[0], qd[1], qd[2], kd[2]};
  std::vector<int64_t> rdims = {qd[0], qd[1], qd[2], 1};
  // S = mask(scale * Q·Kᵀ)
  DescPtr s = c.virt(sdims);
  c.matmul(c.tensor(Q), transposed(c, n.in("K")), s);
  if (scale) {
    DescPtr s2 = c.virt(sdims);
    c.pointwise(CUDNN_POINTWISE_MUL, s, scale, s2);
    s = s2;
  }
  s = add_bias(c, n, s, sdims);
  if (needs_mask(n)) s = apply_mask(c, n, s, sdims);
  // softmax with stats: max, sub, exp, sum, [log, add -> Stats], div -> P (io type, bmm2's A operand)
  auto [e, z] = exp_and_sum(c, s, sdims, rdims, stats ? St : nullptr);
  DescPtr p = c.virt(sdims, has_dropout_mask(n) ? DataType::FLOAT : io);
  c.pointwise(CUDNN_POINTWISE_DIV, e, z, p);
  if (has_dropout_mask(n)) p = dropped(c, n, p, sdims, io);
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
    // cuDNN 9.19 accepts an SDPA_BWD op's attributes but its operation graph fails to finalize
    // ("outputGraph.buildDAG()" on the H200) and no heuristics engine serves it; NVIDIA lists backend
    // engines for the unified backward as later work (NVIDIA/cudnn-frontend#895, JuliaGPU/CUDA.jl#3238
    // found none up to 9.26). AUTO falls back to the composite graph.
    why = "not supported: cuDNN's unified SDPA_BWD op has no engine in this cuDNN (its operation graph fails "
          "buildDAG); use implementation COMPOSITE or AUTO";
    return false;
  }
  if (!composite_ok(n, why)) return false;
  const TensorPtr& dO = n.in("dO");
  DataType io = Q->get_data_type();
  int64_t B = qd[0], Hq = qd[1], Sq = qd[2], Dqk = qd[3], Hk = kd[1], Skv = kd[2], Hv = vd[1], Dv = vd[3];
  std::vector<int64_t> sdims = {B, Hq, Sq, Skv};
  std::vector<int64_t> rdims = {B, Hq, Sq, 1};
  std::vector<int64_t> tdims = {B, Hq, Skv, Sq};
  std::vector<int64_t> tstr = swap_last2(row_major_strides(sdims));  // [B,Hq,Skv,Sq] view of [B,Hq,Sq,Skv]
  DescPtr kt = transposed(c, K);
  DescPtr vt = transposed(c, V);
  // softmax_sum = rowsum(dO * O) * 1 (non-virtual FP32, in the workspace)
  DescPtr doo = c.virt({B, Hq, Sq, Dv});
  c.pointwise(CUDNN_POINTWISE_MUL, c.tensor(dO), c.tensor(n.in("O")), doo);
  DescPtr rs = c.virt(rdims);
  c.reduction(CUDNN_REDUCE_TENSOR_ADD, doo, rs);
  DescPtr ssum = c.ws_tensor(rdims, DataType::FLOAT, false);
  c.pointwise(CUDNN_POINTWISE_MUL, rs, c.scalar_f32(1.0f), ssum);
  // P = exp(mask(scale * Q·Kᵀ - Stats))
  DescPtr s = c.virt(sdims);
  c.matmul(c.tensor(Q), kt, s);
  if (scale) {
    DescPtr s2 = c.virt(sdims);
    c.pointwise(CUDNN_POINTWISE_MUL, s, scale, s2);
    s = s2;
  }
  s = add_bias(c, n, s, sdims);
  DescPtr sub = c.virt(sdims);
  c.pointwise(CUDNN_POINTWISE_SUB, s, c.tensor(n.in("Stats")), sub);
  if (needs_mask(n)) sub = apply_mask(c, n, sub, sdims);
  DescPtr p = c.virt(sdims);
  c.pointwise(CUDNN_POINTWISE_EXP, sub, nullptr, p);
  // dV = Pᵀ·dO (summed over each query-head group for GQA)
  DescPtr pt = c.make_tensor(tdims, tstr, io, true);
  c.reshape(has_dropout_mask(n) ? dropped(c, n, p, sdims, DataType::FLOAT) : p, pt);
  if (Hv == Hq) {
    c.matmul(pt, c.tensor(dO), c.tensor(n.out("dV")));
  } else {
    DescPtr full = c.make_tensor({B, Hq, Skv, Dv}, row_major_strides({B, Hq, Skv, Dv}), io, true);
    c.matmul(pt, c.tensor(dO), full);
    c.reduction(CUDNN_REDUCE_TENSOR_ADD, full, c.tensor(n.out("dV")));
  }
  // dS = (dO·Vᵀ - softmax_sum) * P * scale
  DescPtr dp = c.virt(sdims);
  c.matmul(c.tensor(dO), vt, dp);
  if (has_dropout_mask(n)) dp = dropped(c, n, dp, sdims, DataType::FLOAT);
  DescPtr t = c.virt(sdims);
  c.pointwise(CUDNN_POINTWISE_SUB, dp, ssum, t);
  DescPtr ds = c.virt(sdims);
  c.pointwise(CUDNN_POINTWISE_MUL, t, p, ds);
  if (scale) {
    DescPtr ds2 = c.virt(sdims);
    c.pointwise(CUDNN_POINTWISE_MUL, ds, scale, ds2);
    ds = ds2;
  }
  // dK = dSᵀ·Q (summed over each query-head group for GQA)
  DescPtr dst = c.make_tensor(tdims, tstr, io, true);
  c.reshape(ds, dst);
  if (Hk == Hq) {
    c.matmul(dst, c.tensor(Q), c.tensor(n.out("dK")));
  } else {
    DescPtr full = c.make_tensor({B, Hq, Skv, Dqk}, row_major_strides({B, Hq, Skv, Dqk}), io, true);
    c.matmul(dst, c.tensor(Q), full);
    c.reduction(CUDNN_REDUCE_TENSOR_ADD, full, c.tensor(n.out("dK")));
  }
  // dQ = dS·K, K the reshape of Kᵀ back to [B,Hk,Skv,D]
  DescPtr kv = c.make_tensor(kd, K->get_stride(), K->get_data_type(), true);
  c.reshape(kt, kv);
  if (n.attr_bool("use_deterministic_algorithm")) {
    c.matmul(ds, kv, c.tensor(n.out("dQ")));
  } else {
    std::vector<int64_t> qdims = {B, Hq, Sq, Dqk};
    DescPtr acc = c.ws_tensor(qdims, DataType::FLOAT, true);
    c.matmul(ds, kv, acc);
    c.pointwise(CUDNN_POINTWISE_IDENTITY, acc, nullptr, c.tensor(n.out("dQ")));
  }
  return c.b.ok();
}

// FP8 forward, composite (cuDNN's fused FP8 flash-attention fprop pattern, Hopper and newer):
//   S = Q·Kᵀ * descale_q * descale_k * scale; masks; softmax as above with P in FLOAT;
//   Amax_S = amax(P); P8 = P * scale_s (the V type); O' = P8·V * descale_s * descale_v;
//   Amax_O = amax(O'); O = O' * scale_o.
bool lower_sdpa_fp8_node(LowerCtx& c, const Node& n, SdpaImpl impl, std::string& why) {
  if (impl == SdpaImpl::UNIFIED) { why = "not supported: this cuDNN has no unified FP8 SDPA op"; return false; }
  if (c.version < 90100) { why = "not supported: FP8 attention needs cuDNN 9.1+"; return false; }
  if (!common_checks(n, why, true)) return false;
  if (!composite_ok(n, why)) return false;
  if (c.rank != 4) { why = "every tensor of an SDPA graph must have rank <= 4"; return false; }
  if (n.has("left_bound")) { why = "not supported: sliding window on FP8 attention is not lowered"; return false; }
  if (n.in("Q")->get_ragged_offset()) { why = "not supported: ragged (THD) FP8 attention is not lowered"; return false; }
  bool stats = n.attr_bool("generate_stats");
  const TensorPtr& St = n.out("Stats");
  if (stats && St->get_is_virtual()) { why = "generate_stats is set but Stats is virtual"; return false; }
  c.out.flops += attn_flops(n);
  const TensorPtr& Q = n.in("Q");
  const auto& qd = Q->get_dim();
  const auto& kd = n.in("K")->get_dim();
  const auto& vd = n.in("V")->get_dim();
  std::vector<int64_t> sdims = {qd[0], qd[1], qd[2], kd[2]};
  std::vector<int64_t> rdims = {qd[0], qd[1], qd[2], 1};
  std::vector<int64_t> odims = {qd[0], qd[1], qd[2], vd[3]};
  auto mul = [&](DescPtr x, const DescPtr& f, const std::vector<int64_t>& dims, DataType dt = DataType::FLOAT) {
    DescPtr y = c.virt(dims, dt);
    c.pointwise(CUDNN_POINTWISE_MUL, x, f, y);
    return y;
  };
  DescPtr s = c.virt(sdims);
  c.matmul(c.tensor(Q), transposed(c, n.in("K")), s);
  s = mul(s, c.tensor(n.in("descale_q")), sdims);
  s = mul(s, c.tensor(n.in("descale_k")), sdims);
  if (DescPtr scale = scale_tensor(c, n)) s = mul(s, scale, sdims);
  if (needs_mask(n)) s = apply_mask(c, n, s, sdims);
  auto [e, z] = exp_and_sum(c, s, sdims, rdims, stats ? St : nullptr);
  DescPtr p = c.virt(sdims);
  c.pointwise(CUDNN_POINTWISE_DIV, e, z, p);
  c.reduction(CUDNN_REDUCE_TENSOR_AMAX, p, c.tensor(n.out("Amax_S")));
  DescPtr p8 = mul(p, c.tensor(n.in("scale_s")), sdims, n.in("V")->get_data_type());
  DescPtr o = c.virt(odims);
  c.matmul(p8, c.tensor(n.in("V")), o);
  o = mul(o, c.tensor(n.in("descale_s")), odims);
  o = mul(o, c.tensor(n.in("descale_v")), odims);
  c.reduction(CUDNN_REDUCE_TENSOR_AMAX, o, c.tensor(n.out("Amax_O")));
  c.pointwise(CUDNN_POINTWISE_MUL, o, c.tensor(n.in("scale_o")), c.tensor(n.out("O")));
  return c.b.ok();
}

}  // namespace opendnn::cudnn
