// SPDX-License-Identifier: Apache-2.0
// Shared pieces of the opendnn._C extension: error mapping, pointer extraction, the Python-side
// graph class (with its cached variant-pack slot table) and the handle.
#pragma once

#include <nanobind/nanobind.h>

#include <cstdint>
#include <stdexcept>
#include <string>
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

// A cuDNN-style handle: the stream work is queued on (0 = the default stream / the CPU).
struct Handle {
  uintptr_t stream = 0;
  int device = 0;
};

// The graph object behind opendnn.pygraph: a Graph plus the cached slot order of the variant pack.
struct PyGraph : Graph {
  std::vector<int64_t> slot_uids;  // copy of variant_uids() the slot table was built for
  std::vector<void*> slots;        // one pointer per slot, reused across execute() calls
  std::vector<uint8_t> filled;
  std::vector<int64_t> slot_bytes;  // bytes each slot's tensor spans (its strides included)
  uintptr_t stream = 0;            // from the handle given to the constructor or set_stream
  nb::object handle;               // keeps that handle alive
};

// cuDNN Frontend's `knob`: a knob type and the values it takes (min..max by stride).
struct PyKnob {
  KnobType type = KnobType::NOT_SET;
  int64_t max_value = 0, min_value = 0, stride = 1;
};

// The address behind a variant-pack value: an int, a numpy array, a torch tensor (data_ptr()),
// an object with __cuda_array_interface__ / __array_interface__ / __dlpack__, or a buffer.
void* to_pointer(nb::handle obj);
// A stream from an int, a Handle, or an object with .cuda_stream / .ptr (torch, cupy streams).
uintptr_t to_stream(nb::handle obj);
// Converts an opendnn.data_type, numpy dtype, torch dtype, python type or string.
DataType to_data_type(nb::handle obj);

void bind_graph(nb::module_& m);
void bind_engines(nb::module_& m);
void shutdown_engines();

}  // namespace opendnn::py
