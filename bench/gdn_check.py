# SPDX-License-Identifier: Apache-2.0
"""Sequence independence of the GDN backward at benchmark scale (K = V = 128): a varlen batch's gradients
must equal, sequence by sequence, those of each sequence run alone (same data), and two runs on the same
workspace must agree bitwise. Prints one line per (case, environment): which gradients are finite after
runs 1 and 2, whether run 2 repeats run 1, the first non-finite element (sequence, chunk, offset, head),
and the per-sequence relative errors against the lone runs.

    python bench/gdn_check.py [--quick]
"""
import argparse
import sys

import torch

import gdn as G

NAMES = ("dq", "dk", "dv", "dg", "dbeta", "dh0")


def sub_case(c, lo, hi, si):
    """A Case holding tokens [lo, hi) of c as one sequence with c's initial state si and the same dO."""
    s = G.Case.__new__(G.Case)
    s.H, s.HV, s.lens, s.T, s.N = c.H, c.HV, [hi - lo], hi - lo, 1
    for name in ("q", "k", "v", "g", "beta", "do"):
        setattr(s, name, getattr(c, name)[lo:hi].contiguous())
    s.h0 = c.h0[si:si + 1].contiguous()
    s.cu = torch.tensor([0, hi - lo], dtype=torch.int32, device="cuda")
    s.scale = c.scale
    return s


def first_bad(x, cu, lens):
    bad = ~torch.isfinite(x.float())
    if not bad.any():
        return ""
    idx = bad.nonzero()[0].tolist()
    t = idx[0]
    s = int(torch.searchsorted(cu[1:].cpu(), torch.tensor(t), right=True))
    pos = t - int(cu[s])
    return f"t={t} seq={s} chunk={pos // 64} off={pos % 64} len={lens[s]} head={idx[1]} n_bad={int(bad.sum())}"


def check(name, H, HV, lens, env):
    c = G.Case(H, HV, lens)
    c.do = torch.randn(c.T, c.HV, G.V, device="cuda", dtype=torch.bfloat16)
    fn, grads = c.ours_env(env, c.ours_bwd)
    if fn is None:
        print(f"{name} {env}: declined {grads}", flush=True)
        return
    fn()
    torch.cuda.synchronize()
    fin1 = [bool(torch.isfinite(x).all()) for x in grads]
    run1 = [x.clone() for x in grads]
    bad1 = {n: first_bad(x, c.cu, lens) for n, x in zip(NAMES[:5], grads[:5]) if not torch.isfinite(x).all()}
    fn()
    torch.cuda.synchronize()
    fin2 = [bool(torch.isfinite(x).all()) for x in grads]
    same = [bool(torch.equal(a, b)) for a, b in zip(run1, grads)]
    line = [f"{name} {env or 'default'} finite1={fin1} finite2={fin2} run2_equal={same}"]
    line += [f"  first non-finite {n}: {w}" for n, w in bad1.items()]
    cu = c.cu.tolist()
    for si in sorted({0, len(lens) // 2, len(lens) - 1}):
        lo, hi = cu[si], cu[si + 1]
        s = sub_case(c, lo, hi, si)
        sfn, sg = s.ours_env(env, s.ours_bwd)
        sfn()
        torch.cuda.synchronize()
        errs = [G.rel(run1[i][lo:hi], sg[i]) for i in range(5)] + [G.rel(run1[5][si:si + 1], sg[5])]
        line.append(f"  seq {si} [{lo},{hi}) vs alone: " + " ".join(f"{n}={e:.3g}" for n, e in zip(NAMES, errs)))
    print("\n".join(line), flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    cases = [("h16_hv64_8x4k", 16, 64, G.varlen(32768, 8)),
             ("h16_hv64_8x4096", 16, 64, [4096] * 8),
             ("h16_hv32_8x4k", 16, 32, G.varlen(32768, 8)),
             ("h16_hv64_8x512v", 16, 64, G.varlen(4096, 8)),
             ("h2_hv8_8x512v", 2, 8, G.varlen(4096, 8))]
    envs = [{}, {"OPENDNN_GDN_BWD_V3": "0"}]
    for name, H, HV, lens in cases[:2] if args.quick else cases:
        for env in envs:
            try:
                check(name, H, HV, lens, env)
            except Exception as e:
                print(f"{name} {env}: {type(e).__name__}: {e}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
