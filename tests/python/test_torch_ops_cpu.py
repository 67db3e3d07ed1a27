# SPDX-License-Identifier: Apache-2.0
"""opendnn.ops on the CPU (needs torch; skipped without it): fake kernels, error messages, and small
numerics on the reference engine (SDPA bf16, GDN fp32) against float64 torch references."""

import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

import opendnn  # noqa: E402
import opendnn.ops  # noqa: E402

NotSupported = opendnn.cudnnGraphNotSupportedError


# ---- float64 references ------------------------------------------------------------------------

from torch_refs import check_gdn_forward_backward, gdn_inputs, sdpa_reference  # noqa: E402


# ---- import hygiene ------------------------------------------------------------------------------

def test_import_opendnn_does_not_import_ops():
    code = "import sys, opendnn; assert 'opendnn.ops' not in sys.modules and 'torch' not in sys.modules"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


# ---- fake kernels --------------------------------------------------------------------------------

def test_sdpa_fake_shapes_and_strides():
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        q = torch.empty(2, 128, 8, 64, dtype=torch.bfloat16).transpose(1, 2)  # BSHD memory, BHSD view
        k = torch.empty(2, 2, 96, 64, dtype=torch.bfloat16)
        v = torch.empty(2, 2, 96, 32, dtype=torch.bfloat16)
        o = opendnn.ops.sdpa(q, k, v, is_causal=True)
        assert o.shape == (2, 8, 128, 32) and o.dtype == torch.bfloat16
        assert o.stride() == (128 * 8 * 32, 32, 8 * 32, 1)  # q's stride order, packed
        o2, stats = torch.ops.opendnn.sdpa_fwd(q, k, v, 0.125, "TOP_LEFT", None, 0)
        assert stats.shape == (2, 8, 128, 1) and stats.dtype == torch.float32
        dq, dk, dv = torch.ops.opendnn.sdpa_bwd(o2, q, k, v, o2, stats, 0.125, "TOP_LEFT", None, 0)
        assert dq.shape == q.shape and dq.stride() == q.stride()
        assert dk.shape == k.shape and dk.stride() == k.stride()
        assert dv.shape == v.shape and dv.stride() == v.stride()


def test_gdn_fake_shapes():
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        q, k = torch.empty(1, 64, 2, 32), torch.empty(1, 64, 2, 32)
        v, g, beta = torch.empty(1, 64, 4, 16), torch.empty(1, 64, 4), torch.empty(1, 64, 4)
        cu = torch.empty(3, dtype=torch.int64)
        h0 = torch.empty(2, 4, 32, 16)
        o, fs = opendnn.ops.gated_delta_net(q, k, v, g, beta, cu_seqlens=cu, initial_state=h0,
                                            output_final_state=True)
        assert o.shape == (1, 64, 4, 16) and o.dtype == torch.float32
        assert fs.shape == (2, 4, 32, 16) and fs.dtype == torch.float32
        o, fs = opendnn.ops.gated_delta_net(q.to(torch.bfloat16), k.to(torch.bfloat16), v.to(torch.bfloat16), g,
                                            beta)
        assert o.dtype == torch.bfloat16 and fs is None
        grads = torch.ops.opendnn.gdn_bwd(o.reshape(64, 4, 16), q.reshape(64, 2, 32), k.reshape(64, 2, 32),
                                          v.reshape(64, 4, 16), g.reshape(64, 4), beta.reshape(64, 4), cu, h0,
                                          torch.empty(2, 4, 32, 16), 0.2, False)
        assert [tuple(x.shape) for x in grads] == [(64, 2, 32), (64, 2, 32), (64, 4, 16), (64, 4), (64, 4),
                                                   (2, 4, 32, 16)]


# ---- errors --------------------------------------------------------------------------------------

def _bf16(*shape):
    return torch.randn(*shape).to(torch.bfloat16)


@pytest.mark.parametrize("make, match", [
    (lambda: opendnn.ops.sdpa(torch.randn(1, 2, 8, 16), torch.randn(1, 2, 8, 16), torch.randn(1, 2, 8, 16)),
     "float16 or torch.bfloat16"),
    (lambda: opendnn.ops.sdpa(_bf16(2, 8, 16), _bf16(2, 8, 16), _bf16(2, 8, 16)), "4-D"),
    (lambda: opendnn.ops.sdpa(_bf16(1, 3, 8, 16), _bf16(1, 2, 8, 16), _bf16(1, 2, 8, 16)), "multiple of k heads"),
    (lambda: opendnn.ops.sdpa(_bf16(1, 2, 8, 16), _bf16(1, 2, 8, 16), _bf16(1, 2, 8, 16),
                              diagonal_alignment="MIDDLE"), "diagonal_alignment"),
    (lambda: opendnn.ops.sdpa(_bf16(1, 1, 4, 260), _bf16(1, 1, 4, 260), _bf16(1, 1, 4, 260)), "not a multiple of 8"),
    (lambda: opendnn.ops.gated_delta_net(torch.randn(2, 4, 2, 8), torch.randn(2, 4, 2, 8), torch.randn(2, 4, 2, 8),
                                         torch.randn(2, 4, 2), torch.rand(2, 4, 2),
                                         cu_seqlens=torch.tensor([0, 4, 8])), "batch size must be 1"),
    (lambda: opendnn.ops.gated_delta_net(torch.randn(1, 4, 4, 8), torch.randn(1, 4, 4, 8), torch.randn(1, 4, 2, 8),
                                         torch.randn(1, 4, 2), torch.rand(1, 4, 2)), "multiple of q/k heads"),
    (lambda: opendnn.ops.gated_delta_net(torch.randn(1, 4, 2, 8), torch.randn(1, 4, 2, 8), torch.randn(1, 4, 2, 8),
                                         torch.randn(1, 4, 2), torch.rand(1, 4, 2),
                                         initial_state=torch.zeros(1, 2, 8, 4)), "initial_state"),
])
def test_errors_name_the_reason(make, match):
    with pytest.raises(NotSupported, match=match):
        make()


# ---- numerics on the reference engine --------------------------------------------------------------

@pytest.mark.parametrize("causal", [False, True])
def test_sdpa_cpu_forward_backward(causal):
    torch.manual_seed(0)
    b, hq, hk, s, d = 1, 4, 2, 24, 16
    q = _bf16(b, s, hq, d).transpose(1, 2).requires_grad_()
    k, v = _bf16(b, hk, s, d).requires_grad_(), _bf16(b, hk, s, d).requires_grad_()
    o = opendnn.ops.sdpa(q, k, v, is_causal=causal)
    ref = sdpa_reference(q.detach(), k.detach(), v.detach(), causal=causal)
    torch.testing.assert_close(o.double(), ref, atol=2e-2, rtol=2e-2)
    do = torch.randn_like(o)
    o.backward(do)
    qr, kr, vr = (x.detach().double().requires_grad_() for x in (q, k, v))
    sdpa_reference(qr, kr, vr, causal=causal).backward(do.double())
    for got, want in ((q.grad, qr.grad), (k.grad, kr.grad), (v.grad, vr.grad)):
        torch.testing.assert_close(got.double(), want, atol=5e-2, rtol=5e-2)


def _gdn_inputs(b=1, t=20, h=2, hv=4, dk=8, dv=8):
    return gdn_inputs(b, t, h, hv, dk, dv)


@pytest.mark.parametrize("varlen", [False, True])
def test_gdn_cpu_forward_backward(varlen):
    cu = torch.tensor([0, 7, 20], dtype=torch.int32) if varlen else None
    check_gdn_forward_backward(opendnn.ops.gated_delta_net, _gdn_inputs(b=1 if varlen else 2), torch.randn(2, 4, 8, 8),
                               cu, fwd_tol=1e-4, grad_atol=1e-3, grad_rtol=1e-3)


def test_graph_cache_reuses_plans():
    opendnn.ops.clear_cache()
    q, k, v, g, beta = _gdn_inputs()
    for _ in range(3):
        opendnn.ops.gated_delta_net(q, k, v, g, beta)
    assert len(opendnn.ops._CACHE) == 1
    opendnn.ops.gated_delta_net(q, k, v, g, beta, scale=0.5)  # another option: another graph
    assert len(opendnn.ops._CACHE) == 2


def test_compile_fullgraph_cpu():
    torch._dynamo.reset()
    q = _bf16(1, 2, 16, 16).requires_grad_()
    k, v = _bf16(1, 2, 16, 16), _bf16(1, 2, 16, 16)

    def f(q, k, v):
        return opendnn.ops.sdpa(q, k, v, is_causal=True).float().square().sum()

    loss = torch.compile(f, fullgraph=True, backend="aot_eager")(q, k, v)
    loss.backward()
    want = q.grad.clone()
    q.grad = None
    f(q, k, v).backward()
    torch.testing.assert_close(q.grad, want)

    qg, kg, vg, gg, bg = _gdn_inputs()
    qg.requires_grad_()

    def fg(q, k, v, g, beta):
        o, s = opendnn.ops.gated_delta_net(q, k, v, g, beta, output_final_state=True)
        return o.sum() + s.sum()

    torch.compile(fg, fullgraph=True, backend="aot_eager")(qg, kg, vg, gg, bg).backward()
    assert qg.grad is not None and torch.isfinite(qg.grad).all()


def test_opcheck_cpu():
    q = _bf16(1, 2, 8, 16).requires_grad_()
    k, v = _bf16(1, 2, 8, 16).requires_grad_(), _bf16(1, 2, 8, 16).requires_grad_()
    torch.library.opcheck(torch.ops.opendnn.sdpa_fwd.default, (q, k, v, 0.25, "TOP_LEFT", None, 0))
    q, k, v, g, beta = (x.reshape(-1, *x.shape[2:]).requires_grad_() for x in _gdn_inputs(t=8))
    cu = torch.tensor([0, 3, 8], dtype=torch.int32)
    h0 = torch.randn(2, 4, 8, 8, requires_grad=True)
    torch.library.opcheck(torch.ops.opendnn.gdn_fwd.default, (q, k, v, g, beta, cu, h0, 0.3, False, True))


# ---- cuDNN Frontend's torch-level entry points: cudnn.ops, cudnn.experimental.ops, datatypes ----------

def test_ops_and_experimental_load_on_attribute_access():
    code = ("import sys, opendnn; assert 'torch' not in sys.modules; "
            "f = opendnn.ops.causal_conv1d; e = opendnn.experimental.ops.scaled_dot_product_attention; "
            "assert 'torch' in sys.modules and 'opendnn.experimental.ops' in sys.modules")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def _conv1d_reference(x, w, b, act):
    k = w.shape[1]
    y = torch.nn.functional.conv1d(x, w.unsqueeze(1), b, padding=k - 1, groups=x.shape[1])[..., :x.shape[2]]
    return torch.nn.functional.silu(y) if act == "silu" else y


@pytest.mark.parametrize("act,with_bias", [("identity", True), ("silu", False), ("silu", True)])
def test_causal_conv1d_forward_backward(act, with_bias):
    torch.manual_seed(1)
    x = torch.randn(2, 6, 11, dtype=torch.float32, requires_grad=True)
    w = torch.randn(6, 4, dtype=torch.float32, requires_grad=True)
    b = torch.randn(6, dtype=torch.float32, requires_grad=True) if with_bias else None
    y = opendnn.ops.causal_conv1d(x, w, b, activation=act)
    xr, wr = x.detach().double().requires_grad_(), w.detach().double().requires_grad_()
    br = b.detach().double().requires_grad_() if with_bias else None
    ref = _conv1d_reference(xr, wr, br, act)
    torch.testing.assert_close(y.double(), ref, atol=1e-5, rtol=1e-5)
    dy = torch.randn_like(y)
    y.backward(dy)
    ref.backward(dy.double())
    torch.testing.assert_close(x.grad.double(), xr.grad, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(w.grad.double(), wr.grad, atol=1e-4, rtol=1e-4)
    if with_bias:
        torch.testing.assert_close(b.grad.double(), br.grad, atol=1e-4, rtol=1e-4)


def test_causal_conv1d_errors():
    x, w = torch.randn(1, 4, 8), torch.randn(4, 3)
    with pytest.raises(NotSupported, match="activation"):
        opendnn.ops.causal_conv1d(x, w, activation="relu")
    with pytest.raises(NotSupported, match="channels"):
        opendnn.ops.causal_conv1d(x, torch.randn(5, 3))


def test_experimental_sdpa_matches_ops_sdpa():
    import opendnn.experimental.ops as xops

    torch.manual_seed(2)
    q, k, v = _bf16(1, 2, 16, 16), _bf16(1, 2, 16, 16), _bf16(1, 2, 16, 16)
    o = xops.scaled_dot_product_attention(q, k, v, is_causal=True, scale=0.3)
    torch.testing.assert_close(o.double(), sdpa_reference(q, k, v, scale=0.3, causal=True), atol=2e-2, rtol=2e-2)
    banded = xops.scaled_dot_product_attention(q, k, v, diagonal_alignment=1, left_bound=-1, right_bound=0)
    torch.testing.assert_close(banded, opendnn.ops.sdpa(q, k, v, diagonal_alignment="BOTTOM_RIGHT", right_bound=0))
    with pytest.raises(NotSupported, match="attn_mask"):
        xops.scaled_dot_product_attention(q, k, v, attn_mask=torch.ones(16, 16, dtype=torch.bool))
    with pytest.raises(NotSupported, match="dropout_p"):
        xops.scaled_dot_product_attention(q, k, v, dropout_p=0.1)
    with pytest.raises(ValueError, match="enable_gqa"):
        xops.scaled_dot_product_attention(q, k[:, :1], v[:, :1])
    xops.scaled_dot_product_attention(q, k[:, :1], v[:, :1], enable_gqa=True)
    assert xops._fprop_cache is opendnn.ops._CACHE


def test_experimental_moe_grouped_matmul():
    import opendnn.experimental.ops as xops

    torch.manual_seed(3)
    token, weight = torch.randn(7, 5), torch.randn(3, 5, 4)
    off = torch.tensor([0, 2, 5], dtype=torch.int32)
    out = xops.moe_grouped_matmul(token, weight, off)
    bounds = [0, 2, 5, 7]
    ref = torch.cat([token[bounds[e]:bounds[e + 1]] @ weight[e] for e in range(3)])
    torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)
    idx = torch.tensor([0, 1, 2, 0, 1, 2], dtype=torch.int32)  # gather: 3 tokens, top_k 2
    out = xops.moe_grouped_matmul(token[:3], weight, torch.tensor([0, 2, 4], dtype=torch.int32), token_index=idx,
                                  mode="gather", top_k=2)
    ref = torch.cat([token[:3][idx[r0:r1].long()] @ weight[e] for e, (r0, r1) in enumerate([(0, 2), (2, 4), (4, 6)])])
    torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)
    with pytest.raises(ValueError, match="mode"):
        xops.moe_grouped_matmul(token, weight, off, mode="bogus")


def test_datatypes_with_torch():
    from opendnn import datatypes

    assert datatypes._torch_to_cudnn_data_type(torch.float16) == opendnn.data_type.HALF
    assert datatypes._torch_to_cudnn_data_type(torch.complex64) is None
    assert datatypes._cudnn_to_torch_data_type(opendnn.data_type.BFLOAT16) is torch.bfloat16
    assert datatypes._library_type(torch.float32) == opendnn.data_type.FLOAT
    assert datatypes._is_torch_tensor(torch.zeros(1)) and not datatypes._is_torch_tensor([0])
