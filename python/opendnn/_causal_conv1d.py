# SPDX-License-Identifier: Apache-2.0
"""cuDNN Frontend's raw-pointer ``causal_conv1d_forward`` / ``causal_conv1d_backward``.

The arguments are integers: a stream, device (or, on the CPU target, host) addresses, the problem
size, a cuDNN data type number (cudnnDataType_t: 0 FLOAT, 1 DOUBLE, 2 HALF, 9 BFLOAT16) and an
activation number (0 identity, 1 SiLU). x and out are [batch, dim, seq_len] packed, weight
[dim, kernel_size], bias [dim] (address 0: no bias). Each call runs the causal_conv1d graph op, built
once per configuration for the default target and cached.
"""

import threading

from ._C import cudnnGraphNotSupportedError, data_type, default_target, device_kind, heur_mode
from ._pygraph import pygraph

_CUDNN_TYPES = {0: data_type.FLOAT, 1: data_type.DOUBLE, 2: data_type.HALF, 9: data_type.BFLOAT16}
_ACTIVATIONS = {0: "NONE", 1: "SILU"}
_MAX_KERNEL = 256
_cache = {}
_lock = threading.Lock()


def _dtype(what, value):
    t = _CUDNN_TYPES.get(int(value))
    if t is None:
        raise ValueError(f"{what}: data type {value} is not a cudnnDataType_t opendnn takes "
                         f"({', '.join(f'{k} {v.name}' for k, v in _CUDNN_TYPES.items())})")
    return t


def _check(what, batch, dim, seq_len, kernel_size, activation):
    if not 2 <= kernel_size <= _MAX_KERNEL:
        raise ValueError(f"{what} kernel_size must be between 2 and {_MAX_KERNEL}, inclusive; got {kernel_size}")
    if min(batch, dim, seq_len) < 1:
        raise ValueError(f"{what}: batch, dim and seq_len must be >= 1, got {batch}, {dim}, {seq_len}")
    if int(activation) not in _ACTIVATIONS:
        raise ValueError(f"{what}: activation {activation} is not 0 (identity) or 1 (SiLU)")


def _graph(key, make):
    """(graph, uids in make's order, workspace) for key, built on first use."""
    entry = _cache.get(key)
    if entry is None:
        with _lock:
            entry = _cache.get(key)
            if entry is None:
                g = pygraph(name=key[0], io_data_type=data_type.FLOAT, intermediate_data_type=data_type.FLOAT,
                            compute_data_type=data_type.FLOAT)
                tensors = make(g)
                g.build([heur_mode.A, heur_mode.FALLBACK])
                ws_size = int(g.get_workspace_size())
                workspace = None
                if ws_size > 0:
                    if default_target().kind != device_kind.CPU:
                        raise cudnnGraphNotSupportedError(
                            f"{key[0]}: the plan needs {ws_size} bytes of workspace, which the raw-pointer entry point "
                            "cannot allocate; use opendnn.ops.causal_conv1d")
                    import numpy as np

                    workspace = np.empty(ws_size, np.uint8)
                entry = _cache[key] = (g, [t.get_uid() for t in tensors], workspace)
    return entry


class _Stream:
    """A raw cudaStream_t as a stream object (an int given as handle= means a cudnn handle)."""

    __slots__ = ("cuda_stream",)

    def __init__(self, stream):
        self.cuda_stream = int(stream)


def _run(entry, ptrs, stream):
    g, uids, workspace = entry
    g.execute({u: int(p) for u, p in zip(uids, ptrs)}, workspace, handle=_Stream(stream))


def causal_conv1d_forward(stream, x, weight, bias, out, batch, dim, seq_len, kernel_size, data_type, activation):
    """out = act(causal depthwise conv1d(x, weight) + bias); every pointer an int address."""
    what = "causal_conv1d"
    _check(what, batch, dim, seq_len, kernel_size, activation)
    dt = _dtype(what, data_type)
    has_bias = int(bias) != 0
    key = ("causal_conv1d_forward", batch, dim, seq_len, kernel_size, dt, int(activation), has_bias)

    def make(g):
        X = g.tensor(dim=[batch, dim, seq_len], data_type=dt, name="x")
        W = g.tensor(dim=[dim, kernel_size], data_type=dt, name="weight")
        B = g.tensor(dim=[dim], data_type=dt, name="bias") if has_bias else None
        Y, _ = g.causal_conv1d(X, W, bias=B, activation=_ACTIVATIONS[int(activation)], name=what)
        Y.set_output(True).set_data_type(dt)
        return [X, W] + ([B] if has_bias else []) + [Y]

    _run(_graph(key, make), [x, weight] + ([bias] if has_bias else []) + [out], stream)


def causal_conv1d_backward(stream, x, weight, bias, dy, dx, dweight, dbias, batch, dim, seq_len, kernel_size,
                           data_type, dw_data_type, activation):
    """dx, dweight (in dw_data_type) and, with a bias, dbias of causal_conv1d_forward."""
    what = "causal_conv1d"
    _check(what, batch, dim, seq_len, kernel_size, activation)
    dt, dwt = _dtype(what, data_type), _dtype(what, dw_data_type)
    has_bias = int(bias) != 0
    key = ("causal_conv1d_backward", batch, dim, seq_len, kernel_size, dt, dwt, int(activation), has_bias)

    def make(g):
        X = g.tensor(dim=[batch, dim, seq_len], data_type=dt, name="x")
        W = g.tensor(dim=[dim, kernel_size], data_type=dt, name="weight")
        DY = g.tensor(dim=[batch, dim, seq_len], data_type=dt, name="dy")
        B = g.tensor(dim=[dim], data_type=dt, name="bias") if has_bias else None
        DX, DW, DB, _ = g.causal_conv1d_backward(X, W, DY, bias=B, activation=_ACTIVATIONS[int(activation)],
                                                 name=what + "_backward")
        DX.set_output(True).set_data_type(dt)
        DW.set_output(True).set_data_type(dwt)
        outs = [DX, DW]
        if has_bias:
            DB.set_output(True).set_data_type(dwt)
            outs.append(DB)
        return [X, W, DY] + ([B] if has_bias else []) + outs

    ptrs = [x, weight, dy] + ([bias] if has_bias else []) + [dx, dweight] + ([dbias] if has_bias else [])
    _run(_graph(key, make), ptrs, stream)
