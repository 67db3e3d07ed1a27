# SPDX-License-Identifier: Apache-2.0
"""``opendnn.Graph``: cuDNN Frontend's high-level wrapper (a ``with`` block that builds on exit).

    with opendnn.Graph(io_data_type=opendnn.data_type.FLOAT) as g:
        y = g.conv_fprop(image=x, weight=w, padding=[1, 1], stride=[1, 1], dilation=[1, 1], name="conv2d")
        y.set_output(True)
    g.set_io_tuples(["conv2d::image", "conv2d::weight"], ["conv2d::Y"])
    y_array = g(x, w)                      # positional call (one output: the array, else a list)
    out = g({"conv2d::image": x, "conv2d::weight": w})   # dict call: returns the dict with the outputs

Conventions (cuDNN Frontend's): the constructor takes keywords only (``handle``, ``inputs``,
``outputs``, ``heuristics``, ``workspace_alloc`` and pygraph's keywords); ``handle="auto"`` runs on
torch's current CUDA stream. A node is named ``"<op>.<n>"`` unless given ``name=``; a tensor passed to
it is known as ``"<node>::<keyword>"`` or ``"<node>::<position>"`` (``"<node>::<key>::<j>"`` inside a
tuple) and an output by its own name or ``"<node>::<i>"``. ``set_io_tuples`` and the dict call take
those names, tensor names, uids, graph tensors or the very arrays used while building. Outputs the
caller does not pass are allocated (torch tensors when the graph was built from torch tensors, else
numpy arrays).
"""

import sys
from collections import OrderedDict

from ._C import heur_mode, tensor as _Tensor
from ._pygraph import pygraph

# pygraph methods the wrapper forwards as they are, and those it runs itself on exit (or on call).
_PASS_THROUGH = {"get_workspace_size", "get_workspace_size_plan_at_index", "serialize", "deserialize",
                 "query_tensor_attributes_of_uid", "get_name", "tensors", "nodes_info", "variant_uids"}
_BLOCKED = {"build", "build_operation_graph", "build_plan_at_index", "build_plans", "check_support",
            "create_execution_plan", "create_execution_plans", "deselect_engines", "deselect_workspace_greater_than",
            "execute", "execute_plan_at_index", "get_execution_plan_count", "get_plan_name_at_index", "key",
            "validate", "select_behavior_notes", "select_numeric_notes", "deselect_behavior_notes",
            "deselect_numeric_notes", "populate_cuda_graph", "update_cuda_graph"}


def _is_array(v):
    if v is None or isinstance(v, (_Tensor, str, bytes, int, float, bool, list, tuple, dict)):
        return False
    return hasattr(v, "__dlpack__") or hasattr(v, "__array_interface__") or hasattr(v, "__cuda_array_interface__") \
        or hasattr(v, "data_ptr")


def _auto_handle(cache):
    """handle="auto": a handle (made once per Graph) on torch's current CUDA stream; None without CUDA."""
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_available():
        return None
    from ._C import create_handle, set_stream

    if not cache:
        cache.append(create_handle())
    set_stream(cache[0], torch.cuda.current_stream().cuda_stream)
    return cache[0]


class Graph:
    """A graph built inside a ``with`` block and called like a function (see the module doc)."""

    def __init__(self, *, handle=None, inputs=None, outputs=None, heuristics=None, workspace_alloc=True, **kwargs):
        for what, v in (("inputs", inputs), ("outputs", outputs), ("heuristics", heuristics)):
            if v and not isinstance(v, (list, tuple)):
                raise ValueError(f"{what} must be a list or tuple")
        self.handle = handle
        self._kwargs = kwargs
        self._graph = None
        self.heuristics = list(heuristics) if heuristics else [heur_mode.A, heur_mode.FALLBACK]
        self.workspace_alloc = workspace_alloc
        self.workspace = None
        self._arrays = {}  # id(array) -> (array, graph tensor) for arrays passed while building
        self._in = OrderedDict()  # "<node>::<kw|pos>" -> graph tensor used as an input
        self._out = OrderedDict()  # tensor name or "<node>::<i>" -> graph tensor a node produced
        self._user = []  # tensors made with tensor()/tensor_like()
        self._counts, self._names = {}, set()
        self._io = (list(inputs or []), list(outputs or []))
        self._io_tensors = None
        self._auto = []  # the handle of handle="auto"

    @property
    def pygraph(self):
        return self._graph

    # ---- building ---------------------------------------------------------------------------

    def __enter__(self):
        if self._graph is not None:
            raise RuntimeError("Graph already created")
        handle = None if isinstance(self.handle, str) else self.handle
        self._graph = pygraph(handle=handle, **self._kwargs)
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is not None:
            self._graph = None
            return False
        g = self._graph
        g.validate()
        g.build_operation_graph()
        g.create_execution_plans(self.heuristics)
        g.check_support()
        g.build_plans()
        size = g.get_workspace_size()
        if self.workspace_alloc and size > 0:
            self.workspace = self._empty([size], [1], "uint8", self._sample())
        if self._io[0] or self._io[1]:
            self.set_io_tuples(*self._io)
        return False

    def _graph_tensor(self, value, key):
        """The graph tensor for an array argument (one per array object), recorded as input `key`."""
        if _is_array(value):
            entry = self._arrays.get(id(value))
            if entry is None:
                src = value.detach() if getattr(value, "requires_grad", False) else value
                entry = self._arrays[id(value)] = (value, self._graph.tensor_like(src, name=key))
            value = entry[1]
        if isinstance(value, _Tensor):
            self._in[key] = value
        return value

    def _convert(self, node, key, value):
        if isinstance(value, tuple):  # e.g. sdpa's dropout (probability, seed, offset)
            return tuple(self._graph_tensor(v, f"{node}::{key}::{j}") for j, v in enumerate(value))
        return self._graph_tensor(value, f"{node}::{key}")

    def __getattr__(self, attr):
        if attr.startswith("_") or self.__dict__.get("_graph") is None:
            raise AttributeError(attr)
        target = getattr(self._graph, attr)
        if attr in _PASS_THROUGH or not callable(target):
            return target
        if attr in _BLOCKED:
            raise RuntimeError(f"Calling {attr} via wrapper is not allowed")
        if attr in ("tensor", "tensor_like"):
            def make(*args, **kwargs):
                t = target(*args, **kwargs)
                self._user.append(t)
                return t

            return make

        def op(*args, **kwargs):
            n = self._counts.get(attr, 0)
            self._counts[attr] = n + 1
            node = kwargs.get("name") or f"{attr}.{n}"
            if node in self._names:
                raise ValueError(f"Node name {node} already used")
            self._names.add(node)
            kwargs["name"] = node
            args = [self._convert(node, i, a) for i, a in enumerate(args)]
            kwargs = {k: (v if k == "name" else self._convert(node, k, v)) for k, v in kwargs.items()}
            result = target(*args, **kwargs)
            outs = result if isinstance(result, (list, tuple)) else [result]
            for i, t in enumerate(outs):
                if isinstance(t, _Tensor):
                    self._out[t.get_name() or f"{node}::{i}"] = t
            return result

        op.__name__ = attr
        return op

    # ---- inputs and outputs -----------------------------------------------------------------

    def _find(self, key, table):
        """The tensor of `table` that key names (canonical name, tensor name, uid, graph tensor, array)."""
        if isinstance(key, str):
            if key in table:
                return table[key]
            for t in table.values():
                if t.get_name() == key:
                    return t
        elif isinstance(key, _Tensor):
            for t in table.values():
                if t is key or (t.get_uid() == key.get_uid() and t.get_name() == key.get_name()):
                    return t
        elif isinstance(key, int) and not isinstance(key, bool):
            for t in table.values():
                if t.get_uid() == key:
                    return t
        elif id(key) in self._arrays:
            return self._find(self._arrays[id(key)][1], table)
        return None

    def set_io_tuples(self, inputs, outputs):
        """Fixes the order of the arrays of a positional call and of the outputs it returns."""
        if not isinstance(inputs, (list, tuple)):
            raise ValueError("inputs must be a list or tuple")
        if not isinstance(outputs, (list, tuple)):
            raise ValueError("outputs must be a list or tuple")
        if self._graph is None or self._graph.get_execution_plan_count() == 0:
            self._io = (list(inputs), list(outputs))  # applied when the graph is built
            return
        seen, found = set(), []
        for what, keys, table in (("Input", inputs, self._in), ("Output", outputs, self._out)):
            tensors = []
            for i, key in enumerate(keys):
                t = key if any(key is u for u in self._user) else self._find(key, table)
                if t is None:
                    raise ValueError(f"{what} at index {i} ({key!r}) not found in tensor map")
                if t.get_uid() in seen:
                    raise ValueError(f"{what} at index {i} ({key!r}) is a duplicate")
                if what == "Input" and t.get_is_virtual():
                    raise ValueError(f"Input at index {i} is a virtual tensor")
                seen.add(t.get_uid())
                tensors.append(t)
            found.append(tensors)
        for what, table in (("output", self._out), ("input", self._in)):
            for name, t in table.items():
                if not t.get_is_virtual() and t.get_uid() not in seen:
                    raise ValueError(f"Node {what} {name} is a non-virtual tensor but not specified as input or output")
        self._io_tensors = (found[0], found[1])

    # ---- running ----------------------------------------------------------------------------

    def _sample(self):
        return next((a for a, _t in self._arrays.values()), None)

    @staticmethod
    def _empty(dims, strides, np_name, like):
        if like is not None and hasattr(like, "data_ptr") and "torch" in sys.modules:
            torch = sys.modules["torch"]
            return torch.empty_strided(dims, strides, dtype=getattr(torch, np_name), device=like.device)
        import numpy as np

        from ._dtypes import numpy_dtype

        dt = numpy_dtype(np_name)
        size = 1 + sum((d - 1) * s for d, s in zip(dims, strides)) if all(dims) else 0
        base = np.empty(max(size, 1), dtype=dt)
        return np.lib.stride_tricks.as_strided(base, shape=dims, strides=[s * dt.itemsize for s in strides])

    def _output_like(self, t):
        from ._dtypes import NUMPY_NAME

        return self._empty(list(t.get_dim()), list(t.get_stride()), NUMPY_NAME[t.get_data_type()], self._sample())

    def _execute(self, pack, kwargs):
        kwargs = dict(kwargs)
        handle = kwargs.pop("handle", self.handle)
        if isinstance(handle, str):  # "auto": torch's current stream
            handle = _auto_handle(self._auto)
        workspace = kwargs.pop("workspace", self.workspace)
        if kwargs:
            raise TypeError(f"Graph call got unexpected keyword arguments {sorted(kwargs)}")
        self._graph.execute(pack, workspace, handle=handle)

    def _check_built(self):
        if self._graph is None:
            raise RuntimeError("Graph not created")
        if not self._graph.get_execution_plan_count():
            raise RuntimeError("You should not invoke the graph before the context exits")

    def __call__(self, *args, **kwargs):
        self._check_built()
        if len(args) == 1 and isinstance(args[0], dict):
            return self._call_dict(args[0], kwargs)
        if self._io_tensors is None:
            raise ValueError("You should not invoke the graph with positional arguments before running set_io_tuples()")
        ins, outs = self._io_tensors
        if len(args) != len(ins):
            raise ValueError(f"Number of arguments ({len(args)}) does not match number of inputs ({len(ins)})")
        pack = {t.get_uid(): a for t, a in zip(ins, args)}
        results = [self._output_like(t) for t in outs]
        pack.update({t.get_uid(): a for t, a in zip(outs, results)})
        self._execute(pack, kwargs)
        return results[0] if len(results) == 1 else results

    def _call_dict(self, given, kwargs):
        def lookup(name, t):
            for key in (name, t, t.get_name(), t.get_uid()):
                if isinstance(key, str) and key == "":
                    continue
                try:
                    if key in given:
                        return given[key]
                except TypeError:
                    continue
            return None

        pack, missing = {}, []
        for kind, table in (("in", self._in), ("out", self._out)):
            for name, t in table.items():
                if t.get_is_virtual() or t.get_uid() in pack:
                    continue
                value = lookup(name, t)
                if value is None and kind == "in":
                    value = next((a for a, gt in self._arrays.values() if gt is t), None)
                if value is None and kind == "out":
                    value = given[name] = self._output_like(t)
                    if t.get_name() and t.get_name() != name:  # renamed after the node made it
                        given[t.get_name()] = value
                if value is None:
                    missing.append(name)
                    continue
                pack[t.get_uid()] = value
        if missing:
            raise RuntimeError(f"Non-virtual input tensors not found in variant pack: {missing}")
        self._execute(pack, kwargs)
        return given
