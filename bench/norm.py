# SPDX-License-Identifier: Apache-2.0
"""RMSNorm / LayerNorm forward (training and inference) and backward on the GPU, bf16, LLM shapes:
opendnn's cuda engine against torch eager, cuDNN's norms (through opendnn's cudnn engine) and,
with --compile, torch.compile, all in one process on the same inputs. Writes bench/results/norm.json.

    python bench/norm.py [--quick | --shapes 8192x4096,32768x8192] [--no-cudnn] [--compile]

Our rows and torch's are timed and written first; cuDNN's columns are added in a second pass and
the file rewritten, so a fault in a peer cannot lose our numbers. The opt-in kernels are timed in
the same run as A/B columns (VARIANTS): opendnn_<v>_ms, <v>_speedup_vs_default (the default's time / the
variant's), <v>_fraction_of_copy_bw, <v>_speedup_vs_cudnn. The backward's default is the TMA ring (v3) for
16-bit hidden 2056-4096 and the cp.async ring (v1) elsewhere; `ring` forces v1, `v3` forces v3.
fraction_of_copy_bw is against a 2 GiB device copy (the large-copy ceiling); fraction_of_same_size_copy
against a copy of the row's own bytes timed like our kernel (L2 flushed, launch and ramp included).
"""
import argparse
import os
import sys

import torch
import torch.nn.functional as F

import opendnn as cudnn
from common import (add_speedups, copy_bandwidth_gbs, failure, new_graph, plan_on, poisoned, rel_err, show,
                    time_cuda, write_results)

BF16 = cudnn.data_type.BFLOAT16
FP32 = cudnn.data_type.FLOAT
EPS = 1e-5
PASSES = ("fwd", "infer", "bwd")  # training forward (writes the statistics), inference forward, backward
# Other kernels timed next to the default one: (column tag, passes, environment variable and the value
# it is set to while the plan is built).
VARIANTS = (("narrow", ("fwd", "infer"), "OPENDNN_NORM_FWD_NARROW", "1"), ("v2", ("bwd",), "OPENDNN_NORM_BWD_V2", "1"),
            ("v3", ("bwd",), "OPENDNN_NORM_BWD_V3", "1"), ("ring", ("bwd",), "OPENDNN_NORM_BWD_V3", "0"))


def build(kind, pas, T, H, engine):
    """A one-node norm graph planned on `engine` only, 4-D with a constant epsilon (the form the
    cudnn engine lowers). Returns (graph, tensors, workspace) or (None, None, decline reason)."""
    g = new_graph()
    x = g.tensor(name="x", dim=[T, H, 1, 1], stride=[H, 1, 1, 1], data_type=BF16)
    w = g.tensor(name="w", dim=[1, H, 1, 1], stride=[H, 1, 1, 1], data_type=BF16)
    t = {"x": x, "w": w}
    if kind == "layernorm":
        t["b"] = g.tensor(name="b", dim=[1, H, 1, 1], stride=[H, 1, 1, 1], data_type=BF16)
    if pas != "bwd":
        phase = cudnn.norm_forward_phase.TRAINING if pas == "fwd" else cudnn.norm_forward_phase.INFERENCE
        if kind == "rmsnorm":
            y, iv = g.rmsnorm(norm_forward_phase=phase, input=x, scale=w, epsilon=EPS)
        else:
            y, mean, iv = g.layernorm(norm_forward_phase=phase, input=x, scale=w, bias=t["b"], epsilon=EPS)
            if pas == "fwd":
                t["mean"] = mean.set_output(True).set_data_type(FP32)
        t["y"] = y.set_output(True)
        if pas == "fwd":
            t["iv"] = iv.set_output(True).set_data_type(FP32)
    else:
        t["dy"] = g.tensor(name="dy", dim=[T, H, 1, 1], stride=[H, 1, 1, 1], data_type=BF16)
        t["iv"] = g.tensor(name="iv", dim=[T, 1, 1, 1], stride=[1, 1, 1, 1], data_type=FP32)
        if kind == "rmsnorm":
            dx, dw, _ = g.rmsnorm_backward(grad=t["dy"], input=x, scale=w, inv_variance=t["iv"], has_dbias=False)
        else:
            t["mean"] = g.tensor(name="mean", dim=[T, 1, 1, 1], stride=[1, 1, 1, 1], data_type=FP32)
            dx, dw, db = g.layernorm_backward(grad=t["dy"], input=x, scale=w, mean=t["mean"], inv_variance=t["iv"])
            t["db"] = db.set_output(True).set_data_type(BF16)
        t["dx"] = dx.set_output(True)
        t["dw"] = dw.set_output(True).set_data_type(BF16)
    try:
        t["plan"], ws = plan_on(g, engine)
    except Exception as e:  # a decline or a failed build: recorded in the row, never fatal
        return None, None, failure(e)
    return g, t, ws


class Case:
    """Inputs, float32 references and the torch peers of one (kind, pass, T, H)."""

    def __init__(self, kind, pas, T, H):
        self.kind, self.pas, self.T, self.H = kind, pas, T, H
        torch.manual_seed(0)
        self.x = torch.randn(T, H, device="cuda", dtype=torch.bfloat16)
        self.w = torch.rand(1, H, device="cuda", dtype=torch.bfloat16) + 0.5
        self.b = torch.randn(1, H, device="cuda", dtype=torch.bfloat16)
        self.dy = torch.randn_like(self.x)
        xf = self.x.float()
        if kind == "rmsnorm":
            self.iv = torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + EPS)
            self.mean = torch.zeros_like(self.iv)
            self.ref_y = xf * self.iv * self.w.float()
        else:
            self.mean = xf.mean(-1, keepdim=True)
            self.iv = torch.rsqrt(xf.var(-1, unbiased=False, keepdim=True) + EPS)
            self.ref_y = (xf - self.mean) * self.iv * self.w.float() + self.b.float()
        self.ref_grads = None
        if pas == "bwd":
            # float32 reference gradients: the bf16 inputs upcast, one autograd pass
            xg = xf.clone().requires_grad_(True)
            wg = self.w.view(H).float().requires_grad_(True)
            bg = self.b.view(H).float().requires_grad_(True)
            out = self.norm(xg, wg, bg)
            params = [xg, wg] + ([bg] if kind == "layernorm" else [])
            self.ref_grads = [g.detach() for g in torch.autograd.grad(out, params, self.dy.float())]

    def norm(self, x, w, b):
        if self.kind == "rmsnorm":
            return F.rms_norm(x, (self.H,), w, EPS)
        return F.layer_norm(x, (self.H,), w, b, EPS)

    def peer(self, compiled=False):
        """torch's version of this pass as a no-argument callable (eager or torch.compile)."""
        H = self.H
        if self.pas != "bwd":
            fn = torch.compile(self.norm) if compiled else self.norm
            w, b = self.w.view(H), self.b.view(H)
            return lambda: fn(self.x, w, b)
        xg = self.x.detach().clone().requires_grad_(True)
        wg = self.w.view(H).detach().clone().requires_grad_(True)
        bg = self.b.view(H).detach().clone().requires_grad_(True)
        out = (torch.compile(self.norm) if compiled else self.norm)(xg, wg, bg)
        params = [xg, wg] + ([bg] if self.kind == "layernorm" else [])
        return lambda: torch.autograd.grad(out, params, self.dy, retain_graph=True)

    def nbytes(self):
        return self.T * self.H * 2 * (3 if self.pas == "bwd" else 2)

    def run_engine(self, engine):
        """(median ms, relative error) on `engine` (None: the router's own pick among all engines, its
        name left in self.plan), or (None, decline reason)."""
        g, t, ws = build(self.kind, self.pas, self.T, self.H, engine)
        if g is None:
            return None, ws
        T, H = self.T, self.H
        if self.pas != "bwd":
            y = poisoned(self.x)
            pack = {t["x"]: self.x, t["w"]: self.w, t["y"]: y}
            if self.kind == "layernorm":
                pack[t["b"]] = self.b
            if self.pas == "fwd":
                pack[t["iv"]] = torch.empty(T, 1, device="cuda", dtype=torch.float32)
                if self.kind == "layernorm":
                    pack[t["mean"]] = torch.empty(T, 1, device="cuda", dtype=torch.float32)
        else:
            dx, dw = poisoned(self.x), poisoned(self.w)
            pack = {t["x"]: self.x, t["w"]: self.w, t["dy"]: self.dy, t["iv"]: self.iv.contiguous(), t["dx"]: dx,
                    t["dw"]: dw}
            if self.kind == "layernorm":
                db = poisoned(self.b)
                pack.update({t["mean"]: self.mean.contiguous(), t["db"]: db})
        self.plan = t["plan"]
        g.execute(pack, ws)
        torch.cuda.synchronize()

        if self.pas != "bwd":
            err = rel_err(y, self.ref_y)
        else:
            outs = [dx, dw] + ([db] if self.kind == "layernorm" else [])
            err = max(rel_err(o, r) for o, r in zip(outs, self.ref_grads))
        return time_cuda(lambda: g.execute(pack, ws)), err


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="the 8k-token shapes, 8192x4096 and 8192x8192 (both norms, all passes)")
    ap.add_argument("--shapes", help="comma- or slash-separated TOKENSxHIDDEN list, e.g. 8192x4096,32768x8192 "
                                     "(overrides --quick; bench/run_gpu_all.sh splits its arguments at commas: use /)")
    ap.add_argument("--no-cudnn", action="store_true", help="skip cuDNN's norms (the cudnn engine)")
    ap.add_argument("--compile", action="store_true", help="also time torch.compile")
    ap.add_argument("--with-cudnn", action="store_true", help=argparse.SUPPRESS)  # the default now; old command lines
    args = ap.parse_args()
    copy_gbs = copy_bandwidth_gbs()
    print(f"device copy bandwidth: {copy_gbs:.0f} GB/s")
    # The small shape is where fixed costs (launch, ramp-up, the backward's partial reduction) show.
    if args.shapes:
        shapes = [tuple(int(v) for v in sh.lower().split("x")) for sh in args.shapes.replace("/", ",").split(",")]
    elif args.quick:
        shapes = [(8192, 4096), (8192, 8192)]
    else:
        shapes = [(T, H) for T in (8192, 16384, 32768) for H in (4096, 8192)]
    cases = [(k, p, T, H) for k in ("rmsnorm", "layernorm") for p in PASSES for T, H in shapes]
    extra = {"copy_bandwidth_gbs": copy_gbs}

    rows = []
    for kind, pas, T, H in cases:
        c = Case(kind, pas, T, H)
        row = {"case": f"{kind}_{pas}_{T}x{H}", "op": kind, "pass": pas, "tokens": T, "hidden": H, "dtype": "bf16"}
        row["torch_ms"] = time_cuda(c.peer())
        if args.compile:
            try:
                row["torch_compile_ms"] = time_cuda(c.peer(compiled=True))
            except Exception as e:  # an optional peer
                row["torch_compile_error"] = str(e)[:200]
        ms, err = c.run_engine("cuda")
        if ms is None:
            row["opendnn_declined"] = err
        else:
            row.update({"opendnn_ms": ms, "rel_err": err, "gbs": c.nbytes() / (ms * 1e-3) / 1e9})
            row["fraction_of_copy_bw"] = row["gbs"] / copy_gbs
            # The same bytes copied, timed the same way: what launch, ramp and tail cost at this size.
            row["same_size_copy_gbs"] = copy_bandwidth_gbs(c.nbytes(), flush=True)
            row["fraction_of_same_size_copy"] = row["gbs"] / row["same_size_copy_gbs"]
            add_speedups(row, ("torch", "torch_compile"))
        for tag, passes, env, value in VARIANTS:
            if pas not in passes:
                continue
            # A/B in the same run: the other kernel, chosen when the plan is built.
            os.environ[env] = value
            try:
                ms2, err2 = c.run_engine("cuda")
            finally:
                del os.environ[env]
            if ms2 is None:
                row[f"opendnn_{tag}_declined"] = err2
            else:
                row.update({f"opendnn_{tag}_ms": ms2, f"{tag}_rel_err": err2, f"{tag}_plan": c.plan,
                            f"{tag}_fraction_of_copy_bw": c.nbytes() / (ms2 * 1e-3) / 1e9 / copy_gbs})
                if "opendnn_ms" in row:
                    row[f"{tag}_speedup_vs_default"] = row["opendnn_ms"] / ms2
        rows.append(row)
        show(row, skip=("cudnn_declined",))
        del c
    write_results("norm", rows, extra)
    if args.no_cudnn:
        return 0

    print("cuDNN's norms through the cudnn engine:")
    # Training passes first: the inference forward is the least exercised path of the cudnn engine.
    order = sorted(range(len(cases)), key=lambda i: cases[i][1] == "infer")
    for row, (kind, pas, T, H) in ((rows[i], cases[i]) for i in order):
        c = Case(kind, pas, T, H)
        ms, err = c.run_engine("cudnn")
        if ms is None:
            row["cudnn_declined"] = err
            print(f"  {row['case']}: cudnn engine declines: {err[:160]}", flush=True)
        else:
            row.update({"cudnn_ms": ms, "cudnn_rel_err": err})
            add_speedups(row, ("cudnn",))
            tags = [tag for tag, *_ in VARIANTS if f"opendnn_{tag}_ms" in row]
            for tag in tags:
                row[f"{tag}_speedup_vs_cudnn"] = ms / row[f"opendnn_{tag}_ms"]
            keys = ["case", "opendnn_ms"] + [f"opendnn_{t}_ms" for t in tags] + ["cudnn_ms", "cudnn_rel_err", "speedup_vs_cudnn"]
            show({k: row[k] for k in keys + [f"{t}_speedup_vs_cudnn" for t in tags] if k in row})
        # The router's default pick among every engine, timed like the rest: the issue asks that it be
        # our plan where ours is faster (router_vs_best = fastest engine's time / the pick's time).
        ms, err = c.run_engine(None)
        timed = [row[k] for k in ("opendnn_ms", "cudnn_ms") if k in row]
        if ms is not None and timed:
            best = min(timed)
            row.update({"router_plan": c.plan, "router_ms": ms, "router_vs_best": best / ms})
            show({k: row[k] for k in ("case", "router_plan", "router_ms", "router_vs_best")})
        write_results("norm", rows, extra)  # after every case: a fault in cuDNN keeps what was measured
        del c
    return 0


if __name__ == "__main__":
    sys.exit(main())
