// SPDX-License-Identifier: Apache-2.0
// Fused pointwise chains: turns a graph made only of POINTWISE nodes into the CUDA source of ONE
// kernel, and keeps compiled kernels in a disk cache. Plain C++ (no CUDA headers), so the CPU test
// suite checks the generator and the cache without a GPU or NVRTC.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "opendnn/graph.h"

namespace opendnn::cuda::pw {

// Fixed kernel parameter block, mirrored by the `Args` struct of the generated source.
inline constexpr int kMaxTensors = 32;
inline constexpr int kMaxScalars = 16;
struct KernelArgs {
  void* p[kMaxTensors];   // device tensors: inputs first, then outputs
  double s[kMaxScalars];  // pass-by-value scalars, already rounded to their data type
  int32_t vec_ok;         // 1 when every vector-accessed pointer is 16-byte aligned
};

// A pass-by-value scalar: a constant, or (slot >= 0) a host pointer in the variant pack.
struct ScalarArg {
  double constant = 0.0;
  int64_t slot = -1;
  DataType type = DataType::FLOAT;
};

struct Chain {
  std::vector<int64_t> dims;          // iteration space (the outputs' shape, dims collapsed)
  std::vector<int64_t> in_slots, out_slots;
  std::vector<char> vector_access;    // per tensor (inputs, then outputs): 1 = 16-byte aligned loads/stores
  std::vector<std::string> names;     // per tensor, for error messages
  std::vector<ScalarArg> scalars;
  int64_t elements = 0;
  int vec = 1;                        // elements per thread-iteration on the vector path
  std::string source;                 // CUDA source defining extern "C" kernel kKernelName
};

inline constexpr const char* kKernelName = "opendnn_pointwise_chain";

// Fills `out` for a validated graph; returns "" or why the graph is not a chain this engine fuses.
std::string generate(const Graph& graph, Chain& out);

// ---- Disk cache of compiled kernels.
// The key names the generated source, the target architecture and the compiler version.
std::string cache_key(const std::string& source, const std::string& arch, int nvrtc_version);
// The plan cache's folder + "/kernels": $OPENDNN_CACHE_DIR/kernels, else ~/.cache/opendnn/kernels, else "".
std::string cache_dir();
// The cubin stored under key, or false when missing, truncated or corrupt.
bool cache_read(const std::string& dir, const std::string& key, std::string& binary);
// Stores atomically (temporary file + rename) so concurrent processes never read half a file.
bool cache_write(const std::string& dir, const std::string& key, const std::string& binary);

}  // namespace opendnn::cuda::pw
