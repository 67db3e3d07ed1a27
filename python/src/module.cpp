// SPDX-License-Identifier: Apache-2.0
// The opendnn._C module: enums, errors, handles and build information.
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <memory>
#include <unordered_map>

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

// ---- handles -------------------------------------------------------------------------------

namespace {

// Live handles by their int value (the address of their state, as a cudnnHandle_t is an address).
std::unordered_map<uintptr_t, HandlePtr>& handle_registry() {
  static auto* r = new std::unordered_map<uintptr_t, HandlePtr>();  // never destroyed: used at exit
  return *r;
}
PyObject* g_handle_type = nullptr;  // opendnn.handle, an int subclass

HandlePtr find_handle(nb::handle h) {
  if (!PyLong_Check(h.ptr()) || PyBool_Check(h.ptr())) return nullptr;
  unsigned long long v = PyLong_AsUnsignedLongLong(h.ptr());
  if (v == (unsigned long long)-1 && PyErr_Occurred()) {
    PyErr_Clear();
    return nullptr;
  }
  auto it = handle_registry().find(uintptr_t(v));
  return it == handle_registry().end() ? nullptr : it->second;
}

nb::object create_handle() {
  auto st = std::make_shared<HandleState>();
  uintptr_t id = reinterpret_cast<uintptr_t>(st.get());
  handle_registry()[id] = st;
  return nb::steal(PyObject_CallFunction(g_handle_type, "K", (unsigned long long)id));
}

}  // namespace

HandlePtr handle_state(nb::handle h) {
  if (HandlePtr st = find_handle(h)) return st;
  if (PyLong_Check(h.ptr()))
    throw nb::value_error(("handle " + nb::cast<std::string>(nb::str(h)) +
                           " was not made by create_handle() (or was destroyed); a stream is set with "
                           "set_stream(handle, stream)")
                              .c_str());
  throw nb::type_error(("handle must be an int from create_handle(), not " +
                        std::string(Py_TYPE(h.ptr())->tp_name))
                           .c_str());
}

HandlePtr handle_or_stream(nb::handle h) {
  if (h.is_none()) return nullptr;
  if (PyLong_Check(h.ptr())) return handle_state(h);
  auto st = std::make_shared<HandleState>();  // a stream object: this stream, always
  st->stream = to_stream(h);
  return st;
}

uintptr_t to_stream(nb::handle h) {
  if (h.is_none()) return 0;
  if (PyLong_Check(h.ptr())) {
    if (PyBool_Check(h.ptr())) throw nb::type_error("stream must be an int or a stream object, not a bool");
    return nb::cast<uintptr_t>(h);
  }
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

  {
    // opendnn.handle: an int (like cuDNN Frontend's cudnnHandle_t) naming a handle made by create_handle().
    nb::dict ns;
    ns["__module__"] = "opendnn";
    ns["__doc__"] = "A handle made by create_handle(): an int, as cuDNN Frontend's cudnnHandle_t.";
    ns["__slots__"] = nb::tuple();
    nb::object type_type = nb::borrow(reinterpret_cast<PyObject*>(&PyType_Type));
    nb::object cls = type_type("handle", nb::make_tuple(nb::borrow(reinterpret_cast<PyObject*>(&PyLong_Type))), ns);
    g_handle_type = cls.inc_ref().ptr();  // kept for the process
    m.attr("handle") = cls;
  }
  m.def("create_handle", &create_handle);
  m.def("destroy_handle", [](nb::handle h) {
    HandlePtr st = handle_state(h);
    handle_registry().erase(reinterpret_cast<uintptr_t>(st.get()));
  }, nb::arg("handle"));
  m.def("set_stream", [](nb::handle h, nb::handle stream) { handle_state(h)->stream = to_stream(stream); },
        nb::arg("handle"), nb::arg("stream"));
  m.def("get_stream", [](nb::handle h) { return handle_state(h)->stream; }, nb::arg("handle"));

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
