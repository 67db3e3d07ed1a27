// SPDX-License-Identifier: Apache-2.0
// Plans of the cuda engine for graphs made only of POINTWISE nodes: the whole chain runs as ONE
// kernel generated at build time (pw_codegen), compiled by NVRTC (pw_nvrtc) for the device's
// architecture, cached in memory and on disk, and loaded with the runtime's library API.
#include <cuda_runtime.h>

#include <cstdint>
#include <map>
#include <mutex>
#include <string>

#include "common/dtype_convert.h"
#include "engines/cuda/cuda_engine.h"
#include "engines/cuda/pointwise/pw_codegen.h"
#include "engines/cuda/pointwise/pw_nvrtc.h"

namespace opendnn::cuda {
namespace {

constexpr int64_t kBase = 5000;
constexpr int kThreads = 256;

// "sm_90a" for Hopper (the arch-specific target), else the plain "sm_XY".
std::string arch_of(const Target& t) {
  return "sm_" + std::to_string(t.sm_version) + (t.sm_version == 90 ? "a" : "");
}

// Compiled kernels of this process by cache key. Libraries stay loaded for the process's life:
// plans hold bare kernel handles and a handle must outlive every plan that launches it.
std::mutex g_mutex;
std::map<std::string, cudaKernel_t>& loaded() {
  static std::map<std::string, cudaKernel_t> m;
  return m;
}

// The kernel for `source`: memory, then disk, then NVRTC (which refills both caches).
std::string get_kernel(const std::string& source, const std::string& arch, cudaKernel_t& out) {
  const pw::Nvrtc& nv = pw::nvrtc();
  if (!nv.ok) return nv.decline_reason();
  const std::string key = pw::cache_key(source, arch, nv.version);
  std::lock_guard<std::mutex> lock(g_mutex);
  if (auto it = loaded().find(key); it != loaded().end()) {
    out = it->second;
    return "";
  }
  const std::string dir = pw::cache_dir();
  std::string cubin;
  const bool from_disk = pw::cache_read(dir, key, cubin);
  if (!from_disk) {
    if (std::string err = pw::nvrtc_compile(source, arch, cubin); !err.empty()) return err;
  }
  cudaLibrary_t lib = nullptr;
  cudaError_t e = cudaLibraryLoadData(&lib, cubin.data(), nullptr, nullptr, 0, nullptr, nullptr, 0);
  if (e != cudaSuccess) {
    cudaGetLastError();
    return std::string("cudaLibraryLoadData failed: ") + cudaGetErrorString(e) + (from_disk ? " (cached " + key + ")" : "");
  }
  if ((e = cudaLibraryGetKernel(&out, lib, pw::kKernelName)) != cudaSuccess) {
    cudaGetLastError();
    return std::string("cudaLibraryGetKernel failed: ") + cudaGetErrorString(e);
  }
  // Loads the module into the current device's context now (lazy loading would otherwise do it at
  // the first launch, inside execute) and proves the cubin runs on this device.
  cudaFuncAttributes attr{};
  if ((e = cudaFuncGetAttributes(&attr, reinterpret_cast<const void*>(out))) != cudaSuccess) {
    cudaGetLastError();
    return std::string("the compiled kernel does not load on this device: ") + cudaGetErrorString(e);
  }
  // A failed write only costs a recompile next time.
  if (!from_disk) pw::cache_write(dir, key, cubin);
  loaded()[key] = out;
  return "";
}

class PointwisePlan : public Plan {
 public:
  PointwisePlan(pw::Chain c, cudaKernel_t k, int sm_count) : chain_(std::move(c)), kernel_(k) {
    args_ = {};
    for (size_t i = 0; i < chain_.scalars.size(); ++i) {
      const pw::ScalarArg& s = chain_.scalars[i];
      args_.s[i] = round_to(s.type, s.constant);  // what the reference's constant cell holds
    }
    for (size_t i = 0; i < chain_.in_slots.size(); ++i) slots_.push_back(chain_.in_slots[i]);
    for (size_t i = 0; i < chain_.out_slots.size(); ++i) slots_.push_back(chain_.out_slots[i]);
    auto blocks = [&](int64_t items) {
      int64_t b = (items + kThreads - 1) / kThreads, cap = int64_t(sm_count > 0 ? sm_count : 132) * (2048 / kThreads);  // one full wave
      return unsigned(std::max<int64_t>(1, std::min(b, cap)));
    };
    grid_scalar_ = blocks(chain_.elements);
    grid_vector_ = blocks(chain_.elements / chain_.vec);
  }

  Status execute(void* const* slots, void*, void* stream) override {
    if (chain_.elements == 0) return {};
    pw::KernelArgs a = args_;
    bool aligned = chain_.vec > 1;
    for (size_t i = 0; i < slots_.size(); ++i) {
      void* p = slots_[i] >= 0 ? slots[slots_[i]] : nullptr;
      if (!p) return {ErrorCode::INVALID_VARIANT_PACK, "cuda pointwise: tensor '" + chain_.names[i] + "' has no memory in the variant pack"};
      a.p[i] = p;
      if (chain_.vector_access[i] && reinterpret_cast<uintptr_t>(p) % 16) aligned = false;
    }
    for (size_t i = 0; i < chain_.scalars.size(); ++i)
      if (const pw::ScalarArg& s = chain_.scalars[i]; s.slot >= 0) {
        if (!slots[s.slot]) return {ErrorCode::INVALID_VARIANT_PACK, "cuda pointwise: a scalar input has no host pointer"};
        a.s[i] = load_element(s.type, slots[s.slot], 0);
      }
    a.vec_ok = aligned ? 1 : 0;
    void* params[] = {&a};
    cudaError_t e = cudaLaunchKernel(reinterpret_cast<const void*>(kernel_), dim3(aligned ? grid_vector_ : grid_scalar_),
                                     dim3(kThreads), params, 0, static_cast<cudaStream_t>(stream));
    if (e != cudaSuccess) return {ErrorCode::CUDA_API_FAILED, std::string("cuda pointwise: ") + cudaGetErrorString(e)};
    return {};
  }
  int64_t workspace_size() const override { return 0; }

 private:
  pw::Chain chain_;
  cudaKernel_t kernel_;
  pw::KernelArgs args_;
  std::vector<int64_t> slots_;
  unsigned grid_scalar_ = 1, grid_vector_ = 1;
};

void propose(const Graph& g, const Target&, Proposal& out) {
  pw::Chain c;
  if (std::string why = pw::generate(g, c); !why.empty()) return out.declines.push_back(why);
  if (!pw::nvrtc().ok) return out.declines.push_back(pw::nvrtc().decline_reason());
  PlanCandidate p;
  p.name = "pointwise_chain_v" + std::to_string(c.vec);
  p.local_index = kBase;
  p.behavior_notes = {BehaviorNote::RUNTIME_COMPILATION};  // the chain is compiled with NVRTC at build
  // Memory bound: every tensor streamed once (~2 bytes an element) at ~3.5 TB/s, plus the launch.
  p.estimated_us = 3.0 + double(c.elements) * double(c.in_slots.size() + c.out_slots.size()) * 2.0 / 3.5e6;
  out.plans.push_back(p);
}

Status build(const Graph& g, const Target& t, const PlanCandidate&, std::unique_ptr<Plan>& out) {
  pw::Chain c;
  if (std::string why = pw::generate(g, c); !why.empty())
    return {ErrorCode::GRAPH_EXECUTION_PLAN_CREATION_FAILED, "cuda pointwise: " + why};
  cudaKernel_t k = nullptr;
  if (std::string err = get_kernel(c.source, arch_of(t), k); !err.empty())
    return {ErrorCode::GRAPH_EXECUTION_PLAN_CREATION_FAILED, "cuda pointwise: " + err};
  out = std::make_unique<PointwisePlan>(std::move(c), k, t.sm_count);
  return {};
}

}  // namespace

namespace pw {
void forget_loaded_kernels() {
  std::lock_guard<std::mutex> lock(g_mutex);
  loaded().clear();
}
}  // namespace pw

const Family& pointwise_family() {
  static const Family f{"pointwise", kBase, propose, build};
  return f;
}

}  // namespace opendnn::cuda
