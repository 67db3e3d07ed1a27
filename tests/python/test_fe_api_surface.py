# SPDX-License-Identifier: Apache-2.0
"""cuDNN Frontend's Python API surface: positional orders, keywords, defaults, return shapes, errors,
enum values, lazy modules, the Graph wrapper's conventions, and values of the ops this surface adds
(leaky_relu_backward, moe_grouped_matmul_bwd's dweight, adalayernorm without bias) on the reference
engine."""

import json
import subprocess
import sys
import threading

import numpy as np
import pytest

import opendnn
from conftest import build, float_graph

F = opendnn.data_type.FLOAT
H = opendnn.data_type.HALF


def _node(g, name):
    return next(n for n in g.nodes_info() if n["name"] == name)


def _run(g, pack):
    ws = build(g)
    g.execute(pack, ws)


# ---- positional compute_data_type / name -------------------------------------------------------------

def test_pointwise_positional_compute_type_and_name():
    g = float_graph()
    a = g.tensor(dim=[2, 3], data_type=F)
    b = g.tensor(dim=[2, 3], data_type=F)
    g.add(a, b, H, "padd")
    g.max(a, b, F, "pmax")
    g.cmp_lt(a, b, F, "plt")
    g.binary_select(a, b, a, F, "psel")
    g.sqrt(a, F, "psqrt")
    g.tanh_backward(a, b, F, "ptb")
    g.elu(a, F, "pelu")
    g.softplus_backward(a, b, F, "pspb")
    assert _node(g, "padd")["compute_data_type"] == H
    for name in ("pmax", "plt", "psel", "psqrt", "ptb", "pelu", "pspb"):
        assert _node(g, name)["compute_data_type"] == F


def test_relu_swish_positional_order():
    g = float_graph()
    x = g.tensor(dim=[4], data_type=F)
    dy = g.tensor(dim=[4], data_type=F)
    g.relu(x, 0.1, -1.0, 6.0, F, "r")
    assert _node(g, "r")["attrs"] == {"mode": "RELU_FWD", "relu_lower_clip_slope": 0.1, "relu_lower_clip": -1.0,
                                      "relu_upper_clip": 6.0}
    g.relu_backward(dy, x, 0.2, None, None, F, "rb")
    assert _node(g, "rb")["attrs"]["relu_lower_clip_slope"] == 0.2
    g.swish(x, 1.5, F, "sw")
    assert _node(g, "sw")["attrs"]["swish_beta"] == 1.5
    g.swish_backward(dy, x, F, 2.0, "swb")  # compute_data_type comes before swish_beta
    assert _node(g, "swb")["attrs"]["swish_beta"] == 2.0 and _node(g, "swb")["compute_data_type"] == F
    with pytest.raises(TypeError):
        g.elu(x, F, "e2", 1.0)  # alpha is keyword-only (cuDNN Frontend's elu has none)
    g.elu(x, alpha=0.5, name="e3")
    assert _node(g, "e3")["attrs"]["elu_alpha"] == 0.5


def test_norm_and_misc_positional_compute_type_and_name():
    g = float_graph()
    x = g.tensor(dim=[2, 4, 3, 3], data_type=F)
    c = g.tensor(dim=[1, 4, 1, 1], data_type=F)
    g.batchnorm_inference(x, c, c, c, c, F, "bni")
    s = g.tensor(dim=[1, 4, 3, 3], data_type=F)
    st = g.tensor(dim=[2, 1, 1, 1], data_type=F)
    outs = g.layernorm_backward(x, x, s, st, st, F, "lnb")
    assert len(outs) == 3
    outs = g.instancenorm_backward(x, x, c, None, None, F, "inb")
    assert len(outs) == 3
    assert [len(g.genstats(x, F, "gs"))] == [2]
    for name in ("bni", "lnb", "inb", "gs"):
        assert _node(g, name)["compute_data_type"] == F
    x3 = g.tensor(dim=[2, 5, 8], data_type=F)
    s3 = g.tensor(dim=[2, 1, 8], data_type=F)
    m3 = g.tensor(dim=[2, 5, 1], data_type=F)
    assert len(g.adalayernorm_backward(x3, x3, s3, m3, m3, F, "alb")) == 3
    assert _node(g, "alb")["compute_data_type"] == F


def test_conv_positional_padding_stride_dilation():
    g = float_graph()
    x = g.tensor(dim=[1, 4, 8, 8], data_type=F)
    w = g.tensor(dim=[4, 4, 3, 3], data_type=F)
    g.conv_fprop(x, w, [1, 1], [2, 2], [1, 1], opendnn.convolution_mode.CROSS_CORRELATION, F, "c0")
    a = _node(g, "c0")["attrs"]
    assert a["pre_padding"] == [1, 1] and a["post_padding"] == [1, 1] and a["stride"] == [2, 2]
    assert a["dilation"] == [1, 1] and _node(g, "c0")["compute_data_type"] == F
    g.conv_fprop(x, w, pre_padding=[0, 1], post_padding=[1, 0], stride=[1, 1], dilation=[1, 1], name="c1")
    assert _node(g, "c1")["attrs"]["pre_padding"] == [0, 1] and _node(g, "c1")["attrs"]["post_padding"] == [1, 0]
    dy = g.tensor(dim=[1, 4, 8, 8], data_type=F)
    g.conv_dgrad(dy, w, [1, 1], [1, 1], [1, 1], None, F, "dg")
    g.conv_wgrad(x, dy, [1, 1], [1, 1], [1, 1], None, F, "wg")
    assert _node(g, "dg")["attrs"]["pre_padding"] == [1, 1] and _node(g, "wg")["attrs"]["stride"] == [1, 1]
    with pytest.raises(ValueError, match="not both"):
        g.conv_fprop(x, w, [1, 1], pre_padding=[1, 1])


def test_reshape_concatenate_slice_positional():
    g = float_graph()
    x = g.tensor(dim=[2, 6], data_type=F)
    r = g.reshape(x, "rs", opendnn.reshape_mode.LOGICAL)  # (input, name, reshape_mode)
    assert _node(g, "rs")["attrs"]["reshape_mode"] == "LOGICAL"
    r.set_dim([3, 4])
    g.concatenate([x, x], 1, None, "cat")  # (inputs, axis, in_place_index, name)
    assert _node(g, "cat")["attrs"]["axis"] == 1
    y = g.slice(x, name="whole")  # slices=[] keeps every axis
    y.set_output(True)
    g.validate()
    assert y.get_dim() == [2, 6]


def test_block_scale_positional_and_block_size_lists():
    g = float_graph()
    x = g.tensor(dim=[4, 64], data_type=F)
    y, sc = g.block_scale_quantize(x, 32, None, False, F, "q")  # positional block_size
    assert _node(g, "q")["attrs"]["block_size"] == 32
    q = g.tensor(dim=[4, 64], data_type=opendnn.data_type.FP8_E4M3)
    s_last = g.tensor(dim=[4, 2], data_type=opendnn.data_type.FP8_E8M0)
    g.block_scale_dequantize(q, s_last, [1, 32], False, F, "dq_last")
    a = _node(g, "dq_last")["attrs"]
    assert a["block_size"] == 32 and a["axis"] == -1
    s_rows = g.tensor(dim=[1, 64], data_type=opendnn.data_type.FP8_E8M0)
    g.block_scale_dequantize(q, s_rows, [4, 1], name="dq_rows")
    a = _node(g, "dq_rows")["attrs"]
    assert a["block_size"] == 4 and a["axis"] == -2
    with pytest.raises(ValueError, match="block_size"):
        g.block_scale_dequantize(q, s_last, [2, 32])
    g.validate()


def test_moe_grouped_matmul_positional_mode_compute_type_top_k():
    g = float_graph()
    tok = g.tensor(dim=[6, 8], data_type=F)
    w = g.tensor(dim=[2, 8, 4], data_type=F)
    off = g.tensor(dim=[2], data_type=opendnn.data_type.INT32)
    idx = g.tensor(dim=[12], data_type=opendnn.data_type.INT32)
    out = g.moe_grouped_matmul(tok, w, off, idx, None, opendnn.moe_grouped_matmul_mode.GATHER, F, 2, "moe")
    a = _node(g, "moe")["attrs"]
    assert a["mode"] == "GATHER" and a["top_k"] == 2
    out.set_output(True)
    g.validate()
    assert out.get_dim() == [12, 4]


def test_moe_grouped_matmul_bwd_returns_dweight(rng):
    t, k, n, e = 7, 5, 3, 3
    g = float_graph()
    dout = g.tensor(dim=[t, n], data_type=F)
    tok = g.tensor(dim=[t, k], data_type=F)
    off = g.tensor(dim=[e], data_type=opendnn.data_type.INT32)
    dw = g.moe_grouped_matmul_bwd(dout, tok, off, F, "moe_bwd")  # cuDNN Frontend's ports; one tensor back
    assert isinstance(dw, opendnn.tensor)
    dw.set_output(True)
    g.validate()
    assert dw.get_dim() == [e, k, n] and dw.get_stride() == [k * n, 1, k]
    dout_a = rng.standard_normal((t, n)).astype(np.float32)
    tok_a = rng.standard_normal((t, k)).astype(np.float32)
    off_a = np.array([0, 2, 5], np.int32)
    base = np.zeros(e * k * n, np.float32)
    dw_a = np.lib.stride_tricks.as_strided(base, (e, k, n), (k * n * 4, 4, k * 4))
    _run(g, {dout: dout_a, tok: tok_a, off: off_a, dw: dw_a})
    bounds = [0, 2, 5, t]
    for x in range(e):
        r0, r1 = bounds[x], bounds[x + 1]
        np.testing.assert_allclose(dw_a[x], tok_a[r0:r1].T @ dout_a[r0:r1], rtol=1e-5, atol=1e-5)


# ---- values of the added ops on the reference engine ---------------------------------------------

def test_leaky_relu_backward_values():
    g = float_graph()
    dy = g.tensor(dim=[6], data_type=F)
    x = g.tensor(dim=[6], data_type=F)
    dx = g.leaky_relu_backward(dy, x, 0.25, F, "lrb")
    dx.set_output(True)
    dy_a = np.array([1.0, 2.0, -3.0, 4.0, 0.5, -1.0], np.float32)
    x_a = np.array([-2.0, 3.0, -0.5, 1.0, -7.0, 2.5], np.float32)
    out = np.zeros(6, np.float32)
    _run(g, {dy: dy_a, x: x_a, dx: out})
    # x > 0: dy; x <= 0: 0.25 * dy, by hand
    np.testing.assert_allclose(out, [0.25, 2.0, -0.75, 4.0, 0.125, -1.0], rtol=0, atol=0)


def test_adalayernorm_without_bias(rng):
    g = float_graph()
    x = g.tensor(dim=[2, 3, 8], data_type=F)
    s = g.tensor(dim=[2, 1, 8], data_type=F)
    y, mean, inv = g.adalayernorm(opendnn.norm_forward_phase.TRAINING, x, s, epsilon=1e-5)
    for t in (y, mean, inv):
        t.set_output(True)
    xa = rng.standard_normal((2, 3, 8)).astype(np.float32)
    sa = rng.standard_normal((2, 1, 8)).astype(np.float32)
    ya = np.zeros_like(xa)
    ma, ia = np.zeros((2, 3, 1), np.float32), np.zeros((2, 3, 1), np.float32)
    _run(g, {x: xa, s: sa, y: ya, mean: ma, inv: ia})
    mu = xa.mean(-1, keepdims=True)
    ref = (xa - mu) / np.sqrt(xa.var(-1, keepdims=True) + 1e-5) * sa
    np.testing.assert_allclose(ya, ref, rtol=1e-4, atol=1e-4)


# ---- enums ---------------------------------------------------------------------------------------

def test_enum_members_and_int_values():
    dt = opendnn.data_type
    assert [int(dt.NOT_SET), int(dt.FLOAT), int(dt.HALF), int(dt.INT8x4), int(dt.BFLOAT16)] == [0, 1, 3, 6, 10]
    for name in ("INT8x4", "UINT8x4", "INT8x32", "FAST_FLOAT_FOR_FP8", "INT4"):
        assert hasattr(dt, name)
    assert int(opendnn.reduction_mode.NOT_SET) == 0 and int(opendnn.reduction_mode.ADD) == 1
    assert int(opendnn.heur_mode.FALLBACK) == 2 and int(opendnn.build_plan_policy.ALL) == 1
    assert int(opendnn.norm_forward_phase.TRAINING) == 2
    assert dt(3) == dt.HALF and opendnn.reduction_mode(4) == opendnn.reduction_mode.MAX
    assert str(opendnn.reduction_mode.ADD) == "reduction_mode.ADD" and f"{opendnn.reshape_mode.LOGICAL}" == "reshape_mode.LOGICAL"
    for enum_cls in (opendnn.tensor_reordering, opendnn.norm_forward_phase, opendnn.reshape_mode,
                     opendnn.diagonal_alignment, opendnn.attention_implementation, opendnn.moe_grouped_matmul_mode,
                     opendnn.scalar_type, opendnn.pointwise_mode, opendnn.error_code):
        for m in enum_cls:
            assert isinstance(int(m), int)


def test_unstorable_data_type_is_declined():
    g = float_graph()
    x = g.tensor(dim=[4, 4], data_type=opendnn.data_type.INT8x4)
    g.identity(x).set_output(True)
    with pytest.raises(opendnn.cudnnGraphNotSupportedError, match="INT8x4"):
        g.validate()


# ---- module level ----------------------------------------------------------------------------------

def test_get_last_error_string():
    seen = []
    t = threading.Thread(target=lambda: seen.append(opendnn.get_last_error_string()))
    t.start()
    t.join()
    assert seen == [""]
    g = float_graph()
    g.tensor(dim=[2], data_type=F)
    g.identity(g.tensor(dim=[-1], data_type=F)).set_output(True)
    with pytest.raises(Exception) as e:
        g.validate()
    assert opendnn.get_last_error_string() == str(e.value)


def _jit_graph():
    with opendnn.graph(None, io_data_type=F) as (g, tensors):
        a = g.tensor(dim=[2, 3], data_type=F)
        y = g.neg(a)
        y.set_output(True)
        return g, [a, y]


def test_jit_single_mode_list_and_kwargs():
    g, uids = opendnn.jit(heur_modes=opendnn.heur_mode.FALLBACK)(_jit_graph)()
    assert g.get_execution_plan_count() >= 1 and uids == [t.get_uid() for t in g.get_inputs() + g.get_outputs()]
    g, _ = opendnn.jit([opendnn.heur_mode.A, opendnn.heur_mode.FALLBACK], some_option=1)(_jit_graph)()
    assert g.get_execution_plan_count() >= 1
    assert opendnn.jit.__defaults__ == (opendnn.heur_mode.A,)
    with pytest.raises(TypeError):
        opendnn.jit("A")


def test_graph_context_defaults():
    with opendnn.graph(None) as (g, tensors):
        assert g.get_name() == "cudnn_graph" and tensors == []
        assert g.get_io_data_type() == H


def test_build_without_modes_only_builds_the_operation_graph():
    g = float_graph()
    y = g.neg(g.tensor(dim=[3], data_type=F))
    y.set_output(True)
    g.build()
    assert g.is_validated() and g.get_execution_plan_count() == 0
    g.build([opendnn.heur_mode.A, opendnn.heur_mode.FALLBACK])
    assert g.get_execution_plan_count() >= 1


def test_query_tensor_attributes_of_uid():
    g = float_graph()
    x = g.tensor(dim=[3], data_type=F, uid=5, name="x")
    g.neg(x).set_output(True)
    g.validate()
    q = g.query_tensor_attributes_of_uid(5)
    assert q.get_name() == "x" and q is not x
    q.set_name("changed")
    assert x.get_name() == "x"
    with pytest.raises(ValueError, match="uid 77"):
        g.query_tensor_attributes_of_uid(77)


def test_tensor_accessors_and_json_repr():
    g = float_graph()
    t = g.tensor(dim=[2, 3], data_type=F, name="t")
    assert t.get_alignment() == 16 and t.set_alignment(64) is t and t.get_alignment() == 64
    assert (t.get_vector_count(), t.get_vector_dimension()) == (1, -1)
    assert t.set_vector_count_and_dimension(4, 1) is t
    assert (t.get_vector_count(), t.get_vector_dimension()) == (4, 1)
    assert t.get_has_compile_time_constant() is False
    assert t._set_data_type(H) is t and t.get_data_type() == H
    doc = json.loads(repr(t))
    assert doc["name"] == "t" and doc["dim"] == [2, 3] and doc["stride"] == [3, 1] and doc["data_type"] == "HALF"
    assert doc["alignment"] == 64 and doc["vector_count"] == 4 and doc["is_virtual"] is False


def test_import_is_light_and_modules_are_lazy():
    code = ("import sys, opendnn; assert 'torch' not in sys.modules; "
            "assert 'opendnn.ops' not in sys.modules and 'opendnn.experimental' not in sys.modules; "
            "opendnn.datatypes; opendnn.api_base; opendnn.experimental; assert 'torch' not in sys.modules")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def test_blackwell_only_names():
    for name in ("GemmSwigluSm100", "NSA", "SdpafwdSm100D256", "gemm_swiglu_wrapper_sm100", "grouped_gemm"):
        with pytest.raises(opendnn.cudnnGraphNotSupportedError, match="Blackwell"):
            getattr(opendnn, name)
        assert not hasattr(opendnn, name)
    with pytest.raises(AttributeError):
        opendnn.no_such_thing


def test_datatypes_and_api_base(caplog):
    from opendnn import api_base, datatypes

    assert datatypes._library_type(F) == F
    assert datatypes._is_torch_tensor(np.zeros(2)) is False
    assert datatypes._torch_to_cudnn_data_type("float32") is None  # not a torch dtype
    with pytest.raises(TypeError):
        datatypes._library_type("float32")
    assert api_base.ceil_div(7, 2) == 4 and api_base.ceil_div(8, 2) == 4
    import logging

    log = logging.getLogger("opendnn.test")
    api_base._reset_experimental_api_warning_registry()
    with caplog.at_level(logging.WARNING, logger="opendnn.test"):
        api_base.warn_experimental_api_once(log, "X")
        api_base.warn_experimental_api_once(log, "X")
    assert [r.getMessage() for r in caplog.records] == ["X is an experimental API"]


# ---- the Graph wrapper -----------------------------------------------------------------------------

def _wrapper_graph(a, w):
    g = opendnn.Graph(io_data_type=F, intermediate_data_type=F, compute_data_type=F)
    with g:
        mm = g.matmul(a, B=w)
        y = g.relu(mm)
        y.set_output(True)
    return g, y


def test_wrapper_constructor_is_keyword_only():
    with pytest.raises(TypeError):
        opendnn.Graph(None)
    with pytest.raises(ValueError, match="inputs"):
        opendnn.Graph(inputs="x")


def test_wrapper_names_and_io_tuples(rng):
    a = rng.standard_normal((2, 4, 8)).astype(np.float32)
    w = rng.standard_normal((2, 8, 3)).astype(np.float32)
    ref = np.maximum(a @ w, 0)
    g, y = _wrapper_graph(a, w)
    assert sorted(n["name"] for n in g.pygraph.nodes_info()) == ["matmul.0", "relu.0"]
    out_name = y.get_name() or "relu.0::0"
    # inputs by "<node>::<position>" and "<node>::<keyword>", the output by its tensor name
    g.set_io_tuples(["matmul.0::0", "matmul.0::B"], [out_name])
    np.testing.assert_allclose(g(a, w), ref, rtol=1e-5, atol=1e-5)
    # the arrays used while building, and uids
    g.set_io_tuples([w, a], [y.get_uid()])
    np.testing.assert_allclose(g(w, a), ref, rtol=1e-5, atol=1e-5)
    # graph tensors
    ins = [t for t in g.pygraph.get_inputs()]
    g.set_io_tuples(ins, [y])
    with pytest.raises(ValueError, match="not found"):
        g.set_io_tuples(["nope"], [y])
    with pytest.raises(ValueError, match="not specified"):
        g.set_io_tuples(["matmul.0::0"], [y])


def test_wrapper_dict_call_returns_the_updated_dict(rng):
    a = rng.standard_normal((1, 2, 4)).astype(np.float32)
    w = rng.standard_normal((1, 4, 2)).astype(np.float32)
    g, y = _wrapper_graph(a, w)
    given = {"matmul.0::0": a, "matmul.0::B": w}
    res = g(given, handle=None)
    assert res is given
    key = y.get_name()
    np.testing.assert_allclose(res[key], np.maximum(a @ w, 0), rtol=1e-5, atol=1e-5)


def test_wrapper_rules():
    a = np.ones((1, 2, 2), np.float32)
    g = opendnn.Graph(io_data_type=F, intermediate_data_type=F, compute_data_type=F)
    with g:
        y = g.neg(a, name="n")
        y.set_output(True)
        with pytest.raises(ValueError, match="already used"):
            g.neg(a, name="n")
        with pytest.raises(RuntimeError, match="not allowed"):
            g.validate()
    with pytest.raises(ValueError, match="set_io_tuples"):
        g(a)
    with pytest.raises(RuntimeError, match="Graph already created"):
        g.__enter__()


# ---- raw-pointer causal_conv1d_forward / _backward -----------------------------------------------

def _conv1d_np(x, w, b, silu):
    k = w.shape[1]
    xp = np.concatenate([np.zeros(x.shape[:2] + (k - 1,), x.dtype), x], -1)
    y = np.stack([(w[None] * xp[:, :, t:t + k]).sum(-1) for t in range(x.shape[2])], -1)
    if b is not None:
        y = y + b[None, :, None]
    return y / (1 + np.exp(-y)) if silu else y


@pytest.mark.parametrize("silu,with_bias", [(False, True), (True, False)])
def test_causal_conv1d_forward_raw_pointers(rng, silu, with_bias):
    b_, d, l, k = 2, 3, 9, 4
    x = rng.standard_normal((b_, d, l)).astype(np.float32)
    w = rng.standard_normal((d, k)).astype(np.float32)
    bias = rng.standard_normal(d).astype(np.float32) if with_bias else None
    y = np.zeros_like(x)
    opendnn.causal_conv1d_forward(0, x.ctypes.data, w.ctypes.data, 0 if bias is None else bias.ctypes.data,
                                  y.ctypes.data, b_, d, l, k, 0, int(silu))
    np.testing.assert_allclose(y, _conv1d_np(x, w, bias, silu), rtol=1e-5, atol=1e-5)


def test_causal_conv1d_backward_raw_pointers(rng):
    b_, d, l, k = 2, 3, 8, 3
    x, dy = (rng.standard_normal((b_, d, l)).astype(np.float32) for _ in range(2))
    w = rng.standard_normal((d, k)).astype(np.float32)
    bias = rng.standard_normal(d).astype(np.float32)
    dx, dw, db = np.zeros_like(x), np.zeros_like(w), np.zeros_like(bias)
    opendnn.causal_conv1d_backward(0, x.ctypes.data, w.ctypes.data, bias.ctypes.data, dy.ctypes.data, dx.ctypes.data,
                                   dw.ctypes.data, db.ctypes.data, b_, d, l, k, 0, 0, 0)
    xp = np.concatenate([np.zeros((b_, d, k - 1), np.float32), x], -1)
    dyp = np.concatenate([dy, np.zeros((b_, d, k - 1), np.float32)], -1)
    want_dw = np.stack([(dy * xp[:, :, j:j + l]).sum((0, 2)) for j in range(k)], -1)
    want_dx = sum(w[None, :, j:j + 1] * dyp[:, :, k - 1 - j:k - 1 - j + l] for j in range(k))
    np.testing.assert_allclose(db, dy.sum((0, 2)), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(dw, want_dw, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(dx, want_dx, rtol=1e-4, atol=1e-4)


def test_causal_conv1d_raw_pointer_errors():
    with pytest.raises(ValueError, match="kernel_size must be between 2 and 256"):
        opendnn.causal_conv1d_forward(0, 1, 1, 0, 1, 1, 1, 4, 300, 0, 0)
    with pytest.raises(ValueError, match="data type 7"):
        opendnn.causal_conv1d_forward(0, 1, 1, 0, 1, 1, 1, 4, 3, 7, 0)


def test_tensor_uid_minus_one_is_unset_and_compiled_module_alias():
    g = float_graph()
    t = g.tensor(dim=[2], data_type=F, uid=-1)
    assert not t.has_uid()
    assert opendnn._compiled_module is opendnn._C


def test_wrapper_auto_handle_and_pygraph_default_name():
    a = np.full((1, 2, 2), 2.0, np.float32)
    g = opendnn.Graph(handle="auto", io_data_type=F, intermediate_data_type=F, compute_data_type=F)
    with g:
        y = g.neg(a)
        y.set_output(True)
    g.set_io_tuples([a], [y])
    np.testing.assert_array_equal(g(a), -a)
    assert opendnn.pygraph().get_name() == "test_graph"
