# SPDX-License-Identifier: Apache-2.0
"""A fused pointwise chain on the GPU: y = bf16(gelu(x * scale + bias) * gate * out_scale), six
pointwise nodes (mul, add, gelu, mul, mul, identity-cast) with fp32 intermediates, bf16 x / gate / y
[M, N] and a [1, N] bf16 bias. opendnn's cuda engine runs the graph as ONE NVRTC-compiled kernel;
peers are torch eager (one kernel per op) and torch.compile (a fused Triton kernel), all in one
process on the same inputs. Writes bench/results/pointwise.json.

    python bench/pointwise.py [--quick] [--no-compile]

GB/s counts the bytes a perfect kernel moves (x, gate and y once, the bias once) and is compared
with the device's copy bandwidth.
"""
import argparse
import sys
import time

import torch
import torch.nn.functional as F

import opendnn as cudnn
from common import (add_speedups, copy_bandwidth_gbs, failure, new_graph, plan_on, poisoned, show, time_cuda,
                    write_results)

BF16 = cudnn.data_type.BFLOAT16
FP32 = cudnn.data_type.FLOAT
SCALE, OUT_SCALE = 0.125, 1.5


def build(M, N):
    """The chain planned on the cuda engine only: (graph, tensors, workspace, build seconds) or
    (None, reason, None, 0)."""
    g = new_graph()
    x = g.tensor(name="x", dim=[M, N], data_type=BF16)
    bias = g.tensor(name="bias", dim=[1, N], data_type=BF16)
    gate = g.tensor(name="gate", dim=[M, N], data_type=BF16)
    s = g.tensor_scalar(SCALE, FP32).set_dim([1, 1]).set_stride([1, 1])
    o = g.tensor_scalar(OUT_SCALE, FP32).set_dim([1, 1]).set_stride([1, 1])
    h = g.gelu(g.add(g.mul(x, s), bias))
    y = g.identity(g.mul(g.mul(h, gate), o))
    y.set_output(True).set_data_type(BF16)
    t0 = time.perf_counter()
    try:
        _, ws = plan_on(g, "cuda", heur_modes=[cudnn.heur_mode.OPENSOURCE])
    except Exception as e:  # a decline or a failed build: recorded in the row, never fatal
        return None, failure(e), None, 0.0
    return g, {"x": x, "bias": bias, "gate": gate, "y": y}, ws, time.perf_counter() - t0


def chain(x, bias, gate):
    return (F.gelu(x.float() * SCALE + bias.float()) * gate.float() * OUT_SCALE).to(torch.bfloat16)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="one shape")
    ap.add_argument("--no-compile", action="store_true", help="skip torch.compile")
    args = ap.parse_args()
    copy_gbs = copy_bandwidth_gbs()
    print(f"device copy bandwidth: {copy_gbs:.0f} GB/s")
    shapes = [(8192, 8192)] if args.quick else [(8192, 8192), (4096, 4096), (16384, 8192), (1024, 5120)]
    compiled = None if args.no_compile else torch.compile(chain)
    rows = []
    for M, N in shapes:
        torch.manual_seed(0)
        x = torch.randn(M, N, device="cuda", dtype=torch.bfloat16)
        bias = torch.randn(1, N, device="cuda", dtype=torch.bfloat16)
        gate = torch.randn(M, N, device="cuda", dtype=torch.bfloat16)
        ref = chain(x, bias, gate).float()
        nbytes = 3 * M * N * 2 + N * 2
        row = {"case": f"gelu_chain_{M}x{N}", "M": M, "N": N, "dtype": "bf16", "ops": 6, "bytes": nbytes}
        row["torch_ms"] = time_cuda(lambda: chain(x, bias, gate))
        if compiled is not None:
            try:
                out = compiled(x, bias, gate)
                row["torch_compile_max_err"] = (out.float() - ref).abs().max().item()
                row["torch_compile_ms"] = time_cuda(lambda: compiled(x, bias, gate))
            except Exception as e:  # an optional peer
                row["torch_compile_error"] = str(e)[:200]
        g, t, ws, build_s = build(M, N)
        if g is None:
            row["opendnn_declined"] = t
        else:
            row["opendnn_build_s"] = build_s
            y = poisoned(x)
            pack = {t["x"]: x, t["bias"]: bias, t["gate"]: gate, t["y"]: y}
            g.execute(pack, ws)
            torch.cuda.synchronize()
            err = (y.float() - ref).abs()
            # one bf16 rounding apart at most (fp32 math in both; the chain's last step rounds)
            row["max_err"] = err.max().item()
            row["correct"] = bool((err <= 2 ** -7 * ref.abs() + 1e-3).all().item())
            ms = time_cuda(lambda: g.execute(pack, ws))
            row.update({"opendnn_ms": ms, "gbs": nbytes / (ms * 1e-3) / 1e9})
            row["fraction_of_copy_bw"] = row["gbs"] / copy_gbs
            add_speedups(row, ("torch", "torch_compile"))
            if "torch_compile_ms" in row:
                row["torch_compile_gbs"] = nbytes / (row["torch_compile_ms"] * 1e-3) / 1e9
        rows.append(row)
        show(row)
    write_results("pointwise", rows, {"copy_bandwidth_gbs": copy_gbs})
    return 0 if all(r.get("correct", False) for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
