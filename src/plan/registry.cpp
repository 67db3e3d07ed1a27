// SPDX-License-Identifier: Apache-2.0
// The process-wide engine registry and the default target.
#include <cstdlib>
#include <map>
#include <mutex>
#include <optional>
#include <string_view>

#include "engines/reference/engine.h"
#include "opendnn/engine.h"

namespace opendnn {

// Engines compiled in only where their toolchain exists (cuDNN headers, nvcc): weak, so a build
// without them links and simply has no such engine.
std::shared_ptr<Engine> make_cudnn_engine() __attribute__((weak));
namespace cuda {
std::shared_ptr<Engine> make_cuda_engine() __attribute__((weak));
}

namespace {

struct Registry {
  std::mutex mu;
  std::map<int64_t, std::shared_ptr<Engine>> engines;
  std::optional<Target> forced_target;

  Registry() {
    auto ref = ref::make_reference_engine();
    engines.emplace(ref->engine_id(), std::move(ref));
    for (auto factory : {make_cudnn_engine, cuda::make_cuda_engine}) {
      if (!factory) continue;
      if (auto e = factory()) engines.emplace(e->engine_id(), std::move(e));
    }
  }
};

Registry& registry() {
  static Registry* r = new Registry();  // never destroyed: engines may be used during static teardown
  return *r;
}

}  // namespace

void register_engine(std::shared_ptr<Engine> engine) {
  if (!engine) return;
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  r.engines[engine->engine_id()] = std::move(engine);
}

void unregister_engine(int64_t engine_id) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  r.engines.erase(engine_id);
}

std::vector<std::shared_ptr<Engine>> registered_engines() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  std::vector<std::shared_ptr<Engine>> out;
  out.reserve(r.engines.size());
  for (const auto& [id, e] : r.engines) out.push_back(e);
  return out;
}

Target default_target() {
  {
    Registry& r = registry();
    std::lock_guard<std::mutex> lock(r.mu);
    if (r.forced_target) return *r.forced_target;
  }
  if (const char* env = std::getenv("OPENDNN_TARGET")) {
    std::string_view v(env);
    if (v == "cpu" || v == "CPU") return Target{};
  }
  for (const auto& e : registered_engines()) {
    Target t;
    if (e->probe_device(t)) return t;
  }
  return Target{};
}

void set_default_target(const Target& target) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  r.forced_target = target;
}

}  // namespace opendnn
