// SPDX-License-Identifier: Apache-2.0
#include "engines/cudnn/loader.h"

#include <dirent.h>
#include <dlfcn.h>
#include <sys/stat.h>

#include <cstdlib>
#include <mutex>

#include "common/cuda_runtime.h"
#include "common/dynlib.h"

namespace opendnn::cudnn {
namespace {

bool is_dir(const std::string& p) {
  struct stat st;
  return ::stat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}
bool is_file(const std::string& p) {
  struct stat st;
  return ::stat(p.c_str(), &st) == 0 && !S_ISDIR(st.st_mode);
}
std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::string(v) : std::string();
}
std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  size_t pos = 0;
  while (pos <= s.size()) {
    size_t e = s.find(sep, pos);
    if (e == std::string::npos) e = s.size();
    if (e > pos) out.push_back(s.substr(pos, e - pos));
    pos = e + 1;
  }
  return out;
}
// prefix/lib/python3*/site-packages for a virtualenv or conda prefix.
std::vector<std::string> site_packages_under(const std::string& prefix) {
  std::vector<std::string> out;
  if (prefix.empty()) return out;
  std::string lib = prefix + "/lib";
  DIR* d = ::opendir(lib.c_str());
  if (!d) return out;
  while (dirent* e = ::readdir(d)) {
    std::string n = e->d_name;
    if (n.rfind("python3", 0) == 0) {
      std::string sp = lib + "/" + n + "/site-packages";
      if (is_dir(sp)) out.push_back(sp);
    }
  }
  ::closedir(d);
  return out;
}

// Tries one cuDNN candidate; on success fills api and returns true.
bool try_cudnn(CudnnApi& a, const std::string& what, int flags) {
  void* lib = dynlib::open(what, flags, a.tried);
  if (!lib) return false;
  CudnnApi t;
  bool ok = dynlib::resolve(lib, "cudnnGetVersion", t.GetVersion);
  if (!ok) {
    a.tried.push_back(what + ": no cudnnGetVersion");
    ::dlclose(lib);
    return false;
  }
  size_t v = t.GetVersion();
  if (v < 90000) {
    a.tried.push_back(what + ": version " + std::to_string(v) + " is older than 9.0");
    ::dlclose(lib);
    return false;
  }
  std::string missing;
  auto need = [&](const char* n, auto& fn) {
    if (!dynlib::resolve(lib, n, fn)) missing += std::string(missing.empty() ? "" : ", ") + n;
  };
  need("cudnnGetErrorString", t.GetErrorString);
  need("cudnnGetLastErrorString", t.GetLastErrorString);
  need("cudnnCreate", t.Create);
  need("cudnnDestroy", t.Destroy);
  need("cudnnSetStream", t.SetStream);
  need("cudnnBackendCreateDescriptor", t.BackendCreateDescriptor);
  need("cudnnBackendDestroyDescriptor", t.BackendDestroyDescriptor);
  need("cudnnBackendInitialize", t.BackendInitialize);
  need("cudnnBackendFinalize", t.BackendFinalize);
  need("cudnnBackendSetAttribute", t.BackendSetAttribute);
  need("cudnnBackendGetAttribute", t.BackendGetAttribute);
  need("cudnnBackendExecute", t.BackendExecute);
  if (!missing.empty()) {
    a.tried.push_back(what + ": missing symbols " + missing);
    ::dlclose(lib);
    return false;
  }
  dynlib::resolve(lib, "cudnnBackendPopulateCudaGraph", t.BackendPopulateCudaGraph);
  dynlib::resolve(lib, "cudnnBackendUpdateCudaGraph", t.BackendUpdateCudaGraph);
  t.cudnn_lib = lib;
  t.version = v;
  t.cudnn_path = what;
  t.tried = std::move(a.tried);
  a = std::move(t);
  return true;
}

void load_cudart(CudnnApi& a) {
  // The runtime search the opendnn tool uses too: a runtime the process already has first.
  std::vector<std::string> tried;
  void* lib = cudart::open_library(cudart::default_candidates(), true, tried, a.cudart_name);
  if (!lib) return;
  bool ok = dynlib::resolve(lib, "cudaGetDeviceCount", a.cudaGetDeviceCount) && dynlib::resolve(lib, "cudaGetDevice", a.cudaGetDevice) &&
            dynlib::resolve(lib, "cudaSetDevice", a.cudaSetDevice) && dynlib::resolve(lib, "cudaDeviceGetAttribute", a.cudaDeviceGetAttribute) &&
            dynlib::resolve(lib, "cudaMemsetAsync", a.cudaMemsetAsync) &&
            dynlib::resolve(lib, "cudaStreamIsCapturing", a.cudaStreamIsCapturing) &&
            dynlib::resolve(lib, "cudaGetErrorString", a.cudaGetErrorString);
  if (!ok) {
    a.cudaGetDeviceCount = nullptr;
    a.cudart_name.clear();
    return;
  }
  a.cudart_lib = lib;
  if (!(dynlib::resolve(lib, "cudaEventCreate", a.cudaEventCreate) && dynlib::resolve(lib, "cudaEventRecord", a.cudaEventRecord) &&
        dynlib::resolve(lib, "cudaEventSynchronize", a.cudaEventSynchronize) &&
        dynlib::resolve(lib, "cudaEventElapsedTime", a.cudaEventElapsedTime) && dynlib::resolve(lib, "cudaEventDestroy", a.cudaEventDestroy)))
    a.cudaEventCreate = nullptr;
}

CudnnApi load() {
  CudnnApi a;
  const int flags = RTLD_NOW | RTLD_LOCAL;
  bool found = false;
  // 1. OPENDNN_CUDNN_PATH
  std::string p = env("OPENDNN_CUDNN_PATH");
  if (!p.empty()) {
    if (is_dir(p)) {
      for (const char* n : {"/libcudnn.so.9", "/libcudnn.so"})
        if (!found && is_file(p + n)) found = try_cudnn(a, p + n, flags);
      if (!found) a.tried.push_back(p + ": OPENDNN_CUDNN_PATH folder has no usable libcudnn.so.9");
    } else {
      found = try_cudnn(a, p, flags);
    }
  }
  // 2. already loaded in this process
  if (!found) {
    void* lib = ::dlopen("libcudnn.so.9", RTLD_NOW | RTLD_NOLOAD);
    if (lib) {
      ::dlclose(lib);
      found = try_cudnn(a, "libcudnn.so.9", flags);
    }
  }
  // 3. the pip wheel folder nvidia/cudnn/lib
  if (!found) {
    std::vector<std::string> dirs;
    std::string pip = env("OPENDNN_PIP_CUDNN_DIR");
    if (!pip.empty()) dirs.push_back(pip);
    std::vector<std::string> roots = split(env("PYTHONPATH"), ':');
    for (const char* pref : {"VIRTUAL_ENV", "CONDA_PREFIX"})
      for (auto& sp : site_packages_under(env(pref))) roots.push_back(sp);
    for (auto& r : roots) dirs.push_back(r + "/nvidia/cudnn/lib");
    for (auto& d : dirs) {
      if (found) break;
      std::string f = d + "/libcudnn.so.9";
      if (is_file(f))
        found = try_cudnn(a, f, flags);
      else
        a.tried.push_back(f + ": not present");
    }
  }
  // 4. the system loader
  if (!found) found = try_cudnn(a, "libcudnn.so.9", flags);
  if (!found) {
    std::string list;
    for (auto& t : a.tried) list += (list.empty() ? "" : "; ") + t;
    a.error = "cudnn: libcudnn 9.x could not be loaded (tried: " + list + ")";
    return a;
  }
  load_cudart(a);
  if (!a.has_cudart()) a.error = "cudnn: no CUDA runtime (libcudart.so.13 or .so.12) could be loaded";
  return a;
}

}  // namespace

std::string CudnnApi::decline_reason() const { return error; }

std::string CudnnApi::last_error() const {
  if (!GetLastErrorString) return {};
  char buf[1024] = {0};
  GetLastErrorString(buf, sizeof(buf));
  return buf;
}

std::string CudnnApi::status_string(cudnnStatus_t s) const {
  std::string r = GetErrorString ? GetErrorString(s) : ("cudnn status " + std::to_string(int(s)));
  std::string last = last_error();
  if (!last.empty()) r += ": " + last;
  return r;
}

const CudnnApi& api() {
  static CudnnApi* instance = nullptr;  // never destroyed: plans may outlive static destructors
  static std::once_flag once;
  std::call_once(once, [] { instance = new CudnnApi(load()); });
  return *instance;
}

}  // namespace opendnn::cudnn
