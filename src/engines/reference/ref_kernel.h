// SPDX-License-Identifier: Apache-2.0
// The reference engine's kernel interface: one Kernel per op, defined in the op family's file as
// `const ref::Kernel kernel_<ENUM>` (e.g. kernel_MATMUL in matmul.cpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

#include "common/dtype_convert.h"
#include "opendnn/node.h"

namespace opendnn::ref {

// One tensor as a kernel sees it. Built once at plan-build time; execute() only patches `data`.
struct View {
  const TensorAttr* attr = nullptr;  // null for an absent optional port
  DataType dtype = DataType::NOT_SET;
  std::vector<int64_t> dims;
  std::vector<int64_t> strides;
  void* data = nullptr;  // host memory; null for an absent port or an output nobody needs

  bool present() const { return data != nullptr; }
  size_t rank() const { return dims.size(); }
  int64_t volume() const;
  // Element at a linear element offset (sum of index * stride), converted to double.
  double get(int64_t offset) const { return load_element(dtype, data, offset); }
  // Rounds to the tensor's type with RNE and stores.
  void set(int64_t offset, double v) const { store_element(dtype, data, offset, v); }
  int64_t offset_of(const int64_t* index) const {
    int64_t o = 0;
    for (size_t i = 0; i < dims.size(); ++i) o += index[i] * strides[i];
    return o;
  }
  // Offset of index when this view broadcasts to `out_dims` (same rank; a dim of 1 repeats).
  int64_t broadcast_offset_of(const int64_t* index) const {
    int64_t o = 0;
    for (size_t i = 0; i < dims.size(); ++i) o += (dims[i] == 1 ? 0 : index[i]) * strides[i];
    return o;
  }
};

// A kernel's data. `in` first holds one View per input port (in port order; variadic ops: one per
// input); after them come the ragged offsets: one View per port whose tensor has a ragged offset
// (TensorAttr::get_ragged_offset), input ports first, then output ports, each in port order (a
// tensor on two ports appears twice). fam::ragged_view finds the one for a port. The engine's plan
// and the test harnesses build Args this way; kernels of ops without ragged tensors see only ports.
struct Args {
  std::vector<View> in;   // the input ports, then the ragged offsets (see above)
  std::vector<View> out;  // indexed like the op's output ports
  std::byte* scratch = nullptr;  // scratch_bytes(node) bytes, 64-byte aligned, in the caller's workspace
};

struct Kernel {
  // Reasons the reference engine cannot run this node (empty Status = fine). Optional.
  Status (*check)(const Node& node) = nullptr;
  // Scratch bytes the kernel needs during run(). Optional (none).
  int64_t (*scratch_bytes)(const Node& node) = nullptr;
  // Computes every present output. Must not allocate on the heap for large data: use scratch.
  Status (*run)(const Node& node, const Args& args) = nullptr;
};

// The kernel for an op, or null when none is linked in (the engine then declines with that reason).
const Kernel* kernel_for(OpKind kind);

// One element of a POINTWISE mode (pointwise.cpp), for kernels that evaluate pointwise sub-graphs
// (SDPA's score_mod). GEN_INDEX is the caller's (the element's index along `axis`).
struct PointwiseParams {
  double lower = 0.0, upper = std::numeric_limits<double>::infinity(), slope = 0.0;
  double swish_beta = 1.0, elu_alpha = 1.0, softplus_beta = 1.0;
  int64_t axis = 0;
};
PointwiseParams pointwise_params(const Node& n);
double pointwise_value(PointwiseMode m, const PointwiseParams& p, double a, double b, double c);

// Iterates every index of `dims` in row-major order, calling f(const int64_t* index, int64_t linear).
template <class F>
void for_each_index(const std::vector<int64_t>& dims, F&& f) {
  int64_t total = 1;
  for (int64_t d : dims) total *= d;
  std::vector<int64_t> idx(dims.size(), 0);
  for (int64_t lin = 0; lin < total; ++lin) {
    f(static_cast<const int64_t*>(idx.data()), lin);
    for (size_t i = dims.size(); i-- > 0;) {
      if (++idx[i] < dims[i]) break;
      idx[i] = 0;
    }
  }
}

}  // namespace opendnn::ref
