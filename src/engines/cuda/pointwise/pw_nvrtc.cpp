// SPDX-License-Identifier: Apache-2.0
#include "engines/cuda/pointwise/pw_nvrtc.h"

#include <dlfcn.h>
#include <link.h>

#include <atomic>
#include <cstdlib>
#include <mutex>

#include "common/dynlib.h"

namespace opendnn::cuda::pw {
namespace {

// NVRTC's C API by shape only: nvrtcResult is an int enum, nvrtcProgram an opaque pointer.
using Prog = void*;
struct Fns {
  int (*Version)(int*, int*) = nullptr;
  int (*CreateProgram)(Prog*, const char*, const char*, int, const char* const*, const char* const*) = nullptr;
  int (*CompileProgram)(Prog, int, const char* const*) = nullptr;
  int (*GetCUBINSize)(Prog, size_t*) = nullptr;
  int (*GetCUBIN)(Prog, char*) = nullptr;
  int (*GetProgramLogSize)(Prog, size_t*) = nullptr;
  int (*GetProgramLog)(Prog, char*) = nullptr;
  int (*DestroyProgram)(Prog*) = nullptr;
};

Fns g_fns;
std::atomic<int64_t> g_compiles{0};

bool try_open(Nvrtc& n, const std::string& what, int flags) {
  void* lib = dynlib::open(what, flags, n.tried);
  if (!lib) return false;
  Fns f;
  bool all = dynlib::resolve(lib, "nvrtcVersion", f.Version) && dynlib::resolve(lib, "nvrtcCreateProgram", f.CreateProgram) &&
             dynlib::resolve(lib, "nvrtcCompileProgram", f.CompileProgram) && dynlib::resolve(lib, "nvrtcGetCUBINSize", f.GetCUBINSize) &&
             dynlib::resolve(lib, "nvrtcGetCUBIN", f.GetCUBIN) && dynlib::resolve(lib, "nvrtcGetProgramLogSize", f.GetProgramLogSize) &&
             dynlib::resolve(lib, "nvrtcGetProgramLog", f.GetProgramLog) && dynlib::resolve(lib, "nvrtcDestroyProgram", f.DestroyProgram);
  int major = 0, minor = 0;
  if (!all || f.Version(&major, &minor) != 0 || major < 12) {
    n.tried.push_back(what + (all ? ": NVRTC older than 12.0" : ": missing NVRTC entry points (nvrtcGetCUBIN needs 11.1+)"));
    ::dlclose(lib);
    return false;
  }
  g_fns = f;
  n.ok = true;
  n.version = major * 1000 + minor * 10;
  n.path = what;
  return true;
}

// site-packages folders of torch libraries already mapped into the process.
std::vector<std::string> torch_site_packages() {
  std::vector<std::string> out;
  ::dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* data) {
        std::string p = info->dlpi_name ? info->dlpi_name : "";
        size_t at = p.find("/torch/lib/");
        auto* v = static_cast<std::vector<std::string>*>(data);
        if (at != std::string::npos && (v->empty() || v->back() != p.substr(0, at))) v->push_back(p.substr(0, at));
        return 0;
      },
      &out);
  return out;
}

Nvrtc load() {
  Nvrtc n;
  const char* names[] = {"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"};
  for (const char* s : names)
    if (try_open(n, s, RTLD_NOW | RTLD_NOLOAD)) return n;
  std::vector<std::string> dirs;
  for (const char* e : {"CUDA_HOME", "CUDA_PATH"})
    if (const char* v = std::getenv(e); v && *v) dirs.push_back(std::string(v) + "/lib64");
  dirs.push_back("/usr/local/cuda/lib64");
  std::vector<std::string> sites = torch_site_packages();
  if (const char* pp = std::getenv("PYTHONPATH"))
    for (std::string rest = pp; !rest.empty();) {
      size_t c = rest.find(':');
      if (c) sites.push_back(rest.substr(0, c));
      rest = c == std::string::npos ? "" : rest.substr(c + 1);
    }
  for (const auto& s : sites)
    for (const char* sub : {"/nvidia/cu13/lib", "/nvidia/cuda_nvrtc/lib"}) dirs.push_back(s + sub);
  for (const auto& d : dirs)
    for (const char* s : names)
      if (try_open(n, d + "/" + s, RTLD_NOW | RTLD_LOCAL)) return n;
  for (const char* s : names)
    if (try_open(n, s, RTLD_NOW | RTLD_LOCAL)) return n;
  return n;
}

}  // namespace

std::string Nvrtc::decline_reason() const {
  std::string s = "NVRTC (libnvrtc.so) not found; searched:";
  for (const auto& t : tried) s += " [" + t + "]";
  return s;
}

const Nvrtc& nvrtc() {
  static const Nvrtc n = load();
  return n;
}

std::string nvrtc_compile(const std::string& source, const std::string& arch, std::string& cubin) {
  const Nvrtc& n = nvrtc();
  if (!n.ok) return n.decline_reason();
  Prog prog = nullptr;
  if (g_fns.CreateProgram(&prog, source.c_str(), "opendnn_pointwise.cu", 0, nullptr, nullptr) != 0)
    return "nvrtcCreateProgram failed";
  const std::string gpu = "--gpu-architecture=" + arch;
  const char* opts[] = {gpu.c_str(), "--std=c++17", "-default-device"};
  ++g_compiles;
  const int rc = g_fns.CompileProgram(prog, 3, opts);
  std::string err;
  if (rc != 0) {
    size_t len = 0;
    g_fns.GetProgramLogSize(prog, &len);
    std::string log(len, '\0');
    if (len) g_fns.GetProgramLog(prog, log.data());
    err = "NVRTC failed to compile the generated kernel (" + arch + "): " + log;
  } else {
    size_t len = 0;
    g_fns.GetCUBINSize(prog, &len);
    cubin.assign(len, '\0');
    if (!len || g_fns.GetCUBIN(prog, cubin.data()) != 0) err = "NVRTC produced no cubin";
  }
  g_fns.DestroyProgram(&prog);
  return err;
}

int64_t nvrtc_compile_count() { return g_compiles.load(); }

}  // namespace opendnn::cuda::pw
