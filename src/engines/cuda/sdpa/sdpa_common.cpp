// SPDX-License-Identifier: Apache-2.0
// describe()/bind() of the cuda SDPA problem (sdpa_common.h): which node configurations the cuda
// kernels can be given, and how their device pointers are found at execute time.
#include "engines/cuda/sdpa/sdpa_common.h"

#include "common/dtype_convert.h"
#include "engines/cuda/cuda_engine.h"
#include "opendnn/graph.h"
#include "opendnn/node.h"

namespace opendnn::cuda::sdpa {
namespace {

const std::string kNo = "not supported: ";

// The optional input `port` of n, or null when the op has no such port or it is unset.
TensorPtr opt_in(const Node& n, const char* port) {
  return n.spec().input_index(port) >= 0 ? n.in(port) : TensorPtr();
}
TensorPtr opt_out(const Node& n, const char* port) {
  return n.spec().output_index(port) >= 0 ? n.out(port) : TensorPtr();
}

// Strides of a rank-4 token tensor into t; "" or why it cannot be read by the kernels.
std::string token(const Graph& g, const TensorPtr& x, const char* name, TokenTensor& t, int64_t& rag_slot) {
  if (!x) return kNo + std::string(name) + " is missing";
  const auto& st = x->get_stride();
  if (st.size() != 4) return kNo + std::string(name) + " must be 4-D";
  if (st[3] != 1) return kNo + std::string(name) + " must have a contiguous head dim (stride 1)";
  for (int i = 0; i < 3; ++i) {
    if (st[size_t(i)] < 0) return kNo + std::string(name) + " has a negative stride";
    // TMA needs 16-byte aligned row strides (2-byte elements).
    if (i > 0 && st[size_t(i)] % 8 != 0) return kNo + std::string(name) + " strides must be multiples of 8 elements";
    t.stride[i] = st[size_t(i)];
  }
  if (const TensorPtr& r = x->get_ragged_offset()) {
    rag_slot = slot_of(g, r);
    if (rag_slot < 0) return kNo + std::string("the ragged offset of ") + name + " must be a device tensor";
    t.ragged.is64 = r->get_data_type() == DataType::INT64;
  }
  return "";
}

std::string index_input(const Graph& g, const Node& n, const char* port, IndexArray& a, int64_t& slot) {
  TensorPtr t = opt_in(n, port);
  if (!t) return "";
  if (t->get_is_pass_by_value()) return kNo + std::string(port) + " must be a device tensor";
  slot = slot_of(g, t);
  if (slot < 0) return kNo + std::string(port) + " has no variant-pack slot";
  a.is64 = t->get_data_type() == DataType::INT64;
  return "";
}

}  // namespace

std::string describe(const Graph& g, const Node& n, Problem& p, Slots& s) {
  p = Problem{};
  s = Slots{};
  const bool bwd = n.kind() == OpKind::SDPA_BACKWARD;
  if (n.kind() != OpKind::SDPA && !bwd) return "not an SDPA node";
  const TensorPtr& q = n.in("Q");
  const TensorPtr& k = n.in("K");
  const TensorPtr& v = n.in("V");
  if (!q || !k || !v) return kNo + std::string("Q, K and V are required");
  const DataType dt = q->get_data_type();
  if (dt != DataType::HALF && dt != DataType::BFLOAT16) return kNo + std::string("Q/K/V must be HALF or BFLOAT16");
  if (k->get_data_type() != dt || v->get_data_type() != dt) return kNo + std::string("Q, K and V must share a type");
  p.fp16 = dt == DataType::HALF;
  const auto& qd = q->get_dim();
  const auto& kd = k->get_dim();
  const auto& vd = v->get_dim();
  if (qd.size() != 4 || kd.size() != 4 || vd.size() != 4) return kNo + std::string("Q, K, V must be 4-D");
  p.b = qd[0], p.hq = qd[1], p.sq = qd[2], p.d_qk = qd[3];
  p.hk = kd[1], p.hv = vd[1], p.skv = kd[2], p.d_v = vd[3];
  if (p.hk < 1 || p.hv < 1 || p.hq % p.hk || p.hq % p.hv) return kNo + std::string("Hq must be a multiple of Hk and Hv");

  // Out of scope for the cuda kernels.
  if (opt_in(n, "page_table_k") || opt_in(n, "page_table_v")) return kNo + std::string("paged K/V");
  if (opt_in(n, "bias")) return kNo + std::string("attention bias");
  if (opt_in(n, "block_mask")) return kNo + std::string("block_mask");
  if (!n.subgraphs().empty()) return kNo + std::string("a score_mod sub-graph");
  if (n.attr_bool("use_alibi_mask")) return kNo + std::string("alibi mask");
  if (n.attr_float("dropout_probability") > 0 || opt_in(n, "dropout_mask") || opt_in(n, "seed"))
    return kNo + std::string("dropout");
  for (const char* port : {"Max", "Sum_exp", "RNG_dump", "dBias"})
    if (TensorPtr t = opt_out(n, port); t && !t->get_is_virtual() && t->volume() > 0)
      return kNo + std::string("output ") + port;

  std::string why;
  if (!(why = token(g, q, "Q", p.q, s.rag_q)).empty()) return why;
  if (!(why = token(g, k, "K", p.k, s.rag_k)).empty()) return why;
  if (!(why = token(g, v, "V", p.v, s.rag_v)).empty()) return why;
  const TensorPtr& o = bwd ? n.in("O") : n.out("O");
  if (!(why = token(g, o, "O", p.o, s.rag_o)).empty()) return why;
  s.q = slot_of(g, q), s.k = slot_of(g, k), s.v = slot_of(g, v), s.o = slot_of(g, o);
  if (s.q < 0 || s.k < 0 || s.v < 0) return kNo + std::string("Q, K and V must be graph inputs");
  if (!bwd && (o->get_is_virtual() || s.o < 0)) return kNo + std::string("O must be a graph output");

  const TensorPtr& stats = bwd ? n.in("Stats") : n.out("Stats");
  if (stats && !stats->get_is_virtual() && stats->volume() > 0) {
    if (stats->get_data_type() != DataType::FLOAT) return kNo + std::string("Stats must be FLOAT");
    const auto& st = stats->get_stride();
    if (st.size() != 4) return kNo + std::string("Stats must be 4-D");
    for (int i = 0; i < 3; ++i) p.lse_stride[i] = st[size_t(i)];
    s.lse = slot_of(g, stats);
    if (const TensorPtr& r = stats->get_ragged_offset()) {
      s.rag_lse = slot_of(g, r);
      p.lse_ragged.is64 = r->get_data_type() == DataType::INT64;
    }
  }
  if (bwd && s.lse < 0) return kNo + std::string("the backward pass needs Stats");

  if (!(why = index_input(g, n, "seq_len_q", p.seq_len_q, s.seq_len_q)).empty()) return why;
  if (!(why = index_input(g, n, "seq_len_kv", p.seq_len_kv, s.seq_len_kv)).empty()) return why;
  if (!(why = index_input(g, n, "cu_seq_len_q", p.cu_q, s.cu_q)).empty()) return why;
  if (!(why = index_input(g, n, "cu_seq_len_kv", p.cu_kv, s.cu_kv)).empty()) return why;
  if (TensorPtr sink = opt_in(n, "sink_token")) {
    if (sink->get_data_type() != DataType::FLOAT || sink->volume() != p.hq)
      return kNo + std::string("sink_token must be FLOAT with one value per query head");
    s.sink = slot_of(g, sink);
    if (s.sink < 0 || sink->get_is_pass_by_value()) return kNo + std::string("sink_token must be a device tensor");
  }

  if (TensorPtr sc = opt_in(n, "attn_scale")) {
    if (sc->get_is_pass_by_value()) {
      s.scale_host = slot_of(g, sc);
      s.scale_host_type = int(sc->get_data_type());
      p.scale = float(sc->get_value().as_double());
    } else {
      if (sc->get_data_type() != DataType::FLOAT) return kNo + std::string("a device attn_scale tensor must be FLOAT");
      s.scale_device = slot_of(g, sc);
    }
  } else if (n.has("attn_scale_value")) {
    p.scale = float(n.attr_float("attn_scale_value"));
  }
  p.bottom_right = n.attr_str("diagonal_alignment") == "BOTTOM_RIGHT";
  p.has_left = n.has("left_bound");
  p.has_right = n.has("right_bound");
  p.left = p.has_left ? n.attr_int("left_bound") : 0;
  p.right = p.has_right ? n.attr_int("right_bound") : 0;
  return "";
}

void bind(Problem& p, const Slots& s, void* const* slots) {
  auto at = [&](int64_t i) -> void* { return i >= 0 ? slots[i] : nullptr; };
  p.q.ptr = at(s.q), p.k.ptr = at(s.k), p.v.ptr = at(s.v), p.o.ptr = at(s.o);
  p.q.ragged.ptr = at(s.rag_q), p.k.ragged.ptr = at(s.rag_k), p.v.ragged.ptr = at(s.rag_v);
  p.o.ragged.ptr = at(s.rag_o);
  p.lse = static_cast<float*>(at(s.lse));
  p.lse_ragged.ptr = at(s.rag_lse);
  p.seq_len_q.ptr = at(s.seq_len_q), p.seq_len_kv.ptr = at(s.seq_len_kv);
  p.cu_q.ptr = at(s.cu_q), p.cu_kv.ptr = at(s.cu_kv);
  p.sink = static_cast<const float*>(at(s.sink));
  if (s.scale_host >= 0) p.scale = float(load_element(DataType(s.scale_host_type), slots[s.scale_host], 0));
  p.scale_ptr = static_cast<const float*>(at(s.scale_device));
}

cost::AttentionShape attention_shape(const Problem& p, bool backward) {
  return {p.b, p.hq, p.sq, p.skv, p.has_right && p.right == 0, p.bottom_right, backward};
}

}  // namespace opendnn::cuda::sdpa
