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
#include <unordered_map>

#include "common.h"

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
  if (nb::isinstance<HeurMode>(modes)) {
    out.push_back(nb::cast<HeurMode>(modes));
    return out;
  }
  for (nb::handle h : modes) out.push_back(nb::cast<HeurMode>(h));
  return out;
}

// ---- the variant pack --------------------------------------------------------------------------

std::string tensor_label(const Graph& g, int64_t uid) {
  TensorPtr t = g.find_tensor(uid);
  std::string s = "uid " + std::to_string(uid);
  if (t && !t->get_name().empty()) s = "\"" + t->get_name() + "\" (" + s + ")";
  return s;
}

int64_t key_uid(nb::handle k) {
  TensorAttr* t = nullptr;
  if (nb::try_cast<TensorAttr*>(k, t, false) && t) {
    if (!t->has_uid())
      throw nb::value_error(("INVALID_VARIANT_PACK: tensor \"" + t->get_name() +
                             "\" has no uid yet (call validate() or build first)")
                                .c_str());
    return t->get_uid();
  }
  if (PyLong_Check(k.ptr()) && !PyBool_Check(k.ptr())) return nb::cast<int64_t>(k);
  throw nb::value_error(("INVALID_VARIANT_PACK: variant pack keys must be graph tensors or int uids, not " +
                         std::string(Py_TYPE(k.ptr())->tp_name))
                            .c_str());
}

// Fills g.slots from the dict. Returns the slot array (one pointer per variant_uids() entry).
void* const* fill_slots(PyGraph& g, nb::handle pack_obj) {
  if (!PyDict_Check(pack_obj.ptr())) throw nb::type_error("variant_pack must be a dict");
  const std::vector<int64_t>& uids = g.variant_uids();
  if (g.slot_uids.size() != uids.size() || !std::equal(uids.begin(), uids.end(), g.slot_uids.begin())) {
    g.slot_uids = uids;
    g.slots.assign(uids.size(), nullptr);
    g.filled.assign(uids.size(), 0);
    g.slot_bytes.assign(uids.size(), 0);
    for (size_t i = 0; i < uids.size(); ++i)
      if (TensorPtr t = g.find_tensor(uids[i])) g.slot_bytes[i] = std::max<int64_t>(t->storage_bytes(), 0);
  }
  const size_t n = uids.size();
  std::fill(g.filled.begin(), g.filled.end(), 0);
  PyObject *k, *v;
  Py_ssize_t pos = 0;
  size_t count = 0;
  while (PyDict_Next(pack_obj.ptr(), &pos, &k, &v)) {
    if (k == Py_None) continue;
    int64_t uid = key_uid(k);
    // Slots are ascending uids: a short scan beats hashing for the usual handful of tensors.
    size_t i;
    if (n <= 16) {
      i = 0;
      while (i < n && uids[i] != uid) ++i;
    } else {
      i = size_t(std::lower_bound(uids.begin(), uids.end(), uid) - uids.begin());
      if (i < n && uids[i] != uid) i = n;
    }
    if (i == n) {
      if (!g.find_tensor(uid))
        throw nb::value_error(("INVALID_VARIANT_PACK: the graph has no tensor with uid " + std::to_string(uid)).c_str());
      continue;  // a graph tensor that needs no memory (virtual, or a compiled-in constant)
    }
    if (v == Py_None)
      throw nb::value_error(("INVALID_VARIANT_PACK: the value for tensor " + tensor_label(g, uid) + " is None").c_str());
    g.slots[i] = to_pointer(v);
    // An array that holds fewer bytes than the tensor spans would be read or written out of bounds:
    // refuse it. Raw int pointers carry no size and are trusted, as in C++.
    if (!PyLong_Check(v)) {
      PyObject* nbytes = PyObject_GetAttrString(v, "nbytes");
      if (!nbytes) {
        PyErr_Clear();
      } else {
        long long have = PyLong_Check(nbytes) ? PyLong_AsLongLong(nbytes) : -1;
        Py_DECREF(nbytes);
        if (have >= 0 && have < g.slot_bytes[i])
          throw nb::value_error(("INVALID_VARIANT_PACK: tensor " + tensor_label(g, uid) + " spans " +
                                 std::to_string(g.slot_bytes[i]) + " bytes but its array holds " +
                                 std::to_string(have))
                                    .c_str());
      }
    }
    if (!g.filled[i]) ++count;
    g.filled[i] = 1;
  }
  if (count != n) {
    for (size_t i = 0; i < n; ++i)
      if (!g.filled[i])
        throw nb::value_error(("INVALID_VARIANT_PACK: the variant pack has no entry for tensor " +
                               tensor_label(g, uids[i]))
                                  .c_str());
  }
  return g.slots.data();
}

std::unordered_map<int64_t, void*> to_uid_map(const Graph& g, nb::handle pack_obj) {
  if (!PyDict_Check(pack_obj.ptr())) throw nb::type_error("variant_pack must be a dict");
  std::unordered_map<int64_t, void*> out;
  PyObject *k, *v;
  Py_ssize_t pos = 0;
  while (PyDict_Next(pack_obj.ptr(), &pos, &k, &v)) {
    if (k == Py_None) continue;
    int64_t uid = key_uid(k);
    if (v == Py_None)
      throw nb::value_error(("INVALID_VARIANT_PACK: the value for tensor " + tensor_label(g, uid) + " is None").c_str());
    out[uid] = to_pointer(v);
  }
  return out;
}

void* workspace_ptr(nb::handle ws) { return ws.is_none() ? nullptr : to_pointer(ws); }

uintptr_t stream_of(const PyGraph& g, nb::handle handle) {
  return handle.is_none() ? g.stream : to_stream(handle);
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
      .def("_create_execution_plans", [](Graph& g, nb::handle modes) {
        auto ms = to_modes(modes);
        Status s;
        { nb::gil_scoped_release r; s = g.create_execution_plans(ms); }
        check(s);
      })
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
      .def("_build", [](Graph& g, nb::handle modes, BuildPlanPolicy p) {
        auto ms = to_modes(modes);
        Status s;
        { nb::gil_scoped_release r; s = g.build(ms, p); }
        check(s);
      })
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
      .def("key", &Graph::key);

  nb::class_<PyGraph, Graph>(m, "_Graph")
      .def(nb::init<>())
      .def("_set_handle", [](PyGraph& g, nb::handle h) {
        g.handle = nb::borrow(h);
        g.stream = to_stream(h);
      })
      .def("_get_handle", [](PyGraph& g) { return g.handle; })
      .def("execute",
           [](PyGraph& g, nb::handle pack, nb::handle workspace, nb::handle handle) {
             void* const* slots = fill_slots(g, pack);
             void* ws = workspace_ptr(workspace);
             void* stream = reinterpret_cast<void*>(stream_of(g, handle));
             Status s;
             {
               nb::gil_scoped_release r;
               s = g.execute(slots, ws, stream);
             }
             check(s);
           },
           nb::arg("variant_pack"), nb::arg("workspace").none() = nb::none(), nb::arg("handle").none() = nb::none())
      .def("execute_plan_at_index",
           [](PyGraph& g, nb::handle pack, nb::handle workspace, int64_t index, nb::handle handle) {
             auto map = to_uid_map(g, pack);
             void* ws = workspace_ptr(workspace);
             void* stream = reinterpret_cast<void*>(stream_of(g, handle));
             Status s;
             {
               nb::gil_scoped_release r;
               s = g.execute_plan_at_index(map, ws, index, stream);
             }
             check(s);
           },
           nb::arg("variant_pack"), nb::arg("workspace").none(), nb::arg("index"), nb::arg("handle").none() = nb::none())
      .def("autotune",
           [](PyGraph& g, nb::handle pack, nb::handle workspace, nb::handle handle) {
             auto map = to_uid_map(g, pack);
             void* ws = workspace_ptr(workspace);
             void* stream = reinterpret_cast<void*>(stream_of(g, handle));
             Status s;
             {
               nb::gil_scoped_release r;
               s = g.autotune(map, ws, stream);
             }
             check(s);
           },
           nb::arg("variant_pack"), nb::arg("workspace").none() = nb::none(), nb::arg("handle").none() = nb::none())
      .def("_slot_pointers", [](PyGraph& g, nb::handle pack) {
        void* const* slots = fill_slots(g, pack);
        std::vector<uintptr_t> out;
        for (size_t i = 0; i < g.slot_uids.size(); ++i) out.push_back(uintptr_t(slots[i]));
        return out;
      });

  // Times `iters` calls of the C++ hot path (slot array already resolved), in ns per call.
  m.def("_bench_execute_cpp", [](PyGraph& g, nb::handle pack, nb::handle workspace, int64_t iters) {
    void* const* slots = fill_slots(g, pack);
    std::vector<void*> copy(slots, slots + g.slot_uids.size());
    void* ws = workspace_ptr(workspace);
    void* stream = reinterpret_cast<void*>(g.stream);
    nb::gil_scoped_release r;
    check(g.execute(copy.data(), ws, stream));  // warm-up
    auto t0 = std::chrono::steady_clock::now();
    for (int64_t i = 0; i < iters; ++i) (void)g.execute(copy.data(), ws, stream);
    auto t1 = std::chrono::steady_clock::now();
    return double(std::chrono::duration_cast<std::chrono::nanoseconds>(t1 - t0).count()) / double(iters);
  }, nb::arg("graph"), nb::arg("variant_pack"), nb::arg("workspace").none(), nb::arg("iters"));
  // Times only the dict → slot conversion, in ns per call.
  m.def("_bench_fill_slots", [](PyGraph& g, nb::handle pack, int64_t iters) {
    auto t0 = std::chrono::steady_clock::now();
    for (int64_t i = 0; i < iters; ++i) (void)fill_slots(g, pack);
    auto t1 = std::chrono::steady_clock::now();
    return double(std::chrono::duration_cast<std::chrono::nanoseconds>(t1 - t0).count()) / double(iters);
  });
}

}  // namespace opendnn::py
