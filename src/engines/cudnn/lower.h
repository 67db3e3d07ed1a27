// SPDX-License-Identifier: Apache-2.0
// Lowering an opendnn graph to a cuDNN backend operation graph.
//
// Every opendnn tensor becomes a backend tensor with the same uid (virtual stays virtual). Tensors of
// rank < R (R = max(3, the graph's largest rank)) get leading 1 dims so every op sees equal ranks.
// Extra backend tensors the lowering invents get fresh uids above the graph's largest:
//   (no aliases: cuDNN 9.19 failed plans whose variant pack held the same buffer under two uids with
//   BAD_PARAM_NULL_POINTER at execute; Kᵀ/Vᵀ are tensor_view()s under the user's own uid);
//   - by-value scalars (attention scale, -inf, index shifts): host memory owned by the LoweredGraph;
//   - workspace tensors (SDPA backward softmax_sum and dQ accumulator): carved from the workspace
//     after cuDNN's own part, zeroed with cudaMemsetAsync before execution when needed.
#pragma once

#include <deque>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "engines/cudnn/backend.h"
#include "opendnn/graph.h"
#include "plan/attention_cost.h"

namespace opendnn::cudnn {

enum class SdpaImpl : uint8_t { COMPOSITE, UNIFIED };

struct LoweredGraph {
  std::vector<DescPtr> keep;  // every descriptor the op graph references
  DescPtr op_graph;
  std::string signature;
  SdpaImpl sdpa_impl = SdpaImpl::COMPOSITE;
  bool has_sdpa = false;

  // Variant pack layout: [user tensors] [workspace tensors] [host values]. The user tensors are those the
  // lowering described that the caller points to (non-virtual; by-value only when run-time); the plan maps
  // each to its slot with Graph::variant_slot_of once the router has laid the slots out.
  std::vector<int64_t> slot_uids;
  struct WsTensor { int64_t uid; int64_t offset; int64_t bytes; bool zero; };
  std::vector<WsTensor> ws_tensors;  // offsets relative to the end of cuDNN's workspace (256-aligned)
  int64_t ws_bytes = 0;
  // A slice of a graph input, described as its own backend tensor (a fresh uid) whose pointer is the
  // input's pointer plus byte_offset at execute: cuDNN has no slice operation.
  struct OffsetView { int64_t uid; int64_t source_uid; int64_t byte_offset; };
  std::vector<OffsetView> offset_views;
  struct HostValue { int64_t uid; alignas(16) unsigned char bytes[16]; };
  std::deque<HostValue> host_values;  // stable addresses

  double flops = 0;  // for the cost estimate
  double bytes = 0;
  // Set for a graph whose one SDPA node is plain attention (no bias, dropout, padding, ragged layout,
  // left bound or alibi; causal or not; d_qk == d_v): the shape of the tile model in plan/attention_cost.h.
  bool plain_attention = false;
  // Set for a graph that is one MATMUL node and nothing else (no fused prologue/epilogue).
  bool plain_matmul = false;
  // Set for a graph that is one RMS or layer norm node, forward or backward: which, and the bytes of its X
  // (the measured norm model in cudnn_engine.cpp counts X's bytes twice forward, three times backward).
  bool lone_norm = false, norm_layer = false, norm_backward = false;
  double norm_x_bytes = 0;
  int sdpa_nodes = 0;
  cost::AttentionShape attention;
  int64_t attention_head_dim = 0;
};

// Lowers the graph; on failure returns false and appends the reasons (naming node and tensor).
bool lower_graph(const Graph& g, cudnnHandle_t handle, SdpaImpl impl, size_t cudnn_version,
                 std::vector<std::string>& declines, std::shared_ptr<LoweredGraph>& out);

// ---- internals shared by the lower_*.cpp files
struct LowerCtx {
  Builder b;
  const Graph& g;
  LoweredGraph& out;
  size_t version = 0;
  int rank = 3;
  int64_t next_uid = 1;
  std::unordered_map<const TensorAttr*, DescPtr> tensors;
  std::vector<DescPtr> ops;

  LowerCtx(const Graph& graph, LoweredGraph& o) : g(graph), out(o) {}
  std::vector<int64_t> padded_dims(const TensorAttr& t) const;
  std::vector<int64_t> padded_strides(const TensorAttr& t) const;
  // The backend tensor of an opendnn tensor (created once).
  DescPtr tensor(const TensorPtr& t);
  // A descriptor of user tensor t (its uid, type and ragged offset) with the given dims/strides.
  DescPtr user_tensor(const TensorPtr& t, const std::vector<int64_t>& dims, const std::vector<int64_t>& strides);
  // Records a finalized operation (null if building it failed) in the graph and keeps it alive.
  void add_op(const DescPtr& op) {
    if (!op) return;
    out.keep.push_back(op);
    ops.push_back(op);
  }
  // A new backend tensor. uid < 0 takes a fresh uid; `ragged` (optional) is its ragged-offset tensor.
  DescPtr make_tensor(const std::vector<int64_t>& dims, const std::vector<int64_t>& strides, DataType dt, bool is_virtual,
                      int64_t uid = -1, bool by_value = false, const DescPtr& ragged = nullptr);
  DescPtr virt(const std::vector<int64_t>& dims, DataType dt = DataType::FLOAT);
  DescPtr scalar_f32(float v);
  DescPtr scalar_i32(int32_t v);
  // The backend tensor of a user tensor, described with other dims/strides under its own uid (Kᵀ, Vᵀ of
  // attention: cuDNN's fused attention patterns expect K and V only in their transposed form). Fails
  // (a decline) if the tensor already has a descriptor.
  DescPtr tensor_view(const TensorPtr& t, const std::vector<int64_t>& dims, const std::vector<int64_t>& strides);
  DescPtr ws_tensor(const std::vector<int64_t>& dims, DataType dt, bool zero);
  // Ops
  DescPtr pointwise(cudnnPointwiseMode_t mode, const DescPtr& x, const DescPtr& b, const DescPtr& y,
                    const DescPtr& t = nullptr, DataType prec = DataType::FLOAT, int64_t axis = -1);
  // Per-batch GEMM extents read from [B,1,1,1] INT32 tensors (null: the static extent); cuDNN's fused
  // attention engines take the actual sequence lengths of a padded/ragged batch from these.
  struct GemmOverride { DescPtr m, n, k; };
  DescPtr matmul(const DescPtr& a, const DescPtr& bm, const DescPtr& c, DataType prec = DataType::FLOAT,
                 const GemmOverride& ovr = {});
  DescPtr reduction(cudnnReduceTensorOp_t op, const DescPtr& x, const DescPtr& y, DataType prec = DataType::FLOAT,
                    bool deterministic = false);
  DescPtr reshape(const DescPtr& x, const DescPtr& y);
  DataType compute_type(const Node& n) const;
};

bool lower_generic_node(LowerCtx& c, const Node& n, std::string& why);
bool lower_sdpa_node(LowerCtx& c, const Node& n, SdpaImpl impl, std::string& why);
bool lower_sdpa_backward_node(LowerCtx& c, const Node& n, SdpaImpl impl, std::string& why);
bool lower_sdpa_fp8_node(LowerCtx& c, const Node& n, SdpaImpl impl, std::string& why);
bool lower_sdpa_mxfp8_node(LowerCtx& c, const Node& n, std::string& why);

}  // namespace opendnn::cudnn
