// SPDX-License-Identifier: Apache-2.0
// Shared pieces of the opendnn._C extension: error mapping, pointer extraction, the Python-side
// graph class (with its variant-pack checks) and handles.
#pragma once

#include <nanobind/nanobind.h>

#include <array>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

#include "opendnn/opendnn.h"

namespace nb = nanobind;

namespace opendnn::py {

// Raised as opendnn.cudnnGraphNotSupportedError (a RuntimeError).
struct NotSupportedError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Maps a bad Status to the Python exception cuDNN Frontend raises in the same place.
[[noreturn]] void raise_status(const Status& s);
inline void check(const Status& s) {
  if (s.is_bad()) raise_status(s);
}

// What a handle int made by create_handle() stands for: the stream work is queued on (0 = the
// default stream / the CPU). Graphs created with a handle share this state, so a later set_stream()
// is seen by their execute().
struct HandleState {
  uintptr_t stream = 0;
  int device = 0;
};
using HandlePtr = std::shared_ptr<HandleState>;
// The state of a handle int (any int subclass too); raises for an int create_handle() did not make.
HandlePtr handle_state(nb::handle h);
// A graph's handle argument: a handle int, or a stream object (torch/cupy stream) that fixes the stream.
HandlePtr handle_or_stream(nb::handle h);

// What the graph knows about one variant-pack slot, to check the object bound to it (variant_pack.cpp).
struct SlotCheck {
  int64_t uid = 0;
  std::string label;              // "\"x\" (uid 3)"
  DataType dtype = DataType::NOT_SET;
  int bits = 0;                   // storage bits of one element (4 for FP4)
  std::vector<int64_t> dims, strides;
  std::vector<int64_t> nz_dims, nz_strides;  // the dims other than 1, and their strides
  int64_t lo = 0, hi = 0;         // element offsets the tensor reaches: [lo, hi); hi == lo when empty
  bool output = false;            // a node writes it
  bool by_value = false;          // pass-by-value: host memory read at execute
  bool on_device = false;         // the plans run on a GPU: the kernels read device memory
  bool ragged = false;            // has a ragged offset: its extent depends on the offsets' values
  PyObject* numpy_type = nullptr;  // numpy scalar type / torch dtype already seen to match (borrowed,
  PyObject* torch_dtype = nullptr; // kept alive by the process-wide type objects)
  const void* host_default = nullptr;  // value used when the pack has no entry (tensor_like of a host array)
};

// Up to kInlineSlots pointers on the stack; more on the heap (large graphs only).
struct SlotBuffer {
  static constexpr size_t kInlineSlots = 64;
  void* inline_slots[kInlineSlots];
  std::vector<void*> heap;
  void** get(size_t n) {
    if (n <= kInlineSlots) return inline_slots;
    heap.assign(n, nullptr);
    return heap.data();
  }
};

// The graph object behind opendnn.pygraph: a Graph plus what execute() needs to check and resolve a
// variant pack without allocating.
struct PyGraph : Graph {
  std::vector<int64_t> slot_uids;   // copy of variant_uids() the checks were built for
  std::vector<SlotCheck> checks;    // one per slot
  std::unordered_map<const TensorAttr*, std::array<uint64_t, 2>> host_defaults;  // value cells
  HandlePtr hs;                     // the handle's state (its stream is read at execute)
  nb::object handle;                // the handle object given
};

// Resolves the dict into slots[0..n) (n = variant_uids().size()), checking every described object
// against its tensor. Keys: graph tensors or int uids; None keys and uids without a slot are skipped.
void resolve_pack(PyGraph& g, nb::handle pack, void** slots);
// Forgets the checks (the plans are made again); the next resolve_pack() rebuilds them.
void invalidate_checks(PyGraph& g);
// Takes the checks from the tensors as they are now (right after planning or building plans).
void refresh_checks(PyGraph& g);
// Checks a workspace object against `need` bytes and returns its address (int pointers unchecked).
void* resolve_workspace(nb::handle ws, int64_t need);

// cuDNN Frontend's `knob`: a knob type and the values it takes (min..max by stride).
struct PyKnob {
  KnobType type = KnobType::NOT_SET;
  int64_t max_value = 0, min_value = 0, stride = 1;
};

// The address behind a variant-pack value: an int, a numpy array, a torch tensor (data_ptr()),
// an object with __cuda_array_interface__ / __array_interface__ / __dlpack__, or a buffer.
void* to_pointer(nb::handle obj);
// Shape, strides, type, device and address of a __dlpack__ object, as a dict.
nb::dict dlpack_info(nb::handle obj);
// A stream from an int or an object with .cuda_stream / .ptr (torch, cupy streams).
uintptr_t to_stream(nb::handle obj);
// Converts an opendnn.data_type, numpy dtype, torch dtype, python type or string.
DataType to_data_type(nb::handle obj);

void bind_graph(nb::module_& m);
void bind_engines(nb::module_& m);
void shutdown_engines();

}  // namespace opendnn::py
