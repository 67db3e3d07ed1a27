// SPDX-License-Identifier: Apache-2.0
// Scaled dot-product attention: SDPA, SDPA_BACKWARD, SDPA_FP8, SDPA_FP8_BACKWARD.
// Q [B, Hq, Sq, Dqk], K [B, Hk, Skv, Dqk], V [B, Hv, Skv, Dv] with any strides; O [B, Hq, Sq, Dv];
// Stats [B, Hq, Sq, 1] fp32 (natural-log LSE). Variable lengths: per-batch seq_len_* [B,1,1,1] or
// cumulative cu_seq_len_* [B+1,1,1,1], chosen per side; THD layout via ragged offsets on Q/K/V/O.
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
const AttrSpec kFwdAttrs[] = {OPENDNN_SDPA_COMMON_ATTRS, {"generate_stats", AttrType::BOOL, false}};

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
const PortSpec kBwdOut[] = {{"dQ"}, {"dK"}, {"dV"}, {"dBias", false}, {"dSink_token", false}};
const AttrSpec kBwdAttrs[] = {OPENDNN_SDPA_COMMON_ATTRS,
                              {"use_deterministic_algorithm", AttrType::BOOL, false},
                              {"max_total_seq_len_q", AttrType::INT, {}},
                              {"max_total_seq_len_kv", AttrType::INT, {}}};

const PortSpec kFp8FwdIn[] = {
    {"Q", true, "q"},        {"K", true, "k"},         {"V", true, "v"},          {"descale_q"},
    {"descale_k"},           {"descale_v"},            {"descale_s"},             {"scale_s"},
    {"scale_o"},             {"attn_scale", false},    {"seq_len_q", false},      {"seq_len_kv", false},
    {"cu_seq_len_q", false}, {"cu_seq_len_kv", false}, {"seed", false},           {"offset", false},
};
const PortSpec kFp8FwdOut[] = {{"O"}, {"Stats"}, {"Amax_S"}, {"Amax_O"}};

const PortSpec kFp8BwdIn[] = {
    {"Q", true, "q"},  {"K", true, "k"},   {"V", true, "v"},   {"O", true, "o"},  {"dO", true, "dO"},
    {"Stats", true, "stats"},              {"descale_q"},      {"descale_k"},     {"descale_v"},
    {"descale_o"},     {"descale_dO"},     {"descale_s"},      {"descale_dP"},    {"scale_s"},
    {"scale_dQ"},      {"scale_dK"},       {"scale_dV"},       {"scale_dP"},      {"attn_scale", false},
    {"seq_len_q", false},                  {"seq_len_kv", false},                 {"cu_seq_len_q", false},
    {"cu_seq_len_kv", false},              {"seed", false},    {"offset", false},
};
const PortSpec kFp8BwdOut[] = {{"dQ"}, {"dK"}, {"dV"}, {"Amax_dQ"}, {"Amax_dK"}, {"Amax_dV"}, {"Amax_dP"}};

}  // namespace

const OpDef def_SDPA = {kFwdIn, kFwdOut, kFwdAttrs, nullptr};
const OpDef def_SDPA_BACKWARD = {kBwdIn, kBwdOut, kBwdAttrs, nullptr};
const OpDef def_SDPA_FP8 = {kFp8FwdIn, kFp8FwdOut, kFwdAttrs, nullptr};
const OpDef def_SDPA_FP8_BACKWARD = {kFp8BwdIn, kFp8BwdOut, kBwdAttrs, nullptr};

}  // namespace opendnn
