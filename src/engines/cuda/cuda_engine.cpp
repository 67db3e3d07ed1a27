// SPDX-License-Identifier: Apache-2.0
#include "engines/cuda/cuda_engine.h"

#include <cuda_runtime.h>

#include <iterator>
#include <span>
#include <string>

namespace opendnn::cuda {

int64_t slot_of(const Graph& graph, const TensorPtr& t) { return t ? graph.variant_slot_of(t->get_uid()) : -1; }

namespace {

// Autotune timing on the plan's stream with CUDA events.
class EventTimer : public Timer {
 public:
  EventTimer() {
    cudaEventCreate(&start_);
    cudaEventCreate(&stop_);
  }
  ~EventTimer() override {
    cudaEventDestroy(start_);
    cudaEventDestroy(stop_);
  }
  void start(void* stream) override { cudaEventRecord(start_, static_cast<cudaStream_t>(stream)); }
  double stop_us(void* stream) override {
    cudaEventRecord(stop_, static_cast<cudaStream_t>(stream));
    cudaEventSynchronize(stop_);
    float ms = 0.f;
    cudaEventElapsedTime(&ms, start_, stop_);
    return double(ms) * 1000.0;
  }

 private:
  cudaEvent_t start_{}, stop_{};
};

// A plan of this engine recorded into a user's CUDA graph: its launches captured from a private stream
// into a child graph, added as one node. update_cuda_graph replaces that node with a fresh recording.
class CapturablePlan final : public Plan {
 public:
  explicit CapturablePlan(std::unique_ptr<Plan> inner) : inner_(std::move(inner)) {}
  Status execute(void* const* slots, void* workspace, void* stream) override {
    return inner_->execute(slots, workspace, stream);
  }
  int64_t workspace_size() const override { return inner_->workspace_size(); }
  Status serialize_payload(std::string& out) const override { return inner_->serialize_payload(out); }

  Status populate_cuda_graph(void* const* slots, void* workspace, void* cuda_graph, bool update) override {
    auto graph = static_cast<cudaGraph_t>(cuda_graph);
    cudaGraphNode_t old = nullptr;
    if (update) {
      size_t n = 0;
      cudaGraphNodeType type{};
      if (cudaGraphGetNodes(graph, nullptr, &n) != cudaSuccess || n != 1 ||
          cudaGraphGetNodes(graph, &old, &n) != cudaSuccess || cudaGraphNodeGetType(old, &type) != cudaSuccess ||
          type != cudaGraphNodeTypeGraph) {
        cudaGetLastError();
        return {ErrorCode::INVALID_VALUE, "update_cuda_graph: the CUDA graph must be the one populate_cuda_graph filled "
                                          "(one child-graph node)"};
      }
    }
    cudaStream_t s = nullptr;
    if (cudaError_t e = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking); e != cudaSuccess)
      return {ErrorCode::CUDA_API_FAILED, std::string("cudaStreamCreate: ") + cudaGetErrorString(e)};
    cudaGraph_t child = nullptr;
    cudaError_t e = cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal);
    Status st = e == cudaSuccess ? inner_->execute(slots, workspace, s) : Status{};
    if (e == cudaSuccess) e = cudaStreamEndCapture(s, &child);
    cudaStreamDestroy(s);
    if (st.is_good() && e == cudaSuccess && old) e = cudaGraphDestroyNode(old);
    cudaGraphNode_t node = nullptr;
    if (st.is_good() && e == cudaSuccess) e = cudaGraphAddChildGraphNode(&node, graph, nullptr, 0, child);
    if (child) cudaGraphDestroy(child);
    if (st.is_bad()) return st;
    if (e != cudaSuccess) {
      cudaGetLastError();
      return {ErrorCode::CUDA_API_FAILED, std::string("recording the plan into a CUDA graph: ") + cudaGetErrorString(e)};
    }
    return {};
  }

 private:
  std::unique_ptr<Plan> inner_;
};

// The families this build has (CMake's OPENDNN_CUDA_FAMILIES), then a null that only keeps the array
// non-empty in a build of none: families() leaves it out.
const Family* const kFamilies[] = {
#if OPENDNN_CUDA_NORM
    &norm_family(),
#endif
#if OPENDNN_CUDA_GEMM
    &gemm_family(),
#endif
#if OPENDNN_CUDA_SDPA
    &sdpa_family(), &sdpa_bwd_family(),
#endif
#if OPENDNN_CUDA_GDN
    &gdn_family(),
#endif
#if OPENDNN_CUDA_POINTWISE
    &pointwise_family(),
#endif
    nullptr};
std::span<const Family* const> families() { return {kFamilies, std::size(kFamilies) - 1}; }

class CudaEngine : public Engine {
 public:
  std::string_view name() const override { return "cuda"; }
  int64_t engine_id() const override { return kCudaEngineId; }
  bool serves(const Target& t) const override { return t.kind == DeviceKind::CUDA && t.sm_version >= 90; }

  bool probe_device(Target& out) const override {
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
      cudaGetLastError();  // clear the sticky "no device" error
      return false;
    }
    int dev = 0;
    cudaDeviceProp p{};
    if (cudaGetDevice(&dev) != cudaSuccess || cudaGetDeviceProperties(&p, dev) != cudaSuccess) return false;
    out.kind = DeviceKind::CUDA;
    out.device = dev;
    out.sm_version = p.major * 10 + p.minor;
    out.sm_count = p.multiProcessorCount;
    return true;
  }

  std::unique_ptr<Timer> make_timer(const Target&) const override { return std::make_unique<EventTimer>(); }

  Proposal propose_plans(const Graph& graph, const Target& target) override {
    Proposal p;
    if (!serves(target)) {
      p.declines.push_back("needs a CUDA device with sm_90 or newer");
      return p;
    }
    std::vector<std::string> reasons;
    for (const Family* f : families()) {
      Proposal fp;
      f->propose(graph, target, fp);
      for (auto& c : fp.plans) p.plans.push_back(std::move(c));
      for (auto& d : fp.declines) reasons.push_back(std::string(f->name) + ": " + d);
    }
    if (families().empty()) reasons.push_back("this build has no kernel families (CMake's OPENDNN_CUDA_FAMILIES)");
    if (p.plans.empty()) p.declines = std::move(reasons);
    return p;
  }

  Status build_plan(const Graph& graph, const Target& target, const PlanCandidate& c,
                    std::unique_ptr<Plan>& out) override {
    const Family* owner = nullptr;
    for (const Family* f : families())
      if (c.local_index >= f->index_base && (!owner || f->index_base > owner->index_base)) owner = f;
    if (!owner) return {ErrorCode::GRAPH_EXECUTION_PLAN_CREATION_FAILED, "cuda: unknown plan " + c.name};
    std::unique_ptr<Plan> inner;
    OPENDNN_RETURN_IF_ERROR(owner->build(graph, target, c, inner));
    if (!inner) return {ErrorCode::GRAPH_EXECUTION_PLAN_CREATION_FAILED, "cuda: the family built no plan"};
    out = std::make_unique<CapturablePlan>(std::move(inner));
    return {};
  }

  // Its kernels are compiled for sm_90a into this library: a plan travels between builds with the same
  // families and version only.
  std::string build_id() const override {
    std::string id = Engine::build_id() + " cuda engine sm_90a";
    for (const Family* f : families()) id += std::string(" ") + f->name;
    return id;
  }

  bool probe_device_ordinal(int device, Target& out) const override {
    cudaDeviceProp p{};
    if (cudaGetDeviceProperties(&p, device) != cudaSuccess) {
      cudaGetLastError();
      return false;
    }
    out = Target{DeviceKind::CUDA, device, p.major * 10 + p.minor, p.multiProcessorCount};
    return true;
  }
};

}  // namespace

std::shared_ptr<Engine> make_cuda_engine() { return std::make_shared<CudaEngine>(); }

}  // namespace opendnn::cuda
