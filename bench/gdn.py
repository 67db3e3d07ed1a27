# SPDX-License-Identifier: Apache-2.0
"""Gated delta net forward on the GPU, bf16, K = V = 128: opendnn's cuda engine against
flash-linear-attention's chunk_gated_delta_rule (skipped cleanly when fla is not installed), in one
process on the same inputs (in-kernel q/k l2norm, log-space gates, fp32 initial and final states).
Writes bench/results/gdn.json (+ PNG).

    python bench/gdn.py [--quick | --cases A/B [--append]] [--bwd [--exact] [--bwd-2stage] [--bwd-unsplit]] [--split] [--v3] [--mma-pass]

Our forward runs in several variants in the same process: the default plan (opendnn_ms: the
register-state sequential pass and the tensor-core chunk_prep), the first kernels (v1_*, both
switches 0), and each new kernel alone (mma_*: OPENDNN_GDN_FWD_V2, prep2_*: OPENDNN_GDN_PREP_V2).
With --split (or OPENDNN_GDN_SPLIT=1 in the environment, which then applies to those columns only)
also the sequence-split register-state pass, OPENDNN_GDN_SPLIT=1 (split_* with the first chunk_prep,
split2_* with the new one), and --quick adds the few-heads case h4_hv8_1x32k, the one the split is for.
With --v3 (the opt-in v3 kernels, A/B against opendnn_ms in the same run) also v3_* (both:
OPENDNN_GDN_PREP_V3=1 and OPENDNN_GDN_PASS_V3=1), prep3_* (chunk_prep_mma v3 alone: Tu instead of W and U,
v' formed in the pass, fused l2norm, gate prefetch) and pass3_* (three chunk stages in the register-state
pass alone); --quick --v3 also runs h4_hv8_1x32k, where the default plan is the split pass and the v3
columns are the split pass with the v3 kernels. OPENDNN_BENCH_KERNELS=1 prints each kernel's time.
The default register-state pass (v4) takes its chunk products on wgmma where its state slices
are 64 or 128 columns wide; with --mma-pass also mmapass_*: OPENDNN_GDN_FWD_V4=0, the same plan with
mma.sync products (v3); --quick --mma-pass also runs h4_hv8_1x32k.

With --bwd also the backward, one bwd_<case> row per case in gdn_bwd.json: our default plan (opendnn_*:
chunked) and fla's (fla_ms, speedup_vs_fla; fla's Triton version guard lifted where it refuses, see
fla_bwd_unguarded); with --exact also the token-exact plan (exact_*) and the errors against it. The
default is chunk_bwd_v2 with three chunk stages in state_bwd and in the recompute's register-state pass.
With --bwd-2stage also bwd_2stage_*: OPENDNN_GDN_BWD_V3=0, two stages and the full post
(bwd_2stage_ms, speedup_default_vs_2stage, rel_err_2stage_vs_default_*). The default splits the recompute and
state_bwd into sequence segments where the unsplit walks leave half the SMs idle (e.g. h4_hv8_1x32k);
with --bwd-unsplit also bwd_unsplit_*: OPENDNN_GDN_BWD_SPLIT=0, the unsplit walks.
--no-variants times only the default plan and the peer (the older kernels' columns take minutes).
fla autotunes every Triton kernel per shape (minutes a case): --cases runs a subset and --append keeps the
result files' other rows, so the five cases can come from several device calls (run_gpu_all.sh also
carries Triton's autotune results from one call to the next).

TFLOP/s use the customary minimal count 4*K*V FLOP per token and value head. Every case is also
checked against a float64 token recurrence over the first 256 tokens of its first sequence, and
against fla's output where fla runs.
"""
import argparse
import contextlib
import importlib
import os
import sys

import torch
import torch.nn.functional as F

from common import (add_append_argument, add_speedups, bind_output, failure, new_graph, plan_on, poisoned,
                    rel_err, show, time_cuda, write_results)

try:
    from fla.ops.gated_delta_rule import chunk_gated_delta_rule as fla_gdn
except Exception as e:  # an optional peer
    fla_gdn, FLA_ERROR = None, f"{type(e).__name__}: {e}"

K = V = 128
CHECK_TOKENS = 256
FWD_TOL, BWD_TOL = 2e-2, 4e-2  # RMS(error) / RMS(reference), bf16: the tolerances


def varlen(total, n, seed=0):
    """n lengths around total/n (+-40%) that sum to total."""
    gen = torch.Generator().manual_seed(seed)
    w = 0.6 + 0.8 * torch.rand(n, generator=gen)
    lens = (w / w.sum() * total).long()
    lens[-1] += total - int(lens.sum())
    return [int(x) for x in lens]


CASES = [  # name, H, HV, sequence lengths
    ("h16_hv32_1x32k", 16, 32, [32768]),
    ("h16_hv64_1x32k", 16, 64, [32768]),
    ("h16_hv32_8x4k", 16, 32, varlen(32768, 8)),
    ("h16_hv64_8x4k", 16, 64, varlen(32768, 8)),
    ("h4_hv8_1x32k", 4, 8, [32768]),
]
QUICK = ("h16_hv64_1x32k",)  # one case: fla autotunes its Triton kernels per shape on first use
QUICK_SPLIT = ("h4_hv8_1x32k",)


class Case:
    def __init__(self, H, HV, lens):
        torch.manual_seed(0)
        self.H, self.HV, self.lens = H, HV, lens
        T, N = sum(lens), len(lens)
        self.T, self.N = T, N
        dev = "cuda"
        self.q = torch.randn(T, H, K, device=dev, dtype=torch.bfloat16)
        self.k = torch.randn(T, H, K, device=dev, dtype=torch.bfloat16)
        self.v = torch.randn(T, HV, V, device=dev, dtype=torch.bfloat16)
        self.g = F.logsigmoid(torch.randn(T, HV, device=dev, dtype=torch.float32) + 3.0)  # alpha mostly 0.9..1
        self.beta = torch.rand(T, HV, device=dev, dtype=torch.float32).sigmoid()
        self.h0 = 0.1 * torch.randn(N, HV, K, V, device=dev, dtype=torch.float32)  # fla's [N, HV, K, V]
        self.cu = torch.tensor([0] + list(torch.tensor(lens).cumsum(0)), dtype=torch.int32, device=dev)
        self.scale = K ** -0.5

    def flops(self):
        return 4.0 * K * V * self.T * self.HV

    def reference_head(self):
        """float64 recurrence over the first CHECK_TOKENS tokens of sequence 0: (o, tokens)."""
        n = min(CHECK_TOKENS, self.lens[0])
        G = self.HV // self.H
        q = F.normalize(self.q[:n].double(), dim=-1, eps=0).repeat_interleave(G, dim=1)
        k = F.normalize(self.k[:n].double(), dim=-1, eps=0).repeat_interleave(G, dim=1)
        v, g, b = self.v[:n].double(), self.g[:n].double(), self.beta[:n].double()
        S = self.h0[0].double().clone()  # [HV, K, V]
        out = torch.empty(n, self.HV, V, dtype=torch.float64, device="cuda")
        for t in range(n):
            S *= g[t].exp()[:, None, None]
            e = v[t] - torch.einsum("hk,hkv->hv", k[t], S)
            S += b[t][:, None, None] * k[t][:, :, None] * e[:, None, :]
            out[t] = self.scale * torch.einsum("hk,hkv->hv", q[t], S)
        return out, n

    def ours_env(self, env, build=None):
        """build() (ours() by default) with the variables of env set while the plan is built (the opt-in kernels)."""
        old = {k: os.environ.get(k) for k in env}
        os.environ.update(env)
        try:
            return (build or self.ours)()
        finally:
            for k, x in old.items():
                if x is None:
                    del os.environ[k]
                else:
                    os.environ[k] = x

    def ours(self):
        """(callable, o, final_state) on the cuda engine, or (None, reason, None)."""
        T, H, HV, N = self.T, self.H, self.HV, self.N
        gr = new_graph()
        h0v = self.h0.transpose(-1, -2)  # the graph's V-major [N, HV, V, K] view, no copy
        ins = {"q": self.q, "k": self.k, "v": self.v, "g": self.g, "beta": self.beta, "cu_seqlens": self.cu,
               "initial_state": h0v}
        ts = {name: gr.tensor(dim=list(x.shape), stride=list(x.stride()), data_type=x.dtype, name=name)
              for name, x in ins.items()}
        o = torch.full((T, HV, V), float("nan"), device="cuda", dtype=torch.bfloat16)
        fs = torch.full((N, HV, K, V), float("nan"), device="cuda", dtype=torch.float32)
        fsv = fs.transpose(-1, -2)
        try:
            O, FS, _ = gr.gdn(scale=self.scale, use_qk_l2norm=True, output_final_state=True, name="gdn", **ts)
            for t, x in ((O, o), (FS, fsv)):
                bind_output(t, x)
            _, ws = plan_on(gr, "cuda")
        except Exception as e:  # a decline or a failed build: recorded in the row, never fatal
            return None, failure(e), None
        pack = {ts[n]: x for n, x in ins.items()}
        pack.update({O: o, FS: fsv})
        return (lambda: gr.execute(pack, ws)), o, fs

    def ours_bwd(self):
        """(callable, [dq, dk, dv, dg, dbeta, dh0]) on the cuda engine, or (None, reason)."""
        gr = new_graph()
        if getattr(self, "do", None) is None:  # one dO for every backward of the case (fla's too)
            self.do = torch.randn_like(self.v.new_empty(self.T, self.HV, V))
        ins = {"q": self.q, "k": self.k, "v": self.v, "g": self.g, "beta": self.beta, "cu_seqlens": self.cu,
               "dO": self.do, "initial_state": self.h0.transpose(-1, -2)}
        ts = {name: gr.tensor(dim=list(x.shape), stride=list(x.stride()), data_type=x.dtype, name=name)
              for name, x in ins.items()}
        grads = [poisoned(x) for x in (self.q, self.k, self.v, self.g, self.beta, self.h0)]
        views = grads[:5] + [grads[5].transpose(-1, -2)]
        try:
            outs = gr.gdn_bwd(scale=self.scale, use_qk_l2norm=True, name="gdn_bwd", **ts)
            for t, x in zip(outs, views):
                bind_output(t, x)
            _, ws = plan_on(gr, "cuda")
        except Exception as e:  # a decline or a failed build: recorded in the row, never fatal
            return None, failure(e)
        pack = {ts[n]: x for n, x in ins.items()}
        pack.update({t: x for t, x in zip(outs, views)})
        return (lambda: gr.execute(pack, ws)), grads

    def fla_bwd(self):
        """fla's backward as a callable, and its gradients (same order as ours_bwd)."""
        leaves = [x.detach().clone().requires_grad_(True) for x in (self.q, self.k, self.v, self.g, self.beta, self.h0)]
        q, k, v, g, b, h0 = leaves
        o, _ = fla_gdn(q[None], k[None], v[None], g[None], b[None], scale=self.scale, initial_state=h0,
                       output_final_state=False, use_qk_l2norm_in_kernel=True, cu_seqlens=self.cu.long())
        do = self.do[None]

        def run():
            return torch.autograd.grad(o, leaves, do, retain_graph=True)
        return run, run()

    def fla(self):
        cu = self.cu.long()
        q, k, v = self.q[None], self.k[None], self.v[None]
        g, b = self.g[None], self.beta[None]

        def run():
            return fla_gdn(q, k, v, g, b, scale=self.scale, initial_state=self.h0, output_final_state=True,
                           use_qk_l2norm_in_kernel=True, cu_seqlens=cu)
        return run


def rel(a, ref):
    return rel_err(a, ref, torch.float64)


VARIANTS = [  # column prefix, environment while the plan is built (the default plan: both new kernels)
    ("v1", {"OPENDNN_GDN_FWD_V2": "0", "OPENDNN_GDN_PREP_V2": "0"}),
    ("mma", {"OPENDNN_GDN_FWD_V2": "1", "OPENDNN_GDN_PREP_V2": "0"}),
    ("prep2", {"OPENDNN_GDN_FWD_V2": "0", "OPENDNN_GDN_PREP_V2": "1"}),
]
SPLIT_VARIANTS = [  # the sequence split forced on (the default where SMs would idle): only with --split
    ("split", {"OPENDNN_GDN_SPLIT": "1", "OPENDNN_GDN_PREP_V2": "0"}),
    ("split2", {"OPENDNN_GDN_SPLIT": "1"}),
]


V3_VARIANTS = [  # the v3 kernels forced on (v3 prep and pass are the defaults): only with --v3
    ("v3", {"OPENDNN_GDN_PREP_V3": "1", "OPENDNN_GDN_PASS_V3": "1"}),
    ("prep3", {"OPENDNN_GDN_PREP_V3": "1"}),
    ("pass3", {"OPENDNN_GDN_PASS_V3": "1"}),
]


MMA_PASS_VARIANTS = [  # the register-state pass with mma.sync products: only with --mma-pass
    ("mmapass", {"OPENDNN_GDN_FWD_V4": "0"}),
]


def opt_in(c, row, p, env, o, fs, fla_out):
    """Checks and times one opt-in variant into the p_* columns; o, fs: the default plan's outputs."""
    try:
        mfn, mo, mfs = c.ours_env(env)
        if mfn is None:
            row[f"{p}_declined"] = mo
            return
        mfn()
        torch.cuda.synchronize()
        ref, n = c.reference_head()
        row[f"{p}_rel_err_vs_fp64_head"] = rel(mo[:n], ref)
        row[f"{p}_finite"] = bool(torch.isfinite(mo).all().item() and torch.isfinite(mfs).all().item())
        if not row[f"{p}_finite"]:  # where, and whether a second run on the same workspace repeats it
            bad = (~torch.isfinite(mo.float())).reshape(c.T, c.HV, -1).any(-1)
            if bad.any():
                t, j = (int(x) for x in bad.nonzero()[0])
                row[f"{p}_nonfinite"] = f"{int(bad.sum())} (token, head) rows of O, first token {t} head {j}"
            mfn()
            torch.cuda.synchronize()
            row[f"{p}_finite_run2"] = bool(torch.isfinite(mo).all().item() and torch.isfinite(mfs).all().item())
        if o is not None:  # against the default plan, over every token
            row[f"{p}_rel_err_vs_default_o"] = rel(mo, o)
            row[f"{p}_rel_err_vs_default_state"] = rel(mfs, fs)
        if fla_out is not None:
            row[f"{p}_rel_err_vs_fla_o"] = rel(mo, fla_out[0][0])
            row[f"{p}_rel_err_vs_fla_state"] = rel(mfs, fla_out[1])
        ms = time_cuda(mfn)
        row.update({f"{p}_ms": ms, f"{p}_tflops": c.flops() / (ms * 1e-3) / 1e12})
        if "fla_ms" in row:
            row[f"{p}_speedup_vs_fla"] = row["fla_ms"] / ms
    except Exception as e:  # a kernel's fault is recorded in the row
        row[f"{p}_error"] = failure(e, 200)


GRAD_NAMES = ("dq", "dk", "dv", "dg", "dbeta", "dh0")


@contextlib.contextmanager
def fla_guard_lifted():
    """fla 0.6 refuses gated chunk_bwd_dqkwg on Hopper under Triton 3.4-3.7.0 (fla issue #640: wrong results
    there), and the GPU image has no newer Triton or tilelang: its version guard is lifted inside this block
    (checked on every call; a no-op for an fla without that guard)."""
    chunk_o = importlib.import_module("fla.ops.common.chunk_o")
    old = getattr(chunk_o, "TRITON_ABOVE_3_7_1", None)
    if old is not None:
        chunk_o.TRITON_ABOVE_3_7_1 = True
    try:
        yield
    finally:
        if old is not None:
            chunk_o.TRITON_ABOVE_3_7_1 = old


def fla_bwd_unguarded(c):
    """fla's backward with its Triton version guard lifted (see fla_guard_lifted). Its time is still the peer's
    cost for the same work; its gradients are recorded but are not an oracle (the row's fla_guard_lifted
    column marks them). The returned callable lifts the guard around each call."""
    def lifted(fn):
        def call():
            with fla_guard_lifted():
                return fn()
        return call

    run, ref = lifted(c.fla_bwd)()
    return lifted(run), ref


def backward(c, row, exact):
    """Fills row (a bwd_* case of gdn_bwd.json) with our default backward plan (the chunked one) and fla's,
    timed in the same run; with `exact` also the token-exact plan (OPENDNN_GDN_BWD_CHUNKED=0, ~1.2 s a call)
    and the chunked plan's error against it. Returns the default plan's gradients (None if it declined)."""
    fn, grads = c.ours_bwd()
    if fn is None:
        row["opendnn_declined"] = grads
        grads = None
    else:
        fn()
        torch.cuda.synchronize()
        row["finite"] = all(bool(torch.isfinite(x).all().item()) for x in grads)
        row["opendnn_ms"] = time_cuda(fn, warmup=2, reps=10)
    if fla_gdn is not None:
        try:
            try:
                run, ref = c.fla_bwd()
            except RuntimeError as e:
                if "Triton" not in str(e):
                    raise
                run, ref = fla_bwd_unguarded(c)
                row["fla_guard_lifted"] = True
            row["fla_ms"] = time_cuda(run, warmup=2, reps=10)
            if fn is not None:
                add_speedups(row, ("fla",))
                for name, a, b in zip(GRAD_NAMES, grads, ref):
                    row[f"rel_err_vs_fla_{name}"] = rel(a, b)
                # Against fla's gradients (not an oracle where its guard was lifted, but they agreed with ours
                # within 6e-3 wherever ours were right).
                row["correct"] = row["finite"] and all(row[f"rel_err_vs_fla_{n}"] <= BWD_TOL for n in GRAD_NAMES)
        except Exception as e:
            row["fla_error"] = failure(e, 200)
    if not exact or fn is None:
        return grads
    try:
        efn, egrads = c.ours_env({"OPENDNN_GDN_BWD_CHUNKED": "0"}, c.ours_bwd)
        if efn is None:
            row["exact_declined"] = egrads
            return grads
        row["exact_ms"] = time_cuda(efn, warmup=1, reps=3)
        for name, a, b in zip(GRAD_NAMES, grads, egrads):
            row[f"rel_err_vs_exact_{name}"] = rel(a, b)
    except Exception as e:
        row["exact_error"] = failure(e, 200)
    return grads


def backward_variant(c, row, grads, p, env, older):
    """bwd_<p>_ms: the chunked plan under `env`, next to the default plan (opendnn_ms) in the same run, and its
    gradients against the default's. `older`: the variant is an older kernel (speedup_default_vs_<p>), else an
    opt-in candidate (speedup_<p>_vs_default)."""
    try:
        vfn, vgrads = c.ours_env(env, c.ours_bwd)
        if vfn is None:
            row[f"bwd_{p}_declined"] = vgrads
            return
        vfn()
        torch.cuda.synchronize()
        row[f"bwd_{p}_finite"] = all(bool(torch.isfinite(x).all().item()) for x in vgrads)
        row[f"bwd_{p}_ms"] = time_cuda(vfn, warmup=2, reps=10)
        if "opendnn_ms" in row:
            if older:
                row[f"speedup_default_vs_{p}"] = row[f"bwd_{p}_ms"] / row["opendnn_ms"]
            else:
                row[f"speedup_{p}_vs_default"] = row["opendnn_ms"] / row[f"bwd_{p}_ms"]
            if "fla_ms" in row and not older:
                row[f"speedup_{p}_vs_fla"] = row["fla_ms"] / row[f"bwd_{p}_ms"]
        if grads is not None:
            for name, a, b in zip(GRAD_NAMES, vgrads, grads):
                row[f"rel_err_{p}_vs_default_{name}"] = rel(a, b)
    except Exception as e:
        row[f"bwd_{p}_error"] = failure(e, 200)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="one case")
    ap.add_argument("--cases", help="only these cases, '/'-separated names from CASES (fla autotunes per shape: "
                    "a full run takes ~15 minutes, more than one device call)")
    add_append_argument(ap)
    ap.add_argument("--bwd", action="store_true", help="also the backward (ours and fla's)")
    ap.add_argument("--exact", action="store_true", help="with --bwd: also the token-exact backward (slow)")
    ap.add_argument("--bwd-2stage", action="store_true",
                    help="with --bwd: also the backward with two chunk stages and the full post (OPENDNN_GDN_BWD_V3=0)")
    ap.add_argument("--bwd-unsplit", action="store_true",
                    help="with --bwd: also the backward without the sequence split (OPENDNN_GDN_BWD_SPLIT=0)")
    ap.add_argument("--split", action="store_true", help="also the sequence-split pass (OPENDNN_GDN_SPLIT=1)")
    ap.add_argument("--no-variants", action="store_true",
                    help="only the default plan and the peer (skip the v1/mma/prep2 columns of earlier kernels)")
    ap.add_argument("--v3", action="store_true",
                    help="also the opt-in forward kernels (v3_*, prep3_*, pass3_*)")
    ap.add_argument("--mma-pass", action="store_true",
                    help="also the register-state pass with mma.sync products (mmapass_*, OPENDNN_GDN_FWD_V4=0)")
    args = ap.parse_args()
    for name in ("OPENDNN_GDN_PREP_V3", "OPENDNN_GDN_PASS_V3", "OPENDNN_GDN_FWD_V4"):  # only their columns set them
        os.environ.pop(name, None)
    # Taken out of the environment so that the default and the other columns keep their plans.
    split = os.environ.pop("OPENDNN_GDN_SPLIT", None) == "1" or args.split
    os.environ.pop("OPENDNN_GDN_BWD_CHUNKED", None)  # bwd_opendnn_* is the default plan, bwd_exact_* forced
    os.environ.pop("OPENDNN_GDN_BWD_V3", None)  # only the bwd_2stage column sets it
    os.environ.pop("OPENDNN_GDN_BWD_SPLIT", None)  # only the bwd_unsplit column sets it
    quick = QUICK + (QUICK_SPLIT if split or args.v3 or args.mma_pass else ())
    variants = (([] if args.no_variants else VARIANTS) + (SPLIT_VARIANTS if split else []) +
                (V3_VARIANTS if args.v3 else []) + (MMA_PASS_VARIANTS if args.mma_pass else []))
    if fla_gdn is None:
        print(f"flash-linear-attention not available, peer skipped: {FLA_ERROR}")
    names = [c[0] for c in CASES]
    wanted = args.cases.split("/") if args.cases else None
    if wanted and set(wanted) - set(names):
        ap.error(f"unknown case(s) {sorted(set(wanted) - set(names))}; known: {names}")
    rows, brows = [], []
    for name, H, HV, lens in CASES:
        if (args.quick and name not in quick) or (wanted and name not in wanted):
            continue
        c = Case(H, HV, lens)
        row = {"case": name, "op": "gdn", "pass": "fwd", "H": H, "HV": HV, "K": K, "V": V, "tokens": c.T,
               "sequences": len(lens), "dtype": "bf16"}
        fn, o, fs = c.ours()
        if fn is None:
            row["opendnn_declined"] = o
        else:
            fn()
            torch.cuda.synchronize()
            ref, n = c.reference_head()
            row["rel_err_vs_fp64_head"] = rel(o[:n], ref)
            row["finite"] = bool(torch.isfinite(o).all().item() and torch.isfinite(fs).all().item())
            ms = time_cuda(fn)
            row.update({"opendnn_ms": ms, "tflops": c.flops() / (ms * 1e-3) / 1e12})
        fla_out = None
        if fla_gdn is not None:
            try:
                run = c.fla()
                fo, ffs = run()
                torch.cuda.synchronize()
                fla_out = (fo, ffs)
                row["fla_ms"] = time_cuda(run)
                row["fla_tflops"] = c.flops() / (row["fla_ms"] * 1e-3) / 1e12
                if fn is not None:
                    row["rel_err_vs_fla_o"] = rel(o, fo[0])
                    row["rel_err_vs_fla_state"] = rel(fs, ffs)
                    add_speedups(row, ("fla",))
            except Exception as e:  # a failing peer never loses our numbers
                row["fla_error"] = failure(e, 200)
        if fn is not None:  # the forward tolerance, against float64 and against fla where it ran
            row["correct"] = row["finite"] and all(row.get(k, 0.0) <= FWD_TOL for k in (
                "rel_err_vs_fp64_head", "rel_err_vs_fla_o", "rel_err_vs_fla_state"))
        # The opt-in kernels last, so that a fault in one cannot lose the numbers above.
        for p, env in variants:
            opt_in(c, row, p, env, o if fn is not None else None, fs, fla_out)
        rows.append(row)
        show(row)
        write_results("gdn", rows, append=args.append)
        if args.bwd:
            brow = {k: row[k] for k in ("H", "HV", "K", "V", "tokens", "sequences", "dtype")}
            brow.update({"case": f"bwd_{name}", "op": "gdn_bwd", "pass": "bwd"})
            grads = backward(c, brow, args.exact)
            if args.bwd_unsplit:
                backward_variant(c, brow, grads, "unsplit", {"OPENDNN_GDN_BWD_SPLIT": "0"}, True)
            if args.bwd_2stage:
                backward_variant(c, brow, grads, "2stage", {"OPENDNN_GDN_BWD_V3": "0"}, True)
            del grads
            brows.append(brow)
            show(brow)
            write_results("gdn_bwd", brows, append=args.append)
        del c
    return 0


if __name__ == "__main__":
    sys.exit(main())
