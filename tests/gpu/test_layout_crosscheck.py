# SPDX-License-Identifier: Apache-2.0
"""Every GPU plan against the reference engine, in packed, channels-last and strided-view layouts.

For each op family the cudnn and cuda engines take, the graph is built from the GPU arrays' own dims and
strides (``tensor_like``), its outputs are allocated with the strides opendnn infers, and every plan that an
engine accepts is built and executed (``execute_plan_at_index``). Its outputs must match the reference
engine's on the CPU, element by element through each tensor's own strides, so an engine that writes one
layout into memory laid out as another fails here. Needs torch and an NVIDIA GPU; skipped elsewhere.

    PYTHONPATH=build/python python -m pytest tests/gpu/test_layout_crosscheck.py -q
"""

import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("needs a CUDA GPU", allow_module_level=True)

import opendnn as cudnn  # noqa: E402
from gpu_target import planning_target  # noqa: E402

DT = cudnn.data_type
TOL = {torch.float32: 3e-3, torch.float16: 8e-3, torch.bfloat16: 4e-2}  # of max(1, |ref|max); fp32 may run TF32


# ---- layouts: each returns a tensor holding `values` (a contiguous CPU tensor) in some memory layout

def packed(v, dev):
    return v.to(dev).contiguous()


def channels_last(v, dev):
    fmt = torch.channels_last if v.dim() == 4 else torch.channels_last_3d
    return v.to(dev).contiguous(memory_format=fmt)


def padded_rows(v, dev):
    """A view of every row of a wider buffer: last-dim stride 1, row stride larger than the row."""
    big = torch.zeros(*v.shape[:-1], v.shape[-1] + 8, dtype=v.dtype, device=dev)
    big[..., : v.shape[-1]] = v.to(dev)
    return big[..., : v.shape[-1]]


def transposed_last2(v, dev):
    """A [.., M, K] view of a [.., K, M] buffer (column-major matrices)."""
    return v.to(dev).transpose(-1, -2).contiguous().transpose(-1, -2)


def bshd_view(v, dev):
    """[B, H, S, D] viewed from a [B, S, H, D] buffer (the layout most attention callers pass)."""
    return v.to(dev).permute(0, 2, 1, 3).contiguous().permute(0, 2, 1, 3)


# ---- graphs: build(g, T) -> {name: output tensor}; T maps an input name to its graph tensor

def conv2d(g, T):
    return {"Y": g.conv_fprop(T["X"], T["W"], padding=[1, 1], stride=[1, 1], dilation=[1, 1])}


def conv2d_strided(g, T):
    return {"Y": g.conv_fprop(T["X"], T["W"], padding=[0, 1], stride=[2, 1], dilation=[1, 2])}


def conv3d(g, T):
    return {"Y": g.conv_fprop(T["X"], T["W"], padding=[1, 1, 1], stride=[1, 1, 1], dilation=[1, 1, 1])}


def conv_bias_relu(g, T):
    return {"Y": g.relu(g.bias(g.conv_fprop(T["X"], T["W"], padding=[1, 1], stride=[1, 1], dilation=[1, 1]), T["B"]))}


def conv_dgrad(g, T):
    dx = g.conv_dgrad(T["DY"], T["W"], padding=[1, 1], stride=[1, 1], dilation=[1, 1])
    dx.set_dim(T["DXdims"])
    return {"DX": dx}


def conv_wgrad(g, T):
    dw = g.conv_wgrad(T["X"], T["DY"], padding=[1, 1], stride=[1, 1], dilation=[1, 1])
    dw.set_dim(T["DWdims"])
    return {"DW": dw}


def add_relu(g, T):
    return {"Y": g.relu(g.add(T["A"], T["B"]))}


def matmul(g, T):
    return {"C": g.matmul(T["A"], T["B"])}


def layernorm(g, T):
    y, mean, inv = g.layernorm(cudnn.norm_forward_phase.TRAINING, T["X"], T["S"], T["B"], g.tensor_scalar(1e-5))
    return {"Y": y, "mean": mean, "inv_variance": inv}


def rmsnorm(g, T):
    y, inv = g.rmsnorm(cudnn.norm_forward_phase.TRAINING, T["X"], T["S"], None, g.tensor_scalar(1e-5))
    return {"Y": y, "inv_variance": inv}


def sdpa_fwd(g, T):
    o, stats = g.sdpa(T["Q"], T["K"], T["V"], generate_stats=True, attn_scale=0.125, use_causal_mask=True)
    return {"O": o, "Stats": stats}


def cmp_mask(g, T):
    mask = g.cmp_gt(T["A"], T["B"])
    mask.set_data_type(DT.BOOLEAN)
    return {"mask": mask, "Y": g.mul(T["A"], T["M"])}


def slice_matmul(g, T):
    a = g.slice(T["A"], [slice(8, None), slice(16, None), slice(None)])
    b = g.slice(T["B"], [slice(8, None), slice(None), slice(32, None)])
    return {"C": g.matmul(a, b)}


def rnd(*shape):
    return torch.rand(*shape) * 2 - 1


def case_inputs(name):
    """(graph builder, {input: contiguous CPU values})."""
    if name == "conv2d":
        return conv2d, {"X": rnd(2, 16, 10, 12), "W": rnd(32, 16, 3, 3) / 12}
    if name == "conv2d_strided":
        return conv2d_strided, {"X": rnd(2, 8, 11, 9), "W": rnd(16, 8, 3, 3) / 8}
    if name == "conv3d":
        return conv3d, {"X": rnd(2, 8, 5, 6, 7), "W": rnd(16, 8, 3, 3, 3) / 15}
    if name == "conv_bias_relu":
        return conv_bias_relu, {"X": rnd(2, 16, 10, 12), "W": rnd(32, 16, 3, 3) / 12, "B": rnd(1, 32, 1, 1)}
    if name == "conv_dgrad":
        return conv_dgrad, {"DY": rnd(2, 32, 10, 12), "W": rnd(32, 16, 3, 3) / 17}
    if name == "conv_wgrad":
        return conv_wgrad, {"X": rnd(2, 16, 10, 12), "DY": rnd(2, 32, 10, 12) / 15}
    if name == "add_relu":
        return add_relu, {"A": rnd(2, 16, 6, 10), "B": rnd(1, 16, 1, 1)}
    if name == "matmul":
        return matmul, {"A": rnd(3, 64, 48), "B": rnd(3, 48, 80) / 7}
    if name == "layernorm":
        return layernorm, {"X": rnd(4, 32, 128) * 3 + 1, "S": rnd(1, 1, 128), "B": rnd(1, 1, 128)}
    if name == "rmsnorm":
        return rmsnorm, {"X": rnd(4, 32, 128) * 3 + 1, "S": rnd(1, 1, 128)}
    if name == "sdpa":
        return sdpa_fwd, {"Q": rnd(2, 4, 128, 64), "K": rnd(2, 4, 160, 64), "V": rnd(2, 4, 160, 64)}
    if name == "cmp_mask":
        return cmp_mask, {"A": rnd(2, 16, 6, 10), "B": rnd(2, 16, 6, 10), "M": torch.rand(2, 16, 6, 10) > 0.5}
    if name == "slice_matmul":
        return slice_matmul, {"A": rnd(16, 32, 128), "B": rnd(16, 128, 64) / 11}
    raise KeyError(name)


# (case, layout of the main inputs, io dtype)
CASES = [
    ("conv2d", packed, torch.float16), ("conv2d", channels_last, torch.float16), ("conv2d", channels_last, torch.float32),
    ("conv2d_strided", channels_last, torch.float16), ("conv3d", packed, torch.float16), ("conv3d", channels_last, torch.float16),
    ("conv_bias_relu", packed, torch.float16), ("conv_bias_relu", channels_last, torch.float16),
    ("conv_dgrad", packed, torch.float16), ("conv_dgrad", channels_last, torch.float16),
    ("conv_wgrad", packed, torch.float16), ("conv_wgrad", channels_last, torch.float16),
    ("add_relu", packed, torch.float16), ("add_relu", channels_last, torch.float16), ("add_relu", padded_rows, torch.float16),
    ("matmul", packed, torch.bfloat16), ("matmul", transposed_last2, torch.bfloat16), ("matmul", padded_rows, torch.float16),
    ("layernorm", packed, torch.bfloat16), ("layernorm", padded_rows, torch.bfloat16),
    ("rmsnorm", packed, torch.bfloat16), ("rmsnorm", padded_rows, torch.bfloat16),
    ("sdpa", packed, torch.bfloat16), ("sdpa", bshd_view, torch.bfloat16),
    ("cmp_mask", packed, torch.float16), ("cmp_mask", channels_last, torch.float16),
    ("slice_matmul", packed, torch.bfloat16),
]

# Graphs that may have no GPU plan (declined with reasons is fine; only a plan that runs must be right):
# cuDNN's norms take dense rows only, and the cuda norm kernels packed rows only.
MAY_DECLINE = {("layernorm", "padded_rows"), ("rmsnorm", "padded_rows")}

# Inputs that keep a packed layout whatever the case's layout is (per-channel vectors, weights of norms).
SMALL = {"B", "S", "mean", "inv_variance"}


def _lay(layout, name, v, dev):
    if name in SMALL or (layout is channels_last and v.dim() not in (4, 5)):
        return packed(v, dev)
    return layout(v, dev)


def _graph(build, arrays, io, extra):
    g = cudnn.pygraph(io_data_type=io, intermediate_data_type=DT.FLOAT, compute_data_type=DT.FLOAT)
    T = {k: g.tensor_like(a, name=k) for k, a in arrays.items()}
    T.update(extra)
    outs = build(g, T)
    for k, t in outs.items():
        t.set_output(True).set_name(k)
        if k not in ("mean", "inv_variance", "Stats", "mask"):
            t.set_data_type(io)
    g.validate()
    return g, T, outs


def _alloc(t, dtype, dev):
    out = torch.empty_strided(t.get_dim(), t.get_stride(), dtype=dtype, device=dev)
    return out.fill_(True) if dtype == torch.bool else out.fill_(float("nan"))


_TORCH_OF = {DT.FLOAT: torch.float32, DT.HALF: torch.float16, DT.BFLOAT16: torch.bfloat16, DT.BOOLEAN: torch.bool}


def _extra(name):
    if name == "conv_dgrad":
        return {"DXdims": [2, 16, 10, 12]}
    if name == "conv_wgrad":
        return {"DWdims": [32, 16, 3, 3]}
    return {}


def _reference(name, vals, dtype):
    build = case_inputs(name)[0]
    with planning_target("cpu"):
        arrays = {k: _cast(v, dtype) for k, v in vals.items()}
        g, T, outs = _graph(build, arrays, _dt(dtype), _extra(name))
        g.build_operation_graph()
        g.create_execution_plans([cudnn.heur_mode.FALLBACK])
        g.check_support()
        g.build_plans()
        res = {k: _alloc(t, _TORCH_OF[t.get_data_type()], "cpu") for k, t in outs.items()}
        ws = torch.empty(max(1, g.get_workspace_size()), dtype=torch.uint8)
        pack = {T[k]: a for k, a in arrays.items()}
        pack.update({outs[k]: r for k, r in res.items()})
        g.execute(pack, ws)
    return {k: r.double() for k, r in res.items()}


def _cast(v, dtype):
    return v if v.dtype == torch.bool else v.to(dtype)


def _dt(t):
    return {torch.float32: DT.FLOAT, torch.float16: DT.HALF, torch.bfloat16: DT.BFLOAT16}[t]


@pytest.mark.parametrize("name,layout,dtype", CASES, ids=[f"{c}-{lay.__name__}-{str(d)[6:]}" for c, lay, d in CASES])
def test_every_gpu_plan_matches_the_reference(name, layout, dtype):
    torch.manual_seed(0)
    build, vals = case_inputs(name)
    ref = _reference(name, vals, dtype)
    arrays = {k: _lay(layout, k, _cast(v, dtype), "cuda") for k, v in vals.items()}
    with planning_target("cuda"):
        g, T, outs = _graph(build, arrays, _dt(dtype), _extra(name))
        g.build_operation_graph()
        g.create_execution_plans([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
        try:
            g.check_support()
        except cudnn.NotSupportedError as e:
            if (name, layout.__name__) in MAY_DECLINE:
                pytest.skip(f"{name} [{layout.__name__}]: no GPU engine takes this graph: {e}")
            pytest.fail(f"{name}: no GPU engine takes this graph: {e}")
        ran = []
        for i in range(g.get_execution_plan_count()):
            engine = g.get_engine_name_at_index(i)
            plan = g.get_plan_name_at_index(i)
            try:
                g.build_plan_at_index(i)
            except cudnn.NotSupportedError:
                continue  # declined at build with a reason: never run, so never wrong
            res = {k: _alloc(t, _TORCH_OF[t.get_data_type()], "cuda") for k, t in outs.items()}
            ws = torch.empty(max(1, g.get_workspace_size_plan_at_index(i)), dtype=torch.uint8, device="cuda")
            pack = {T[k]: a for k, a in arrays.items()}
            pack.update({outs[k]: r for k, r in res.items()})
            g.execute_plan_at_index(pack, ws, i)
            torch.cuda.synchronize()
            for k, r in res.items():
                want = ref[k]
                got = r.cpu().double()
                assert got.shape == want.shape, f"{engine}/{plan}: {k} shape {tuple(got.shape)} vs {tuple(want.shape)}"
                scale = max(1.0, want.abs().max().item())
                err = (got - want).abs().max().item() / scale
                assert err <= TOL[dtype], (f"{name} [{layout.__name__}] {engine}/{plan}: output {k} (strides "
                                           f"{outs[k].get_stride()}) differs from the reference by {err:.3g} of {scale:.3g}")
            ran.append(f"{engine}/{plan}")
        assert ran, f"{name}: every plan declined at build"
