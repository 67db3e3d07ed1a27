# SPDX-License-Identifier: Apache-2.0
"""The Python API with torch CUDA tensors (needs torch and an NVIDIA GPU; skipped elsewhere).

    PYTHONPATH=build-py/python python -m pytest tests/gpu/test_python_torch_cuda.py -q
"""

import math
import sys

import numpy as np

import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("needs a CUDA GPU", allow_module_level=True)

import opendnn as cudnn  # noqa: E402
from gpu_target import planning_target  # noqa: E402


@pytest.fixture(autouse=True)
def cuda_target():
    """Plan for the GPU: CPU plans must never see device pointers."""
    with planning_target("cuda"):
        yield


def test_pointers_dtypes_and_streams():
    t = torch.randn(4, 8, device="cuda", dtype=torch.bfloat16)[:, ::2]
    assert cudnn._C._to_pointer(t) == t.data_ptr()
    g = cudnn.pygraph()
    T = g.tensor_like(t)
    assert T.get_dim() == [4, 4] and T.get_stride() == [8, 2] and T.get_data_type() == cudnn.data_type.BFLOAT16
    assert g.tensor(dim=[2], data_type=torch.float8_e4m3fn).get_data_type() == cudnn.data_type.FP8_E4M3
    info = cudnn._C._dlpack_info(t)
    assert info["device_type"] == 2 and info["data"] == t.data_ptr()  # kDLCUDA
    h = cudnn.create_handle()
    s = torch.cuda.Stream()
    cudnn.set_stream(handle=h, stream=s.cuda_stream)
    assert cudnn.get_stream(h) == s.cuda_stream
    cudnn.set_stream(h, s)
    assert cudnn.get_stream(h) == s.cuda_stream


def _build(graph):
    graph.validate()
    graph.build_operation_graph()
    graph.create_execution_plans([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
    graph.check_support()
    graph.build_plans()
    return torch.empty(graph.get_workspace_size(), dtype=torch.uint8, device="cuda")


def test_matmul_bias_relu_bf16_cuda():
    a = torch.randn(2, 64, 128, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(2, 128, 96, device="cuda", dtype=torch.bfloat16)
    bias = torch.randn(1, 1, 96, device="cuda", dtype=torch.bfloat16)
    handle = cudnn.create_handle()
    cudnn.set_stream(handle, torch.cuda.current_stream().cuda_stream)
    g = cudnn.pygraph(io_data_type=cudnn.data_type.BFLOAT16, intermediate_data_type=cudnn.data_type.FLOAT,
                      compute_data_type=cudnn.data_type.FLOAT, handle=handle)
    A, B, BIAS = g.tensor_like(a), g.tensor_like(b), g.tensor_like(bias)
    Y = g.relu(input=g.bias(input=g.matmul(A=A, B=B), bias=BIAS))
    Y.set_output(True).set_data_type(torch.bfloat16)
    ws = _build(g)
    y = torch.empty(2, 64, 96, device="cuda", dtype=torch.bfloat16)
    g.execute({A: a, B: b, BIAS: bias, Y: y}, ws, handle=handle)
    torch.cuda.synchronize()
    ref = torch.relu(a.float() @ b.float() + bias.float())
    torch.testing.assert_close(y.float(), ref, atol=0.5, rtol=2e-2)


def test_rmsnorm_cuda():
    x = torch.randn(32, 256, 1, 1, device="cuda", dtype=torch.bfloat16)
    scale = torch.randn(1, 256, 1, 1, device="cuda", dtype=torch.bfloat16)
    eps = torch.full((1, 1, 1, 1), 1e-5, dtype=torch.float32)  # host scalar, pass by value
    g = cudnn.pygraph(io_data_type=cudnn.data_type.BFLOAT16, intermediate_data_type=cudnn.data_type.FLOAT,
                      compute_data_type=cudnn.data_type.FLOAT)
    X, S = g.tensor_like(x), g.tensor_like(scale)
    E = g.tensor(dim=[1, 1, 1, 1], stride=[1, 1, 1, 1], data_type=torch.float32, is_pass_by_value=True)
    Y, IV = g.rmsnorm(norm_forward_phase=cudnn.norm_forward_phase.TRAINING, input=X, scale=S, epsilon=E)
    Y.set_output(True)
    IV.set_output(True).set_data_type(cudnn.data_type.FLOAT)
    ws = _build(g)
    y = torch.empty_like(x)
    iv = torch.empty(32, 1, 1, 1, device="cuda", dtype=torch.float32)
    g.execute({X: x, S: scale, E: eps, Y: y, IV: iv}, ws)
    torch.cuda.synchronize()
    ref_iv = torch.rsqrt(x.float().pow(2).mean(dim=(1, 2, 3), keepdim=True) + 1e-5)
    torch.testing.assert_close(iv, ref_iv, atol=1e-3, rtol=1e-3)
    torch.testing.assert_close(y.float(), x.float() * ref_iv * scale.float(), atol=5e-2, rtol=2e-2)


def test_causal_sdpa_cuda():
    b, h, s, d = 2, 4, 128, 64
    q, k, v = (torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    g = cudnn.pygraph(io_data_type=cudnn.data_type.BFLOAT16, intermediate_data_type=cudnn.data_type.FLOAT,
                      compute_data_type=cudnn.data_type.FLOAT)
    Q, K, V = g.tensor_like(q), g.tensor_like(k), g.tensor_like(v)
    O, STATS = g.sdpa(q=Q, k=K, v=V, generate_stats=True, attn_scale=1 / math.sqrt(d), use_causal_mask=True)
    O.set_output(True).set_dim([b, h, s, d]).set_stride([h * s * d, s * d, d, 1])
    STATS.set_output(True).set_data_type(cudnn.data_type.FLOAT)
    ws = _build(g)
    o = torch.empty(b, h, s, d, device="cuda", dtype=torch.bfloat16)
    st = torch.empty(b, h, s, 1, device="cuda", dtype=torch.float32)
    g.execute({Q: q, K: k, V: v, O: o, STATS: st}, ws)
    torch.cuda.synchronize()
    ref = torch.nn.functional.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=True)
    torch.testing.assert_close(o.float(), ref, atol=2e-2, rtol=2e-2)


def test_import_does_not_import_torch_subprocess():
    import subprocess

    r = subprocess.run([sys.executable, "-c", "import sys, opendnn; assert 'torch' not in sys.modules"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


# ---- variant-pack checks (docs/python_execute.md) ----------------------------------------------

def test_host_memory_for_a_gpu_plan_is_refused_and_views_pass():
    x_full = torch.randn(64, 256, device="cuda", dtype=torch.half)
    x = x_full[:, :128]  # a strided view, bound to a tensor with its strides
    g = cudnn.pygraph(io_data_type=cudnn.data_type.HALF, intermediate_data_type=cudnn.data_type.FLOAT,
                      compute_data_type=cudnn.data_type.FLOAT)
    X = g.tensor_like(x)
    Y = g.relu(input=X)
    Y.set_output(True).set_dim([64, 128]).set_stride([128, 1])
    ws = _build(g)
    y = torch.empty(64, 128, device="cuda", dtype=torch.half)
    g.execute({X: x, Y: y}, ws)
    torch.cuda.synchronize()
    torch.testing.assert_close(y, torch.relu(x))
    with pytest.raises(ValueError, match="runs on the GPU but its numpy array is in host memory"):
        g.execute({X: x, Y: np.zeros((64, 128), np.float16)}, ws)
    with pytest.raises(ValueError, match="runs on the GPU but its torch tensor is in host memory"):
        g.execute({X: x.cpu(), Y: y}, ws)
    with pytest.raises(ValueError, match="name other elements"):
        g.execute({X: x.contiguous().t().contiguous().t(), Y: y}, ws)  # column-major copy
    with pytest.raises(ValueError, match="HALF but .*torch.float32"):
        g.execute({X: x.float(), Y: y}, ws)


def test_host_epsilon_rmsnorm_plans_on_the_gpu_and_takes_the_packs_value():
    x = torch.randn(32, 256, 1, 1, device="cuda", dtype=torch.half)
    scale = torch.randn(1, 256, 1, 1, device="cuda", dtype=torch.half)
    eps = torch.full((1, 1, 1, 1), 1e-5, dtype=torch.float32)  # host tensor: pass by value
    h = cudnn.create_handle()
    g = cudnn.pygraph(io_data_type=cudnn.data_type.HALF, intermediate_data_type=cudnn.data_type.FLOAT,
                      compute_data_type=cudnn.data_type.FLOAT, handle=h)
    X, S, E = g.tensor_like(x), g.tensor_like(scale), g.tensor_like(eps)
    assert E.get_is_pass_by_value()
    Y, IV = g.rmsnorm(norm_forward_phase=cudnn.norm_forward_phase.TRAINING, input=X, scale=S, epsilon=E)
    Y.set_output(True)
    IV.set_output(True).set_data_type(cudnn.data_type.FLOAT)
    g.build([cudnn.heur_mode.A])  # not FALLBACK: a GPU engine must take it
    ws = torch.empty(g.get_workspace_size(), dtype=torch.uint8, device="cuda")
    assert "reference" not in g.get_engine_name_at_index(g.selected_plan())
    s = torch.cuda.Stream()
    cudnn.set_stream(h, s)  # seen by execute() without handle=
    y, iv = torch.empty_like(x), torch.empty(32, 1, 1, 1, device="cuda", dtype=torch.float32)
    for e in (1e-5, 4.0):
        with torch.cuda.stream(s):
            g.execute({X: x, S: scale, E: torch.full((1, 1, 1, 1), e), Y: y, IV: iv}, ws)
        s.synchronize()
        ref_iv = torch.rsqrt(x.float().pow(2).mean(dim=(1, 2, 3), keepdim=True) + e)
        torch.testing.assert_close(iv, ref_iv, atol=1e-3, rtol=1e-3)
    with pytest.raises(ValueError, match="pass-by-value .* device memory"):
        g.execute({X: x, S: scale, E: eps.cuda(), Y: y, IV: iv}, ws)
