// SPDX-License-Identifier: Apache-2.0
// Bindings of tensors, the op catalogue and the graph (lifecycle and the execute hot path).
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/unordered_map.h>
#include <nanobind/stl/vector.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <unordered_map>

#include "common.h"
#include "common/dtype_convert.h"

namespace opendnn::py {
namespace {

// ---- attribute values --------------------------------------------------------------------------

std::string enum_name(nb::handle v) {
  if (nb::isinstance<nb::str>(v)) return nb::cast<std::string>(v);
  nb::object name = nb::getattr(v, "name", nb::none());  // python and nanobind enums
  if (!name.is_none()) return nb::cast<std::string>(name);
  throw nb::type_error("expected an enum member or its name");
}

AttrValue attr_from_python(nb::handle v, const AttrSpec* spec) {
  if (v.is_none()) return {};
  PyObject* o = v.ptr();
  AttrType type;
  if (spec) {
    type = spec->type;
  } else if (PyBool_Check(o)) {
    type = AttrType::BOOL;
  } else if (PyLong_Check(o)) {
    type = AttrType::INT;
  } else if (PyFloat_Check(o)) {
    type = AttrType::FLOAT;
  } else if (nb::isinstance<nb::str>(v) || nb::hasattr(v, "name")) {
    type = AttrType::ENUM;
  } else {
    type = AttrType::FLOAT_LIST;
    for (nb::handle e : v)
      if (!PyFloat_Check(e.ptr())) type = AttrType::INT_LIST;
  }
  const char* name = spec ? spec->name : "attribute";
  try {
    switch (type) {
      case AttrType::BOOL:
        if (!PyBool_Check(o) && !PyLong_Check(o)) break;
        return bool(PyObject_IsTrue(o));
      case AttrType::INT:
        if (PyBool_Check(o) || !PyLong_Check(o)) {
          nb::object idx = nb::getattr(v, "__index__", nb::none());
          if (idx.is_none() || PyBool_Check(o)) break;
          return nb::cast<int64_t>(idx());
        }
        return nb::cast<int64_t>(v);
      case AttrType::FLOAT:
        if (PyBool_Check(o)) break;
        {
          double d = PyFloat_AsDouble(o);
          if (d == -1.0 && PyErr_Occurred()) {
            PyErr_Clear();
            break;
          }
          return d;
        }
      case AttrType::ENUM:
      case AttrType::STRING:
        return enum_name(v);
      case AttrType::INT_LIST: {
        std::vector<int64_t> out;
        for (nb::handle e : v) {
          if (PyBool_Check(e.ptr())) throw nb::type_error("bool in an int list");
          out.push_back(nb::cast<int64_t>(e));
        }
        return out;
      }
      case AttrType::FLOAT_LIST: {
        std::vector<double> out;
        for (nb::handle e : v) out.push_back(nb::cast<double>(e));
        return out;
      }
    }
  } catch (const nb::cast_error&) {
  } catch (const nb::builtin_exception&) {
  }
  throw nb::type_error((std::string(name) + " must be " + std::string(to_string(type)) + ", got " +
                        nb::cast<std::string>(nb::str(v.type().attr("__name__"))))
                           .c_str());
}

nb::object attr_to_python(const AttrValue& v) {
  return std::visit(
      [](const auto& x) -> nb::object {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, std::monostate>) return nb::none();
        else return nb::cast(x);
      },
      static_cast<const AttrVariant&>(v));
}

// ---- the catalogue -----------------------------------------------------------------------------

nb::list op_specs() {
  nb::list out;
  for (const OpSpec& s : all_op_specs()) {
    nb::dict d;
    d["kind"] = int(s.kind);
    d["tag"] = s.tag;
    d["method"] = s.method;
    d["positional"] = s.positional;
    d["num_outputs"] = s.num_outputs;
    nb::list ins, outs, attrs;
    for (const PortSpec& p : s.def->inputs)
      ins.append(nb::make_tuple(p.name, p.required, p.py_name ? nb::object(nb::str(p.py_name)) : nb::none()));
    for (const PortSpec& p : s.def->outputs)
      outs.append(nb::make_tuple(p.name, p.required, p.py_name ? nb::object(nb::str(p.py_name)) : nb::none()));
    for (const AttrSpec& a : s.def->attrs)
      attrs.append(nb::make_tuple(a.name, std::string(to_string(a.type)), attr_to_python(a.default_value),
                                  a.choices ? nb::object(nb::str(a.choices)) : nb::none()));
    d["inputs"] = ins;
    d["outputs"] = outs;
    d["attrs"] = attrs;
    d["has_rules"] = s.def->infer != nullptr;
    out.append(d);
  }
  return out;
}

nb::list pointwise_modes() {
  nb::list out;
  for (int i = 0;; ++i) {
    auto m = static_cast<PointwiseMode>(i);
    std::string_view name = to_string(m);
    out.append(nb::make_tuple(std::string(name), std::string(pointwise_method(m)), pointwise_arity(m)));
    if (name == "BINARY_SELECT") break;  // the last mode of pointwise_modes.def
  }
  return out;
}

// ---- nodes -------------------------------------------------------------------------------------

std::vector<TensorPtr> add_node(Graph& g, int kind, nb::list positional, nb::dict inputs, nb::dict attrs,
                                const std::string& name, nb::handle compute) {
  if (kind < 0 || kind >= kNumOps) throw nb::value_error("unknown op kind");
  const OpSpec& spec = op_spec(static_cast<OpKind>(kind));
  std::vector<TensorPtr> pos;
  pos.reserve(positional.size());
  for (nb::handle h : positional) pos.push_back(h.is_none() ? nullptr : nb::cast<TensorPtr>(h));
  NodeAttrs na;
  na.set_name(name);
  if (!compute.is_none()) na.set_compute_data_type(to_data_type(compute));
  for (auto [k, v] : inputs) {
    if (v.is_none()) continue;
    na.input(nb::cast<std::string>(k), nb::cast<TensorPtr>(v));
  }
  for (auto [k, v] : attrs) {
    std::string key = nb::cast<std::string>(k);
    int i = spec.attr_index(key);
    AttrValue val = attr_from_python(v, i >= 0 ? &spec.def->attrs[size_t(i)] : nullptr);
    if (val.is_set()) na.set(key, std::move(val));
  }
  return g.add_node(spec.kind, std::move(pos), std::move(na));
}

nb::list nodes_info(const Graph& g) {
  nb::list out;
  for (const auto& n : g.nodes()) {
    const OpSpec& s = n->spec();
    nb::dict d, ins, outs, attrs;
    d["name"] = n->name();
    d["method"] = s.method;
    d["tag"] = s.tag;
    d["kind"] = int(s.kind);
    d["compute_data_type"] = n->compute_data_type();
    for (size_t i = 0; i < n->num_ports(); ++i) {
      std::string port = s.variadic() ? std::to_string(i) : s.def->inputs[i].name;
      ins[port.c_str()] = n->inputs()[i] ? nb::cast(n->inputs()[i]) : nb::none();
    }
    nb::list subs;
    for (const auto& sg : n->subgraphs()) {
      nb::dict sd;
      sd["name"] = sg->name;
      sd["input"] = nb::cast(sg->input);
      sd["output"] = nb::cast(sg->output);
      nb::list modes;
      for (const auto& sub : sg->nodes) modes.append(std::string(to_string(sub->pointwise_mode())));
      sd["modes"] = modes;
      subs.append(sd);
    }
    d["subgraphs"] = subs;
    for (size_t i = 0; i < n->outputs().size(); ++i)
      outs[s.def->outputs[i].name] = n->outputs()[i] ? nb::cast(n->outputs()[i]) : nb::none();
    for (size_t i = 0; i < n->attrs().size(); ++i)
      if (n->attrs()[i].is_set()) attrs[s.def->attrs[i].name] = attr_to_python(n->attrs()[i]);
    d["inputs"] = ins;
    d["outputs"] = outs;
    d["attrs"] = attrs;
    out.append(d);
  }
  return out;
}

// Makes `user` the tensor a node writes in place of `created` (cuDNN Frontend passes some output
// tensors in, e.g. sdpa's rng_dump).
void bind_output(Graph& g, const TensorPtr& created, const TensorPtr& user) {
  for (auto& n : g.mutable_nodes())
    for (auto& t : n->outputs())
      if (t == created) {
        t = user;
        user->mark_produced(true);
        return;
      }
  throw nb::value_error("the tensor is not an output of any node of this graph");
}

std::vector<HeurMode> to_modes(nb::handle modes) {
  std::vector<HeurMode> out;
  HeurMode m;
  if (nb::try_cast<HeurMode>(modes, m, false)) return {m};
  auto type_name = [](nb::handle h) { return std::string(Py_TYPE(h.ptr())->tp_name); };
  if (nb::isinstance<nb::str>(modes) || !PyObject_HasAttrString(modes.ptr(), "__iter__"))
    throw nb::type_error(("heur_mode: expected an opendnn.heur_mode or a list of them, got " + type_name(modes)).c_str());
  for (nb::handle h : modes) {
    if (!nb::try_cast<HeurMode>(h, m, false))
      throw nb::type_error(("heur_mode: expected opendnn.heur_mode members, got " +
                            nb::cast<std::string>(nb::repr(h)) + " (" + type_name(h) + ")")
                               .c_str());
    out.push_back(m);
  }
  return out;
}

void create_plans(Graph& g, nb::handle modes) {
  auto ms = to_modes(modes);
  Status s;
  { nb::gil_scoped_release r; s = g.create_execution_plans(ms); }
  check(s);
}

void build_all(Graph& g, nb::handle modes, BuildPlanPolicy p) {
  auto ms = to_modes(modes);
  Status s;
  { nb::gil_scoped_release r; s = g.build(ms, p); }
  check(s);
}

// ---- execute -----------------------------------------------------------------------------------

uintptr_t stream_for(const PyGraph& g, nb::handle handle) {
  if (handle.is_none()) return g.hs ? g.hs->stream : 0;
  if (PyLong_Check(handle.ptr())) return handle_state(handle)->stream;
  return to_stream(handle);
}

std::vector<int64_t> int_list(nb::handle seq, const char* what) {
  std::vector<int64_t> out;
  for (nb::handle e : seq) {
    if (!PyLong_Check(e.ptr()) || PyBool_Check(e.ptr()))
      throw nb::type_error((std::string(what) + " must hold ints, got " + Py_TYPE(e.ptr())->tp_name).c_str());
    out.push_back(nb::cast<int64_t>(e));
  }
  return out;
}

// Shape overrides: the plans are built for the graph's own dims and strides, so an override must
// restate them; anything else is refused (running a fixed-shape plan on other shapes would read or
// write the wrong elements).
void check_overrides(const PyGraph& g, nb::handle uids, nb::handle shapes, nb::handle strides) {
  if (uids.is_none() && shapes.is_none() && strides.is_none()) return;
  if (uids.is_none()) throw nb::value_error("override_shapes/override_strides need override_uids");
  std::vector<int64_t> us = int_list(uids, "override_uids");
  size_t ns = shapes.is_none() ? us.size() : nb::len(shapes), nt = strides.is_none() ? us.size() : nb::len(strides);
  if (ns != us.size() || nt != us.size())
    throw nb::value_error(("override_uids has " + std::to_string(us.size()) + " entries but override_shapes has " +
                           std::to_string(ns) + " and override_strides " + std::to_string(nt))
                              .c_str());
  for (size_t i = 0; i < us.size(); ++i) {
    TensorPtr t = g.find_tensor(us[i]);
    if (!t) throw nb::value_error(("override_uids: the graph has no tensor with uid " + std::to_string(us[i])).c_str());
    std::vector<int64_t> d = shapes.is_none() ? t->get_dim() : int_list(shapes[i], "override_shapes");
    std::vector<int64_t> s = strides.is_none() ? t->get_stride() : int_list(strides[i], "override_strides");
    if (d == t->get_dim() && s == t->get_stride()) continue;
    auto str = [](const std::vector<int64_t>& v) {
      std::string r = "[";
      for (size_t k = 0; k < v.size(); ++k) r += (k ? ", " : "") + std::to_string(v[k]);
      return r + "]";
    };
    throw NotSupportedError("not supported: execute with override_shapes/override_strides: tensor uid " +
                            std::to_string(us[i]) + " is given dims " + str(d) + " strides " + str(s) +
                            " but the plans were built for dims " + str(t->get_dim()) + " strides " +
                            str(t->get_stride()) + "; build the graph for these shapes");
  }
}

int64_t selected_workspace(const Graph& g) {
  int64_t b = 0;
  return g.get_workspace_size(b).is_good() ? b : 0;
}

// The largest workspace of the built plans autotune() runs.
int64_t autotune_workspace(const Graph& g) {
  int64_t need = 0;
  for (int64_t i = 0; i < g.get_execution_plan_count(); ++i) {
    PlanInfo info;
    if (g.get_plan_info_at_index(i, info).is_good() && info.built && !info.deselected)
      need = std::max(need, info.workspace_bytes);
  }
  return need;
}

std::unordered_map<int64_t, void*> uid_map(const PyGraph& g, void* const* slots) {
  std::unordered_map<int64_t, void*> out;
  const std::vector<int64_t>& uids = g.variant_uids();
  for (size_t i = 0; i < uids.size(); ++i) out[uids[i]] = slots[i];
  return out;
}

// Records the selected plan into a CUDA graph (populate_cuda_graph / update_cuda_graph), with the same
// variant-pack checks as execute().
void populate(PyGraph& g, nb::handle pack, nb::handle workspace, nb::handle cuda_graph, bool update) {
  SlotBuffer buf;
  void** slots = buf.get(g.variant_uids().size());
  resolve_pack(g, pack, slots);
  auto map = uid_map(g, slots);
  void* ws = resolve_workspace(workspace, selected_workspace(g));
  nb::object conv = nb::module_::import_("opendnn._C").attr("_graph_pointer");
  void* graph = reinterpret_cast<void*>(nb::cast<uintptr_t>(conv(cuda_graph)));
  Status s;
  {
    nb::gil_scoped_release r;
    s = g.populate_cuda_graph(map, ws, graph, update);
  }
  check(s);
}

// ---- tensors -----------------------------------------------------------------------------------

nb::object self_after(nb::handle self) { return nb::borrow(self); }

std::string tensor_repr(const TensorAttr& t) {
  auto vec = [](const std::vector<int64_t>& v) {
    std::string s = "[";
    for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
    return s + "]";
  };
  std::string s = "<opendnn.tensor";
  if (!t.get_name().empty()) s += " name=\"" + t.get_name() + "\"";
  if (t.has_uid()) s += " uid=" + std::to_string(t.get_uid());
  s += " dim=" + vec(t.get_dim()) + " stride=" + vec(t.get_stride()) + " data_type=" +
       std::string(to_string(t.get_data_type()));
  if (t.get_is_virtual()) s += " virtual";
  if (t.get_is_pass_by_value()) s += " pass_by_value";
  return s + ">";
}

}  // namespace

void bind_graph(nb::module_& m) {
  m.def("op_specs", &op_specs);
  m.def("pointwise_modes", &pointwise_modes);

  nb::class_<TensorAttr>(m, "tensor")
      .def(nb::init<>())
      .def("set_output", [](nb::handle self, bool v) { nb::cast<TensorAttr&>(self).set_output(v); return self_after(self); }, nb::arg("is_output"))
      .def("set_data_type", [](nb::handle self, nb::handle t) { nb::cast<TensorAttr&>(self).set_data_type(to_data_type(t)); return self_after(self); }, nb::arg("data_type"))
      .def("set_name", [](nb::handle self, std::string n) { nb::cast<TensorAttr&>(self).set_name(std::move(n)); return self_after(self); }, nb::arg("name"))
      .def("set_dim", [](nb::handle self, std::vector<int64_t> d) { nb::cast<TensorAttr&>(self).set_dim(std::move(d)); return self_after(self); }, nb::arg("dim"))
      .def("set_stride", [](nb::handle self, std::vector<int64_t> s) { nb::cast<TensorAttr&>(self).set_stride(std::move(s)); return self_after(self); }, nb::arg("stride"))
      .def("set_uid", [](nb::handle self, int64_t u) { nb::cast<TensorAttr&>(self).set_uid(u); return self_after(self); }, nb::arg("uid"))
      .def("clear_uid", [](nb::handle self) { nb::cast<TensorAttr&>(self).clear_uid(); return self_after(self); })
      .def("set_is_virtual", [](nb::handle self, bool v) { nb::cast<TensorAttr&>(self).set_is_virtual(v); return self_after(self); }, nb::arg("is_virtual"))
      .def("set_is_pass_by_value", [](nb::handle self, bool v) { nb::cast<TensorAttr&>(self).set_is_pass_by_value(v); return self_after(self); }, nb::arg("is_pass_by_value"))
      .def("set_ragged_offset", [](nb::handle self, TensorPtr r) { nb::cast<TensorAttr&>(self).set_ragged_offset(std::move(r)); return self_after(self); }, nb::arg("ragged_offset").none())
      .def("set_reordering_type", [](nb::handle self, TensorReordering r) { nb::cast<TensorAttr&>(self).set_reordering_type(r); return self_after(self); }, nb::arg("reordering_type"))
      .def("_set_value", [](nb::handle self, double f, int64_t i, DataType t) {
             nb::cast<TensorAttr&>(self).set_value(Scalar{t, f, i});
             return self_after(self);
           })
      .def("get_name", &TensorAttr::get_name)
      .def("get_dim", &TensorAttr::get_dim)
      .def("get_stride", &TensorAttr::get_stride)
      .def("get_data_type", &TensorAttr::get_data_type)
      .def("get_is_virtual", &TensorAttr::get_is_virtual)
      .def("get_is_output", &TensorAttr::get_is_output)
      .def("get_uid", &TensorAttr::get_uid)
      .def("has_uid", &TensorAttr::has_uid)
      .def("get_is_pass_by_value", &TensorAttr::get_is_pass_by_value)
      .def("get_ragged_offset", &TensorAttr::get_ragged_offset)
      .def("get_reordering_type", &TensorAttr::get_reordering_type)
      .def("_get_value", [](const TensorAttr& t) -> nb::object {
        const Scalar& v = t.get_value();
        if (!v.is_set()) return nb::none();
        if (is_integer(v.type)) return nb::cast(v.i);
        return nb::cast(v.f);
      })
      .def("_set_data_type", [](nb::handle self, DataType t) { nb::cast<TensorAttr&>(self).set_data_type(t); return self_after(self); }, nb::arg("data_type"))
      .def("get_alignment", &TensorAttr::get_alignment)
      .def("set_alignment", [](nb::handle self, int64_t a) { nb::cast<TensorAttr&>(self).set_alignment(a); return self_after(self); }, nb::arg("alignment"))
      .def("get_vector_count", &TensorAttr::get_vector_count)
      .def("get_vector_dimension", &TensorAttr::get_vector_dimension)
      .def("set_vector_count_and_dimension", [](nb::handle self, int64_t c, int64_t d) {
        nb::cast<TensorAttr&>(self).set_vector_count_and_dimension(c, d);
        return self_after(self);
      }, nb::arg("vector_count"), nb::arg("vector_dimension"))
      .def("get_has_compile_time_constant", &TensorAttr::get_has_compile_time_constant)
      .def("_copy", [](const TensorAttr& t) { return std::make_shared<TensorAttr>(t); })
      .def("volume", &TensorAttr::volume)
      .def("storage_bytes", &TensorAttr::storage_bytes)
      .def("__repr__", &tensor_repr);

  // The read-only view engines get of any graph, and the base of the user-facing graph class.
  nb::class_<Graph>(m, "GraphBase")
      .def("set_name", [](Graph& g, std::string n) { g.set_name(std::move(n)); })
      .def("get_name", [](const Graph& g) { return g.context().name; })
      .def("set_io_data_type", [](Graph& g, nb::handle t) { g.set_io_data_type(to_data_type(t)); })
      .def("set_intermediate_data_type", [](Graph& g, nb::handle t) { g.set_intermediate_data_type(to_data_type(t)); })
      .def("set_compute_data_type", [](Graph& g, nb::handle t) { g.set_compute_data_type(to_data_type(t)); })
      .def("set_sm_count", [](Graph& g, int64_t n) { g.set_sm_count(n); })
      .def("set_sm_version", [](Graph& g, int64_t v) { g.set_sm_version(v); })
      .def("get_io_data_type", [](const Graph& g) { return g.context().io_data_type; })
      .def("get_intermediate_data_type", [](const Graph& g) { return g.context().intermediate_data_type; })
      .def("get_compute_data_type", [](const Graph& g) { return g.context().compute_data_type; })
      .def("get_sm_count", [](const Graph& g) { return g.context().sm_count; })
      .def("get_sm_version", [](const Graph& g) { return g.context().sm_version; })
      .def("_tensor",
           [](Graph& g, std::vector<int64_t> dim, std::vector<int64_t> stride, DataType dt, bool is_virtual,
              bool pbv, TensorPtr ragged, TensorReordering reorder, std::string name, std::optional<int64_t> uid) {
             TensorAttr a;
             a.set_dim(std::move(dim)).set_stride(std::move(stride)).set_data_type(dt).set_is_virtual(is_virtual);
             a.set_is_pass_by_value(pbv).set_ragged_offset(std::move(ragged)).set_reordering_type(reorder);
             a.set_name(std::move(name));
             if (uid) a.set_uid(*uid);
             return g.tensor(a);
           },
           nb::arg("dim"), nb::arg("stride"), nb::arg("data_type"), nb::arg("is_virtual"), nb::arg("is_pass_by_value"),
           nb::arg("ragged_offset").none(), nb::arg("reordering_type"), nb::arg("name"), nb::arg("uid").none())
      .def("_tensor_scalar",
           [](Graph& g, double f, int64_t i, DataType t) { return g.tensor(Scalar{t, f, i}); })
      .def("_tensor_like", [](Graph& g, const TensorPtr& like, std::string name) { return g.tensor_like(like, std::move(name)); })
      .def("_add_node", &add_node, nb::arg("kind"), nb::arg("positional"), nb::arg("inputs"), nb::arg("attrs"),
           nb::arg("name"), nb::arg("compute_data_type").none())
      .def("_bind_output", &bind_output)
      .def("nodes_info", &nodes_info)
      .def("_node_count", [](const Graph& g) { return g.nodes().size(); })
      .def("_attach_subgraph", [](Graph& g, size_t owner, std::string name, TensorPtr input, TensorPtr output, size_t first) {
        if (owner >= g.nodes().size()) throw nb::index_error("no node at that index");
        check(g.attach_subgraph(*g.nodes()[owner], std::move(name), std::move(input), std::move(output), first));
      })
      .def("tensors", &Graph::tensors)
      .def("find_tensor", &Graph::find_tensor)
      .def("variant_uids", &Graph::variant_uids)
      .def("is_validated", &Graph::is_validated)
      .def("_validate", [](Graph& g) { check(g.validate()); })
      .def("_assign_uids", [](Graph& g) { check(g.assign_uids()); })
      .def("_build_operation_graph", [](Graph& g) { check(g.build_operation_graph()); })
      .def("_create_execution_plans", &create_plans)
      .def("_check_support", [](Graph& g) {
        Status s;
        { nb::gil_scoped_release r; s = g.check_support(); }
        check(s);
      })
      .def("_build_plans", [](Graph& g, BuildPlanPolicy p) {
        Status s;
        { nb::gil_scoped_release r; s = g.build_plans(p); }
        check(s);
      })
      .def("build_plan_at_index", [](Graph& g, int64_t i) {
        Status s;
        { nb::gil_scoped_release r; s = g.build_plan_at_index(i); }
        check(s);
      }, nb::arg("index"))
      .def("_build", &build_all)
      .def("get_execution_plan_count", &Graph::get_execution_plan_count)
      .def("get_plan_name_at_index", [](const Graph& g, int64_t i) {
        std::string n;
        check(g.get_plan_name_at_index(i, n));
        return n;
      }, nb::arg("index"))
      .def("get_engine_name_at_index", [](const Graph& g, int64_t i) {
        std::string n;
        check(g.get_engine_name_at_index(i, n));
        return n;
      }, nb::arg("index"))
      .def("get_workspace_size", [](const Graph& g) {
        int64_t b = 0;
        check(g.get_workspace_size(b));
        return b;
      })
      .def("get_workspace_size_plan_at_index", [](const Graph& g, int64_t i) {
        int64_t b = 0;
        check(g.get_workspace_size_plan_at_index(i, b));
        return b;
      }, nb::arg("index"))
      .def("select_plan", [](Graph& g, int64_t i) { check(g.select_plan(i)); }, nb::arg("index"))
      .def("selected_plan", &Graph::selected_plan)
      .def("deselect_engines", [](Graph& g, std::vector<std::string> names) { check(g.deselect_engines(names)); },
           nb::arg("engine_names"))
      .def("deselect_workspace_greater_than", [](Graph& g, int64_t b) { check(g.deselect_workspace_greater_than(b)); },
           nb::arg("workspace"))
      .def("_serialize", [](const Graph& g, bool structure) {
        std::string out;
        check(g.serialize(out, structure));
        return out;
      })
      .def("_deserialize", [](Graph& g, std::string json) { check(g.deserialize(json)); })
      .def("key", &Graph::key)
      // ---- engines, knobs and notes (cuDNN Frontend's names)
      .def("get_engine_count", [](Graph& g) {
        int64_t n = 0;
        Status s;
        { nb::gil_scoped_release r; s = g.get_engine_count(n); }
        check(s);
        return n;
      })
      .def("get_knobs_for_engine", [](Graph& g, int64_t engine) {
        std::vector<KnobRange> ks;
        Status s;
        { nb::gil_scoped_release r; s = g.get_knobs_for_engine(engine, ks); }
        check(s);
        std::vector<PyKnob> out;
        for (const auto& k : ks) out.push_back({knob_type_from_name(k.name), k.max_value, k.min_value, k.stride});
        return out;
      }, nb::arg("engine_id"))
      .def("create_execution_plan", [](Graph& g, int64_t engine, nb::dict knobs) {
        std::vector<std::pair<KnobType, int64_t>> ks;
        for (auto [k, v] : knobs) ks.emplace_back(nb::cast<KnobType>(k), nb::cast<int64_t>(v));
        Status s;
        { nb::gil_scoped_release r; s = g.create_execution_plan(engine, ks); }
        check(s);
      }, nb::arg("engine_id"), nb::arg("knobs") = nb::dict())
      .def("get_behavior_notes", [](const Graph& g) {
        std::vector<BehaviorNote> out;
        check(g.get_behavior_notes(out));
        return out;
      })
      .def("get_behavior_notes_for_plan_at_index", [](const Graph& g, int64_t i) {
        std::vector<BehaviorNote> out;
        check(g.get_behavior_notes_for_plan_at_index(i, out));
        return out;
      }, nb::arg("index"))
      .def("get_numerical_notes_for_plan_at_index", [](const Graph& g, int64_t i) {
        std::vector<NumericalNote> out;
        check(g.get_numerical_notes_for_plan_at_index(i, out));
        return out;
      }, nb::arg("index"))
      .def("select_numeric_notes", [](Graph& g, std::vector<NumericalNote> n) { check(g.select_numeric_notes(n)); },
           nb::arg("notes"))
      .def("deselect_numeric_notes", [](Graph& g, std::vector<NumericalNote> n) { check(g.deselect_numeric_notes(n)); },
           nb::arg("notes"))
      .def("select_behavior_notes", [](Graph& g, std::vector<BehaviorNote> n) { check(g.select_behavior_notes(n)); },
           nb::arg("notes"))
      .def("deselect_behavior_notes", [](Graph& g, std::vector<BehaviorNote> n) { check(g.deselect_behavior_notes(n)); },
           nb::arg("notes"))
      // ---- target, kernel cache, plans that travel
      .def("_set_target", [](Graph& g, const Target& t) { g.set_target(t); })
      .def("_clear_target", [](Graph& g) { g.clear_target(); })
      .def("_planning_target", &Graph::planning_target)
      .def("_set_kernel_cache", [](Graph& g, std::shared_ptr<KernelCache> c) { g.set_kernel_cache(std::move(c)); },
           nb::arg("cache").none())
      .def("_serialize_plan", [](const Graph& g) {
        std::string out;
        check(g.serialize_plan(out));
        return out;
      })
      .def("_deserialize_plan", [](Graph& g, std::string text) {
        Status s;
        { nb::gil_scoped_release r; s = g.deserialize_plan(text); }
        check(s);
      })
      .def("_has_built_plan", [](const Graph& g) { return g.selected_plan() >= 0; });

  nb::class_<PyGraph, Graph>(m, "_Graph")
      .def(nb::init<>())
      .def("_set_handle", [](PyGraph& g, nb::handle h) {
        g.hs = handle_or_stream(h);
        g.handle = nb::borrow(h);
      })
      .def("_get_handle", [](PyGraph& g) { return g.handle; })
      // New plans: the variant-pack checks are taken from the tensors as the plans see them now (a
      // tensor changed later cannot make execute accept arrays sized for other dims).
      .def("_create_execution_plans", [](PyGraph& g, nb::handle modes) {
        invalidate_checks(g);
        create_plans(g, modes);
        refresh_checks(g);
      })
      .def("_build_plans", [](PyGraph& g, BuildPlanPolicy p) {
        Status s;
        { nb::gil_scoped_release r; s = g.build_plans(p); }
        refresh_checks(g);
        check(s);
      })
      .def("build_plan_at_index", [](PyGraph& g, int64_t i) {
        Status s;
        { nb::gil_scoped_release r; s = g.build_plan_at_index(i); }
        refresh_checks(g);
        check(s);
      }, nb::arg("index"))
      .def("_build", [](PyGraph& g, nb::handle modes, BuildPlanPolicy p) {
        invalidate_checks(g);
        build_all(g, modes, p);
        refresh_checks(g);
      })
      .def("_deserialize", [](PyGraph& g, std::string json) { invalidate_checks(g); check(g.deserialize(json)); })
      .def("_set_host_default", [](PyGraph& g, const TensorPtr& t, double f, int64_t i) {
        // The value a host tensor (tensor_like of a one-element host array) had when it was described:
        // execute() reads it through this cell when the pack binds no array to the tensor.
        std::array<uint64_t, 2> cell{0, 0};
        DataType dt = t->get_data_type();
        if (dt == DataType::INT64) std::memcpy(cell.data(), &i, sizeof i);
        else if (dt == DataType::INT32) { int32_t v = int32_t(i); std::memcpy(cell.data(), &v, sizeof v); }
        else store_element(dt, cell.data(), 0, is_integer(dt) ? double(i) : f);
        g.host_defaults[t.get()] = cell;
        invalidate_checks(g);
      })
      .def("_has_host_default", [](const PyGraph& g, const TensorPtr& t) { return g.host_defaults.count(t.get()) > 0; })
      .def("execute",
           [](PyGraph& g, nb::handle pack, nb::handle workspace, nb::handle handle, nb::handle o_uids,
              nb::handle o_shapes, nb::handle o_strides) {
             check_overrides(g, o_uids, o_shapes, o_strides);
             SlotBuffer buf;
             void** slots = buf.get(g.variant_uids().size());
             resolve_pack(g, pack, slots);
             void* ws = resolve_workspace(workspace, selected_workspace(g));
             void* stream = reinterpret_cast<void*>(stream_for(g, handle));
             Status s;
             {
               nb::gil_scoped_release r;
               s = g.execute(slots, ws, stream);
             }
             check(s);
           },
           nb::arg("tensor_to_device_buffer"), nb::arg("workspace").none() = nb::none(),
           nb::arg("handle").none() = nb::none(), nb::arg("override_uids").none() = nb::none(),
           nb::arg("override_shapes").none() = nb::none(), nb::arg("override_strides").none() = nb::none())
      .def("execute_plan_at_index",
           [](PyGraph& g, nb::handle pack, nb::handle workspace, int64_t index, nb::handle handle, nb::handle o_uids,
              nb::handle o_shapes, nb::handle o_strides) {
             check_overrides(g, o_uids, o_shapes, o_strides);
             int64_t need = 0;
             check(g.get_workspace_size_plan_at_index(index, need));
             SlotBuffer buf;
             void** slots = buf.get(g.variant_uids().size());
             resolve_pack(g, pack, slots);
             auto map = uid_map(g, slots);
             void* ws = resolve_workspace(workspace, need);
             void* stream = reinterpret_cast<void*>(stream_for(g, handle));
             Status s;
             {
               nb::gil_scoped_release r;
               s = g.execute_plan_at_index(map, ws, index, stream);
             }
             check(s);
           },
           nb::arg("tensor_to_device_buffer"), nb::arg("workspace").none(), nb::arg("index"),
           nb::arg("handle").none() = nb::none(), nb::arg("override_uids").none() = nb::none(),
           nb::arg("override_shapes").none() = nb::none(), nb::arg("override_strides").none() = nb::none())
      .def("autotune",
           [](PyGraph& g, nb::handle pack, nb::handle workspace, nb::handle handle) {
             SlotBuffer buf;
             void** slots = buf.get(g.variant_uids().size());
             resolve_pack(g, pack, slots);
             auto map = uid_map(g, slots);
             void* ws = resolve_workspace(workspace, autotune_workspace(g));
             void* stream = reinterpret_cast<void*>(stream_for(g, handle));
             Status s;
             {
               nb::gil_scoped_release r;
               s = g.autotune(map, ws, stream);
             }
             check(s);
           },
           nb::arg("tensor_to_device_buffer"), nb::arg("workspace").none() = nb::none(),
           nb::arg("handle").none() = nb::none())
      .def("populate_cuda_graph",
           [](PyGraph& g, nb::handle handle, nb::handle pack, nb::handle workspace, nb::handle cuda_graph) {
             (void)handle;
             populate(g, pack, workspace, cuda_graph, false);
           },
           nb::arg("handle").none(), nb::arg("var_pack"), nb::arg("workspace").none(), nb::arg("cuda_graph"))
      .def("update_cuda_graph",
           [](PyGraph& g, nb::handle handle, nb::handle pack, nb::handle workspace, nb::handle cuda_graph) {
             (void)handle;
             populate(g, pack, workspace, cuda_graph, true);
           },
           nb::arg("handle").none(), nb::arg("var_pack"), nb::arg("workspace").none(), nb::arg("cuda_graph"))
      .def("_slot_pointers", [](PyGraph& g, nb::handle pack) {
        SlotBuffer buf;
        void** slots = buf.get(g.variant_uids().size());
        resolve_pack(g, pack, slots);
        std::vector<uintptr_t> out;
        for (size_t i = 0; i < g.variant_uids().size(); ++i) out.push_back(uintptr_t(slots[i]));
        return out;
      });

  // The stream execute() without handle= would use (the graph's handle's current stream).
  m.def("_graph_stream", [](const PyGraph& g) { return stream_for(g, nb::none()); });
  // Times `iters` calls of the C++ hot path (slot array already resolved), in ns per call.
  m.def("_bench_execute_cpp", [](PyGraph& g, nb::handle pack, nb::handle workspace, int64_t iters) {
    std::vector<void*> slots(g.variant_uids().size());
    resolve_pack(g, pack, slots.data());
    void* ws = resolve_workspace(workspace, selected_workspace(g));
    void* stream = reinterpret_cast<void*>(stream_for(g, nb::none()));
    nb::gil_scoped_release r;
    check(g.execute(slots.data(), ws, stream));  // warm-up
    auto t0 = std::chrono::steady_clock::now();
    for (int64_t i = 0; i < iters; ++i) (void)g.execute(slots.data(), ws, stream);
    auto t1 = std::chrono::steady_clock::now();
    return double(std::chrono::duration_cast<std::chrono::nanoseconds>(t1 - t0).count()) / double(iters);
  }, nb::arg("graph"), nb::arg("variant_pack"), nb::arg("workspace").none(), nb::arg("iters"));
  // Times only the checked dict -> slot conversion, in ns per call.
  m.def("_bench_fill_slots", [](PyGraph& g, nb::handle pack, int64_t iters) {
    SlotBuffer buf;
    void** slots = buf.get(g.variant_uids().size());
    auto t0 = std::chrono::steady_clock::now();
    for (int64_t i = 0; i < iters; ++i) resolve_pack(g, pack, slots);
    auto t1 = std::chrono::steady_clock::now();
    return double(std::chrono::duration_cast<std::chrono::nanoseconds>(t1 - t0).count()) / double(iters);
  });
}

}  // namespace opendnn::py
