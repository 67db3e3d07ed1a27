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
