// SPDX-License-Identifier: Apache-2.0
// SDPA forward and backward, as cuDNN's fused flash-attention operation graphs ("composite") or, for the
// forward when the loaded cuDNN has it, as the single SDPA_FWD backend op ("unified"; SDPA_BWD declines).
//
// Options: padding (use_padding_mask + seq_len_q/kv [B,1,1,1] INT32) unified and composite (the latter
// with seq_len M/N/K overrides on the matmuls); ragged THD composite only (see ragged_ok); causal/right and
// left (sliding window) bounds and bias composite only (9.19's unified op has no band or bias
// attributes); paged K/V and block_mask unified only (9.15+/9.14+); dropout composite only, with a user
// mask (dropout_mask * dropout_scale) or generated (seed/offset: cuDNN's RNG op, Bernoulli keep 1 - p,
// times 1/(1 - p); see philox_ok). ALiBi (slopes computed in the graph, add_alibi), score_mod sub-graphs,
// the Max/Sum_exp outputs and dBias composite only. Head dims beyond 256 and d_v != d_qk go to cuDNN as
// they are (its heuristics take or decline them). Sink tokens and cu_seq_len decline. sdpa_fp8 forward:
// composite, causal mask (lower_sdpa_fp8_node). MXFP8 declines (lower_sdpa_mxfp8_node).
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
//   masks (padding_mask, band_masks): gen_index rows/columns (INT32), comparisons (BOOLEAN),
//   S = select(S, -inf, m) per mask
//   M = max_k S; E = exp(S - M); Z = sum_k E; [Stats = M + log Z]; P = E / Z, P in the io data type
//   O = P·V
// Backward:
//   softmax_sum = sum_d(dO * O) * 1      (FLOAT, non-virtual: a workspace tensor)
//   S = Q·Kᵀ * scale; P = exp(bands(padding(S) - Stats))            (FLOAT)
//   dV = Pᵀ·dO                                                       (Pᵀ: reshape of P, io data type)
//   dS = (dO·Vᵀ - softmax_sum) * P * scale                           (FLOAT)
//   dK = dSᵀ·Q                                                       (dSᵀ: reshape of dS, io data type)
//   dQ = dS·K (K: reshape of Kᵀ), accumulated in an FP32 workspace tensor (zeroed before each run) then
//   copied to dQ, unless use_deterministic_algorithm, where dQ is written directly.
//   Grouped-query (H_k or H_v < H_q): dK/dV are computed per query head and summed over each group.
// Padded/ragged batches (use_padding_mask): every matmul also gets the per-batch GEMM extents
// (seq_len_q/kv as M/N/K overrides, seq_overrides) besides the padding mask, as cuDNN Frontend's
// composite SDPA graphs carry them.
#include <cmath>
#include <cstdlib>
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

bool dims_are(const TensorAttr& t, int64_t n0) {
  const auto& d = t.get_dim();
  return d.size() == 4 && d[0] == n0 && d[1] == 1 && d[2] == 1 && d[3] == 1 && t.get_stride()[0] == 1;
}

// seq_len_q/kv as cuDNN reads them: INT32 [B,1,1,1] with unit batch stride.
bool seq_lens_ok(const Node& n, std::string& why) {
  int64_t B = n.in("Q")->get_dim()[0];
  for (const char* p : {"seq_len_q", "seq_len_kv"}) {
    const auto& t = n.in(p);
    if (t->get_data_type() != DataType::INT32 || !dims_are(*t, B) || t->get_is_pass_by_value()) {
      why = std::string(p) + " must be an INT32 tensor in memory of dims [B,1,1,1] and strides [1,1,1,1]";
      return false;
    }
  }
  return true;
}

// Ragged (THD) layouts, composite only. The first lowering faulted on the H200 (illegal address): it
// gave the matmuls no per-batch extents (seq_len_q/kv as GEMM M/N/K overrides, which is how cuDNN
// Frontend's composite graphs tell the fused attention engine how many rows each packed sequence has; THD
// is served only with the padding mask), and the backward described K (the reshape of Kᵀ feeding dQ = dS·K)
// without K's ragged offset. With both fixed, forward and backward match the reference engine on the H200
// (test_cudnn_engine SdpaRaggedThd*). What that test does not cover declines: every Q/K/V/O (dO/dQ/dK/dV)
// must be ragged, no ragged Stats, no bias or dropout mask, no grouped-query backward.
bool ragged_ok(const Node& n, bool bwd, std::string& why) {
  if (!padded(n)) { why = "ragged (THD) offsets need use_padding_mask with seq_len_q/kv (cuDNN serves THD only then)"; return false; }
  int64_t B = n.in("Q")->get_dim()[0];
  std::vector<TensorPtr> packed = {n.in("Q"), n.in("K"), n.in("V")};
  if (bwd) packed.insert(packed.end(), {n.in("O"), n.in("dO"), n.out("dQ"), n.out("dK"), n.out("dV")});
  else packed.push_back(n.out("O"));
  for (const TensorPtr& t : packed) {
    const TensorPtr& r = t->get_ragged_offset();
    if (!r) {
      why = "not supported: ragged offsets on some but not all of Q/K/V/O" + std::string(bwd ? "/dO/dQ/dK/dV" : "") +
            " (" + t->get_name() + " has none)";
      return false;
    }
    DataType dt = r->get_data_type();
    if ((dt != DataType::INT32 && dt != DataType::INT64) || !dims_are(*r, B + 1) || r->get_is_pass_by_value()) {
      why = "ragged offset " + r->get_name() + " must be an INT32/INT64 tensor in memory of dims [B+1,1,1,1] and strides [1,1,1,1]";
      return false;
    }
  }
  const TensorPtr& st = bwd ? n.in("Stats") : n.out("Stats");
  if (st && st->get_ragged_offset()) { why = "not supported: ragged Stats are not lowered"; return false; }
  if (has_in(n, "bias") || has_in(n, "dropout_mask")) { why = "not supported: ragged offsets with bias or dropout_mask are not lowered"; return false; }
  const auto& q = n.in("Q")->get_dim();
  if (bwd && (n.in("K")->get_dim()[1] != q[1] || n.in("V")->get_dim()[1] != q[1])) {
    why = "not supported: grouped-query backward with ragged offsets is not lowered";
    return false;
  }
  return true;
}

// Rejects what neither implementation lowers, naming the option.
bool common_checks(const Node& n, std::string& why, bool fp8 = false) {
  for (const char* p : {"cu_seq_len_q", "cu_seq_len_kv", "sink_token"})
    if (has_in(n, p)) {
      why = std::string("not supported: input ") + p + " needs a cuDNN newer than 9.19's unified SDPA op (9.21+/9.24+)";
      return false;
    }
  if (fp8 && (has_in(n, "seed") || has_in(n, "dropout_mask")))
    { why = "not supported: dropout on FP8 attention is not lowered"; return false; }
  if (n.attr_bool("use_alibi_mask") && (fp8 || n.attr_str("diagonal_alignment") != "TOP_LEFT" || !n.has("right_bound") ||
                                        n.attr_int("right_bound") != 0))
    { why = "not supported: use_alibi_mask is lowered only for fp16/bf16 top-left causal attention"; return false; }
  if ((has_in(n, "seq_len_q") || has_in(n, "seq_len_kv")) && !padded(n)) {
    why = "seq_len_q/seq_len_kv need use_padding_mask and both tensors";
    return false;
  }
  if (n.has("right_bound") && n.attr_int("right_bound") < 0) { why = "right_bound must be >= 0"; return false; }
  if (n.has("left_bound") && n.attr_int("left_bound") < 1) { why = "left_bound must be >= 1"; return false; }
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
  // fp16/bf16 head dims above 256 and d_v != d_qk are cuDNN's to take or decline (9.10+ serves d > 256 on
  // Hopper); a graph its heuristics find no engine for declines there with cuDNN's reason.
  int64_t mult = fp8 ? 16 : 8;
  if (q[3] % mult || v[3] % mult || (fp8 && (q[3] > 256 || v[3] > 256))) {
    why = "head dims must be multiples of " + std::to_string(mult) + (fp8 ? " and at most 256" : "") +
          " (Q d=" + std::to_string(q[3]) + ", V d=" + std::to_string(v[3]) + ")";
    return false;
  }
  if (k[1] == 0 || q[1] % k[1] || v[1] == 0 || q[1] % v[1]) {
    why = "H_q (" + std::to_string(q[1]) + ") must be a multiple of H_k and H_v";
    return false;
  }
  if (padded(n) && !seq_lens_ok(n, why)) return false;
  // A ragged offset anywhere on the node: a crash in cuDNN's kernel poisons the process's CUDA context,
  // so nothing ragged reaches cuDNN unless ragged_ok (opt-in) accepts the whole node.
  bool ragged = false;
  for (const auto* list : {&n.inputs(), &n.outputs()})
    for (const auto& t : *list) ragged |= t && t->get_ragged_offset();
  if (ragged && (fp8 || !ragged_ok(n, n.kind() == OpKind::SDPA_BACKWARD, why))) {
    if (fp8) why = "not supported: ragged (THD) FP8 attention is not lowered";
    return false;
  }
  return true;
}

bool is_ragged(const Node& n) { return n.in("Q")->get_ragged_offset() != nullptr; }

bool has_bands(const Node& n) { return n.has("right_bound") || n.has("left_bound"); }

DescPtr select_minus_inf(LowerCtx& c, const DescPtr& x, const DescPtr& keep, const std::vector<int64_t>& sdims) {
  DescPtr y = c.virt(sdims);
  c.pointwise(CUDNN_POINTWISE_BINARY_SELECT, x, c.scalar_f32(-std::numeric_limits<float>::infinity()), y, keep);
  return y;
}

// The padding mask on x (virtual FLOAT [B,Hq,Sq,Skv]): key c of row r is kept iff r < seq_len_q[b] and
// c < seq_len_kv[b], the [B,1,1,1] lengths broadcast over H and the two sequence axes. Written the way
// cuDNN Frontend's composite graphs write it (their padding score modifier): its own row/column
// GEN_INDEX ops (INT32), two CMP_LT and a LOGICAL_AND in BOOLEAN, one select with -inf (the mask value
// Frontend uses from cuDNN 9.10 on). Frontend also hands the lengths to every matmul as M/N/K overrides
// (seq_overrides); the H200 run of a lowering without them computed every batch with batch 0's lengths
// (batch 1's Stats were the log-sum-exp over all 128 keys instead of 50), the likely cause (unverified).
DescPtr padding_mask(LowerCtx& c, const Node& n, const DescPtr& x, const std::vector<int64_t>& sdims) {
  auto index = [&](int64_t axis) {
    DescPtr i = c.virt(sdims, DataType::INT32);
    c.pointwise(CUDNN_POINTWISE_GEN_INDEX, x, nullptr, i, nullptr, DataType::INT32, axis);
    return i;
  };
  auto boolean = [&](cudnnPointwiseMode_t mode, const DescPtr& a, const DescPtr& b) {
    DescPtr y = c.virt(sdims, DataType::BOOLEAN);
    c.pointwise(mode, a, b, y, nullptr, DataType::BOOLEAN);
    return y;
  };
  DescPtr rows = boolean(CUDNN_POINTWISE_CMP_LT, index(2), c.tensor(n.in("seq_len_q")));
  DescPtr cols = boolean(CUDNN_POINTWISE_CMP_LT, index(3), c.tensor(n.in("seq_len_kv")));
  return select_minus_inf(c, x, boolean(CUDNN_POINTWISE_LOGICAL_AND, rows, cols), sdims);
}

// The diagonal-band masks of the reference engine on x: with r = row index, c = column index and r_a = r
// (TOP_LEFT) or r + s_kv - s_q (BOTTOM_RIGHT; per batch from the seq_len tensors when padded), key c is
// kept iff c <= r_a + right_bound and c > r_a - left_bound (each when set), one select per bound.
DescPtr band_masks(LowerCtx& c, const Node& n, DescPtr x, const std::vector<int64_t>& sdims) {
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
  DescPtr row_a = row;
  if (n.attr_str("diagonal_alignment") == "BOTTOM_RIGHT") {
    if (padded(n)) {
      row_a = binary(CUDNN_POINTWISE_ADD, row_a, c.tensor(n.in("seq_len_kv")), DataType::INT32, DataType::INT32);
      row_a = binary(CUDNN_POINTWISE_SUB, row_a, c.tensor(n.in("seq_len_q")), DataType::INT32, DataType::INT32);
    } else {
      row_a = shift(row_a, kd[2] - qd[2]);
    }
  }
  if (n.has("right_bound"))
    x = select_minus_inf(c, x, binary(CUDNN_POINTWISE_CMP_GE, shift(row_a, n.attr_int("right_bound")), col, DataType::BOOLEAN, DataType::BOOLEAN), sdims);
  if (n.has("left_bound"))
    x = select_minus_inf(c, x, binary(CUDNN_POINTWISE_CMP_LT, shift(row_a, -n.attr_int("left_bound")), col, DataType::BOOLEAN, DataType::BOOLEAN), sdims);
  return x;
}

// The GEMM extents of one attention matmul on a padded batch: `m`/`n`/`k` each name which length
// ('q' = seq_len_q, 'k' = seq_len_kv, 0 = static) bounds that extent. Empty when not padded, so unpadded
// graphs stay exactly as verified.
LowerCtx::GemmOverride seq_overrides(LowerCtx& c, const Node& n, char m, char nn, char k) {
  if (!padded(n)) return {};
  auto pick = [&](char which) -> DescPtr {
    if (which == 'q') return c.tensor(n.in("seq_len_q"));
    if (which == 'k') return c.tensor(n.in("seq_len_kv"));
    return nullptr;
  };
  return {pick(m), pick(nn), pick(k)};
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
// Max and Sum_exp (score_max / score_sum_exp), when given, are the row max and the row sum themselves.
std::pair<DescPtr, DescPtr> exp_and_sum(LowerCtx& c, const DescPtr& s, const std::vector<int64_t>& sdims,
                                        const std::vector<int64_t>& rdims, const TensorPtr& stats,
                                        const TensorPtr& max_out = nullptr, const TensorPtr& sum_out = nullptr) {
  DescPtr mx = max_out ? c.tensor(max_out) : c.virt(rdims);
  c.reduction(CUDNN_REDUCE_TENSOR_MAX, s, mx);
  DescPtr sub = c.virt(sdims);
  c.pointwise(CUDNN_POINTWISE_SUB, s, mx, sub);
  DescPtr e = c.virt(sdims);
  c.pointwise(CUDNN_POINTWISE_EXP, sub, nullptr, e);
  DescPtr z = sum_out ? c.tensor(sum_out) : c.virt(rdims);
  c.reduction(CUDNN_REDUCE_TENSOR_ADD, e, z);
  if (stats) {
    DescPtr lz = c.virt(rdims);
    c.pointwise(CUDNN_POINTWISE_LOG, z, nullptr, lz);
    c.pointwise(CUDNN_POINTWISE_ADD, mx, lz, c.tensor(stats));
  }
  return {e, z};
}

// ALiBi on x (right_bound 0, top-left: validation allows no other alignment with it): x + slope_h *
// (col - row). The slopes are computed in the graph from the head index rather than held in memory:
// with n = 2^floor(log2 H), slope_h = 2^e, e = -8h/n - 8/n for h < n and -8h/n + 8 - 4/n for the rest
// (the ALiBi paper's interleave, as the reference engine and cuDNN Frontend define it).
DescPtr add_alibi(LowerCtx& c, const Node& n, DescPtr x, const std::vector<int64_t>& sdims) {
  if (!n.attr_bool("use_alibi_mask")) return x;
  const int64_t H = sdims[1];
  int64_t np2 = 1;
  while (np2 * 2 <= H) np2 *= 2;
  auto index = [&](int64_t axis) {
    DescPtr i = c.virt(sdims, DataType::INT32);
    c.pointwise(CUDNN_POINTWISE_GEN_INDEX, x, nullptr, i, nullptr, DataType::FLOAT, axis);
    return i;
  };
  auto op = [&](cudnnPointwiseMode_t mode, const DescPtr& a, const DescPtr& b, const DescPtr& t = nullptr,
                DataType out = DataType::FLOAT) {
    DescPtr y = c.virt(sdims, out);
    c.pointwise(mode, a, b, y, t, out == DataType::BOOLEAN ? DataType::BOOLEAN : DataType::FLOAT);
    return y;
  };
  DescPtr h = index(1);
  const double inv = 1.0 / double(np2);
  DescPtr e = op(CUDNN_POINTWISE_ADD, op(CUDNN_POINTWISE_MUL, h, c.scalar_f32(float(-8.0 * inv))), c.scalar_f32(float(-8.0 * inv)));
  if (np2 < H) {  // heads n.. : e + 8 + 4/n
    DescPtr rest = op(CUDNN_POINTWISE_CMP_GE, h, c.scalar_f32(float(np2)), nullptr, DataType::BOOLEAN);
    e = op(CUDNN_POINTWISE_BINARY_SELECT, op(CUDNN_POINTWISE_ADD, e, c.scalar_f32(float(8.0 + 4.0 * inv))), e, rest);
  }
  DescPtr slope = op(CUDNN_POINTWISE_EXP, op(CUDNN_POINTWISE_MUL, e, c.scalar_f32(float(std::log(2.0)))), nullptr);
  DescPtr dist = op(CUDNN_POINTWISE_SUB, index(3), index(2));
  return op(CUDNN_POINTWISE_ADD, x, op(CUDNN_POINTWISE_MUL, dist, slope));
}

DescPtr add_bias(LowerCtx& c, const Node& n, DescPtr s, const std::vector<int64_t>& sdims) {
  if (!has_in(n, "bias")) return s;
  DescPtr y = c.virt(sdims);
  c.pointwise(CUDNN_POINTWISE_ADD, s, c.tensor(n.in("bias")), y);
  return y;
}

// score_mod / score_mod_bprop on x: the sub-graph's pointwise ops lowered in place, its input bound to x,
// as cuDNN Frontend's composite graphs apply a score modifier (after the scale and bias). False: a
// sub-graph op the engine cannot lower (why says which).
bool apply_subgraph(LowerCtx& c, const Node& n, const char* name, DescPtr& x, std::string& why) {
  const SubGraph* sg = n.subgraph(name);
  if (!sg) return true;
  c.tensors[sg->input.get()] = x;
  for (const auto& sub : sg->nodes)
    if (!lower_generic_node(c, *sub, why)) {
      why = std::string(name) + " node \"" + sub->name() + "\": " + (why.empty() ? c.b.error() : why);
      return false;
    }
  x = c.tensor(sg->output);
  return c.b.ok();
}

double attn_flops(const Node& n) {
  const auto& q = n.in("Q")->get_dim();
  const auto& k = n.in("K")->get_dim();
  const auto& v = n.in("V")->get_dim();
  double f = 2.0 * double(q[0]) * double(q[1]) * double(q[2]) * double(k[2]) * double(q[3] + v[3]);
  if (n.has("right_bound") && n.attr_int("right_bound") == 0) f *= 0.5;
  return f;
}

bool has_dropout_mask(const Node& n) { return has_in(n, "dropout_mask"); }
bool has_philox(const Node& n) { return has_in(n, "seed"); }

// Records the node's shape for the tile cost model when it is plain attention (see LoweredGraph).
void note_attention(LowerCtx& c, const Node& n, bool backward) {
  const auto& q = n.in("Q")->get_dim();
  const auto& k = n.in("K")->get_dim();
  const auto& v = n.in("V")->get_dim();
  const bool causal = n.has("right_bound") && n.attr_int("right_bound") == 0;
  const bool plain = n.subgraphs().empty() && !has_in(n, "bias") && !has_dropout_mask(n) && !has_philox(n) && !padded(n) && !paged(n) &&
                     !is_ragged(n) && !n.has("left_bound") && (causal || !n.has("right_bound")) && q[3] == v[3];
  c.out.plain_attention = c.out.sdpa_nodes++ == 0 && plain;  // the model describes one node
  if (!c.out.plain_attention) return;
  c.out.attention = {q[0], q[1], q[2], k[2], causal, n.attr_str("diagonal_alignment") == "BOTTOM_RIGHT", backward};
  c.out.attention_head_dim = q[3];
}

bool unified_ok(LowerCtx& c, const Node& n, std::string& why) {
  if (c.version < 91301) { why = "not supported: the unified SDPA op needs cuDNN 9.13.1+"; return false; }
  if (!n.subgraphs().empty()) { why = "not supported: score_mod is lowered only to the composite graph"; return false; }
  if (is_ragged(n)) { why = "not supported: ragged (THD) offsets are lowered only to the composite graph"; return false; }
  if (n.has("right_bound") || n.has("left_bound"))
    { why = "not supported: the unified SDPA op of this cuDNN has no diagonal-band (causal/sliding window) attributes"; return false; }
  if (has_in(n, "bias")) { why = "not supported: bias on the unified SDPA op needs cuDNN 9.21+"; return false; }
  if (n.attr_bool("use_alibi_mask")) { why = "not supported: ALiBi is lowered only to the composite graph"; return false; }
  if ((padded(n) || paged(n)) && c.version < 91500)
    { why = "not supported: seq_len/paged K-V on the unified SDPA op need cuDNN 9.15+"; return false; }
  if (has_in(n, "block_mask") && c.version < 91400) { why = "not supported: block_mask needs cuDNN 9.14+"; return false; }
  if (has_in(n, "dropout_mask") || has_philox(n)) { why = "not supported: dropout on the unified SDPA op needs cuDNN 9.22+"; return false; }
  return true;
}

// Generated dropout: cuDNN's RNG op draws the keep mask from (seed, offset) on the GPU, the forward and
// the backward of the same shape drawing the same mask. Its element-to-counter mapping is cuDNN's own,
// not the reference engine's (src/common/philox.h), so masks differ between engines for one seed: the
// GPU test checks the cudnn plans against the reference run with cuDNN's mask (RNG_dump) as a user mask.
// Only what that test covers is lowered. On the H200 (cuDNN 9.19) without a diagonal band, forward and
// backward match the reference and cuDNN's own user-mask backward. With a causal band the backward's dQ/dK
// of the first query rows disagree with the forward's mask (dS of query row 0 is not 0 although it has
// one key), so bands are declined in both directions: a forward on cuDNN with its backward elsewhere would
// train on two different masks. OPENDNN_CUDNN_GENERATED_DROPOUT=0 withholds generated dropout, =1 also
// lowers it with bands (to reproduce the fault).
bool philox_ok(const Node& n, std::string& why) {
  const char* env = std::getenv("OPENDNN_CUDNN_GENERATED_DROPOUT");
  const std::string mode = env ? env : "";
  if (mode == "0") {
    why = "not supported: generated (seed/offset) dropout withheld by OPENDNN_CUDNN_GENERATED_DROPOUT=0";
    return false;
  }
  if (has_bands(n) && mode != "1") {
    why = "not supported: generated dropout with a causal or sliding-window band: cuDNN 9.19's backward draws a mask "
          "that disagrees with its forward's there (H200 test); a user dropout_mask works";
    return false;
  }
  for (const char* p : {"seed", "offset"}) {
    const TensorPtr& t = n.in(p);
    if (t->get_data_type() != DataType::INT64 || t->get_is_pass_by_value()) {
      why = std::string("not supported: generated dropout needs ") + p + " as an INT64 tensor in device memory";
      return false;
    }
  }
  if (padded(n) || is_ragged(n))
    { why = "not supported: generated dropout with a padding mask or ragged offsets is not yet verified"; return false; }
  return true;
}

// The dropout factor Z of P * Z: the user's mask and scale, or cuDNN's RNG mask (written to RNG_dump when
// that is a graph output) and 1/(1-p). Null mask: no dropout.
struct Dropout {
  DescPtr mask, scale;
};
Dropout dropout_of(LowerCtx& c, const Node& n, const std::vector<int64_t>& sdims, const TensorPtr& dump = nullptr) {
  if (has_dropout_mask(n)) return {c.tensor(n.in("dropout_mask")), c.tensor(n.in("dropout_scale"))};
  if (!has_philox(n)) return {};
  const double p = n.attr_float("dropout_probability");
  auto& b = c.b;
  DescPtr rng = b.make(CUDNN_BACKEND_RNG_DESCRIPTOR);
  cudnnRngDistribution_t dist = CUDNN_RNG_DISTRIBUTION_BERNOULLI;
  b.set(rng, CUDNN_ATTR_RNG_DISTRIBUTION, CUDNN_TYPE_RNG_DISTRIBUTION, 1, &dist);
  b.set_double(rng, CUDNN_ATTR_RNG_BERNOULLI_DIST_PROBABILITY, 1.0 - p);  // probability of a 1 (keep)
  b.finalize(rng, "RNG descriptor");
  c.out.keep.push_back(rng);
  DescPtr mask = dump ? c.tensor(dump) : c.virt(sdims);
  DescPtr op = b.make(CUDNN_BACKEND_OPERATION_RNG_DESCRIPTOR);
  b.set_desc(op, CUDNN_ATTR_OPERATION_RNG_DESC, rng);
  b.set_desc(op, CUDNN_ATTR_OPERATION_RNG_YDESC, mask);
  b.set_desc(op, CUDNN_ATTR_OPERATION_RNG_SEED, c.tensor(n.in("seed")));
  b.set_desc(op, CUDNN_ATTR_OPERATION_RNG_OFFSET_DESC, c.tensor(n.in("offset")));
  b.finalize(op, "RNG operation");
  c.add_op(op);
  return {mask, c.scalar_f32(float(1.0 / (1.0 - p)))};
}

// P * mask * scale, in `dt`.
DescPtr dropped(LowerCtx& c, const Dropout& d, const DescPtr& p, const std::vector<int64_t>& sdims, DataType dt) {
  DescPtr m = c.virt(sdims);
  c.pointwise(CUDNN_POINTWISE_MUL, p, d.mask, m);
  DescPtr y = c.virt(sdims, dt);
  c.pointwise(CUDNN_POINTWISE_MUL, m, d.scale, y);
  return y;
}

// Paged K/V and block masks exist only as attributes of the unified op.
bool composite_ok(const Node& n, std::string& why) {
  if (has_dropout_mask(n) && !has_in(n, "dropout_scale")) { why = "dropout_mask needs dropout_scale"; return false; }
  if (has_philox(n) && !philox_ok(n, why)) return false;
  if (paged(n)) { why = "not supported: paged K/V is lowered only to the unified SDPA op (implementation UNIFIED or AUTO)"; return false; }
  if (has_in(n, "block_mask")) { why = "not supported: block_mask is lowered only to the unified SDPA op"; return false; }
  // The padding mask: the first lowering (pointwise ops alone) computed every batch after the first
  // with the first batch's lengths on the H200; its matmuls lacked the seq_len M/N/K overrides (see
  // padding_mask). With them, forward and backward match the reference (test_cudnn_engine SdpaPadding*).
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
  auto graph_output = [&](const char* p) -> TensorPtr {
    const TensorPtr& t = n.out(p);
    return t && !t->get_is_virtual() && t->volume() > 0 ? t : nullptr;
  };
  const TensorPtr max_out = graph_output("Max"), sum_out = graph_output("Sum_exp");
  const TensorPtr& dump = n.out("RNG_dump");
  const bool dumped = dump && !dump->get_is_virtual();
  if (stats && St->get_is_virtual()) { why = "generate_stats is set but Stats is virtual"; return false; }
  c.out.flops += attn_flops(n);
  note_attention(c, n, false);
  DescPtr scale = scale_tensor(c, n);
  if (impl == SdpaImpl::UNIFIED) {
    if (!unified_ok(c, n, why)) return false;
    if (max_out || sum_out) { why = "not supported: Max/Sum_exp outputs are lowered only to the composite graph"; return false; }
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
  c.matmul(c.tensor(Q), transposed(c, n.in("K")), s, DataType::FLOAT, seq_overrides(c, n, 'q', 'k', 0));
  if (scale) {
    DescPtr s2 = c.virt(sdims);
    c.pointwise(CUDNN_POINTWISE_MUL, s, scale, s2);
    s = s2;
  }
  s = add_bias(c, n, s, sdims);
  s = add_alibi(c, n, s, sdims);
  if (!apply_subgraph(c, n, "score_mod", s, why)) return false;
  if (padded(n)) s = padding_mask(c, n, s, sdims);
  if (has_bands(n)) s = band_masks(c, n, s, sdims);
  // softmax with stats: max, sub, exp, sum, [log, add -> Stats], div -> P (io type, bmm2's A operand)
  auto [e, z] = exp_and_sum(c, s, sdims, rdims, stats ? St : nullptr, max_out, sum_out);
  const Dropout drop = dropout_of(c, n, sdims, dumped ? dump : nullptr);
  DescPtr p = c.virt(sdims, drop.mask ? DataType::FLOAT : io);
  c.pointwise(CUDNN_POINTWISE_DIV, e, z, p);
  if (drop.mask) p = dropped(c, drop, p, sdims, io);
  c.matmul(p, c.tensor(n.in("V")), c.tensor(O), DataType::FLOAT, seq_overrides(c, n, 'q', 0, 'k'));
  return c.b.ok();
}

bool lower_sdpa_backward_node(LowerCtx& c, const Node& n, SdpaImpl impl, std::string& why) {
  if (!common_checks(n, why)) return false;
  if (c.rank != 4) { why = "every tensor of an SDPA graph must have rank <= 4"; return false; }
  for (const char* p : {"dSink_token", "RNG_dump"})
    if (n.out(p) && !n.out(p)->get_is_virtual()) { why = std::string("output ") + p + " is not lowered yet"; return false; }
  const TensorPtr& dbias = n.out("dBias");
  const bool want_dbias = dbias && !dbias->get_is_virtual() && dbias->volume() > 0;
  if (want_dbias) {  // dBias = dS summed over the batch ([1,Hq,Sq,Skv]) or dS itself ([B,Hq,Sq,Skv])
    const auto& bd = dbias->get_dim();
    const auto& q4 = n.in("Q")->get_dim();
    const int64_t skv = n.in("K")->get_dim()[2];
    if (bd.size() != 4 || bd[1] != q4[1] || bd[2] != q4[2] || bd[3] != skv || (bd[0] != 1 && bd[0] != q4[0]))
      { why = "not supported: dBias is lowered for bias dims [1 or B, Hq, Sq, Skv] only"; return false; }
  }
  c.out.flops += 2.5 * attn_flops(n);
  note_attention(c, n, true);
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
  c.matmul(c.tensor(Q), kt, s, DataType::FLOAT, seq_overrides(c, n, 'q', 'k', 0));
  if (scale) {
    DescPtr s2 = c.virt(sdims);
    c.pointwise(CUDNN_POINTWISE_MUL, s, scale, s2);
    s = s2;
  }
  s = add_bias(c, n, s, sdims);
  s = add_alibi(c, n, s, sdims);
  if (!apply_subgraph(c, n, "score_mod", s, why)) return false;
  // The padding mask comes before the Stats subtraction, the bands after (Frontend's order for 9.10+).
  if (padded(n)) s = padding_mask(c, n, s, sdims);
  DescPtr sub = c.virt(sdims);
  c.pointwise(CUDNN_POINTWISE_SUB, s, c.tensor(n.in("Stats")), sub);
  if (has_bands(n)) sub = band_masks(c, n, sub, sdims);
  DescPtr p = c.virt(sdims);
  c.pointwise(CUDNN_POINTWISE_EXP, sub, nullptr, p);
  const Dropout drop = dropout_of(c, n, sdims);
  // dV = Pᵀ·dO (summed over each query-head group for GQA)
  DescPtr pt = c.make_tensor(tdims, tstr, io, true);
  c.reshape(drop.mask ? dropped(c, drop, p, sdims, DataType::FLOAT) : p, pt);
  auto kv_rows = seq_overrides(c, n, 'k', 0, 'q');  // [Skv x Sq]·[Sq x D] products (dV, dK)
  if (Hv == Hq) {
    c.matmul(pt, c.tensor(dO), c.tensor(n.out("dV")), DataType::FLOAT, kv_rows);
  } else {
    DescPtr full = c.make_tensor({B, Hq, Skv, Dv}, row_major_strides({B, Hq, Skv, Dv}), io, true);
    c.matmul(pt, c.tensor(dO), full, DataType::FLOAT, kv_rows);
    c.reduction(CUDNN_REDUCE_TENSOR_ADD, full, c.tensor(n.out("dV")));
  }
  // dS = (dO·Vᵀ - softmax_sum) * P * scale
  DescPtr dp = c.virt(sdims);
  c.matmul(c.tensor(dO), vt, dp, DataType::FLOAT, seq_overrides(c, n, 'q', 'k', 0));
  if (drop.mask) dp = dropped(c, drop, dp, sdims, DataType::FLOAT);
  DescPtr t = c.virt(sdims);
  c.pointwise(CUDNN_POINTWISE_SUB, dp, ssum, t);
  DescPtr ds = c.virt(sdims);
  c.pointwise(CUDNN_POINTWISE_MUL, t, p, ds);
  if (!apply_subgraph(c, n, "score_mod_bprop", ds, why)) return false;  // dS' -> dS (before the scale)
  if (want_dbias) {  // the bias is added after the scale: its gradient is dS before the scale
    if (dbias->get_dim()[0] == B) c.pointwise(CUDNN_POINTWISE_IDENTITY, ds, nullptr, c.tensor(dbias));
    else c.reduction(CUDNN_REDUCE_TENSOR_ADD, ds, c.tensor(dbias));
  }
  if (scale) {
    DescPtr ds2 = c.virt(sdims);
    c.pointwise(CUDNN_POINTWISE_MUL, ds, scale, ds2);
    ds = ds2;
  }
  // dK = dSᵀ·Q (summed over each query-head group for GQA)
  DescPtr dst = c.make_tensor(tdims, tstr, io, true);
  c.reshape(ds, dst);
  if (Hk == Hq) {
    c.matmul(dst, c.tensor(Q), c.tensor(n.out("dK")), DataType::FLOAT, kv_rows);
  } else {
    DescPtr full = c.make_tensor({B, Hq, Skv, Dqk}, row_major_strides({B, Hq, Skv, Dqk}), io, true);
    c.matmul(dst, c.tensor(Q), full, DataType::FLOAT, kv_rows);
    c.reduction(CUDNN_REDUCE_TENSOR_ADD, full, c.tensor(n.out("dK")));
  }
  // dQ = dS·K, K the reshape of Kᵀ back to [B,Hk,Skv,D] (a view of K's memory: with K's ragged offset)
  DescPtr k_ragged = K->get_ragged_offset() ? c.tensor(K->get_ragged_offset()) : nullptr;
  DescPtr kv = c.make_tensor(kd, K->get_stride(), K->get_data_type(), true, -1, false, k_ragged);
  c.reshape(kt, kv);
  auto q_rows = seq_overrides(c, n, 'q', 0, 'k');
  if (n.attr_bool("use_deterministic_algorithm")) {
    c.matmul(ds, kv, c.tensor(n.out("dQ")), DataType::FLOAT, q_rows);
  } else {
    // Padded BHSD accumulator also for ragged dQ (Frontend's layout when max_total_seq_len_q is not given).
    std::vector<int64_t> qdims = {B, Hq, Sq, Dqk};
    DescPtr acc = c.ws_tensor(qdims, DataType::FLOAT, true);
    c.matmul(ds, kv, acc, DataType::FLOAT, q_rows);
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
  if (!n.subgraphs().empty()) { why = "not supported: score_mod on FP8 attention is not lowered"; return false; }
  if (padded(n)) { why = "not supported: the padding mask on FP8 attention is not lowered"; return false; }
  if (!composite_ok(n, why)) return false;
  if (c.rank != 4) { why = "every tensor of an SDPA graph must have rank <= 4"; return false; }
  if (n.has("left_bound")) { why = "not supported: sliding window on FP8 attention is not lowered"; return false; }
  for (const char* p : {"Max", "Sum_exp", "RNG_dump"})
    if (n.out(p) && !n.out(p)->get_is_virtual()) { why = std::string("output ") + p + " of FP8 attention is not lowered"; return false; }
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
  if (has_bands(n)) s = band_masks(c, n, s, sdims);
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

// MXFP8 attention (block-scaled E8M0 descales) exists in cuDNN only as the unified SDPA op on Blackwell
// (sm100+, cuDNN 9.21+); Hopper has no MXFP8 tensor-core path. Not lowered: every graph declines here, so
// nothing unverified reaches a GPU.
bool lower_sdpa_mxfp8_node(LowerCtx& c, const Node& n, std::string& why) {
  why = "not supported: MXFP8 attention (" + std::string(n.spec().method) +
        ") needs a Blackwell GPU (sm100+) and cuDNN 9.21+ (loaded cuDNN " + std::to_string(c.version) +
        "); Hopper has no MXFP8 attention and this engine does not lower it";
  return false;
}

}  // namespace opendnn::cudnn
