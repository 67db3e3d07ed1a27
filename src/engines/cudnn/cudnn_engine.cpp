// SPDX-License-Identifier: Apache-2.0
// The cudnn engine: heuristics -> candidates, execution plans, handles and the execute hot path.
#include "engines/cudnn/cudnn_engine.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <unordered_map>

#include "engines/cudnn/knob_search.h"
#include "engines/cudnn/lower.h"

namespace opendnn {
namespace cudnn {
namespace {

std::atomic<int> g_vp_mode{0};  // 0 unknown, 1 set, 2 fresh

// Makes `device` current for the scope (restores the previous one).
class DeviceGuard {
 public:
  explicit DeviceGuard(int device) {
    const auto& a = api();
    if (device < 0 || !a.cudaGetDevice) return;
    if (a.cudaGetDevice(&prev_) == cudaSuccess && prev_ != device && a.cudaSetDevice(device) == cudaSuccess) switched_ = true;
  }
  ~DeviceGuard() {
    if (switched_) api().cudaSetDevice(prev_);
  }

 private:
  int prev_ = -1;
  bool switched_ = false;
};

// One cudnnHandle per (thread, device), created on first use and kept for the thread's life (never
// destroyed: plans may run until exit and static destruction order is unknown). A handle is used by
// one thread only, as cuDNN requires; the stream is re-set on it only when it changes. cudnnSetStream
// allocates nothing, so a plan warmed up once on a thread can run under CUDA-graph capture on any
// stream (creating a handle would cudaMalloc, which a capture forbids).
Status thread_handle(int device, void* stream, cudnnHandle_t& out) {
  struct Bound {
    cudnnHandle_t handle = nullptr;
    void* stream = nullptr;
  };
  thread_local std::vector<Bound> bound;  // indexed by device
  if (device < 0) return {ErrorCode::INVALID_VALUE, "cudnn: device " + std::to_string(device)};
  if (size_t(device) >= bound.size()) bound.resize(size_t(device) + 1);
  Bound& b = bound[size_t(device)];
  if (!b.handle) {
    DeviceGuard guard(device);
    cudnnStatus_t s = api().Create(&b.handle);
    if (s != CUDNN_STATUS_SUCCESS) {
      b.handle = nullptr;
      return {ErrorCode::HANDLE_ERROR, "cudnnCreate: " + api().status_string(s)};
    }
  }
  if (stream != b.stream) {
    cudnnStatus_t s = api().SetStream(b.handle, static_cast<cudaStream_t>(stream));
    if (s != CUDNN_STATUS_SUCCESS) return {ErrorCode::HANDLE_ERROR, "cudnnSetStream: " + api().status_string(s)};
    b.stream = stream;
  }
  out = b.handle;
  return {};
}

int current_device(const Target& t) {
  if (t.device >= 0) return t.device;
  int d = 0;
  if (api().cudaGetDevice) api().cudaGetDevice(&d);
  return d;
}

using knobs::EngineCfg;

std::string describe_version() {
  const size_t v = api().version;
  return "cuDNN " + std::to_string(v / 10000) + "." + std::to_string((v % 10000) / 100) + "." + std::to_string(v % 100);
}

// What cuDNN says of an engine (CUDNN_ATTR_ENGINE_NUMERICAL_NOTE / BEHAVIOR_NOTE).
struct Notes {
  std::vector<NumericalNote> numerical;
  std::vector<BehaviorNote> behavior;
  bool nondeterministic() const {
    return std::find(numerical.begin(), numerical.end(), NumericalNote::NONDETERMINISTIC) != numerical.end();
  }
};

void read_notes(const DescPtr& eng, Notes& out) {
  out = {};
  cudnnBackendNumericalNote_t nn[CUDNN_NUMERICAL_NOTE_TYPE_COUNT];
  cudnnBackendBehaviorNote_t bn[CUDNN_BEHAVIOR_NOTE_TYPE_COUNT];
  int64_t n = 0;
  if (get_attr(eng, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE, CUDNN_NUMERICAL_NOTE_TYPE_COUNT, &n, nn))
    for (int64_t i = 0; i < n && i < CUDNN_NUMERICAL_NOTE_TYPE_COUNT; ++i)
      if (!to_string(NumericalNote(nn[i])).empty()) out.numerical.push_back(NumericalNote(nn[i]));
  n = 0;
  if (get_attr(eng, CUDNN_ATTR_ENGINE_BEHAVIOR_NOTE, CUDNN_TYPE_BEHAVIOR_NOTE, CUDNN_BEHAVIOR_NOTE_TYPE_COUNT, &n, bn))
    for (int64_t i = 0; i < n && i < CUDNN_BEHAVIOR_NOTE_TYPE_COUNT; ++i)
      if (!to_string(BehaviorNote(bn[i])).empty()) out.behavior.push_back(BehaviorNote(bn[i]));
}

// Reads the engine id, notes and knob choices of an engine config.
bool read_cfg(Builder& b, const DescPtr& cfg, EngineCfg& k, Notes& notes) {
  DescPtr eng = b.make(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
  if (!eng) return false;
  cudnnBackendDescriptor_t raw = eng->get();
  int64_t n = 0;
  if (!get_attr(cfg, CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &n, &raw)) return false;
  if (!get_attr(eng, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &n, &k.engine)) return false;
  read_notes(eng, notes);
  std::vector<DescPtr> kc;
  std::vector<cudnnBackendDescriptor_t> raws;
  for (int i = 0; i < CUDNN_KNOB_TYPE_COUNTS; ++i) {
    DescPtr d = b.make(CUDNN_BACKEND_KNOB_CHOICE_DESCRIPTOR);
    if (!d) return false;
    kc.push_back(d);
    raws.push_back(d->get());
  }
  int64_t count = 0;
  if (!get_attr(cfg, CUDNN_ATTR_ENGINECFG_KNOB_CHOICES, CUDNN_TYPE_BACKEND_DESCRIPTOR, int64_t(raws.size()), &count, raws.data()))
    return true;  // no knobs
  for (int64_t i = 0; i < count && i < int64_t(kc.size()); ++i) {
    cudnnBackendKnobType_t type;
    int64_t value = 0, m = 0;
    if (get_attr(kc[size_t(i)], CUDNN_ATTR_KNOB_CHOICE_KNOB_TYPE, CUDNN_TYPE_KNOB_TYPE, 1, &m, &type) &&
        get_attr(kc[size_t(i)], CUDNN_ATTR_KNOB_CHOICE_KNOB_VALUE, CUDNN_TYPE_INT64, 1, &m, &value))
      k.choices.push_back({int64_t(type), value});
  }
  std::sort(k.choices.begin(), k.choices.end());
  return true;
}

// An engine config from an engine id and knob choices.
DescPtr make_cfg(Builder& b, const LoweredGraph& lg, const EngineCfg& k, std::vector<DescPtr>& keep) {
  DescPtr eng = b.make(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
  b.set_desc(eng, CUDNN_ATTR_ENGINE_OPERATION_GRAPH, lg.op_graph);
  b.set_i64(eng, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, k.engine);
  b.finalize(eng, "engine " + std::to_string(k.engine));
  std::vector<DescPtr> choices;
  for (auto [type, value] : k.choices) {
    DescPtr kc = b.make(CUDNN_BACKEND_KNOB_CHOICE_DESCRIPTOR);
    cudnnBackendKnobType_t t = cudnnBackendKnobType_t(type);
    b.set(kc, CUDNN_ATTR_KNOB_CHOICE_KNOB_TYPE, CUDNN_TYPE_KNOB_TYPE, 1, &t);
    b.set_i64(kc, CUDNN_ATTR_KNOB_CHOICE_KNOB_VALUE, value);
    b.finalize(kc, "knob choice");
    choices.push_back(kc);
  }
  DescPtr cfg = b.make(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
  b.set_desc(cfg, CUDNN_ATTR_ENGINECFG_ENGINE, eng);
  if (!choices.empty()) b.set_descs(cfg, CUDNN_ATTR_ENGINECFG_KNOB_CHOICES, choices);
  b.finalize(cfg, "engine config");
  keep.push_back(eng);
  for (auto& c : choices) keep.push_back(c);
  return b.ok() ? cfg : nullptr;
}

// The performance knobs engine `engine` exposes for this graph (its CUDNN_ATTR_ENGINE_KNOB_INFO);
// none when cuDNN will not say.
std::vector<knobs::KnobRange> engine_knob_ranges(const LoweredGraph& lg, int64_t engine) {
  std::vector<knobs::KnobRange> out;
  Builder b;
  DescPtr eng = b.make(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
  b.set_desc(eng, CUDNN_ATTR_ENGINE_OPERATION_GRAPH, lg.op_graph);
  b.set_i64(eng, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, engine);
  b.finalize(eng, "engine " + std::to_string(engine));
  std::vector<DescPtr> infos;
  std::vector<cudnnBackendDescriptor_t> raws;
  for (int i = 0; i < CUDNN_KNOB_TYPE_COUNTS && b.ok(); ++i) {
    DescPtr d = b.make(CUDNN_BACKEND_KNOB_INFO_DESCRIPTOR);
    if (!d) break;
    infos.push_back(d);
    raws.push_back(d->get());
  }
  int64_t count = 0;
  if (!b.ok() ||
      !get_attr(eng, CUDNN_ATTR_ENGINE_KNOB_INFO, CUDNN_TYPE_BACKEND_DESCRIPTOR, int64_t(raws.size()), &count, raws.data()))
    return out;
  for (int64_t i = 0; i < count && i < int64_t(infos.size()); ++i) {
    const DescPtr& d = infos[size_t(i)];
    cudnnBackendKnobType_t type;
    knobs::KnobRange r;
    int64_t n = 0;
    if (get_attr(d, CUDNN_ATTR_KNOB_INFO_TYPE, CUDNN_TYPE_KNOB_TYPE, 1, &n, &type) &&
        get_attr(d, CUDNN_ATTR_KNOB_INFO_MINIMUM_VALUE, CUDNN_TYPE_INT64, 1, &n, &r.min) &&
        get_attr(d, CUDNN_ATTR_KNOB_INFO_MAXIMUM_VALUE, CUDNN_TYPE_INT64, 1, &n, &r.max) &&
        get_attr(d, CUDNN_ATTR_KNOB_INFO_STRIDE, CUDNN_TYPE_INT64, 1, &n, &r.stride)) {
      r.type = int64_t(type);
      out.push_back(r);
    }
  }
  return out;
}

DescPtr make_plan(Builder& b, cudnnHandle_t handle, const DescPtr& cfg, int64_t& ws) {
  DescPtr plan = b.make(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
  b.set(plan, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle);
  b.set_desc(plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, cfg);
  b.finalize(plan, "execution plan");
  if (!b.ok()) return nullptr;
  int64_t n = 0;
  ws = 0;
  if (!get_attr(plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &n, &ws)) {
    b.fail("execution plan: workspace size query failed");
    return nullptr;
  }
  return plan;
}

int64_t align256(int64_t x) { return (x + 255) / 256 * 256; }

// A finalized execution plan kept between propose_plans and build_plan.
struct BuiltEntry {
  EngineCfg key;  // the engine config it was finalized from (none when restored from JSON)
  std::shared_ptr<LoweredGraph> lg;
  std::vector<DescPtr> keep;
  DescPtr cfg, plan;
  int64_t ws = 0;
};

class CudnnPlan final : public Plan {
 public:
  CudnnPlan(std::shared_ptr<BuiltEntry> e, int device) : e_(std::move(e)), device_(device) {}

  // `g` has its variant slots laid out (the router plans before it builds).
  Status init(const Graph& g) {
    const LoweredGraph& lg = *e_->lg;
    cudnn_ws_ = align256(e_->ws);
    total_ws_ = cudnn_ws_ + lg.ws_bytes;
    n_slots_ = lg.slot_uids.size();
    uids_ = lg.slot_uids;
    for (int64_t uid : lg.slot_uids) {
      int64_t slot = g.variant_slot_of(uid);
      if (slot < 0)
        return {ErrorCode::INVALID_VALUE, "cudnn: tensor uid " + std::to_string(uid) +
                                              " has no variant-pack slot (plan the graph with create_execution_plans first)"};
      slot_index_.push_back(size_t(slot));
    }
    for (auto& v : lg.offset_views) {
      int64_t slot = g.variant_slot_of(v.source_uid);
      if (slot < 0)
        return {ErrorCode::INVALID_VALUE, "cudnn: sliced tensor uid " + std::to_string(v.source_uid) + " has no variant-pack slot"};
      view_index_.push_back({uids_.size(), size_t(slot), v.byte_offset});
      uids_.push_back(v.uid);
    }
    for (auto& w : lg.ws_tensors) {
      ws_index_.push_back({uids_.size(), cudnn_ws_ + w.offset});
      uids_.push_back(w.uid);
      if (w.zero) zero_.push_back({cudnn_ws_ + w.offset, w.bytes});
    }
    for (auto& h : lg.host_values) {
      bool in_slots = std::find(lg.slot_uids.begin(), lg.slot_uids.end(), h.uid) != lg.slot_uids.end();
      if (in_slots) continue;
      host_index_.push_back({uids_.size(), const_cast<unsigned char*>(h.bytes)});
      uids_.push_back(h.uid);
    }
    base_ptrs_.assign(uids_.size(), nullptr);
    for (auto& [i, p] : host_index_) base_ptrs_[i] = p;
    // The variant pack, built once. Data pointers are placeholders until execute().
    std::vector<void*> dummy(base_ptrs_);
    for (auto& p : dummy)
      if (!p) p = reinterpret_cast<void*>(uintptr_t(4096));
    Builder b;
    vp_ = b.make(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
    b.set(vp_, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, int64_t(uids_.size()), uids_.data());
    b.set(vp_, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, int64_t(dummy.size()), dummy.data());
    void* ws = reinterpret_cast<void*>(uintptr_t(4096));
    b.set(vp_, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &ws);
    b.finalize(vp_, "variant pack");
    fresh_ = true;
    if (b.ok()) {
      // Can a finalized variant pack take new pointers? Then execute() only re-sets them.
      cudnnStatus_t s = api().BackendSetAttribute(vp_->get(), CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR,
                                                  int64_t(dummy.size()), dummy.data());
      fresh_ = s != CUDNN_STATUS_SUCCESS;
    }
    g_vp_mode.store(fresh_ ? 2 : 1);
    return {};
  }

  int64_t workspace_size() const override { return total_ws_; }

  // cuDNN's own serialization of the execution plan (CUDNN_ATTR_EXECUTION_PLAN_JSON_REPRESENTATION);
  // "" when this engine's plans cannot be serialized, and then restore rebuilds from the engine config.
  Status serialize_payload(std::string& out) const override {
    out.clear();
    int64_t n = 0;
    if (!get_attr(e_->plan, CUDNN_ATTR_EXECUTION_PLAN_JSON_REPRESENTATION, CUDNN_TYPE_CHAR, 0, &n, nullptr) || n <= 0)
      return {};
    std::string buf(size_t(n), '\0');
    int64_t got = 0;
    if (!get_attr(e_->plan, CUDNN_ATTR_EXECUTION_PLAN_JSON_REPRESENTATION, CUDNN_TYPE_CHAR, n, &got, buf.data()))
      return {};
    buf.resize(size_t(std::min(got, n)));
    while (!buf.empty() && buf.back() == '\0') buf.pop_back();
    out = std::move(buf);
    return {};
  }

  Status populate_cuda_graph(void* const* slots, void* workspace, void* cuda_graph, bool update) override {
    const auto& a = api();
    auto fn = update ? a.BackendUpdateCudaGraph : a.BackendPopulateCudaGraph;
    if (!fn)
      return {ErrorCode::GRAPH_NOT_SUPPORTED, "not supported: the loaded cuDNN has no cudnnBackend" +
                                                  std::string(update ? "Update" : "Populate") + "CudaGraph (needs 9.5+)"};
    if (!zero_.empty())
      return {ErrorCode::GRAPH_NOT_SUPPORTED,
              "not supported: this plan clears workspace tensors before each run, which a CUDA graph it populates "
              "would not do"};
    cudnnHandle_t handle = nullptr;
    OPENDNN_RETURN_IF_ERROR(thread_handle(device_, nullptr, handle));
    DescPtr vp;
    OPENDNN_RETURN_IF_ERROR(fresh_pack(slots, workspace, vp));
    cudnnStatus_t s = fn(handle, e_->plan->get(), vp->get(), static_cast<cudaGraph_t>(cuda_graph));
    if (s == CUDNN_STATUS_NOT_SUPPORTED_CUDA_GRAPH_NATIVE_API)
      return {ErrorCode::GRAPH_NOT_SUPPORTED, "not supported: this cuDNN engine cannot record into a CUDA graph (its plan "
                                              "lacks the SUPPORTS_CUDA_GRAPH_NATIVE_API behavior note)"};
    if (s != CUDNN_STATUS_SUCCESS)
      return {ErrorCode::GRAPH_EXECUTION_FAILED, std::string("cudnn: cudnnBackend") + (update ? "Update" : "Populate") +
                                                     "CudaGraph: " + a.status_string(s)};
    return {};
  }

  // Reentrant: the pointers live in a per-thread array (sized once per thread), and the prebuilt variant
  // pack is used by one call at a time; a call that finds it busy builds a fresh one.
  Status execute(void* const* slots, void* workspace, void* stream) override {
    const auto& a = api();
    cudnnHandle_t handle = nullptr;
    OPENDNN_RETURN_IF_ERROR(thread_handle(device_, stream, handle));
    thread_local std::vector<void*> ptrs;
    OPENDNN_RETURN_IF_ERROR(fill_pointers(slots, workspace, ptrs));
    char* ws = static_cast<char*>(workspace);
    for (auto& [off, bytes] : zero_) {
      cudaError_t e = a.cudaMemsetAsync(ws + off, 0, size_t(bytes), static_cast<cudaStream_t>(stream));
      if (e != cudaSuccess) return {ErrorCode::CUDA_API_FAILED, std::string("cudaMemsetAsync: ") + a.cudaGetErrorString(e)};
    }
    void* cudnn_ws = e_->ws > 0 ? workspace : nullptr;
    cudnnBackendDescriptor_t vp = nullptr;
    DescPtr fresh;
    std::unique_lock<std::mutex> shared_pack(vp_mu_, std::try_to_lock);
    if (!fresh_ && shared_pack.owns_lock()) {
      cudnnStatus_t s = a.BackendSetAttribute(vp_->get(), CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR,
                                              int64_t(ptrs.size()), ptrs.data());
      if (s == CUDNN_STATUS_SUCCESS)
        s = a.BackendSetAttribute(vp_->get(), CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &cudnn_ws);
      if (s != CUDNN_STATUS_SUCCESS)
        return {ErrorCode::CUDNN_BACKEND_API_FAILED, "cudnn: variant pack update: " + a.status_string(s)};
      vp = vp_->get();
    } else {
      // cuDNN would not re-set a finalized pack, or another call holds it: a fresh one (host allocations).
      OPENDNN_RETURN_IF_ERROR(make_pack(ptrs, cudnn_ws, fresh));
      vp = fresh->get();
    }
    cudnnStatus_t s = a.BackendExecute(handle, e_->plan->get(), vp);
    if (s != CUDNN_STATUS_SUCCESS)
      return {ErrorCode::GRAPH_EXECUTION_FAILED, "cudnn: cudnnBackendExecute: " + a.status_string(s)};
    return {};
  }

 private:
  // The variant pack's pointers for one call: the caller's tensors (slices at their offsets), workspace
  // tensors and host values. `ptrs` keeps its capacity between calls.
  Status fill_pointers(void* const* slots, void* workspace, std::vector<void*>& ptrs) const {
    ptrs.assign(base_ptrs_.begin(), base_ptrs_.end());
    for (size_t i = 0; i < n_slots_; ++i) {
      void* p = slots[slot_index_[i]];
      if (!p) return {ErrorCode::INVALID_VARIANT_PACK, "cudnn: no pointer for tensor uid " + std::to_string(uids_[i])};
      ptrs[i] = p;
    }
    for (const auto& v : view_index_) {
      char* p = static_cast<char*>(slots[v.slot]);
      if (!p) return {ErrorCode::INVALID_VARIANT_PACK, "cudnn: no pointer for the sliced tensor of uid " + std::to_string(uids_[v.index])};
      ptrs[v.index] = p + v.byte_offset;
    }
    if (total_ws_ > 0 && !workspace)
      return {ErrorCode::INVALID_VARIANT_PACK,
              "cudnn: the plan needs " + std::to_string(total_ws_) + " bytes of workspace but none was given"};
    char* ws = static_cast<char*>(workspace);
    for (auto& [i, off] : ws_index_) ptrs[i] = ws + off;
    return {};
  }

  // A variant pack with these pointers (for populate_cuda_graph; execute() keeps its own).
  Status fresh_pack(void* const* slots, void* workspace, DescPtr& out) const {
    std::vector<void*> ptrs;
    OPENDNN_RETURN_IF_ERROR(fill_pointers(slots, workspace, ptrs));
    return make_pack(ptrs, e_->ws > 0 ? workspace : nullptr, out);
  }

  // A finalized variant pack of `ptrs` and the cuDNN workspace.
  Status make_pack(const std::vector<void*>& ptrs, void* cudnn_ws, DescPtr& out) const {
    Builder b;
    out = b.make(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
    b.set(out, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, int64_t(uids_.size()), uids_.data());
    b.set(out, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, int64_t(ptrs.size()), ptrs.data());
    b.set(out, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &cudnn_ws);
    b.finalize(out, "variant pack");
    if (!b.ok()) return {ErrorCode::CUDNN_BACKEND_API_FAILED, "cudnn: " + b.error()};
    return {};
  }

  std::shared_ptr<BuiltEntry> e_;
  int device_;
  int64_t cudnn_ws_ = 0, total_ws_ = 0;
  size_t n_slots_ = 0;
  std::vector<int64_t> uids_;
  std::vector<size_t> slot_index_;  // per user tensor: its index in execute()'s slot array
  std::vector<void*> base_ptrs_;  // host values set, the rest filled per call
  std::mutex vp_mu_;
  struct ViewIndex { size_t index, slot; int64_t byte_offset; };
  std::vector<ViewIndex> view_index_;  // slices of user tensors: pointer = slots[slot] + byte_offset
  std::vector<std::pair<size_t, int64_t>> ws_index_;
  std::vector<std::pair<size_t, unsigned char*>> host_index_;
  std::vector<std::pair<int64_t, int64_t>> zero_;
  DescPtr vp_;
  bool fresh_ = true;
};

std::vector<SdpaImpl> impls_for(const Graph& g) {
  for (const auto& n : g.nodes()) {
    if (n->kind() != OpKind::SDPA && n->kind() != OpKind::SDPA_BACKWARD) continue;
    const std::string& m = n->attr_str("implementation");
    if (m == "COMPOSITE") return {SdpaImpl::COMPOSITE};
    if (m == "UNIFIED") return {SdpaImpl::UNIFIED};
    return {SdpaImpl::COMPOSITE, SdpaImpl::UNIFIED};
  }
  return {SdpaImpl::COMPOSITE};
}

bool sixteen_bit_io(const Graph& g) {
  for (const auto& t : g.tensors()) {
    DataType d = t->get_data_type();
    if (!t->get_is_virtual() && (d == DataType::HALF || d == DataType::BFLOAT16 || is_fp8(d))) return true;
  }
  return false;
}

// Autotune's timer: CUDA events on the plan's stream (host time would measure only the launches).
class EventTimer final : public Timer {
 public:
  EventTimer() {
    const auto& a = api();
    ok_ = a.cudaEventCreate(&start_) == cudaSuccess && a.cudaEventCreate(&stop_) == cudaSuccess;
  }
  ~EventTimer() override {
    if (start_) api().cudaEventDestroy(start_);
    if (stop_) api().cudaEventDestroy(stop_);
  }
  void start(void* stream) override {
    if (ok_) api().cudaEventRecord(start_, static_cast<cudaStream_t>(stream));
  }
  double stop_us(void* stream) override {
    const auto& a = api();
    float ms = -1.0f;
    if (!ok_ || a.cudaEventRecord(stop_, static_cast<cudaStream_t>(stream)) != cudaSuccess ||
        a.cudaEventSynchronize(stop_) != cudaSuccess || a.cudaEventElapsedTime(&ms, start_, stop_) != cudaSuccess)
      return 1e30;  // an unmeasurable plan sorts last
    return double(ms) * 1000.0;
  }

 private:
  cudaEvent_t start_ = nullptr, stop_ = nullptr;
  bool ok_ = false;
};

// cuDNN 9.19's SDPA kernels on sm_90 in the terms of plan/attention_cost.h (H200, bf16, FA3-paper shapes),
// per head dim 64 / 128 / 256, fitted by bench/fit_sdpa_cost.py. Forward: bench/results/sdpa.json
// cudnn_engine_ms (session 12), within 2% (d64), 10% (d128) and 13% (d256) of the measured times in sample.
// Backward: sdpa_bwd.json cudnn_engine_ms, d64 / d128 session 12 (within 3% / 5%), d256 session 11 (within
// 9%), with block + diagonal >= 0 so that no visible block costs less than nothing.
constexpr cost::TileCost kSdpaFwdSm90[3] = {{0.85, 1.167, 0.373}, {0.696, 1.694, 1.396}, {1.868, 3.336, 2.01}};
constexpr cost::TileCost kSdpaBwdSm90[3] = {{7.915, 2.925, 1.901}, {12.871, 4.826, 2.106}, {38.954, 13.731, -10.919}};

// cuDNN 9.19's lead config for a lone bf16 MATMUL on the H200 (engine 0), timed in the same rounds as the
// cuda engine's GEMM (bench/results/gemm.json, cudnn_engine_ms, session 8): ~770 TFLOP/s up to 8192x4096x4096
// (2.7e11 FLOP; 771-773 at 4096^3, 749 there), 663-698 from 8192x4096x11008 (7.4e11) up (665 at 8192^3 nt,
// where ours ran 696). With a single 770 the router took cuDNN's plan at 8192^3 nt, 4.5% slower than ours;
// with these two rates every plain row's pick is within 2% of the faster engine in sample. With a fused
// bias + GELU (engine 4) it ran 636-662, below the cuda engine's 664-739: its rate is for the plain case only.
double plain_matmul_rate_sm90(double flops) { return flops <= 4e11 ? 770e12 : 690e12; }

// cuDNN 9.19's norms on the H200, bf16 (bench/results/norm.json, cudnn_ms at 8192x4096 and 32768x8192,
// session 6): a fixed cost in us plus the bytes (X's twice forward, three times backward) at a rate in
// bytes/us, fitted through both shapes. LayerNorm's fixed costs (19 us forward, 38 backward) are what the
// roofline guess below misses: it puts cuDNN's LayerNorm backward at 8192x4096 at ~62 us (measured 94),
// ahead of ours (measured 80-91).
struct NormCost {
  double fixed_us, bytes_per_us;
};
constexpr NormCost kNormSm90[2][2] = {{{4.7, 4.08e6}, {5.2, 3.81e6}},     // RMSNorm forward, backward
                                      {{18.7, 3.75e6}, {38.3, 3.61e6}}};  // LayerNorm forward, backward

// The lead config's time: the tile model for plain attention on sm_90, the measured rates for a plain
// matmul and for a lone 16-bit norm on sm_90, else a roofline guess (FLOPs at 700 TFLOP/s for 16-bit I/O
// or 50 for fp32, bytes at 3.5 TB/s).
double estimate_us(const LoweredGraph& lg, bool is16, const Target& t) {
  const int64_t d = lg.attention_head_dim;
  if (lg.plain_attention && is16 && t.sm_version == 90 && (d == 64 || d == 128 || d == 256)) {
    const int i = d == 64 ? 0 : d == 128 ? 1 : 2;
    return cost::attention_us(lg.attention, lg.attention.keys_resident ? kSdpaBwdSm90[i] : kSdpaFwdSm90[i],
                              t.sm_count > 0 ? t.sm_count : 132, lg.attention.keys_resident ? 10.0 : 5.0);
  }
  if (lg.plain_matmul && is16 && t.sm_version == 90)
    return std::max(lg.flops / plain_matmul_rate_sm90(lg.flops), lg.bytes / 3.3e12) * 1e6 + 5.0;
  if (lg.lone_norm && is16 && t.sm_version == 90) {
    const NormCost& c = kNormSm90[lg.norm_layer][lg.norm_backward];
    return c.fixed_us + lg.norm_x_bytes * (lg.norm_backward ? 3 : 2) / c.bytes_per_us;
  }
  return (lg.flops / (is16 ? 700e12 : 50e12) + lg.bytes / 3.5e12) * 1e6 + 5.0;
}

// The engine config and lowering a candidate names (its knobs "engine", "unified", "knob<type>").
void cfg_of(const PlanCandidate& cand, EngineCfg& k, SdpaImpl& impl) {
  for (auto& [name, v] : cand.knobs) {
    if (name == "engine") k.engine = v;
    else if (name == "unified") impl = v ? SdpaImpl::UNIFIED : SdpaImpl::COMPOSITE;
    else if (name.rfind("knob", 0) == 0 && name.size() > 4) k.choices.push_back({std::atoll(name.c_str() + 4), v});
  }
  std::sort(k.choices.begin(), k.choices.end());
}

class CudnnEngine final : public Engine {
 public:
  std::unique_ptr<Timer> make_timer(const Target&) const override {
    if (!api().ok() || !api().has_events()) return nullptr;
    return std::make_unique<EventTimer>();
  }
  std::string_view name() const override { return "cudnn"; }
  int64_t engine_id() const override { return kCudnnEngineId; }
  // HeurMode::FALLBACK admits it: its candidates include cuDNN's own FALLBACK heuristic configs, and on a
  // CUDA target, where the reference engine cannot run, it is the backstop cuDNN Frontend users ask for.
  bool is_fallback() const override { return true; }
  bool serves(const Target& t) const override { return t.kind == DeviceKind::CUDA && api().ok(); }

  // A GPU that libcudnn can drive makes CUDA the default target even without the cuda engine.
  bool probe_device(Target& out) const override {
    const auto& a = api();
    int count = 0, dev = 0, major = 0, minor = 0, sms = 0;
    if (!a.ok() || !a.cudaGetDeviceCount || a.cudaGetDeviceCount(&count) != cudaSuccess || count == 0) return false;
    if (a.cudaGetDevice(&dev) != cudaSuccess ||
        a.cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess ||
        a.cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) != cudaSuccess ||
        a.cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess)
      return false;
    out = Target{DeviceKind::CUDA, dev, major * 10 + minor, sms};
    return true;
  }

  // A target's sm_version of 0 (or less) means "the device as it is" (a Target made without properties).
  static bool same_device(const Target& here, const Target& target) {
    return target.sm_version <= 0 || here.sm_version == target.sm_version;
  }

  Proposal propose_plans(const Graph& g, const Target& target) override {
    Proposal p;
    const auto& a = api();
    if (!a.ok()) {
      p.declines.push_back(a.decline_reason());
      return p;
    }
    if (target.kind != DeviceKind::CUDA) {
      p.declines.push_back("cudnn: serves CUDA targets only");
      return p;
    }
    int device = current_device(target);
    if (Target here; !probe_device_ordinal(device, here) || !same_device(here, target)) {
      p.declines.push_back("cudnn: plans only on the device itself, and no visible device " + std::to_string(device) +
                           " is sm_" + std::to_string(target.sm_version) +
                           " (deviceless planning for the cudnn engine is not supported)");
      return p;
    }
    DeviceGuard guard(device);
    cudnnHandle_t handle = nullptr;
    Status hs = thread_handle(device, nullptr, handle);
    if (hs.is_bad()) {
      p.declines.push_back("cudnn: " + hs.message());
      return p;
    }
    std::vector<std::string> notes;
    // Each candidate is a finalized execution plan (runtime-compiled engines compile here), so the count
    // bounds propose's cost; OPENDNN_CUDNN_MAX_PLANS lowers it (tests that sweep many small graphs).
    int64_t max_per_impl = 6;
    if (const char* v = std::getenv("OPENDNN_CUDNN_MAX_PLANS"); v && std::atoi(v) > 0) max_per_impl = std::atoi(v);
    const size_t search_cap = knobs::search_cap_from_env();
    std::set<int64_t> taken;
    // Finalizes k's execution plan and offers it as a candidate; false (with a note for a heuristic
    // config) when cuDNN refuses it.
    auto offer = [&](const std::shared_ptr<LoweredGraph>& lg, SdpaImpl impl, const EngineCfg& k, const Notes& nt,
                     int64_t rank, bool searched) {
      PlanCandidate c;
      std::string err;
      if (!finalize_candidate(g, target, handle, lg, impl, k, nt, rank, taken, c, err)) {
        if (!searched) notes.push_back("cudnn: " + err);
        return false;
      }
      if (searched) c.knobs.push_back({"searched", 1});
      p.plans.push_back(std::move(c));
      return true;
    };
    // The knob search's input, gathered from the heuristic configs that built (one group per lowering).
    struct BaseInfo {
      std::shared_ptr<LoweredGraph> lg;
      SdpaImpl impl;
      Notes notes;
    };
    std::vector<knobs::SearchBase> bases;
    std::vector<BaseInfo> base_info;  // parallel to bases
    std::vector<int64_t> ranks;       // per group: the next rank
    std::map<std::pair<int, int64_t>, std::vector<knobs::KnobRange>> ranges;  // per (group, engine)
    for (SdpaImpl impl : impls_for(g)) {
      const int group = int(ranks.size());
      ranks.push_back(0);
      std::shared_ptr<LoweredGraph> lg;
      std::vector<std::string> why;
      if (!lower_graph(g, handle, impl, a.version, why, lg)) {
        for (auto& w : why) notes.push_back(w);
        continue;
      }
      std::string tag = impl == SdpaImpl::UNIFIED ? "unified_" : "";
      std::vector<EngineCfg> seen;
      int64_t built = 0;
      for (cudnnBackendHeurMode_t mode : {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_B, CUDNN_HEUR_MODE_FALLBACK}) {
        if (built >= max_per_impl) break;
        Builder b;
        DescPtr heur = b.make(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
        b.set_desc(heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, lg->op_graph);
        b.set(heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode);
        if (g.context().sm_count > 0) b.set_i64(heur, CUDNN_ATTR_ENGINEHEUR_SM_COUNT_TARGET, g.context().sm_count);
        b.finalize(heur, "heuristics (mode " + std::to_string(int(mode)) + ")");
        int64_t count = 0;
        if (b.ok() && !get_attr(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count, nullptr))
          b.fail("heuristics results count query failed");
        if (!b.ok()) {
          notes.push_back("cudnn: " + tag + b.error());
          continue;
        }
        std::vector<DescPtr> cfgs;
        std::vector<cudnnBackendDescriptor_t> raws;
        for (int64_t i = 0; i < count; ++i) {
          DescPtr d = b.make(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
          if (!d) break;
          cfgs.push_back(d);
          raws.push_back(d->get());
        }
        int64_t got = 0;
        if (count > 0 &&
            !get_attr(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, count, &got, raws.data())) {
          notes.push_back("cudnn: " + tag + "heuristics results query failed: " + a.last_error());
          continue;
        }
        if (got == 0) notes.push_back("cudnn: " + tag + "heuristics mode " + std::to_string(int(mode)) + " found no engine config");
        for (int64_t i = 0; i < got && built < max_per_impl; ++i) {
          EngineCfg k;
          Notes nt;
          Builder rb;
          if (!read_cfg(rb, cfgs[size_t(i)], k, nt)) continue;
          if (std::find(seen.begin(), seen.end(), k) != seen.end()) continue;
          seen.push_back(k);
          if (!offer(lg, impl, k, nt, ranks[size_t(group)], false)) continue;
          ++built;
          ++ranks[size_t(group)];
          if (search_cap == 0) continue;
          auto key = std::make_pair(group, k.engine);
          if (!ranges.count(key)) ranges[key] = engine_knob_ranges(*lg, k.engine);
          bases.push_back({k, ranges[key], group});
          base_info.push_back({lg, impl, nt});
        }
      }
    }
    // Searched configs come after every heuristic one: their local indices never displace a heuristic
    // config's, and their estimates rank them behind their group's heuristic configs. A config cuDNN will
    // not finalize is skipped; a few more are tried than the cap, since knob ranges hold invalid values.
    // UNVERIFIED on a GPU until the lead's run of CudnnEngineKnobSearch.* (hence opt-in).
    if (search_cap > 0) {
      size_t added = 0;
      for (const knobs::Variant& v : knobs::knob_variants(bases, 4 * search_cap)) {
        if (added >= search_cap) break;
        const BaseInfo& bi = base_info[v.base];
        int64_t& rank = ranks[size_t(bases[v.base].group)];
        if (offer(bi.lg, bi.impl, v.cfg, bi.notes, rank, true)) {
          ++added;
          ++rank;
        }
      }
    }
    if (p.plans.empty()) {
      p.declines = std::move(notes);
      if (p.declines.empty()) p.declines.push_back("cudnn: no engine config supports this graph");
    }
    return p;
  }

  Status build_plan(const Graph& g, const Target& target, const PlanCandidate& cand, std::unique_ptr<Plan>& out) override {
    const auto& a = api();
    if (!a.ok()) return {ErrorCode::GRAPH_NOT_SUPPORTED, a.decline_reason()};
    int device = current_device(target);
    DeviceGuard guard(device);
    cudnnHandle_t handle = nullptr;
    OPENDNN_RETURN_IF_ERROR(thread_handle(device, nullptr, handle));
    EngineCfg k;
    SdpaImpl impl = SdpaImpl::COMPOSITE;
    cfg_of(cand, k, impl);
    if (k.engine < 0) return {ErrorCode::INVALID_VALUE, "cudnn: candidate " + cand.name + " has no engine knob"};
    std::shared_ptr<LoweredGraph> lg;
    std::vector<std::string> why;
    if (!lower_graph(g, handle, impl, a.version, why, lg)) {
      std::string m;
      for (auto& w : why) m += (m.empty() ? "" : "; ") + w;
      return {ErrorCode::GRAPH_NOT_SUPPORTED, m};
    }
    std::shared_ptr<BuiltEntry> entry = recall(lg->signature, cand.local_index);
    if (entry && !(entry->key == k)) entry = nullptr;
    if (!entry) {
      entry = std::make_shared<BuiltEntry>();
      entry->key = k;
      entry->lg = lg;
      Builder b;
      entry->cfg = make_cfg(b, *lg, k, entry->keep);
      if (entry->cfg) entry->plan = make_plan(b, handle, entry->cfg, entry->ws);
      if (!b.ok()) return {ErrorCode::GRAPH_EXECUTION_PLAN_CREATION_FAILED, "cudnn: " + cand.name + ": " + b.error()};
    }
    auto plan = std::make_unique<CudnnPlan>(entry, device);
    OPENDNN_RETURN_IF_ERROR(plan->init(g));
    out = std::move(plan);
    return {};
  }

  // ---- engine/knob API: cuDNN's own engines (global ids 0..CUDNN_ATTR_OPERATIONGRAPH_ENGINE_GLOBAL_COUNT-1)
  // of the graph's first lowering, with the knobs each reports (CUDNN_ATTR_ENGINE_KNOB_INFO).
  Status list_knob_engines(const Graph& g, const Target& target, std::vector<KnobEngine>& out) override {
    out.clear();
    Prepared pr;
    OPENDNN_RETURN_IF_ERROR(prepare(g, target, impls_for(g).front(), pr));
    int64_t count = 0, n = 0;
    if (!get_attr(pr.lg->op_graph, CUDNN_ATTR_OPERATIONGRAPH_ENGINE_GLOBAL_COUNT, CUDNN_TYPE_INT64, 1, &n, &count))
      return {ErrorCode::CUDNN_BACKEND_API_FAILED, "cudnn: engine count query failed: " + api().last_error()};
    for (int64_t e = 0; e < count; ++e) {
      KnobEngine ke;
      ke.name = "cudnn:eng" + std::to_string(e);
      Builder b;
      DescPtr eng = b.make(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
      b.set_desc(eng, CUDNN_ATTR_ENGINE_OPERATION_GRAPH, pr.lg->op_graph);
      b.set_i64(eng, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, e);
      b.finalize(eng, "engine " + std::to_string(e));
      if (!b.ok()) {
        ke.unsupported = "cuDNN engine " + std::to_string(e) + " does not take this graph: " + b.error();
      } else {
        for (const auto& r : engine_knob_ranges(*pr.lg, e)) {
          std::string_view t = to_string(KnobType(int32_t(r.type)));
          ke.knobs.push_back({t.empty() ? "knob" + std::to_string(r.type) : std::string(t), r.min, r.max, r.stride, {}});
        }
      }
      out.push_back(std::move(ke));
    }
    return {};
  }

  Status make_candidate(const Graph& g, const Target& target, int64_t index,
                        const std::vector<std::pair<KnobType, int64_t>>& knobs, PlanCandidate& out) override {
    const SdpaImpl impl = impls_for(g).front();
    Prepared pr;
    OPENDNN_RETURN_IF_ERROR(prepare(g, target, impl, pr));
    const std::vector<knobs::KnobRange> ranges = engine_knob_ranges(*pr.lg, index);
    EngineCfg k;
    k.engine = index;
    for (auto [type, value] : knobs) {
      const int64_t wanted = int64_t(type);  // a structured binding is not captured by clang 14's lambdas
      auto r = std::find_if(ranges.begin(), ranges.end(), [&](const auto& x) { return x.type == wanted; });
      if (r == ranges.end())
        return {ErrorCode::INVALID_VALUE, "cudnn engine " + std::to_string(index) + " has no knob " +
                                              std::string(to_string(type)) + " for this graph"};
      if (value < r->min || value > r->max || (r->stride > 0 && (value - r->min) % r->stride != 0))
        return {ErrorCode::INVALID_VALUE, "knob " + std::string(to_string(type)) + " of cudnn engine " +
                                              std::to_string(index) + " takes " + std::to_string(r->min) + ".." +
                                              std::to_string(r->max) + " by " + std::to_string(r->stride) + ", not " +
                                              std::to_string(value)};
      k.choices.push_back({int64_t(type), value});
    }
    std::sort(k.choices.begin(), k.choices.end());
    Notes nt;
    {
      Builder b;
      DescPtr eng = b.make(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
      b.set_desc(eng, CUDNN_ATTR_ENGINE_OPERATION_GRAPH, pr.lg->op_graph);
      b.set_i64(eng, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, index);
      b.finalize(eng, "engine " + std::to_string(index));
      if (!b.ok()) return {ErrorCode::GRAPH_NOT_SUPPORTED, "cudnn: " + b.error()};
      read_notes(eng, nt);
    }
    std::set<int64_t> taken;
    std::string err;
    if (!finalize_candidate(g, target, pr.handle, pr.lg, impl, k, nt, 0, taken, out, err))
      return {ErrorCode::GRAPH_NOT_SUPPORTED, "cudnn: " + err};
    return {};
  }

  std::string build_id() const override { return "cudnn engine over " + describe_version(); }

  // From cuDNN's execution-plan JSON when the plan carried one, else from its engine config; either way
  // without heuristics.
  Status restore_plan(const Graph& g, const Target& target, const PlanCandidate& cand, std::string_view payload,
                      std::unique_ptr<Plan>& out) override {
    if (payload.empty()) return build_plan(g, target, cand, out);
    EngineCfg k;
    SdpaImpl impl = SdpaImpl::COMPOSITE;
    cfg_of(cand, k, impl);
    Prepared pr;
    OPENDNN_RETURN_IF_ERROR(prepare(g, target, impl, pr));
    // A plan this process finalized already (a kernel-cache hit) is taken as it is.
    if (auto e = recall(pr.lg->signature, cand.local_index); e && e->key == k) return build_plan(g, target, cand, out);
    auto entry = std::make_shared<BuiltEntry>();
    entry->lg = pr.lg;
    Builder b;
    entry->plan = b.make(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
    b.set(entry->plan, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &pr.handle);
    std::string text(payload);
    b.set(entry->plan, CUDNN_ATTR_EXECUTION_PLAN_JSON_REPRESENTATION, CUDNN_TYPE_CHAR, int64_t(text.size()), text.c_str());
    b.finalize(entry->plan, "execution plan from JSON");
    int64_t n = 0;
    if (b.ok() && !get_attr(entry->plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &n, &entry->ws))
      b.fail("execution plan: workspace size query failed");
    // cuDNN would not take its own JSON back (an engine without deserialization): the engine config is
    // the plan's identity too, and finalizing it needs no heuristics.
    if (!b.ok()) return build_plan(g, target, cand, out);
    auto plan = std::make_unique<CudnnPlan>(entry, pr.device);
    OPENDNN_RETURN_IF_ERROR(plan->init(g));
    out = std::move(plan);
    return {};
  }

  bool probe_device_ordinal(int device, Target& out) const override {
    const auto& a = api();
    int count = 0, major = 0, minor = 0, sms = 0;
    if (!a.ok() || !a.cudaGetDeviceCount || a.cudaGetDeviceCount(&count) != cudaSuccess || device >= count) return false;
    if (a.cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess ||
        a.cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) != cudaSuccess ||
        a.cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess)
      return false;
    out = Target{DeviceKind::CUDA, device, major * 10 + minor, sms};
    return true;
  }

 private:
  struct Prepared {
    int device = 0;
    cudnnHandle_t handle = nullptr;
    std::shared_ptr<LoweredGraph> lg;
  };
  // A handle on the target's device and the graph lowered for `impl`. cuDNN plans on the device itself: a
  // target no device here matches (device properties of a GPU this process does not see) is an error.
  Status prepare(const Graph& g, const Target& target, SdpaImpl impl, Prepared& pr) {
    const auto& a = api();
    if (!a.ok()) return {ErrorCode::GRAPH_NOT_SUPPORTED, a.decline_reason()};
    Target here;
    pr.device = current_device(target);
    if (!probe_device_ordinal(pr.device, here) || !same_device(here, target))
      return {ErrorCode::GRAPH_NOT_SUPPORTED,
              "cudnn: plans only on the device itself, and no visible device " + std::to_string(pr.device) +
                  " is sm_" + std::to_string(target.sm_version) +
                  " (deviceless planning for the cudnn engine is not supported)"};
    DeviceGuard guard(pr.device);
    OPENDNN_RETURN_IF_ERROR(thread_handle(pr.device, nullptr, pr.handle));
    std::vector<std::string> why;
    if (!lower_graph(g, pr.handle, impl, a.version, why, pr.lg)) {
      std::string m;
      for (auto& w : why) m += (m.empty() ? "" : "; ") + w;
      return {ErrorCode::GRAPH_NOT_SUPPORTED, "cudnn: " + m};
    }
    return {};
  }

  // Finalizes k's execution plan and describes it as a candidate (remembered for build_plan); false with
  // the reason when cuDNN refuses it.
  bool finalize_candidate(const Graph& g, const Target& target, cudnnHandle_t handle,
                          const std::shared_ptr<LoweredGraph>& lg, SdpaImpl impl, const EngineCfg& k, const Notes& nt,
                          int64_t rank, std::set<int64_t>& taken, PlanCandidate& c, std::string& err) {
    const bool unified = impl == SdpaImpl::UNIFIED;
    auto entry = std::make_shared<BuiltEntry>();
    entry->key = k;
    entry->lg = lg;
    Builder pb;
    entry->cfg = make_cfg(pb, *lg, k, entry->keep);
    if (entry->cfg) entry->plan = make_plan(pb, handle, entry->cfg, entry->ws);
    std::string name = std::string(unified ? "unified_" : "") + "eng" + std::to_string(k.engine);
    for (auto [t, v] : k.choices) name += "_k" + std::to_string(t) + "=" + std::to_string(v);
    if (!pb.ok()) {
      err = name + ": " + pb.error();
      return false;
    }
    c.name = name;
    c.local_index = knobs::local_index(k, unified, taken);
    taken.insert(c.local_index);
    c.estimated_us = estimate_us(*lg, sixteen_bit_io(g), target) * (1.0 + 0.02 * double(rank));
    c.workspace_bytes = align256(entry->ws) + lg->ws_bytes;
    c.knobs.push_back({"engine", k.engine});
    c.knobs.push_back({"unified", unified ? 1 : 0});
    for (auto [t, v] : k.choices) c.knobs.push_back({"knob" + std::to_string(t), v});
    c.numerical_notes = nt.numerical;
    c.behavior_notes = nt.behavior;
    c.deterministic = !nt.nondeterministic();
    for (const auto& n : g.nodes())
      if (n->kind() == OpKind::SDPA_BACKWARD && !unified && !n->attr_bool("use_deterministic_algorithm"))
        c.deterministic = false;
    remember(lg->signature, c.local_index, entry);
    return true;
  }

  void remember(const std::string& sig, int64_t index, std::shared_ptr<BuiltEntry> e) {
    std::lock_guard<std::mutex> lock(mu_);
    if (cache_.size() > 1024) cache_.clear();  // a knob-searched graph holds up to ~70
    cache_[sig + "#" + std::to_string(index)] = std::move(e);
  }
  std::shared_ptr<BuiltEntry> recall(const std::string& sig, int64_t index) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = cache_.find(sig + "#" + std::to_string(index));
    return it == cache_.end() ? nullptr : it->second;
  }
  std::mutex mu_;
  std::unordered_map<std::string, std::shared_ptr<BuiltEntry>> cache_;
};

}  // namespace

std::string describe_loaded() {
  const auto& a = api();
  if (!a.ok()) return a.decline_reason();
  return describe_version() + " from " + a.cudnn_path + "; cudart " + a.cudart_name;
}

const char* variant_pack_mode() {
  int m = g_vp_mode.load();
  return m == 1 ? "set" : m == 2 ? "fresh" : "";
}

}  // namespace cudnn

std::shared_ptr<Engine> make_cudnn_engine() {
  static std::shared_ptr<Engine> e = std::make_shared<cudnn::CudnnEngine>();
  return e;
}

}  // namespace opendnn
