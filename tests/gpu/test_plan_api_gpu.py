# SPDX-License-Identifier: Apache-2.0
"""The plan-level API on the GPU: cuDNN's engines and knobs, notes read from cuDNN and our kernels,
cudnn/cuda plans that travel through serialize/deserialize, the kernel cache, device properties and
populate_cuda_graph (needs torch and an NVIDIA GPU; skipped elsewhere).

    PYTHONPATH=build-py/python python -m pytest tests/gpu/test_plan_api_gpu.py -q
"""

import ctypes
import json
import time

import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("needs a CUDA GPU", allow_module_level=True)

import opendnn as cudnn  # noqa: E402
from gpu_target import planning_target  # noqa: E402

KT = cudnn.knob_type


@pytest.fixture(autouse=True)
def cuda_target():
    with planning_target("cuda"):
        yield


def _engines():
    return dict((name, eid) for eid, name in cudnn.registered_engines())


def _needs(name):
    if name not in _engines():
        pytest.skip(f"the {name} engine is not in this build")


def _matmul_graph(m=64, n=96, k=128, **kw):
    g = cudnn.pygraph(io_data_type=cudnn.data_type.HALF, intermediate_data_type=cudnn.data_type.FLOAT,
                      compute_data_type=cudnn.data_type.FLOAT, **kw)
    A = g.tensor(name="A", dim=[1, m, k], stride=[m * k, k, 1], data_type=cudnn.data_type.HALF, uid=0)
    B = g.tensor(name="B", dim=[1, k, n], stride=[k * n, n, 1], data_type=cudnn.data_type.HALF, uid=1)
    C = g.matmul(name="matmul", A=A, B=B)
    C.set_output(True).set_uid(2).set_data_type(cudnn.data_type.HALF)
    return g


def _check_matmul(g, m=64, n=96, k=128):
    a = torch.randn(1, m, k, device="cuda", dtype=torch.float16)
    b = torch.randn(1, k, n, device="cuda", dtype=torch.float16)
    c = torch.empty(1, m, n, device="cuda", dtype=torch.float16)
    ws = torch.empty(max(g.get_workspace_size(), 1), device="cuda", dtype=torch.uint8)
    g.execute({0: a, 1: b, 2: c}, ws)
    torch.cuda.synchronize()
    torch.testing.assert_close(c, torch.matmul(a, b), atol=5e-2, rtol=5e-2)


def _conv_graph():
    g = cudnn.pygraph(io_data_type=cudnn.data_type.HALF, intermediate_data_type=cudnn.data_type.FLOAT,
                      compute_data_type=cudnn.data_type.FLOAT)
    X = g.tensor(name="X", dim=[4, 32, 16, 16], stride=[32 * 256, 1, 32 * 16, 32], data_type=cudnn.data_type.HALF)
    W = g.tensor(name="W", dim=[64, 32, 3, 3], stride=[32 * 9, 1, 32 * 3, 32], data_type=cudnn.data_type.HALF)
    Y = g.conv_fprop(image=X, weight=W, padding=[1, 1], stride=[1, 1], dilation=[1, 1])
    Y.set_output(True).set_data_type(cudnn.data_type.HALF)
    g.validate()
    g.build_operation_graph()
    return g, X, W, Y


def test_cudnn_engines_and_kernel_cfg_knobs():
    _needs("cudnn")
    g, X, W, Y = _conv_graph()
    created = 0
    with_cfg = None
    for engine in range(g.get_engine_count()):
        try:
            knobs = g.get_knobs_for_engine(engine)
        except RuntimeError:
            continue
        for knob in knobs:
            if knob.type == KT.KERNEL_CFG:
                with_cfg = (engine, knob)
                for cfg in range(knob.min_value, knob.max_value + 1, knob.stride):
                    try:
                        g.create_execution_plan(engine, {KT.KERNEL_CFG: cfg})
                        created += 1
                    except RuntimeError:
                        continue
    assert created > 0, "no cuDNN engine offered a KERNEL_CFG knob for a conv"
    engine, knob = with_cfg
    with pytest.raises(RuntimeError, match=f"knob KERNEL_CFG of cudnn engine {engine} takes"):
        g.create_execution_plan(engine, {KT.KERNEL_CFG: knob.max_value + 1})
    g.check_support()
    g.build_plans()
    x = torch.randn(4, 32, 16, 16, device="cuda", dtype=torch.float16).to(memory_format=torch.channels_last)
    w = torch.randn(64, 32, 3, 3, device="cuda", dtype=torch.float16).to(memory_format=torch.channels_last)
    y = torch.empty(4, 64, 16, 16, device="cuda", dtype=torch.float16).to(memory_format=torch.channels_last)
    g.execute({X: x, W: w, Y: y}, torch.empty(g.get_workspace_size(), device="cuda", dtype=torch.uint8))
    torch.cuda.synchronize()
    torch.testing.assert_close(y, torch.nn.functional.conv2d(x, w, padding=1), atol=5e-2, rtol=5e-2)


def test_notes_come_from_cudnn_and_our_kernels():
    g = _matmul_graph()
    g.validate()
    g.create_execution_plans([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
    seen = {}
    for i in range(g.get_execution_plan_count()):
        seen[g.get_plan_name_at_index(i)] = (g.get_behavior_notes_for_plan_at_index(i),
                                             g.get_numerical_notes_for_plan_at_index(i))
    for name, (bn, nn) in seen.items():
        if name.startswith("cuda:gemm"):
            assert cudnn.numerical_note.TENSOR_CORE in nn, name
    if "cudnn" in _engines():
        assert any(n.startswith("cudnn:") for n in seen), seen
        # cuDNN reports notes for at least one of its engines (fp16 matmul engines use tensor cores).
        assert any(nn or bn for n, (bn, nn) in seen.items() if n.startswith("cudnn:")), seen


@pytest.mark.parametrize("engine", ["cudnn", "cuda"])
def test_plans_travel_per_engine(engine):
    _needs(engine)
    g = _matmul_graph(m=128, n=256, k=128)
    g.validate()
    g.create_execution_plans([cudnn.heur_mode.A])
    g.deselect_engines([e for e in _engines() if e != engine])
    try:
        g.check_support()
    except cudnn.cudnnGraphNotSupportedError:
        pytest.skip(f"{engine} does not take this matmul here")
    g.build_plans()
    data = g.serialize()
    plan = json.loads(bytes(data))["plan"]
    assert plan["engine"]["name"] == engine
    if engine == "cudnn":
        assert plan["payload"], "cuDNN's execution-plan JSON was not carried"
    h = cudnn.pygraph()
    handle = cudnn.create_handle()
    h.deserialize(handle, data)
    assert h.get_workspace_size() == g.get_workspace_size()
    _check_matmul(h, m=128, n=256, k=128)


def test_deviceless_aot_round_trip():
    props = cudnn.create_device_properties(0)
    text = props.serialize()
    assert cudnn.create_device_properties(text).serialize() == text
    g = _matmul_graph(device_property=cudnn.create_device_properties(text))
    g.build([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
    h = cudnn.pygraph()
    h.deserialize(cudnn.create_handle(), g.serialize())
    _check_matmul(h)
    other = cudnn.device_properties("cuda", 0, 100, 148)  # a device this machine does not have
    if "cudnn" in _engines():
        g2 = _matmul_graph(device_property=other)
        g2.validate()
        g2.create_execution_plans([cudnn.heur_mode.A])
        names = [g2.get_plan_name_at_index(i) for i in range(g2.get_execution_plan_count())]
        assert not any(n.startswith("cudnn:") for n in names)  # cuDNN plans only on the device itself


def test_kernel_cache_second_build_is_fast():
    cache = cudnn.create_kernel_cache()
    g = _matmul_graph(m=8, n=8, k=8, kernel_cache=cache)
    g.build([cudnn.heur_mode.FALLBACK])
    text = cache.serialize()
    fresh = cudnn.create_kernel_cache()
    fresh.deserialize(text)
    with pytest.raises(Exception):
        fresh.deserialize(text)
    g2 = _matmul_graph(m=8, n=8, k=8, kernel_cache=fresh)
    t0 = time.time()
    g2.build([cudnn.heur_mode.FALLBACK])
    assert (time.time() - t0) * 1000 <= 10.0
    _check_matmul(g2, m=8, n=8, k=8)


def _cudart():
    for name in ("libcudart.so.13", "libcudart.so.12", "libcudart.so"):
        try:
            return ctypes.CDLL(name)
        except OSError:
            continue
    pytest.skip("no libcudart to create a CUDA graph with")


@pytest.mark.parametrize("engine", ["cudnn", "cuda"])
def test_populate_and_update_cuda_graph(engine):
    _needs(engine)
    rt = _cudart()
    g = _matmul_graph(m=128, n=256, k=128)
    g.validate()
    if engine == "cudnn":  # only cuDNN engines with this note record into a CUDA graph
        g.select_behavior_notes([cudnn.behavior_note.SUPPORTS_CUDA_GRAPH_NATIVE_API])
    g.create_execution_plans([cudnn.heur_mode.A])
    g.deselect_engines([e for e in _engines() if e != engine])
    try:
        g.check_support()
        g.build_plans()
    except cudnn.cudnnGraphNotSupportedError:
        pytest.skip(f"{engine} does not take this matmul here")
    a = torch.randn(1, 128, 128, device="cuda", dtype=torch.float16)
    b = torch.randn(1, 128, 256, device="cuda", dtype=torch.float16)
    c = torch.zeros(1, 128, 256, device="cuda", dtype=torch.float16)
    ws = torch.empty(max(g.get_workspace_size(), 1), device="cuda", dtype=torch.uint8)
    graph = ctypes.c_void_p()
    assert rt.cudaGraphCreate(ctypes.byref(graph), 0) == 0
    handle = cudnn.create_handle()
    try:
        g.populate_cuda_graph(handle, {0: a, 1: b, 2: c}, ws, graph.value)
    except cudnn.cudnnGraphNotSupportedError as e:
        pytest.skip(str(e))
    c2 = torch.zeros_like(c)
    g.update_cuda_graph(handle, {0: a, 1: b, 2: c2}, ws, graph.value)
    exe = ctypes.c_void_p()
    assert rt.cudaGraphInstantiate(ctypes.byref(exe), graph, ctypes.c_ulonglong(0)) == 0
    assert rt.cudaGraphLaunch(exe, ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)) == 0
    torch.cuda.synchronize()
    torch.testing.assert_close(c2, torch.matmul(a, b), atol=5e-2, rtol=5e-2)
    assert not c.any()  # the update replaced the first recording
    rt.cudaGraphExecDestroy(exe)
    rt.cudaGraphDestroy(graph)
