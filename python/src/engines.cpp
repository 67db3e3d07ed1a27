// SPDX-License-Identifier: Apache-2.0
// Engines written in Python: an adapter (trampoline) derives opendnn::Engine / opendnn::Plan and
// forwards each call to the Python object, holding the GIL for the call only.
//
// The Python side of the contract (duck-typed; opendnn.engines.Engine is a convenient base):
//   name, engine_id                 attributes or zero-argument methods (engine_id >= 20000)
//   serves(target) -> bool          optional (default: CPU targets only)
//   propose_plans(graph, target)    -> list of plan dicts, or a list of strings (declines), or
//                                      {"plans": [...], "declines": [...]}; raising
//                                      NotImplementedError / NotSupportedError / ImportError declines
//   build_plan(graph, target, plan) -> object with execute(slot_pointers, workspace, stream) and
//                                      workspace_size (attribute or method)
//   build_id                        optional (attribute or method): what a serialized plan of this
//                                      engine must match to be restored (e.g. the engine's version)
#include <nanobind/stl/pair.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <atomic>
#include <mutex>

#include "common.h"

namespace opendnn::py {
namespace {

std::atomic<bool> g_shutting_down{false};
std::mutex g_mu;
std::vector<int64_t> g_python_engine_ids;

// Drops a Python reference from C++ code that may run without the GIL (or after finalization).
void release_object(nb::object& o) {
  if (!o.is_valid()) return;
  if (g_shutting_down.load() || !Py_IsInitialized()) {
    (void)o.release();  // leak rather than touch a dying interpreter
    return;
  }
  nb::gil_scoped_acquire g;
  o.reset();
}

// "ZeroDivisionError: boom" (the traceback stays out of status messages).
std::string python_error_text(const nb::python_error& e) {
  try {
    std::string type = nb::cast<std::string>(nb::handle(e.type()).attr("__name__"));
    std::string value = nb::cast<std::string>(nb::str(e.value()));
    return value.empty() ? type : type + ": " + value;
  } catch (...) {
    return "an exception";
  }
}

nb::object call_or_value(nb::handle obj, const char* attr) {
  nb::object v = nb::getattr(obj, attr, nb::none());
  if (PyCallable_Check(v.ptr())) return v();
  return v;
}

nb::object graph_object(const Graph& g) {
  // The graph behind an opendnn.pygraph is found in nanobind's instance table, so the engine
  // sees the user's own object; other graphs are exposed through the read-only base class.
  nb::handle h = nb::find(static_cast<const PyGraph*>(&g));
  if (h.is_valid()) return nb::borrow(h);
  return nb::cast(&g, nb::rv_policy::reference);
}

// The number of slots of the variant pack for a graph (what Plan::execute receives).
size_t slot_count(const Graph& g) {
  size_t n = g.variant_uids().size();
  if (n) return n;
  for (const auto& t : g.tensors())
    if (!t->get_is_virtual() && !(t->get_is_pass_by_value() && t->get_value().is_set())) ++n;
  return n;
}

bool is_decline(const nb::python_error& e) {
  static nb::object not_supported;
  if (!not_supported.is_valid()) {
    nb::object m = nb::module_::import_("opendnn._C");
    not_supported = m.attr("cudnnGraphNotSupportedError");
  }
  return e.matches(PyExc_NotImplementedError) || e.matches(PyExc_ImportError) || e.matches(not_supported);
}

class PyPlan final : public Plan {
 public:
  PyPlan(nb::object obj, int64_t ws, size_t nslots) : obj_(std::move(obj)), ws_(ws), nslots_(nslots) {
    exec_ = obj_.attr("execute");
  }
  ~PyPlan() override {
    release_object(exec_);
    release_object(obj_);
  }
  Status execute(void* const* slot_pointers, void* workspace, void* stream) override {
    nb::gil_scoped_acquire g;
    try {
      nb::list slots;
      for (size_t i = 0; i < nslots_; ++i) slots.append(uintptr_t(slot_pointers[i]));
      exec_(slots, uintptr_t(workspace), uintptr_t(stream));
    } catch (nb::python_error& e) {
      return {ErrorCode::GRAPH_EXECUTION_FAILED, "python plan raised " + python_error_text(e)};
    } catch (const std::exception& e) {
      return {ErrorCode::GRAPH_EXECUTION_FAILED, std::string("python plan failed: ") + e.what()};
    }
    return {};
  }
  int64_t workspace_size() const override { return ws_; }

 private:
  nb::object obj_, exec_;
  int64_t ws_;
  size_t nslots_;
};

class PyEngine final : public Engine {
 public:
  PyEngine(nb::object obj, std::string name, int64_t id) : obj_(std::move(obj)), name_(std::move(name)), id_(id) {}
  ~PyEngine() override { release_object(obj_); }

  std::string_view name() const override { return name_; }
  int64_t engine_id() const override { return id_; }

  bool serves(const Target& target) const override {
    nb::gil_scoped_acquire g;
    try {
      nb::object f = nb::getattr(obj_, "serves", nb::none());
      if (f.is_none()) return target.kind == DeviceKind::CPU;
      return nb::cast<bool>(f(target));
    } catch (nb::python_error& e) {
      e.discard_as_unraisable("opendnn python engine serves()");
      return false;
    }
  }

  // The library's build id, then the engine's own `build_id` (attribute or method) when it has one.
  std::string build_id() const override {
    std::string id = Engine::build_id();
    if (g_shutting_down.load() || !Py_IsInitialized()) return id;
    nb::gil_scoped_acquire g;
    try {
      nb::object v = call_or_value(obj_, "build_id");
      if (!v.is_none()) id += " " + name_ + " " + nb::cast<std::string>(nb::str(v));
    } catch (nb::python_error& e) {
      e.discard_as_unraisable("opendnn python engine build_id");
    }
    return id;
  }

  Proposal propose_plans(const Graph& graph, const Target& target) override {
    nb::gil_scoped_acquire g;
    Proposal p;
    try {
      nb::object r = obj_.attr("propose_plans")(graph_object(graph), target);
      parse_proposal(r, p);
    } catch (nb::python_error& e) {
      p.plans.clear();
      p.declines.push_back(name_ + ": " + (is_decline(e) ? "" : "raised ") + python_error_text(e));
    } catch (const std::exception& e) {
      p.plans.clear();
      p.declines.push_back(name_ + ": bad proposal: " + e.what());
    }
    return p;
  }

  Status build_plan(const Graph& graph, const Target& target, const PlanCandidate& c,
                    std::unique_ptr<Plan>& out) override {
    nb::gil_scoped_acquire g;
    try {
      nb::dict cand;
      cand["name"] = c.name;
      cand["local_index"] = c.local_index;
      cand["estimated_us"] = c.estimated_us;
      cand["workspace_bytes"] = c.workspace_bytes;
      cand["deterministic"] = c.deterministic;
      nb::dict knobs;
      for (const auto& [k, v] : c.knobs) knobs[k.c_str()] = v;
      cand["knobs"] = knobs;
      nb::object plan = obj_.attr("build_plan")(graph_object(graph), target, cand);
      if (plan.is_none()) return {ErrorCode::GRAPH_EXECUTION_PLAN_CREATION_FAILED, name_ + ": build_plan returned None"};
      nb::object ws = call_or_value(plan, "workspace_size");
      int64_t bytes = ws.is_none() ? c.workspace_bytes : nb::cast<int64_t>(ws);
      out = std::make_unique<PyPlan>(std::move(plan), bytes, slot_count(graph));
    } catch (nb::python_error& e) {
      return {ErrorCode::GRAPH_EXECUTION_PLAN_CREATION_FAILED, name_ + ": build_plan raised " + python_error_text(e)};
    } catch (const std::exception& e) {
      return {ErrorCode::GRAPH_EXECUTION_PLAN_CREATION_FAILED, name_ + ": build_plan failed: " + e.what()};
    }
    return {};
  }

 private:
  static void parse_plan(nb::handle d, int64_t index, PlanCandidate& c) {
    c.local_index = index;
    c.name = "plan" + std::to_string(index);
    if (!nb::isinstance<nb::dict>(d)) throw std::runtime_error("a plan must be a dict");
    nb::dict dd = nb::borrow<nb::dict>(d);
    if (dd.contains("name")) c.name = nb::cast<std::string>(dd["name"]);
    if (dd.contains("local_index")) c.local_index = nb::cast<int64_t>(dd["local_index"]);
    if (dd.contains("estimated_us")) c.estimated_us = nb::cast<double>(dd["estimated_us"]);
    if (dd.contains("workspace_bytes")) c.workspace_bytes = nb::cast<int64_t>(dd["workspace_bytes"]);
    if (dd.contains("deterministic")) c.deterministic = nb::cast<bool>(dd["deterministic"]);
    if (dd.contains("knobs"))
      for (auto [k, v] : nb::borrow<nb::dict>(dd["knobs"]))
        c.knobs.emplace_back(knob_name(k), nb::cast<int64_t>(v));
    // {"TILE_M": (min, max, stride)} or {"TILE_M": [values...]}: what create_execution_plan may set.
    if (dd.contains("knob_ranges"))
      for (auto [k, v] : nb::borrow<nb::dict>(dd["knob_ranges"])) {
        KnobRange r;
        r.name = knob_name(k);
        if (nb::isinstance<nb::tuple>(v)) {
          auto t = nb::cast<std::tuple<int64_t, int64_t, int64_t>>(v);
          r.min_value = std::get<0>(t);
          r.max_value = std::get<1>(t);
          r.stride = std::get<2>(t);
        } else {
          r.values = nb::cast<std::vector<int64_t>>(v);
          if (r.values.empty()) throw std::runtime_error("knob range " + r.name + " lists no value");
        }
        c.knob_ranges.push_back(std::move(r));
      }
    if (dd.contains("numerical_notes"))
      for (nb::handle h : nb::borrow<nb::iterable>(dd["numerical_notes"])) c.numerical_notes.push_back(nb::cast<NumericalNote>(h));
    if (dd.contains("behavior_notes"))
      for (nb::handle h : nb::borrow<nb::iterable>(dd["behavior_notes"])) c.behavior_notes.push_back(nb::cast<BehaviorNote>(h));
  }

  // A knob key: a knob_type member or its name.
  static std::string knob_name(nb::handle k) {
    KnobType t;
    if (nb::try_cast<KnobType>(k, t, false)) return std::string(to_string(t));
    return nb::cast<std::string>(nb::str(k));
  }

  void parse_proposal(nb::handle r, Proposal& p) const {
    if (r.is_none()) {
      p.declines.push_back(name_ + ": declined");
      return;
    }
    nb::object plans = nb::none(), declines = nb::none();
    if (nb::isinstance<nb::dict>(r)) {
      nb::dict d = nb::borrow<nb::dict>(r);
      if (d.contains("plans")) plans = d["plans"];
      if (d.contains("declines")) declines = d["declines"];
    } else if (nb::isinstance<nb::str>(r)) {
      p.declines.push_back(name_ + ": " + nb::cast<std::string>(r));
      return;
    } else {
      nb::list items(r);
      nb::list ps, ds;
      for (nb::handle h : items) (nb::isinstance<nb::str>(h) ? ds : ps).append(h);
      plans = ps;
      declines = ds;
    }
    int64_t i = 0;
    if (!plans.is_none())
      for (nb::handle h : plans) {
        PlanCandidate c;
        parse_plan(h, i++, c);
        p.plans.push_back(std::move(c));
      }
    if (!declines.is_none())
      for (nb::handle h : declines) p.declines.push_back(name_ + ": " + nb::cast<std::string>(nb::str(h)));
    if (p.plans.empty() && p.declines.empty()) p.declines.push_back(name_ + ": proposed no plans");
  }

  nb::object obj_;
  std::string name_;
  int64_t id_;
};

}  // namespace

void shutdown_engines() {
  std::vector<int64_t> ids;
  {
    std::lock_guard<std::mutex> l(g_mu);
    ids.swap(g_python_engine_ids);
  }
  for (int64_t id : ids) unregister_engine(id);
  g_shutting_down = true;
}

namespace {

// The address behind a cudaGraph_t given from Python: an int, or cuda-python's object (getPtr / int()).
void* graph_pointer(nb::handle g) {
  if (PyLong_Check(g.ptr())) return reinterpret_cast<void*>(nb::cast<uintptr_t>(g));
  nb::object get = nb::getattr(g, "getPtr", nb::none());
  if (!get.is_none()) return reinterpret_cast<void*>(nb::cast<uintptr_t>(get()));
  nb::object idx = nb::getattr(g, "__int__", nb::none());
  if (!idx.is_none()) return reinterpret_cast<void*>(nb::cast<uintptr_t>(idx()));
  throw nb::type_error("cuda_graph must be a cudaGraph_t: an int or a cuda-python cudaGraph_t");
}

void bind_plan_types(nb::module_& m) {
  auto kt = nb::enum_<KnobType>(m, "knob_type");
  kt.value("NOT_SET", KnobType::NOT_SET);
#define OPENDNN_KNOB_VALUE(n, v) kt.value(#n, KnobType::n);
  OPENDNN_KNOB_TYPES(OPENDNN_KNOB_VALUE)
#undef OPENDNN_KNOB_VALUE
  auto nn = nb::enum_<NumericalNote>(m, "numerical_note");
  for (int i = 0; !to_string(NumericalNote(i)).empty(); ++i)
    nn.value(std::string(to_string(NumericalNote(i))).c_str(), NumericalNote(i));
  auto bn = nb::enum_<BehaviorNote>(m, "behavior_note");
  for (int i = 0; !to_string(BehaviorNote(i)).empty(); ++i)
    bn.value(std::string(to_string(BehaviorNote(i))).c_str(), BehaviorNote(i));

  nb::class_<PyKnob>(m, "knob")
      .def(nb::init<>())
      .def("__init__",
           [](PyKnob* k, KnobType type, int64_t max_value, int64_t min_value, int64_t stride) {
             new (k) PyKnob{type, max_value, min_value, stride};
           },
           nb::arg("knob_type"), nb::arg("max_value"), nb::arg("min_value"), nb::arg("stride"))
      .def_rw("type", &PyKnob::type)
      .def_rw("max_value", &PyKnob::max_value)
      .def_rw("min_value", &PyKnob::min_value)
      .def_rw("stride", &PyKnob::stride)
      .def("__repr__", [](const PyKnob& k) {
        return "<opendnn.knob " + std::string(to_string(k.type)) + " min=" + std::to_string(k.min_value) +
               " max=" + std::to_string(k.max_value) + " stride=" + std::to_string(k.stride) + ">";
      });

  nb::class_<KernelCache>(m, "kernel_cache")
      .def(nb::init<>())
      .def("serialize", [](const KernelCache& c) {
        std::string out;
        check(c.serialize(out));
        return out;
      })
      .def("deserialize", [](KernelCache& c, std::string text) { check(c.deserialize(text)); }, nb::arg("data"))
      .def("__len__", &KernelCache::size);
  m.def("create_kernel_cache", []() { return std::make_shared<KernelCache>(); });
  m.def("_probe_device_properties", [](int device) {
    Target t;
    check(probe_device_properties(device, t));
    return t;
  }, nb::arg("device_id"));
  m.def("_graph_pointer", [](nb::handle g) { return uintptr_t(graph_pointer(g)); });
}

}  // namespace

void bind_engines(nb::module_& m) {
  bind_plan_types(m);
  nb::enum_<DeviceKind>(m, "device_kind", nb::is_arithmetic()).value("CPU", DeviceKind::CPU).value("CUDA", DeviceKind::CUDA);
  nb::class_<Target>(m, "Target")
      .def(nb::init<>())
      .def("__init__",
           [](Target* t, DeviceKind kind, int device, int sm_version, int sm_count) {
             new (t) Target{kind, device, sm_version, sm_count};
           },
           nb::arg("kind"), nb::arg("device") = -1, nb::arg("sm_version") = 0, nb::arg("sm_count") = 0)
      .def_rw("kind", &Target::kind)
      .def_rw("device", &Target::device)
      .def_rw("sm_version", &Target::sm_version)
      .def_rw("sm_count", &Target::sm_count)
      .def("__repr__", [](const Target& t) {
        return std::string("<opendnn.Target ") + (t.kind == DeviceKind::CPU ? "CPU" : "CUDA") +
               " device=" + std::to_string(t.device) + " sm_version=" + std::to_string(t.sm_version) + ">";
      });
  m.def("default_target", &default_target);
  m.def("set_default_target", &set_default_target, nb::arg("target"));
  m.attr("PYTHON_ENGINE_ID_BASE") = kPythonEngineIdBase;

  m.def("register_engine", [](nb::object obj) {
    nb::object name = call_or_value(obj, "name");
    nb::object id = call_or_value(obj, "engine_id");
    if (name.is_none() || id.is_none()) throw nb::type_error("an engine needs a name and an engine_id");
    int64_t eid = nb::cast<int64_t>(id);
    if (eid < kPythonEngineIdBase)
      throw nb::value_error(("engine_id " + std::to_string(eid) + " is outside the Python engine range (>= " +
                             std::to_string(kPythonEngineIdBase) + ")")
                                .c_str());
    for (const char* a : {"propose_plans", "build_plan"})
      if (!nb::hasattr(obj, a)) throw nb::type_error((std::string("an engine needs a ") + a + "() method").c_str());
    register_engine(std::make_shared<PyEngine>(obj, nb::cast<std::string>(nb::str(name)), eid));
    std::lock_guard<std::mutex> l(g_mu);
    g_python_engine_ids.push_back(eid);
    return eid;
  }, nb::arg("engine"));
  m.def("unregister_engine", [](int64_t id) {
    {
      std::lock_guard<std::mutex> l(g_mu);
      std::erase(g_python_engine_ids, id);
    }
    nb::gil_scoped_release r;  // the engine's destructor takes the GIL itself
    unregister_engine(id);
  }, nb::arg("engine_id"));
  m.def("registered_engines", []() {
    std::vector<std::pair<int64_t, std::string>> out;
    for (const auto& e : registered_engines()) out.emplace_back(e->engine_id(), std::string(e->name()));
    return out;
  });
}

}  // namespace opendnn::py
