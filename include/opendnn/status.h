// SPDX-License-Identifier: Apache-2.0
// Error reporting without exceptions: every fallible call returns a [[nodiscard]] Status.
#pragma once

#include <string>
#include <string_view>
#include <utility>

namespace opendnn {

// The categories of cuDNN Frontend's error_code_t, so callers can port their handling unchanged.
#define OPENDNN_ERROR_CODES(X)            \
  X(OK)                                   \
  X(ATTRIBUTE_NOT_SET)                    \
  X(SHAPE_DEDUCTION_FAILED)               \
  X(INVALID_TENSOR_NAME)                  \
  X(INVALID_VARIANT_PACK)                 \
  X(GRAPH_NOT_SUPPORTED)                  \
  X(GRAPH_EXECUTION_PLAN_CREATION_FAILED) \
  X(GRAPH_EXECUTION_FAILED)               \
  X(HEURISTIC_QUERY_FAILED)               \
  X(UNSUPPORTED_GRAPH_FORMAT)             \
  X(CUDA_API_FAILED)                      \
  X(CUDNN_BACKEND_API_FAILED)             \
  X(INVALID_CUDA_DEVICE)                  \
  X(HANDLE_ERROR)                         \
  X(INVALID_VALUE)                        \
  X(NVRTC_COMPILATION_FAILED)

enum class ErrorCode : int {
#define OPENDNN_X(e) e,
  OPENDNN_ERROR_CODES(OPENDNN_X)
#undef OPENDNN_X
};

std::string_view to_string(ErrorCode c);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(ErrorCode code, std::string message) : code_(code), message_(std::move(message)) {}
  static Status ok() { return {}; }

  bool is_good() const { return code_ == ErrorCode::OK; }
  bool is_bad() const { return code_ != ErrorCode::OK; }
  explicit operator bool() const { return is_good(); }
  ErrorCode code() const { return code_; }
  ErrorCode get_code() const { return code_; }
  const std::string& message() const { return message_; }
  const std::string& get_message() const { return message_; }
  // "GRAPH_NOT_SUPPORTED: sdpa "attn": head dim 320 of Q exceeds 256"
  std::string to_string() const;

 private:
  ErrorCode code_ = ErrorCode::OK;
  std::string message_;
};

#define OPENDNN_RETURN_IF_ERROR(expr)        \
  do {                                       \
    ::opendnn::Status opendnn_status_ = (expr); \
    if (opendnn_status_.is_bad()) return opendnn_status_; \
  } while (0)

}  // namespace opendnn
