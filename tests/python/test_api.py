# SPDX-License-Identifier: Apache-2.0
"""The Python API surface: module functions, enums, tensors, every op method, lifecycle, execute."""

import json

import ml_dtypes
import numpy as np
import pytest

import opendnn
from conftest import build, float_graph

F = opendnn.data_type.FLOAT


# ---- module level -------------------------------------------------------------------------------

def test_module_functions():
    assert isinstance(opendnn.__version__, str) and opendnn.__version__.count(".") == 2
    assert isinstance(opendnn.backend_version(), int)
    assert opendnn.backend_version_string().count(".") == 2
    h = opendnn.create_handle()
    assert opendnn.get_stream(h) == 0
    opendnn.set_stream(handle=h, stream=1234)
    assert opendnn.get_stream(h) == 1234

    class FakeStream:  # torch.cuda.Stream-like
        cuda_stream = 42

    opendnn.set_stream(h, FakeStream())
    assert opendnn.get_stream(h) == 42
    opendnn.destroy_handle(h)
    assert issubclass(opendnn.cudnnGraphNotSupportedError, RuntimeError)
    assert opendnn.NotSupportedError is opendnn.cudnnGraphNotSupportedError
    info = opendnn.build_info()
    assert info["version"] == opendnn.__version__


@pytest.mark.parametrize("enum,members", [
    ("data_type", "FLOAT HALF BFLOAT16 DOUBLE INT8 INT32 INT64 BOOLEAN UINT8 FP8_E4M3 FP8_E5M2 FP8_E8M0 FP4_E2M1 NOT_SET"),
    ("heur_mode", "A B FALLBACK OPENSOURCE"),
    ("build_plan_policy", "HEURISTICS_CHOICE ALL"),
    ("norm_forward_phase", "TRAINING INFERENCE"),
    ("reduction_mode", "ADD MUL MIN MAX AMAX AVG NORM1 NORM2 MUL_NO_ZEROS"),
    ("reshape_mode", "VIEW_ONLY LOGICAL"),
    ("diagonal_alignment", "TOP_LEFT BOTTOM_RIGHT"),
    ("attention_implementation", "AUTO COMPOSITE UNIFIED"),
    ("tensor_reordering", "NONE INT8x32 F16x16 F8_128x4"),
    ("convolution_mode", "CONVOLUTION CROSS_CORRELATION"),
])
def test_enums(enum, members):
    cls = getattr(opendnn, enum)
    for m in members.split():
        assert getattr(cls, m).name == m


# ---- data types -----------------------------------------------------------------------------------

class _FakeTorchDtype:
    def __init__(self, name):
        self.name = name

    def __str__(self):
        return "torch." + self.name


_FakeTorchDtype.__name__ = "dtype"
_FakeTorchDtype.__qualname__ = "dtype"
_FakeTorchDtype.__module__ = "torch"


@pytest.mark.parametrize("spelling,expected", [
    (np.float32, "FLOAT"), (np.dtype("float16"), "HALF"), (ml_dtypes.bfloat16, "BFLOAT16"),
    (np.int32, "INT32"), (np.int64, "INT64"), (np.bool_, "BOOLEAN"), (np.uint8, "UINT8"), (np.int8, "INT8"),
    (np.float64, "DOUBLE"), (ml_dtypes.float8_e4m3fn, "FP8_E4M3"), (ml_dtypes.float8_e5m2, "FP8_E5M2"),
    ("float16", "HALF"), ("BFLOAT16", "BFLOAT16"), (_FakeTorchDtype("bfloat16"), "BFLOAT16"),
    (_FakeTorchDtype("float8_e4m3fn"), "FP8_E4M3"), (_FakeTorchDtype("float32"), "FLOAT"),
    (opendnn.data_type.HALF, "HALF"),
])
def test_data_type_spellings(spelling, expected):
    g = opendnn.pygraph()
    t = g.tensor(dim=[2, 3], stride=[3, 1], data_type=spelling)
    assert t.get_data_type() == getattr(opendnn.data_type, expected)
    t.set_data_type(spelling)
    assert t.get_data_type() == getattr(opendnn.data_type, expected)


def test_fake_torch_dtype_is_recognised_by_type_name():
    assert str(type(_FakeTorchDtype("half"))) == "<class 'torch.dtype'>"


# ---- tensors --------------------------------------------------------------------------------------

def test_tensor_methods_chain():
    g = opendnn.pygraph(name="g")
    t = g.tensor(dim=[2, 3, 4], stride=[12, 4, 1], data_type=F, name="x", uid=7)
    assert t.get_uid() == 7 and t.get_name() == "x"
    assert t.get_dim() == [2, 3, 4] and t.get_stride() == [12, 4, 1]
    assert t.set_output(True).set_data_type(opendnn.data_type.HALF) is t
    assert t.get_data_type() == opendnn.data_type.HALF
    assert t.set_uid(9).get_uid() == 9
    assert t.set_name("y").get_name() == "y"
    t.set_dim([4, 3]).set_stride([3, 1])
    assert t.get_dim() == [4, 3] and t.get_stride() == [3, 1]
    r = g.tensor(dim=[3, 1, 1, 1], data_type=opendnn.data_type.INT32)
    assert t.set_ragged_offset(r).get_ragged_offset() is r
    assert t.set_is_virtual(True).get_is_virtual()
    assert t.set_is_pass_by_value(True).get_is_pass_by_value()
    assert json.loads(repr(t))["name"] == "y"


def test_tensor_defaults_and_like():
    g = opendnn.pygraph()
    t = g.tensor(dim=[2, 3, 4], data_type=F)
    assert t.get_stride() == [12, 4, 1]
    a = np.zeros((4, 6), np.float16)[:, ::2]
    like = g.tensor_like(a)
    assert like.get_dim() == [4, 3] and like.get_stride() == [6, 2]
    assert like.get_data_type() == opendnn.data_type.HALF
    like2 = g.tensor_like(t, "copy")
    assert like2.get_dim() == [2, 3, 4] and like2.get_name() == "copy"

    class OnlyDlpack:  # any __dlpack__ object
        def __init__(self, arr):
            self.arr = arr

        def __dlpack__(self, **kw):
            return self.arr.__dlpack__(**kw)

        def __dlpack_device__(self):
            return self.arr.__dlpack_device__()

    d = g.tensor_like(OnlyDlpack(np.zeros((5, 2), np.int64)))
    assert d.get_dim() == [5, 2] and d.get_stride() == [2, 1] and d.get_data_type() == opendnn.data_type.INT64


# ---- ops ------------------------------------------------------------------------------------------

def test_every_catalogue_op_is_a_method():
    g = opendnn.pygraph()
    for spec in opendnn._C.op_specs():
        assert callable(getattr(g, spec["method"])), spec["method"]
    for _mode, method, _arity in opendnn._C.pointwise_modes():
        assert callable(getattr(g, method)), method
    for extra in ("bias", "scale", "leaky_relu", "sdpa", "sdpa_backward", "sdpa_fp8", "sdpa_fp8_backward",
                  "layernorm", "rmsnorm", "rmsnorm_backward", "slice", "reduction", "transpose", "concatenate",
                  "gen_index", "binary_select", "conv_fprop", "conv_dgrad", "conv_wgrad"):
        assert callable(getattr(g, extra)), extra


def test_generic_kwargs_and_aliases():
    g = float_graph()
    x = g.tensor(dim=[1, 4, 8, 8], data_type=F)
    w = g.tensor(dim=[2, 4, 3, 3], data_type=F)
    y = g.conv_fprop(image=x, weight=w, padding=[1, 1], stride=[1, 1], dilation=[1, 1], name="conv")
    assert isinstance(y, opendnn.tensor)
    n = g.nodes_info()[-1]
    assert n["name"] == "conv" and n["attrs"]["pre_padding"] == [1, 1]
    assert n["inputs"]["X"] is x and n["inputs"]["W"] is w
    with pytest.raises(TypeError, match="unexpected keyword"):
        g.matmul(A=x, B=w, nonsense=1)
    with pytest.raises(TypeError, match="unexpected keyword"):
        g.relu(input=x, bogus=2)
    # a generated method with cuDNN FE's alias keyword
    r = g.rope(input=x, cos=x, sin=x, interleaved=True)
    assert g.nodes_info()[-1]["attrs"]["interleaved"] is True and isinstance(r, opendnn.tensor)


def test_return_arity_like_cudnn_frontend():
    g = opendnn.pygraph(io_data_type=opendnn.data_type.HALF, intermediate_data_type=F, compute_data_type=F)
    q = g.tensor(dim=[1, 2, 8, 16], data_type=opendnn.data_type.HALF)
    assert len(g.sdpa(q=q, k=q, v=q, is_inference=False)) == 2
    o, stats = g.sdpa(q=q, k=q, v=q, generate_stats=False, attn_scale=0.1)
    assert stats is None
    x = g.tensor(dim=[4, 8, 1, 1], data_type=F)
    s = g.tensor(dim=[1, 8, 1, 1], data_type=F)
    assert len(g.rmsnorm(norm_forward_phase=opendnn.norm_forward_phase.TRAINING, input=x, scale=s, epsilon=1e-5)) == 2
    y, inv = g.rmsnorm(norm_forward_phase=opendnn.norm_forward_phase.INFERENCE, input=x, scale=s, epsilon=1e-5)
    assert inv is None
    assert len(g.layernorm(norm_forward_phase=opendnn.norm_forward_phase.TRAINING, input=x, scale=s, bias=s,
                           epsilon=1e-5)) == 3
    assert len(g.batchnorm(input=x, scale=s, bias=s, in_running_mean=s, in_running_var=s, epsilon=1e-5,
                           momentum=0.1)) == 5
    assert len(g.genstats(input=x)) == 2
    dq, dk, dv = g.sdpa_backward(q=q, k=q, v=q, o=q, dO=q, stats=q, attn_scale=0.5, use_causal_mask=True)
    assert all(isinstance(t, opendnn.tensor) for t in (dq, dk, dv))


def test_sdpa_options_translate_to_attributes():
    g = opendnn.pygraph(io_data_type=opendnn.data_type.HALF, intermediate_data_type=F, compute_data_type=F)
    q = g.tensor(dim=[2, 2, 8, 16], data_type=opendnn.data_type.HALF)
    sl = g.tensor(dim=[2, 1, 1, 1], data_type=opendnn.data_type.INT32)
    scale_t = g.tensor(dim=[1, 1, 1, 1], data_type=F, is_pass_by_value=True)
    g.sdpa(q=q, k=q, v=q, is_inference=True, attn_scale=scale_t, use_causal_mask_bottom_right=True,
           sliding_window_length=4, use_padding_mask=True, seq_len_q=sl, seq_len_kv=sl,
           dropout=(0.1, 123, 456), implementation=opendnn.attention_implementation.COMPOSITE, name="attn")
    n = g.nodes_info()[-1]
    a = n["attrs"]
    assert a["diagonal_alignment"] == "BOTTOM_RIGHT" and a["right_bound"] == 0 and a["left_bound"] == 4
    assert a["use_padding_mask"] is True and a["dropout_probability"] == pytest.approx(0.1)
    assert a["implementation"] == "COMPOSITE" and a["generate_stats"] is False
    assert n["inputs"]["attn_scale"] is scale_t and n["inputs"]["seq_len_q"] is sl
    assert n["inputs"]["seed"].get_is_pass_by_value()
    g.sdpa(q=q, k=q, v=q, generate_stats=True, diagonal_band_left_bound=3, diagonal_band_right_bound=1,
           diagonal_alignment=opendnn.diagonal_alignment.TOP_LEFT, attn_scale=0.25)
    a = g.nodes_info()[-1]["attrs"]
    assert (a["left_bound"], a["right_bound"], a["attn_scale_value"]) == (3, 1, 0.25)


def test_slice_transpose_reduction_concat_adapters():
    g = float_graph()
    x = g.tensor(dim=[4, 6, 8], data_type=F)
    g.slice(x, slices=[slice(1, 3), slice(None, None, 2), slice(0, 8)], name="sl")
    a = g.nodes_info()[-1]["attrs"]
    assert a["start"] == [1, 0, 0] and a["end"] == [3, 6, 8] and a["stride"] == [1, 2, 1]
    g.transpose(x, [2, 0, 1])
    assert g.nodes_info()[-1]["attrs"]["permutation"] == [2, 0, 1]
    g.reduction(x, opendnn.reduction_mode.AMAX)
    assert g.nodes_info()[-1]["attrs"]["mode"] == "AMAX"
    g.concatenate([x, x], axis=1, in_place_index=0)
    n = g.nodes_info()[-1]
    assert set(n["inputs"]) == {"0", "1"} and n["attrs"]["axis"] == 1


def test_pointwise_modes_and_parameters():
    g = float_graph()
    x = g.tensor(dim=[2, 3], data_type=F)
    g.relu(input=x, negative_slope=0.1, lower_clip=-1.0, upper_clip=6.0)
    a = g.nodes_info()[-1]["attrs"]
    assert a["mode"] == "RELU_FWD" and a["relu_lower_clip_slope"] == pytest.approx(0.1)
    assert a["relu_upper_clip"] == 6.0
    g.leaky_relu(x, 0.2)
    assert g.nodes_info()[-1]["attrs"]["relu_lower_clip_slope"] == pytest.approx(0.2)
    g.swish(x, swish_beta=1.5)
    assert g.nodes_info()[-1]["attrs"]["swish_beta"] == 1.5
    g.cmp_gt(input=x, comparison=x)
    assert g.nodes_info()[-1]["attrs"]["mode"] == "CMP_GT"
    g.relu_backward(loss=x, input=x)
    assert g.nodes_info()[-1]["attrs"]["mode"] == "RELU_BWD"
    g.binary_select(input0=x, input1=x, mask=x)
    assert g.nodes_info()[-1]["inputs"]["IN_2"] is x
    g.gen_index(x, axis=1)
    assert g.nodes_info()[-1]["attrs"]["axis"] == 1
    g.scale(input=x, scale=x)
    assert g.nodes_info()[-1]["attrs"]["mode"] == "MUL"
    with pytest.raises(TypeError):
        g.add(x)


# ---- pointwise execution over every mode family --------------------------------------------------

_UNARY = {
    "neg": np.negative, "abs": np.abs, "exp": np.exp, "sqrt": lambda a: np.sqrt(np.abs(a)),
    "sin": np.sin, "cos": np.cos, "tanh": np.tanh, "sigmoid": lambda a: 1 / (1 + np.exp(-a)),
    "relu": lambda a: np.maximum(a, 0), "ceil": np.ceil, "floor": np.floor, "identity": lambda a: a,
}
_BINARY = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "max": np.maximum, "min": np.minimum}


@pytest.mark.parametrize("method", sorted(_UNARY) + sorted(_BINARY))
def test_pointwise_executes(method, rng):
    g = float_graph()
    a = rng.standard_normal((3, 5)).astype(np.float32)
    if method == "sqrt":
        a = np.abs(a)
    b = rng.standard_normal((3, 5)).astype(np.float32)
    A = g.tensor_like(a)
    B = g.tensor_like(b)
    Y = getattr(g, method)(A, B) if method in _BINARY else getattr(g, method)(A)
    Y.set_output(True)
    ws = build(g)
    y = np.zeros((3, 5), np.float32)
    g.execute({A: a, B: b, Y: y} if method in _BINARY else {A: a, Y: y}, ws)
    want = _BINARY[method](a, b) if method in _BINARY else _UNARY[method](a)
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-6)


# ---- lifecycle and execute -----------------------------------------------------------------------

def _add_graph():
    g = float_graph(name="add")
    x = g.tensor(name="x", dim=[2, 4], data_type=F)
    y = g.tensor(name="y", dim=[2, 4], data_type=F)
    z = g.add(a=x, b=y, name="sum")
    z.set_output(True).set_name("z")
    return g, x, y, z


def test_lifecycle_and_plan_queries():
    g, x, y, z = _add_graph()
    g.validate()
    g.build_operation_graph()
    g.create_execution_plans([opendnn.heur_mode.A, opendnn.heur_mode.FALLBACK])
    assert g.get_execution_plan_count() >= 1
    assert isinstance(g.get_plan_name_at_index(0), str)
    g.check_support()
    g.build_plan_at_index(0)
    g.build_plans(opendnn.build_plan_policy.ALL)
    g.select_plan(0)
    assert g.get_workspace_size() >= 0
    assert g.get_workspace_size_plan_at_index(0) >= 0
    g.deselect_workspace_greater_than(1 << 40)
    assert isinstance(g.key(), int)
    assert sorted(g.variant_uids()) == sorted(t.get_uid() for t in (x, y, z))


def test_build_shortcut_and_execute_value_kinds(rng):
    g, x, y, z = _add_graph()
    g.build([opendnn.heur_mode.A])
    ws = np.empty(g.get_workspace_size(), np.uint8) if g.get_workspace_size() else None
    a = rng.standard_normal((2, 4)).astype(np.float32)
    b = rng.standard_normal((2, 4)).astype(np.float32)

    class ArrayInterface:
        def __init__(self, arr):
            self.__array_interface__ = arr.__array_interface__

    class DLPackOnly:
        def __init__(self, arr):
            self.arr = arr

        def __dlpack__(self, **kw):
            return self.arr.__dlpack__(**kw)

    class TorchLike:  # duck-typed torch tensor: data_ptr()
        def __init__(self, arr):
            self.arr = arr

        def data_ptr(self):
            return self.arr.ctypes.data

    for wrap in (lambda v: v, ArrayInterface, DLPackOnly, TorchLike, lambda v: v.ctypes.data):
        out = np.zeros((2, 4), np.float32)
        g.execute({x: wrap(a), y.get_uid(): wrap(b), z: wrap(out), None: a}, ws)
        np.testing.assert_allclose(out, a + b, rtol=1e-6)
    out = np.zeros((2, 4), np.float32)
    g.execute({x: a, y: b, z: out}, ws, handle=opendnn.create_handle())
    g.execute_plan_at_index({x: a, y: b, z: out}, ws, 0)
    np.testing.assert_allclose(out, a + b, rtol=1e-6)


def test_execute_bad_variant_pack(rng):
    g, x, y, z = _add_graph()
    g.build([opendnn.heur_mode.A])
    a = np.zeros((2, 4), np.float32)
    with pytest.raises(ValueError, match="tensor \"z\" .*no entry"):
        g.execute({x: a, y: a}, None)
    g.execute({x: a, y: a, z: a, 999: a}, None)  # uids the plan does not need are ignored
    with pytest.raises(ValueError, match="is None"):
        g.execute({x: a, y: a, z: None}, None)
    with pytest.raises(ValueError, match="keys must be"):
        g.execute({"x": a, y: a, z: a}, None)
    with pytest.raises(TypeError):
        g.execute({x: object(), y: a, z: a}, None)


def test_serialize_roundtrip_and_repr():
    g, x, y, z = _add_graph()
    g.validate()
    text = g.to_json()
    assert bytes(g.serialize()).decode() == text  # no plan built: the graph alone, as FE's list of ints
    doc = json.loads(text)
    assert doc["version"] == "2.0"
    assert repr(g) == text
    h = opendnn.pygraph()
    h.deserialize(text)
    assert json.loads(bytes(h.serialize())) == doc
    h2 = opendnn.pygraph()
    h2.deserialize(None, text.encode())
    assert h2.key() == h.key()
    assert g.query_tensor_attributes_of_uid(x.get_uid()).get_name() == "x"


def test_context_manager_and_jit(rng):
    with opendnn.graph(opendnn.create_handle(), name="cm", io_data_type=F) as (g, tensors):
        a = g.tensor(name="a", dim=[3], data_type=F)
        b = g.exp(a)
        b.set_output(True)
        tensors += [a, b]
    assert isinstance(g, opendnn.pygraph) and len(tensors) == 2

    @opendnn.jit(heur_modes=[opendnn.heur_mode.A, opendnn.heur_mode.FALLBACK])
    def make():
        g = float_graph()
        a = g.tensor(dim=[3], data_type=F)
        b = g.exp(a)
        b.set_output(True)
        return g, [a, b]

    g, (ua, ub) = make()
    x = rng.standard_normal(3).astype(np.float32)
    out = np.zeros(3, np.float32)
    g.execute({ua: x, ub: out}, np.empty(g.get_workspace_size(), np.uint8))
    np.testing.assert_allclose(out, np.exp(x), rtol=1e-6)

    calls = []

    @opendnn.graph_cache(key_fn=lambda n: n, maxsize=2)
    def cached(n):
        calls.append(n)
        return n * 2

    assert [cached(1), cached(1), cached(2), cached(3), cached(1)] == [2, 2, 4, 6, 2]
    assert calls == [1, 2, 3, 1]


def test_graph_wrapper(rng):
    a = rng.standard_normal((2, 8, 16)).astype(np.float32)
    w = rng.standard_normal((2, 16, 4)).astype(np.float32)
    with opendnn.Graph(io_data_type=F, intermediate_data_type=F, compute_data_type=F) as g:
        y = g.relu(g.matmul(A=a, B=w))
        y.set_output(True).set_name("y")
    g.set_io_tuples(["matmul.0::A", "matmul.0::B"], ["y"])
    out = g(a, w)
    np.testing.assert_allclose(out, np.maximum(a @ w, 0), rtol=1e-5, atol=1e-5)
    res = g({"matmul.0::A": a, "matmul.0::B": w})
    np.testing.assert_allclose(res["y"], np.maximum(a @ w, 0), rtol=1e-5, atol=1e-5)
    names = [n["name"] for n in g.pygraph.nodes_info()]
    assert sorted(names) == ["matmul.0", "relu.0"]
