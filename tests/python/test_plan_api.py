# SPDX-License-Identifier: Apache-2.0
"""The plan-level API: engines and knobs, notes and their filters, plans that travel (serialize /
deserialize), the kernel cache and device properties, on the reference engine and on a Python engine
that declares knobs and notes."""

import json
import time

import numpy as np
import pytest

import opendnn
from opendnn import engines

F = opendnn.data_type.FLOAT
KT = opendnn.knob_type
NN = opendnn.numerical_note
BN = opendnn.behavior_note


class KnobbedAdd(engines.Engine):
    """Runs one ADD node with numpy. Proposes a "tiled" plan with two knobs (TILE_M by a range,
    STAGES by a value list) and notes, and a "plain" non-deterministic plan without knobs."""

    name = "knobbed_add"
    engine_id = engines.PYTHON_ENGINE_ID_BASE + 31

    def __init__(self, kinds=(opendnn.device_kind.CPU,)):
        self.kinds = kinds
        self.proposals = 0
        self.built = []  # knobs of each plan built

    def serves(self, target):
        return target.kind in self.kinds

    def propose_plans(self, graph, target):
        self.proposals += 1
        nodes = graph.nodes_info()
        if len(nodes) != 1 or nodes[0]["attrs"].get("mode") != "ADD":
            return ["only a lone ADD"]
        return [
            {"name": "tiled", "local_index": 0, "estimated_us": 0.001, "knobs": {"TILE_M": 64, "STAGES": 2},
             "knob_ranges": {"TILE_M": (32, 128, 32), "STAGES": [2, 3, 4]},
             "numerical_notes": [NN.TENSOR_CORE], "behavior_notes": [BN.RUNTIME_COMPILATION]},
            {"name": "plain", "local_index": 1, "estimated_us": 0.002, "deterministic": False},
        ]

    def build_plan(self, graph, target, plan):
        self.built.append(dict(plan["knobs"]))
        slots = engines.slot_index(graph)
        n = graph.nodes_info()[0]
        a, b, out = n["inputs"]["IN_0"], n["inputs"]["IN_1"], n["outputs"]["OUT_0"]

        def run(ptrs, workspace, stream):
            def view(t):
                return engines.as_numpy(ptrs[slots[t.get_uid()]], t)

            view(out)[...] = view(a) + view(b)

        return engines.CompiledPlan(run, workspace_size=0)


@pytest.fixture
def knobbed():
    e = KnobbedAdd()
    opendnn.register_engine(e)
    yield e
    opendnn.unregister_engine(e.engine_id)


@pytest.fixture
def knobbed_cuda():
    e = KnobbedAdd(kinds=(opendnn.device_kind.CPU, opendnn.device_kind.CUDA))
    opendnn.register_engine(e)
    yield e
    opendnn.unregister_engine(e.engine_id)


def _add_graph(**kw):
    g = opendnn.pygraph(io_data_type=F, intermediate_data_type=F, compute_data_type=F, **kw)
    a = g.tensor(name="a", dim=[2, 3], data_type=F, uid=1)
    b = g.tensor(name="b", dim=[2, 3], data_type=F, uid=2)
    c = g.add(a, b)
    c.set_output(True).set_uid(3)
    g.validate()
    g.build_operation_graph()
    return g, a, b, c


def _run(g, a, b, c):
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    y = np.full((2, 3), 0.5, np.float32)
    z = np.zeros((2, 3), np.float32)
    # A plan for a CUDA target refuses host arrays; the fake CUDA engines here run on the host, so they get
    # raw pointers (which are not checked).
    cuda = g._planning_target().kind == opendnn.device_kind.CUDA
    pack = {a: x, b: y, c: z}
    if cuda:
        pack = {k: v.ctypes.data for k, v in pack.items()}
    ws = np.empty(max(1, g.get_workspace_size()), np.uint8)
    g.execute(pack, ws.ctypes.data if cuda else ws)
    np.testing.assert_array_equal(z, x + y)


# ---- engines and knobs ----------------------------------------------------------------------------

def test_reference_engine_is_one_engine_without_knobs():
    g, a, b, c = _add_graph()
    assert g.get_engine_count() == 1
    assert g.get_knobs_for_engine(0) == []
    g.create_execution_plan(0, {})
    g.create_execution_plan(0, {})  # the same plan is listed once
    assert g.get_execution_plan_count() == 1
    assert g.get_plan_name_at_index(0) == "reference:reference"
    g.check_support()
    g.build_plans()
    _run(g, a, b, c)
    with pytest.raises(RuntimeError, match="has no knob TILE_M"):
        g.create_execution_plan(0, {KT.TILE_M: 64})
    with pytest.raises(RuntimeError, match="engine 5 is out of range"):
        g.get_knobs_for_engine(5)


def test_knob_type_members_and_knob_object():
    for name in ["NOT_SET", "SWIZZLE", "TILE_SIZE", "EDGE", "MULTIPLY", "SPLIT_K_BUF", "TILEK", "STAGES",
                 "REDUCTION_MODE", "SPLIT_K_SLC", "IDX_MODE", "SPECFILT", "KERNEL_CFG", "WORKSPACE", "TILE_CGA_M",
                 "TILE_CGA_N", "BLOCK_SIZE", "OCCUPANCY", "ARRAY_SIZE_PER_THREAD", "SPLIT_COLS", "TILE_ROWS",
                 "TILE_COLS", "LOAD_SIZE", "CTA_COUNT", "STREAM_K", "SPLIT_P_SLC", "TILE_M", "TILE_N",
                 "WARP_SPEC_CFG"]:
        assert hasattr(KT, name), name
    for name in ["TENSOR_CORE", "DOWN_CONVERT_INPUTS", "REDUCED_PRECISION_REDUCTION", "FFT", "NONDETERMINISTIC",
                 "WINOGRAD", "WINOGRAD_TILE_4x4", "WINOGRAD_TILE_6x6", "WINOGRAD_TILE_13x13", "STRICT_NAN_PROP"]:
        assert hasattr(NN, name), name
    for name in ["RUNTIME_COMPILATION", "REQUIRES_FILTER_INT8x32_REORDER", "REQUIRES_BIAS_INT8x32_REORDER",
                 "SUPPORTS_CUDA_GRAPH_NATIVE_API", "CUBLASLT_DEPENDENCY"]:
        assert hasattr(BN, name), name
    k = opendnn.knob(KT.KERNEL_CFG, 7, 1, 2)
    assert (k.type, k.max_value, k.min_value, k.stride) == (KT.KERNEL_CFG, 7, 1, 2)


def test_python_engine_knobs_are_listed_and_settable(knobbed):
    g, a, b, c = _add_graph()
    n = g.get_engine_count()
    assert n == 3  # reference, then knobbed_add's two plans (engine-id order)
    knobs = {k.type: k for k in g.get_knobs_for_engine(1)}
    assert set(knobs) == {KT.TILE_M, KT.STAGES}
    assert (knobs[KT.TILE_M].min_value, knobs[KT.TILE_M].max_value, knobs[KT.TILE_M].stride) == (32, 128, 32)
    assert (knobs[KT.STAGES].min_value, knobs[KT.STAGES].max_value, knobs[KT.STAGES].stride) == (2, 4, 1)
    assert g.get_knobs_for_engine(2) == []
    g.create_execution_plan(1, {KT.TILE_M: 96, KT.STAGES: 3})
    assert g.get_execution_plan_count() == 1
    assert "TILE_M=96" in g.get_plan_name_at_index(0)
    g.check_support()
    g.build_plans()
    assert knobbed.built[-1] == {"TILE_M": 96, "STAGES": 3}
    _run(g, a, b, c)


@pytest.mark.parametrize("knobs, message", [
    ({KT.TILE_M: 100}, "knob TILE_M of knobbed_add plan tiled takes 32..128 by 32, not 100"),
    ({KT.TILE_M: 160}, "takes 32..128 by 32, not 160"),
    ({KT.STAGES: 5}, r"takes one of \{2, 3, 4\}, not 5"),
    ({KT.TILE_N: 64}, r"has no knob TILE_N \(its knobs: TILE_M, STAGES\)"),
])
def test_a_knob_value_the_engine_does_not_take_is_an_error(knobbed, knobs, message):
    g, *_ = _add_graph()
    with pytest.raises(RuntimeError, match=message):
        g.create_execution_plan(1, knobs)
    assert g.get_execution_plan_count() == 0


def test_engine_that_declines_lists_why(knobbed):
    g = opendnn.pygraph(io_data_type=F, compute_data_type=F)
    x = g.tensor(name="x", dim=[4], data_type=F)
    g.relu(x).set_output(True)
    g.validate()
    assert g.get_engine_count() == 2  # reference, and knobbed_add saying why it cannot
    with pytest.raises(opendnn.cudnnGraphNotSupportedError, match="only a lone ADD"):
        g.get_knobs_for_engine(1)
    with pytest.raises(RuntimeError, match="only a lone ADD"):
        g.create_execution_plan(1, {})


# ---- notes ----------------------------------------------------------------------------------------

def _planned():
    g, a, b, c = _add_graph()
    g.create_execution_plans([opendnn.heur_mode.A])
    names = [g.get_plan_name_at_index(i) for i in range(g.get_execution_plan_count())]
    return g, names, (a, b, c)


def test_notes_are_reported_per_plan(knobbed):
    g, names, _ = _planned()
    assert names == ["knobbed_add:tiled", "knobbed_add:plain", "reference:reference"]
    assert g.get_behavior_notes_for_plan_at_index(0) == [BN.RUNTIME_COMPILATION]
    assert g.get_numerical_notes_for_plan_at_index(0) == [NN.TENSOR_CORE]
    assert g.get_numerical_notes_for_plan_at_index(1) == [NN.NONDETERMINISTIC]  # deterministic=False
    assert g.get_behavior_notes_for_plan_at_index(2) == []
    g.build_plans()
    assert g.get_behavior_notes() == [BN.RUNTIME_COMPILATION]


def _usable(g):
    out = []
    for i in range(g.get_execution_plan_count()):
        try:
            g.build_plan_at_index(i)
            out.append(g.get_plan_name_at_index(i))
        except RuntimeError:
            pass
    return out


def test_select_and_deselect_notes_filter_plans(knobbed):
    g, _, _ = _planned()
    g.select_numeric_notes([NN.TENSOR_CORE])
    assert _usable(g) == ["knobbed_add:tiled"]
    g, _, _ = _planned()
    g.deselect_numeric_notes([NN.NONDETERMINISTIC])
    assert _usable(g) == ["knobbed_add:tiled", "reference:reference"]
    g, _, _ = _planned()
    g.deselect_behavior_notes([BN.RUNTIME_COMPILATION])
    assert _usable(g) == ["knobbed_add:plain", "reference:reference"]
    g, _, _ = _planned()
    g.select_behavior_notes([BN.CUBLASLT_DEPENDENCY])
    assert _usable(g) == []
    with pytest.raises(opendnn.cudnnGraphNotSupportedError, match="deselected"):
        g.check_support()


def test_note_filters_set_before_planning_apply_to_the_plans(knobbed):
    g, a, b, c = _add_graph()
    g.deselect_behavior_notes([BN.RUNTIME_COMPILATION])
    g.build([opendnn.heur_mode.A])
    assert g.get_plan_name_at_index(g.selected_plan()) == "knobbed_add:plain"
    _run(g, a, b, c)


# ---- plans that travel ----------------------------------------------------------------------------

def test_serialize_carries_the_built_plan_and_deserialize_executes_without_planning(knobbed):
    g, a, b, c = _add_graph()
    g.create_execution_plan(1, {KT.TILE_M: 128})
    g.build_plans()
    data = g.serialize()
    assert isinstance(data, list) and all(isinstance(v, int) for v in data)
    doc = json.loads(bytes(data))
    plan = doc["plan"]
    assert plan["engine"]["name"] == "knobbed_add" and plan["candidate"]["name"] == "tiled_TILE_M=128"
    assert ["TILE_M", 128] in plan["candidate"]["knobs"]
    assert plan["variant_uids"] == [1, 2, 3] and plan["workspace_size"] == 0
    proposals = knobbed.proposals
    h = opendnn.pygraph()
    h.deserialize(None, data)
    assert knobbed.proposals == proposals  # not planned again
    assert knobbed.built[-1] == {"TILE_M": 128, "STAGES": 2}
    assert h.get_workspace_size() == 0
    assert h.get_behavior_notes() == [BN.RUNTIME_COMPILATION]
    _run(h, a, b, c)
    k = opendnn.pygraph()
    k.deserialize(handle_=None, pyobj=bytes(data))
    _run(k, a, b, c)


def test_reference_plan_round_trip_with_a_pass_by_value_scalar():
    g = opendnn.pygraph(io_data_type=F, compute_data_type=F)
    x = g.tensor(name="x", dim=[4], data_type=F, uid=1)
    y = g.mul(x, g.tensor_scalar(2.5))
    y.set_output(True).set_uid(3)
    g.build([opendnn.heur_mode.FALLBACK])
    data = g.serialize()
    assert json.loads(bytes(data))["plan"]["pass_by_values"][0][1] == 2.5
    h = opendnn.pygraph()
    h.deserialize(data)
    xv = np.arange(4, dtype=np.float32)
    out = np.zeros(4, np.float32)
    h.execute({1: xv, 3: out}, None)
    np.testing.assert_array_equal(out, xv * 2.5)


def _tamper(data, fn):
    doc = json.loads(bytes(data))
    fn(doc)
    return list(json.dumps(doc).encode())


@pytest.mark.parametrize("edit, message", [
    (lambda d: d["plan"].__setitem__("library", "opendnn 0.0.1"), "serialized by opendnn 0.0.1"),
    (lambda d: d["plan"]["engine"].__setitem__("build", "other build"), 'built by knobbed_add build "other build"'),
    (lambda d: d["plan"].__setitem__("graph_key", "0123456789abcdef"), "built for another graph"),
    (lambda d: d["graph"]["tensors"][0].__setitem__("stride", [1, 2]), "built for another graph"),
    (lambda d: d["plan"]["target"].update(kind="cuda", sm_version=90), "built for a cuda target"),
    (lambda d: d["plan"]["engine"].update(id=29999), r"engine knobbed_add \(id 29999\) is not registered"),
    (lambda d: d["plan"].__setitem__("variant_uids", [1, 2]), "variant-pack uids differ"),
    (lambda d: d["plan"]["candidate"]["numerical_notes"].append(99), "unknown numerical note 99"),
    (lambda d: d["plan"].__delitem__("payload"), 'has no "payload"'),
    (lambda d: d["plan"]["candidate"]["knobs"].__setitem__(0, ["TILE_M", 100]), None),
])
def test_a_serialized_plan_that_does_not_match_is_an_error(knobbed, edit, message):
    g, a, b, c = _add_graph()
    g.create_execution_plan(1, {})
    g.build_plans()
    bad = _tamper(g.serialize(), edit)
    h = opendnn.pygraph()
    if message is None:  # the engine is handed its own knobs back: it alone decides what it takes
        h.deserialize(bad)
        assert knobbed.built[-1]["TILE_M"] == 100
        return
    with pytest.raises(RuntimeError, match=message):
        h.deserialize(bad)
    with pytest.raises(RuntimeError, match="no (plan is built|execution plans)"):
        _run(h, a, b, c)


def test_python_engine_build_id_is_checked(knobbed):
    knobbed.build_id = "v1"
    g, a, b, c = _add_graph()
    g.create_execution_plan(1, {})
    g.build_plans()
    data = g.serialize()
    knobbed.build_id = "v2"
    with pytest.raises(RuntimeError, match="knobbed_add v1\"; this process has .*knobbed_add v2"):
        opendnn.pygraph().deserialize(data)
    knobbed.build_id = "v1"
    h = opendnn.pygraph()
    h.deserialize(data)
    _run(h, a, b, c)


def test_serialized_pass_by_value_mismatch_is_an_error():
    g = opendnn.pygraph(io_data_type=F, compute_data_type=F)
    x = g.tensor(name="x", dim=[4], data_type=F, uid=1)
    s = g.tensor_scalar(2.5)
    s.set_uid(2)
    g.mul(x, s).set_output(True).set_uid(3)
    g.build([opendnn.heur_mode.FALLBACK])

    def edit(d):
        for t in d["graph"]["tensors"]:
            if t["uid"] == 2:
                t["value"] = 3.0 if not isinstance(t["value"], dict) else {**t["value"], "value": 3.0}
    with pytest.raises(RuntimeError, match="pass-by-value values differ"):
        opendnn.pygraph().deserialize(_tamper(g.serialize(), edit))


def test_deserialize_of_text_and_keyword_errors():
    g, *_ = _add_graph()
    text = g.to_json()
    h = opendnn.pygraph()
    h.deserialize(text)  # a graph without a plan: it plans as usual
    with pytest.raises(RuntimeError, match="no plan is built"):
        h.execute({1: np.zeros((2, 3), np.float32)}, None)
    with pytest.raises(TypeError, match="unexpected keyword argument 'data'"):
        h.deserialize(data=text)
    with pytest.raises(TypeError, match="pyobj must be"):
        h.deserialize(3.5)


def test_populate_cuda_graph_on_the_reference_engine_says_not_supported():
    g, a, b, c = _add_graph()
    g.build([opendnn.heur_mode.FALLBACK])
    x = np.zeros((2, 3), np.float32)
    with pytest.raises(opendnn.cudnnGraphNotSupportedError, match="not supported: this engine's plans cannot"):
        g.populate_cuda_graph(None, {a: x, b: x, c: x}, None, 1234)
    with pytest.raises(opendnn.cudnnGraphNotSupportedError, match="not supported"):
        g.update_cuda_graph(None, {a: x, b: x, c: x}, None, 1234)


# ---- kernel cache ---------------------------------------------------------------------------------

def test_kernel_cache_reuses_the_built_plan_and_round_trips(knobbed):
    cache = opendnn.create_kernel_cache()
    g, a, b, c = _add_graph(kernel_cache=cache)
    g.build([opendnn.heur_mode.A])
    assert len(cache) == 1
    proposals = knobbed.proposals
    g2, *_ = _add_graph(kernel_cache=cache)
    t0 = time.perf_counter()
    g2.build([opendnn.heur_mode.A])
    assert (time.perf_counter() - t0) * 1e3 <= 10.0
    assert knobbed.proposals == proposals  # built from the cache, not planned
    _run(g2, a, b, c)
    text = cache.serialize()
    assert json.loads(text)["opendnn_kernel_cache"] == 1
    fresh = opendnn.create_kernel_cache()
    fresh.deserialize(text)
    with pytest.raises(RuntimeError, match="already holds 1 plans"):
        fresh.deserialize(text)
    g3, *_ = _add_graph(kernel_cache=fresh)
    g3.build([opendnn.heur_mode.A])
    assert knobbed.proposals == proposals
    _run(g3, a, b, c)
    # Another graph (other dims) or other modes miss the cache and plan as usual.
    g4, *_ = _add_graph(kernel_cache=fresh)
    g4.build([opendnn.heur_mode.FALLBACK])
    assert g4.get_plan_name_at_index(g4.selected_plan()) == "reference:reference"


def test_kernel_cache_rejects_what_is_not_a_cache():
    cache = opendnn.create_kernel_cache()
    with pytest.raises(RuntimeError, match="not an opendnn kernel cache"):
        cache.deserialize('{"x": 1}')
    with pytest.raises(TypeError, match="create_kernel_cache"):
        opendnn.pygraph(kernel_cache=object())


# ---- device properties ----------------------------------------------------------------------------

def test_device_properties_round_trip_exactly():
    p = opendnn.device_properties("cuda", 0, 90, 132)
    text = p.serialize()
    q = opendnn.create_device_properties(text)
    assert q.serialize() == text and q == p
    with pytest.raises(ValueError, match="exactly"):
        opendnn.create_device_properties('{"kind": "cuda"}')
    with pytest.raises(ValueError, match="sm_version"):
        opendnn.create_device_properties('{"kind": "cuda", "device_id": 0, "sm_version": 0, "sm_count": 1}')
    with pytest.raises(ValueError, match="not JSON"):
        opendnn.create_device_properties("{")


def test_device_properties_of_an_absent_device_is_a_clear_error():
    if opendnn.default_target().kind == opendnn.device_kind.CUDA:
        pytest.skip("a CUDA device is visible")
    with pytest.raises(RuntimeError, match="no engine sees CUDA device 0"):
        opendnn.create_device_properties(0)


def test_deviceless_build_then_deserialize_on_the_device(knobbed_cuda):
    h100 = opendnn.create_device_properties(opendnn.device_properties("cuda", 0, 90, 132).serialize())
    g, a, b, c = _add_graph(device_property=h100)
    g.build([opendnn.heur_mode.A])
    assert g.get_plan_name_at_index(g.selected_plan()) == "knobbed_add:tiled"  # the reference engine is CPU only
    data = g.serialize()
    assert json.loads(bytes(data))["plan"]["target"] == {"kind": "cuda", "sm_version": 90, "sm_count": 132}
    # On "the device" (a graph planning for the same kind of device) it executes without planning.
    proposals = knobbed_cuda.proposals
    there = opendnn.pygraph(device_property=opendnn.device_properties("cuda", 0, 90, 114))
    there.deserialize(None, data)
    assert knobbed_cuda.proposals == proposals
    _run(there, a, b, c)
    # Another SM version, or a process that plans for the CPU, refuses it.
    with pytest.raises(RuntimeError, match="built for sm_90 but this device is sm_100"):
        opendnn.pygraph(device_property=opendnn.device_properties("cuda", 0, 100, 148)).deserialize(data)
    if opendnn.default_target().kind == opendnn.device_kind.CPU:
        with pytest.raises(RuntimeError, match="built for a cuda target but this graph plans for cpu"):
            opendnn.pygraph().deserialize(data)


def test_device_properties_for_the_cpu_plan_with_the_reference_engine():
    cpu = opendnn.device_properties("cpu", 0, 0, 0)
    g, a, b, c = _add_graph(device_property=opendnn.create_device_properties(cpu.serialize()))
    g.build([opendnn.heur_mode.FALLBACK])
    assert g.get_plan_name_at_index(g.selected_plan()) == "reference:reference"
    h = opendnn.pygraph(device_property=cpu)
    h.deserialize(g.serialize())
    _run(h, a, b, c)
