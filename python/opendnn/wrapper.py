# SPDX-License-Identifier: Apache-2.0
"""``opendnn.Graph``: cuDNN Frontend's high-level wrapper (a ``with`` block that builds on exit).

    with opendnn.Graph(io_data_type=opendnn.data_type.FLOAT) as g:
        y = g.relu(g.matmul(x, w))          # arrays go straight into ops (tensor_like)
        y.set_output(True).set_name("y")
    g.set_io_tuples(["x", "w"], ["y"])      # or Graph(inputs=[...], outputs=[...])
    (out,) = g(x, w)                        # positional call; g({"x": x, "w": w}) returns a dict

Nodes are named ``op.N``; arrays passed to ops become graph inputs named after the keyword (or
``input.N``). Outputs the caller does not pass are allocated (numpy, or torch if the inputs are torch
tensors). The workspace is allocated on exit when ``workspace_alloc`` is true.
"""

import sys

from ._C import heur_mode, tensor as _Tensor
from ._pygraph import _SPECS, _PW_MODES, pygraph

_OPS = set(_SPECS) | {m for _mode, m, _a in _PW_MODES} | {"bias", "scale", "leaky_relu"}


def _is_array(v):
    if v is None or isinstance(v, (_Tensor, str, bytes, int, float, bool, list, tuple, dict)):
        return False
    return hasattr(v, "__dlpack__") or hasattr(v, "__array_interface__") or hasattr(v, "__cuda_array_interface__") \
        or hasattr(v, "data_ptr")


class Graph:
    def __init__(self, handle=None, inputs=None, outputs=None, heuristics=None, workspace_alloc=True,
                 **pygraph_kwargs):
        if isinstance(handle, str) and handle == "auto":
            from ._C import create_handle

            handle = create_handle()
        self.handle = handle
        self.pygraph = pygraph(handle=handle, **pygraph_kwargs)
        self.heuristics = list(heuristics) if heuristics is not None else [heur_mode.A, heur_mode.FALLBACK]
        self.workspace_alloc = workspace_alloc
        self.workspace = None
        self._n_ops = 0
        self._n_inputs = 0
        self._bound = {}  # tensor name -> array given while building
        self._built = False
        self._io = (list(inputs) if inputs else None, list(outputs) if outputs else None)

    # ---- building ---------------------------------------------------------------------------

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is not None:
            return False
        g = self.pygraph
        g.validate()
        g.build_operation_graph()
        g.create_execution_plans(self.heuristics)
        g.check_support()
        g.build_plans()
        self._built = True
        size = g.get_workspace_size()
        if self.workspace_alloc and size > 0:
            self.workspace = self._empty([size], [1], "uint8", self._sample())
        return False

    def _to_tensor(self, value, hint):
        if not _is_array(value):
            return value
        self._n_inputs += 1
        name = hint if hint and hint not in self._bound else f"input.{self._n_inputs}"
        t = self.pygraph.tensor_like(value, name=name)
        self._bound[name] = value
        return t

    def __getattr__(self, attr):
        target = getattr(self.pygraph, attr)
        if attr not in _OPS and attr not in ("sdpa", "sdpa_backward", "sdpa_fp8", "sdpa_fp8_backward"):
            return target

        def op(*args, **kwargs):
            args = [self._to_tensor(a, None) for a in args]
            kwargs = {k: self._to_tensor(v, k) for k, v in kwargs.items()}
            if not kwargs.get("name"):
                kwargs["name"] = f"op.{self._n_ops}"
            self._n_ops += 1
            return target(*args, **kwargs)

        op.__name__ = attr
        return op

    def tensor(self, *args, **kwargs):
        return self.pygraph.tensor(*args, **kwargs)

    def tensor_like(self, value, name=""):
        t = self.pygraph.tensor_like(value, name=name)
        if _is_array(value) and name:
            self._bound[name] = value
        return t

    def set_io_tuples(self, inputs, outputs):
        self._io = (list(inputs), list(outputs))

    # ---- running ----------------------------------------------------------------------------

    def _tensor_named(self, key):
        if isinstance(key, _Tensor):
            return key
        for t in self.pygraph.tensors():
            if t.get_name() == key:
                return t
        raise KeyError(f"the graph has no tensor named {key!r}")

    def _sample(self):
        for v in self._bound.values():
            return v
        return None

    @staticmethod
    def _empty(dims, strides, np_name, like):
        if like is not None and hasattr(like, "data_ptr") and "torch" in sys.modules:
            torch = sys.modules["torch"]
            dt = getattr(torch, {"float8_e4m3fn": "float8_e4m3fn"}.get(np_name, np_name))
            return torch.empty_strided(dims, strides, dtype=dt, device=like.device)
        import numpy as np

        from ._dtypes import numpy_dtype

        dt = numpy_dtype(np_name)
        size = 1 + sum((d - 1) * s for d, s in zip(dims, strides)) if all(dims) else 0
        base = np.empty(max(size, 1), dtype=dt)
        return np.lib.stride_tricks.as_strided(base, shape=dims, strides=[s * dt.itemsize for s in strides])

    def _run(self, given):
        from ._dtypes import NUMPY_NAME

        if not self._built:
            raise RuntimeError("opendnn.Graph: leave the `with` block (which builds the graph) before calling it")
        pack, names, outs = {}, {}, {}
        for key, value in given.items():
            t = self._tensor_named(key)
            pack[t.get_uid()] = value
            names[t.get_uid()] = t.get_name()
        for name, value in self._bound.items():
            t = self._tensor_named(name)
            if t.get_uid() not in pack:
                pack[t.get_uid()] = value
                names[t.get_uid()] = name
        sample = next(iter(given.values()), None) if given else self._sample()
        produced = self._produced_uids()
        for t in self.pygraph.tensors():
            uid = t.get_uid()
            if t.get_is_virtual() or uid in pack or uid not in produced:
                continue
            arr = self._empty(list(t.get_dim()), list(t.get_stride()), NUMPY_NAME[t.get_data_type()], sample)
            pack[uid] = arr
            names[uid] = t.get_name()
            outs[t.get_name()] = arr
        self.pygraph.execute(pack, self.workspace, handle=self.handle)
        return {names[u]: v for u, v in pack.items()}, outs

    def _produced_uids(self):
        return {o.get_uid() for n in self.pygraph.nodes_info() for o in n["outputs"].values() if o is not None}

    def __call__(self, *args, **kwargs):
        if len(args) == 1 and isinstance(args[0], dict) and not kwargs:
            result, _ = self._run(args[0])
            return result
        ins, outs = self._io
        if ins is None or outs is None:
            raise RuntimeError("opendnn.Graph: call set_io_tuples(inputs, outputs) before calling with positional arrays")
        if len(args) != len(ins):
            raise TypeError(f"the graph takes {len(ins)} inputs ({len(args)} given)")
        given = {(k if isinstance(k, str) else k.get_name()): v for k, v in zip(ins, args)}
        given.update(kwargs)
        result, _ = self._run(given)
        values = tuple(result[o if isinstance(o, str) else o.get_name()] for o in outs)
        return values[0] if len(values) == 1 else values
