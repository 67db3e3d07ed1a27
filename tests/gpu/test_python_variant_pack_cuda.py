# SPDX-License-Identifier: Apache-2.0
"""Variant-pack checks with torch CUDA tensors (needs torch and an NVIDIA GPU; skipped elsewhere):
host memory for a GPU plan is refused, host scalars from tensor_like plan norms on the GPU engines,
strided views whose layout is the tensor's are accepted, int handles carry the stream.

    PYTHONPATH=build-py/python python -m pytest tests/gpu/test_python_variant_pack_cuda.py -q
"""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("needs a CUDA GPU", allow_module_level=True)

import opendnn as cudnn  # noqa: E402


@pytest.fixture(autouse=True)
def cuda_target():
    before = cudnn.default_target()
    major, minor = torch.cuda.get_device_capability(0)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    cudnn.set_default_target(cudnn.Target(cudnn.device_kind.CUDA, 0, major * 10 + minor, sms))
    yield
    cudnn.set_default_target(before)


def _graph(handle=None):
    f = cudnn.data_type.FLOAT
    return cudnn.pygraph(io_data_type=cudnn.data_type.HALF, intermediate_data_type=f, compute_data_type=f,
                         handle=handle)


def _ws(g):
    return torch.empty(g.get_workspace_size(), dtype=torch.uint8, device="cuda")


def test_host_memory_for_a_gpu_plan_is_refused_and_views_pass():
    x_full = torch.randn(64, 256, device="cuda", dtype=torch.half)
    x = x_full[:, :128]  # a strided view, bound to a tensor with its strides
    g = _graph()
    X = g.tensor_like(x)
    Y = g.relu(input=X)
    Y.set_output(True).set_dim([64, 128]).set_stride([128, 1])
    g.build([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
    y = torch.empty(64, 128, device="cuda", dtype=torch.half)
    g.execute({X: x, Y: y}, _ws(g))
    torch.cuda.synchronize()
    torch.testing.assert_close(y, torch.relu(x))
    with pytest.raises(ValueError, match="runs on the GPU but its numpy array is in host memory"):
        g.execute({X: x, Y: np.zeros((64, 128), np.float16)}, _ws(g))
    with pytest.raises(ValueError, match="runs on the GPU but its torch tensor is in host memory"):
        g.execute({X: x.cpu(), Y: y}, _ws(g))
    with pytest.raises(ValueError, match="name other elements"):
        g.execute({X: x.contiguous().t().contiguous().t(), Y: y}, _ws(g))  # column-major copy
    with pytest.raises(ValueError, match="HALF but .*torch.float32"):
        g.execute({X: x.float(), Y: y}, _ws(g))


def test_host_epsilon_rmsnorm_plans_on_the_gpu_and_takes_the_packs_value():
    x = torch.randn(32, 256, 1, 1, device="cuda", dtype=torch.half)
    scale = torch.randn(1, 256, 1, 1, device="cuda", dtype=torch.half)
    eps = torch.full((1, 1, 1, 1), 1e-5, dtype=torch.float32)  # host tensor: pass by value
    h = cudnn.create_handle()
    g = _graph(handle=h)
    X, S, E = g.tensor_like(x), g.tensor_like(scale), g.tensor_like(eps)
    assert E.get_is_pass_by_value()
    Y, IV = g.rmsnorm(norm_forward_phase=cudnn.norm_forward_phase.TRAINING, input=X, scale=S, epsilon=E)
    Y.set_output(True)
    IV.set_output(True).set_data_type(cudnn.data_type.FLOAT)
    g.build([cudnn.heur_mode.A])  # not FALLBACK: a GPU engine must take it
    assert "reference" not in g.get_engine_name_at_index(g.selected_plan())
    s = torch.cuda.Stream()
    cudnn.set_stream(h, s)  # seen by execute() without handle=
    y, iv = torch.empty_like(x), torch.empty(32, 1, 1, 1, device="cuda", dtype=torch.float32)
    for e in (1e-5, 4.0):
        with torch.cuda.stream(s):
            g.execute({X: x, S: scale, E: torch.full((1, 1, 1, 1), e), Y: y, IV: iv}, _ws(g))
        s.synchronize()
        ref_iv = torch.rsqrt(x.float().pow(2).mean(dim=(1, 2, 3), keepdim=True) + e)
        torch.testing.assert_close(iv, ref_iv, atol=1e-3, rtol=1e-3)
    with pytest.raises(ValueError, match="pass-by-value .* device memory"):
        g.execute({X: x, S: scale, E: eps.cuda(), Y: y, IV: iv}, _ws(g))
