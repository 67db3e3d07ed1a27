// SPDX-License-Identifier: Apache-2.0
// Allocation failures as errors: alloc_buffer names what it allocates and its size when the
// allocation fails, and alloc_error turns any allocation failure inside an API call into a Status
// that says what the call was doing (never a bare std::bad_alloc escaping to the caller).
#pragma once

#include <cstdint>
#include <new>
#include <stdexcept>
#include <string>
#include <vector>

#include "opendnn/status.h"

namespace opendnn {

class AllocFailure : public std::bad_alloc {
 public:
  AllocFailure(const char* what, uint64_t bytes)
      : msg_(std::string(what) + " needs " + std::to_string(bytes) + " bytes, which could not be allocated") {}
  const char* what() const noexcept override { return msg_.c_str(); }

 private:
  std::string msg_;
};

// A vector of n value-initialised elements; an allocation failure throws AllocFailure naming `what`.
template <class T>
std::vector<T> alloc_buffer(size_t n, const char* what) {
  try {
    return std::vector<T>(n);
  } catch (const std::bad_alloc&) {
    throw AllocFailure(what, uint64_t(n) * sizeof(T));
  } catch (const std::length_error&) {
    throw AllocFailure(what, uint64_t(n) * sizeof(T));
  }
}

// Call inside a catch block (the handler of an API call's function-try-block): an allocation failure
// becomes `code` with "out of memory <doing>: ..."; any other exception is thrown on.
inline Status alloc_error(ErrorCode code, const char* doing) {
  try {
    throw;
  } catch (const AllocFailure& e) {
    return {code, std::string("out of memory ") + doing + ": " + e.what()};
  } catch (const std::bad_alloc&) {
    return {code, std::string("out of memory ") + doing};
  } catch (const std::length_error& e) {
    return {code, std::string("out of memory ") + doing + ": a buffer would exceed the maximum size (" + e.what() + ")"};
  }
}

}  // namespace opendnn
