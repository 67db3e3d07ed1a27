# SPDX-License-Identifier: Apache-2.0
"""SDPA backward on the GPU, bf16, the FlashAttention-3 paper's shapes (B*S = 16k tokens, H*D = 2048,
head dims 64/128/256, causal and not): opendnn's cuda engine against the backward of torch SDPA
with the cuDNN backend and with the flash backend, in one process on the same inputs (O and the
log-sum-exp come from torch's flash forward). Every result is checked against the flash backend's
gradients in the same run. Writes bench/results/sdpa_bwd.json (+ sdpa_bwd.png).

    PYTHONPATH=build-py-gpu/python:bench python bench/sdpa_bwd.py [--quick] [--variants]

opendnn_* is the plan our library picks with no OPENDNN_SDPA_BWD_* variable set (d64/d128: the wgmma
kernel with the TMA producer warp, turns and dQ writer warps, i.e. v4 + v3; d256: the d256 wgmma kernel, sdpa_bwd_v2_d256).
`--variants` (alias --v2/--v3/--v4) also times, in the same row, each earlier schedule with the
variables that select it (read when a plan is made): v1_* the mma.sync kernel (V2=0), v2_* the plain
fused wgmma kernel (V3=0 V4=0), v2tp_* its two-pass schedule (V2_TWO_PASS=1), v3_* bulk dQ adds in the
consumers (V4=0), v4_* producer warp without writers (V3=0), v4nt_* the same without turns; at d256
d256v2* the d256 wgmma kernel's turn options and d256v4_* its v4 (D256_V4=1: producer warp, dQ writers); each with
its errors, reproducibility (<key>_ok) and <key>_vs_default = opendnn_ms / <key>_ms.

cudnn_engine_* / router_*: our cudnn engine's plan and the router's pick among every engine, on the same
inputs (router_vs_best = the faster of our two engines / the pick).

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

from common import (Bound, add_append_argument, add_speedups, failure, first_run, new_graph, poisoned,
                    rel_err, show, time_cuda, time_router, write_results)
from sdpa import BF16, FP32, PEERS, Case, flops

BWD_FLOPS = 2.5  # backward matmul flops per forward flop (5 products of the forward's size vs 2)


def flash_forward(c):
    """O (BSHD storage like q) and the natural-log LSE [B,H,S,1] of torch's flash forward."""
    out = torch.ops.aten._scaled_dot_product_flash_attention(c.q, c.k, c.v, 0.0, c.causal, False, scale=c.scale)
    o, lse = out[0], out[1]
    return o, lse[..., : c.S].unsqueeze(-1).contiguous().float()


class OurBwd(Bound):
    """The backward graph planned on one engine (cuda by default; None: the router's pick among all
    engines), bound to torch tensors."""

    def __init__(self, c, o, lse, do, engine="cuda"):
        g = new_graph()
        t = {n: g.tensor(name=n, dim=list(x.shape), stride=list(x.stride()), data_type=BF16)
             for n, x in (("q", c.q), ("k", c.k), ("v", c.v), ("o", o), ("dO", do))}
        st = g.tensor(name="stats", dim=list(lse.shape), stride=list(lse.stride()), data_type=FP32)
        dq, dk, dv = g.sdpa_backward(t["q"], t["k"], t["v"], t["o"], t["dO"], st, attn_scale=c.scale,
                                     use_causal_mask=c.causal)
        for x in (dq, dk, dv):
            x.set_output(True)
        super().__init__(g, engine)
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


VARS = ("OPENDNN_SDPA_BWD_V2", "OPENDNN_SDPA_BWD_V2_TWO_PASS", "OPENDNN_SDPA_BWD_V3", "OPENDNN_SDPA_BWD_V4",
        "OPENDNN_SDPA_BWD_V4_TURNS", "OPENDNN_SDPA_BWD_D256_V2", "OPENDNN_SDPA_BWD_D256_V2_EARLY_TURNS",
        "OPENDNN_SDPA_BWD_D256_V4")
# key -> the variables (suffix after OPENDNN_SDPA_BWD_) that select that schedule; the rest are unset.
VARIANTS = {
    "v1": {"V2": "0"},
    "v2": {"V3": "0", "V4": "0"},
    "v2tp": {"V2_TWO_PASS": "1", "V3": "0", "V4": "0"},
    "v3": {"V4": "0"},
    "v4": {"V3": "0"},
    "v4nt": {"V3": "0", "V4_TURNS": "0"},
    "d256v2": {"D256_V4": "0"},  # the d256 wgmma backward's v2 schedule (d256 rows only)
    "d256v2et": {"D256_V4": "0", "D256_V2_EARLY_TURNS": "1"},  # ... with early turns (its default under a causal mask)
    "d256v2nt": {"D256_V4": "0", "D256_V2_EARLY_TURNS": "0"},  # ... without early turns (its default without one)
    "d256v4": {"D256_V4": "1"},  # ... its v4: TMA producer warp, dQ writer warps (the default)
}
# Head dims each variant exists for (absent: every head dim).
VARIANT_DIMS = {"d256v2": (256,), "d256v2et": (256,), "d256v2nt": (256,), "d256v4": (256,), **{k: (64, 128) for k in ("v2", "v2tp", "v3", "v4", "v4nt")}}


@contextlib.contextmanager
def bwd_env(settings):
    """Exactly `settings` ({"V2": "0", ...}) among the OPENDNN_SDPA_BWD_* variables while a plan is made;
    the old values return."""
    old = {k: os.environ.pop(k, None) for k in VARS}
    for k, v in settings.items():
        os.environ["OPENDNN_SDPA_BWD_" + k] = v
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
    (whether it ran correctly (False when it could not be planned), the bound plan or None)."""
    prefix = "" if key == "opendnn" else key + "_"
    sub = {}
    ours = first_run(sub, lambda: OurBwd(c, *flash_forward(c), do))
    for k, v in sub.items():
        row[prefix + k] = v
    if ours is None:
        return False, None
    first = [x.clone() for x in ours.grads]
    ok = ref is not None
    if ref is not None:
        for name, got, want in zip(("dQ", "dK", "dV"), ours.grads, ref):
            row[f"{prefix}{name}_rel_err"] = rel_err(got, want)
            ok = ok and row[f"{prefix}{name}_rel_err"] < 2e-2
    row[f"{key}_ms"] = time_cuda(ours, reps=reps)
    row[f"{key}_tflops"] = fl / (row[f"{key}_ms"] * 1e-3) / 1e12
    row[f"{prefix}bitwise_reproducible"] = all(torch.equal(a, b) for a, b in zip(first, ours.grads))
    return ok and row[f"{prefix}bitwise_reproducible"], ours


def run_bwd(c, row, variants=False):
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
    with bwd_env({}):
        row["correct"], ours = time_ours(c, row, do, ref, fl, reps, "opendnn")
    add_speedups(row, PEERS)
    o, lse = flash_forward(c)
    # cudnn_engine_* / router_*, timed in the same alternating rounds as ours (router_vs_best compares the
    # three from those rounds; the same plan timed in two separate blocks differed by up to 9%)
    rot = {"router_round_opendnn_ms": ours} if ours is not None else None
    time_router(row, lambda e: OurBwd(c, o, lse, do, e), reps, rotate_with=rot)
    if not variants:
        return
    for key, settings in VARIANTS.items():
        if variants is not True and key not in variants:  # --only-variants
            continue
        if c.D not in VARIANT_DIMS.get(key, (c.D,)):  # the head dims the wgmma kernels exist for
            continue
        with bwd_env(settings):
            row[f"{key}_ok"] = time_ours(c, row, do, ref, fl, reps, key)[0]
        if f"{key}_ms" in row and "opendnn_ms" in row:
            row[f"{key}_vs_default"] = row["opendnn_ms"] / row[f"{key}_ms"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="d64/128/256 at S=2048, causal and not")
    ap.add_argument("--variants", "--v2", "--v3", "--v4", action="store_true", dest="variants",
                    help="also time the earlier schedules (v1, v2, v2tp, v3, v4, v4nt; d256v2, d256v4 at d256) in each row")
    ap.add_argument("--only-variants", default="",
                    help="comma- or slash-separated subset of the --variants keys to time (e.g. v4nt/d256v2), implies --variants")
    ap.add_argument("--head-dims", default="64,128,256",
                    help="comma- or slash-separated head dims, in the order they run (e.g. 256/128/64)")
    add_append_argument(ap)
    args = ap.parse_args()
    if args.only_variants:
        args.variants = {k for k in args.only_variants.replace("/", ",").split(",") if k}
        unknown = args.variants - set(VARIANTS)
        if unknown:
            ap.error(f"unknown variants: {sorted(unknown)}")
    seqs = (2048,) if args.quick else (512, 1024, 2048, 4096, 8192, 16384)
    dims = [int(d) for d in args.head_dims.replace("/", ",").split(",")]
    out = "sdpa_bwd_quick" if args.quick else "sdpa_bwd"  # a quick run never replaces the full file
    rows = []
    for D in dims:
        for causal in (False, True):
            for S in seqs:
                c = Case(S, D, causal)
                row = {"case": f"bwd_{c.name()}", "pass": "bwd", "batch": c.B, "heads": c.H, "seq": S, "head_dim": D,
                       "causal": causal, "dtype": "bf16"}
                run_bwd(c, row, args.variants)
                rows.append(row)
                show(row)
                write_results(out, rows, append=args.append)  # after every case: a fault later keeps what was measured
                del c
                torch.cuda.empty_cache()
    return 0 if all(r.get("correct", False) for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
