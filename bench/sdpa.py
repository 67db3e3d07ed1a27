# SPDX-License-Identifier: Apache-2.0
"""Scaled dot-product attention on the GPU, bf16, the FlashAttention-3 paper's shapes (B*S = 16k
tokens, H*D = 2048, S 512..16k, head dims 64/128/256, causal and not): opendnn's cuda engine
against torch SDPA with the cuDNN backend and with the flash backend, all in one process on the
same inputs, every result checked. Writes bench/results/sdpa.json (+ sdpa.png).

    python bench/sdpa.py [--quick] [--mode fwd|bwd|all] [--v2] [--persistent]

Modes: `fwd` times the forward pass (O and Stats); `bwd` the backward pass, exactly as bench/sdpa_bwd.py
(which also writes sdpa_bwd.json on its own); `all` both, into one sdpa.json.
Q/K/V are [B,H,S,D] views of BSHD storage, the layout models use.
Our plan is the cuda engine's first choice: the v2 forward (TMA producer warp, pingpong consumer
warpgroups) where it applies (head dims 64/128/256, no mask other than causal), else the first kernel.
`--v2` pins v2 (OPENDNN_SDPA_FWD_V2=1 while our plan is made), also times the first kernel on the same
inputs (OPENDNN_SDPA_FWD_V2=0: opendnn_v1_ms / v2_speedup_vs_v1) and writes bench/results/sdpa_v2.json.
At d64/d128 the default is v2's persistent schedule with two Q buffers. `--persistent` also plans with
OPENDNN_SDPA_FWD_PERSISTENT=0 (v2's grid schedule, key `grid`) and =1 (one Q buffer, key `persistent`) and
times each plan on the same inputs beside the default one: plan_<key>, <key>_ms, <key>_speedup
(opendnn_pair_<key>_ms / <key>_ms, the two timed in alternating rounds: below 1 where the default is
faster) and <key>_speedup_vs_<peer>; their results are checked like ours.
Writes bench/results/sdpa_persistent.json; with --quick, the short sequences it is for (d64/d128,
S 512-2048, causal and not) plus d128 S 4096.
"""
import argparse
import math
import os
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import opendnn
from common import (Bound, add_append_argument, add_speedups, failure, first_run, new_graph, poisoned,
                    rel_err, show, time_cuda, time_pair, time_router, write_results)

BF16 = opendnn.data_type.BFLOAT16
FP32 = opendnn.data_type.FLOAT
TOKENS, HIDDEN = 16384, 2048
PEERS = {"cudnn": SDPBackend.CUDNN_ATTENTION, "flash": SDPBackend.FLASH_ATTENTION}


def bshd(B, H, S, D):
    return torch.randn(B, S, H, D, device="cuda", dtype=torch.bfloat16).transpose(1, 2)


def flops(B, H, S, D, causal):
    """Forward matmul flops (QK^T and PV), halved under a causal mask."""
    f = 4.0 * B * H * S * S * D
    return f / 2 if causal else f


class Case:
    def __init__(self, S, D, causal):
        self.B, self.H, self.S, self.D, self.causal = TOKENS // S, HIDDEN // D, S, D, causal
        self.scale = 1.0 / math.sqrt(D)
        torch.manual_seed(0)
        self.q, self.k, self.v = (bshd(self.B, self.H, S, D) for _ in range(3))

    def name(self):
        return f"S{self.S}_d{self.D}{'_causal' if self.causal else ''}"

    def reference(self, rows=256, heads=2):
        """fp32 O and LSE for the first `rows` queries of batch 0, heads 0..heads-1 (a slice keeps
        the S x S score matrix small at 16k)."""
        q = self.q[0, :heads, :rows].float()
        s = torch.einsum("hid,hjd->hij", q, self.k[0, :heads].float()) * self.scale
        if self.causal:
            j = torch.arange(self.S, device="cuda")
            s = s.masked_fill(j[None, None, :] > torch.arange(rows, device="cuda")[None, :, None], float("-inf"))
        lse = torch.logsumexp(s, dim=-1)
        o = torch.softmax(s, dim=-1) @ self.v[0, :heads].float()
        return o, lse

    def rel(self, o, rows=256, heads=2):
        ref_o, _ = self.reference(rows, heads)
        return rel_err(o[0, :heads, :rows], ref_o)

    def peer(self, backend):
        def fn():
            with sdpa_kernel(backend):
                return F.scaled_dot_product_attention(self.q, self.k, self.v, is_causal=self.causal, scale=self.scale)

        return fn


class OurFwd(Bound):
    """The forward graph planned on one engine (cuda by default; None: the router's pick among all
    engines), bound to torch tensors."""

    def __init__(self, c, engine="cuda"):
        g = new_graph()
        t = {n: g.tensor(name=n, dim=list(x.shape), stride=list(x.stride()), data_type=BF16)
             for n, x in (("q", c.q), ("k", c.k), ("v", c.v))}
        o, stats = g.sdpa(q=t["q"], k=t["k"], v=t["v"], attn_scale=c.scale, generate_stats=True,
                          use_causal_mask=c.causal, name="sdpa")
        o.set_output(True)
        stats.set_output(True).set_data_type(FP32)
        super().__init__(g, engine)
        self.o = poisoned(c.q)  # BSHD storage like q: O follows Q's stride order
        self.stats = torch.full((c.B, c.H, c.S, 1), float("nan"), device="cuda", dtype=torch.float32)
        self.pack = {t["q"]: c.q, t["k"]: c.k, t["v"]: c.v, o: self.o, stats: self.stats}


def plan_with_env(c, name, value, engine="cuda"):
    """OurFwd(c, engine) planned with the cuda engine's switch `name` set to `value` (read when the plan
    is made), restored afterwards."""
    old = os.environ.pop(name, None)
    os.environ[name] = value
    try:
        return OurFwd(c, engine)
    finally:
        os.environ.pop(name, None)
        if old is not None:
            os.environ[name] = old


def plan_with_v2(c, on, engine="cuda"):
    """OurFwd(c, engine) planned with OPENDNN_SDPA_FWD_V2 set to 1 or 0."""
    return plan_with_env(c, "OPENDNN_SDPA_FWD_V2", "1" if on else "0", engine)


def checked(c, ours):
    """(rel_err of O, max abs error of the LSE) of a plan's last run against the fp32 reference."""
    _, ref_lse = c.reference()
    return c.rel(ours.o), (ours.stats[0, :2, :256, 0] - ref_lse).abs().max().item()


def run_fwd(c, row, v2=False, persistent=False):
    fl = flops(c.B, c.H, c.S, c.D, c.causal)
    for peer, backend in PEERS.items():
        try:
            fn = c.peer(backend)
            out = fn()
            row[f"{peer}_rel_err"] = c.rel(out)
            row[f"{peer}_ms"] = time_cuda(fn)
            row[f"{peer}_tflops"] = fl / (row[f"{peer}_ms"] * 1e-3) / 1e12
        except Exception as e:  # a backend that cannot run this shape: recorded, never fatal
            row[f"{peer}_error"] = failure(e, 200)
    ours = first_run(row, lambda: plan_with_v2(c, v2) if v2 else OurFwd(c))
    if ours is None:
        return
    row["rel_err"], row["lse_max_abs_err"] = checked(c, ours)
    row["opendnn_ms"] = time_cuda(ours)
    row["opendnn_tflops"] = fl / (row["opendnn_ms"] * 1e-3) / 1e12
    row["correct"] = row["rel_err"] < 2e-2 and row["lse_max_abs_err"] < 2e-2
    add_speedups(row, PEERS)
    if v2:  # the first kernel on the same inputs, same run
        v1 = {}
        old = first_run(v1, lambda: plan_with_v2(c, False))
        if old is not None:
            row["plan_v1"] = v1["plan"]
            row["opendnn_v1_ms"] = time_cuda(old)
            row["v2_speedup_vs_v1"] = row["opendnn_v1_ms"] / row["opendnn_ms"]
    if persistent:  # the persistent schedule on the same inputs, same run (d256 keeps the grid one)
        for mode, key in (("0", "grid"), ("1", "persistent")):
            pr = {}
            pers = first_run(pr, lambda m=mode: plan_with_env(c, "OPENDNN_SDPA_FWD_PERSISTENT", m))
            if pers is None:
                row[f"{key}_declined"] = pr.get("opendnn_declined", "")[:300]
                continue
            row[f"plan_{key}"] = pr["plan"]
            row[f"{key}_rel_err"], row[f"{key}_lse_max_abs_err"] = checked(c, pers)
            # Alternating rounds with the default plan (time_pair), so drift falls on both alike.
            row[f"opendnn_pair_{key}_ms"], row[f"{key}_ms"] = time_pair(ours, pers)
            row[f"{key}_tflops"] = fl / (row[f"{key}_ms"] * 1e-3) / 1e12
            row[f"{key}_speedup"] = row[f"opendnn_pair_{key}_ms"] / row[f"{key}_ms"]
            for p in PEERS:
                if f"{p}_ms" in row:
                    row[f"{key}_speedup_vs_{p}"] = row[f"{p}_ms"] / row[f"{key}_ms"]
            row["correct"] = (row["correct"] and row[f"{key}_rel_err"] < 2e-2
                              and row[f"{key}_lse_max_abs_err"] < 2e-2)
            del pers


def run_router(c, row, v2=False):
    """The cudnn engine's plan and the router's pick on this case (common.time_router), timed in the same
    alternating rounds as our plan (router_round_opendnn_ms, for router_vs_best)."""
    make = (lambda e: plan_with_v2(c, v2, e)) if v2 else (lambda e: OurFwd(c, e))
    try:
        rot = {"router_round_opendnn_ms": make("cuda")}
    except Exception:  # our engine declined: the row already says why
        rot = None
    time_router(row, make, rotate_with=rot)


def run_bwd(c, row):
    """Backward columns on the same Case: bench/sdpa_bwd.py's row (imported here, it imports this file)."""
    import sdpa_bwd
    sdpa_bwd.run_bwd(c, row)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="four shapes (eight with --v2, 13 with --persistent)")
    ap.add_argument("--mode", choices=("fwd", "bwd", "all"), default="fwd")
    ap.add_argument("--v2", action="store_true", help="opt in to the v2 forward kernel (writes sdpa_v2.json)")
    ap.add_argument("--persistent", action="store_true",
                    help="also time v2's grid schedule and the one-Q-buffer persistent one (OPENDNN_SDPA_FWD_PERSISTENT=0/1; writes sdpa_persistent.json)")
    add_append_argument(ap)
    args = ap.parse_args()
    out_name = "sdpa_v2" if args.v2 else "sdpa_persistent" if args.persistent else "sdpa"
    if args.quick and args.persistent:
        shapes = [(S, D, causal) for D in (64, 128) for S in (512, 1024, 2048) for causal in (False, True)]
        shapes += [(4096, 128, False)]
    elif args.quick:
        shapes = [(S, 128, causal) for S in (1024, 4096) for causal in (False, True)]
        if args.v2:  # v2 instantiates every head dim: one long sequence of each of the others
            shapes += [(4096, D, causal) for D in (64, 256) for causal in (False, True)]
    else:
        shapes = [(S, D, causal) for D in (64, 128, 256) for causal in (False, True)
                  for S in (512, 1024, 2048, 4096, 8192, 16384)]
    modes = ("fwd", "bwd") if args.mode == "all" else (args.mode,)
    rows = []
    for mode in modes:
        for S, D, causal in shapes:
            c = Case(S, D, causal)
            row = {"case": f"{mode}_{c.name()}", "pass": mode, "batch": c.B, "heads": c.H, "seq": S, "head_dim": D,
                   "causal": causal, "dtype": "bf16"}
            if mode == "fwd":
                run_fwd(c, row, args.v2, args.persistent)
                run_router(c, row, args.v2)
            else:
                run_bwd(c, row)
            rows.append(row)
            show(row)
            write_results(out_name, rows, append=args.append)  # after every case: a fault later keeps what was measured
            del c
    return 0 if all(r.get("correct", True) for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
