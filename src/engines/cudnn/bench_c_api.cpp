// SPDX-License-Identifier: Apache-2.0
// A tiny C ABI over the cudnn engine for bench/cudnn_engine.py (ctypes), so the benchmark times our
// plans and torch in the same process before the Python package exists. Each builder makes a graph
// with fixed uids, so the variant slots (ascending uid) are in the order documented per function.
// Returns an opaque plan (null on failure, with the reason in err).
#include <cstring>
#include <memory>

#include "engines/cudnn/cudnn_engine.h"
#include "opendnn/graph.h"

namespace opendnn {
namespace {

struct CPlan {
  Graph g;
  std::unique_ptr<Plan> plan;
  std::string name;
};

TensorPtr in(Graph& g, int64_t uid, std::vector<int64_t> dims, std::vector<int64_t> strides, DataType dt) {
  TensorAttr a;
  std::string name = "t";
  name += std::to_string(uid);
  a.set_uid(uid).set_name(name).set_dim(std::move(dims)).set_stride(std::move(strides)).set_data_type(dt);
  return g.tensor(a);
}
void out(const TensorPtr& t, int64_t uid, std::vector<int64_t> dims, std::vector<int64_t> strides, DataType dt) {
  t->set_uid(uid).set_output(true).set_data_type(dt).set_dim(std::move(dims)).set_stride(std::move(strides));
}

void* finish(std::unique_ptr<CPlan> p, int64_t* ws, char* err, int errlen) {
  auto fail = [&](const std::string& m) -> void* {
    if (err && errlen > 0) {
      std::strncpy(err, m.c_str(), size_t(errlen) - 1);
      err[errlen - 1] = 0;
    }
    return nullptr;
  };
  Status s = p->g.validate();
  if (s.is_bad()) {
    Status u = p->g.assign_uids();
    if (u.is_bad()) return fail(u.to_string());
  }
  Target t;
  t.kind = DeviceKind::CUDA;
  t.device = -1;
  auto eng = make_cudnn_engine();
  Proposal pr = eng->propose_plans(p->g, t);
  if (pr.plans.empty()) {
    std::string m;
    for (auto& d : pr.declines) m += d + "; ";
    return fail(m);
  }
  s = eng->build_plan(p->g, t, pr.plans[0], p->plan);
  if (s.is_bad()) return fail(s.to_string());
  p->name = pr.plans[0].name;
  *ws = p->plan->workspace_size();
  return p.release();
}

// [B,H,S,D] logical, stored BSHD: strides {S*H*D, D, H*D, 1}.
std::vector<int64_t> bshd(int64_t B, int64_t H, int64_t S, int64_t D) {
  (void)B;
  return {S * H * D, D, H * D, 1};
}

}  // namespace
}  // namespace opendnn

using namespace opendnn;

extern "C" {

// Forward slots: Q K V O Stats. Backward slots: Q K V O dO Stats dQ dK dV. bf16, BSHD storage.
__attribute__((visibility("default"))) void* opendnn_cudnn_sdpa_plan(int backward, int64_t B, int64_t H, int64_t S,
                                                                     int64_t D, int causal, double scale, int64_t* ws,
                                                                     char* err, int errlen) {
  auto p = std::make_unique<CPlan>();
  Graph& g = p->g;
  g.set_io_data_type(DataType::BFLOAT16).set_intermediate_data_type(DataType::FLOAT).set_compute_data_type(DataType::FLOAT);
  std::vector<int64_t> d = {B, H, S, D}, st = bshd(B, H, S, D), sd = {B, H, S, 1}, sst = {H * S, S, 1, 1};
  auto Q = in(g, 1, d, st, DataType::BFLOAT16), K = in(g, 2, d, st, DataType::BFLOAT16), V = in(g, 3, d, st, DataType::BFLOAT16);
  NodeAttrs at;
  at.set("attn_scale_value", scale).set("implementation", "COMPOSITE");
  if (causal) at.set("right_bound", int64_t(0));
  if (!backward) {
    at.set("generate_stats", true);
    auto o = g.sdpa(Q, K, V, at);
    out(o[0], 4, d, st, DataType::BFLOAT16);
    out(o[1], 5, sd, sst, DataType::FLOAT);
  } else {
    auto O = in(g, 4, d, st, DataType::BFLOAT16), dO = in(g, 5, d, st, DataType::BFLOAT16);
    auto Stt = in(g, 6, sd, sst, DataType::FLOAT);
    auto o = g.sdpa_backward(Q, K, V, O, dO, Stt, at);
    out(o[0], 7, d, st, DataType::BFLOAT16);
    out(o[1], 8, d, st, DataType::BFLOAT16);
    out(o[2], 9, d, st, DataType::BFLOAT16);
  }
  return finish(std::move(p), ws, err, errlen);
}

// Slots: A [1,M,K] B [1,K,N] C [1,M,N], bf16 row-major (B given as row-major K x N).
__attribute__((visibility("default"))) void* opendnn_cudnn_matmul_plan(int64_t M, int64_t N, int64_t K, int64_t* ws,
                                                                       char* err, int errlen) {
  auto p = std::make_unique<CPlan>();
  Graph& g = p->g;
  g.set_io_data_type(DataType::BFLOAT16).set_intermediate_data_type(DataType::FLOAT).set_compute_data_type(DataType::FLOAT);
  auto A = in(g, 1, {1, M, K}, {M * K, K, 1}, DataType::BFLOAT16);
  auto Bm = in(g, 2, {1, K, N}, {K * N, N, 1}, DataType::BFLOAT16);
  auto C = g.matmul(A, Bm);
  out(C, 3, {1, M, N}, {M * N, N, 1}, DataType::BFLOAT16);
  return finish(std::move(p), ws, err, errlen);
}

// Slots: X W Y; NCHW logical, NHWC storage (torch channels_last), bf16, square filter R, pad, stride.
__attribute__((visibility("default"))) void* opendnn_cudnn_conv_plan(int64_t N, int64_t C, int64_t H, int64_t W, int64_t K,
                                                                     int64_t R, int64_t pad, int64_t stride, int64_t* ws,
                                                                     char* err, int errlen) {
  auto p = std::make_unique<CPlan>();
  Graph& g = p->g;
  g.set_io_data_type(DataType::BFLOAT16).set_intermediate_data_type(DataType::FLOAT).set_compute_data_type(DataType::FLOAT);
  int64_t P = (H + 2 * pad - R) / stride + 1, Q = (W + 2 * pad - R) / stride + 1;
  auto X = in(g, 1, {N, C, H, W}, {H * W * C, 1, W * C, C}, DataType::BFLOAT16);
  auto Wt = in(g, 2, {K, C, R, R}, {C * R * R, 1, R * C, C}, DataType::BFLOAT16);
  auto Y = g.conv_fprop(X, Wt, NodeAttrs().set("pre_padding", std::vector<int64_t>{pad, pad})
                                   .set("post_padding", std::vector<int64_t>{pad, pad})
                                   .set("stride", std::vector<int64_t>{stride, stride})
                                   .set("dilation", std::vector<int64_t>{1, 1}));
  out(Y, 3, {N, K, P, Q}, {P * Q * K, 1, Q * K, K}, DataType::BFLOAT16);
  return finish(std::move(p), ws, err, errlen);
}

__attribute__((visibility("default"))) const char* opendnn_cudnn_plan_name(void* plan) {
  return static_cast<CPlan*>(plan)->name.c_str();
}

__attribute__((visibility("default"))) int opendnn_cudnn_execute(void* plan, void* const* slots, void* ws, void* stream,
                                                                 char* err, int errlen) {
  Status s = static_cast<CPlan*>(plan)->plan->execute(slots, ws, stream);
  if (s.is_bad() && err && errlen > 0) {
    std::strncpy(err, s.to_string().c_str(), size_t(errlen) - 1);
    err[errlen - 1] = 0;
  }
  return s.is_good() ? 0 : 1;
}

__attribute__((visibility("default"))) void opendnn_cudnn_destroy(void* plan) { delete static_cast<CPlan*>(plan); }

__attribute__((visibility("default"))) const char* opendnn_cudnn_describe() {
  static std::string s = cudnn::describe_loaded();
  return s.c_str();
}

}  // extern "C"
