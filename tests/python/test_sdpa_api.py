# SPDX-License-Identifier: Apache-2.0
"""The SDPA family's Python API: cuDNN Frontend's keywords, defaults and errors, and the reference engine's
results for the cases cuDNN serves on Hopper (large head dims, d_v > d_qk, fully masked rows)."""

import numpy as np
import pytest

import opendnn
from conftest import build

HALF = opendnn.data_type.HALF
F = opendnn.data_type.FLOAT


def half_graph():
    return opendnn.pygraph(io_data_type=HALF, intermediate_data_type=F, compute_data_type=F)


def sdpa_ref(q, k, v, scale, bias=None, causal=False):
    """fp64 attention; rows without a finite logit give O = 0 and Stats = -inf."""
    q, k, v = (x.astype(np.float64) for x in (q, k, v))
    s = np.einsum("bhqd,bhkd->bhqk", q, k) * scale
    if bias is not None:
        s = s + bias.astype(np.float64)
    if causal:
        sq, skv = s.shape[-2:]
        s = np.where(np.triu(np.ones((sq, skv), bool), 1), -np.inf, s)
    m = s.max(-1, keepdims=True)
    safe = np.where(np.isfinite(m), m, 0.0)
    e = np.exp(s - safe)
    z = e.sum(-1, keepdims=True)
    p = np.divide(e, z, out=np.zeros_like(e), where=z > 0)
    with np.errstate(divide="ignore"):
        stats = np.where(z > 0, safe + np.log(np.where(z > 0, z, 1.0)), -np.inf)
    return np.einsum("bhqk,bhkd->bhqd", p, v), stats


def run_forward(q, k, v, scale, bias=None, **kw):
    g = half_graph()
    Q, K, V = g.tensor_like(q), g.tensor_like(k), g.tensor_like(v)
    B = g.tensor_like(bias) if bias is not None else None
    o, st = g.sdpa(q=Q, k=K, v=V, attn_scale=scale, bias=B, generate_stats=True, **kw)
    o.set_output(True)
    st.set_output(True).set_data_type(F)
    ws = build(g)
    out = np.zeros(q.shape[:3] + (v.shape[3],), np.float16)
    stats = np.zeros(q.shape[:3] + (1,), np.float32)
    pack = {Q: q, K: k, V: v, o: out, st: stats}
    if B is not None:
        pack[B] = bias
    g.execute(pack, ws)
    return out, stats


def test_generate_stats_or_is_inference_exactly_one():
    g = half_graph()
    q = g.tensor(dim=[1, 2, 8, 16], data_type=HALF)
    with pytest.raises(RuntimeError, match="Exactly one of"):
        g.sdpa(q=q, k=q, v=q)
    with pytest.raises(RuntimeError, match="Exactly one of"):
        g.sdpa(q=q, k=q, v=q, generate_stats=True, is_inference=False)
    with pytest.raises(RuntimeError, match="Exactly one of"):
        g.sdpa_fp8(q, q, q, q, q, q, q, q, q)
    assert g.sdpa(q=q, k=q, v=q, is_inference=True)[1] is None


@pytest.mark.parametrize("unfuse", [False, True])
def test_unfuse_fma_is_an_attribute_with_the_same_result(unfuse, rng):
    q = rng.standard_normal((1, 2, 8, 16)).astype(np.float16)
    g = half_graph()
    Q = g.tensor_like(q)
    g.sdpa(q=Q, k=Q, v=Q, generate_stats=False, unfuse_fma=unfuse)
    assert g.nodes_info()[-1]["attrs"]["unfuse_fma"] is unfuse
    out, _ = run_forward(q, q, q, 0.25, unfuse_fma=unfuse)
    want, _ = sdpa_ref(q, q, q, 0.25)
    np.testing.assert_allclose(out, want, atol=2e-3, rtol=2e-3)


def test_causal_and_bounds_conflicts_raise_like_cudnn_frontend():
    g = half_graph()
    q = g.tensor(dim=[1, 2, 8, 16], data_type=HALF)
    with pytest.raises(RuntimeError, match="cannot both be true"):
        g.sdpa(q=q, k=q, v=q, generate_stats=False, use_causal_mask=True, use_causal_mask_bottom_right=True)
    with pytest.raises(RuntimeError, match="cannot be set at the same time"):
        g.sdpa(q=q, k=q, v=q, generate_stats=False, use_causal_mask=True, diagonal_band_right_bound=2)
    with pytest.raises(RuntimeError, match="sliding window and left_bound"):
        g.sdpa(q=q, k=q, v=q, generate_stats=False, sliding_window_length=2, diagonal_band_left_bound=3)
    g.sdpa(q=q, k=q, v=q, generate_stats=False, sliding_window_length=3)
    a = g.nodes_info()[-1]["attrs"]
    assert a["left_bound"] == 3 and a.get("right_bound") is None


@pytest.mark.parametrize("d_qk, d_v", [(320, 320), (32, 96), (264, 520)])
def test_large_head_dims_and_wider_v_run_on_the_reference(d_qk, d_v, rng):
    q = (0.3 * rng.standard_normal((1, 2, 6, d_qk))).astype(np.float16)
    k = (0.3 * rng.standard_normal((1, 2, 7, d_qk))).astype(np.float16)
    v = rng.standard_normal((1, 2, 7, d_v)).astype(np.float16)
    out, stats = run_forward(q, k, v, 0.1, use_causal_mask=True)
    want, want_stats = sdpa_ref(q, k, v, 0.1, causal=True)
    np.testing.assert_allclose(out, want, atol=3e-3, rtol=3e-3)
    np.testing.assert_allclose(stats, want_stats, atol=1e-4, rtol=1e-4)


def test_fully_masked_row_forward_and_backward(rng):
    b, h, s, d = 1, 2, 4, 16
    q, k, v, do = (rng.standard_normal((b, h, s, d)).astype(np.float16) for _ in range(4))
    bias = rng.standard_normal((1, h, s, s)).astype(np.float16)
    bias[0, 1, 2, :] = -np.inf  # head 1, query row 2 sees nothing
    out, stats = run_forward(q, k, v, 0.25, bias=bias)
    want, want_stats = sdpa_ref(q, k, v, 0.25, bias=bias)
    np.testing.assert_allclose(out, want, atol=2e-3, rtol=2e-3)
    assert stats[0, 1, 2, 0] == -np.inf and np.all(out[0, 1, 2] == 0)

    g = half_graph()
    Q, K, V, O, dO = (g.tensor_like(x) for x in (q, k, v, out, do))
    St, Bi = g.tensor_like(stats), g.tensor_like(bias)
    dq, dk, dv = g.sdpa_backward(q=Q, k=K, v=V, o=O, dO=dO, stats=St, attn_scale=0.25, bias=Bi)
    for t in (dq, dk, dv):
        t.set_output(True)
    ws = build(g)
    gq, gk, gv = (np.zeros((b, h, s, d), np.float16) for _ in range(3))
    g.execute({Q: q, K: k, V: v, O: out, dO: do, St: stats, Bi: bias, dq: gq, dk: gk, dv: gv}, ws)
    for x in (gq, gk, gv):
        assert np.all(np.isfinite(x))
    assert np.all(gq[0, 1, 2] == 0)


def test_backward_rng_dump_matches_the_forward_mask(rng):
    q = rng.standard_normal((1, 2, 8, 16)).astype(np.float16)
    masks = []
    for backward in (False, True):
        g = half_graph()
        Q = g.tensor_like(q)
        seed = g.tensor(dim=[1, 1, 1, 1], data_type=opendnn.data_type.INT64)
        offset = g.tensor(dim=[1, 1, 1, 1], data_type=opendnn.data_type.INT64)
        dump = g.tensor(dim=[1, 2, 8, 8], data_type=F)
        if backward:
            St = g.tensor(dim=[1, 2, 8, 1], data_type=F)
            outs = g.sdpa_backward(q=Q, k=Q, v=Q, o=Q, dO=Q, stats=St, dropout=(0.3, seed, offset), rng_dump=dump)
        else:
            outs = g.sdpa(q=Q, k=Q, v=Q, generate_stats=False, dropout=(0.3, seed, offset), rng_dump=dump)
        for t in outs:
            if t is not None:
                t.set_output(True)
        ws = build(g)
        pack = {Q: q, seed: np.array([[[[7]]]], np.int64), offset: np.array([[[[3]]]], np.int64)}
        if backward:
            pack[St] = np.zeros((1, 2, 8, 1), np.float32)
        for t in outs:
            if t is not None:
                pack[t] = np.zeros(t.get_dim(), np.float16)
        pack[dump] = np.zeros((1, 2, 8, 8), np.float32)
        g.execute(pack, ws)
        masks.append(pack[dump])
    assert 0 < masks[0].sum() < masks[0].size
    np.testing.assert_array_equal(masks[0], masks[1])


def _fp8_graph():
    g = opendnn.pygraph(io_data_type=opendnn.data_type.FP8_E4M3, intermediate_data_type=F, compute_data_type=F)
    q = g.tensor(dim=[2, 2, 64, 64], data_type=opendnn.data_type.FP8_E4M3)
    sc = [g.tensor(dim=[1, 1, 1, 1], data_type=F) for _ in range(12)]
    return g, q, sc


def test_sdpa_fp8_keywords():
    g, q, sc = _fp8_graph()
    kc = g.tensor(dim=[8, 2, 32, 64], data_type=opendnn.data_type.FP8_E4M3)
    table = g.tensor(dim=[2, 1, 4, 1], data_type=opendnn.data_type.INT32)
    sl = g.tensor(dim=[2, 1, 1, 1], data_type=opendnn.data_type.INT32)
    sink = g.tensor(dim=[1, 2, 1, 1], data_type=F)
    smax = g.tensor(dim=[2, 2, 64, 1], data_type=F)
    ssum = g.tensor(dim=[2, 2, 64, 1], data_type=F)
    o, stats, amax_s, amax_o = g.sdpa_fp8(
        q, kc, kc, *sc[:6], generate_stats=True, use_padding_mask=True, seq_len_q=sl, seq_len_kv=sl,
        paged_attention_k_table=table, paged_attention_v_table=table, paged_attention_max_seq_len_kv=128,
        left_bound=16, right_bound=0, sink_token=sink, score_max=smax, score_sum_exp=ssum, unfuse_fma=True)
    node = g.nodes_info()[-1]
    assert node["inputs"]["page_table_k"] is table and node["inputs"]["sink_token"] is sink
    assert node["attrs"]["max_seq_len_kv"] == 128 and node["attrs"]["left_bound"] == 16
    assert node["outputs"]["Max"] is smax and node["outputs"]["Sum_exp"] is ssum
    for t in (o, stats, amax_s, amax_o, smax, ssum):
        t.set_output(True)
    g.validate()

    g, q, sc = _fp8_graph()
    mask = g.tensor(dim=[2, 2, 64, 64], data_type=F)
    g.sdpa_fp8(q, q, q, *sc[:6], is_inference=True, sliding_window=8, dropout=(mask, sc[6]))
    node = g.nodes_info()[-1]
    assert node["inputs"]["dropout_mask"] is mask and node["attrs"]["left_bound"] == 8
    g.validate()

    g, q, sc = _fp8_graph()
    bias = g.tensor(dim=[1, 2, 64, 64], data_type=HALF)
    g.sdpa_fp8(q, q, q, *sc[:6], generate_stats=False, bias=bias)
    with pytest.raises(opendnn.cudnnGraphNotSupportedError, match="bias"):
        g.validate()


def test_sdpa_fp8_backward_sink_and_mask_dropout():
    g, q, sc = _fp8_graph()
    st = g.tensor(dim=[2, 2, 64, 1], data_type=F)
    sink = g.tensor(dim=[1, 2, 1, 1], data_type=F)
    dsink = g.tensor(dim=[1, 2, 1, 1], data_type=F)
    mask = g.tensor(dim=[2, 2, 64, 64], data_type=F)
    outs = g.sdpa_fp8_backward(q, q, q, q, q, st, *sc, sink_token=sink, dSink_token=dsink,
                               dropout=(mask, sc[0], sc[1]))
    assert len(outs) == 7
    node = g.nodes_info()[-1]
    assert node["inputs"]["dropout_scale_inv"] is sc[1] and node["outputs"]["dSink_token"] is dsink
    for t in outs + [dsink]:
        t.set_output(True)
    g.validate()


# ---- MXFP8 ---------------------------------------------------------------------------------------

def _f8_128x4(scales):
    """[L, M, K] scales -> the F8_128x4 byte order: 128x4 tiles (K tiles inner), row m of a tile at
    (m % 32, m // 32), built by reshapes (M padded to 128, K to 4)."""
    L, M, K = scales.shape
    mp, kp = -(-M // 128) * 128, -(-K // 4) * 4
    pad = np.ones((L, mp, kp), scales.dtype)
    pad[:, :M, :K] = scales
    t = pad.reshape(L, mp // 128, 4, 32, kp // 4, 4)  # l, m-tile, m // 32 % 4, m % 32, k-tile, k % 4
    return np.ascontiguousarray(t.transpose(0, 1, 4, 3, 2, 5)).reshape(-1)


def _mx_inputs(rng, b, h, s, d):
    import ml_dtypes
    e4m3, e8m0 = ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e8m0fnu
    q, k, v = (rng.uniform(-2, 2, (b, h, s, d)).astype(e4m3) for _ in range(3))
    pow2 = lambda shape: np.exp2(rng.integers(-2, 3, shape)).astype(np.float64)  # noqa: E731
    sq, sk = pow2((b, h, s, d // 32)), pow2((b, h, s, d // 32))
    sv = pow2((b, h, s // 32, d))
    deq = lambda x, sc, axis: x.astype(np.float64) * np.repeat(sc, 32, axis=axis)  # noqa: E731
    return (q, k, v), (sq, sk, sv), (deq(q, sq, 3), deq(k, sk, 3), deq(v, sv, 2)), e8m0


@pytest.mark.parametrize("swizzled", [False, True])
def test_sdpa_mxfp8_reference_matches_dequantised_fp64(swizzled, rng):
    b, h, s, d = 1, 2, 128, 64
    (q, k, v), (sq, sk, sv), (qd, kd, vd), e8m0 = _mx_inputs(rng, b, h, s, d)
    g = opendnn.pygraph(io_data_type=opendnn.data_type.FP8_E4M3, intermediate_data_type=F, compute_data_type=F)
    Q, K, V = (g.tensor_like(x) for x in (q, k, v))
    reorder = opendnn.tensor_reordering.F8_128x4 if swizzled else opendnn.tensor_reordering.NONE
    E8 = opendnn.data_type.FP8_E8M0
    if swizzled:  # padded dims: Q/K [B,H,S pad 128,D/32 pad 4], V [B,H,S/32 pad 4,D pad 128]
        dq = g.tensor(dim=[b, h, 128, 4], data_type=E8, reordering_type=reorder)
        dk = g.tensor(dim=[b, h, 128, 4], data_type=E8, reordering_type=reorder)
        dv = g.tensor(dim=[b, h, 4, 128], stride=[512, 512, 1, 4], data_type=E8, reordering_type=reorder)
        bufs = [_f8_128x4(x.reshape(b * h, s, d // 32)) for x in (sq, sk)]
        bufs.append(_f8_128x4(sv.reshape(b * h, s // 32, d).transpose(0, 2, 1)))
    else:
        dq, dk, dv = (g.tensor_like(x.astype(e8m0)) for x in (sq, sk, sv))
        bufs = [x.astype(e8m0) for x in (sq, sk, sv)]
    o, stats, amax = g.sdpa_mxfp8(q=Q, k=K, v=V, descale_q=dq, descale_k=dk, descale_v=dv, attn_scale=0.125,
                                  use_causal_mask=True, generate_stats=True)
    o.set_output(True).set_data_type(HALF)
    stats.set_output(True)
    amax.set_output(True)
    ws = build(g)
    out = np.zeros((b, h, s, d), np.float16)
    st = np.zeros((b, h, s, 1), np.float32)
    am = np.zeros((1, 1, 1, 1), np.float32)
    bufs = [x.astype(e8m0) if x.dtype != e8m0 else x for x in bufs]
    g.execute({Q: q, K: k, V: v, dq: bufs[0], dk: bufs[1], dv: bufs[2], o: out, stats: st, amax: am}, ws)
    want, want_stats = sdpa_ref(qd, kd, vd, 0.125, causal=True)
    np.testing.assert_allclose(out, want, atol=2e-2, rtol=2e-3)
    np.testing.assert_allclose(st, want_stats, atol=1e-4, rtol=1e-5)
    assert am[0, 0, 0, 0] == pytest.approx(np.abs(want).max(), rel=1e-5)


def test_sdpa_mxfp8_api_errors_and_backward_arity(rng):
    g = opendnn.pygraph(io_data_type=opendnn.data_type.FP8_E4M3, intermediate_data_type=F, compute_data_type=F)
    E8, E4 = opendnn.data_type.FP8_E8M0, opendnn.data_type.FP8_E4M3
    q = g.tensor(dim=[1, 2, 64, 64], data_type=E4)
    sc = g.tensor(dim=[1, 2, 64, 2], data_type=E8)
    scv = g.tensor(dim=[1, 2, 2, 64], data_type=E8)
    with pytest.raises(RuntimeError, match="generate_stats must be provided"):
        g.sdpa_mxfp8(q, q, q, sc, sc, scv)
    outs = g.sdpa_mxfp8(q, q, q, sc, sc, sc, generate_stats=False)  # V's scales must run along S
    assert len(outs) == 3 and outs[1] is None
    with pytest.raises(ValueError, match="block scale descale_v"):
        g.validate()

    g = opendnn.pygraph(io_data_type=E4, intermediate_data_type=F, compute_data_type=F)
    q = g.tensor(dim=[1, 2, 64, 64], data_type=E4)
    h16 = g.tensor(dim=[1, 2, 64, 64], data_type=HALF)
    st = g.tensor(dim=[1, 2, 64, 1], data_type=F)
    sd = g.tensor(dim=[1, 2, 64, 2], data_type=E8)
    ss = g.tensor(dim=[1, 2, 2, 64], data_type=E8)
    outs = g.sdpa_mxfp8_backward(q, q, q, q, q, h16, h16, q, q, st, sd, ss, sd, ss, sd, sd, ss, attn_scale=0.1,
                                 use_causal_mask=True)
    assert len(outs) == 6
    for t in outs:
        t.set_output(True)
    g.validate()
    assert outs[0].get_data_type() == HALF and outs[3].get_dim() == [1, 1, 1, 1]


def test_sdpa_mxfp8_backward_uses_each_copy_where_its_product_contracts(rng):
    """Unit block scales on every copy reproduce the fp16 backward on the same values; a scale of 2 on Q_T
    doubles dK only, on K_T dQ only, on dO_T dV only."""
    import ml_dtypes
    e4m3, e8m0 = ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e8m0fnu
    b, h, s, d = 1, 1, 32, 32
    q, k, v, do = (rng.uniform(-1, 1, (b, h, s, d)).astype(e4m3) for _ in range(4))
    out, stats = run_forward(*(x.astype(np.float16) for x in (q, k, v)), 0.2)

    def grads(q_t_scale=1.0, k_t_scale=1.0, do_t_scale=1.0):
        g = opendnn.pygraph(io_data_type=opendnn.data_type.FP8_E4M3, intermediate_data_type=F, compute_data_type=F)
        Q, K, V, dO = (g.tensor_like(x) for x in (q, k, v, do))
        O16, dO16, St = g.tensor_like(out), g.tensor_like(do.astype(np.float16)), g.tensor_like(stats)
        along_d = np.ones((b, h, s, d // 32), e8m0)
        scales = {"q": along_d, "k": along_d, "v": along_d, "dO": along_d,
                  "q_T": np.full((b, h, s // 32, d), q_t_scale).astype(e8m0),
                  "k_T": np.full((b, h, s // 32, d), k_t_scale).astype(e8m0),
                  "dO_T": np.full((b, h, s // 32, d), do_t_scale).astype(e8m0)}
        T = {n: g.tensor_like(a) for n, a in scales.items()}
        outs = g.sdpa_mxfp8_backward(Q, Q, K, K, V, O16, dO16, dO, dO, St, T["q"], T["q_T"], T["k"], T["k_T"], T["v"],
                                     T["dO"], T["dO_T"], attn_scale=0.2)
        res = [np.zeros((b, h, s, d), np.float16) for _ in range(3)]
        for t in outs[:3]:
            t.set_output(True)
        ws = build(g)
        pack = {Q: q, K: k, V: v, dO: do, O16: out, dO16: do.astype(np.float16), St: stats}
        pack.update({T[n]: a for n, a in scales.items()})
        pack.update(dict(zip(outs[:3], res)))
        g.execute(pack, ws)
        return res

    base = grads()
    g = half_graph()
    Q, K, V, O, dO, St = (g.tensor_like(x) for x in (q.astype(np.float16), k.astype(np.float16),
                                                      v.astype(np.float16), out, do.astype(np.float16), stats))
    ref = g.sdpa_backward(q=Q, k=K, v=V, o=O, dO=dO, stats=St, attn_scale=0.2)
    want = [np.zeros((b, h, s, d), np.float16) for _ in range(3)]
    for t in ref:
        t.set_output(True)
    ws = build(g)
    g.execute({Q: q.astype(np.float16), K: k.astype(np.float16), V: v.astype(np.float16), O: out,
               dO: do.astype(np.float16), St: stats, **dict(zip(ref, want))}, ws)
    for got, exp in zip(base, want):
        np.testing.assert_array_equal(got, exp)
    for which, kw in ((1, "q_t_scale"), (0, "k_t_scale"), (2, "do_t_scale")):
        scaled = grads(**{kw: 2.0})
        for i in range(3):
            np.testing.assert_array_equal(scaled[i], base[i] * np.float16(2.0 if i == which else 1.0))


# ---- score_mod / score_mod_bprop -------------------------------------------------------------------

def _run(g, pack, outs):
    ws = build(g)
    res = [np.zeros(t.get_dim(), np.float16 if t.get_data_type() == HALF else np.float32) for t in outs]
    g.execute({**pack, **dict(zip(outs, res))}, ws)
    return res


def _softcap_graph(q, k, v, cap_value, backward=False, do=None, out=None, stats=None):
    """sdpa (or sdpa_backward) with a softcap score_mod tanh(s / c) * c; the backward's score_mod_bprop
    multiplies dS' by 1 - tanh^2 (the forward sub-graph's tanh, captured by the closure)."""
    g = half_graph()
    Q, K, V = (g.tensor_like(x) for x in (q, k, v))
    cap = g.tensor(dim=[1, 1, 1, 1], data_type=F, is_pass_by_value=True)
    one = g.tensor(dim=[1, 1, 1, 1], data_type=F, is_pass_by_value=True)
    saved = {}

    def softcap(graph, s):
        saved["t"] = graph.tanh(input=graph.div(a=s, b=cap))
        return graph.mul(a=saved["t"], b=cap)

    def softcap_bprop(graph, ds):
        return graph.mul(a=ds, b=graph.sub(a=one, b=graph.mul(a=saved["t"], b=saved["t"])))

    pack = {Q: q, K: k, V: v, cap: np.full((1, 1, 1, 1), cap_value, np.float32), one: np.ones((1, 1, 1, 1), np.float32)}
    if not backward:
        o, st = g.sdpa(q=Q, k=K, v=V, attn_scale=0.5, generate_stats=True, score_mod=softcap)
        outs = [o.set_output(True), st.set_output(True)]
    else:
        O, dO, St = g.tensor_like(out), g.tensor_like(do), g.tensor_like(stats)
        pack.update({O: out, dO: do, St: stats})
        outs = g.sdpa_backward(q=Q, k=K, v=V, o=O, dO=dO, stats=St, attn_scale=0.5, score_mod=softcap,
                               score_mod_bprop=softcap_bprop)
        for t in outs:
            t.set_output(True)
    return g, pack, outs


def _softcap_ref(q, k, v, do, cap):
    q, k, v, do = (x.astype(np.float64) for x in (q, k, v, do))
    raw = np.einsum("bhqd,bhkd->bhqk", q, k) * 0.5
    t = np.tanh(raw / cap)
    s = t * cap
    m = s.max(-1, keepdims=True)
    e = np.exp(s - m)
    z = e.sum(-1, keepdims=True)
    p = e / z
    o = np.einsum("bhqk,bhkd->bhqd", p, v)
    dp = np.einsum("bhqd,bhkd->bhqk", do, v)
    ds = p * (dp - (p * dp).sum(-1, keepdims=True)) * (1 - t * t)
    dq = 0.5 * np.einsum("bhqk,bhkd->bhqd", ds, k)
    dk = 0.5 * np.einsum("bhqk,bhqd->bhkd", ds, q)
    dv = np.einsum("bhqk,bhqd->bhkd", p, do)
    return o, m + np.log(z), (dq, dk, dv)


def test_score_mod_softcap_forward_and_backward_match_fp64(rng):
    q, k, v, do = (rng.standard_normal((1, 2, 8, 16)).astype(np.float16) for _ in range(4))
    o_want, st_want, grads_want = _softcap_ref(q, k, v, do, 2.0)
    g, pack, outs = _softcap_graph(q, k, v, 2.0)
    node = g.nodes_info()[-1]
    assert [s["name"] for s in node["subgraphs"]] == ["score_mod"]
    assert node["subgraphs"][0]["modes"] == ["DIV", "TANH_FWD", "MUL"]
    out, stats = _run(g, pack, outs)
    np.testing.assert_allclose(out, o_want, atol=2e-3, rtol=2e-3)
    np.testing.assert_allclose(stats, st_want, atol=1e-5, rtol=1e-5)
    # The backward from the forward's own O and Stats.
    g, pack, outs = _softcap_graph(q, k, v, 2.0, backward=True, do=do, out=out, stats=stats)
    assert [s["name"] for s in g.nodes_info()[-1]["subgraphs"]] == ["score_mod", "score_mod_bprop"]
    for got, want in zip(_run(g, pack, outs), grads_want):
        np.testing.assert_allclose(got, want, atol=3e-3, rtol=3e-3)


def test_score_mod_relative_bias_from_gen_index(rng):
    """A relative-position bias built from the scores' own indices: s + 0.25 * (col - row)."""
    q, k, v = (rng.standard_normal((2, 2, 6, 16)).astype(np.float16) for _ in range(3))
    g = half_graph()
    Q, K, V = (g.tensor_like(x) for x in (q, k, v))
    w = g.tensor(dim=[1, 1, 1, 1], data_type=F, is_pass_by_value=True)

    def rel(graph, s):
        row = graph.gen_index(input=s, axis=2, compute_data_type=opendnn.data_type.INT32)
        col = graph.gen_index(input=s, axis=3, compute_data_type=opendnn.data_type.INT32)
        row.set_data_type(opendnn.data_type.INT32)
        col.set_data_type(opendnn.data_type.INT32)
        return graph.add(a=s, b=graph.mul(a=graph.sub(a=col, b=row), b=w))

    o, _ = g.sdpa(q=Q, k=K, v=V, attn_scale=0.25, is_inference=True, score_mod=rel)
    (out,) = _run(g, {Q: q, K: k, V: v, w: np.full((1, 1, 1, 1), 0.25, np.float32)}, [o.set_output(True)])
    idx = np.arange(6)
    want, _ = sdpa_ref(q, k, v, 0.25, bias=(0.25 * (idx[None, :] - idx[:, None]))[None, None])
    np.testing.assert_allclose(out, want, atol=2e-3, rtol=2e-3)


def test_score_mod_rules_and_serialization(rng):
    g = half_graph()
    q = g.tensor(dim=[1, 2, 8, 16], data_type=HALF)
    with pytest.raises(TypeError, match="score_mod must be callable"):
        g.sdpa(q=q, k=q, v=q, generate_stats=False, score_mod=3)
    g = half_graph()
    q = g.tensor(dim=[1, 2, 8, 16], data_type=HALF)
    g.sdpa(q=q, k=q, v=q, generate_stats=False, use_causal_mask=True, score_mod=lambda gr, s: gr.neg(input=s))
    with pytest.raises(opendnn.cudnnGraphNotSupportedError, match="score_mod replaces the built-in masks"):
        g.validate()
    g = half_graph()
    q = g.tensor(dim=[1, 2, 8, 16], data_type=HALF)
    st = g.tensor(dim=[1, 2, 8, 1], data_type=F)
    g.sdpa_backward(q=q, k=q, v=q, o=q, dO=q, stats=st, score_mod=lambda gr, s: gr.neg(input=s))
    with pytest.raises(opendnn.cudnnGraphNotSupportedError, match="needs both score_mod and score_mod_bprop"):
        g.validate()
    # JSON v2 carries the sub-graph; the copy computes the same.
    qa, ka, va, do = (rng.standard_normal((1, 2, 8, 16)).astype(np.float16) for _ in range(4))
    g, pack, outs = _softcap_graph(qa, ka, va, 1.5)
    want = _run(g, pack, outs)
    doc = g.to_json()
    assert '"subgraphs"' in doc and '"TANH_FWD"' in doc
    g2 = opendnn.pygraph()
    g2.deserialize(doc)
    node = g2.nodes_info()[-1]
    assert node["subgraphs"][0]["modes"] == ["DIV", "TANH_FWD", "MUL"]
    by_uid = {t.get_uid(): t for t in g2.tensors()}
    pack2 = {by_uid[t.get_uid()]: a for t, a in pack.items()}
    got = _run(g2, pack2, [by_uid[t.get_uid()] for t in outs])
    for a, b in zip(got, want):
        np.testing.assert_array_equal(a, b)
