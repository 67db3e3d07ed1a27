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

struct PlanCandidate {
  std::string name;             // unique within the engine, e.g. "gemm_128x256x64_c2"
  int64_t local_index = 0;      // stable index of this plan within its engine
  double estimated_us = 0.0;    // the engine's cost estimate for this graph
  int64_t workspace_bytes = 0;  // known before building
  std::vector<std::pair<std::string, int64_t>> knobs;
  bool deterministic = true;
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

}  // namespace opendnn
