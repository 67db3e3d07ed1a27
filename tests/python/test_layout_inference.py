# SPDX-License-Identifier: Apache-2.0
"""Output strides follow cuDNN Frontend's rules per op family (docs/layouts.md), and the reference engine
writes values where those strides say."""

import numpy as np

import opendnn as cudnn

DT = cudnn.data_type


def nhwc(n, c, h, w):
    return [c * h * w, 1, c * w, c]


def ndhwc(n, c, d, h, w):
    return [c * d * h * w, 1, c * h * w, c * w, c]


def _graph():
    return cudnn.pygraph(io_data_type=DT.FLOAT, intermediate_data_type=DT.FLOAT, compute_data_type=DT.FLOAT)


def test_conv_outputs_follow_the_input_stride_order():
    g = _graph()
    X = g.tensor(dim=[4, 32, 56, 56], stride=nhwc(4, 32, 56, 56))
    W = g.tensor(dim=[64, 32, 3, 3], stride=nhwc(64, 32, 3, 3))
    Y = g.conv_fprop(X, W, padding=[1, 1], stride=[1, 1], dilation=[1, 1])
    DY = g.tensor(dim=[4, 64, 56, 56], stride=nhwc(4, 64, 56, 56))
    DX = g.conv_dgrad(DY, W, padding=[1, 1], stride=[1, 1], dilation=[1, 1])
    DX.set_dim([4, 32, 56, 56])
    DW = g.conv_wgrad(X, DY, padding=[1, 1], stride=[1, 1], dilation=[1, 1])
    DW.set_dim([64, 32, 3, 3])
    for t in (Y, DX, DW):
        t.set_output(True)
    g.validate()
    assert Y.get_stride() == nhwc(4, 64, 56, 56)
    assert DX.get_stride() == nhwc(4, 32, 56, 56)
    assert DW.get_stride() == nhwc(64, 32, 3, 3)


def test_conv3d_channels_last_and_packed():
    g = _graph()
    X = g.tensor(dim=[2, 8, 5, 6, 7], stride=ndhwc(2, 8, 5, 6, 7))
    W = g.tensor(dim=[16, 8, 3, 3, 3])
    Y = g.conv_fprop(X, W, padding=[1, 1, 1], stride=[1, 1, 1], dilation=[1, 1, 1])
    Y.set_output(True)
    P = g.tensor(dim=[2, 8, 5, 6, 7])
    Z = g.conv_fprop(P, W, padding=[1, 1, 1], stride=[1, 1, 1], dilation=[1, 1, 1])
    Z.set_output(True)
    g.validate()
    assert Y.get_stride() == ndhwc(2, 16, 5, 6, 7)
    assert Z.get_stride() == [16 * 210, 210, 42, 7, 1]


def test_pointwise_follows_the_full_size_operand_not_the_broadcast_one():
    g = _graph()
    A = g.tensor(dim=[2, 16, 6, 10], stride=nhwc(2, 16, 6, 10))
    B = g.tensor(dim=[1, 16, 1, 1])
    Y = g.add(B, A)  # the broadcast operand comes first: it must not decide the layout
    Y.set_output(True)
    g.validate()
    assert Y.get_stride() == nhwc(2, 16, 6, 10)


def test_norm_reduction_and_matmul_rules():
    g = _graph()
    X = g.tensor(dim=[2, 16, 6, 10], stride=nhwc(2, 16, 6, 10))
    mean = g.tensor(dim=[1, 16, 1, 1])
    inv = g.tensor(dim=[1, 16, 1, 1])
    s = g.tensor(dim=[1, 16, 1, 1])
    b = g.tensor(dim=[1, 16, 1, 1])
    Y = g.batchnorm_inference(X, mean, inv, s, b)
    R = g.reduction(X, cudnn.reduction_mode.ADD)
    R.set_dim([2, 16, 1, 1])
    A = g.tensor(dim=[3, 64, 48], stride=[64 * 48, 1, 64])  # column-major A
    Bm = g.tensor(dim=[3, 48, 80])
    C = g.matmul(A, Bm)
    for t in (Y, R, C):
        t.set_output(True)
    g.validate()
    assert Y.get_stride() == nhwc(2, 16, 6, 10)
    assert R.get_stride() == [16, 1, 16, 16]
    assert C.get_stride() == [64 * 80, 80, 1]  # matmul: row-major whatever A's layout


def _conv_reference(x, w, pad):
    n, c, h, wd = x.shape
    k, _, r, s = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    y = np.zeros((n, k, h + 2 * pad - r + 1, wd + 2 * pad - s + 1))
    for i in range(r):
        for j in range(s):
            patch = xp[:, :, i:i + y.shape[2], j:j + y.shape[3]]
            y += np.einsum("nchw,kc->nkhw", patch, w[:, :, i, j])
    return y


def test_reference_engine_writes_a_channels_last_conv_where_its_strides_say():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 8, 7, 9)).astype(np.float32)
    w = rng.standard_normal((16, 8, 3, 3)).astype(np.float32)
    x_cl = np.ascontiguousarray(x.transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2)  # NHWC memory, NCHW view
    g = _graph()
    X = g.tensor_like(x_cl)
    W = g.tensor_like(w)
    Y = g.conv_fprop(X, W, padding=[1, 1], stride=[1, 1], dilation=[1, 1])
    Y.set_output(True)
    g.build([cudnn.heur_mode.FALLBACK])
    y_mem = np.full(2 * 16 * 7 * 9, np.nan, np.float32)
    st = [s * 4 for s in Y.get_stride()]
    y = np.lib.stride_tricks.as_strided(y_mem, shape=Y.get_dim(), strides=st)
    ws = np.empty(max(1, g.get_workspace_size()), np.uint8)
    g.execute({X: x_cl, W: w, Y: y}, ws)
    np.testing.assert_allclose(y, _conv_reference(x.astype(np.float64), w.astype(np.float64), 1), rtol=1e-4, atol=1e-4)


def test_pointwise_of_a_view_keeps_the_view_strides():
    # A column slice of a [64, 4096, 128] buffer: its result can be written back into the same view.
    g = _graph()
    X = g.tensor(dim=[64, 4096, 16], stride=[4096 * 128, 128, 1])
    C = g.tensor(dim=[1, 4096, 16], stride=[4096 * 32, 32, 1])
    Y = g.mul(X, C)
    Y.set_output(True)
    B = g.tensor(dim=[4, 8], stride=[0, 1])  # a broadcast input: its strides would overlap
    Z = g.relu(B)
    Z.set_output(True)
    g.validate()
    assert Y.get_stride() == [4096 * 128, 128, 1]
    assert Z.get_stride() == [8, 1]
