# SPDX-License-Identifier: Apache-2.0
"""execute() checks every object that describes its memory against the tensor it is bound to (data
type, layout, extent, writability, overlap), the workspace against the plan's size; valid views pass.
Also: host scalars from tensor_like, scalar values checked where they enter, int handles."""

import array

import numpy as np
import pytest

import opendnn
from conftest import float_graph

F = opendnn.data_type.FLOAT


def _relu_graph(dims=(4, 8), strides=None, out_strides=None):
    g = float_graph()
    x = g.tensor(name="x", dim=list(dims), stride=strides, data_type=F)
    y = g.relu(input=x, name="act")
    y.set_output(True).set_data_type(F)
    if out_strides is not None:
        y.set_dim(list(dims)).set_stride(list(out_strides))
    g.build([opendnn.heur_mode.A, opendnn.heur_mode.FALLBACK])
    return g, x, y


def _ws(g):
    return np.empty(g.get_workspace_size(), np.uint8)


# ---- outputs: writable, no overlap -----------------------------------------------------------------

def test_output_with_negative_strides_is_refused():
    g, x, y = _relu_graph()
    out = np.zeros((4, 8), np.float32)[::-1]
    with pytest.raises(ValueError, match=r'"act.*negative strides'):
        g.execute({x: np.ones((4, 8), np.float32), y: out}, _ws(g))


def test_broadcast_output_is_refused():
    g, x, y = _relu_graph()
    out = np.broadcast_to(np.zeros(8, np.float32), (4, 8))
    with pytest.raises(ValueError, match="stride 0|read-only"):
        g.execute({x: np.ones((4, 8), np.float32), y: out}, _ws(g))
    writable = np.lib.stride_tricks.as_strided(np.zeros(8, np.float32), (4, 8), (0, 4))
    with pytest.raises(ValueError, match="stride 0"):
        g.execute({x: np.ones((4, 8), np.float32), y: writable}, _ws(g))


def test_self_overlapping_output_is_refused():
    g, x, y = _relu_graph()
    base = np.zeros(16, np.float32)
    out = np.lib.stride_tricks.as_strided(base, (4, 8), (8, 4))  # rows overlap by 6 elements
    with pytest.raises(ValueError, match="overlaps itself"):
        g.execute({x: np.ones((4, 8), np.float32), y: out}, _ws(g))
    assert (base == 0).all()


def test_bytearray_must_cover_the_tensor():
    g, x, y = _relu_graph()
    with pytest.raises(ValueError, match=r"spans 128 bytes but its bytearray holds 8"):
        g.execute({x: np.ones((4, 8), np.float32), y: bytearray(8)}, _ws(g))
    out = bytearray(128)
    g.execute({x: -np.ones((4, 8), np.float32), y: out}, _ws(g))
    assert bytes(out) == bytes(128)
    big = bytearray(b"\x01" * 256)  # a larger buffer is fine: the tensor's 128 bytes are written
    g.execute({x: np.zeros((4, 8), np.float32), y: big}, _ws(g))
    assert big[:128] == bytes(128) and big[128:] == b"\x01" * 128


def test_read_only_outputs_are_refused():
    g, x, y = _relu_graph()
    ro = np.zeros((4, 8), np.float32)
    ro.setflags(write=False)
    with pytest.raises(ValueError, match="read-only"):
        g.execute({x: np.ones((4, 8), np.float32), y: ro}, _ws(g))
    assert (ro == 0).all()
    b = bytes(128)
    with pytest.raises(ValueError, match="read-only"):
        g.execute({x: np.ones((4, 8), np.float32), y: b}, _ws(g))
    assert b == bytes(128)
    # Read-only inputs are fine.
    xin = np.ones((4, 8), np.float32)
    xin.setflags(write=False)
    out = np.zeros((4, 8), np.float32)
    g.execute({x: xin, y: out}, _ws(g))
    assert (out == 1).all()
    g.execute({x: bytes(np.full((4, 8), 2.0, np.float32)), y: out}, _ws(g))
    assert (out == 2).all()


# ---- inputs: type and layout ---------------------------------------------------------------------

def test_same_width_float_types_are_accepted_with_a_warning():
    ml_dtypes = pytest.importorskip("ml_dtypes")
    g = float_graph()
    x = g.tensor(name="x", dim=[4, 8], data_type=opendnn.data_type.BFLOAT16)
    y = g.relu(input=x, name="act")
    y.set_output(True).set_data_type(opendnn.data_type.BFLOAT16)
    g.build([opendnn.heur_mode.A, opendnn.heur_mode.FALLBACK])
    bits = np.arange(32, dtype=np.float32).reshape(4, 8).astype(ml_dtypes.bfloat16)
    out = np.zeros((4, 8), ml_dtypes.bfloat16)
    with pytest.warns(RuntimeWarning, match=r'"x" \(uid \d+\) is BFLOAT16 but the array bound to it holds HALF'):
        g.execute({x: bits.view(np.float16), y: out}, _ws(g))
    np.testing.assert_array_equal(out.astype(np.float32), np.arange(32, dtype=np.float32).reshape(4, 8))
    with pytest.raises(ValueError, match="it is BFLOAT16 but its numpy.ndarray holds int16"):
        g.execute({x: bits.view(np.int16), y: out}, _ws(g))


def test_float64_for_a_float_tensor_is_refused():
    g, x, y = _relu_graph()
    out = np.zeros((4, 8), np.float32)
    with pytest.raises(ValueError, match=r'"x" \(uid \d+\): it is FLOAT but its numpy.ndarray holds float64'):
        g.execute({x: np.ones((4, 8), np.float64), y: out}, _ws(g))
    with pytest.raises(ValueError, match="it is FLOAT but its array.array holds 'd'"):
        g.execute({x: array.array("d", [1.0] * 32), y: out}, _ws(g))


def test_fortran_order_and_strided_views_against_a_packed_tensor_are_refused():
    g, x, y = _relu_graph()
    out = np.zeros((4, 8), np.float32)
    a = np.asfortranarray(np.arange(32, dtype=np.float32).reshape(4, 8))
    with pytest.raises(ValueError, match=r"strides \[8, 1\] name other elements than its numpy array's shape "
                                         r"\[4, 8\] strides \[1, 4\]"):
        g.execute({x: a, y: out}, _ws(g))
    wide = np.arange(64, dtype=np.float32).reshape(4, 16)
    with pytest.raises(ValueError, match="name other elements"):
        g.execute({x: wide[:, ::2], y: out}, _ws(g))
    assert (out == 0).all()


def test_views_whose_layout_is_the_tensors_are_accepted():
    wide = np.arange(64, dtype=np.float32).reshape(4, 16) - 20
    view = wide[:, ::2]
    g, x, y = _relu_graph(strides=[16, 2])  # the tensor describes the view itself; so does the output
    out = np.zeros((4, 16), np.float32)[:, ::2]
    g.execute({x: view, y: out}, _ws(g))
    np.testing.assert_array_equal(out, np.maximum(view, 0))
    # A column slice whose span reaches past the view's own bytes (the apply_rope pattern).
    full = np.arange(4 * 32, dtype=np.float32).reshape(4, 32) - 50
    half = full[:, :8]
    g2, x2, y2 = _relu_graph(strides=[32, 1], out_strides=[32, 1])
    res = np.zeros((4, 32), np.float32)
    g2.execute({x2: half, y2: res[:, :8]}, _ws(g2))
    np.testing.assert_array_equal(res[:, :8], np.maximum(half, 0))
    assert (res[:, 8:] == 0).all()
    # The same memory bound through its base array works too (a contiguous buffer holding the span).
    g2.execute({x2: full, y2: res}, _ws(g2))
    # A transposed view bound to a tensor with the view's strides (the output keeps that stride order).
    t = np.arange(32, dtype=np.float32).reshape(8, 4).T - 10
    g3, x3, y3 = _relu_graph(strides=[1, 4])
    o3 = np.zeros((8, 4), np.float32).T
    g3.execute({x3: t, y3: o3}, _ws(g3))
    np.testing.assert_array_equal(o3, np.maximum(t, 0))
    # A C-contiguous array is a buffer for any layout of the same elements: BSHD memory allocated as
    # [b, s, h, d] for a [b, h, s, d] tensor with BSHD strides, square (s == h) or not.
    for s_, h_ in ((4, 4), (6, 2)):
        bshd = np.arange(2 * s_ * h_ * 3, dtype=np.float32).reshape(2, s_, h_, 3) - 30
        g5, x5, y5 = _relu_graph(dims=(2, h_, s_, 3), strides=[s_ * h_ * 3, 3, h_ * 3, 1],
                                 out_strides=[s_ * h_ * 3, 3, h_ * 3, 1])
        o5 = np.zeros_like(bshd)
        g5.execute({x5: bshd, y5: o5}, _ws(g5))
        np.testing.assert_array_equal(o5, np.maximum(bshd, 0))
    # A channels-last view bound to a packed NCHW tensor is read in the wrong order: refused.
    g6, x6, y6 = _relu_graph(dims=(2, 3, 4, 5))
    nhwc = np.zeros((2, 4, 5, 3), np.float32).transpose(0, 3, 1, 2)
    with pytest.raises(ValueError, match="name other elements"):
        g6.execute({x6: nhwc, y6: np.zeros((2, 3, 4, 5), np.float32)}, _ws(g6))
    # Unit dims and a flat buffer of the right size are fine.
    g4, x4, y4 = _relu_graph()
    o4 = np.zeros(32, np.float32)
    g4.execute({x4: np.ones((1, 4, 8, 1), np.float32), y4: o4}, _ws(g4))
    assert (o4 == 1).all()


def test_fp8_tensor_accepts_uint8_storage_but_not_float32():
    g = float_graph()
    x = g.tensor(name="x", dim=[4, 8], data_type=opendnn.data_type.FP8_E4M3)
    y = g.identity(input=x)
    y.set_output(True).set_data_type(F)
    g.build([opendnn.heur_mode.A, opendnn.heur_mode.FALLBACK])
    out = np.zeros((4, 8), np.float32)
    g.execute({x: np.full((4, 8), 0x38, np.uint8), y: out}, _ws(g))  # 0x38 is 1.0 in E4M3
    assert (out == 1.0).all()
    with pytest.raises(ValueError, match="FP8_E4M3 but .* float32"):
        g.execute({x: np.zeros((4, 8), np.float32), y: out}, _ws(g))


class _Interface:
    """An object exposing only __array_interface__ (or __dlpack__)."""

    def __init__(self, arr, dlpack=False):
        self._arr = arr
        if dlpack:
            self.__dlpack__ = arr.__dlpack__
            self.__dlpack_device__ = arr.__dlpack_device__
        else:
            self.__array_interface__ = arr.__array_interface__


def test_array_interface_and_dlpack_objects_are_checked():
    g, x, y = _relu_graph()
    out = np.zeros((4, 8), np.float32)
    ok = np.ones((4, 8), np.float32)
    g.execute({x: _Interface(ok), y: _Interface(out)}, _ws(g))
    assert (out == 1).all()
    g.execute({x: _Interface(-ok, dlpack=True), y: out}, _ws(g))
    assert (out == 0).all()
    with pytest.raises(ValueError, match="it is FLOAT but .* DOUBLE"):
        g.execute({x: _Interface(np.ones((4, 8))), y: out}, _ws(g))
    with pytest.raises(ValueError, match="name other elements"):
        g.execute({x: _Interface(np.asfortranarray(ok), dlpack=True), y: out}, _ws(g))
    ro = np.zeros((4, 8), np.float32)
    ro.setflags(write=False)
    with pytest.raises(ValueError, match="read-only"):
        g.execute({x: ok, y: _Interface(ro)}, _ws(g))
    with pytest.raises(ValueError, match=r"\(DLPack\) is read-only"):
        g.execute({x: ok, y: _Interface(ro, dlpack=True)}, _ws(g))


class dtype:
    """Stands for torch.dtype (opendnn recognises it by its type's name)."""

    def __init__(self, name):
        self.name = name

    def __str__(self):
        return "torch." + self.name


dtype.__module__ = "torch"
_F32, _F64 = dtype("float32"), dtype("float64")


class _FakeTorchTensor:
    """Duck-types a torch tensor: shape, stride(), dtype, data_ptr(), is_cuda (read without torch)."""

    def __init__(self, arr, dtype, is_cuda=False):
        self._arr, self.dtype, self.is_cuda = arr, dtype, is_cuda
        self.shape = tuple(arr.shape)

    def stride(self):
        return tuple(s // self._arr.itemsize for s in self._arr.strides)

    def data_ptr(self):
        return self._arr.ctypes.data


def test_torch_like_tensors_are_checked_without_torch():
    f32, f64 = _F32, _F64
    assert opendnn._dtypes.to_data_type(f32) == F
    g, x, y = _relu_graph()
    out = np.zeros((4, 8), np.float32)
    g.execute({x: _FakeTorchTensor(-np.ones((4, 8), np.float32) * 3, f32), y: _FakeTorchTensor(out, f32)}, _ws(g))
    assert (out == 0).all()
    with pytest.raises(ValueError, match="it is FLOAT but .* torch.float64"):
        g.execute({x: _FakeTorchTensor(np.ones((4, 8)), f64), y: out}, _ws(g))
    with pytest.raises(ValueError, match="name other elements"):
        g.execute({x: _FakeTorchTensor(np.ones((4, 16), np.float32)[:, ::2], f32), y: out}, _ws(g))
    with pytest.raises(ValueError, match="stride 0"):
        g.execute({x: np.ones((4, 8), np.float32), y: _FakeTorchTensor(np.broadcast_to(out[0], (4, 8)), f32)}, _ws(g))


def test_int_pointers_are_not_checked():
    g, x, y = _relu_graph()
    a, out = np.ones((4, 8), np.float32), np.zeros((4, 8), np.float32)
    g.execute({x: a.ctypes.data, y: out.ctypes.data}, _ws(g))
    assert (out == 1).all()
    with pytest.raises(ValueError, match="a bool is not a pointer"):
        g.execute({x: True, y: out}, _ws(g))


# ---- every way in ----------------------------------------------------------------------------------

def test_execute_plan_at_index_and_autotune_check_the_pack():
    g, x, y = _relu_graph()
    g.build_plans(opendnn.build_plan_policy.ALL)
    small = np.zeros((2, 8), np.float32)
    ok = np.ones((4, 8), np.float32)
    for call in (lambda p: g.execute_plan_at_index(p, _ws(g), 0), lambda p: g.autotune(p, _ws(g))):
        with pytest.raises(ValueError, match="spans 128 bytes .* holds 64"):
            call({x: ok, y: small})
        with pytest.raises(ValueError, match="FLOAT but .*float64"):
            call({x: np.ones((4, 8)), y: np.zeros((4, 8), np.float32)})
    out = np.zeros((4, 8), np.float32)
    g.execute_plan_at_index({x: ok, y: out}, _ws(g), 0)
    assert (out == 1).all()


def _workspace_graph():
    g = float_graph()
    x = g.tensor(name="x", dim=[64, 64], data_type=F)
    y = g.relu(input=g.add(x, x))
    z = g.exp(input=y)
    z.set_output(True)
    g.build([opendnn.heur_mode.A, opendnn.heur_mode.FALLBACK])
    return g, x, z


def test_workspace_smaller_than_the_plan_needs_is_refused():
    g, x, z = _workspace_graph()
    need = g.get_workspace_size()
    assert need > 16
    a, out = np.ones((64, 64), np.float32), np.zeros((64, 64), np.float32)
    with pytest.raises(ValueError, match=f"workspace holds 16 bytes but the plan needs {need}"):
        g.execute({x: a, z: out}, np.empty(16, np.uint8))
    with pytest.raises(ValueError, match="workspace holds 16 bytes"):
        g.execute_plan_at_index({x: a, z: out}, np.empty(16, np.uint8), 0)
    with pytest.raises(ValueError, match="workspace holds 8 bytes"):
        g.execute({x: a, z: out}, bytearray(8))
    with pytest.raises(ValueError, match="read-only"):
        g.execute({x: a, z: out}, bytes(need))
    g.execute({x: a, z: out}, np.empty(need // 4 + 1, np.float32))  # any element type: counted in bytes
    np.testing.assert_allclose(out, np.exp(2.0), rtol=1e-6)


# ---- execute's signature ---------------------------------------------------------------------------

def test_execute_takes_cudnn_frontend_keywords_and_overrides():
    g, x, y = _relu_graph()
    ok, out = np.ones((4, 8), np.float32), np.zeros((4, 8), np.float32)
    g.execute(tensor_to_device_buffer={x: ok, y: out}, workspace=_ws(g))
    g.execute({x: ok, y: out}, _ws(g), None, [x.get_uid()], [[4, 8]], [[8, 1]])  # the built shapes: fine
    with pytest.raises(opendnn.NotSupportedError, match=r"not supported: .*uid \d+ is given dims \[2, 8\]"):
        g.execute({x: ok, y: out}, _ws(g), override_uids=[x.get_uid()], override_shapes=[[2, 8]],
                  override_strides=[[8, 1]])
    with pytest.raises(opendnn.NotSupportedError):
        g.execute_plan_at_index({x: ok, y: out}, _ws(g), 0, override_uids=[y.get_uid()], override_shapes=[[4, 8]],
                                override_strides=[[1, 4]])
    with pytest.raises(ValueError, match="override_uids has 1 entries but override_shapes has 2"):
        g.execute({x: ok, y: out}, _ws(g), override_uids=[x.get_uid()], override_shapes=[[4, 8], [4, 8]])


# ---- host scalars ----------------------------------------------------------------------------------

def test_tensor_like_of_a_one_element_host_array_is_pass_by_value():
    g = float_graph()
    eps = g.tensor_like(np.full((1, 1, 1, 1), 0.25, np.float32))
    assert eps.get_is_pass_by_value() and eps.get_dim() == [1, 1, 1, 1]
    big = g.tensor_like(np.zeros((2, 3), np.float32))
    assert not big.get_is_pass_by_value()
    d = g.tensor_like(_Interface(np.full((1,), 3, np.int32), dlpack=True))
    assert d.get_is_pass_by_value() and d.get_data_type() == opendnn.data_type.INT32


def test_host_scalar_value_comes_from_the_pack_else_from_tensor_like():
    g = float_graph()
    x = g.tensor(name="x", dim=[2, 4], data_type=F)
    s_host = np.full((1, 1), 2.0, np.float32)
    s = g.tensor_like(s_host)
    y = g.mul(x, s)
    y.set_output(True)
    g.build([opendnn.heur_mode.A, opendnn.heur_mode.FALLBACK])
    a, out = np.ones((2, 4), np.float32), np.zeros((2, 4), np.float32)
    g.execute({x: a, y: out}, _ws(g))  # not bound: the value tensor_like saw
    assert (out == 2.0).all()
    g.execute({x: a, s: np.full((1, 1), 5.0, np.float32), y: out}, _ws(g))  # bound: the pack's value wins
    assert (out == 5.0).all()
    with pytest.raises(ValueError, match="pass-by-value .* device memory"):
        g.execute({x: a, s: _FakeTorchTensor(np.ones((1, 1), np.float32), _F32, True),
                   y: out}, _ws(g))


def test_norm_with_a_host_epsilon_plans_and_runs():
    g = float_graph()
    x_np = np.random.default_rng(0).standard_normal((4, 16, 1, 1)).astype(np.float32)
    scale_np = np.ones((1, 16, 1, 1), np.float32)
    eps_np = np.full((1, 1, 1, 1), 1e-5, np.float32)
    x, scale, eps = g.tensor_like(x_np), g.tensor_like(scale_np), g.tensor_like(eps_np)
    assert eps.get_is_pass_by_value() and not x.get_is_pass_by_value()
    y, inv = g.rmsnorm(norm_forward_phase=opendnn.norm_forward_phase.TRAINING, input=x, scale=scale, epsilon=eps)
    y.set_output(True)
    inv.set_output(True).set_data_type(F)
    g.build([opendnn.heur_mode.A, opendnn.heur_mode.FALLBACK])
    out, inv_out = np.zeros_like(x_np), np.zeros((4, 1, 1, 1), np.float32)
    g.execute({x: x_np, scale: scale_np, eps: eps_np, y: out, inv: inv_out}, _ws(g))
    want = x_np / np.sqrt((x_np ** 2).mean(axis=1, keepdims=True) + 1e-5)
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5)


# ---- values checked where they enter ---------------------------------------------------------------

def test_tensor_scalar_types_and_ranges():
    g = opendnn.pygraph()
    assert g.tensor_scalar(3).get_data_type() == opendnn.data_type.INT32
    assert g.tensor_scalar(2**40).get_data_type() == opendnn.data_type.INT64
    assert g.tensor_scalar(0.5).get_data_type() == F
    t = g.tensor_scalar(1.5, opendnn.scalar_type.COMPILE_TIME_CONST)
    assert t.get_data_type() == F and t._get_value() == 1.5
    assert g.tensor_scalar(2, scalar_type=opendnn.scalar_type.RUNTIME_PARAM)._get_value() == 2
    assert g.tensor_scalar(2, opendnn.data_type.INT64).get_data_type() == opendnn.data_type.INT64  # superset
    assert g.tensor_scalar(2, data_type=opendnn.data_type.HALF).get_data_type() == opendnn.data_type.HALF
    with pytest.raises(ValueError, match="out of range for INT32"):
        g.tensor_scalar(2**40, data_type=opendnn.data_type.INT32)
    with pytest.raises(ValueError, match="out of range for BOOLEAN"):
        g.tensor_scalar(7, data_type=opendnn.data_type.BOOLEAN)
    with pytest.raises(ValueError, match="out of range for HALF"):
        g.tensor_scalar(1e6, data_type=opendnn.data_type.HALF)
    with pytest.raises(ValueError, match="whole number"):
        g.tensor_scalar(2.5, data_type=opendnn.data_type.INT32)
    for v in (float("nan"), float("inf"), -float("inf")):
        t = g.tensor_scalar(v)
        got = t._get_value()
        assert (got != got) if v != v else got == v


def test_dims_and_strides_must_be_ints():
    g = opendnn.pygraph()
    with pytest.raises(TypeError, match="dim must hold ints"):
        g.tensor(dim=[2.7, 3.2], data_type=F)
    with pytest.raises(TypeError, match="stride must hold ints"):
        g.tensor(dim=[2, 3], stride=[3.0, 1], data_type=F)
    assert g.tensor(dim=[np.int64(2), 3], data_type=F).get_dim() == [2, 3]
    assert not g.tensor(dim=[2], data_type=F, uid=-1).has_uid()


def test_python_numbers_broadcast_to_any_rank():
    g = float_graph()
    x = g.tensor(name="x", dim=[2, 3, 4, 5], data_type=F)
    y = g.mul(g.relu(x), 0.5)
    z = g.add(2, y)
    z.set_output(True)
    g.build([opendnn.heur_mode.A, opendnn.heur_mode.FALLBACK])
    a = np.random.default_rng(1).standard_normal((2, 3, 4, 5)).astype(np.float32)
    out = np.zeros_like(a)
    g.execute({x: a, z: out}, _ws(g))
    np.testing.assert_allclose(out, np.maximum(a, 0) * 0.5 + 2, rtol=1e-6)


def test_a_wrong_heur_mode_is_a_type_error_naming_it():
    g, x, y = _relu_graph()
    with pytest.raises(TypeError, match="heur_mode"):
        g.build(["A"])
    with pytest.raises(TypeError, match="heur_mode"):
        g.create_execution_plans("A")
    with pytest.raises(TypeError, match="heur_mode"):
        g.create_execution_plans([opendnn.heur_mode.A, 3])


# ---- handles ---------------------------------------------------------------------------------------

def test_handles_are_ints_and_never_read_as_streams():
    h = opendnn.create_handle()
    assert isinstance(h, int) and isinstance(h, opendnn.handle)
    opendnn.set_stream(h, 1234)
    assert opendnn.get_stream(int(h)) == 1234
    opendnn.set_stream(int(h), 0)
    assert opendnn.get_stream(h) == 0
    with pytest.raises(ValueError, match="not made by create_handle"):
        opendnn.get_stream(1234)
    with pytest.raises(ValueError, match="not made by create_handle"):
        opendnn.pygraph(handle=1234)
    g, x, y = _relu_graph()
    ok, out = np.ones((4, 8), np.float32), np.zeros((4, 8), np.float32)
    g.execute({x: ok, y: out}, _ws(g), int(h))  # a positional int handle
    with pytest.raises(ValueError, match="not made by create_handle"):
        g.execute({x: ok, y: out}, _ws(g), handle=5)
    opendnn.destroy_handle(int(h))
    with pytest.raises(ValueError, match="not made by create_handle"):
        opendnn.get_stream(h)


def test_a_later_set_stream_is_seen_by_execute_without_handle():
    h = opendnn.create_handle()
    g = float_graph(handle=int(h))
    x = g.tensor(name="x", dim=[2], data_type=F)
    y = g.relu(x)
    y.set_output(True)
    g.build([opendnn.heur_mode.A, opendnn.heur_mode.FALLBACK])
    opendnn.set_stream(h, 0)
    g.execute({x: np.ones(2, np.float32), y: np.zeros(2, np.float32)}, _ws(g))
    assert opendnn.get_stream(g._get_handle()) == 0
    opendnn.set_stream(h, 77)
    assert opendnn._C._graph_stream(g) == 77


@pytest.mark.parametrize("strides", [[0, 1], [1, 1], [4, 1]])
def test_zero_or_overlapping_output_strides_are_refused_at_validate(strides):
    g = float_graph()
    x = g.tensor(name="x", dim=[4, 8], data_type=F)
    y = g.relu(x)
    y.set_output(True).set_stride(strides)
    with pytest.raises(RuntimeError, match="share memory"):
        g.validate()


def test_fp4_tensor_takes_two_values_per_byte():
    import ml_dtypes

    g = float_graph()
    x = g.tensor(name="x", dim=[4, 8], data_type=opendnn.data_type.FP4_E2M1)
    y = g.identity(input=x)
    y.set_output(True).set_data_type(F)
    g.build([opendnn.heur_mode.A, opendnn.heur_mode.FALLBACK])
    out = np.zeros((4, 8), np.float32)
    with pytest.raises(ValueError, match="FP4_E2M1 but .* float4_e2m1fn elements"):  # ml_dtypes: one per byte
        g.execute({x: np.ones((4, 8), ml_dtypes.float4_e2m1fn), y: out}, None)
    with pytest.raises(ValueError, match="spans 16 bytes but its numpy array holds 8"):
        g.execute({x: np.full((4, 2), 0x22, np.uint8), y: out}, None)
    g.execute({x: np.full((4, 4), 0x22, np.uint8), y: out}, None)  # 0x2 is 1.0 in E2M1
    assert (out == 1.0).all()


class _CudaInterface:
    """Claims device memory through __cuda_array_interface__."""

    def __init__(self, arr):
        self._arr = arr
        self.__cuda_array_interface__ = dict(arr.__array_interface__, version=3)


def test_device_memory_for_a_cpu_plan_is_refused():
    g, x, y = _relu_graph()
    ok, out = np.ones((4, 8), np.float32), np.zeros((4, 8), np.float32)
    with pytest.raises(ValueError, match="runs on the CPU but its _CudaInterface .* is in device memory"):
        g.execute({x: _CudaInterface(ok), y: out}, _ws(g))
    with pytest.raises(ValueError, match="runs on the CPU but its torch tensor is in device memory"):
        g.execute({x: _FakeTorchTensor(ok, _F32, is_cuda=True), y: out}, _ws(g))
    assert (out == 0).all()


def test_a_tensor_changed_after_build_does_not_change_what_execute_accepts():
    g, x, y = _relu_graph()
    x.set_dim([2, 8]).set_stride([8, 1])  # after build: the plan still reads [4, 8]
    y.set_dim([2, 8]).set_stride([8, 1])
    out = np.zeros((2, 8), np.float32)
    with pytest.raises(ValueError):
        g.execute({x: np.ones((2, 8), np.float32), y: out}, _ws(g))
    assert (out == 0).all()
