# SPDX-License-Identifier: Apache-2.0
"""GEMM on the GPU: opendnn's cuda engine (CUTLASS sm90 kernels with fused epilogues) against
torch.matmul (cuBLAS), torch doing GEMM + bias + GELU as separate kernels (and, with --compile,
torch.compile of it) and torch._scaled_mm for fp8 e4m3 (per-tensor scales, bf16 out), all in one
process on the same inputs. Writes bench/results/gemm.json (+ .png).

    python bench/gemm.py [--quick] [--compile]

Layouts: "nn" is torch.matmul(a, b) with b [K, N] contiguous; "nt" is F.linear(x, w), w [N, K]
contiguous (B column-major, the layout of nn.Linear weights). Each result is checked against torch's
own output in the same run (relative Frobenius error).
"""
import argparse
import sys

import torch
import torch.nn.functional as F

import opendnn as cudnn
from common import add_speedups, failure, new_graph, plan_on, rel_err, show, time_cuda, write_results

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


def run_and_check(g, pack, y, ref, row, peer_name):
    """Plans `g` on the cuda engine, runs it once into `y` (poisoned), checks it against `ref` and
    times it; fills the row and returns our median ms, or None with the decline in the row."""
    try:
        row["plan"], ws = plan_on(g, "cuda")
    except Exception as e:  # a decline or a failed build: recorded in the row, never fatal
        row["opendnn_declined"] = failure(e)
        return None
    g.execute(pack, ws)
    torch.cuda.synchronize()
    row["rel_err"] = rel_err(y, ref)
    row["correct"] = row["rel_err"] < TOL
    ms = time_cuda(lambda: g.execute(pack, ws))
    row["opendnn_ms"] = ms
    row["opendnn_tflops"] = 2.0 * row["M"] * row["N"] * row["K"] / (ms * 1e-3) / 1e12
    add_speedups(row, (peer_name, "torch_compile"))
    return ms


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
    row[peer_name + "_ms"] = time_cuda(peer)
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
    run_and_check(g, pack, y, ref, row, peer_name)
    return row


def bench_fp8(M, N, K):
    """fp8 e4m3 GEMM with per-tensor scales and a bf16 output against torch._scaled_mm."""
    row = {"case": f"fp8_e4m3_nt_{M}x{N}x{K}", "dtype": "fp8_e4m3", "layout": "nt", "epilogue": "none",
           "M": M, "N": N, "K": K}
    torch.manual_seed(0)
    a = torch.randn(M, K, device="cuda").to(torch.float8_e4m3fn)
    w = torch.randn(N, K, device="cuda").to(torch.float8_e4m3fn)
    scales = [torch.tensor(v, device="cuda", dtype=torch.float32) for v in (0.5, 0.25, 1.0 / K**0.5)]

    def peer():
        return torch._scaled_mm(a, w.t(), scales[0], scales[1], out_dtype=torch.bfloat16) * scales[2]

    def peer_gemm_only():  # scale_C folded into a scale, one kernel, the fair peer
        return torch._scaled_mm(a, w.t(), scales[0], scales[1] * scales[2], out_dtype=torch.bfloat16)

    ref = peer()
    try:
        row["torch_scaled_mm_ms"] = time_cuda(peer_gemm_only)
    except Exception as e:
        row["torch_scaled_mm_error"] = str(e)[:200]
        return row
    g = new_graph()
    A = g.tensor(name="a", dim=[1, M, K], stride=[M * K, K, 1], data_type=cudnn.data_type.FP8_E4M3)
    B = g.tensor(name="b", dim=[1, K, N], stride=[K * N, 1, K], data_type=cudnn.data_type.FP8_E4M3)
    s = [g.tensor(name=n, dim=[1, 1, 1], stride=[1, 1, 1], data_type=FP32) for n in ("da", "db", "sc")]
    c, amax = g.matmul_fp8(A, B, *s)
    c.set_output(True).set_data_type(BF16)
    amax.set_data_type(FP32)  # left virtual: the cuda plan does not compute amax
    y = torch.full((M, N), float("nan"), device="cuda", dtype=torch.bfloat16)
    pack = {A: a, B: w, c: y, s[0]: scales[0], s[1]: scales[1], s[2]: scales[2]}
    run_and_check(g, pack, y, ref, row, "torch_scaled_mm")
    return row


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="a few shapes")
    ap.add_argument("--compile", action="store_true", help="also time torch.compile of GEMM + bias + GELU")
    args = ap.parse_args()
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
    for M, N, K, layout, epi in cases:
        rows.append(bench_bf16(M, N, K, layout, epi, args.compile))
        show(rows[-1])
        write_results("gemm", rows)  # after every case: a fault later keeps what was measured
    for M, N, K in ([(8192, 8192, 8192)] if args.quick else [(4096, 4096, 4096), (8192, 8192, 8192), (8192, 14336, 4096)]):
        rows.append(bench_fp8(M, N, K))
        show(rows[-1])
    write_results("gemm", rows)
    bad = [r["case"] for r in rows if r.get("correct") is False]
    if bad:
        print("WRONG RESULTS:", ", ".join(bad))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
