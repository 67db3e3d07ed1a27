# SPDX-License-Identifier: Apache-2.0
"""cudnn engine vs torch, in one process: SDPA fwd and fwd+bwd (bf16, d128, B*S = 16k tokens, H*D = 2048,
S in 1k..16k, causal and not) against torch SDPA with the cuDNN backend forced; a bf16 GEMM against
torch.matmul (cuBLAS); NHWC bf16 convs against torch's conv2d. Our plans come from the opendnn package:
graphs built with opendnn.pygraph, planned on the cudnn engine alone (the other engines deselected), every
cuDNN engine config built, autotuned by the router, then the fastest under this benchmark's own timing (L2
flushed) selected; executed on torch CUDA tensors. Every case is checked against torch's output in the same
run. The GEMM rows also autotune over cuDNN's knob space (OPENDNN_CUDNN_KNOB_SEARCH=1: each heuristic
config with one performance knob moved, up to 64 more configs) and report the heuristic-only best beside
it. Writes bench/results/cudnn_engine.json (+ .png; cudnn_engine_<families>.json for an --only run) and
copies under $OUT.

    PYTHONPATH=build-py-gpu/python:bench python bench/cudnn_engine.py [--quick] [--only gemm,conv,sdpa]
"""
import argparse
import math
import os
import time

import torch
import torch.nn.functional as F

import opendnn
from common import Bound, bind_output, failure, new_graph, time_cuda, time_pair, write_results

BF16 = opendnn.data_type.BFLOAT16
FP32 = opendnn.data_type.FLOAT


class OurPlan(Bound):
    """A graph planned on the cudnn engine, bound to torch tensors; calling it executes the selected plan."""

    def __init__(self, g, pack):
        # Every cuDNN config built, one workspace for all that autotune and tune() may run: the largest.
        super().__init__(g, "cudnn", heur_modes=[opendnn.heur_mode.A, opendnn.heur_mode.B, opendnn.heur_mode.FALLBACK],
                         all_plans=True)
        self.pack = pack
        self.candidates = self.cudnn_plans()

    def cudnn_plans(self):
        return [i for i in range(self.g.get_execution_plan_count()) if self.g.get_engine_name_at_index(i) == "cudnn"]

    def tune(self):
        """The router's autotune over every built cuDNN config, then the fastest under time_cuda (cold L2)."""
        try:
            self.g.autotune(self.pack, self.ws)
        except Exception as e:  # a config that fails at run time must not lose the row
            print("  autotune:", str(e)[:200], flush=True)
        self.candidates = self.cudnn_plans()
        # Every config once, then the three fastest again with more repetitions: one noisy sample must not
        # pick a config a few percent slower than the one torch's cuDNN path uses.
        timed = []
        for i in self.candidates[:16]:
            try:
                self.g.select_plan(i)
                timed.append((time_cuda(self, warmup=2, reps=10), i))
            except Exception:
                continue
        if not timed:
            raise RuntimeError("no cudnn plan ran")
        best, best_ms = None, float("inf")
        for _, i in sorted(timed)[:3]:
            self.g.select_plan(i)
            ms = time_cuda(self, warmup=3, reps=40)
            if ms < best_ms:
                best, best_ms = i, ms
        self.g.select_plan(best)
        # The five fastest of the first pass, (plan, ms): which knobs matter, for the next look.
        self.top = [(self.g.get_plan_name_at_index(i), ms) for ms, i in sorted(timed)[:5]]
        return self

    @property
    def name(self):
        return self.g.get_plan_name_at_index(self.g.selected_plan())


def error_row(rows, case, e):
    """A case our plan could not be built or tuned for: the reasons (the engines' declines) in its row."""
    rows.append({"case": case, "error": failure(e, 1200)})
    print(case, "ERROR", rows[-1]["error"], flush=True)


def close(a, b, tol):
    d = (a.float() - b.float()).abs().max().item()
    return d <= tol * max(1.0, b.float().abs().max().item()), d


def sdpa_plans(q, k, v, o, stats, do, dq, dk, dv, causal, scale):
    gf = new_graph()
    tq, tk, tv = gf.tensor_like(q), gf.tensor_like(k), gf.tensor_like(v)
    to, ts = gf.sdpa(tq, tk, tv, generate_stats=True, attn_scale=scale, use_causal_mask=causal)
    bind_output(to, o)
    ts.set_output(True).set_data_type(FP32)
    fwd = OurPlan(gf, {tq: q, tk: k, tv: v, to: o, ts: stats})
    gb = new_graph()
    bq, bk, bv, bo, bdo = (gb.tensor_like(t) for t in (q, k, v, o, do))
    bs = gb.tensor_like(stats)
    rq, rk, rv = gb.sdpa_backward(bq, bk, bv, bo, bdo, bs, attn_scale=scale, use_causal_mask=causal)
    for t, like in ((rq, dq), (rk, dk), (rv, dv)):
        bind_output(t, like)
    bwd = OurPlan(gb, {bq: q, bk: k, bv: v, bo: o, bdo: do, bs: stats, rq: dq, rk: dk, rv: dv})
    return fwd, bwd


def sdpa_cases(quick):
    from torch.nn.attention import SDPBackend, sdpa_kernel

    rows = []
    HD, D, tokens = 2048, 128, 16384
    H = HD // D
    seqs = [4096] if quick else [1024, 2048, 4096, 8192, 16384]
    for S in seqs:
        B = tokens // S
        for causal in (False, True):
            torch.manual_seed(S + causal)
            scale = 1.0 / math.sqrt(D)
            # BSHD memory viewed as BHSD, the layout of the FA3 paper's runs.
            q, k, v, do = (torch.randn(B, S, H, D, device="cuda", dtype=torch.bfloat16).transpose(1, 2) for _ in range(4))
            case = f"sdpa B{B} H{H} S{S} d{D}{' causal' if causal else ''}"
            flops_f = 4.0 * B * H * S * S * D * (0.5 if causal else 1.0)
            o = torch.empty_like(q)
            stats = torch.empty(B, H, S, 1, device="cuda", dtype=torch.float32)
            dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
            try:
                fwd, bwd = sdpa_plans(q, k, v, o, stats, do, dq, dk, dv, causal, scale)
                fwd.tune()
                fwd()
                bwd.tune()
            except Exception as e:
                error_row(rows, case, e)
                continue
            qr, kr, vr = (t.detach().clone().requires_grad_(True) for t in (q, k, v))
            with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
                ref = F.scaled_dot_product_attention(qr, kr, vr, is_causal=causal, scale=scale)
                ref.backward(do)
            fwd()
            bwd()
            torch.cuda.synchronize()
            ok_o, e_o = close(o, ref, 2e-2)
            ok_q, e_q = close(dq, qr.grad, 5e-2)
            ok_k, e_k = close(dk, kr.grad, 5e-2)
            ok_v, e_v = close(dv, vr.grad, 5e-2)

            def torch_fwd():
                with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
                    F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale)

            def torch_fwdbwd():
                with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
                    out = F.scaled_dot_product_attention(qr, kr, vr, is_causal=causal, scale=scale)
                out.backward(do)

            def ours_fwdbwd():
                fwd()
                bwd()

            t_of, t_tf = time_pair(fwd, torch_fwd)
            t_ob, t_tb = time_pair(ours_fwdbwd, torch_fwdbwd)
            for mode, ours, peer, fl, ok, plan in (
                    ("fwd", t_of, t_tf, flops_f, ok_o, fwd.name),
                    ("fwd+bwd", t_ob, t_tb, 3.5 * flops_f, ok_o and ok_q and ok_k and ok_v, fwd.name + " + " + bwd.name)):
                r = {"case": f"{case} {mode}", "shape": [B, H, S, D], "causal": causal, "mode": mode,
                     "ours_ms": ours, "torch_cudnn_ms": peer, "tflops": fl / (ours * 1e-3) / 1e12,
                     "peer_tflops": fl / (peer * 1e-3) / 1e12, "speedup": peer / ours, "speedup_vs_torch_cudnn": peer / ours,
                     "plan": plan, "matches_torch": bool(ok),
                     "max_abs_err": {"O": e_o, "dQ": e_q, "dK": e_k, "dV": e_v}}
                rows.append(r)
                print(r["case"], f"ours {ours:.3f} ms torch {peer:.3f} ms speedup {peer / ours:.3f} ok {ok} {plan}",
                      flush=True)
            del fwd, bwd
    return rows


def planned(make, knob_search):
    """make() with the cudnn engine's knob search on or off (it is read when a graph is planned), and the
    milliseconds that planning and building every config took."""
    key = "OPENDNN_CUDNN_KNOB_SEARCH"
    prev = os.environ.pop(key, None)
    if knob_search:
        os.environ[key] = "1"
    try:
        t0 = time.perf_counter()
        p = make()
        return p, (time.perf_counter() - t0) * 1e3
    finally:
        os.environ.pop(key, None)
        if prev is not None:
            os.environ[key] = prev


def gemm_cases(quick):
    rows = []
    shapes = [(4096, 4096, 4096)] if quick else [(4096, 4096, 4096), (8192, 8192, 8192)]
    for M, N, K in shapes:
        torch.manual_seed(M)
        a = torch.randn(1, M, K, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(1, K, N, device="cuda", dtype=torch.bfloat16)
        c = torch.empty(1, M, N, device="cuda", dtype=torch.bfloat16)
        case = f"gemm {M}x{N}x{K} bf16"

        def make():
            g = new_graph()
            ta, tb = g.tensor_like(a), g.tensor_like(b)
            tc = g.matmul(ta, tb)
            tc.set_output(True).set_data_type(BF16)
            return OurPlan(g, {ta: a, tb: b, tc: c})

        try:
            default = planned(make, False)[0].tune()  # cuDNN's heuristic configs only
        except Exception as e:
            error_row(rows, case, e)
            continue
        p, search_ms, search_error = default, None, None
        try:
            searched, search_ms = planned(make, True)
            p = searched.tune()
        except Exception as e:  # the heuristic configs' row still stands
            search_error = failure(e, 400)
            print("  knob search:", search_error, flush=True)
        p()
        ok, err = close(c, torch.matmul(a, b), 2e-2)
        t_o, t_t = time_pair(p, lambda: torch.matmul(a, b))
        t_d = time_pair(default, lambda: torch.matmul(a, b))[0] if p is not default else t_o
        fl = 2.0 * M * N * K
        r = {"case": case, "shape": [M, N, K], "ours_ms": t_o, "torch_cublas_ms": t_t, "tflops": fl / (t_o * 1e-3) / 1e12,
             "peer_tflops": fl / (t_t * 1e-3) / 1e12, "speedup": t_t / t_o, "speedup_vs_torch_cublas": t_t / t_o, "plan": p.name,
             "matches_torch": bool(ok), "max_abs_err": err,
             "ours_default_ms": t_d, "speedup_default": t_t / t_d, "plan_default": default.name,
             "knob_search_ms": search_ms, "plans_tried": len(p.candidates), "top_plans": p.top,
             "knob_plans": len(p.candidates) - len(default.candidates)}
        if search_error:
            r["knob_search_error"] = search_error
        rows.append(r)
        print(case, f"ours {t_o:.3f} ms torch {t_t:.3f} ms speedup {t_t / t_o:.3f} ok {ok} {p.name}; heuristic-only "
              f"{t_d:.3f} ms ({t_t / t_d:.3f}) {default.name}; {r['knob_plans']} searched configs, planned and built in "
              f"{search_ms or 0:.0f} ms", flush=True)
        del default, p
    return rows


def conv_cases(quick):
    rows = []
    shapes = [(32, 256, 56, 56, 256, 3, 1, 1)]
    if not quick:
        shapes.append((64, 64, 112, 112, 128, 3, 1, 1))
    for N, C, H, W, K, R, pad, stride in shapes:
        torch.manual_seed(N * C)
        x = torch.randn(N, C, H, W, device="cuda", dtype=torch.bfloat16).to(memory_format=torch.channels_last)
        w = torch.randn(K, C, R, R, device="cuda", dtype=torch.bfloat16).to(memory_format=torch.channels_last)
        case = f"conv N{N} C{C} {H}x{W} K{K} r{R} bf16 nhwc"
        ref = F.conv2d(x, w, padding=pad, stride=stride)
        y = torch.empty_like(ref).to(memory_format=torch.channels_last)
        try:
            g = new_graph()
            tx, tw = g.tensor_like(x), g.tensor_like(w)
            ty = g.conv_fprop(tx, tw, padding=[pad, pad], stride=[stride, stride], dilation=[1, 1])
            bind_output(ty, y)
            p = OurPlan(g, {tx: x, tw: w, ty: y}).tune()
        except Exception as e:
            error_row(rows, case, e)
            continue
        p()
        ok, err = close(y, ref, 3e-2)
        t_o, t_t = time_pair(p, lambda: F.conv2d(x, w, padding=pad, stride=stride))
        fl = 2.0 * ref.numel() * C * R * R
        r = {"case": case, "shape": [N, C, H, W, K, R, pad, stride], "ours_ms": t_o, "torch_conv_ms": t_t,
             "tflops": fl / (t_o * 1e-3) / 1e12, "peer_tflops": fl / (t_t * 1e-3) / 1e12,
             "speedup": t_t / t_o, "speedup_vs_torch_conv": t_t / t_o, "plan": p.name, "plans_tried": len(p.candidates), "matches_torch": bool(ok),
             "max_abs_err": err}
        rows.append(r)
        print(case, f"ours {t_o:.3f} ms torch {t_t:.3f} ms speedup {t_t / t_o:.3f} ok {ok} {p.name}", flush=True)
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--only", default="gemm,conv,sdpa", help="comma-separated families: gemm, conv, sdpa")
    args = ap.parse_args()
    families = {"gemm": gemm_cases, "conv": conv_cases, "sdpa": sdpa_cases}
    chosen = [f.strip() for f in args.only.split(",") if f.strip()]
    unknown = [f for f in chosen if f not in families]
    if unknown:
        ap.error(f"--only: unknown families {unknown} (known: {sorted(families)})")
    # torch picks its fastest conv algorithm too: the comparison is best against best.
    torch.backends.cudnn.benchmark = True
    rows = []
    for f in (families[name] for name in chosen):
        try:
            rows += f(args.quick)
        except Exception as e:  # keep what was measured
            rows.append({"case": f.__name__, "error": repr(e)[:400]})
            print("ERROR", f.__name__, repr(e), flush=True)
    subset = chosen != list(families)
    command = "python bench/cudnn_engine.py" + (" --quick" if args.quick else "") + (f" --only {args.only}" if subset else "")
    # A subset run writes its own file: the full run's results (the README's table) stay as they are.
    name = "cudnn_engine" + ("_" + "_".join(chosen) if subset else "")
    write_results(name, rows, {"command": command,
                                         "torch_cudnn": torch.backends.cudnn.version()})


if __name__ == "__main__":
    main()
