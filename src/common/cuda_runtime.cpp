// SPDX-License-Identifier: Apache-2.0
#include "common/cuda_runtime.h"

#include <dlfcn.h>

#include <cstdlib>

#include "common/dynlib.h"

namespace opendnn::cudart {

namespace {

const char* const kSonames[] = {"libcudart.so.13", "libcudart.so.12", "libcudart.so"};

// Resolves every symbol; on a missing required one, names it in `error`.
void resolve_all(Runtime& r) {
  std::string missing;
  auto need = [&](const char* sym, auto& fn) {
    if (!dynlib::resolve(r.lib, sym, fn)) missing += (missing.empty() ? "" : ", ") + std::string(sym);
  };
  need("cudaGetDeviceCount", r.GetDeviceCount);
  need("cudaSetDevice", r.SetDevice);
  need("cudaMalloc", r.Malloc);
  need("cudaFree", r.Free);
  need("cudaMemcpy", r.Memcpy);
  need("cudaDeviceSynchronize", r.DeviceSynchronize);
  need("cudaGetLastError", r.GetLastError);
  need("cudaGetErrorString", r.GetErrorString);
  if (!missing.empty()) {
    r.error = "CUDA runtime " + r.name + " lacks " + missing;
    return;
  }
  if (!(dynlib::resolve(r.lib, "cudaEventCreate", r.EventCreate) && dynlib::resolve(r.lib, "cudaEventRecord", r.EventRecord) &&
        dynlib::resolve(r.lib, "cudaEventSynchronize", r.EventSynchronize) &&
        dynlib::resolve(r.lib, "cudaEventElapsedTime", r.EventElapsedTime) &&
        dynlib::resolve(r.lib, "cudaEventDestroy", r.EventDestroy)))
    r.EventCreate = nullptr;
}

std::string search_text(const std::vector<std::string>& tried) {
  std::string s;
  for (const auto& t : tried) s += (s.empty() ? "" : "; ") + t;
  return s.empty() ? "no candidates" : s;
}

Runtime load_from(const std::vector<std::string>& candidates, bool prefer_loaded) {
  Runtime r;
  r.lib = open_library(candidates, prefer_loaded, r.tried, r.name);
  if (!r.lib) {
    r.error = "no CUDA runtime could be loaded (tried: " + search_text(r.tried) + ")";
    return r;
  }
  resolve_all(r);
  return r;
}

}  // namespace

int Runtime::device_count() const {
  int n = 0;
  if (!ok() || GetDeviceCount(&n) != 0) {
    if (ok()) GetLastError();  // "no driver" / "no device" is sticky until read
    return 0;
  }
  return n;
}

std::string Runtime::failure(int rc, const char* what) const {
  if (rc == 0) return "";
  const char* m = GetErrorString ? GetErrorString(rc) : nullptr;
  return std::string(what) + ": " + (m ? m : "CUDA error") + " (error " + std::to_string(rc) + ")";
}

std::vector<std::string> default_candidates() {
  std::vector<std::string> c(std::begin(kSonames), std::end(kSonames));
  std::vector<std::string> roots;
  for (const char* env : {"CUDA_HOME", "CUDA_PATH"})
    if (const char* v = std::getenv(env); v && *v) roots.emplace_back(v);
  roots.emplace_back("/usr/local/cuda");
  // CUDA 12 installs the runtime under lib64/, CUDA 13 under lib/.
  for (const auto& root : roots)
    for (const char* sub : {"/lib64/", "/lib/"})
      for (const char* so : kSonames) c.push_back(root + sub + so);
  return c;
}

void* open_library(const std::vector<std::string>& candidates, bool prefer_loaded, std::vector<std::string>& tried,
                   std::string& name) {
  if (prefer_loaded)
    for (const char* so : kSonames)
      if (void* lib = dynlib::open(so, RTLD_NOW | RTLD_NOLOAD, tried)) {
        name = so;
        return lib;
      }
  for (const auto& c : candidates)
    if (void* lib = dynlib::open(c, RTLD_NOW | RTLD_LOCAL, tried)) {
      name = c;
      return lib;
    }
  return nullptr;
}

Runtime load(const std::vector<std::string>& candidates) { return load_from(candidates, false); }

const Runtime& runtime() {
  static const Runtime r = [] {
    if (const char* path = std::getenv("OPENDNN_CUDART_PATH"); path && *path) {
      Runtime forced = load_from({path}, false);
      if (!forced.ok()) forced.error = "OPENDNN_CUDART_PATH: " + forced.error;
      return forced;
    }
    return load_from(default_candidates(), true);
  }();
  return r;
}

}  // namespace opendnn::cudart
