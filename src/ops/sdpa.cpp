// SPDX-License-Identifier: Apache-2.0
// Scaled dot-product attention: SDPA, SDPA_BACKWARD, SDPA_FP8, SDPA_FP8_BACKWARD, SDPA_MXFP8,
// SDPA_MXFP8_BACKWARD.
// Q [B, Hq, Sq, Dqk], K [B, Hk, Skv, Dqk], V [B, Hv, Skv, Dv] with any strides; O [B, Hq, Sq, Dv];
// Stats [B, Hq, Sq, 1] fp32 (natural-log LSE). Variable lengths: per-batch seq_len_* [B,1,1,1] or
// cumulative cu_seq_len_* [B+1,1,1,1], chosen per side; THD layout via ragged offsets on Q/K/V/O.
//
// Conventions of the rules below (infer_forward / infer_backward):
// - Q/K/V HALF or BFLOAT16, all the same (FP8_E4M3/E5M2 for the fp8 variants); FLOAT/DOUBLE I/O is
//   GRAPH_NOT_SUPPORTED. Head dims: multiple of 8 (16 for fp8, which also stops at 256); d_v may differ from d_qk.
// - GQA/MQA: Hq % Hk == 0 and Hq % Hv == 0; K and V share batch and sequence length.
// - Paged K/V (page_table_k and page_table_v, both): K/V are containers [num_blocks, H, block_size, D],
//   tables [B,1,ceil(max_seq_len_kv/block_size),1] INT32; needs use_padding_mask and max_seq_len_kv,
//   which is then s_kv. max_seq_len_kv without page tables is INVALID_VALUE.
// - Variable lengths need use_padding_mask; each side takes seq_len_* [B,1,1,1] INT32 or cu_seq_len_*
//   [B+1,1,1,1] INT32/INT64, not both. Ragged offsets ([B+1,1,1,1] INT32/INT64, in elements) need it too.
// - block_mask: one UINT8 per 128x128 tile (nonzero = visible), broadcast to
//   [B,Hq,ceil(Sq/128),ceil(Skv/128)]; not with implementation COMPOSITE.
// - Outputs: O [B,Hq,Sq,Dv] in Q's type and Q's stride order (BSHD in, BSHD out); Stats, Max, Sum_exp
//   [B,Hq,Sq,1] FLOAT, always given dims (Stats may be a graph output only with generate_stats);
//   RNG_dump [B,Hq,Sq,Skv] FLOAT with seed/offset dropout. Backward dQ/dK/dV follow Q/K/V (dims, stride
//   order, type), dBias follows bias, dSink_token [1,Hq,1,1] FLOAT. Amax_* [1,1,1,1] FLOAT.
// - An optional output the configuration does not produce (RNG_dump without seed dropout, dBias without
//   bias, dSink_token without sink_token) gets zero-size dims [0,0,0,0] and may not be a graph output.
#include <string>
#include <utility>
#include <vector>

#include "ops/infer_util.h"
#include "ops/op_defs.h"

namespace opendnn {
namespace {

// The options shared by every SDPA variant (forward and backward).
#define OPENDNN_SDPA_COMMON_ATTRS                                                      \
  {"attn_scale_value", AttrType::FLOAT, {}},                                           \
      {"use_padding_mask", AttrType::BOOL, false},                                     \
      {"use_alibi_mask", AttrType::BOOL, false},                                       \
      {"diagonal_alignment", AttrType::ENUM, "TOP_LEFT", "TOP_LEFT|BOTTOM_RIGHT"},     \
      {"left_bound", AttrType::INT, {}},                                               \
      {"right_bound", AttrType::INT, {}},                                              \
      {"dropout_probability", AttrType::FLOAT, 0.0},                                   \
      {"max_seq_len_kv", AttrType::INT, {}},                                           \
      {"implementation", AttrType::ENUM, "AUTO", "AUTO|COMPOSITE|UNIFIED"}

const PortSpec kFwdIn[] = {
    {"Q", true, "q"},
    {"K", true, "k"},
    {"V", true, "v"},
    {"attn_scale", false},
    {"bias", false},
    {"seq_len_q", false},
    {"seq_len_kv", false},
    {"cu_seq_len_q", false},
    {"cu_seq_len_kv", false},
    {"seed", false},
    {"offset", false},
    {"dropout_mask", false},
    {"dropout_scale", false},
    {"page_table_k", false, "paged_attention_k_table"},
    {"page_table_v", false, "paged_attention_v_table"},
    {"sink_token", false},
    {"block_mask", false},
};
const PortSpec kFwdOut[] = {{"O"}, {"Stats"}, {"Max", false}, {"Sum_exp", false}, {"RNG_dump", false}};
// unfuse_fma: cuDNN Frontend's Blackwell softmax option (separate multiply and add instead of fused FMA);
// it changes rounding only, so the reference engine computes the same exact result either way.
const AttrSpec kFwdAttrs[] = {OPENDNN_SDPA_COMMON_ATTRS, {"generate_stats", AttrType::BOOL, false},
                              {"unfuse_fma", AttrType::BOOL, false}};

const PortSpec kBwdIn[] = {
    {"Q", true, "q"},
    {"K", true, "k"},
    {"V", true, "v"},
    {"O", true, "o"},
    {"dO", true, "dO"},
    {"Stats", true, "stats"},
    {"attn_scale", false},
    {"bias", false},
    {"seq_len_q", false},
    {"seq_len_kv", false},
    {"cu_seq_len_q", false},
    {"cu_seq_len_kv", false},
    {"seed", false},
    {"offset", false},
    {"dropout_mask", false},
    {"dropout_scale", false},
    {"dropout_scale_inv", false},
    {"sink_token", false},
};
const PortSpec kBwdOut[] = {{"dQ"}, {"dK"}, {"dV"}, {"dBias", false}, {"dSink_token", false}, {"RNG_dump", false}};
const AttrSpec kBwdAttrs[] = {OPENDNN_SDPA_COMMON_ATTRS,
                              {"use_deterministic_algorithm", AttrType::BOOL, false},
                              {"max_total_seq_len_q", AttrType::INT, {}},
                              {"max_total_seq_len_kv", AttrType::INT, {}}};

const PortSpec kFp8FwdIn[] = {
    {"Q", true, "q"},        {"K", true, "k"},         {"V", true, "v"},          {"descale_q"},
    {"descale_k"},           {"descale_v"},            {"descale_s"},             {"scale_s"},
    {"scale_o"},             {"attn_scale", false},    {"seq_len_q", false},      {"seq_len_kv", false},
    {"cu_seq_len_q", false}, {"cu_seq_len_kv", false}, {"seed", false},           {"offset", false},
    {"bias", false},         {"dropout_mask", false},  {"dropout_scale", false},
    {"page_table_k", false, "paged_attention_k_table"},
    {"page_table_v", false, "paged_attention_v_table"},
    {"sink_token", false},
};
const PortSpec kFp8FwdOut[] = {{"O"}, {"Stats"}, {"Amax_S"}, {"Amax_O"},
                               {"Max", false}, {"Sum_exp", false}, {"RNG_dump", false}};

const PortSpec kFp8BwdIn[] = {
    {"Q", true, "q"},  {"K", true, "k"},   {"V", true, "v"},   {"O", true, "o"},  {"dO", true, "dO"},
    {"Stats", true, "stats"},              {"descale_q"},      {"descale_k"},     {"descale_v"},
    {"descale_o"},     {"descale_dO"},     {"descale_s"},      {"descale_dP"},    {"scale_s"},
    {"scale_dQ"},      {"scale_dK"},       {"scale_dV"},       {"scale_dP"},      {"attn_scale", false},
    {"seq_len_q", false},                  {"seq_len_kv", false},                 {"cu_seq_len_q", false},
    {"cu_seq_len_kv", false},              {"seed", false},    {"offset", false},
    {"dropout_mask", false},               {"dropout_scale", false},              {"dropout_scale_inv", false},
    {"sink_token", false},
};
const PortSpec kFp8BwdOut[] = {{"dQ"}, {"dK"}, {"dV"}, {"Amax_dQ"}, {"Amax_dK"}, {"Amax_dV"}, {"Amax_dP"},
                               {"dSink_token", false}};

// MXFP8: FP8 data with FP8_E8M0 block scales, one per 32 elements along each product's contracted axis.
// The backward takes each operand a second time quantised along the other axis (Q_T, K_T, dO_T) and the
// half-precision O and dO.
const PortSpec kMxFwdIn[] = {
    {"Q", true, "q"}, {"K", true, "k"}, {"V", true, "v"}, {"descale_q"}, {"descale_k"}, {"descale_v"},
    {"attn_scale", false}, {"sink_token", false},
};
const PortSpec kMxFwdOut[] = {{"O"}, {"Stats"}, {"Amax_O"}};
const PortSpec kMxBwdIn[] = {
    {"Q", true, "q"},          {"Q_T", true, "q_T"},     {"K", true, "k"},           {"K_T", true, "k_T"},
    {"V", true, "v"},          {"O_f16", true, "o_f16"}, {"dO_f16", true, "dO_f16"}, {"dO", true, "dO"},
    {"dO_T", true, "dO_T"},    {"Stats", true, "stats"}, {"descale_q"},              {"descale_q_T"},
    {"descale_k"},             {"descale_k_T"},          {"descale_v"},              {"descale_dO"},
    {"descale_dO_T"},          {"attn_scale", false},    {"seq_len_q", false},       {"seq_len_kv", false},
    {"seed", false},           {"offset", false},        {"dropout_mask", false},    {"dropout_scale", false},
    {"dropout_scale_inv", false}, {"sink_token", false},
};
const PortSpec kMxBwdOut[] = {{"dQ"}, {"dK"}, {"dV"}, {"Amax_dQ"}, {"Amax_dK"}, {"Amax_dV"}, {"dSink_token", false}};

// ---------------------------------------------------------------------------------------------
// Inference and validation rules.

enum class Variant { FWD, BWD, FP8_FWD, FP8_BWD, MX_FWD, MX_BWD };
bool is_mx(Variant v) { return v == Variant::MX_FWD || v == Variant::MX_BWD; }
bool is_fp8(Variant v) { return v == Variant::FP8_FWD || v == Variant::FP8_BWD || is_mx(v); }
bool is_bwd(Variant v) { return v == Variant::BWD || v == Variant::FP8_BWD || v == Variant::MX_BWD; }

// The problem size every rule is checked against.
struct Problem {
  int64_t b = 0, hq = 0, hk = 0, hv = 0, sq = 0, skv = 0, dqk = 0, dv = 0;
  bool paged = false;
  bool padding = false;
  bool score_mod = false;  // a score_mod sub-graph: it may mask by seq_len itself (no use_padding_mask)
};

std::string num(int64_t v) { return std::to_string(v); }

// Q, K, V, O, dO: fp16/bf16 (fp8 e4m3/e5m2 for the fp8 variants).
Status check_io_type(const Node& n, std::string_view port, bool fp8) {
  const TensorPtr& t = ops::input_if(n, port);
  if (!t) return {};
  DataType dt = t->get_data_type();
  std::string p(port);
  if (fp8) {
    if (dt == DataType::FP8_E4M3 || dt == DataType::FP8_E5M2) return {};
    return n.fail(ErrorCode::GRAPH_NOT_SUPPORTED, "input " + p + " has data type " + std::string(to_string(dt)) +
                                                      "; the fp8 variant takes FP8_E4M3 or FP8_E5M2");
  }
  if (dt == DataType::HALF || dt == DataType::BFLOAT16) return {};
  if (dt == DataType::FLOAT || dt == DataType::DOUBLE)
    return n.fail(ErrorCode::GRAPH_NOT_SUPPORTED, std::string(to_string(dt)) + " I/O is not supported: input " + p +
                                                      " must be HALF or BFLOAT16");
  return n.fail(ErrorCode::GRAPH_NOT_SUPPORTED, "input " + p + " has data type " + std::string(to_string(dt)) +
                                                    "; allowed: HALF, BFLOAT16");
}

// Head dims: a multiple of 8 (16 for fp8). fp16/bf16 has no upper bound here (cuDNN 9.10+ serves head
// dims above 256 on Hopper, and d_v may exceed d_qk); each engine declines the dims it has no kernel for.
// FP8 on Hopper stops at 256.
Status check_head_dim(const Node& n, int64_t d, const char* port, bool fp8) {
  int64_t align = fp8 ? 16 : 8;
  if (d < 1) return n.fail(ErrorCode::SHAPE_DEDUCTION_FAILED, std::string("head dim of ") + port + " is " + num(d));
  if (fp8 && d > 256)
    return n.fail(ErrorCode::GRAPH_NOT_SUPPORTED, "head dim " + num(d) + " of " + port + " exceeds 256 (fp8)");
  if (d % align != 0)
    return n.fail(ErrorCode::GRAPH_NOT_SUPPORTED, "head dim " + num(d) + " of " + port + " is not a multiple of " +
                                                      num(align) + (fp8 ? " (fp8)" : ""));
  return {};
}

// Paged K/V: K and V are block containers [num_blocks, H, block_size, D] indexed by the page tables.
Status check_paged(const Node& n, Problem& p) {
  const TensorPtr& ptk = ops::input_if(n, "page_table_k");
  const TensorPtr& ptv = ops::input_if(n, "page_table_v");
  if (!ptk || !ptv)
    return n.fail(ErrorCode::ATTRIBUTE_NOT_SET, std::string("paged attention needs both page_table_k and page_table_v; ") +
                                                    (ptk ? "page_table_v" : "page_table_k") + " is not set");
  if (!p.padding && !(p.score_mod && ops::input_if(n, "seq_len_kv")))
    return n.fail(ErrorCode::GRAPH_NOT_SUPPORTED, "paged attention (page_table_k/v) requires use_padding_mask and seq_len_kv");
  if (!n.has("max_seq_len_kv"))
    return n.fail(ErrorCode::ATTRIBUTE_NOT_SET, "paged attention (page_table_k/v) requires attribute max_seq_len_kv");
  p.skv = n.attr_int("max_seq_len_kv");
  if (p.skv < 1) return n.fail(ErrorCode::INVALID_VALUE, "max_seq_len_kv " + num(p.skv) + " must be >= 1");
  for (auto [container, table] : {std::pair{"K", "page_table_k"}, std::pair{"V", "page_table_v"}}) {
    const auto& c = n.in(container)->get_dim();
    int64_t block = c[2];
    if (block < 1)
      return n.fail(ErrorCode::SHAPE_DEDUCTION_FAILED, std::string("paged container ") + container + " " +
                                                           ops::dims_str(c) + " has block size " + num(block));
    std::vector<int64_t> want = {p.b, 1, ops::ceil_div(p.skv, block), 1};
    OPENDNN_RETURN_IF_ERROR(ops::expect_dims(n, table, want, "[B,1,ceil(max_seq_len_kv/block_size),1]"));
    OPENDNN_RETURN_IF_ERROR(ops::expect_type(n, table, {DataType::INT32}));
  }
  return {};
}

Status check_qkv(const Node& n, Variant v, Problem& p) {
  bool fp8 = is_fp8(v);
  for (const char* port : {"Q", "K", "V"}) OPENDNN_RETURN_IF_ERROR(ops::require_rank(n, port, 4));
  for (const char* port : {"Q", "K", "V"}) OPENDNN_RETURN_IF_ERROR(check_io_type(n, port, fp8));
  DataType qt = n.in("Q")->get_data_type();
  for (const char* port : {"K", "V"})
    if (n.in(port)->get_data_type() != qt)
      return n.fail(ErrorCode::GRAPH_NOT_SUPPORTED, std::string("input ") + port + " has data type " +
                                                        std::string(to_string(n.in(port)->get_data_type())) +
                                                        " but Q has " + std::string(to_string(qt)));
  const auto& q = n.in("Q")->get_dim();
  const auto& k = n.in("K")->get_dim();
  const auto& vv = n.in("V")->get_dim();
  p.b = q[0], p.hq = q[1], p.sq = q[2], p.dqk = q[3];
  p.hk = k[1], p.hv = vv[1], p.dv = vv[3];
  p.padding = n.attr_bool("use_padding_mask");
  p.score_mod = n.subgraph("score_mod") != nullptr;
  if (k[3] != p.dqk)
    return n.fail(ErrorCode::SHAPE_DEDUCTION_FAILED, "head dim of K " + ops::dims_str(k) + " differs from Q " +
                                                         ops::dims_str(q));
  OPENDNN_RETURN_IF_ERROR(check_head_dim(n, p.dqk, "Q", fp8));
  OPENDNN_RETURN_IF_ERROR(check_head_dim(n, p.dv, "V", fp8));
  p.paged = ops::input_if(n, "page_table_k") || ops::input_if(n, "page_table_v");
  if (p.paged) {
    OPENDNN_RETURN_IF_ERROR(check_paged(n, p));
  } else {
    if (k[0] != p.b || vv[0] != p.b)
      return n.fail(ErrorCode::SHAPE_DEDUCTION_FAILED, "batch of K " + ops::dims_str(k) + " or V " + ops::dims_str(vv) +
                                                           " differs from Q " + ops::dims_str(q));
    if (k[2] != vv[2])
      return n.fail(ErrorCode::SHAPE_DEDUCTION_FAILED, "sequence length of K " + ops::dims_str(k) + " differs from V " +
                                                           ops::dims_str(vv));
    p.skv = k[2];
    if (n.has("max_seq_len_kv"))
      return n.fail(ErrorCode::GRAPH_NOT_SUPPORTED, "attribute max_seq_len_kv is only used with paged K/V (page_table_k/v)");
  }
  if (p.hq < 1 || p.hk < 1 || p.hv < 1)
    return n.fail(ErrorCode::SHAPE_DEDUCTION_FAILED, "Q " + ops::dims_str(q) + ", K " + ops::dims_str(k) + " and V " +
                                                         ops::dims_str(vv) + " need at least one head");
  if (p.hq % p.hk != 0 || p.hq % p.hv != 0)
    return n.fail(ErrorCode::SHAPE_DEDUCTION_FAILED, "Q heads (" + num(p.hq) + ") must be a multiple of K heads (" +
                                                         num(p.hk) + ") and V heads (" + num(p.hv) + ") for GQA/MQA");
  return {};
}

// Per-batch offsets: [B+1,1,1,1] int32/int64.
Status check_offsets_tensor(const Node& n, const TensorAttr& t, const std::string& what, int64_t b) {
  std::vector<int64_t> want = {b + 1, 1, 1, 1};
  if (t.get_dim() != want)
    return n.fail(ErrorCode::SHAPE_DEDUCTION_FAILED, what + " has dims " + ops::dims_str(t.get_dim()) + " but must be " +
                                                         ops::dims_str(want) + " [B+1,1,1,1]");
  if (t.get_data_type() != DataType::INT32 && t.get_data_type() != DataType::INT64)
    return n.fail(ErrorCode::GRAPH_NOT_SUPPORTED, what + " has data type " + std::string(to_string(t.get_data_type())) +
                                                      "; allowed: INT32, INT64");
  return {};
}

Status check_seq_lens(const Node& n, const Problem& p) {
  for (auto [sl, cu] : {std::pair{"seq_len_q", "cu_seq_len_q"}, std::pair{"seq_len_kv", "cu_seq_len_kv"}}) {
    const TensorPtr& a = ops::input_if(n, sl);
    const TensorPtr& c = ops::input_if(n, cu);
    if (a && c)
      return n.fail(ErrorCode::INVALID_VALUE, std::string(sl) + " and " + cu + " are both set; give one form per side");
    if ((a || c) && !p.padding && !p.score_mod)
      return n.fail(ErrorCode::ATTRIBUTE_NOT_SET, std::string(a ? sl : cu) + " is given but use_padding_mask is not set");
    if (p.padding && !a && !c)
      return n.fail(ErrorCode::ATTRIBUTE_NOT_SET, std::string("use_padding_mask needs ") + sl + " or " + cu);
    if (a) {
      OPENDNN_RETURN_IF_ERROR(ops::expect_dims(n, sl, {p.b, 1, 1, 1}, "[B,1,1,1]"));
      OPENDNN_RETURN_IF_ERROR(ops::expect_type(n, sl, {DataType::INT32}));
    }
    if (c) OPENDNN_RETURN_IF_ERROR(check_offsets_tensor(n, *c, std::string("input ") + cu, p.b));
  }
  return {};
}

// THD layout: ragged offsets on the token tensors (and on Stats, which may be packed the same way).
Status check_ragged(const Node& n, Variant v, const Problem& p) {
  auto one = [&](const TensorPtr& t, const char* port) -> Status {
    if (!t || !t->get_ragged_offset()) return {};
    if (!p.padding && !p.score_mod)
      return n.fail(ErrorCode::GRAPH_NOT_SUPPORTED, std::string(port) + " has a ragged offset (THD layout), which requires "
                                                                      "use_padding_mask and sequence lengths");
    return check_offsets_tensor(n, *t->get_ragged_offset(), std::string("ragged offset of ") + port, p.b);
  };
  for (const char* port : {"Q", "K", "V", "O", "dO", "Stats"}) OPENDNN_RETURN_IF_ERROR(one(ops::input_if(n, port), port));
  if (is_bwd(v)) {
    for (const char* port : {"dQ", "dK", "dV"}) OPENDNN_RETURN_IF_ERROR(one(ops::output_if(n, port), port));
  } else {
    for (const char* port : {"O", "Stats"}) OPENDNN_RETURN_IF_ERROR(one(ops::output_if(n, port), port));
  }
  return {};
}

bool has_dropout(const Node& n) {
  return n.attr_float("dropout_probability") > 0.0 || ops::input_if(n, "seed") || ops::input_if(n, "dropout_mask");
}

Status check_scale_and_bounds(const Node& n, const Problem& p) {
  if (ops::input_if(n, "attn_scale")) {
    if (n.has("attn_scale_value"))
      return n.fail(ErrorCode::INVALID_VALUE, "attn_scale_value and the attn_scale tensor are both set; give one");
    OPENDNN_RETURN_IF_ERROR(ops::expect_one_value(n, "attn_scale"));
    OPENDNN_RETURN_IF_ERROR(ops::expect_type(n, "attn_scale", {DataType::FLOAT, DataType::HALF, DataType::BFLOAT16}));
  }
  if (n.has("left_bound") && n.attr_int("left_bound") < 1)
    return n.fail(ErrorCode::INVALID_VALUE, "left_bound " + num(n.attr_int("left_bound")) + " must be >= 1");
  if (n.has("right_bound") && n.attr_int("right_bound") < 0)
    return n.fail(ErrorCode::INVALID_VALUE, "right_bound " + num(n.attr_int("right_bound")) + " must be >= 0");
  if (n.attr_bool("use_alibi_mask") && (!n.has("right_bound") || n.attr_int("right_bound") != 0))
    return n.fail(ErrorCode::GRAPH_NOT_SUPPORTED,
                  "use_alibi_mask requires right_bound = 0 (causal), not " +
                      (n.has("right_bound") ? num(n.attr_int("right_bound")) : std::string("unset")));
  // A bottom-right diagonal (right_bound with BOTTOM_RIGHT alignment): cuDNN serves it neither with s_q >
  // s_kv on unpadded batches nor with bias, ALiBi or dropout; the rule is cuDNN Frontend's, kept so that a
  // graph either engine family takes is the same set.
  const bool bottom_right = n.has("right_bound") && n.attr_str("diagonal_alignment") == "BOTTOM_RIGHT";
  if (bottom_right && !p.padding && p.sq > p.skv)
    return n.fail(ErrorCode::GRAPH_NOT_SUPPORTED, "a bottom-right diagonal band without a padding mask requires s_q (" +
                                                      num(p.sq) + ") <= s_kv (" + num(p.skv) + ")");
  if (bottom_right && (ops::input_if(n, "bias") || n.attr_bool("use_alibi_mask") || has_dropout(n)))
    return n.fail(ErrorCode::GRAPH_NOT_SUPPORTED,
                  "a bottom-right diagonal band is not supported with bias, use_alibi_mask or dropout");
  if (n.has("left_bound") && !p.padding && p.sq > p.skv)
    return n.fail(ErrorCode::GRAPH_NOT_SUPPORTED, "left_bound without a padding mask requires s_q (" + num(p.sq) +
                                                      ") <= s_kv (" + num(p.skv) + ")");
  return {};
}

Status check_dropout(const Node& n, Variant v, const Problem& p) {
  double prob = n.attr_float("dropout_probability");
  if (!(prob >= 0.0 && prob < 1.0))
    return n.fail(ErrorCode::INVALID_VALUE, "dropout_probability " + std::to_string(prob) + " is outside [0, 1)");
  bool seed = bool(ops::input_if(n, "seed")), offset = bool(ops::input_if(n, "offset"));
  bool mask = bool(ops::input_if(n, "dropout_mask")), scale = bool(ops::input_if(n, "dropout_scale"));
  bool scale_inv = bool(ops::input_if(n, "dropout_scale_inv"));
  if (seed != offset)
    return n.fail(ErrorCode::ATTRIBUTE_NOT_SET, std::string("dropout needs both seed and offset; ") +
                                                    (seed ? "offset" : "seed") + " is not set");
  if (mask != scale)
    return n.fail(ErrorCode::ATTRIBUTE_NOT_SET, std::string("mask dropout needs both dropout_mask and dropout_scale; ") +
                                                    (mask ? "dropout_scale" : "dropout_mask") + " is not set");
  if (seed && mask)
    return n.fail(ErrorCode::INVALID_VALUE, "give either seed/offset (generated dropout) or dropout_mask/dropout_scale, not both");
  if (prob > 0.0 && !seed && !mask)
    return n.fail(ErrorCode::ATTRIBUTE_NOT_SET, "dropout_probability " + std::to_string(prob) +
                                                    " needs seed and offset (or dropout_mask and dropout_scale)");
  if (is_bwd(v) && mask && !scale_inv)
    return n.fail(ErrorCode::ATTRIBUTE_NOT_SET, "mask dropout in the backward needs dropout_scale_inv");
  if (scale_inv && !mask)
    return n.fail(ErrorCode::INVALID_VALUE, "dropout_scale_inv is only used with dropout_mask");
  for (const char* port : {"seed", "offset"}) {
    OPENDNN_RETURN_IF_ERROR(ops::expect_one_value(n, port));
    OPENDNN_RETURN_IF_ERROR(ops::expect_type(n, port, {DataType::INT32, DataType::INT64}));
  }
  for (const char* port : {"dropout_scale", "dropout_scale_inv"}) {
    OPENDNN_RETURN_IF_ERROR(ops::expect_one_value(n, port));
    OPENDNN_RETURN_IF_ERROR(ops::expect_type(n, port, {DataType::FLOAT, DataType::HALF, DataType::BFLOAT16}));
  }
  if (mask) {
    const auto& d = n.in("dropout_mask")->get_dim();
    std::vector<int64_t> full = {p.b, p.hq, p.sq, p.skv};
    if (!ops::broadcasts_to(d, full))
      return n.fail(ErrorCode::SHAPE_DEDUCTION_FAILED, "input dropout_mask " + ops::dims_str(d) +
                                                           " does not broadcast to [B,Hq,Sq,Skv] " + ops::dims_str(full));
  }
  return {};
}

Status check_extras(const Node& n, Variant v, const Problem& p) {
  if (is_fp8(v) && ops::input_if(n, "bias"))
    return n.fail(ErrorCode::GRAPH_NOT_SUPPORTED, "input bias is not supported by FP8 attention (cuDNN has none)");
  if (const TensorPtr& bias = ops::input_if(n, "bias")) {
    std::vector<int64_t> full = {p.b, p.hq, p.sq, p.skv};
    if (!ops::broadcasts_to(bias->get_dim(), full))
      return n.fail(ErrorCode::SHAPE_DEDUCTION_FAILED, "input bias " + ops::dims_str(bias->get_dim()) +
                                                           " does not broadcast to [B,Hq,Sq,Skv] " + ops::dims_str(full));
    if (bias->get_data_type() == DataType::BOOLEAN)
      return n.fail(ErrorCode::GRAPH_NOT_SUPPORTED, "input bias is BOOLEAN; a bias is additive (use a float type)");
    if (!is_floating(bias->get_data_type()))
      return n.fail(ErrorCode::GRAPH_NOT_SUPPORTED, "input bias has data type " +
                                                        std::string(to_string(bias->get_data_type())) + "; it must be floating");
  }
  if (ops::input_if(n, "sink_token")) {
    OPENDNN_RETURN_IF_ERROR(ops::expect_dims(n, "sink_token", {1, p.hq, 1, 1}, "[1,Hq,1,1]"));
    OPENDNN_RETURN_IF_ERROR(ops::expect_type(n, "sink_token", {DataType::FLOAT}));
    if (p.sq == 1)
      return n.fail(ErrorCode::GRAPH_NOT_SUPPORTED, "sink_token is not supported in decode mode (s_q == 1)");
  }
  if (const TensorPtr& bm = ops::input_if(n, "block_mask")) {
    std::vector<int64_t> full = {p.b, p.hq, ops::ceil_div(p.sq, 128), ops::ceil_div(p.skv, 128)};
    if (!ops::broadcasts_to(bm->get_dim(), full))
      return n.fail(ErrorCode::SHAPE_DEDUCTION_FAILED, "input block_mask " + ops::dims_str(bm->get_dim()) +
                                                           " does not broadcast to [B,Hq,ceil(Sq/128),ceil(Skv/128)] " +
                                                           ops::dims_str(full));
    OPENDNN_RETURN_IF_ERROR(ops::expect_type(n, "block_mask", {DataType::UINT8}));
    if (n.attr_str("implementation") == "COMPOSITE")
      return n.fail(ErrorCode::GRAPH_NOT_SUPPORTED, "block_mask needs implementation UNIFIED or AUTO, not COMPOSITE");
  }
  if (is_bwd(v)) {
    for (const char* a : {"max_total_seq_len_q", "max_total_seq_len_kv"})
      if (n.has(a) && n.attr_int(a) < 1)
        return n.fail(ErrorCode::INVALID_VALUE, std::string(a) + " " + num(n.attr_int(a)) + " must be >= 1");
  }
  return {};
}

// fp8 per-tensor descale/scale inputs: one FLOAT value each.
Status check_fp8_scales(const Node& n) {
  for (const PortSpec& ps : n.spec().def->inputs) {
    std::string_view name = ps.name;
    if (name.rfind("descale_", 0) != 0 && name.rfind("scale_", 0) != 0) continue;
    OPENDNN_RETURN_IF_ERROR(ops::expect_one_value(n, name));
    OPENDNN_RETURN_IF_ERROR(ops::expect_type(n, name, {DataType::FLOAT}));
  }
  return {};
}

// score_mod / score_mod_bprop: pointwise sub-graphs over the [B,Hq,Sq,Skv] scores (see SubGraph). As in
// cuDNN, a score modifier replaces the built-in masks (no ALiBi, bounds or padding mask with it), and a
// backward with one needs both (the forward recomputation and its gradient).
Status check_score_mod(const Node& n, Variant v) {
  for (const auto& sg : n.subgraphs()) {
    const bool ok = sg->name == "score_mod" || (sg->name == "score_mod_bprop" && is_bwd(v));
    if (!ok || is_mx(v)) return n.fail(ErrorCode::INVALID_VALUE, "unknown sub-graph " + sg->name + " of this op");
  }
  const bool fwd = n.subgraph("score_mod") != nullptr, bprop = n.subgraph("score_mod_bprop") != nullptr;
  if (is_bwd(v) && fwd != bprop)
    return n.fail(ErrorCode::GRAPH_NOT_SUPPORTED, "a backward with a score modifier needs both score_mod and score_mod_bprop");
  if (fwd && (n.attr_bool("use_alibi_mask") || n.has("right_bound") || n.has("left_bound") || n.attr_bool("use_padding_mask")))
    return n.fail(ErrorCode::GRAPH_NOT_SUPPORTED, "score_mod replaces the built-in masks: it is not supported with "
                                                  "use_alibi_mask, diagonal band bounds or use_padding_mask");
  return {};
}

// Gives the sub-graphs' tensors their dims and types: the input is the [B,Hq,Sq,Skv] FLOAT scores (or
// their gradient), each node's outputs by its own rules; the output must broadcast to the scores.
Status infer_subgraphs(Node& n, const Problem& p, const GraphContext& ctx) {
  const std::vector<int64_t> sdims = {p.b, p.hq, p.sq, p.skv};
  for (const auto& sg : n.subgraphs()) {
    TensorAttr& in = *sg->input;
    in.set_dim(sdims).set_stride(row_major_strides(sdims)).set_is_virtual(true);
    if (in.get_data_type() == DataType::NOT_SET) in.set_data_type(DataType::FLOAT);
    for (const auto& sub : sg->nodes) {
      if (sub->kind() != OpKind::POINTWISE)
        return n.fail(ErrorCode::GRAPH_NOT_SUPPORTED, "sub-graph " + sg->name + " may hold only pointwise ops");
      Status st = check_node_rules(*sub);
      for (const auto& t : sub->outputs())
        if (st.is_good() && !t) st = sub->fail(ErrorCode::ATTRIBUTE_NOT_SET, "an output tensor is null");
      if (st.is_good()) st = sub->spec().def->infer(*sub, ctx);
      if (st.is_bad()) return n.fail(st.code(), "sub-graph " + sg->name + ": " + st.message());
      for (const auto& t : sub->outputs()) {
        if (t->get_data_type() == DataType::NOT_SET)
          t->set_data_type(ctx.intermediate_data_type != DataType::NOT_SET ? ctx.intermediate_data_type : DataType::FLOAT);
        if (t->get_stride().empty()) t->set_stride(row_major_strides(t->get_dim()));
      }
    }
    if (!ops::broadcasts_to(sg->output->get_dim(), sdims))
      return n.fail(ErrorCode::SHAPE_DEDUCTION_FAILED, "sub-graph " + sg->name + " gives " +
                                                           ops::dims_str(sg->output->get_dim()) + ", not the scores " +
                                                           ops::dims_str(sdims));
  }
  return {};
}

Status check_common(const Node& n, Variant v, Problem& p) {
  OPENDNN_RETURN_IF_ERROR(check_score_mod(n, v));
  OPENDNN_RETURN_IF_ERROR(check_qkv(n, v, p));
  OPENDNN_RETURN_IF_ERROR(check_seq_lens(n, p));
  OPENDNN_RETURN_IF_ERROR(check_ragged(n, v, p));
  OPENDNN_RETURN_IF_ERROR(check_scale_and_bounds(n, p));
  OPENDNN_RETURN_IF_ERROR(check_dropout(n, v, p));
  OPENDNN_RETURN_IF_ERROR(check_extras(n, v, p));
  if (is_fp8(v) && !is_mx(v)) OPENDNN_RETURN_IF_ERROR(check_fp8_scales(n));
  return {};
}

// One MXFP8 block-scale tensor: FP8_E8M0 [B, H, rows, cols] of `data` [B, H, S, D] with one scale per 32
// elements along `k_axis` (3: along D, 2: along S). The dims cover the blocks; they may be padded (the
// F8_128x4 reordering pads the other axis to 128 rows and the scaled one to 4).
Status check_mx_scale(const Node& n, const char* scale, const char* data, int k_axis) {
  OPENDNN_RETURN_IF_ERROR(ops::require_rank(n, scale, 4));
  OPENDNN_RETURN_IF_ERROR(ops::expect_type(n, scale, {DataType::FP8_E8M0}));
  const auto& d = n.in(data)->get_dim();
  const auto& sd = n.in(scale)->get_dim();
  std::vector<int64_t> need = d;
  need[size_t(k_axis)] = ops::ceil_div(d[size_t(k_axis)], 32);
  if (sd[0] != d[0] || sd[1] != d[1] || sd[2] < need[2] || sd[3] < need[3])
    return n.fail(ErrorCode::SHAPE_DEDUCTION_FAILED, "block scale " + std::string(scale) + " " + ops::dims_str(sd) +
                                                         " does not cover " + data + " " + ops::dims_str(d) +
                                                         " in blocks of 32 along dim " + num(k_axis) + " (needs " +
                                                         ops::dims_str(need) + ")");
  return {};
}

Status check_mx(const Node& n, Variant v) {
  if (v == Variant::MX_FWD) {
    OPENDNN_RETURN_IF_ERROR(check_mx_scale(n, "descale_q", "Q", 3));
    OPENDNN_RETURN_IF_ERROR(check_mx_scale(n, "descale_k", "K", 3));
    return check_mx_scale(n, "descale_v", "V", 2);
  }
  for (const char* port : {"Q_T", "K_T", "dO", "dO_T"}) {
    OPENDNN_RETURN_IF_ERROR(ops::require_rank(n, port, 4));
    OPENDNN_RETURN_IF_ERROR(check_io_type(n, port, true));
  }
  for (auto [t, like] : {std::pair{"Q_T", "Q"}, std::pair{"K_T", "K"}, std::pair{"dO_T", "dO"}})
    OPENDNN_RETURN_IF_ERROR(ops::expect_dims(n, t, n.in(like)->get_dim(), "(the dims of " + std::string(like) + ")"));
  // dP = dO.V^T and S = Q.K^T contract along D; dV = P^T.dO_T, dK = dS^T.Q_T, dQ = dS.K_T along S.
  OPENDNN_RETURN_IF_ERROR(check_mx_scale(n, "descale_q", "Q", 3));
  OPENDNN_RETURN_IF_ERROR(check_mx_scale(n, "descale_k", "K", 3));
  OPENDNN_RETURN_IF_ERROR(check_mx_scale(n, "descale_v", "V", 3));
  OPENDNN_RETURN_IF_ERROR(check_mx_scale(n, "descale_dO", "dO", 3));
  OPENDNN_RETURN_IF_ERROR(check_mx_scale(n, "descale_q_T", "Q_T", 2));
  OPENDNN_RETURN_IF_ERROR(check_mx_scale(n, "descale_k_T", "K_T", 2));
  return check_mx_scale(n, "descale_dO_T", "dO_T", 2);
}

// A [B,Hq,Sq,1] FLOAT statistics output.
Status set_row_stat(Node& n, std::string_view port, const Problem& p) {
  OPENDNN_RETURN_IF_ERROR(ops::set_dims(n, port, {p.b, p.hq, p.sq, 1}));
  ops::default_type(n, port, DataType::FLOAT);
  return ops::expect_out_type(n, port, {DataType::FLOAT});
}

Status set_amax(Node& n, std::string_view port) {
  OPENDNN_RETURN_IF_ERROR(ops::set_dims(n, port, {1, 1, 1, 1}));
  ops::default_type(n, port, DataType::FLOAT);
  return ops::expect_out_type(n, port, {DataType::FLOAT});
}

// RNG_dump [B,Hq,Sq,Skv] FLOAT: the generated (seed/offset) dropout mask, forward and backward.
Status set_rng_dump(Node& n, const Problem& p) {
  if (!ops::output_if(n, "RNG_dump")) return {};
  if (ops::input_if(n, "seed") && n.attr_float("dropout_probability") > 0.0) {
    OPENDNN_RETURN_IF_ERROR(ops::set_dims(n, "RNG_dump", {p.b, p.hq, p.sq, p.skv}));
    ops::default_type(n, "RNG_dump", DataType::FLOAT);
    return {};
  }
  return ops::set_absent(n, "RNG_dump", 4, "there is no seed/offset dropout to dump");
}

Status check_out_io_type(const Node& n, std::string_view port, bool fp8) {
  if (fp8)
    return ops::expect_out_type(n, port, {DataType::FP8_E4M3, DataType::FP8_E5M2, DataType::HALF, DataType::BFLOAT16});
  return ops::expect_out_type(n, port, {DataType::HALF, DataType::BFLOAT16});
}

Status infer_forward(Node& n, Variant v, const GraphContext& ctx) {
  Problem p;
  OPENDNN_RETURN_IF_ERROR(check_common(n, v, p));
  OPENDNN_RETURN_IF_ERROR(infer_subgraphs(n, p, ctx));
  const TensorAttr& q = *n.in("Q");
  OPENDNN_RETURN_IF_ERROR(ops::set_dims_like(n, "O", {p.b, p.hq, p.sq, p.dv}, q));
  ops::default_type(n, "O", q.get_data_type());
  OPENDNN_RETURN_IF_ERROR(check_out_io_type(n, "O", is_fp8(v)));

  OPENDNN_RETURN_IF_ERROR(set_row_stat(n, "Stats", p));
  if (!n.attr_bool("generate_stats") && !n.out("Stats")->get_is_virtual())
    return n.fail(ErrorCode::ATTRIBUTE_NOT_SET, "output Stats is marked as a graph output but generate_stats is false");
  for (const char* port : {"Max", "Sum_exp"})
    if (ops::output_if(n, port)) OPENDNN_RETURN_IF_ERROR(set_row_stat(n, port, p));
  OPENDNN_RETURN_IF_ERROR(set_rng_dump(n, p));
  if (is_fp8(v))
    for (const char* port : {"Amax_S", "Amax_O"}) OPENDNN_RETURN_IF_ERROR(set_amax(n, port));
  return {};
}

Status infer_backward(Node& n, Variant v, const GraphContext& ctx) {
  Problem p;
  OPENDNN_RETURN_IF_ERROR(check_common(n, v, p));
  OPENDNN_RETURN_IF_ERROR(infer_subgraphs(n, p, ctx));
  bool fp8 = is_fp8(v);
  for (const char* port : {"O", "dO", "Stats"}) OPENDNN_RETURN_IF_ERROR(ops::require_rank(n, port, 4));
  for (const char* port : {"O", "dO"}) {
    OPENDNN_RETURN_IF_ERROR(check_io_type(n, port, fp8));
    OPENDNN_RETURN_IF_ERROR(ops::expect_dims(n, port, {p.b, p.hq, p.sq, p.dv}, "[B,Hq,Sq,Dv]"));
  }
  OPENDNN_RETURN_IF_ERROR(ops::expect_dims(n, "Stats", {p.b, p.hq, p.sq, 1}, "[B,Hq,Sq,1]"));
  OPENDNN_RETURN_IF_ERROR(ops::expect_type(n, "Stats", {DataType::FLOAT}));

  for (auto [in, out] : {std::pair{"Q", "dQ"}, std::pair{"K", "dK"}, std::pair{"V", "dV"}}) {
    const TensorAttr& t = *n.in(in);
    OPENDNN_RETURN_IF_ERROR(ops::set_dims_like(n, out, t.get_dim(), t));
    ops::default_type(n, out, t.get_data_type());
    OPENDNN_RETURN_IF_ERROR(check_out_io_type(n, out, fp8));
  }
  if (ops::output_if(n, "dBias")) {
    if (const TensorPtr& bias = ops::input_if(n, "bias")) {
      OPENDNN_RETURN_IF_ERROR(ops::set_dims_like(n, "dBias", bias->get_dim(), *bias));
      ops::default_type(n, "dBias", bias->get_data_type());
    } else {
      OPENDNN_RETURN_IF_ERROR(ops::set_absent(n, "dBias", 4, "input bias is not set"));
    }
  }
  if (ops::output_if(n, "dSink_token")) {
    if (ops::input_if(n, "sink_token")) {
      OPENDNN_RETURN_IF_ERROR(ops::set_dims(n, "dSink_token", {1, p.hq, 1, 1}));
      ops::default_type(n, "dSink_token", DataType::FLOAT);
      OPENDNN_RETURN_IF_ERROR(ops::expect_out_type(n, "dSink_token", {DataType::FLOAT}));
    } else {
      OPENDNN_RETURN_IF_ERROR(ops::set_absent(n, "dSink_token", 4, "input sink_token is not set"));
    }
  }
  OPENDNN_RETURN_IF_ERROR(set_rng_dump(n, p));
  if (fp8)
    for (const char* port : {"Amax_dQ", "Amax_dK", "Amax_dV", "Amax_dP"}) OPENDNN_RETURN_IF_ERROR(set_amax(n, port));
  return {};
}

Status infer_mx_forward(Node& n, const GraphContext&) {
  Problem p;
  OPENDNN_RETURN_IF_ERROR(check_common(n, Variant::MX_FWD, p));
  OPENDNN_RETURN_IF_ERROR(check_mx(n, Variant::MX_FWD));
  const TensorAttr& q = *n.in("Q");
  OPENDNN_RETURN_IF_ERROR(ops::set_dims_like(n, "O", {p.b, p.hq, p.sq, p.dv}, q));
  ops::default_type(n, "O", q.get_data_type());
  OPENDNN_RETURN_IF_ERROR(check_out_io_type(n, "O", true));
  OPENDNN_RETURN_IF_ERROR(set_row_stat(n, "Stats", p));
  if (!n.attr_bool("generate_stats") && !n.out("Stats")->get_is_virtual())
    return n.fail(ErrorCode::ATTRIBUTE_NOT_SET, "output Stats is marked as a graph output but generate_stats is false");
  return set_amax(n, "Amax_O");
}

Status infer_mx_backward(Node& n, const GraphContext&) {
  Problem p;
  OPENDNN_RETURN_IF_ERROR(check_common(n, Variant::MX_BWD, p));
  for (const char* port : {"O_f16", "dO_f16", "dO"}) {
    OPENDNN_RETURN_IF_ERROR(ops::require_rank(n, port, 4));
    OPENDNN_RETURN_IF_ERROR(ops::expect_dims(n, port, {p.b, p.hq, p.sq, p.dv}, "[B,Hq,Sq,Dv]"));
  }
  for (const char* port : {"O_f16", "dO_f16"}) OPENDNN_RETURN_IF_ERROR(check_io_type(n, port, false));
  OPENDNN_RETURN_IF_ERROR(check_mx(n, Variant::MX_BWD));
  OPENDNN_RETURN_IF_ERROR(ops::require_rank(n, "Stats", 4));
  OPENDNN_RETURN_IF_ERROR(ops::expect_dims(n, "Stats", {p.b, p.hq, p.sq, 1}, "[B,Hq,Sq,1]"));
  OPENDNN_RETURN_IF_ERROR(ops::expect_type(n, "Stats", {DataType::FLOAT}));
  const DataType grad = n.in("O_f16")->get_data_type();
  for (auto [in, out] : {std::pair{"Q", "dQ"}, std::pair{"K", "dK"}, std::pair{"V", "dV"}}) {
    const TensorAttr& t = *n.in(in);
    OPENDNN_RETURN_IF_ERROR(ops::set_dims_like(n, out, t.get_dim(), t));
    ops::default_type(n, out, grad);
    OPENDNN_RETURN_IF_ERROR(check_out_io_type(n, out, true));
  }
  if (ops::input_if(n, "sink_token")) {
    OPENDNN_RETURN_IF_ERROR(ops::set_dims(n, "dSink_token", {1, p.hq, 1, 1}));
    ops::default_type(n, "dSink_token", DataType::FLOAT);
  } else {
    OPENDNN_RETURN_IF_ERROR(ops::set_absent(n, "dSink_token", 4, "input sink_token is not set"));
  }
  for (const char* port : {"Amax_dQ", "Amax_dK", "Amax_dV"}) OPENDNN_RETURN_IF_ERROR(set_amax(n, port));
  return {};
}

Status infer_sdpa(Node& n, const GraphContext& c) { return infer_forward(n, Variant::FWD, c); }
Status infer_sdpa_backward(Node& n, const GraphContext& c) { return infer_backward(n, Variant::BWD, c); }
Status infer_sdpa_fp8(Node& n, const GraphContext& c) { return infer_forward(n, Variant::FP8_FWD, c); }
Status infer_sdpa_fp8_backward(Node& n, const GraphContext& c) { return infer_backward(n, Variant::FP8_BWD, c); }

}  // namespace

const OpDef def_SDPA = {kFwdIn, kFwdOut, kFwdAttrs, infer_sdpa};
const OpDef def_SDPA_BACKWARD = {kBwdIn, kBwdOut, kBwdAttrs, infer_sdpa_backward};
const OpDef def_SDPA_FP8 = {kFp8FwdIn, kFp8FwdOut, kFwdAttrs, infer_sdpa_fp8};
const OpDef def_SDPA_FP8_BACKWARD = {kFp8BwdIn, kFp8BwdOut, kBwdAttrs, infer_sdpa_fp8_backward};
const OpDef def_SDPA_MXFP8 = {kMxFwdIn, kMxFwdOut, kFwdAttrs, infer_mx_forward};
const OpDef def_SDPA_MXFP8_BACKWARD = {kMxBwdIn, kMxBwdOut, kBwdAttrs, infer_mx_backward};

}  // namespace opendnn
