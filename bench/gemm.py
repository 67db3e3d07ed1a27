# SPDX-License-Identifier: Apache-2.0
"""GEMM on the GPU: opendnn's cuda engine (CUTLASS sm90 kernels with fused epilogues) against
torch.matmul (cuBLAS), torch doing GEMM + bias + GELU as separate kernels (and, with --compile,
torch.compile of it) and torch._scaled_mm for fp8 e4m3 (per-tensor scales, bf16 out), all in one
process on the same inputs. Writes bench/results/gemm.json (+ .png).

    python bench/gemm.py [--quick | --sweep | --targets] [--compile]

The main bf16 rows also time our cudnn engine's plan (cudnn_engine_ms) and the router's own pick among
every engine (router_plan, router_ms, router_vs_best = the faster engine's time / the pick's).

Layouts: "nn" is torch.matmul(a, b) with b [K, N] contiguous; "nt" is F.linear(x, w), w [N, K]
contiguous (B column-major, the layout of nn.Linear weights). Each result is checked against torch's
own output in the same run (relative Frobenius error).

Besides the default plan, it times every cuda plan of a graph selected explicitly ("plans_" rows:
cooperative 128x256 against pingpong 128x128, plain and with bias + GELU, fp8 with and without fp32
promotion; the opt-in plans are switched on here) and, with the tile scheduler's knobs set through OPENDNN_GEMM_SWIZZLE and
OPENDNN_GEMM_RASTER, an A/B grid of swizzle x raster order ("knobs_" rows, --no-knobs skips it).

The opt-in variants, switched on where they run: "swiglu_" rows (silu(x W_gate^T) * up fused into the GEMM
epilogue, OPENDNN_GEMM_SWIGLU=1, against torch's matmul, silu and mul as separate kernels), "f32out_" rows
(bf16 inputs, fp32 output, OPENDNN_GEMM_F32_OUT=1, against torch.matmul(...).float() and torch.mm with
out_dtype where torch has it), "fp8amax_" rows (MATMUL_FP8 with amax_C, OPENDNN_GEMM_FP8_AMAX=1, against
torch._scaled_mm followed by abs().amax()), and the 256x128 cooperative tile (OPENDNN_GEMM_M256=1) in the
plans_ rows.

The plans_ rows also time the opt-in candidates: pingpong 64x256
(OPENDNN_GEMM_PP64X256=1, plain and bias + GELU), fp8 pingpong
64x128x128 with promotion (OPENDNN_GEMM_FP8_PINGPONG=1), and the fp8 promotion interval
(OPENDNN_GEMM_FP8_PROMOTION=8|16, "_promotion" rows); "model_" rows repeat a plans_ row with the scheduler
knobs chosen by OPENDNN_GEMM_KNOBS=model. Each plan gets a column <kind>_<tile>_<cluster> (plan_tag). The plans of
a row and its torch peers are timed in alternating rounds (time_rotating), so clock drift during the row falls
on all of them alike (the main bf16 rows alternate ours, the torch peer, the cudnn engine and the router's pick the
same way). --sweep runs only those rows, at 8192^3 and the M = 8192 shapes with N or K = 11008
(+ the knob grid at two of them), in about two minutes.
"""
import argparse
import contextlib
import os
import re
import sys

import torch
import torch.nn.functional as F

import opendnn as cudnn
from common import (Bound, add_speedups, failure, new_graph, plan_on, rel_err, show, time_cuda, time_rotating,
                    time_router, write_results)

BF16 = cudnn.data_type.BFLOAT16
FP32 = cudnn.data_type.FLOAT
LLM_DIMS = (4096, 11008, 14336)
TOL = 2e-2  # bf16 output rounding on both sides, different summation orders


def build(M, N, K, layout, epilogue):
    """MATMUL [+ bias + GELU] on BF16 tensors: (graph, tensors)."""
    g = new_graph()
    a = g.tensor(name="a", dim=[1, M, K], stride=[M * K, K, 1], data_type=BF16)
    b_stride = [K * N, N, 1] if layout == "nn" else [K * N, 1, K]
    b = g.tensor(name="b", dim=[1, K, N], stride=b_stride, data_type=BF16)
    t = {"a": a, "b": b}
    y = g.matmul(a, b, name="mm")
    if epilogue == "bias_gelu":
        t["bias"] = g.tensor(name="bias", dim=[1, 1, N], stride=[N, N, 1], data_type=BF16)
        y = g.gelu(g.bias(y, t["bias"], name="bias"), name="gelu")
    t["y"] = y.set_output(True).set_data_type(BF16)
    return g, t


def run_and_check(g, pack, y, ref, row, peer_name, peer=None, timed=True):
    """Plans `g` on the cuda engine, runs it once into `y` (poisoned), checks it against `ref` and
    times it; fills the row and returns our median ms, or None with the decline in the row. With `peer`
    (a callable), ours and the peer are timed in alternating rounds and <peer_name>_ms is the peer's.
    timed=False: only the check (the caller times it, e.g. with the engines in common.time_router); returns 0."""
    try:
        row["plan"], ws = plan_on(g, "cuda")
    except Exception as e:  # a decline or a failed build: recorded in the row, never fatal
        row["opendnn_declined"] = failure(e)
        return None
    g.execute(pack, ws)
    torch.cuda.synchronize()
    row["rel_err"] = rel_err(y, ref)
    row["correct"] = row["rel_err"] < TOL
    if not timed:
        return 0.0
    if peer is None:
        ms = time_cuda(lambda: g.execute(pack, ws))
    else:
        timed = time_rotating({"ours": ((lambda: None), lambda: g.execute(pack, ws)), "peer": ((lambda: None), peer)})
        ms, row[peer_name + "_ms"] = timed["ours"], timed["peer"]
    row["opendnn_ms"] = ms
    add_rates(row, peer_name)
    return ms


def add_rates(row, peer_name):
    row["opendnn_tflops"] = 2.0 * row["M"] * row["N"] * row["K"] / (row["opendnn_ms"] * 1e-3) / 1e12
    add_speedups(row, (peer_name, "torch_compile"))


def bench_bf16(M, N, K, layout, epilogue, compile_peer):
    torch.manual_seed(0)
    a = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
    if layout == "nn":
        b = torch.randn(K, N, device="cuda", dtype=torch.bfloat16) / K**0.5
        b_view = b
    else:
        w = torch.randn(N, K, device="cuda", dtype=torch.bfloat16) / K**0.5
        b_view = w.t()
    bias = torch.randn(N, device="cuda", dtype=torch.bfloat16)
    row = {"case": f"bf16_{layout}_{epilogue}_{M}x{N}x{K}", "dtype": "bf16", "layout": layout, "epilogue": epilogue,
           "M": M, "N": N, "K": K}

    if epilogue == "none":
        def peer():
            return torch.matmul(a, b_view)
        peer_name = "torch_matmul"
    else:
        def peer():  # what eager torch does: the GEMM, then bias, then GELU, three kernels
            return F.gelu(torch.matmul(a, b_view) + bias)
        peer_name = "torch_separate"
    ref = peer()
    if compile_peer and epilogue != "none":
        try:
            cf = torch.compile(lambda x, y, z: F.gelu(torch.matmul(x, y) + z))
            cf(a, b_view, bias)
            row["torch_compile_ms"] = time_cuda(lambda: cf(a, b_view, bias))
        except Exception as e:  # an optional peer
            row["torch_compile_error"] = str(e)[:200]

    g, t = build(M, N, K, layout, epilogue)
    y = torch.full((M, N), float("nan"), device="cuda", dtype=torch.bfloat16)
    pack = {t["a"]: a, t["b"]: b_view, t["y"]: y}
    if "bias" in t:
        pack[t["bias"]] = bias
    if run_and_check(g, pack, y, ref, row, peer_name, timed=False) is None:
        row[peer_name + "_ms"] = time_cuda(peer)
        return row

    def on_engine(engine):  # the same graph and tensors, planned for common.time_router
        g, t = build(M, N, K, layout, epilogue)
        bound = Bound(g, engine)
        bound.pack = {t["a"]: a, t["b"]: b_view, t["y"]: y, **({t["bias"]: bias} if "bias" in t else {})}
        return bound

    # ours, the peer, the cudnn engine and the router's pick in the same alternating rounds
    time_router(row, on_engine, rotate_with={"opendnn_ms": on_engine("cuda"), peer_name + "_ms": peer})
    add_rates(row, peer_name)
    return row


# The opt-in plans every plans_ row switches on.
BF16_PLAN_SWITCHES = {k: "1" for k in ("OPENDNN_GEMM_PINGPONG", "OPENDNN_GEMM_M256", "OPENDNN_GEMM_PP64X256")}
FP8_PLAN_SWITCHES = {"OPENDNN_GEMM_FP8_FAST": "1", "OPENDNN_GEMM_FP8_PINGPONG": "1"}
def cuda_plans(g):
    """Plans `g` (the opt-in cuda plans included): {cuda plan name: index}."""
    g.validate()
    g.build_operation_graph()
    g.create_execution_plans([cudnn.heur_mode.A])
    return {g.get_plan_name_at_index(i): i for i in range(g.get_execution_plan_count())
            if g.get_engine_name_at_index(i) == "cuda"}


def plan_tag(name):
    """A column name for a cuda plan, <kind>_<tile MxN>_<cluster>: coop_128x256_c2x1, pingpong_128x128_c2x1,
    pingpong_64x256_c2x1, coop_fastacc_128x256_c2x1, ... (a graph's plans differ in these)."""
    m = re.match(r"(?:cuda:)?gemm_(\d+)x(\d+)x\d+_c(\dx\d)_(.+?)_(?:bf16|fp16|e4m3)", name)
    return f"{m.group(4)}_{m.group(1)}x{m.group(2)}_c{m.group(3)}" if m else name


def nt_inputs(M, N, K):
    torch.manual_seed(0)
    a = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(N, K, device="cuda", dtype=torch.bfloat16) / K**0.5
    return a, w


def bench_plans(M, N, K, env=None, prefix="plans", epilogue="none"):
    """Every cuda plan of the bf16 NT GEMM [+ bias + GELU], each selected explicitly, against torch
    (torch.matmul, or matmul + bias + GELU). `env` sets OPENDNN_GEMM_* variables while planning (the
    knobs are read at planning time)."""
    a, w = nt_inputs(M, N, K)
    bias = torch.randn(N, device="cuda", dtype=torch.bfloat16)
    peer_name = "torch_matmul" if epilogue == "none" else "torch_separate"

    def peer():
        return torch.matmul(a, w.t()) if epilogue == "none" else F.gelu(torch.matmul(a, w.t()) + bias)

    ref = peer()
    tag = "_".join(f"{k.rsplit('_', 1)[-1].lower()}{v}" for k, v in (env or {}).items())
    row = {"case": f"{prefix}_bf16_nt_{epilogue}_{M}x{N}x{K}" + (f"_{tag}" if tag else ""), "dtype": "bf16",
           "layout": "nt", "epilogue": epilogue, "M": M, "N": N, "K": K, **({"env": env} if env else {})}
    with environ({**BF16_PLAN_SWITCHES, **(env or {})}):
        g, t = build(M, N, K, "nt", epilogue)
        plans = cuda_plans(g)
    y = torch.empty(M, N, device="cuda", dtype=torch.bfloat16)
    pack = {t["a"]: a, t["b"]: w.t(), t["y"]: y}
    if "bias" in t:
        pack[t["bias"]] = bias
    # knob rows carry no speedup column: they are A/B data, not rows of the README's table
    time_plans(row, g, plans, pack, y, ref, {peer_name: peer}, None if prefix == "knobs" else peer_name)
    return row


def time_plans(row, g, plans, pack, y, ref, peers, peer):
    """Builds and checks each plan of `plans` ({name: index}), then times the plans that ran and the `peers`
    ({name: fn}) in alternating rounds: <tag>_ms / _rel_err / _tflops columns, <peer>_ms, and the fastest correct
    plan as opendnn_ms with its tag as `winner` (and its speedup over `peer` when given)."""
    M, N, K = row["M"], row["N"], row["K"]
    ran = {}
    for name, index in plans.items():
        col = plan_tag(name)
        try:  # a failed build or launch is recorded in the row, never fatal
            g.select_plan(index)
            ws = torch.empty(max(1, g.get_workspace_size()), dtype=torch.uint8, device="cuda")
            y.fill_(float("nan"))
            g.execute(pack, ws)
            torch.cuda.synchronize()
        except Exception as e:
            row[col + "_error"] = failure(e)
            continue
        row[col + "_plan"], row[col + "_rel_err"] = name, rel_err(y, ref)
        ran[col] = (index, ws)

    def select(index):
        return lambda: g.select_plan(index)

    def execute(ws):
        return lambda: g.execute(pack, ws)

    entries = {col: (select(index), execute(ws)) for col, (index, ws) in ran.items()}
    entries.update({p: ((lambda: None), fn) for p, fn in peers.items()})
    timed = time_rotating(entries)
    for p in peers:
        row[p + "_ms"] = timed[p]
    best = None
    for col in ran:
        ms = row[col + "_ms"] = timed[col]
        row[col + "_tflops"] = 2.0 * M * N * K / (ms * 1e-3) / 1e12
        if row[col + "_rel_err"] >= TOL:
            row["correct"] = False
        elif best is None or ms < row[best + "_ms"]:
            best = col
    row.setdefault("correct", best is not None)
    if best:
        row["winner"] = best
        row["opendnn_ms"] = row[best + "_ms"]
        row["opendnn_tflops"] = row[best + "_tflops"]
        if peer:
            add_speedups(row, (peer,))


@contextlib.contextmanager
def environ(values):
    """Sets environment variables for a block (the cuda engine reads its opt-ins and knobs when planning)."""
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


KNOB_GRID = [(s, r) for s in (1, 2, 4, 8) for r in ("h", "m", "n")]


def summarize_knobs(rows, M, N, K):
    """Prints the fastest swizzle x raster setting of each plan for one shape."""
    knob_rows = [r for r in rows if r["case"].startswith(f"knobs_bf16_nt_none_{M}x{N}x{K}_")]
    tags = sorted({k[:-3] for r in knob_rows for k in r if k.endswith("_ms")} - {"torch_matmul", "opendnn"})
    for tag in tags:
        timed = [(r[tag + "_ms"], r["env"]) for r in knob_rows if r.get(tag + "_ms") and r.get(tag + "_rel_err", 1) < TOL]
        if timed:
            ms, env = min(timed, key=lambda x: x[0])
            print(f"KNOBS {M}x{N}x{K} {tag}: best {ms:.4f} ms at swizzle {env['OPENDNN_GEMM_SWIZZLE']} "
                  f"raster {env['OPENDNN_GEMM_RASTER']}", flush=True)


def fp8_inputs(M, N, K):
    """e4m3 A [M, K] and W [N, K], the three fp32 scales and torch's reference (bf16)."""
    torch.manual_seed(0)
    a = torch.randn(M, K, device="cuda").to(torch.float8_e4m3fn)
    w = torch.randn(N, K, device="cuda").to(torch.float8_e4m3fn)
    scales = [torch.tensor(v, device="cuda", dtype=torch.float32) for v in (0.5, 0.25, 1.0 / K**0.5)]
    ref = torch._scaled_mm(a, w.t(), scales[0], scales[1], out_dtype=torch.bfloat16) * scales[2]
    return a, w, scales, ref


def fp8_graph(M, N, K, a, w, scales, amax_out=None):
    """MATMUL_FP8 with a bf16 C (and amax_C into `amax_out` when given): (graph, variant pack, poisoned output)."""
    g = new_graph()
    A = g.tensor(name="a", dim=[1, M, K], stride=[M * K, K, 1], data_type=cudnn.data_type.FP8_E4M3)
    B = g.tensor(name="b", dim=[1, K, N], stride=[K * N, 1, K], data_type=cudnn.data_type.FP8_E4M3)
    s = [g.tensor(name=n, dim=[1, 1, 1], stride=[1, 1, 1], data_type=FP32) for n in ("da", "db", "sc")]
    c, amax = g.matmul_fp8(A, B, *s)
    c.set_output(True).set_data_type(BF16)
    amax.set_output(amax_out is not None).set_data_type(FP32)
    y = torch.full((M, N), float("nan"), device="cuda", dtype=torch.bfloat16)
    pack = {A: a, B: w, c: y, s[0]: scales[0], s[1]: scales[1], s[2]: scales[2]}
    if amax_out is not None:
        pack[amax] = amax_out
    return g, pack, y


def bench_fp8(M, N, K):
    """fp8 e4m3 GEMM with per-tensor scales and a bf16 output against torch._scaled_mm."""
    row = {"case": f"fp8_e4m3_nt_{M}x{N}x{K}", "dtype": "fp8_e4m3", "layout": "nt", "epilogue": "none",
           "M": M, "N": N, "K": K}
    a, w, scales, ref = fp8_inputs(M, N, K)

    def peer_gemm_only():  # scale_C folded into a scale, one kernel, the fair peer
        return torch._scaled_mm(a, w.t(), scales[0], scales[1] * scales[2], out_dtype=torch.bfloat16)

    try:
        row["torch_scaled_mm_ms"] = time_cuda(peer_gemm_only)
    except Exception as e:
        row["torch_scaled_mm_error"] = str(e)[:200]
        return row
    g, pack, y = fp8_graph(M, N, K, a, w, scales)
    run_and_check(g, pack, y, ref, row, "torch_scaled_mm", peer_gemm_only)
    return row


def bench_fp8_plans(M, N, K, promotion=None):
    """The fp8 plans (fp32 promotion, and fast accumulation 128x256), each selected explicitly; `promotion`
    sets OPENDNN_GEMM_FP8_PROMOTION (wgmma k-steps between promotions, 4 by default)."""
    env = {"OPENDNN_GEMM_FP8_PROMOTION": str(promotion)} if promotion else {}
    row = {"case": f"plans_fp8_e4m3_nt_{M}x{N}x{K}" + (f"_promotion{promotion}" if promotion else ""),
           "dtype": "fp8_e4m3", "layout": "nt", "epilogue": "none", "M": M, "N": N, "K": K}
    a, w, scales, ref = fp8_inputs(M, N, K)
    peers = {}
    for col, fast in (("torch_scaled_mm", False), ("torch_scaled_mm_fast_accum", True)):
        def peer(fast=fast):
            return torch._scaled_mm(a, w.t(), scales[0], scales[1] * scales[2], out_dtype=torch.bfloat16,
                                    use_fast_accum=fast)
        try:  # torch's default keeps full accumulation; its fast mode is the peer of our fast-accum plan
            peer()
            peers[col] = peer
        except Exception as e:
            row[col + "_error"] = str(e)[:200]
    with environ({**FP8_PLAN_SWITCHES, **env}):
        g, pack, y = fp8_graph(M, N, K, a, w, scales)
        plans = cuda_plans(g)
    time_plans(row, g, plans, pack, y, ref, peers, "torch_scaled_mm" if "torch_scaled_mm" in peers else None)
    fast = "coop_fastacc_128x256_c2x1"
    if fast + "_ms" in row and "torch_scaled_mm_fast_accum_ms" in row:  # like for like, not a README column
        row["fastacc_ratio_vs_torch_fast_accum"] = row["torch_scaled_mm_fast_accum_ms"] / row[fast + "_ms"]
    return row


def bench_swiglu(M, N, K):
    """The gate projection of a SwiGLU MLP, silu(x W_gate^T) * up with `up` computed elsewhere, fused into the
    GEMM epilogue, against torch's three kernels (matmul, silu, mul); the plain GEMM's time for scale."""
    a, w = nt_inputs(M, N, K)
    up = torch.randn(M, N, device="cuda", dtype=torch.bfloat16)
    row = {"case": f"swiglu_bf16_nt_{M}x{N}x{K}", "dtype": "bf16", "layout": "nt", "epilogue": "swiglu",
           "M": M, "N": N, "K": K}

    def peer():
        return F.silu(torch.matmul(a, w.t())) * up

    ref = peer()
    row["torch_separate_ms"] = time_cuda(peer)
    row["torch_matmul_ms"] = time_cuda(lambda: torch.matmul(a, w.t()))
    with environ({"OPENDNN_GEMM_SWIGLU": "1", "OPENDNN_GEMM_PINGPONG": "1"}):
        g = new_graph()
        A = g.tensor(name="a", dim=[1, M, K], stride=[M * K, K, 1], data_type=BF16)
        B = g.tensor(name="b", dim=[1, K, N], stride=[K * N, 1, K], data_type=BF16)
        U = g.tensor(name="up", dim=[1, M, N], stride=[M * N, N, 1], data_type=BF16)
        out = g.mul(g.swish(g.matmul(A, B, name="mm"), name="silu"), U, name="gate")
        out.set_output(True).set_data_type(BF16)
        y = torch.full((M, N), float("nan"), device="cuda", dtype=torch.bfloat16)
        run_and_check(g, {A: a, B: w.t(), U: up, out: y}, y, ref, row, "torch_separate")
    return row


def bench_f32out(M, N, K):
    """bf16 inputs, fp32 output (logits) in one kernel, against torch.matmul(...).float() and, where torch has
    it, torch.mm(..., out_dtype=torch.float32); checked against an fp32 GEMM of the same inputs."""
    a, w = nt_inputs(M, N, K)
    row = {"case": f"f32out_bf16_nt_{M}x{N}x{K}", "dtype": "bf16", "layout": "nt", "epilogue": "f32out",
           "M": M, "N": N, "K": K}
    ref = torch.matmul(a.float(), w.float().t())
    row["torch_matmul_float_ms"] = time_cuda(lambda: torch.matmul(a, w.t()).float())
    try:
        torch.mm(a, w.t(), out_dtype=torch.float32)
        row["torch_mm_out_dtype_ms"] = time_cuda(lambda: torch.mm(a, w.t(), out_dtype=torch.float32))
    except Exception as e:  # an optional peer (recent torch only)
        row["torch_mm_out_dtype_error"] = str(e)[:200]
    with environ({"OPENDNN_GEMM_F32_OUT": "1"}):
        g = new_graph()
        A = g.tensor(name="a", dim=[1, M, K], stride=[M * K, K, 1], data_type=BF16)
        B = g.tensor(name="b", dim=[1, K, N], stride=[K * N, 1, K], data_type=BF16)
        out = g.matmul(A, B, name="mm")
        out.set_output(True).set_data_type(FP32)
        y = torch.full((M, N), float("nan"), device="cuda", dtype=torch.float32)
        run_and_check(g, {A: a, B: w.t(), out: y}, y, ref, row, "torch_matmul_float")
    return row


def bench_fp8_amax(M, N, K):
    """MATMUL_FP8 with amax_C (max |descale_A descale_B A.B|, before scale_C) as an output, against
    torch._scaled_mm followed by abs().amax() of its unscaled result."""
    row = {"case": f"fp8amax_e4m3_nt_{M}x{N}x{K}", "dtype": "fp8_e4m3", "layout": "nt", "epilogue": "amax",
           "M": M, "N": N, "K": K}
    a, w, scales, ref = fp8_inputs(M, N, K)

    def peer():
        d = torch._scaled_mm(a, w.t(), scales[0], scales[1], out_dtype=torch.bfloat16)
        return d * scales[2], d.abs().amax()

    try:
        want_amax = peer()[1].float().item()
        row["torch_scaled_mm_amax_ms"] = time_cuda(peer)
    except Exception as e:
        row["torch_scaled_mm_error"] = str(e)[:200]
        return row
    with environ({"OPENDNN_GEMM_FP8_AMAX": "1"}):
        got = torch.full((1,), float("nan"), device="cuda", dtype=torch.float32)
        g, pack, y = fp8_graph(M, N, K, a, w, scales, amax_out=got)
        if run_and_check(g, pack, y, ref, row, "torch_scaled_mm_amax") is not None:
            # the peer's amax is of a bf16-rounded result: within bf16 rounding of ours
            row["amax"], row["torch_amax"] = got.item(), want_amax
            row["amax_rel_err"] = abs(got.item() - want_amax) / max(abs(want_amax), 1e-30)
            row["correct"] = row["correct"] and row["amax_rel_err"] < TOL
    return row


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="a few shapes")
    ap.add_argument("--compile", action="store_true", help="also time torch.compile of GEMM + bias + GELU")
    ap.add_argument("--no-knobs", action="store_true", help="skip the swizzle x raster A/B grid")
    ap.add_argument("--targets", action="store_true",
                    help="only the rows the performance targets name (bf16 square and LLM shapes, bias + GELU, fp8; "
                         "each with the cudnn engine's and the router's pick), no plan or knob sweeps")
    ap.add_argument("--sweep", action="store_true",
                    help="only the plan sweep (every plan, candidates included) at 8192^3 and the 11008 shapes")
    args = ap.parse_args()
    if args.sweep:
        return sweep(args.no_knobs)
    cases = []
    if args.quick:
        cases += [(4096, 4096, 4096, "nn", "none"), (8192, 14336, 4096, "nt", "none"),
                  (8192, 14336, 4096, "nt", "bias_gelu")]
    else:
        cases += [(s, s, s, lay, "none") for s in (4096, 8192) for lay in ("nn", "nt")]
        cases += [(8192, n, k, "nt", "none") for n in LLM_DIMS for k in LLM_DIMS]
        cases += [(8192, n, 4096, "nt", "bias_gelu") for n in (4096, 11008, 14336)]
        cases += [(4096, 4096, 4096, "nn", "bias_gelu")]

    rows = []

    def add(row):
        rows.append(row)
        show(row)
        write_results("gemm", rows)  # after every case: a fault later keeps what was measured

    for M, N, K, layout, epi in cases:
        add(bench_bf16(M, N, K, layout, epi, args.compile))
    for M, N, K in ([(8192, 8192, 8192)] if args.quick else [(4096, 4096, 4096), (8192, 8192, 8192), (8192, 14336, 4096)]):
        add(bench_fp8(M, N, K))
        if args.targets:
            continue
        add(bench_fp8_plans(M, N, K))
        add(bench_fp8_amax(M, N, K))
    if args.targets:
        return report_wrong(rows)
    # The opt-in variants: SwiGLU's gate projection and fp32 logits.
    for M, N, K in ([(8192, 14336, 4096)] if args.quick else [(8192, 11008, 4096), (8192, 14336, 4096)]):
        add(bench_swiglu(M, N, K))
    for M, N, K in ([(8192, 14336, 4096)] if args.quick else [(8192, 14336, 4096), (8192, 32000, 4096)]):
        add(bench_f32out(M, N, K))
    # Every cuda plan selected explicitly, at its default knobs.
    plan_shapes = [(4096, 4096, 4096), (8192, 14336, 4096)]
    if not args.quick:
        plan_shapes = [(4096, 4096, 4096), (8192, 8192, 8192)] + [(8192, n, k) for n in LLM_DIMS for k in LLM_DIMS]
    for M, N, K in plan_shapes:
        add(bench_plans(M, N, K))
    for N in (14336,) if args.quick else LLM_DIMS:  # the fused epilogue, where pingpong should gain most
        add(bench_plans(8192, N, 4096, epilogue="bias_gelu"))
    # The tile scheduler's knobs, A/B in this run.
    knob_shapes = [] if args.no_knobs else [(8192, 14336, 4096)] + ([] if args.quick else [(8192, 8192, 8192), (8192, 11008, 4096)])
    for M, N, K in knob_shapes:
        for sw, ra in KNOB_GRID:
            add(bench_plans(M, N, K, {"OPENDNN_GEMM_SWIZZLE": str(sw), "OPENDNN_GEMM_RASTER": ra}, prefix="knobs"))
        summarize_knobs(rows, M, N, K)
    return report_wrong(rows)


def report_wrong(rows):
    bad = [r["case"] for r in rows if r.get("correct") is False]
    if bad:
        print("WRONG RESULTS:", ", ".join(bad))
        return 1
    return 0


# 8192x14336x4096 too: the cooperative kernel ran it at 1.24 ms as a row's only plan and at 1.46-1.53 ms as one of
# several timed one after the other, which the rotation should settle.
SWEEP_SHAPES = [(8192, 8192, 8192)] + [(8192, n, k) for n, k in ((11008, 4096), (4096, 11008), (11008, 11008),
                                                                 (11008, 14336), (14336, 11008), (14336, 4096))]


def sweep(no_knobs):
    """Every plan of the bf16 NT GEMM at the shapes furthest behind cuBLAS, at the default knobs and at the
    model's (OPENDNN_GEMM_KNOBS=model), bias + GELU at two of them, fp8 at 8192^3, and the swizzle x raster grid
    at 8192^3 and 8192x11008x4096: bench/results/gemm_sweep.json."""
    rows = []

    def add(row):
        rows.append(row)
        show(row)
        write_results("gemm_sweep", rows)

    for M, N, K in SWEEP_SHAPES:
        add(bench_plans(M, N, K))
        add(bench_plans(M, N, K, {"OPENDNN_GEMM_KNOBS": "model"}, prefix="model"))
    for N in (11008, 14336):
        add(bench_plans(8192, N, 4096, epilogue="bias_gelu"))
        add(bench_plans(8192, N, 4096, {"OPENDNN_GEMM_KNOBS": "model"}, prefix="model", epilogue="bias_gelu"))
    for promotion in (None, 8, 16):
        add(bench_fp8_plans(8192, 8192, 8192, promotion))
    for M, N, K in [] if no_knobs else [(8192, 8192, 8192), (8192, 11008, 4096)]:
        for sw, ra in KNOB_GRID:
            add(bench_plans(M, N, K, {"OPENDNN_GEMM_SWIZZLE": str(sw), "OPENDNN_GEMM_RASTER": ra}, prefix="knobs"))
        summarize_knobs(rows, M, N, K)
    for r in rows:  # one line per row but the knob grid's (KNOBS lines above): the winner and every plan
        if r["case"].startswith("knobs_"):
            continue
        plans = sorted((k[:-3], v) for k, v in r.items() if k.endswith("_ms") and not k.startswith(("torch", "opendnn")))
        print("SWEEP", r["case"], "winner", r.get("winner"), " ".join(f"{t}={v:.4f}" for t, v in plans),
              " ".join(f"{k}={v:.4f}" for k, v in r.items() if k.startswith("torch") and k.endswith("_ms")), flush=True)
    return report_wrong(rows)


if __name__ == "__main__":
    sys.exit(main())
