# SPDX-License-Identifier: Apache-2.0
"""A Python engine (numpy) registered with the router, ranked beside the C++ engines and run."""

import threading

import numpy as np
import pytest

import opendnn
from opendnn import engines
from conftest import build, float_graph

F = opendnn.data_type.FLOAT
_NP = {"ADD": np.add, "MUL": np.multiply, "SUB": np.subtract, "RELU_FWD": lambda a: np.maximum(a, 0),
       "EXP": np.exp}


class NumpyPointwise(engines.Engine):
    """Runs graphs made only of a few pointwise modes with numpy."""

    name = "numpy_pointwise"
    engine_id = engines.PYTHON_ENGINE_ID_BASE + 7

    def __init__(self, estimate_us=0.001):
        self.estimate_us = estimate_us
        self.calls = {"propose": 0, "build": 0, "execute": 0}
        self.seen_graphs = []

    def propose_plans(self, graph, target):
        self.calls["propose"] += 1
        self.seen_graphs.append(id(graph))  # ids: holding the graph would make a cycle through C++
        for n in graph.nodes_info():
            if n["method"] != "pointwise" or n["attrs"]["mode"] not in _NP:
                return [f'node "{n["name"]}": only {sorted(_NP)} pointwise modes']
        return [{"name": "numpy_v1", "estimated_us": self.estimate_us, "workspace_bytes": 0, "knobs": {"vec": 1}}]

    def build_plan(self, graph, target, plan):
        self.calls["build"] += 1
        assert plan["name"] == "numpy_v1" and plan["knobs"] == {"vec": 1}
        slots = engines.slot_index(graph)
        steps = []
        for n in graph.nodes_info():
            ins = [t for k, t in sorted(n["inputs"].items()) if t is not None]
            steps.append((n["attrs"]["mode"], ins, n["outputs"]["OUT_0"]))
        engine = self

        def run(slot_pointers, workspace, stream):
            engine.calls["execute"] += 1
            virt = {}

            def view(t):
                if t.get_is_virtual():
                    return virt.setdefault(t.get_uid(), np.zeros(t.get_dim(), np.float32))
                return engines.as_numpy(slot_pointers[slots[t.get_uid()]], t)

            for mode, ins, out in steps:
                view(out)[...] = _NP[mode](*[view(t) for t in ins])

        return engines.CompiledPlan(run, workspace_size=0)


@pytest.fixture
def numpy_engine():
    e = NumpyPointwise()
    assert opendnn.register_engine(e) == e.engine_id
    yield e
    opendnn.unregister_engine(e.engine_id)


def _graph():
    g = float_graph()
    x = g.tensor(name="x", dim=[3, 4], data_type=F)
    y = g.tensor(name="y", dim=[3, 4], data_type=F)
    z = g.relu(g.add(x, y))
    z.set_output(True)
    return g, x, y, z


def test_registry(numpy_engine):
    ids = dict(opendnn.registered_engines())
    assert ids[numpy_engine.engine_id] == "numpy_pointwise"
    assert 10000 in ids  # the reference engine is still there


def test_router_ranks_and_runs_python_engine(numpy_engine, rng):
    g, x, y, z = _graph()
    ws = build(g, [opendnn.heur_mode.A])
    assert numpy_engine.calls["propose"] == 1
    assert numpy_engine.seen_graphs[0] == id(g)  # the engine sees the user's graph object
    names = [g.get_plan_name_at_index(i) for i in range(g.get_execution_plan_count())]
    assert len(names) >= 2
    assert "numpy_v1" in names[0]  # cheapest estimate first
    assert any("reference" in n for n in names[1:])
    assert numpy_engine.calls["build"] == 1
    a = rng.standard_normal((3, 4)).astype(np.float32)
    b = rng.standard_normal((3, 4)).astype(np.float32)
    out = np.zeros((3, 4), np.float32)
    g.execute({x: a, y: b, z: out}, ws)
    assert numpy_engine.calls["execute"] == 1
    np.testing.assert_allclose(out, np.maximum(a + b, 0), rtol=1e-6)

    # The reference plan agrees, and the engine can be excluded by name.
    ref = next(i for i, n in enumerate(names) if "reference" in n)
    out2 = np.zeros((3, 4), np.float32)
    g.select_plan(ref)
    g.execute({x: a, y: b, z: out2}, np.empty(g.get_workspace_size(), np.uint8))
    np.testing.assert_allclose(out2, out, rtol=1e-6)
    assert numpy_engine.calls["execute"] == 1


def test_engine_ranked_after_cheaper_cpp_plan(rng):
    e = NumpyPointwise(estimate_us=1e9)
    opendnn.register_engine(e)
    try:
        g, x, y, z = _graph()
        build(g, [opendnn.heur_mode.A])
        names = [g.get_plan_name_at_index(i) for i in range(g.get_execution_plan_count())]
        assert "numpy_v1" in names[-1]
        assert e.calls["build"] == 0  # HEURISTICS_CHOICE built the reference plan only
    finally:
        opendnn.unregister_engine(e.engine_id)


def test_engine_declines_with_reason(numpy_engine):
    g = float_graph()
    x = g.tensor(dim=[3, 4], data_type=F)
    z = g.sin(x)  # not a mode the numpy engine takes
    z.set_output(True)
    build(g, [opendnn.heur_mode.A])
    names = [g.get_plan_name_at_index(i) for i in range(g.get_execution_plan_count())]
    assert not any("numpy" in n for n in names)


def test_only_python_engine_and_its_decline_is_reported(numpy_engine):
    g = float_graph()
    x = g.tensor(dim=[3, 4], data_type=F)
    z = g.sin(x)
    z.set_output(True)
    g.validate()
    g.build_operation_graph()
    g.create_execution_plans([opendnn.heur_mode.A])
    g.deselect_engines(["reference"])
    with pytest.raises(opendnn.NotSupportedError):
        g.check_support()
        g.build_plans()


def test_engine_failures_are_errors_not_crashes(rng):
    class Broken(NumpyPointwise):
        engine_id = engines.PYTHON_ENGINE_ID_BASE + 8

        def build_plan(self, graph, target, plan):
            def run(slots, ws, stream):
                raise ZeroDivisionError("boom")

            return engines.CompiledPlan(run)

    class Raises(NumpyPointwise):
        engine_id = engines.PYTHON_ENGINE_ID_BASE + 9

        def propose_plans(self, graph, target):
            raise NotImplementedError("not today")

    b, r = Broken(), Raises()
    opendnn.register_engine(b)
    opendnn.register_engine(r)
    try:
        g, x, y, z = _graph()
        ws = build(g, [opendnn.heur_mode.A])
        a = np.zeros((3, 4), np.float32)
        if "numpy_v1" in g.get_plan_name_at_index(g.selected_plan()):
            with pytest.raises(RuntimeError, match="boom"):
                g.execute({x: a, y: a, z: a}, ws)
    finally:
        opendnn.unregister_engine(b.engine_id)
        opendnn.unregister_engine(r.engine_id)


def test_register_rejects_bad_engines():
    class NoId:
        name = "x"
        engine_id = 5

        def propose_plans(self, g, t):
            return []

        def build_plan(self, g, t, p):
            return None

    with pytest.raises(ValueError, match="Python engine range"):
        opendnn.register_engine(NoId())
    with pytest.raises(TypeError):
        opendnn.register_engine(object())


def test_python_plan_runs_from_another_thread(numpy_engine, rng):
    g, x, y, z = _graph()
    ws = build(g, [opendnn.heur_mode.A])
    a = rng.standard_normal((3, 4)).astype(np.float32)
    outs = [np.zeros((3, 4), np.float32) for _ in range(4)]

    def work(o):
        for _ in range(20):
            g.execute({x: a, y: a, z: o}, ws)

    threads = [threading.Thread(target=work, args=(o,)) for o in outs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for o in outs:
        np.testing.assert_allclose(o, np.maximum(2 * a, 0), rtol=1e-6)
