# SPDX-License-Identifier: Apache-2.0
"""A script written against cuDNN Frontend's classic Python API (only the import line and the
numpy arrays differ from a torch version). Run as ``python fe_compat_script.py``; the tests import
it with ``import opendnn as cudnn`` in place and check every result against numpy."""

import math

import ml_dtypes
import numpy as np

try:
    import cudnn  # the real cuDNN Frontend, when present
except ImportError:
    import opendnn as cudnn

rng = np.random.default_rng(0)


def matmul_bias_relu(handle):
    b, m, n, k = 2, 16, 32, 24
    a = rng.standard_normal((b, m, k)).astype(np.float32)
    w = rng.standard_normal((b, k, n)).astype(np.float32)
    bias = rng.standard_normal((1, 1, n)).astype(np.float32)
    out = np.zeros((b, m, n), np.float32)

    graph = cudnn.pygraph(io_data_type=cudnn.data_type.FLOAT, intermediate_data_type=cudnn.data_type.FLOAT,
                          compute_data_type=cudnn.data_type.FLOAT, handle=handle)
    A = graph.tensor(name="A", dim=a.shape, stride=[s // 4 for s in a.strides], data_type=a.dtype)
    B = graph.tensor(name="B", dim=w.shape, stride=[s // 4 for s in w.strides], data_type=w.dtype)
    BIAS = graph.tensor_like(bias)
    C = graph.matmul(name="matmul", A=A, B=B)
    D = graph.bias(name="bias", input=C, bias=BIAS)
    E = graph.relu(name="relu", input=D)
    E.set_output(True).set_data_type(cudnn.data_type.FLOAT)

    graph.validate()
    graph.build_operation_graph()
    graph.create_execution_plans([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
    graph.check_support()
    graph.build_plans()
    workspace = np.empty(graph.get_workspace_size(), dtype=np.uint8)
    graph.execute({A: a, B: w, BIAS: bias, E: out}, workspace, handle=handle)
    return out, np.maximum(a @ w + bias, 0.0)


def rmsnorm(handle):
    batch, hidden = 8, 64
    x = rng.standard_normal((batch, hidden, 1, 1)).astype(np.float32)
    scale = rng.standard_normal((1, hidden, 1, 1)).astype(np.float32)
    eps = np.full((1, 1, 1, 1), 1e-5, dtype=np.float32)
    y = np.zeros_like(x)
    inv_var = np.zeros((batch, 1, 1, 1), np.float32)

    graph = cudnn.pygraph(io_data_type=cudnn.data_type.FLOAT, intermediate_data_type=cudnn.data_type.FLOAT,
                          compute_data_type=cudnn.data_type.FLOAT)
    X = graph.tensor(name="X", dim=list(x.shape), stride=[hidden, 1, hidden, hidden], data_type=cudnn.data_type.FLOAT)
    SCALE = graph.tensor(name="scale", dim=list(scale.shape), stride=[hidden, 1, hidden, hidden],
                         data_type=cudnn.data_type.FLOAT)
    EPS = graph.tensor(name="epsilon", dim=[1, 1, 1, 1], stride=[1, 1, 1, 1], is_pass_by_value=True,
                       data_type=cudnn.data_type.FLOAT)
    Y, INV_VAR = graph.rmsnorm(name="rmsnorm", norm_forward_phase=cudnn.norm_forward_phase.TRAINING, input=X,
                               scale=SCALE, epsilon=EPS)
    Y.set_output(True).set_data_type(cudnn.data_type.FLOAT)
    INV_VAR.set_output(True).set_data_type(cudnn.data_type.FLOAT)
    graph.build([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
    workspace = np.empty(graph.get_workspace_size(), dtype=np.uint8)
    graph.execute({X: x, SCALE: scale, EPS: eps, Y: y, INV_VAR: inv_var}, workspace, handle=handle)

    ref_inv = 1.0 / np.sqrt(np.mean(x.astype(np.float64) ** 2, axis=(1, 2, 3), keepdims=True) + 1e-5)
    return (y, inv_var), (x * ref_inv * scale, ref_inv)


def causal_sdpa(handle):
    b, h, s, d = 2, 3, 16, 32
    bf16 = ml_dtypes.bfloat16
    q = rng.standard_normal((b, h, s, d)).astype(bf16)
    k = rng.standard_normal((b, h, s, d)).astype(bf16)
    v = rng.standard_normal((b, h, s, d)).astype(bf16)
    o = np.zeros((b, h, s, d), bf16)
    stats = np.zeros((b, h, s, 1), np.float32)
    attn_scale = 1.0 / math.sqrt(d)

    graph = cudnn.pygraph(io_data_type=cudnn.data_type.BFLOAT16, intermediate_data_type=cudnn.data_type.FLOAT,
                          compute_data_type=cudnn.data_type.FLOAT)
    Q = graph.tensor_like(q)
    K = graph.tensor_like(k)
    V = graph.tensor_like(v)
    O, STATS = graph.sdpa(name="sdpa", q=Q, k=K, v=V, is_inference=False, attn_scale=attn_scale,
                          use_causal_mask=True)
    O.set_output(True).set_dim([b, h, s, d]).set_stride([h * s * d, s * d, d, 1])
    STATS.set_output(True).set_data_type(cudnn.data_type.FLOAT)
    graph.validate()
    graph.build_operation_graph()
    graph.create_execution_plans([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
    graph.check_support()
    graph.build_plans()
    workspace = np.empty(graph.get_workspace_size(), dtype=np.uint8)
    graph.execute({Q: q, K: k, V: v, O: o, STATS: stats}, workspace, handle=handle)

    qf, kf, vf = (t.astype(np.float64) for t in (q, k, v))
    scores = qf @ kf.transpose(0, 1, 3, 2) * attn_scale
    scores = np.where(np.tril(np.ones((s, s), bool)), scores, -np.inf)
    mx = scores.max(-1, keepdims=True)
    p = np.exp(scores - mx)
    lse = mx + np.log(p.sum(-1, keepdims=True))
    ref_o = (p / p.sum(-1, keepdims=True)) @ vf
    return (o.astype(np.float32), stats), (ref_o, lse)


def main():
    handle = cudnn.create_handle()
    results = {"matmul_bias_relu": matmul_bias_relu(handle), "rmsnorm": rmsnorm(handle),
               "causal_sdpa": causal_sdpa(handle)}
    cudnn.destroy_handle(handle)
    return results


if __name__ == "__main__":
    for name, (got, want) in main().items():
        got = got if isinstance(got, tuple) else (got,)
        want = want if isinstance(want, tuple) else (want,)
        print(name, [float(np.abs(np.asarray(g, np.float64) - w).max()) for g, w in zip(got, want)])
