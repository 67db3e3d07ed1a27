// SPDX-License-Identifier: Apache-2.0
// Reference kernels for scaled dot-product attention (SDPA, SDPA_BACKWARD, SDPA_FP8,
// SDPA_FP8_BACKWARD, SDPA_MXFP8, SDPA_MXFP8_BACKWARD), computed in double, one (batch, query head) per
// OpenMP task.
//
// Semantics (the numeric oracle for every other engine):
//   Shapes: Q [B,Hq,Sq,D], K [B,Hk,Skv,D], V [B,Hv,Skv,Dv], O [B,Hq,Sq,Dv], Stats/Max/Sum_exp
//     [B,Hq,Sq,1]. Query head h reads K head h/(Hq/Hk) and V head h/(Hq/Hv) (GQA/MQA).
//   Lengths: sq_b = seq_len_q[b] (or cu_seq_len_q[b+1]-cu_seq_len_q[b]), else Sq; same for kv.
//   Addressing: element (b,h,s,d) of a tensor lives at base_b + h*st1 + s*st2 + d*st3 where base_b is
//     ragged_offset[b] if the tensor has a ragged offset (elements), else cu_seq_len[b]*st2 when the
//     cumulative lengths of its side are given (token-packed), else b*st0. Paged K/V: element
//     (b,h,s,d) is container[page_table[b,0,s/bs,0], h, s%bs, d] with bs the container's dim 2, and
//     Skv = max_seq_len_kv (else table columns * bs).
//   Logits: s_ij = scale * q_i.k_j + bias[b,h,i,j] (broadcast) + alibi; scale = attn_scale tensor,
//     else attn_scale_value, else 1. Alibi adds slope_h*(j - i_a) with slope_h = 2^(-8(h+1)/H) for
//     power-of-two H = Hq (otherwise the ALiBi paper's interleave: the first n = 2^floor(log2 H)
//     slopes of n, then 2^(-4(2k+1)/n) for k = 0..H-n-1).
//   Visibility: key j is visible from query i iff i < sq_b, j < skv_b, its block_mask tile is nonzero, and with i_a = i (TOP_LEFT)
//     or i + skv_b - sq_b (BOTTOM_RIGHT): j <= i_a + right_bound (if set; 0 = causal) and
//     j > i_a - left_bound (if set: keys at distance i_a - j >= left_bound are excluded).
//   Softmax: m_i = max over visible s_ij and the sink logit of head h (if sink_token is given);
//     Sum_exp_i = sum_visible exp(s_ij - m_i) + exp(sink_h - m_i); P_ij = exp(s_ij - m_i)/Sum_exp_i;
//     Stats_i = m_i + ln(Sum_exp_i); Max_i = m_i. The sink only joins the denominator.
//   Dropout: O_i = sum_j P_ij * Z_ij * V_j where Z_ij = keep_ij/(1-p) (Philox) or
//     dropout_mask[b,h,i,j] * dropout_scale (user mask, broadcast). Stats are of the undropped P.
//     Philox mapping (src/common/philox.h, stream (seed, subsequence 0)): element (b,h,i,j) draws word
//     offset + ((b*Hq + h)*Sq + i)*Skv + j; it is kept iff philox_uniform(word) >= p. RNG_dump
//     receives keep (1 or 0) for every element of its shape.
//   Rows with no visible key and no sink (masked by the masks, or every logit -inf, e.g. a -inf bias):
//     O = 0, Stats = Max = -inf (ln of an empty sum), Sum_exp = 0; the backward reads Stats = -inf as
//     such a row and gives it zero gradients (dQ row 0, no dK/dV/dBias contribution).
//     With a sink and no visible key: O = 0, Stats = sink. Padded query rows (i >= sq_b): O = 0 and
//     Stats = Max = Sum_exp = 0 in padded (BHSD) layouts; in packed layouts (ragged offsets or cu
//     lengths) rows beyond the sequence belong to the next one and are not written.
//   Backward (from Stats, never from O): P_ij = exp(s_ij - Stats_i) on visible keys; dP~ = dO_i.V_j,
//     dP_ij = dP~_ij * Z_ij, D_i = sum_j P_ij dP_ij, dS_ij = P_ij (dP_ij - D_i); dQ_i = scale sum_j dS_ij K_j;
//     dK_j = scale sum_i dS_ij Q_i; dV_j = sum_i P_ij Z_ij dO_i; dBias = sum of dS over broadcast dims;
//     dSink_h = -sum_{b,i} exp(sink_h - Stats_i) D_i. Per-query-head dK/dV contributions go to scratch
//     and are summed over the GQA group in a fixed order: deterministic and thread-count independent.
//     Padded K/V rows of dK/dV (j >= skv_b, padded layouts) are written 0; dropout_scale_inv is unused.
//   FP8: inputs are dequantised (Q*descale_q, ...), everything runs in double, outputs are quantised by
//     their scales (O*scale_o, dQ*scale_dQ, ...). Amax_O/Amax_dQ/dK/dV are max |value| before scaling;
//     Amax_S = max of P*Z; Amax_dP = max |dP| (after the dropout mask). P is not quantised (descale_s,
//     scale_s, descale_dP, scale_dP do not change the results).
//   MXFP8: every FP8 operand is multiplied by its E8M0 block scale (one per 32 elements along the axis
//     its product contracts: D for Q, K (and V, dO in the backward), S for V in the forward and for Q_T,
//     K_T, dO_T); the backward uses Q_T for dK, K_T for dQ and dO_T for dV. No output scaling; Amax_* as FP8.
//   score_mod: the pointwise sub-graph maps each logit s_ij (after scale, bias, ALiBi) to s'_ij, which the
//     softmax, Stats and the backward's P use; the backward's dS' = P(dP - D) goes through
//     score_mod_bprop (evaluated at the same element, after score_mod, whose values it may read) to dS.
//     Sub-graph values stay in double; GEN_INDEX gives the element's index along its axis.
//   block_mask: one byte per 128x128 tile, broadcast to [B,Hq,ceil(Sq/128),ceil(Skv/128)]; a zero tile
//     hides its keys (on top of every other mask).
#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/philox.h"
#include "engines/reference/family_util.h"
#include "engines/reference/kern_util.h"
#include "engines/reference/ref_kernel.h"

namespace opendnn::ref {

namespace {

using fam::in_view;
using fam::out_view;
constexpr double kInf = std::numeric_limits<double>::infinity();

// A [B,H,S,D] tensor as the kernels address it.
struct T4 {
  const View* v = nullptr;
  double mul = 1.0;                // dequantisation (inputs) or quantisation (outputs) factor
  const View* ragged = nullptr;    // element offsets per batch
  const View* cu = nullptr;        // cumulative token counts (token-packed) when no ragged offset
  const View* table = nullptr;     // page table (paged K/V)
  int64_t block = 1;
  const View* bscale = nullptr;    // MXFP8 block scales (E8M0), one per 32 elements along k_axis
  int k_axis = 3;
  bool swizzled = false;           // F8_128x4 reordering of bscale

  bool packed() const { return ragged || cu; }
  // The block scale of element (b,h,s,d). Plain scales are at [b,h,s,d/32] (k_axis 3) or [b,h,s/32,d]
  // (k_axis 2) by their strides. F8_128x4 stores each (b,h) matrix [mn, k] (mn the unscaled axis, k the
  // block index) in 128x4 tiles of 512 bytes, k-tiles inner: element (m, k) of a tile sits at byte
  // (m % 32) * 16 + (m / 32) * 4 + k % 4.
  double block_scale(int64_t b, int64_t h, int64_t s, int64_t d) const {
    const int64_t row = k_axis == 3 ? s : s / 32, col = k_axis == 3 ? d / 32 : d;
    if (!swizzled) return bscale->get(bscale->offset_of(std::array<int64_t, 4>{b, h, row, col}.data()));
    const int64_t mn = k_axis == 3 ? row : col, k = k_axis == 3 ? col : row;
    const int64_t mn_dim = bscale->dims[k_axis == 3 ? 2 : 3], k_dim = bscale->dims[size_t(k_axis)];
    const int64_t mn_tiles = (mn_dim + 127) / 128, k_tiles = (k_dim + 3) / 4;
    const int64_t l = b * bscale->dims[1] + h;
    const int64_t tile = (l * mn_tiles + mn / 128) * k_tiles + k / 4;
    return bscale->get(tile * 512 + (mn % 32) * 16 + ((mn / 32) % 4) * 4 + k % 4);
  }
  int64_t off(int64_t b, int64_t h, int64_t s, int64_t d) const {
    const auto& st = v->strides;
    if (table) {
      int64_t page = int64_t(table->get(table->offset_of(std::array<int64_t, 4>{b, 0, s / block, 0}.data())));
      return page * st[0] + h * st[1] + (s % block) * st[2] + d * st[3];
    }
    int64_t base = ragged ? int64_t(ragged->get(b)) : cu ? int64_t(cu->get(b)) * st[2] : b * st[0];
    return base + h * st[1] + s * st[2] + d * st[3];
  }
  double get(int64_t b, int64_t h, int64_t s, int64_t d) const {
    const double x = v->get(off(b, h, s, d)) * mul;
    return bscale ? x * block_scale(b, h, s, d) : x;
  }
  void set(int64_t b, int64_t h, int64_t s, int64_t d, double x) const { v->set(off(b, h, s, d), x * mul); }
};

struct Cfg {
  int64_t B = 0, Hq = 0, Hk = 0, Hv = 0, Sq = 0, Skv = 0, D = 0, Dv = 0;
  T4 q, k, v;
  T4 qT, kT;  // Q for dK and K for dQ (MXFP8: the copies quantised along S; else Q and K)
  double scale = 1.0;
  bool has_left = false, has_right = false, bottom_right = false, alibi = false;
  int64_t left = 0, right = 0;
  const View* bias = nullptr;
  const View* seq_q = nullptr;
  const View* seq_kv = nullptr;
  const View* cu_q = nullptr;
  const View* cu_kv = nullptr;
  const View* sink = nullptr;
  // Dropout.
  double p = 0.0;
  bool philox = false;
  uint64_t seed = 0, rng_offset = 0;
  const View* dmask = nullptr;
  double dscale = 1.0;
  std::vector<double> slopes;

  int64_t len_q(int64_t b) const {
    if (seq_q) return std::min<int64_t>(int64_t(seq_q->get(seq_q->offset_of(std::array<int64_t, 4>{b, 0, 0, 0}.data()))), Sq);
    if (cu_q) return std::min<int64_t>(int64_t(cu_q->get(b + 1) - cu_q->get(b)), Sq);
    return Sq;
  }
  int64_t len_kv(int64_t b) const {
    if (seq_kv) return std::min<int64_t>(int64_t(seq_kv->get(seq_kv->offset_of(std::array<int64_t, 4>{b, 0, 0, 0}.data()))), Skv);
    if (cu_kv) return std::min<int64_t>(int64_t(cu_kv->get(b + 1) - cu_kv->get(b)), Skv);
    return Skv;
  }
  const View* bmask = nullptr;
  bool visible(int64_t b, int64_t h, int64_t i, int64_t j, int64_t sq, int64_t skv) const {
    if (i >= sq || j >= skv) return false;
    if (bmask && bmask->get(bmask->broadcast_offset_of(std::array<int64_t, 4>{b, h, i / 128, j / 128}.data())) == 0)
      return false;
    const int64_t ia = bottom_right ? i + skv - sq : i;
    if (has_right && j > ia + right) return false;
    if (has_left && j <= ia - left) return false;
    return true;
  }
  // Logit of (b,h,i,j) (visibility not checked).
  double logit(int64_t b, int64_t h, int64_t i, int64_t j, int64_t sq, int64_t skv) const {
    const int64_t hk = h / (Hq / Hk);
    double acc = 0;
    for (int64_t d = 0; d < D; ++d) acc += q.get(b, h, i, d) * k.get(b, hk, j, d);
    double s = scale * acc;
    if (bias) s += bias->get(bias->broadcast_offset_of(std::array<int64_t, 4>{b, h, i, j}.data()));
    if (alibi) {
      const int64_t ia = bottom_right ? i + skv - sq : i;
      s += slopes[size_t(h)] * double(j - ia);
    }
    return s;
  }
  bool keep(int64_t b, int64_t h, int64_t i, int64_t j) const {
    uint64_t lin = uint64_t(((b * Hq + h) * Sq + i) * Skv + j);
    return philox_uniform(philox_word(seed, 0, rng_offset + lin)) >= p;
  }
  // The dropout multiplier Z_ij.
  double z(int64_t b, int64_t h, int64_t i, int64_t j) const {
    if (dmask) return dmask->get(dmask->broadcast_offset_of(std::array<int64_t, 4>{b, h, i, j}.data())) * dscale;
    if (philox && p > 0) return keep(b, h, i, j) ? 1.0 / (1.0 - p) : 0.0;
    return 1.0;
  }
  double sink_logit(int64_t h) const { return sink->get(sink->broadcast_offset_of(std::array<int64_t, 4>{0, h, 0, 0}.data())); }
};

// The score_mod (and score_mod_bprop) sub-graphs as a program evaluated per element (b,h,i,j) in double:
// value slots for the sub-graph inputs and node outputs, views for the graph tensors they read.
struct ScoreProgram {
  struct Src {
    bool external = false;
    int64_t index = 0;  // value slot, or the external's position in the node's inputs (its View in Args::in)
  };
  struct Op {
    PointwiseMode mode = PointwiseMode::IDENTITY;
    PointwiseParams p;
    int arity = 1;
    int64_t axis = 0;  // GEN_INDEX: the axis in [B,H,Sq,Skv] terms
    Src in[3];
    int64_t out = 0;
  };
  std::vector<Op> ops;
  size_t n_fwd = 0;  // ops of score_mod; the rest are score_mod_bprop's
  int64_t slots = 0, fwd_in = -1, fwd_out = -1, bwd_in = -1, bwd_out = -1;
  const Args* args = nullptr;

  bool empty() const { return fwd_in < 0; }
  double fetch(const Src& s, const double* vals, const int64_t* idx) const {
    if (!s.external) return vals[s.index];
    const View& v = args->in[size_t(s.index)];
    const size_t r = v.dims.size();
    int64_t off = 0;
    for (size_t k = 0; k < r && k < 4; ++k) off += (v.dims[k] == 1 ? 0 : idx[4 - r + k]) * v.strides[k];
    return v.get(off);
  }
  void run(size_t first, size_t last, double* vals, const int64_t* idx) const {
    for (size_t k = first; k < last; ++k) {
      const Op& o = ops[k];
      if (o.mode == PointwiseMode::GEN_INDEX) {
        vals[o.out] = double(idx[o.axis]);
        continue;
      }
      const double a = fetch(o.in[0], vals, idx), b = o.arity > 1 ? fetch(o.in[1], vals, idx) : 0.0;
      const double c = o.arity > 2 ? fetch(o.in[2], vals, idx) : 0.0;
      vals[o.out] = pointwise_value(o.mode, o.p, a, b, c);
    }
  }
  // The modified score of element idx (fills the forward slots that score_mod_bprop may read).
  double fwd(double s, double* vals, const int64_t* idx) const {
    vals[fwd_in] = s;
    run(0, n_fwd, vals, idx);
    return vals[fwd_out];
  }
  // The gradient of the original score from that of the modified one (after fwd of the same element).
  double bwd(double g, double* vals, const int64_t* idx) const {
    vals[bwd_in] = g;
    run(n_fwd, ops.size(), vals, idx);
    return vals[bwd_out];
  }
};

Status compile_subgraph(const Node& n, const SubGraph& sg, ScoreProgram& prog,
                        std::unordered_map<const TensorAttr*, int64_t>& slot) {
  const int64_t in_slot = prog.slots++;
  slot[sg.input.get()] = in_slot;
  (sg.name == "score_mod" ? prog.fwd_in : prog.bwd_in) = in_slot;
  for (const auto& sub : sg.nodes) {
    ScoreProgram::Op o;
    o.mode = sub->pointwise_mode();
    o.p = pointwise_params(*sub);
    o.arity = pointwise_arity(o.mode);
    const auto& od = sub->outputs()[0]->get_dim();
    o.axis = int64_t(4 - od.size()) + o.p.axis;
    if (o.axis < 0 || o.axis > 3) return n.fail(ErrorCode::GRAPH_NOT_SUPPORTED, "reference: a GEN_INDEX axis of the score_mod is out of range");
    for (int k = 0; k < o.arity && o.mode != PointwiseMode::GEN_INDEX; ++k) {
      const TensorPtr& t = sub->inputs()[size_t(k)];
      if (!t) return n.fail(ErrorCode::ATTRIBUTE_NOT_SET, "reference: a score_mod node lacks an input");
      if (auto it = slot.find(t.get()); it != slot.end()) {
        o.in[k] = {false, it->second};
        continue;
      }
      const auto& ins = n.inputs();
      size_t pos = n.num_ports();
      while (pos < ins.size() && ins[pos] != t) ++pos;
      if (pos == ins.size()) return n.fail(ErrorCode::GRAPH_NOT_SUPPORTED, "reference: a score_mod input is unknown");
      if (!prog.args->in[pos].present()) return n.fail(ErrorCode::INVALID_VARIANT_PACK, "reference: a score_mod input has no data");
      o.in[k] = {true, int64_t(pos)};
    }
    o.out = prog.slots++;
    slot[sub->outputs()[0].get()] = o.out;
    prog.ops.push_back(o);
  }
  auto it = slot.find(sg.output.get());
  if (it == slot.end()) return n.fail(ErrorCode::GRAPH_NOT_SUPPORTED, "reference: the output of " + sg.name + " is not made inside it");
  (sg.name == "score_mod" ? prog.fwd_out : prog.bwd_out) = it->second;
  return {};
}

// The program of n's score_mod (then score_mod_bprop); empty when n has none.
Status compile_score_mod(const Node& n, const Args& a, ScoreProgram& prog) {
  prog.args = &a;
  std::unordered_map<const TensorAttr*, int64_t> slot;
  if (const SubGraph* f = n.subgraph("score_mod")) {
    OPENDNN_RETURN_IF_ERROR(compile_subgraph(n, *f, prog, slot));
    prog.n_fwd = prog.ops.size();
  }
  if (const SubGraph* b = n.subgraph("score_mod_bprop")) OPENDNN_RETURN_IF_ERROR(compile_subgraph(n, *b, prog, slot));
  if (n.subgraph("score_mod_bprop") && prog.fwd_in < 0)
    return n.fail(ErrorCode::GRAPH_NOT_SUPPORTED, "reference: score_mod_bprop needs score_mod");
  return {};
}

std::vector<double> alibi_slopes(int64_t H) {
  std::vector<double> s(static_cast<size_t>(H));
  int64_t n = 1;
  while (n * 2 <= H) n *= 2;
  for (int64_t h = 0; h < n && h < H; ++h) s[size_t(h)] = std::pow(2.0, -8.0 * double(h + 1) / double(n));
  for (int64_t k = 0; n + k < H; ++k) s[size_t(n + k)] = std::pow(2.0, -4.0 * double(2 * k + 1) / double(n));
  return s;
}

// The ragged-offset data of a port, failing when the tensor has a ragged offset the engine did not
// pass (see fam::ragged_view for the convention).
Status ragged_of(const Node& n, const Args& a, bool output, const char* port, const View*& v) {
  v = fam::ragged_view(n, a, output, port);
  int i = output ? n.spec().output_index(port) : n.spec().input_index(port);
  if (i < 0) return {};
  const auto& ts = output ? n.outputs() : n.inputs();
  if (!v && size_t(i) < ts.size() && ts[size_t(i)] && ts[size_t(i)]->get_ragged_offset())
    return n.fail(ErrorCode::INVALID_VARIANT_PACK, std::string("reference: the ragged offset of ") + port + " has no data");
  return {};
}

// The MXFP8 block scales on `port` for tensor t, scaled along k_axis.
Status bind_block_scale(const Node& n, const Args& a, const char* port, int k_axis, T4& t) {
  t.bscale = in_view(n, a, port);
  if (!t.bscale || t.bscale->rank() != 4) return n.fail(ErrorCode::INVALID_VARIANT_PACK, std::string("reference: ") + port + " needs data");
  t.k_axis = k_axis;
  t.swizzled = t.bscale->attr && t.bscale->attr->get_reordering_type() == TensorReordering::F8_128x4;
  return {};
}

// Builds the configuration common to all the ops. `fp8` adds per-tensor descales on Q/K/V, `mx` block
// scales instead.
Status make_cfg(const Node& n, const Args& a, Cfg& c, bool fp8, bool backward, bool mx = false) {
  const View* q = in_view(n, a, "Q");
  const View* k = in_view(n, a, "K");
  const View* v = in_view(n, a, "V");
  if (!q || !k || !v) return n.fail(ErrorCode::INVALID_VARIANT_PACK, "reference: Q, K and V need data");
  if (q->rank() != 4 || k->rank() != 4 || v->rank() != 4)
    return n.fail(ErrorCode::GRAPH_NOT_SUPPORTED, "reference: Q, K, V must be 4-D");
  c.q.v = q, c.k.v = k, c.v.v = v;
  c.B = q->dims[0], c.Hq = q->dims[1], c.Sq = q->dims[2], c.D = q->dims[3];
  c.Hk = k->dims[1], c.Hv = v->dims[1], c.Dv = v->dims[3];
  c.Skv = k->dims[2];
  if (c.Hk <= 0 || c.Hv <= 0 || c.Hq % c.Hk || c.Hq % c.Hv)
    return n.fail(ErrorCode::GRAPH_NOT_SUPPORTED, "reference: Hq must be a multiple of Hk and Hv");
  if (k->dims[3] != c.D) return n.fail(ErrorCode::GRAPH_NOT_SUPPORTED, "reference: K head dim differs from Q's");
  c.seq_q = in_view(n, a, "seq_len_q");
  c.seq_kv = in_view(n, a, "seq_len_kv");
  c.cu_q = in_view(n, a, "cu_seq_len_q");
  c.cu_kv = in_view(n, a, "cu_seq_len_kv");
  OPENDNN_RETURN_IF_ERROR(ragged_of(n, a, false, "Q", c.q.ragged));
  OPENDNN_RETURN_IF_ERROR(ragged_of(n, a, false, "K", c.k.ragged));
  OPENDNN_RETURN_IF_ERROR(ragged_of(n, a, false, "V", c.v.ragged));
  c.q.cu = c.cu_q, c.k.cu = c.cu_kv, c.v.cu = c.cu_kv;
  if (!backward) {
    const View* ptk = in_view(n, a, "page_table_k");
    const View* ptv = in_view(n, a, "page_table_v");
    if (ptk || ptv) {
      if (!ptk || !ptv) return n.fail(ErrorCode::GRAPH_NOT_SUPPORTED, "reference: paged KV needs both page tables");
      c.k.table = ptk, c.v.table = ptv, c.k.block = k->dims[2], c.v.block = v->dims[2];
      c.k.ragged = c.v.ragged = nullptr, c.k.cu = c.v.cu = nullptr;
      c.Skv = n.has("max_seq_len_kv") ? n.attr_int("max_seq_len_kv") : ptk->dims[2] * k->dims[2];
    }
  }
  if (!c.k.table && v->dims[2] != c.Skv) return n.fail(ErrorCode::GRAPH_NOT_SUPPORTED, "reference: K and V sequence lengths differ");
  if (mx) {
    OPENDNN_RETURN_IF_ERROR(bind_block_scale(n, a, "descale_q", 3, c.q));
    OPENDNN_RETURN_IF_ERROR(bind_block_scale(n, a, "descale_k", 3, c.k));
    OPENDNN_RETURN_IF_ERROR(bind_block_scale(n, a, "descale_v", backward ? 3 : 2, c.v));
  } else if (fp8) {
    c.q.mul = fam::scalar_in(n, a, "descale_q", 1.0);
    c.k.mul = fam::scalar_in(n, a, "descale_k", 1.0);
    c.v.mul = fam::scalar_in(n, a, "descale_v", 1.0);
  }
  c.qT = c.q, c.kT = c.k;
  if (mx && backward) {
    c.qT.v = in_view(n, a, "Q_T"), c.kT.v = in_view(n, a, "K_T");
    if (!c.qT.v || !c.kT.v) return n.fail(ErrorCode::INVALID_VARIANT_PACK, "reference: Q_T and K_T need data");
    OPENDNN_RETURN_IF_ERROR(bind_block_scale(n, a, "descale_q_T", 2, c.qT));
    OPENDNN_RETURN_IF_ERROR(bind_block_scale(n, a, "descale_k_T", 2, c.kT));
  }
  if (fam::has_scalar(n, a, "attn_scale")) c.scale = fam::scalar_in(n, a, "attn_scale", 1.0);
  else if (n.has("attn_scale_value")) c.scale = n.attr_float("attn_scale_value");
  c.has_left = n.has("left_bound");
  c.has_right = n.has("right_bound");
  c.left = c.has_left ? n.attr_int("left_bound") : 0;
  c.right = c.has_right ? n.attr_int("right_bound") : 0;
  c.bottom_right = n.attr_str("diagonal_alignment") == "BOTTOM_RIGHT";
  c.alibi = n.attr_bool("use_alibi_mask");
  if (c.alibi) c.slopes = alibi_slopes(c.Hq);
  if (n.spec().input_index("bias") >= 0) c.bias = in_view(n, a, "bias");
  if (n.spec().input_index("sink_token") >= 0) c.sink = in_view(n, a, "sink_token");
  if (n.spec().input_index("block_mask") >= 0) c.bmask = in_view(n, a, "block_mask");
  if (c.bmask && c.bmask->rank() != 4) return n.fail(ErrorCode::GRAPH_NOT_SUPPORTED, "reference: block_mask must be 4-D");
  if (c.bias && c.bias->rank() != 4) return n.fail(ErrorCode::GRAPH_NOT_SUPPORTED, "reference: bias must be 4-D");
  // Dropout.
  if (n.spec().input_index("dropout_mask") >= 0) c.dmask = in_view(n, a, "dropout_mask");
  if (c.dmask) {
    c.dscale = fam::scalar_in(n, a, "dropout_scale", 1.0);
  } else {
    c.p = n.attr_float("dropout_probability");
    if (c.p > 0) {
      if (c.p >= 1.0) return n.fail(ErrorCode::GRAPH_NOT_SUPPORTED, "reference: dropout probability must be < 1");
      if (!fam::has_scalar(n, a, "seed")) return n.fail(ErrorCode::INVALID_VARIANT_PACK, "reference: dropout needs a seed");
      c.philox = true;
      c.seed = uint64_t(fam::int_scalar_in(n, a, "seed", 0));
      c.rng_offset = uint64_t(fam::int_scalar_in(n, a, "offset", 0));
    }
  }
  return {};
}

void stats_set(const View* s, const View* ragged, int64_t b, int64_t h, int64_t i, double x) {
  if (!s) return;
  int64_t base = ragged ? int64_t(ragged->get(b)) : b * s->strides[0];
  s->set(base + h * s->strides[1] + i * s->strides[2], x);
}
double stats_get(const View* s, const View* ragged, int64_t b, int64_t h, int64_t i) {
  int64_t base = ragged ? int64_t(ragged->get(b)) : b * s->strides[0];
  return s->get(base + h * s->strides[1] + i * s->strides[2]);
}

// RNG_dump receives the generated keep mask (1 or 0) of (b, h).
void write_rng_dump(const Cfg& c, const View* dump, int64_t b, int64_t h) {
  if (!dump || !c.philox || b >= dump->dims[0] || h >= dump->dims[1]) return;
  for (int64_t i = 0; i < dump->dims[2] && i < c.Sq; ++i)
    for (int64_t j = 0; j < dump->dims[3] && j < c.Skv; ++j)
      dump->set(dump->offset_of(std::array<int64_t, 4>{b, h, i, j}.data()), c.keep(b, h, i, j) ? 1.0 : 0.0);
}

// ---------------------------------------------------------------------------------------------
Status sdpa_forward(const Node& n, const Args& a, bool fp8, bool block_scaled = false) {
  Cfg c;
  OPENDNN_RETURN_IF_ERROR(make_cfg(n, a, c, fp8, false, block_scaled));
  T4 o;
  o.v = out_view(n, a, "O");
  OPENDNN_RETURN_IF_ERROR(ragged_of(n, a, true, "O", o.ragged));
  o.cu = c.cu_q;
  if (fp8 && !block_scaled) o.mul = fam::scalar_in(n, a, "scale_o", 1.0);
  const View* stats = out_view(n, a, "Stats");
  const View* stats_rag = nullptr;
  OPENDNN_RETURN_IF_ERROR(ragged_of(n, a, true, "Stats", stats_rag));
  const View* mx = out_view(n, a, "Max");
  const View* se = out_view(n, a, "Sum_exp");
  const View* dump = out_view(n, a, "RNG_dump");
  ScoreProgram mod;
  OPENDNN_RETURN_IF_ERROR(compile_score_mod(n, a, mod));
  double amax_s = 0, amax_o = 0;

  const bool par = ku::parallel_worth(ku::work_of({c.B, c.Hq, c.Sq, c.Skv, c.D + c.Dv}));
#pragma omp parallel for collapse(2) schedule(static) reduction(max : amax_s, amax_o) if (par)
  for (int64_t b = 0; b < c.B; ++b)
    for (int64_t h = 0; h < c.Hq; ++h) {
      const int64_t sq = c.len_q(b), skv = c.len_kv(b), hv = h / (c.Hq / c.Hv);
      std::vector<double> s(size_t(c.Skv)), acc(size_t(c.Dv)), vals(size_t(mod.slots));
      std::vector<char> vis(size_t(c.Skv));
      for (int64_t i = 0; i < c.Sq; ++i) {
        if (i >= sq) {
          if (!o.packed() && o.v)
            for (int64_t d = 0; d < c.Dv; ++d) o.set(b, h, i, d, 0.0);
          if (!stats_rag) {
            stats_set(stats, nullptr, b, h, i, 0.0);
            stats_set(mx, nullptr, b, h, i, 0.0);
            stats_set(se, nullptr, b, h, i, 0.0);
          }
          continue;
        }
        double m = c.sink ? c.sink_logit(h) : -kInf;
        for (int64_t j = 0; j < c.Skv; ++j) {
          vis[size_t(j)] = c.visible(b, h, i, j, sq, skv);
          if (vis[size_t(j)]) {
            s[size_t(j)] = c.logit(b, h, i, j, sq, skv);
            if (!mod.empty()) {
              const int64_t idx[4] = {b, h, i, j};
              s[size_t(j)] = mod.fwd(s[size_t(j)], vals.data(), idx);
            }
            m = std::max(m, s[size_t(j)]);
          }
        }
        std::fill(acc.begin(), acc.end(), 0.0);
        double sum = 0;
        if (m > -kInf) {
          sum = c.sink ? std::exp(c.sink_logit(h) - m) : 0.0;
          for (int64_t j = 0; j < c.Skv; ++j)
            if (vis[size_t(j)]) sum += std::exp(s[size_t(j)] - m);
          for (int64_t j = 0; j < c.Skv; ++j) {
            if (!vis[size_t(j)]) continue;
            double pz = std::exp(s[size_t(j)] - m) / sum * c.z(b, h, i, j);
            amax_s = std::max(amax_s, std::fabs(pz));
            if (pz != 0)
              for (int64_t d = 0; d < c.Dv; ++d) acc[size_t(d)] += pz * c.v.get(b, hv, j, d);
          }
        }
        if (o.v)
          for (int64_t d = 0; d < c.Dv; ++d) {
            amax_o = std::max(amax_o, std::fabs(acc[size_t(d)]));
            o.set(b, h, i, d, acc[size_t(d)]);
          }
        stats_set(stats, stats_rag, b, h, i, m > -kInf ? m + std::log(sum) : -kInf);
        stats_set(mx, stats_rag, b, h, i, m);
        stats_set(se, stats_rag, b, h, i, sum);
      }
      write_rng_dump(c, dump, b, h);
    }
  if (fp8) {
    if (const View* as = out_view(n, a, "Amax_S")) as->set(0, amax_s);
    if (const View* ao = out_view(n, a, "Amax_O")) ao->set(0, amax_o);
  }
  return {};
}

Status run_sdpa(const Node& n, const Args& a) { return sdpa_forward(n, a, false); }
Status run_sdpa_fp8(const Node& n, const Args& a) { return sdpa_forward(n, a, true); }
Status run_sdpa_mxfp8(const Node& n, const Args& a) { return sdpa_forward(n, a, true, true); }

// ---------------------------------------------------------------------------------------------
struct BwdSizes {
  int64_t B, Hq, Sq, Skv, D, Dv;
  bool dbias;
};
BwdSizes bwd_sizes(const Node& n) {
  BwdSizes s{0, 0, 0, 0, 0, 0, false};
  const TensorPtr& q = n.in("Q");
  const TensorPtr& k = n.in("K");
  const TensorPtr& v = n.in("V");
  if (!q || !k || !v || q->get_dim().size() != 4 || k->get_dim().size() != 4 || v->get_dim().size() != 4) return s;
  s.B = q->get_dim()[0], s.Hq = q->get_dim()[1], s.Sq = q->get_dim()[2], s.D = q->get_dim()[3];
  s.Skv = k->get_dim()[2], s.Dv = v->get_dim()[3];
  int di = n.spec().output_index("dBias");
  s.dbias = di >= 0 && n.outputs()[size_t(di)] != nullptr && n.outputs()[size_t(di)]->volume() > 0;
  return s;
}
int64_t bwd_scratch_doubles(const BwdSizes& s) {
  int64_t r = s.B * s.Hq * s.Skv * (s.D + s.Dv) + s.B * s.Hq;
  if (s.dbias) r += s.B * s.Hq * s.Sq * s.Skv;
  return r;
}
int64_t sdpa_bwd_scratch(const Node& n) { return bwd_scratch_doubles(bwd_sizes(n)) * int64_t(sizeof(double)); }

Status sdpa_backward(const Node& n, const Args& a, bool fp8, bool mx = false) {
  Cfg c;
  OPENDNN_RETURN_IF_ERROR(make_cfg(n, a, c, fp8, true, mx));
  T4 dO;
  dO.v = in_view(n, a, "dO");
  OPENDNN_RETURN_IF_ERROR(ragged_of(n, a, false, "dO", dO.ragged));
  dO.cu = c.cu_q;
  if (mx) OPENDNN_RETURN_IF_ERROR(bind_block_scale(n, a, "descale_dO", 3, dO));
  else if (fp8) dO.mul = fam::scalar_in(n, a, "descale_dO", 1.0);
  T4 dOT = dO;  // dO for dV (MXFP8: the copy quantised along S)
  if (mx) {
    dOT.v = in_view(n, a, "dO_T");
    if (!dOT.v) return n.fail(ErrorCode::INVALID_VARIANT_PACK, "reference: dO_T needs data");
    OPENDNN_RETURN_IF_ERROR(bind_block_scale(n, a, "descale_dO_T", 2, dOT));
  }
  const View* stats = in_view(n, a, "Stats");
  const View* stats_rag = nullptr;
  OPENDNN_RETURN_IF_ERROR(ragged_of(n, a, false, "Stats", stats_rag));
  if (!dO.v || !stats) return n.fail(ErrorCode::INVALID_VARIANT_PACK, "reference: dO and Stats need data");
  T4 dq, dk, dv;
  dq.v = out_view(n, a, "dQ"), dk.v = out_view(n, a, "dK"), dv.v = out_view(n, a, "dV");
  OPENDNN_RETURN_IF_ERROR(ragged_of(n, a, true, "dQ", dq.ragged));
  OPENDNN_RETURN_IF_ERROR(ragged_of(n, a, true, "dK", dk.ragged));
  OPENDNN_RETURN_IF_ERROR(ragged_of(n, a, true, "dV", dv.ragged));
  dq.cu = c.cu_q, dk.cu = c.cu_kv, dv.cu = c.cu_kv;
  if (fp8 && !mx) {
    dq.mul = fam::scalar_in(n, a, "scale_dQ", 1.0);
    dk.mul = fam::scalar_in(n, a, "scale_dK", 1.0);
    dv.mul = fam::scalar_in(n, a, "scale_dV", 1.0);
  }
  const View* dbias = fp8 ? nullptr : out_view(n, a, "dBias");
  const View* dsink = out_view(n, a, "dSink_token");
  const View* dump = out_view(n, a, "RNG_dump");
  BwdSizes sz = bwd_sizes(n);
  if (sz.B != c.B || sz.Skv != c.Skv || sz.Sq != c.Sq) return n.fail(ErrorCode::INVALID_VALUE, "reference: dims changed since plan build");
  if (dbias && !sz.dbias) return n.fail(ErrorCode::INVALID_VALUE, "reference: dBias bound without a dBias tensor");
  double* kc = reinterpret_cast<double*>(a.scratch);  // [B,Hq,Skv,D]
  double* vc = kc + c.B * c.Hq * c.Skv * c.D;          // [B,Hq,Skv,Dv]
  double* sinkc = vc + c.B * c.Hq * c.Skv * c.Dv;      // [B,Hq]
  double* dsb = sinkc + c.B * c.Hq;                    // [B,Hq,Sq,Skv] when dBias is wanted
  double amax_dp = 0, amax_dq = 0, amax_dk = 0, amax_dv = 0;
  ScoreProgram mod;
  OPENDNN_RETURN_IF_ERROR(compile_score_mod(n, a, mod));
  if (!mod.empty() && mod.bwd_in < 0)
    return n.fail(ErrorCode::GRAPH_NOT_SUPPORTED, "reference: a backward with score_mod needs score_mod_bprop");

  const bool par = ku::parallel_worth(ku::work_of({c.B, c.Hq, c.Sq, c.Skv, c.D + c.Dv}));
#pragma omp parallel for collapse(2) schedule(static) reduction(max : amax_dp, amax_dq) if (par)
  for (int64_t b = 0; b < c.B; ++b)
    for (int64_t h = 0; h < c.Hq; ++h) {
      const int64_t sq = c.len_q(b), skv = c.len_kv(b), hk = h / (c.Hq / c.Hk), hv = h / (c.Hq / c.Hv);
      double* kch = kc + (b * c.Hq + h) * c.Skv * c.D;
      double* vch = vc + (b * c.Hq + h) * c.Skv * c.Dv;
      double* dsh = sz.dbias ? dsb + (b * c.Hq + h) * c.Sq * c.Skv : nullptr;
      std::fill(kch, kch + c.Skv * c.D, 0.0);
      std::fill(vch, vch + c.Skv * c.Dv, 0.0);
      if (dsh) std::fill(dsh, dsh + c.Sq * c.Skv, 0.0);
      double sink_acc = 0;
      std::vector<double> P(size_t(c.Skv)), dP(size_t(c.Skv)), Z(size_t(c.Skv)), dqi(size_t(c.D)), S(size_t(c.Skv));
      std::vector<double> vals(size_t(mod.slots));
      std::vector<char> vis(size_t(c.Skv));
      for (int64_t i = 0; i < c.Sq; ++i) {
        if (i >= sq) {
          if (dq.v && !dq.packed())
            for (int64_t d = 0; d < c.D; ++d) dq.set(b, h, i, d, 0.0);
          continue;
        }
        const double lse = stats_get(stats, stats_rag, b, h, i);
        // A row whose every key is masked (by a -inf bias or score, or by the masks) has Stats = -inf and
        // no probability mass: it contributes nothing (exp(-inf - -inf) would be NaN).
        const bool empty_row = lse == -kInf;
        double Di = 0;
        for (int64_t j = 0; j < c.Skv; ++j) {
          vis[size_t(j)] = !empty_row && c.visible(b, h, i, j, sq, skv);
          P[size_t(j)] = dP[size_t(j)] = 0;
          if (!vis[size_t(j)]) continue;
          S[size_t(j)] = c.logit(b, h, i, j, sq, skv);
          double sm = S[size_t(j)];
          if (!mod.empty()) {
            const int64_t idx[4] = {b, h, i, j};
            sm = mod.fwd(sm, vals.data(), idx);
          }
          P[size_t(j)] = sm == -kInf ? 0.0 : std::exp(sm - lse);
          Z[size_t(j)] = c.z(b, h, i, j);
          double t = 0;
          for (int64_t d = 0; d < c.Dv; ++d) t += dO.get(b, h, i, d) * c.v.get(b, hv, j, d);
          dP[size_t(j)] = t * Z[size_t(j)];
          amax_dp = std::max(amax_dp, std::fabs(dP[size_t(j)]));
          Di += P[size_t(j)] * dP[size_t(j)];
        }
        if (c.sink) sink_acc -= std::exp(c.sink_logit(h) - lse) * Di;
        std::fill(dqi.begin(), dqi.end(), 0.0);
        for (int64_t j = 0; j < c.Skv; ++j) {
          if (!vis[size_t(j)]) continue;
          double ds = P[size_t(j)] * (dP[size_t(j)] - Di);
          if (!mod.empty()) {  // through the modifier: dS = score_mod_bprop(dS') at this element
            const int64_t idx[4] = {b, h, i, j};
            (void)mod.fwd(S[size_t(j)], vals.data(), idx);
            ds = mod.bwd(ds, vals.data(), idx);
          }
          if (dsh) dsh[i * c.Skv + j] = ds;
          for (int64_t d = 0; d < c.D; ++d) {
            dqi[size_t(d)] += c.scale * ds * c.kT.get(b, hk, j, d);
            kch[j * c.D + d] += c.scale * ds * c.qT.get(b, h, i, d);
          }
          const double pz = P[size_t(j)] * Z[size_t(j)];
          if (pz != 0)
            for (int64_t d = 0; d < c.Dv; ++d) vch[j * c.Dv + d] += pz * dOT.get(b, h, i, d);
        }
        if (dq.v)
          for (int64_t d = 0; d < c.D; ++d) {
            amax_dq = std::max(amax_dq, std::fabs(dqi[size_t(d)]));
            dq.set(b, h, i, d, dqi[size_t(d)]);
          }
      }
      sinkc[b * c.Hq + h] = sink_acc;
      write_rng_dump(c, dump, b, h);
    }

  // dK and dV: sum each KV head's group of query heads in ascending order.
  for (int which = 0; which < 2; ++which) {
    const T4& out = which == 0 ? dk : dv;
    if (!out.v) continue;
    const int64_t H = which == 0 ? c.Hk : c.Hv, W = which == 0 ? c.D : c.Dv, G = c.Hq / H;
    const double* src = which == 0 ? kc : vc;
    double amax = 0;
#pragma omp parallel for collapse(2) schedule(static) reduction(max : amax) if (ku::parallel_worth(ku::work_of({c.B, c.Hq, c.Skv, W})))
    for (int64_t b = 0; b < c.B; ++b)
      for (int64_t hh = 0; hh < H; ++hh) {
        const int64_t skv = c.len_kv(b);
        for (int64_t j = 0; j < c.Skv; ++j) {
          if (j >= skv && out.packed()) break;
          for (int64_t d = 0; d < W; ++d) {
            double s = 0;
            for (int64_t g = 0; g < G; ++g) s += src[((b * c.Hq + hh * G + g) * c.Skv + j) * W + d];
            amax = std::max(amax, std::fabs(s));
            out.set(b, hh, j, d, s);
          }
        }
      }
    (which == 0 ? amax_dk : amax_dv) = amax;
  }
  if (dbias) {
    std::vector<bool> outer(4);
    for (size_t i = 0; i < 4; ++i) outer[i] = dbias->dims[i] != 1;
    fam::AxisSplit sp({c.B, c.Hq, c.Sq, c.Skv}, outer);
#pragma omp parallel for schedule(static) if (ku::parallel_worth(ku::work_of({sp.n_outer, sp.n_inner})))
    for (int64_t o = 0; o < sp.n_outer; ++o) {
      int64_t idx[4];
      double s = 0;
      for (int64_t in = 0; in < sp.n_inner; ++in) {
        sp.index(o, in, idx);
        s += dsb[((idx[0] * c.Hq + idx[1]) * c.Sq + idx[2]) * c.Skv + idx[3]];
      }
      sp.index(o, 0, idx);
      dbias->set(dbias->broadcast_offset_of(idx), s);
    }
  }
  if (dsink)
    for (int64_t h = 0; h < c.Hq; ++h) {
      double s = 0;
      for (int64_t b = 0; b < c.B; ++b) s += sinkc[b * c.Hq + h];
      dsink->set(dsink->broadcast_offset_of(std::array<int64_t, 4>{0, h, 0, 0}.data()), s);
    }
  if (fp8) {
    if (const View* v = out_view(n, a, "Amax_dQ")) v->set(0, amax_dq);
    if (const View* v = out_view(n, a, "Amax_dK")) v->set(0, amax_dk);
    if (const View* v = out_view(n, a, "Amax_dV")) v->set(0, amax_dv);
    if (const View* v = out_view(n, a, "Amax_dP")) v->set(0, amax_dp);
  }
  return {};
}

Status run_sdpa_bwd(const Node& n, const Args& a) { return sdpa_backward(n, a, false); }
Status run_sdpa_fp8_bwd(const Node& n, const Args& a) { return sdpa_backward(n, a, true); }
Status run_sdpa_mxfp8_bwd(const Node& n, const Args& a) { return sdpa_backward(n, a, true, true); }

}  // namespace

extern const Kernel kernel_SDPA, kernel_SDPA_BACKWARD, kernel_SDPA_FP8, kernel_SDPA_FP8_BACKWARD, kernel_SDPA_MXFP8,
    kernel_SDPA_MXFP8_BACKWARD;
const Kernel kernel_SDPA = {nullptr, nullptr, run_sdpa};
const Kernel kernel_SDPA_BACKWARD = {nullptr, sdpa_bwd_scratch, run_sdpa_bwd};
const Kernel kernel_SDPA_FP8 = {nullptr, nullptr, run_sdpa_fp8};
const Kernel kernel_SDPA_FP8_BACKWARD = {nullptr, sdpa_bwd_scratch, run_sdpa_fp8_bwd};
const Kernel kernel_SDPA_MXFP8 = {nullptr, nullptr, run_sdpa_mxfp8};
const Kernel kernel_SDPA_MXFP8_BACKWARD = {nullptr, sdpa_bwd_scratch, run_sdpa_mxfp8_bwd};

}  // namespace opendnn::ref
