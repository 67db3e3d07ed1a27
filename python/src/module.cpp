// SPDX-License-Identifier: Apache-2.0
// The opendnn._C module: enums, errors, handles, build information and pointer conversion.
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <cstring>

#include "common.h"

namespace opendnn::py {

namespace {
thread_local std::string t_last_error;  // get_last_error_string(): the last error raised in this thread
}  // namespace

[[noreturn]] void raise_status(const Status& s) {
  std::string msg = s.to_string();
  t_last_error = msg;
  switch (s.code()) {
    case ErrorCode::GRAPH_NOT_SUPPORTED:
    case ErrorCode::GRAPH_EXECUTION_PLAN_CREATION_FAILED:
    case ErrorCode::HEURISTIC_QUERY_FAILED:
    case ErrorCode::UNSUPPORTED_GRAPH_FORMAT:
      throw NotSupportedError(msg);
    case ErrorCode::ATTRIBUTE_NOT_SET:
    case ErrorCode::SHAPE_DEDUCTION_FAILED:
    case ErrorCode::INVALID_TENSOR_NAME:
    case ErrorCode::INVALID_VARIANT_PACK:
      throw nb::value_error(msg.c_str());
    default:
      throw std::runtime_error(msg);
  }
}

// ---- pointers --------------------------------------------------------------------------------

namespace {

// The head of numpy's array object (PyArrayObject_fields): the data pointer follows the object
// header in every numpy release, which is what PyArray_DATA reads.
struct NumpyArrayHead {
  PyObject_HEAD
  char* data;
};
PyTypeObject* g_ndarray_type = nullptr;

bool is_ndarray(PyTypeObject* tp) {
  if (g_ndarray_type) return tp == g_ndarray_type || PyType_IsSubtype(tp, g_ndarray_type);
  for (PyTypeObject* t = tp; t; t = t->tp_base) {
    if (std::strcmp(t->tp_name, "numpy.ndarray") == 0) {
      Py_INCREF(t);
      g_ndarray_type = t;
      return true;
    }
  }
  return false;
}

// Minimal DLPack structures (the ABI is fixed by the DLPack specification).
struct DLDevice { int32_t device_type; int32_t device_id; };
struct DLDataType { uint8_t code; uint8_t bits; uint16_t lanes; };
struct DLTensor {
  void* data;
  DLDevice device;
  int32_t ndim;
  DLDataType dtype;
  int64_t* shape;
  int64_t* strides;
  uint64_t byte_offset;
};
struct DLManagedTensor {
  DLTensor dl_tensor;
  void* manager_ctx;
  void (*deleter)(DLManagedTensor*);
};
struct DLPackVersion { uint32_t major, minor; };
struct DLManagedTensorVersioned {
  DLPackVersion version;
  void* manager_ctx;
  void (*deleter)(DLManagedTensorVersioned*);
  uint64_t flags;
  DLTensor dl_tensor;
};

// Borrows the DLTensor of a DLPack capsule (the capsule keeps ownership).
const DLTensor* dltensor_of(nb::handle capsule) {
  PyObject* c = capsule.ptr();
  if (PyCapsule_IsValid(c, "dltensor"))
    return &static_cast<DLManagedTensor*>(PyCapsule_GetPointer(c, "dltensor"))->dl_tensor;
  if (PyCapsule_IsValid(c, "dltensor_versioned"))
    return &static_cast<DLManagedTensorVersioned*>(PyCapsule_GetPointer(c, "dltensor_versioned"))->dl_tensor;
  throw nb::type_error("__dlpack__() did not return a DLPack capsule");
}

uintptr_t interface_data(nb::handle iface) {
  nb::object data = nb::borrow(iface)["data"];
  if (data.is_none()) return 0;
  if (nb::isinstance<nb::tuple>(data)) return nb::cast<uintptr_t>(data[0]);
  return nb::cast<uintptr_t>(data);
}

}  // namespace

void* to_pointer(nb::handle h) {
  PyObject* o = h.ptr();
  if (PyLong_Check(o)) {
    unsigned long long v = PyLong_AsUnsignedLongLong(o);
    if (v == (unsigned long long)-1 && PyErr_Occurred()) throw nb::python_error();
    return reinterpret_cast<void*>(uintptr_t(v));
  }
  PyTypeObject* tp = Py_TYPE(o);
  if (is_ndarray(tp)) return reinterpret_cast<NumpyArrayHead*>(o)->data;
  nb::object f = nb::getattr(h, "data_ptr", nb::none());  // torch tensors
  if (!f.is_none()) return reinterpret_cast<void*>(nb::cast<uintptr_t>(f()));
  nb::object iface = nb::getattr(h, "__cuda_array_interface__", nb::none());
  if (!iface.is_none()) return reinterpret_cast<void*>(interface_data(iface));
  iface = nb::getattr(h, "__array_interface__", nb::none());
  if (!iface.is_none()) return reinterpret_cast<void*>(interface_data(iface));
  nb::object dl = nb::getattr(h, "__dlpack__", nb::none());
  if (!dl.is_none()) {
    nb::object cap = dl();
    const DLTensor* t = dltensor_of(cap);
    return static_cast<char*>(t->data) + t->byte_offset;
  }
  if (PyObject_CheckBuffer(o)) {
    Py_buffer view;
    if (PyObject_GetBuffer(o, &view, PyBUF_STRIDES) != 0) throw nb::python_error();
    void* p = view.buf;
    PyBuffer_Release(&view);
    return p;
  }
  throw nb::type_error(("cannot take the address of a " + std::string(tp->tp_name) +
                        ": pass an int pointer, a numpy array, a torch tensor or a __dlpack__ object")
                           .c_str());
}

uintptr_t to_stream(nb::handle h) {
  if (h.is_none()) return 0;
  if (PyLong_Check(h.ptr())) return nb::cast<uintptr_t>(h);
  Handle* hd = nullptr;
  if (nb::try_cast<Handle*>(h, hd) && hd) return hd->stream;
  for (const char* a : {"cuda_stream", "ptr", "handle"}) {
    nb::object v = nb::getattr(h, a, nb::none());
    if (!v.is_none() && PyLong_Check(v.ptr())) return nb::cast<uintptr_t>(v);
  }
  throw nb::type_error("stream must be an int, a torch.cuda.Stream or an object with .cuda_stream");
}

DataType to_data_type(nb::handle obj) {
  DataType t;
  if (nb::try_cast<DataType>(obj, t, false)) return t;
  nb::object conv = nb::module_::import_("opendnn._dtypes").attr("to_data_type");
  return nb::cast<DataType>(conv(obj));
}

namespace {

nb::dict dlpack_info(nb::handle obj) {
  nb::object cap = nb::getattr(obj, "__dlpack__")();
  const DLTensor* t = dltensor_of(cap);
  nb::list shape, strides;
  for (int i = 0; i < t->ndim; ++i) shape.append(t->shape[i]);
  if (t->strides) {
    for (int i = 0; i < t->ndim; ++i) strides.append(t->strides[i]);
  } else {
    int64_t s = 1;
    std::vector<int64_t> st(size_t(t->ndim));
    for (int i = t->ndim; i-- > 0;) {
      st[size_t(i)] = s;
      s *= t->shape[i];
    }
    for (auto v : st) strides.append(v);
  }
  nb::dict d;
  d["shape"] = shape;
  d["strides"] = strides;
  d["code"] = int(t->dtype.code);
  d["bits"] = int(t->dtype.bits);
  d["lanes"] = int(t->dtype.lanes);
  d["device_type"] = int(t->device.device_type);
  d["device_id"] = int(t->device.device_id);
  d["data"] = uintptr_t(static_cast<char*>(t->data) + t->byte_offset);
  return d;
}

}  // namespace
}  // namespace opendnn::py

using namespace opendnn;
using namespace opendnn::py;

NB_MODULE(_C, m) {
  m.doc() = "opendnn native extension";
  m.attr("__version__") = kVersion;
  m.attr("VERSION_NUMBER") = kVersionNumber;

  nb::exception<NotSupportedError>(m, "cudnnGraphNotSupportedError", PyExc_RuntimeError);

  nb::enum_<DataType>(m, "data_type", nb::is_arithmetic())
#define OPENDNN_X(e, s, b) .value(s, DataType::e)
      OPENDNN_DATA_TYPES(OPENDNN_X)
#undef OPENDNN_X
      ;
  nb::enum_<HeurMode>(m, "heur_mode", nb::is_arithmetic())
      .value("A", HeurMode::A)
      .value("B", HeurMode::B)
      .value("FALLBACK", HeurMode::FALLBACK)
      .value("OPENSOURCE", HeurMode::OPENSOURCE);
  nb::enum_<BuildPlanPolicy>(m, "build_plan_policy", nb::is_arithmetic())
      .value("HEURISTICS_CHOICE", BuildPlanPolicy::HEURISTICS_CHOICE)
      .value("ALL", BuildPlanPolicy::ALL);
  nb::enum_<TensorReordering>(m, "tensor_reordering", nb::is_arithmetic())
      .value("NONE", TensorReordering::NONE)
      .value("INT8x32", TensorReordering::INT8x32)
      .value("F16x16", TensorReordering::F16x16)
      .value("F8_128x4", TensorReordering::F8_128x4);
  nb::enum_<ErrorCode>(m, "error_code", nb::is_arithmetic())
#define OPENDNN_X(e) .value(#e, ErrorCode::e)
      OPENDNN_ERROR_CODES(OPENDNN_X)
#undef OPENDNN_X
      ;

  nb::class_<Handle>(m, "handle")
      .def(nb::init<>())
      .def_rw("device", &Handle::device)
      .def_prop_ro("stream", [](const Handle& h) { return h.stream; })
      .def("__repr__", [](const Handle& h) { return "<opendnn.handle stream=" + std::to_string(h.stream) + ">"; });
  m.def("create_handle", []() { return Handle{}; });
  m.def("destroy_handle", [](Handle&) {}, nb::arg("handle"));
  m.def("set_stream", [](Handle& h, nb::handle stream) { h.stream = to_stream(stream); }, nb::arg("handle"),
        nb::arg("stream"));
  m.def("get_stream", [](const Handle& h) { return h.stream; }, nb::arg("handle"));

  m.def("get_last_error_string", []() { return t_last_error; },
        "The message of the last error opendnn raised in this thread (empty when none).");
  m.def("_to_pointer", [](nb::handle o) { return uintptr_t(to_pointer(o)); });
  m.def("_to_stream", [](nb::handle o) { return to_stream(o); });
  m.def("_dlpack_info", &dlpack_info);
  m.def("_data_type_bits", [](DataType t) { return bits_of(t); });
  m.def("build_info", []() {
    nb::dict d;
    d["version"] = kVersion;
    d["build_type"] = OPENDNN_BUILD_TYPE;
    d["tools"] = bool(OPENDNN_BUILD_TOOLS_ON);
    d["sanitize"] = OPENDNN_SANITIZE_FLAGS;
#if defined(__VERSION__)
    d["compiler"] = __VERSION__;
#endif
    d["cxx_standard"] = long(__cplusplus);
    d["nanobind"] = std::to_string(NB_VERSION_MAJOR) + "." + std::to_string(NB_VERSION_MINOR) + "." +
                    std::to_string(NB_VERSION_PATCH);
    return d;
  });

  bind_graph(m);
  bind_engines(m);
  m.def("_shutdown", &shutdown_engines);
}
