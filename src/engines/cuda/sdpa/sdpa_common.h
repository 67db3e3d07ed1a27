// SPDX-License-Identifier: Apache-2.0
// The attention problem both cuda SDPA kernels (forward sdpa_fwd_*, backward sdpa_bwd_*) take.
// Plain data, usable from host C++ and device code; the .cpp adapters fill it through
// describe() at build time and bind() at execute time (pointer copies only, no allocation).
//
// Conventions (the reference engine, src/engines/reference/sdpa.cpp, defines them):
// - Q [B,Hq,Sq,Dqk], K [B,Hk,Skv,Dqk], V [B,Hv,Skv,Dv], O [B,Hq,Sq,Dv]; every stride in ELEMENTS,
//   the head dim contiguous (stride 1). Query head h reads K head h/(Hq/Hk), V head h/(Hq/Hv).
// - Element (b,h,s,d) lives at base(b) + h*stride[1] + s*stride[2] + d, with base(b) = ragged[b] when
//   the tensor has a ragged offset (THD), else cu_seq_len[b]*stride[2] when its side has cumulative
//   lengths (token-packed), else b*stride[0].
// - Lengths: sq_b = seq_len_q[b] or cu_q[b+1]-cu_q[b] (clamped to Sq), else Sq; same for kv.
// - Visibility of key j from query i: i < sq_b, j < skv_b, and with ia = i (TOP_LEFT) or
//   i + skv_b - sq_b (BOTTOM_RIGHT): j <= ia + right (if has_right; right = 0 is causal) and
//   j > ia - left (if has_left).
// - Stats (LSE): fp32 [B,Hq,Sq,1], natural-log logsumexp of the SCALED logits,
//   Stats_i = m_i + ln(sum_j exp(s_ij - m_i)) with s_ij = scale * q_i.k_j (plus the sink logit in the
//   sum when sink_token is given). A row with no visible key (and no sink) has O = 0, Stats = -inf.
//   Padded query rows (i >= sq_b) of unpacked layouts get O = 0 and Stats = 0; rows past the
//   sequence in packed layouts belong to the next sequence and are not written.
//   The backward pass uses P_ij = exp(s_ij - Stats_i).
#pragma once

#include <cstdint>
#include <string>

#include "plan/attention_cost.h"

#if defined(__CUDACC__)
#define OPENDNN_SDPA_HD __host__ __device__ __forceinline__
#else
#define OPENDNN_SDPA_HD inline
#endif

namespace opendnn {
class Graph;
class Node;
}  // namespace opendnn

namespace opendnn::cuda::sdpa {

// An int32 or int64 per-batch array on the device ([B] lengths, [B+1] offsets); null when absent.
struct IndexArray {
  const void* ptr = nullptr;
  bool is64 = false;
  OPENDNN_SDPA_HD int64_t at(int64_t i) const {
    return is64 ? static_cast<const int64_t*>(ptr)[i] : int64_t(static_cast<const int32_t*>(ptr)[i]);
  }
};

// One token tensor (Q, K, V, O, dO, dQ, dK, dV): pointer, strides [batch, head, seq] in elements,
// and its THD ragged offsets (elements) when it has them.
struct TokenTensor {
  void* ptr = nullptr;
  int64_t stride[3] = {0, 0, 0};
  IndexArray ragged;
};

struct Problem {
  int64_t b = 0, hq = 0, hk = 0, hv = 0, sq = 0, skv = 0, d_qk = 0, d_v = 0;
  bool fp16 = false;  // else bf16
  TokenTensor q, k, v, o;
  // Stats [B,Hq,Sq,1] fp32: strides [batch, head, seq] and optional ragged offsets.
  float* lse = nullptr;
  int64_t lse_stride[3] = {0, 0, 0};
  IndexArray lse_ragged;
  // Softmax scale of the logits; when scale_ptr is set (a device FLOAT tensor) it wins at run time.
  float scale = 1.0f;
  const float* scale_ptr = nullptr;
  bool bottom_right = false;
  bool has_left = false, has_right = false;
  int64_t left = 0, right = 0;
  // Variable lengths, per side: seq_len_* [B] int32, or cu_seq_len_* [B+1] int32/int64.
  IndexArray seq_len_q, seq_len_kv, cu_q, cu_kv;
  // sink_token [1,Hq,1,1] fp32 (one logit per query head joining the softmax denominator), or null.
  const float* sink = nullptr;

  OPENDNN_SDPA_HD int64_t len_q(int64_t bi) const {
    int64_t n = seq_len_q.ptr ? seq_len_q.at(bi) : cu_q.ptr ? cu_q.at(bi + 1) - cu_q.at(bi) : sq;
    return n < sq ? (n < 0 ? 0 : n) : sq;
  }
  OPENDNN_SDPA_HD int64_t len_kv(int64_t bi) const {
    int64_t n = seq_len_kv.ptr ? seq_len_kv.at(bi) : cu_kv.ptr ? cu_kv.at(bi + 1) - cu_kv.at(bi) : skv;
    return n < skv ? (n < 0 ? 0 : n) : skv;
  }
  // Element offset of (bi, 0, 0, 0) of a tensor of the query side (q_side) or the key/value side.
  OPENDNN_SDPA_HD int64_t base(const TokenTensor& t, int64_t bi, bool q_side) const {
    if (t.ragged.ptr) return t.ragged.at(bi);
    const IndexArray& cu = q_side ? cu_q : cu_kv;
    if (cu.ptr) return cu.at(bi) * t.stride[2];
    return bi * t.stride[0];
  }
  OPENDNN_SDPA_HD int64_t lse_base(int64_t bi) const {
    return lse_ragged.ptr ? lse_ragged.at(bi) : bi * lse_stride[0];
  }
  // True when query rows past a sequence's length belong to the next one (must not be written).
  OPENDNN_SDPA_HD bool q_packed() const { return o.ragged.ptr || cu_q.ptr; }
};

// Where the device pointers of a Problem come from at execute time: variant-pack slots (-1 absent).
struct Slots {
  int64_t q = -1, k = -1, v = -1, o = -1, lse = -1;
  int64_t rag_q = -1, rag_k = -1, rag_v = -1, rag_o = -1, rag_lse = -1;
  int64_t seq_len_q = -1, seq_len_kv = -1, cu_q = -1, cu_kv = -1, sink = -1;
  // attn_scale given as a pass-by-value tensor in the variant pack (a host pointer), and its type.
  int64_t scale_host = -1;
  int scale_host_type = 0;  // opendnn::DataType value
  // attn_scale given as a device FLOAT tensor.
  int64_t scale_device = -1;
};

// Fills `p` (sizes, strides, mask options; pointers null) and `s` from a single SDPA (forward) or
// SDPA_BACKWARD node. For the backward node, O and Stats are its inputs (dO/dQ/dK/dV are the
// backward adapter's own). Returns "" or the reason the cuda kernels cannot run it
// ("not supported: ..."). Features the kernels may still lack (sink, windows) are described, not
// declined: each adapter checks those it does not implement.
std::string describe(const Graph& g, const Node& n, Problem& p, Slots& s);

// Copies the variant-pack pointers named by `s` into `p` (execute time: no allocation, no sync).
void bind(Problem& p, const Slots& s, void* const* slots);

// The problem in the terms of the router's attention tile model (plan/attention_cost.h); a sliding
// window or per-batch lengths only shorten the work, which the model then overestimates.
cost::AttentionShape attention_shape(const Problem& p, bool backward);

}  // namespace opendnn::cuda::sdpa
