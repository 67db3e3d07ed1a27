# SPDX-License-Identifier: Apache-2.0
"""opendnn.ops: torch custom ops over opendnn graphs (experimental).

    import opendnn.ops
    o = opendnn.ops.sdpa(q, k, v, is_causal=True)                  # q, k, v: [B, H, S, D]
    o, state = opendnn.ops.gated_delta_net(q, k, v, g, beta, output_final_state=True)

Both are ``torch.library.custom_op`` s (``opendnn::sdpa_fwd``/``sdpa_bwd``, ``opendnn::gdn_fwd``/
``gdn_bwd``) with fake kernels and autograd, so they work under ``torch.compile(fullgraph=True)``.
A graph is built once per (op, shapes, strides, dtypes, device, options) and cached; later calls only
allocate their outputs and workspace from torch's caching allocator and execute the plan on torch's
current stream (no host sync), so a warmed-up call can be captured in a CUDA graph.
Inputs the graph cannot take raise ``opendnn.cudnnGraphNotSupportedError`` with the reason.

This module imports torch; ``import opendnn`` does not import it.
"""

import contextlib
import threading
from typing import Optional, Tuple

import torch
from torch import Tensor

import opendnn as _od

NotSupportedError = _od.cudnnGraphNotSupportedError

__all__ = ["sdpa", "gated_delta_net", "causal_conv1d", "clear_cache", "NotSupportedError"]

# ---- the graph cache ------------------------------------------------------------------------------

# key -> _Entry. Entries are never evicted (a CUDA graph may have captured their plans); clear_cache()
# drops them all.
_CACHE = {}
_LOCK = threading.Lock()


class _Entry:
    __slots__ = ("graph", "uids", "workspace")

    def __init__(self, graph, uids, workspace):
        self.graph, self.uids, self.workspace = graph, uids, workspace


def clear_cache():
    """Forgets every built graph (the next call of each configuration builds again)."""
    with _LOCK:
        _CACHE.clear()


def _sig(t):
    return None if t is None else (tuple(t.shape), tuple(t.stride()), t.dtype)


def _device_key(device):
    return (device.type, device.index)


def _on_device(device):
    if device.type == "cuda" and device.index is not None and device.index != torch.cuda.current_device():
        return torch.cuda.device(device)
    return contextlib.nullcontext()


def _target(device):
    if device.type == "cpu":
        return _od.Target()
    if device.type == "cuda":
        idx = device.index if device.index is not None else torch.cuda.current_device()
        major, minor = torch.cuda.get_device_capability(idx)
        sms = torch.cuda.get_device_properties(idx).multi_processor_count
        return _od.Target(_od.device_kind.CUDA, idx, major * 10 + minor, sms)
    raise NotSupportedError(f"opendnn.ops: tensors on device {device} are not supported (cpu or cuda)")


def _entry(what, key, device, make, io_dtype):
    """The built graph for key; make(graph) adds the nodes and returns the graph tensors in pack order."""
    entry = _CACHE.get(key)
    if entry is not None:
        return entry
    with _LOCK:
        entry = _CACHE.get(key)
        if entry is not None:
            return entry
        before = _od.default_target()
        _od.set_default_target(_target(device))  # plans are made for the tensors' device
        try:
            with _on_device(device):
                f = _od.data_type.FLOAT
                g = _od.pygraph(name=f"opendnn.ops.{what}", io_data_type=io_dtype, intermediate_data_type=f,
                                compute_data_type=f)
                tensors = make(g)
                g.build([_od.heur_mode.A, _od.heur_mode.FALLBACK])
                entry = _Entry(g, [t.get_uid() for t in tensors], int(g.get_workspace_size()))
        except NotSupportedError as e:
            raise NotSupportedError(f"opendnn.ops.{what}: {e}") from None
        except (RuntimeError, ValueError, TypeError) as e:
            raise NotSupportedError(f"opendnn.ops.{what}: no plan for these inputs: {e}") from e
        finally:
            _od.set_default_target(before)
        _CACHE[key] = entry
    return entry


def _run(entry, arrays, device):
    """Executes a built graph on arrays (in pack order) on torch's current stream."""
    pack = {uid: a.data_ptr() for uid, a in zip(entry.uids, arrays)}
    ws = torch.empty(entry.workspace, dtype=torch.uint8, device=device) if entry.workspace > 0 else None
    with _on_device(device):
        # A stream object (not its int: an int handle names a handle from create_handle()).
        stream = torch.cuda.current_stream(device) if device.type == "cuda" else None
        entry.graph.execute(pack, None if ws is None else ws.data_ptr(), handle=stream)


def _tensor(g, x, name):
    """A graph tensor describing the torch tensor (or view) x."""
    return g.tensor(dim=list(x.shape), stride=list(x.stride()), data_type=x.dtype, name=name)


def _bind(t, x):
    """Makes graph output t a graph output with x's dims, strides and data type."""
    t.set_output(True).set_dim(list(x.shape)).set_stride(list(x.stride())).set_data_type(x.dtype)
    return t


def _packed_like(like, shape, dtype=None):
    """An empty tensor of shape, packed with its dims in like's stride order (outermost first)."""
    n = len(shape)
    order = sorted(range(n), key=lambda i: (-like.stride(i), i))
    strides, s = [0] * n, 1
    for i in reversed(order):
        strides[i] = s
        s = s * max(shape[i], 1)
    return torch.empty_strided(tuple(shape), tuple(strides), dtype=dtype or like.dtype, device=like.device)


def _fail(what, why):
    raise NotSupportedError(f"opendnn.ops.{what}: {why}")


# ---- scaled dot-product attention -------------------------------------------------------------------

_HALF_TYPES = (torch.float16, torch.bfloat16)


def _check_sdpa(q, k, v):
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, Tensor):
            _fail("sdpa", f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.dim() != 4:
            _fail("sdpa", f"{name} must be 4-D [B, H, S, D], got shape {tuple(t.shape)}")
        if t.dtype not in _HALF_TYPES:
            _fail("sdpa", f"{name} has dtype {t.dtype}; attention takes torch.float16 or torch.bfloat16")
        if t.device != q.device:
            _fail("sdpa", f"{name} is on {t.device} but q is on {q.device}")
    if k.dtype != q.dtype or v.dtype != q.dtype:
        _fail("sdpa", f"q, k, v must have one dtype, got {q.dtype}, {k.dtype}, {v.dtype}")
    b, hq, _, d = q.shape
    if k.shape[0] != b or v.shape[0] != b:
        _fail("sdpa", f"batch sizes differ: q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}")
    if k.shape[3] != d:
        _fail("sdpa", f"head dims of q {tuple(q.shape)} and k {tuple(k.shape)} differ")
    if k.shape[2] != v.shape[2]:
        _fail("sdpa", f"sequence lengths of k {tuple(k.shape)} and v {tuple(v.shape)} differ")
    if hq % k.shape[1] != 0 or hq % v.shape[1] != 0:
        _fail("sdpa", f"q heads ({hq}) must be a multiple of k heads ({k.shape[1]}) and v heads ({v.shape[1]})")


def _sdpa_fwd_outputs(q, v):
    b, h, s, _ = q.shape
    o = _packed_like(q, (b, h, s, v.shape[3]))
    stats = torch.empty((b, h, s, 1), dtype=torch.float32, device=q.device)
    return o, stats


def _sdpa_options(scale, align, left, right):
    opts = {"attn_scale": float(scale), "diagonal_alignment": align}
    if left is not None:
        opts["diagonal_band_left_bound"] = int(left)
    if right is not None:
        opts["diagonal_band_right_bound"] = int(right)
    return opts


@torch.library.custom_op("opendnn::sdpa_fwd", mutates_args=())
def _sdpa_fwd(q: Tensor, k: Tensor, v: Tensor, attn_scale: float, diagonal_alignment: str,
              left_bound: Optional[int], right_bound: Optional[int]) -> Tuple[Tensor, Tensor]:
    o, stats = _sdpa_fwd_outputs(q, v)
    opts = _sdpa_options(attn_scale, diagonal_alignment, left_bound, right_bound)
    key = ("sdpa_fwd", _device_key(q.device), _sig(q), _sig(k), _sig(v), tuple(sorted(opts.items())))

    def make(g):
        Q, K, V = _tensor(g, q, "q"), _tensor(g, k, "k"), _tensor(g, v, "v")
        O, S = g.sdpa(q=Q, k=K, v=V, generate_stats=True, name="sdpa", **opts)
        return [Q, K, V, _bind(O, o), _bind(S, stats)]

    entry = _entry("sdpa", key, q.device, make, q.dtype)
    _run(entry, (q, k, v, o, stats), q.device)
    return o, stats


@_sdpa_fwd.register_fake
def _sdpa_fwd_fake(q, k, v, attn_scale, diagonal_alignment, left_bound, right_bound):
    return _sdpa_fwd_outputs(q, v)


@torch.library.custom_op("opendnn::sdpa_bwd", mutates_args=())
def _sdpa_bwd(dout: Tensor, q: Tensor, k: Tensor, v: Tensor, o: Tensor, stats: Tensor, attn_scale: float,
              diagonal_alignment: str, left_bound: Optional[int], right_bound: Optional[int]
              ) -> Tuple[Tensor, Tensor, Tensor]:
    dq, dk, dv = _packed_like(q, q.shape), _packed_like(k, k.shape), _packed_like(v, v.shape)
    opts = _sdpa_options(attn_scale, diagonal_alignment, left_bound, right_bound)
    key = ("sdpa_bwd", _device_key(q.device), _sig(dout), _sig(q), _sig(k), _sig(v), _sig(o), _sig(stats),
           tuple(sorted(opts.items())))

    def make(g):
        ins = [_tensor(g, x, n) for x, n in ((q, "q"), (k, "k"), (v, "v"), (o, "o"), (dout, "dO"), (stats, "stats"))]
        dQ, dK, dV = g.sdpa_backward(*ins, name="sdpa_backward", **opts)
        return ins + [_bind(dQ, dq), _bind(dK, dk), _bind(dV, dv)]

    entry = _entry("sdpa_backward", key, q.device, make, q.dtype)
    _run(entry, (q, k, v, o, dout, stats, dq, dk, dv), q.device)
    return dq, dk, dv


@_sdpa_bwd.register_fake
def _sdpa_bwd_fake(dout, q, k, v, o, stats, attn_scale, diagonal_alignment, left_bound, right_bound):
    return _packed_like(q, q.shape), _packed_like(k, k.shape), _packed_like(v, v.shape)


def _sdpa_setup_context(ctx, inputs, output):
    q, k, v, attn_scale, align, left, right = inputs
    o, stats = output
    ctx.save_for_backward(q, k, v, o, stats)
    ctx.options = (attn_scale, align, left, right)


def _sdpa_backward(ctx, grad_o, grad_stats):
    q, k, v, o, stats = ctx.saved_tensors
    if grad_o.stride() != o.stride():  # give dO the layout of O (expanded or odd-strided grads)
        grad_o = torch.empty_strided(o.shape, o.stride(), dtype=o.dtype, device=o.device).copy_(grad_o)
    dq, dk, dv = torch.ops.opendnn.sdpa_bwd(grad_o, q, k, v, o, stats, *ctx.options)
    return dq, dk, dv, None, None, None, None


_sdpa_fwd.register_autograd(_sdpa_backward, setup_context=_sdpa_setup_context)


def sdpa(q, k, v, *, attn_scale=None, is_causal=False, diagonal_alignment="TOP_LEFT", left_bound=None,
         right_bound=None):
    """Scaled dot-product attention of q [B, Hq, Sq, D], k [B, Hk, Skv, D], v [B, Hv, Skv, Dv] (any
    strides, fp16/bf16, GQA when Hq is a multiple of Hk and Hv); returns O [B, Hq, Sq, Dv] in q's dtype,
    laid out in q's stride order. attn_scale defaults to D**-0.5. is_causal sets right_bound = 0;
    left_bound/right_bound give a band around the diagonal aligned TOP_LEFT or BOTTOM_RIGHT."""
    _check_sdpa(q, k, v)
    align = getattr(diagonal_alignment, "name", diagonal_alignment)
    if align not in ("TOP_LEFT", "BOTTOM_RIGHT"):
        _fail("sdpa", f"diagonal_alignment must be TOP_LEFT or BOTTOM_RIGHT, got {diagonal_alignment!r}")
    if attn_scale is not None and not isinstance(attn_scale, (int, float)):
        _fail("sdpa", f"attn_scale must be a python number, got {type(attn_scale).__name__}")
    if is_causal and right_bound is None:
        right_bound = 0
    scale = float(attn_scale) if attn_scale is not None else q.shape[-1] ** -0.5
    return torch.ops.opendnn.sdpa_fwd(q, k, v, scale, align, left_bound, right_bound)[0]


# ---- gated delta net ---------------------------------------------------------------------------------
#
# The custom ops take token-packed (THD) tensors: q, k [T, H, K], v [T, HV, V], g, beta [T, HV],
# cu_seqlens [N+1], and states in flash-linear-attention's layout [N, HV, K, V]; the graph sees the
# states as their V-major transposed views [N, HV, V, K] (no copy).


def _gdn_fwd_outputs(q, v, cu_seqlens, output_final_state):
    t, hv, dv = v.shape
    n, dk = cu_seqlens.shape[0] - 1, q.shape[2]
    o = torch.empty((t, hv, dv), dtype=q.dtype, device=q.device)
    fs_shape = (n, hv, dk, dv) if output_final_state else (0,)
    return o, torch.empty(fs_shape, dtype=torch.float32, device=q.device)


def _gdn_bwd_outputs(q, k, v, g, beta, initial_state):
    dh0 = torch.empty_like(initial_state, memory_format=torch.contiguous_format) if initial_state is not None \
        else torch.empty((0,), dtype=torch.float32, device=q.device)
    return (_packed_like(q, q.shape), _packed_like(k, k.shape), _packed_like(v, v.shape),
            _packed_like(g, g.shape), _packed_like(beta, beta.shape), dh0)


def _vmajor(state):
    return state.transpose(-1, -2)  # [N, HV, K, V] -> the graph's [N, HV, V, K]


@torch.library.custom_op("opendnn::gdn_fwd", mutates_args=())
def _gdn_fwd(q: Tensor, k: Tensor, v: Tensor, g: Tensor, beta: Tensor, cu_seqlens: Tensor,
             initial_state: Optional[Tensor], scale: float, use_qk_l2norm: bool,
             output_final_state: bool) -> Tuple[Tensor, Tensor]:
    o, fs = _gdn_fwd_outputs(q, v, cu_seqlens, output_final_state)
    h0 = None if initial_state is None else _vmajor(initial_state)
    ins = [q, k, v, g, beta, cu_seqlens] + ([h0] if h0 is not None else [])
    outs = [o] + ([_vmajor(fs)] if output_final_state else [])
    key = ("gdn_fwd", _device_key(q.device), tuple(_sig(x) for x in ins), float(scale), bool(use_qk_l2norm),
           bool(output_final_state))

    def make(gr):
        names = ["q", "k", "v", "g", "beta", "cu_seqlens", "initial_state"]
        ts = [_tensor(gr, x, n) for x, n in zip(ins, names)]
        kw = dict(zip(names, ts))
        O, FS, _ = gr.gdn(scale=float(scale), use_qk_l2norm=bool(use_qk_l2norm),
                          output_final_state=bool(output_final_state), name="gdn", **kw)
        return ts + [_bind(O, outs[0])] + ([_bind(FS, outs[1])] if output_final_state else [])

    entry = _entry("gated_delta_net", key, q.device, make, q.dtype)
    _run(entry, ins + outs, q.device)
    return o, fs


@_gdn_fwd.register_fake
def _gdn_fwd_fake(q, k, v, g, beta, cu_seqlens, initial_state, scale, use_qk_l2norm, output_final_state):
    return _gdn_fwd_outputs(q, v, cu_seqlens, output_final_state)


@torch.library.custom_op("opendnn::gdn_bwd", mutates_args=())
def _gdn_bwd(dout: Tensor, q: Tensor, k: Tensor, v: Tensor, g: Tensor, beta: Tensor, cu_seqlens: Tensor,
             initial_state: Optional[Tensor], d_final_state: Optional[Tensor], scale: float,
             use_qk_l2norm: bool) -> Tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor]:
    grads = _gdn_bwd_outputs(q, k, v, g, beta, initial_state)
    names = ["q", "k", "v", "g", "beta", "cu_seqlens", "dO"]
    ins = [q, k, v, g, beta, cu_seqlens, dout]
    if initial_state is not None:
        names.append("initial_state")
        ins.append(_vmajor(initial_state))
    if d_final_state is not None:
        names.append("d_final_state")
        ins.append(_vmajor(d_final_state))
    outs = list(grads[:5]) + ([_vmajor(grads[5])] if initial_state is not None else [])
    key = ("gdn_bwd", _device_key(q.device), tuple(names), tuple(_sig(x) for x in ins), float(scale),
           bool(use_qk_l2norm))

    def make(gr):
        ts = [_tensor(gr, x, n) for x, n in zip(ins, names)]
        res = gr.gdn_bwd(scale=float(scale), use_qk_l2norm=bool(use_qk_l2norm), name="gdn_bwd",
                         **dict(zip(names, ts)))
        return ts + [_bind(t, x) for t, x in zip(res, outs)]

    entry = _entry("gated_delta_net_backward", key, q.device, make, q.dtype)
    _run(entry, ins + outs, q.device)
    return grads


@_gdn_bwd.register_fake
def _gdn_bwd_fake(dout, q, k, v, g, beta, cu_seqlens, initial_state, d_final_state, scale, use_qk_l2norm):
    return _gdn_bwd_outputs(q, k, v, g, beta, initial_state)


def _gdn_setup_context(ctx, inputs, output):
    q, k, v, g, beta, cu_seqlens, initial_state, scale, use_qk_l2norm, output_final_state = inputs
    ctx.save_for_backward(q, k, v, g, beta, cu_seqlens, initial_state)
    ctx.options = (float(scale), bool(use_qk_l2norm), bool(output_final_state))


def _gdn_backward(ctx, grad_o, grad_final_state):
    q, k, v, g, beta, cu_seqlens, initial_state = ctx.saved_tensors
    scale, use_qk_l2norm, output_final_state = ctx.options
    dfs = grad_final_state.contiguous() if output_final_state and grad_final_state is not None else None
    dq, dk, dv, dg, dbeta, dh0 = torch.ops.opendnn.gdn_bwd(grad_o.contiguous(), q, k, v, g, beta, cu_seqlens,
                                                           initial_state, dfs, scale, use_qk_l2norm)
    return dq, dk, dv, dg, dbeta, None, (dh0 if initial_state is not None else None), None, None, None


_gdn_fwd.register_autograd(_gdn_backward, setup_context=_gdn_setup_context)


def _check_gdn(q, k, v, g, beta, cu_seqlens, initial_state):
    what = "gated_delta_net"
    named = [("q", q), ("k", k), ("v", v), ("g", g), ("beta", beta), ("cu_seqlens", cu_seqlens),
             ("initial_state", initial_state)]
    for name, t in named:
        if t is None and name in ("cu_seqlens", "initial_state"):
            continue
        if not isinstance(t, Tensor):
            _fail(what, f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.device != q.device:
            _fail(what, f"{name} is on {t.device} but q is on {q.device}")
    if q.dim() != 4 or v.dim() != 4:
        _fail(what, f"q and v must be 4-D [B, T, H, K] / [B, T, HV, V], got {tuple(q.shape)} and {tuple(v.shape)}")
    b, t, h, dk = q.shape
    hv, dv = v.shape[2], v.shape[3]
    if tuple(k.shape) != tuple(q.shape):
        _fail(what, f"k {tuple(k.shape)} must have q's shape {tuple(q.shape)}")
    if tuple(v.shape[:2]) != (b, t):
        _fail(what, f"v {tuple(v.shape)} must have q's batch and length ({b}, {t})")
    if hv % h != 0:
        _fail(what, f"value heads HV = {hv} must be a multiple of q/k heads H = {h}")
    for name, x in (("g", g), ("beta", beta)):
        if tuple(x.shape) != (b, t, hv):
            _fail(what, f"{name} {tuple(x.shape)} must be [B, T, HV] = {(b, t, hv)}")
    if q.dtype not in (torch.float16, torch.bfloat16, torch.float32):
        _fail(what, f"q has dtype {q.dtype}; allowed: float16, bfloat16, float32")
    if k.dtype != q.dtype or v.dtype != q.dtype:
        _fail(what, f"q, k, v must have one dtype, got {q.dtype}, {k.dtype}, {v.dtype}")
    if t < 1:
        _fail(what, "the sequence length T must be >= 1")
    n = b
    if cu_seqlens is not None:
        if b != 1:
            _fail(what, f"with cu_seqlens the batch size must be 1 (token-packed), got B = {b}")
        if cu_seqlens.dim() != 1 or cu_seqlens.shape[0] < 2 or cu_seqlens.dtype not in (torch.int32, torch.int64):
            _fail(what, f"cu_seqlens must be a 1-D int32/int64 tensor [N+1] with N >= 1, got "
                        f"{tuple(cu_seqlens.shape)} {cu_seqlens.dtype}")
        n = cu_seqlens.shape[0] - 1
    if initial_state is not None:
        if tuple(initial_state.shape) != (n, hv, dk, dv):
            _fail(what, f"initial_state {tuple(initial_state.shape)} must be [N, HV, K, V] = {(n, hv, dk, dv)}")
        if initial_state.dtype not in (torch.float32, torch.bfloat16):
            _fail(what, f"initial_state has dtype {initial_state.dtype}; allowed: float32, bfloat16")


def gated_delta_net(q, k, v, g, beta, *, cu_seqlens=None, initial_state=None, output_final_state=False,
                    scale=None, use_qk_l2norm=False):
    """Gated delta rule with flash-linear-attention's ``chunk_gated_delta_rule`` semantics.

    q, k [B, T, H, K], v [B, T, HV, V] (HV a multiple of H), g (log-space decay) and beta [B, T, HV];
    with cu_seqlens [N+1] the sequences are packed along T and B must be 1. initial_state is
    [N, HV, K, V] (float32 or bfloat16). Returns (o [B, T, HV, V] in q's dtype, final_state
    [N, HV, K, V] float32 when output_final_state, else None). scale defaults to K**-0.5;
    use_qk_l2norm normalises q and k per head (x * rsqrt(sum x^2 + 1e-6))."""
    _check_gdn(q, k, v, g, beta, cu_seqlens, initial_state)
    b, t, h, dk = q.shape
    hv, dv = v.shape[2], v.shape[3]
    if cu_seqlens is None:
        cu_seqlens = torch.arange(0, b * t + 1, t, dtype=torch.int32, device=q.device)
    scale = float(scale) if scale is not None else dk ** -0.5
    o, fs = torch.ops.opendnn.gdn_fwd(q.reshape(b * t, h, dk), k.reshape(b * t, h, dk), v.reshape(b * t, hv, dv),
                                      g.reshape(b * t, hv), beta.reshape(b * t, hv), cu_seqlens, initial_state,
                                      scale, bool(use_qk_l2norm), bool(output_final_state))
    return o.view(b, t, hv, dv), (fs if output_final_state else None)


# ---- causal conv1d ------------------------------------------------------------------------------------
#
# cuDNN Frontend's cudnn.ops.causal_conv1d: depthwise causal 1-D convolution of x [B, D, L] with
# weight [D, K] (and bias [D]), identity or SiLU activation, over the causal_conv1d graph op.

_CONV1D_ACTIVATIONS = {"identity": "NONE", "silu": "SILU"}


def _conv1d_key(what, x, weight, bias, activation, *extra):
    return (what, _device_key(x.device), _sig(x), _sig(weight), _sig(bias), activation) + tuple(_sig(e) for e in extra)


@torch.library.custom_op("opendnn::causal_conv1d_fwd", mutates_args=())
def _conv1d_fwd(x: Tensor, weight: Tensor, bias: Optional[Tensor], activation: str) -> Tensor:
    y = torch.empty_like(x, memory_format=torch.contiguous_format)

    def make(g):
        X, W = _tensor(g, x, "x"), _tensor(g, weight, "weight")
        B = _tensor(g, bias, "bias") if bias is not None else None
        Y, _ = g.causal_conv1d(X, W, bias=B, activation=activation, name="causal_conv1d")
        return [X, W] + ([B] if B is not None else []) + [_bind(Y, y)]

    entry = _entry("causal_conv1d", _conv1d_key("conv1d_fwd", x, weight, bias, activation), x.device, make, x.dtype)
    _run(entry, [x, weight] + ([bias] if bias is not None else []) + [y], x.device)
    return y


@_conv1d_fwd.register_fake
def _conv1d_fwd_fake(x, weight, bias, activation):
    return torch.empty_like(x, memory_format=torch.contiguous_format)


@torch.library.custom_op("opendnn::causal_conv1d_bwd", mutates_args=())
def _conv1d_bwd(dy: Tensor, x: Tensor, weight: Tensor, bias: Optional[Tensor], activation: str
                ) -> Tuple[Tensor, Tensor, Tensor]:
    dx = torch.empty_like(x, memory_format=torch.contiguous_format)
    dw = torch.empty_like(weight, memory_format=torch.contiguous_format)
    db = torch.empty_like(bias) if bias is not None else torch.empty((0,), dtype=weight.dtype, device=x.device)

    def make(g):
        X, W, DY = _tensor(g, x, "x"), _tensor(g, weight, "weight"), _tensor(g, dy, "dy")
        B = _tensor(g, bias, "bias") if bias is not None else None
        DX, DW, DB, _ = g.causal_conv1d_backward(X, W, DY, bias=B, activation=activation, name="causal_conv1d_bwd")
        outs = [_bind(DX, dx), _bind(DW, dw)] + ([_bind(DB, db)] if B is not None else [])
        return [X, W, DY] + ([B] if B is not None else []) + outs

    key = _conv1d_key("conv1d_bwd", x, weight, bias, activation, dy)
    entry = _entry("causal_conv1d_backward", key, x.device, make, x.dtype)
    arrays = [x, weight, dy] + ([bias] if bias is not None else []) + [dx, dw] + ([db] if bias is not None else [])
    _run(entry, arrays, x.device)
    return dx, dw, db


@_conv1d_bwd.register_fake
def _conv1d_bwd_fake(dy, x, weight, bias, activation):
    db = torch.empty_like(bias) if bias is not None else torch.empty((0,), dtype=weight.dtype, device=x.device)
    return (torch.empty_like(x, memory_format=torch.contiguous_format),
            torch.empty_like(weight, memory_format=torch.contiguous_format), db)


def _conv1d_setup_context(ctx, inputs, output):
    x, weight, bias, activation = inputs
    ctx.save_for_backward(x, weight, bias)
    ctx.activation = activation


def _conv1d_backward(ctx, grad_y):
    x, weight, bias = ctx.saved_tensors
    dx, dw, db = torch.ops.opendnn.causal_conv1d_bwd(grad_y.contiguous(), x, weight, bias, ctx.activation)
    return dx, dw, (db if bias is not None else None), None


_conv1d_fwd.register_autograd(_conv1d_backward, setup_context=_conv1d_setup_context)


def causal_conv1d(x, weight, bias=None, activation="identity"):
    """Depthwise causal 1-D convolution: y[b, d, t] = act(sum_k weight[d, k] * x[b, d, t - K + 1 + k]
    + bias[d]) with x [B, D, L] (zero before t = 0), weight [D, K] (2 <= K <= 256), bias [D] or None,
    activation "identity" or "silu"; fp32/fp16/bf16. Returns y [B, D, L] in x's dtype, with autograd."""
    act = _CONV1D_ACTIVATIONS.get(str(activation).lower())
    if act is None:
        _fail("causal_conv1d", f"activation must be 'identity' or 'silu', got {activation!r}")
    for name, t, rank in (("x", x, 3), ("weight", weight, 2), ("bias", bias, 1)):
        if t is None and name == "bias":
            continue
        if not isinstance(t, Tensor):
            _fail("causal_conv1d", f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.dim() != rank:
            _fail("causal_conv1d", f"{name} must have {rank} dims, got shape {tuple(t.shape)}")
        if t.device != x.device:
            _fail("causal_conv1d", f"{name} is on {t.device} but x is on {x.device}")
    if weight.shape[0] != x.shape[1]:
        _fail("causal_conv1d", f"weight {tuple(weight.shape)} must be [D, K] with D = {x.shape[1]} channels of x")
    x, weight = x.contiguous(), weight.contiguous()
    return torch.ops.opendnn.causal_conv1d_fwd(x, weight, None if bias is None else bias.contiguous(), act)
