// SPDX-License-Identifier: Apache-2.0
// Run-time loading of NVIDIA libraries (cuDNN, NVRTC) with dlopen, shared by the engines that use them
// so that opendnn has no link-time dependency on either.
#pragma once

#include <dlfcn.h>

#include <string>
#include <vector>

namespace opendnn::dynlib {

// Resolves `name` in `lib` into the function pointer `fn`; false when the symbol is missing.
template <class F>
bool resolve(void* lib, const char* name, F& fn) {
  fn = reinterpret_cast<F>(::dlsym(lib, name));
  return fn != nullptr;
}

// dlopen(what, flags). A failure is recorded in `tried` as "what: reason", except for RTLD_NOLOAD
// probes ("is it already loaded?"), whose failure is expected and says nothing about the search.
inline void* open(const std::string& what, int flags, std::vector<std::string>& tried) {
  void* lib = ::dlopen(what.c_str(), flags);
  if (!lib && !(flags & RTLD_NOLOAD)) {
    const char* e = ::dlerror();
    tried.push_back(what + ": " + (e ? e : "dlopen failed"));
  }
  return lib;
}

}  // namespace opendnn::dynlib
