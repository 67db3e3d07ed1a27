# SPDX-License-Identifier: Apache-2.0
"""SDPA backward on the GPU, bf16, the FlashAttention-3 paper's shapes (B*S = 16k tokens, H*D = 2048,
head dims 64/128/256, causal and not): opendnn's cuda engine against the backward of torch SDPA
with the cuDNN backend and with the flash backend, in one process on the same inputs (O and the
log-sum-exp come from torch's flash forward). Every result is checked against the flash backend's
gradients in the same run. Writes bench/results/sdpa_bwd.json (+ sdpa_bwd.png).

    PYTHONPATH=build-py-gpu/python:bench python bench/sdpa_bwd.py [--quick] [--v2]

`--v2` (or OPENDNN_SDPA_BWD_V2=1 in the environment) also times the wgmma backward (sdpa_bwd_v2,
d64/d128) in the same row: v2_ms, v2_speedup_vs_<peer>, v2_vs_v1, its own errors and
reproducibility. The first plan is always made with the variable set to 0 (it is read when a plan is
made), so opendnn_ms is the first kernel (v2 is the default for BHSD layouts). With --v2 the row also has v2tp_* for v2's earlier
two-pass schedule (OPENDNN_SDPA_BWD_V2_TWO_PASS=1: a separate dQ kernel instead of the fused dQ).
`--v3` adds v3_* for v3, the fused schedule with bulk dQ reductions (OPENDNN_SDPA_BWD_V3=1, unverified
until this runs; its result is kept out of the row's `correct`, in v3_ok).
`--v4` adds v4_* for v4, the fused schedule with a TMA producer warp and warpgroup turns
(OPENDNN_SDPA_BWD_V4=1), and v4nt_* for v4 with the turns off (OPENDNN_SDPA_BWD_V4_TURNS=0); with
--v3 too, also v4b_* (v4 with V3: dQ writer warps doing v3's bulk dQ adds off the consumers' path).
Unverified until this runs: kept out of `correct`,
in v4_ok / v4nt_ok / v4b_ok.

`run_bwd(case, row)` fills one row and is what bench/sdpa.py's `--mode bwd` can call.
Times are of the backward pass alone (torch: autograd.grad on a retained graph).
"""
import argparse
import contextlib
import os
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import sdpa_kernel

from common import (Bound, add_speedups, failure, first_run, new_graph, poisoned, rel_err, show, time_cuda,
                    write_results)
from sdpa import BF16, FP32, PEERS, Case, flops

BWD_FLOPS = 2.5  # backward matmul flops per forward flop (5 products of the forward's size vs 2)


def flash_forward(c):
    """O (BSHD storage like q) and the natural-log LSE [B,H,S,1] of torch's flash forward."""
    out = torch.ops.aten._scaled_dot_product_flash_attention(c.q, c.k, c.v, 0.0, c.causal, False, scale=c.scale)
    o, lse = out[0], out[1]
    return o, lse[..., : c.S].unsqueeze(-1).contiguous().float()


class OurBwd(Bound):
    """The backward graph planned on the cuda engine only, bound to torch tensors."""

    def __init__(self, c, o, lse, do):
        g = new_graph()
        t = {n: g.tensor(name=n, dim=list(x.shape), stride=list(x.stride()), data_type=BF16)
             for n, x in (("q", c.q), ("k", c.k), ("v", c.v), ("o", o), ("dO", do))}
        st = g.tensor(name="stats", dim=list(lse.shape), stride=list(lse.stride()), data_type=FP32)
        dq, dk, dv = g.sdpa_backward(t["q"], t["k"], t["v"], t["o"], t["dO"], st, attn_scale=c.scale,
                                     use_causal_mask=c.causal)
        for x in (dq, dk, dv):
            x.set_output(True)
        super().__init__(g, "cuda")
        # BSHD storage like the inputs: the gradients follow their inputs' stride order.
        self.grads = [poisoned(x) for x in (c.q, c.k, c.v)]
        self.pack = {t["q"]: c.q, t["k"]: c.k, t["v"]: c.v, t["o"]: o, t["dO"]: do, st: lse,
                     dq: self.grads[0], dk: self.grads[1], dv: self.grads[2]}


def peer_backward(c, backend, do):
    """(backward-only callable, its gradients) of torch SDPA on `backend`."""
    qr, kr, vr = (x.detach().clone().requires_grad_(True) for x in (c.q, c.k, c.v))
    with sdpa_kernel(backend):
        out = F.scaled_dot_product_attention(qr, kr, vr, is_causal=c.causal, scale=c.scale)
    fn = lambda: torch.autograd.grad(out, (qr, kr, vr), do, retain_graph=True)  # noqa: E731
    return fn, fn()


@contextlib.contextmanager
def bwd_v2_env(on, two_pass=False, v3=False, v4=False, v4_turns=True):
    """OPENDNN_SDPA_BWD_V2 set to 1 or 0 (and OPENDNN_SDPA_BWD_V2_TWO_PASS / _V3 / _V4 to 1 or unset), and
    OPENDNN_SDPA_BWD_V4_TURNS to 0 or unset, while a plan is made; the old values return."""
    want = {"OPENDNN_SDPA_BWD_V2": on, "OPENDNN_SDPA_BWD_V2_TWO_PASS": on and two_pass,
            "OPENDNN_SDPA_BWD_V3": on and v3, "OPENDNN_SDPA_BWD_V4": on and v4,
            "OPENDNN_SDPA_BWD_V4_TURNS": on and v4 and not v4_turns}
    old = {k: os.environ.pop(k, None) for k in want}
    for k, v in want.items():
        if v:
            os.environ[k] = "0" if k == "OPENDNN_SDPA_BWD_V4_TURNS" else "1"
    if not on:  # v2 is the default plan for BHSD layouts: the first kernel needs it withheld
        os.environ["OPENDNN_SDPA_BWD_V2"] = "0"
    try:
        yield
    finally:
        for k, v in old.items():
            os.environ.pop(k, None)
            if v is not None:
                os.environ[k] = v


def time_ours(c, row, do, ref, fl, reps, key):
    """Plans our backward (under the current environment), checks it against `ref` and times it:
    row keys <key>_ms, <key>_tflops, <key>_bitwise_reproducible, <prefix>dQ_rel_err ... Returns
    whether it ran correctly (False when it could not be planned)."""
    prefix = "" if key == "opendnn" else key + "_"
    sub = {}
    ours = first_run(sub, lambda: OurBwd(c, *flash_forward(c), do))
    for k, v in sub.items():
        row[prefix + k] = v
    if ours is None:
        return False
    first = [x.clone() for x in ours.grads]
    ok = ref is not None
    if ref is not None:
        for name, got, want in zip(("dQ", "dK", "dV"), ours.grads, ref):
            row[f"{prefix}{name}_rel_err"] = rel_err(got, want)
            ok = ok and row[f"{prefix}{name}_rel_err"] < 2e-2
    row[f"{key}_ms"] = time_cuda(ours, reps=reps)
    row[f"{key}_tflops"] = fl / (row[f"{key}_ms"] * 1e-3) / 1e12
    row[f"{prefix}bitwise_reproducible"] = all(torch.equal(a, b) for a, b in zip(first, ours.grads))
    return ok and row[f"{prefix}bitwise_reproducible"]


def run_bwd(c, row, v2=False, v3=False, v4=False):
    fl = BWD_FLOPS * flops(c.B, c.H, c.S, c.D, c.causal)
    reps = 10 if c.S >= 8192 else 30
    torch.manual_seed(1)
    do = torch.randn(c.B, c.S, c.H, c.D, device="cuda", dtype=torch.bfloat16).transpose(1, 2)
    ref = None
    for peer, backend in PEERS.items():
        try:
            fn, grads = peer_backward(c, backend, do)
            if peer == "flash":
                ref = grads
            row[f"{peer}_ms"] = time_cuda(fn, reps=reps)
            row[f"{peer}_tflops"] = fl / (row[f"{peer}_ms"] * 1e-3) / 1e12
        except Exception as e:  # a backend that cannot run this shape: recorded, never fatal
            row[f"{peer}_error"] = failure(e, 200)
    with bwd_v2_env(False):
        row["correct"] = time_ours(c, row, do, ref, fl, reps, "opendnn")
    add_speedups(row, PEERS)
    if v2 and c.D in (64, 128):  # the head dims sdpa_bwd_v2 has kernels for
        with bwd_v2_env(True):
            ok = time_ours(c, row, do, ref, fl, reps, "v2")
        row["correct"] = row["correct"] and ok and "sdpa_bwd_v2" in str(row.get("v2_plan", ""))
        if "v2_ms" in row:
            for p in PEERS:
                if f"{p}_ms" in row:
                    row[f"v2_speedup_vs_{p}"] = row[f"{p}_ms"] / row["v2_ms"]
            if "opendnn_ms" in row:
                row["v2_vs_v1"] = row["opendnn_ms"] / row["v2_ms"]
        with bwd_v2_env(True, two_pass=True):
            ok = time_ours(c, row, do, ref, fl, reps, "v2tp")
        row["correct"] = row["correct"] and ok and "sdpa_bwd_v2" in str(row.get("v2tp_plan", ""))
        if "v2_ms" in row and "v2tp_ms" in row:
            row["v2_vs_two_pass"] = row["v2tp_ms"] / row["v2_ms"]
        if v3:
            with bwd_v2_env(True, v3=True):
                row["v3_ok"] = time_ours(c, row, do, ref, fl, reps, "v3")
            if "v2_ms" in row and "v3_ms" in row:
                row["v3_vs_v2"] = row["v2_ms"] / row["v3_ms"]
                for p in PEERS:
                    if f"{p}_ms" in row:
                        row[f"v3_speedup_vs_{p}"] = row[f"{p}_ms"] / row["v3_ms"]
        if v4:
            variants = [("v4", {}), ("v4nt", {"v4_turns": False})] + ([("v4b", {"v3": True})] if v3 else [])
            for key, kw in variants:
                with bwd_v2_env(True, v4=True, **kw):
                    row[f"{key}_ok"] = time_ours(c, row, do, ref, fl, reps, key)
                if "v2_ms" in row and f"{key}_ms" in row:
                    row[f"{key}_vs_v2"] = row["v2_ms"] / row[f"{key}_ms"]
                    for p in PEERS:
                        if f"{p}_ms" in row:
                            row[f"{key}_speedup_vs_{p}"] = row[f"{p}_ms"] / row[f"{key}_ms"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="d64/128/256 at S=2048, causal and not")
    ap.add_argument("--v2", action="store_true", help="also time the wgmma backward (OPENDNN_SDPA_BWD_V2=1)")
    ap.add_argument("--v3", action="store_true",
                    help="with --v2: also v3, the fused schedule with bulk dQ reductions (OPENDNN_SDPA_BWD_V3=1)")
    ap.add_argument("--v4", action="store_true",
                    help="with --v2: also v4 (TMA producer warp, OPENDNN_SDPA_BWD_V4=1), with and without turns")
    args = ap.parse_args()
    v2 = args.v2 or args.v3 or args.v4 or os.environ.get("OPENDNN_SDPA_BWD_V2") == "1"
    seqs = (2048,) if args.quick else (512, 1024, 2048, 4096, 8192, 16384)
    rows = []
    for D in (64, 128, 256):
        for causal in (False, True):
            for S in seqs:
                c = Case(S, D, causal)
                row = {"case": f"bwd_{c.name()}", "pass": "bwd", "batch": c.B, "heads": c.H, "seq": S, "head_dim": D,
                       "causal": causal, "dtype": "bf16"}
                run_bwd(c, row, v2, args.v3, args.v4)
                rows.append(row)
                show(row)
                write_results("sdpa_bwd", rows)  # after every case: a fault later keeps what was measured
                del c
                torch.cuda.empty_cache()
    return 0 if all(r.get("correct", False) for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
