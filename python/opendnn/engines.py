# SPDX-License-Identifier: Apache-2.0
"""Engines written in Python.

An engine is any object with

* ``name`` and ``engine_id`` (attributes or zero-argument methods; ids >= 20000 are Python's range),
* ``serves(target) -> bool`` (optional; default: CPU targets),
* ``propose_plans(graph, target)`` returning a list of plan dicts (``name``, ``estimated_us``,
  ``workspace_bytes``, ``knobs``, ``deterministic``; all optional), or a list of strings saying why
  it declines, or ``{"plans": [...], "declines": [...]}``; raising ``NotImplementedError``,
  ``opendnn.NotSupportedError`` or ``ImportError`` also declines,
* ``build_id`` (optional; attribute or method): what a serialized plan of this engine must match to be
  restored, e.g. the engine's version,
* ``build_plan(graph, target, plan) -> compiled`` where ``compiled.execute(slot_pointers, workspace,
  stream)`` runs the plan and ``compiled.workspace_size`` (attribute or method) gives its bytes.

A plan dict may also carry ``knob_ranges`` (``{"TILE_M": (min, max, stride)}`` or a list of values: what
``pygraph.create_execution_plan`` may set; knobs named by ``opendnn.knob_type`` members are listed by
``get_knobs_for_engine``), ``numerical_notes`` and ``behavior_notes`` (lists of ``opendnn.numerical_note``
/ ``opendnn.behavior_note`` members that are true of the plan).

``slot_pointers`` holds one address per ``graph.variant_uids()`` entry, in that order.
``opendnn.register_engine(engine)`` hands it to the router, which ranks its plans beside the C++
engines' by ``estimated_us``. The C++ side calls into Python with the GIL held for each call only.
"""

from ._C import PYTHON_ENGINE_ID_BASE, Target, device_kind, registered_engines, unregister_engine  # noqa: F401
from ._C import register_engine as _register


def register_engine(engine) -> int:
    """Registers a Python engine with the router (replacing one with the same id); returns its id."""
    return _register(engine)


class Engine:
    """A convenient base: override propose_plans and build_plan."""

    name = "python"
    engine_id = PYTHON_ENGINE_ID_BASE

    def serves(self, target) -> bool:
        return target.kind == device_kind.CPU

    def propose_plans(self, graph, target):
        raise NotImplementedError(f"{self.name} proposes no plans")

    def build_plan(self, graph, target, plan):
        raise NotImplementedError(f"{self.name} builds no plans")


class CompiledPlan:
    """A plan built by a Python engine: calls ``fn(slot_pointers, workspace, stream)``."""

    def __init__(self, fn, workspace_size: int = 0):
        self._fn = fn
        self.workspace_size = workspace_size

    def execute(self, slot_pointers, workspace, stream):
        self._fn(slot_pointers, workspace, stream)


def slot_index(graph):
    """uid -> position in the slot array Plan.execute receives."""
    uids = list(graph.variant_uids())
    if not uids:  # before the router assigns slots: every non-virtual tensor needing memory
        uids = sorted(t.get_uid() for t in graph.tensors()
                      if not t.get_is_virtual() and not (t.get_is_pass_by_value() and t._get_value() is not None))
    return {u: i for i, u in enumerate(uids)}


def as_numpy(pointer: int, tensor):
    """A numpy view of host memory at ``pointer`` with the tensor's dims, strides and data type."""
    import ctypes

    import numpy as np

    from ._dtypes import numpy_dtype

    dt = numpy_dtype(tensor.get_data_type())
    dims = list(tensor.get_dim())
    strides = list(tensor.get_stride())
    n = (1 + sum((d - 1) * s for d, s in zip(dims, strides))) if all(dims) else 0
    buf = (ctypes.c_char * max(n * dt.itemsize, 1)).from_address(int(pointer))
    return np.ndarray(dims, dtype=dt, buffer=buf, strides=[s * dt.itemsize for s in strides])
