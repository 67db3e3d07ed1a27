# SPDX-License-Identifier: Apache-2.0
"""float64 torch references for the opendnn.ops tests (tests/python/test_torch_ops_cpu.py and
tests/gpu/test_torch_ops.py). Imports torch: import it only after pytest.importorskip("torch")."""

import torch


def sdpa_reference(q, k, v, scale=None, causal=False):
    q, k, v = q.double(), k.double(), v.double()
    hq = q.shape[1]
    k = k.repeat_interleave(hq // k.shape[1], dim=1)
    v = v.repeat_interleave(hq // v.shape[1], dim=1)
    s = (q @ k.transpose(-1, -2)) * (q.shape[-1] ** -0.5 if scale is None else scale)
    if causal:
        sq, skv = s.shape[-2:]
        s = s.masked_fill(~torch.ones(sq, skv, dtype=torch.bool, device=s.device).tril(), float("-inf"))
    return torch.softmax(s, dim=-1) @ v


def gdn_reference(q, k, v, g, beta, cu_seqlens=None, initial_state=None, scale=None, use_qk_l2norm=False):
    """Token-by-token gated delta rule (fla semantics; states [N, HV, K, V]) in float64."""
    q, k, v, g, beta = (x.double() for x in (q, k, v, g, beta))
    b, t, h, dk = q.shape
    hv, dv = v.shape[2], v.shape[3]
    scale = dk ** -0.5 if scale is None else scale
    if use_qk_l2norm:
        q = q * torch.rsqrt((q * q).sum(-1, keepdim=True) + 1e-6)
        k = k * torch.rsqrt((k * k).sum(-1, keepdim=True) + 1e-6)
    q, k = q.repeat_interleave(hv // h, dim=2), k.repeat_interleave(hv // h, dim=2)
    if cu_seqlens is None:
        seqs = [(i, 0, t) for i in range(b)]
    else:
        cu = cu_seqlens.tolist()
        seqs = [(0, cu[n], cu[n + 1]) for n in range(len(cu) - 1)]
    out, finals = {}, []
    for n, (bi, start, end) in enumerate(seqs):
        s = initial_state[n].double() if initial_state is not None else q.new_zeros(hv, dk, dv)
        for j in range(start, end):
            s = torch.exp(g[bi, j])[:, None, None] * s
            err = v[bi, j] - torch.einsum("hkv,hk->hv", s, k[bi, j])
            s = s + beta[bi, j][:, None, None] * k[bi, j][:, :, None] * err[:, None, :]
            out[bi, j] = torch.einsum("hkv,hk->hv", s, q[bi, j]) * scale
        finals.append(s)
    o = torch.stack([torch.stack([out[bi, j] for j in range(t)]) for bi in range(b)])
    return o, torch.stack(finals)


def gdn_inputs(b, t, h, hv, dk, dv, device="cpu", dtype=torch.float32, seed=0):
    """q, k [b, t, h, dk], v [b, t, hv, dv], log-space gates g and beta [b, t, hv]."""
    gen = torch.Generator(device=device).manual_seed(seed)
    q = torch.randn(b, t, h, dk, device=device, generator=gen).to(dtype)
    k = torch.randn(b, t, h, dk, device=device, generator=gen).to(dtype)
    v = torch.randn(b, t, hv, dv, device=device, generator=gen).to(dtype)
    g = torch.nn.functional.logsigmoid(torch.randn(b, t, hv, device=device, generator=gen))
    beta = torch.rand(b, t, hv, device=device, generator=gen)
    return q, k, v, g, beta


def gdn_run(fn, inputs, initial_state, cu_seqlens, do, dfs):
    """(o, final state, [dq, dk, dv, dg, dbeta, dh0]) of fn(q, k, v, g, beta, h0, cu_seqlens) -> (o, final state)
    on fresh leaves, under upstream gradients do and dfs."""
    leaves = [x.detach().clone().requires_grad_() for x in (*inputs, initial_state)]
    o, fs = fn(*leaves, cu_seqlens)
    torch.autograd.backward([o, fs], [do, dfs])
    return o.detach(), fs.detach(), [x.grad for x in leaves]


def check_gdn_forward_backward(gdn, inputs, initial_state, cu_seqlens, fwd_tol, grad_atol, grad_rtol):
    """Runs gdn (opendnn.ops.gated_delta_net or a wrapper) with l2-normalised q/k, an initial state and the
    final state out, then backward; output, final state and the six gradients must match gdn_reference in
    float64 under the same upstream gradients."""
    ins = [x.clone().requires_grad_() for x in (*inputs, initial_state)]
    o, fs = gdn(*ins[:5], cu_seqlens=cu_seqlens, initial_state=ins[5], output_final_state=True, use_qk_l2norm=True)
    refs = [x.detach().double().requires_grad_() for x in (*inputs, initial_state)]
    ro, rfs = gdn_reference(*refs[:5], cu_seqlens=cu_seqlens, initial_state=refs[5], use_qk_l2norm=True)
    torch.testing.assert_close(o.double(), ro, atol=fwd_tol, rtol=fwd_tol)
    torch.testing.assert_close(fs.double(), rfs, atol=fwd_tol, rtol=fwd_tol)
    do, dfs = torch.randn_like(o), torch.randn_like(fs)
    torch.autograd.backward([o, fs], [do, dfs])
    torch.autograd.backward([ro, rfs], [do.double(), dfs.double()])
    for name, got, want in zip(["q", "k", "v", "g", "beta", "h0"], ins, refs):
        torch.testing.assert_close(got.grad.double(), want.grad, atol=grad_atol, rtol=grad_rtol,
                                   msg=lambda m, name=name: f"d{name}: {m}")
