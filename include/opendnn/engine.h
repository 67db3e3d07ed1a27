// SPDX-License-Identifier: Apache-2.0
// The engine contract: engines propose plans for a validated graph, build them, and plans execute.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "opendnn/graph.h"
#include "opendnn/status.h"

namespace opendnn {

enum class DeviceKind : uint8_t { CPU, CUDA };

// Where plans will run. Pointers in the variant pack live on this device.
struct Target {
  DeviceKind kind = DeviceKind::CPU;
  int device = -1;       // CUDA ordinal
  int sm_version = 0;    // 90 for H100/H200
  int sm_count = 0;
};

// Stable engine id ranges (DESIGN.md): backend-delegating, our C++ engines, Python engines.
inline constexpr int64_t kBackendEngineIdBase = 0;       // [0, 10000): cudnn
inline constexpr int64_t kCppEngineIdBase = 10000;       // [10000, 20000): reference, cuda, ...
inline constexpr int64_t kPythonEngineIdBase = 20000;    // [20000, ...): engines written in Python
inline constexpr int64_t kReferenceEngineId = kCppEngineIdBase;
inline constexpr int64_t kCudaEngineId = kCppEngineIdBase + 100;

// Knob types of the engine/knob API. The cuDNN Frontend members carry cuDNN's CUDNN_KNOB_TYPE_* values
// (so the cudnn engine passes them through); opendnn's own knobs start at 1000.
#define OPENDNN_KNOB_TYPES(X)                                                                       \
  X(SPLIT_K, 0) X(SWIZZLE, 1) X(TILE_SIZE, 2) X(USE_TEX, 3) X(EDGE, 4) X(KBLOCK, 5) X(LDGA, 6)     \
  X(LDGB, 7) X(CHUNK_K, 8) X(SPLIT_H, 9) X(WINO_TILE, 10) X(MULTIPLY, 11) X(SPLIT_K_BUF, 12)       \
  X(TILEK, 13) X(STAGES, 14) X(REDUCTION_MODE, 15) X(CTA_SPLIT_K_MODE, 16) X(SPLIT_K_SLC, 17)      \
  X(IDX_MODE, 18) X(SLICED, 19) X(SPLIT_RS, 20) X(SINGLEBUFFER, 21) X(LDGC, 22) X(SPECFILT, 23)    \
  X(KERNEL_CFG, 24) X(WORKSPACE, 25) X(TILE_CGA, 26) X(TILE_CGA_M, 27) X(TILE_CGA_N, 28)          \
  X(BLOCK_SIZE, 29) X(OCCUPANCY, 30) X(ARRAY_SIZE_PER_THREAD, 31) X(NUM_C_PER_BLOCK, 32)           \
  X(SPLIT_COLS, 33) X(TILE_ROWS, 34) X(TILE_COLS, 35) X(LOAD_SIZE, 36) X(CTA_COUNT, 37)            \
  X(STREAM_K, 38) X(SPLIT_P_SLC, 39) X(TILE_M, 40) X(TILE_N, 41) X(WARP_SPEC_CFG, 42)              \
  X(SWAP_AB, 43) X(RASTER, 1000) X(PROMOTION, 1001)

enum class KnobType : int32_t {
  NOT_SET = -1,
#define OPENDNN_KNOB_ENUM(n, v) n = v,
  OPENDNN_KNOB_TYPES(OPENDNN_KNOB_ENUM)
#undef OPENDNN_KNOB_ENUM
};
std::string_view to_string(KnobType t);  // "TILE_M"; "" for a value with no member
// A knob's type from its name, case-insensitively ("swizzle" -> SWIZZLE; "knob24" -> KERNEL_CFG, the
// cuDNN type number); NOT_SET when the name is no knob type.
KnobType knob_type_from_name(std::string_view name);

// cuDNN Frontend's numerical and behaviour notes (values are cuDNN's).
enum class NumericalNote : int32_t {
  TENSOR_CORE = 0, DOWN_CONVERT_INPUTS, REDUCED_PRECISION_REDUCTION, FFT, NONDETERMINISTIC, WINOGRAD,
  WINOGRAD_TILE_4x4, WINOGRAD_TILE_6x6, WINOGRAD_TILE_13x13, STRICT_NAN_PROP
};
enum class BehaviorNote : int32_t {
  RUNTIME_COMPILATION = 0, REQUIRES_FILTER_INT8x32_REORDER, REQUIRES_BIAS_INT8x32_REORDER,
  SUPPORTS_CUDA_GRAPH_NATIVE_API, CUBLASLT_DEPENDENCY
};
std::string_view to_string(NumericalNote n);
std::string_view to_string(BehaviorNote n);

// The values one knob takes: min..max by stride, or exactly `values` when that is not empty.
struct KnobRange {
  std::string name;  // the knob's name in PlanCandidate::knobs
  int64_t min_value = 0, max_value = 0, stride = 1;
  std::vector<int64_t> values;
  bool takes(int64_t v) const;
};

struct PlanCandidate {
  std::string name;             // unique within the engine, e.g. "gemm_128x256x64_c2"
  int64_t local_index = 0;      // stable index of this plan within its engine
  double estimated_us = 0.0;    // the engine's cost estimate for this graph
  int64_t workspace_bytes = 0;  // known before building
  std::vector<std::pair<std::string, int64_t>> knobs;
  bool deterministic = true;
  // The values create_execution_plan may give each knob; a knob without a range takes only its value.
  std::vector<KnobRange> knob_ranges;
  // What is true of the plan (the router adds NONDETERMINISTIC when `deterministic` is false).
  std::vector<NumericalNote> numerical_notes;
  std::vector<BehaviorNote> behavior_notes;
};

// One engine of cuDNN Frontend's engine/knob API (get_engine_count, get_knobs_for_engine,
// create_execution_plan): a kernel whose plans differ only in knob values. See docs/engines_and_knobs.md.
struct KnobEngine {
  std::string name;
  std::vector<KnobRange> knobs;  // named by knob type (to_string(KnobType))
  std::string unsupported;       // why this engine cannot run the graph ("" when it can)
};

struct Proposal {
  std::vector<PlanCandidate> plans;  // empty when the engine declines
  std::vector<std::string> declines;  // why, one rule per line, naming node and tensor
};

class Plan {
 public:
  virtual ~Plan() = default;
  // slot_pointers has one entry per Graph::variant_uids() slot. The hot path: no allocation,
  // no map lookup, no host synchronisation.
  virtual Status execute(void* const* slot_pointers, void* workspace, void* stream) = 0;
  virtual int64_t workspace_size() const = 0;
  // Engine state serialize() carries beside the plan's identity and knobs (the cudnn engine: cuDNN's
  // execution-plan JSON); "" when identity and knobs rebuild the plan.
  virtual Status serialize_payload(std::string& out) const {
    out.clear();
    return {};
  }
  // Records the plan's work into a CUDA graph (cudaGraph_t) with these pointers; update=true
  // replaces what an earlier call recorded there.
  virtual Status populate_cuda_graph(void* const* slot_pointers, void* workspace, void* cuda_graph, bool update) {
    (void)slot_pointers, (void)workspace, (void)cuda_graph, (void)update;
    return {ErrorCode::GRAPH_NOT_SUPPORTED, "not supported: this engine's plans cannot be recorded into a CUDA graph"};
  }
};

// Times plan executions for autotune(). The router's default measures host wall time with
// std::chrono, which is right for CPU plans; an engine whose plans run asynchronously on a stream
// (CUDA) supplies one that records events instead.
class Timer {
 public:
  virtual ~Timer() = default;
  virtual void start(void* stream) = 0;
  // Microseconds since start(), once the work enqueued on `stream` has completed.
  virtual double stop_us(void* stream) = 0;
};

class Engine {
 public:
  virtual ~Engine() = default;
  // Whether this engine's plans always work for graphs it accepts (HeurMode::FALLBACK keeps only these).
  virtual bool is_fallback() const { return false; }
  // A device probe: an engine that sees a device fills `out` and returns true; default_target()
  // asks every registered engine (in id order) and takes the first answer.
  virtual bool probe_device(Target& out) const { (void)out; return false; }
  // The timer autotune() uses for this engine's plans; null means the host std::chrono timer.
  virtual std::unique_ptr<Timer> make_timer(const Target& target) const { (void)target; return nullptr; }
  virtual std::string_view name() const = 0;
  virtual int64_t engine_id() const = 0;
  // Whether this engine's plans can run on the target at all (pointer locations).
  virtual bool serves(const Target& target) const = 0;
  // Plans for a validated graph, or the reasons it declines. "Accept means run".
  virtual Proposal propose_plans(const Graph& graph, const Target& target) = 0;
  virtual Status build_plan(const Graph& graph, const Target& target, const PlanCandidate& candidate,
                            std::unique_ptr<Plan>& out) = 0;

  // ---- cuDNN Frontend's engine/knob API (src/plan/knobs.cpp has the defaults: one engine per
  // proposed plan, its knobs the plan's knob ranges).
  virtual Status list_knob_engines(const Graph& graph, const Target& target, std::vector<KnobEngine>& out);
  // The candidate of knob engine `index` with these knob values (the others keep their defaults); a
  // value the engine does not take is an error naming the knob and what it takes.
  virtual Status make_candidate(const Graph& graph, const Target& target, int64_t index,
                                const std::vector<std::pair<KnobType, int64_t>>& knobs, PlanCandidate& out);
  // What a serialized plan must match to be restored here: the engine's build (its kernels, the
  // library it drives). Default: the opendnn version.
  virtual std::string build_id() const;
  // Rebuilds a serialized plan without planning again; `payload` is what Plan::serialize_payload wrote.
  virtual Status restore_plan(const Graph& graph, const Target& target, const PlanCandidate& candidate,
                              std::string_view payload, std::unique_ptr<Plan>& out);
  // Probes CUDA device `device` (for device properties); false when this engine cannot see it.
  virtual bool probe_device_ordinal(int device, Target& out) const { (void)device, (void)out; return false; }
};

// The process-wide engine registry (the reference engine is always present).
// Registering an engine whose id is taken replaces it (so a test can inject a fake engine).
void register_engine(std::shared_ptr<Engine> engine);
void unregister_engine(int64_t engine_id);
std::vector<std::shared_ptr<Engine>> registered_engines();  // ordered by engine id

// The target graphs are planned for unless told otherwise: the first CUDA device when the cuda
// engines see one, else the CPU. OPENDNN_TARGET=cpu forces the CPU.
Target default_target();
void set_default_target(const Target& target);
// The properties of CUDA device `device`, from the first engine that sees it.
Status probe_device_properties(int device, Target& out);

}  // namespace opendnn
