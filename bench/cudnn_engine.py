# SPDX-License-Identifier: Apache-2.0
"""cudnn engine vs torch, in one process: SDPA fwd and fwd+bwd (bf16, d128, B*S = 16k tokens, H*D = 2048,
S in 1k..16k, causal and not) against torch SDPA with the cuDNN backend forced; a bf16 GEMM against
torch.matmul (cuBLAS); an NHWC bf16 conv against torch's conv2d. Our plans are reached through the C ABI
in src/engines/cudnn/bench_c_api.cpp (ctypes on libopendnn.so; $OPENDNN_LIB or build*/libopendnn.so).
Every case is checked against torch's output in the same run. Writes bench/results/cudnn_engine.json
(+ .png) and copies under $OUT.

    python bench/cudnn_engine.py [--quick]
"""
import ctypes
import glob
import json
import math
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(__file__))
from common import plot, time_cuda  # noqa: E402


def load_lib():
    cands = [os.environ.get("OPENDNN_LIB", "")] + sorted(glob.glob(os.path.join(os.path.dirname(__file__), "..", "build*", "libopendnn.so")))
    for c in cands:
        if c and os.path.exists(c):
            lib = ctypes.CDLL(c)
            vp, i64, dbl, ci, cp = ctypes.c_void_p, ctypes.c_int64, ctypes.c_double, ctypes.c_int, ctypes.c_char_p
            pi64 = ctypes.POINTER(i64)
            lib.opendnn_cudnn_sdpa_plan.restype = vp
            lib.opendnn_cudnn_sdpa_plan.argtypes = [ci, i64, i64, i64, i64, ci, dbl, pi64, cp, ci]
            lib.opendnn_cudnn_matmul_plan.restype = vp
            lib.opendnn_cudnn_matmul_plan.argtypes = [i64, i64, i64, pi64, cp, ci]
            lib.opendnn_cudnn_conv_plan.restype = vp
            lib.opendnn_cudnn_conv_plan.argtypes = [i64] * 8 + [pi64, cp, ci]
            lib.opendnn_cudnn_execute.restype = ci
            lib.opendnn_cudnn_execute.argtypes = [vp, ctypes.POINTER(vp), vp, vp, cp, ci]
            lib.opendnn_cudnn_plan_name.restype = cp
            lib.opendnn_cudnn_plan_name.argtypes = [vp]
            lib.opendnn_cudnn_describe.restype = cp
            return lib, c
    raise SystemExit("libopendnn.so not found (set OPENDNN_LIB)")


LIB, LIB_PATH = load_lib()


class OurPlan:
    def __init__(self, handle, ws_bytes):
        self.h = handle
        self.ws = torch.empty(max(ws_bytes, 1), dtype=torch.uint8, device="cuda")
        self.err = ctypes.create_string_buffer(512)

    def bind(self, tensors):
        self.tensors = tensors  # keep alive
        self.ptrs = (ctypes.c_void_p * len(tensors))(*[t.data_ptr() for t in tensors])

    def __call__(self):
        s = torch.cuda.current_stream().cuda_stream
        rc = LIB.opendnn_cudnn_execute(self.h, self.ptrs, self.ws.data_ptr(), s, self.err, 512)
        if rc:
            raise RuntimeError(self.err.value.decode())

    @property
    def name(self):
        return LIB.opendnn_cudnn_plan_name(self.h).decode()


def make(fn, *args):
    ws = ctypes.c_int64(0)
    err = ctypes.create_string_buffer(2048)
    h = fn(*args, ctypes.byref(ws), err, 2048)
    if not h:
        raise RuntimeError(err.value.decode())
    return OurPlan(h, ws.value)


def close(a, b, tol):
    d = (a.float() - b.float()).abs().max().item()
    return d <= tol * max(1.0, b.float().abs().max().item()), d


def sdpa_cases(quick):
    rows = []
    HD, D, tokens = 2048, 128, 16384
    H = HD // D
    seqs = [1024, 4096] if quick else [1024, 2048, 4096, 8192, 16384]
    from torch.nn.attention import SDPBackend, sdpa_kernel

    for S in seqs:
        B = tokens // S
        for causal in (False, True):
            scale = 1.0 / math.sqrt(D)
            q, k, v, do = (torch.randn(B, S, H, D, device="cuda", dtype=torch.bfloat16).transpose(1, 2) for _ in range(4))
            case = f"sdpa B{B} H{H} S{S} d{D}{' causal' if causal else ''}"
            flops_f = 4.0 * B * H * S * S * D * (0.5 if causal else 1.0)
            try:
                fwd = make(LIB.opendnn_cudnn_sdpa_plan, 0, B, H, S, D, int(causal), scale)
                bwd = make(LIB.opendnn_cudnn_sdpa_plan, 1, B, H, S, D, int(causal), scale)
            except RuntimeError as e:
                rows.append({"case": case, "error": str(e)[:400]})
                print(case, "ERROR", str(e)[:400], flush=True)
                continue
            o = torch.empty_like(q)
            stats = torch.empty(B, H, S, 1, device="cuda", dtype=torch.float32)
            dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
            fwd.bind([q, k, v, o, stats])
            bwd.bind([q, k, v, o, do, stats, dq, dk, dv])
            # Correctness against torch (cuDNN backend) in the same run.
            qr, kr, vr = (t.detach().clone().requires_grad_(True) for t in (q, k, v))
            with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
                ref = F.scaled_dot_product_attention(qr, kr, vr, is_causal=causal, scale=scale)
                ref.backward(do)
            fwd()
            bwd_err = None
            try:
                bwd()
            except RuntimeError as e:
                bwd_err = str(e)[:300]
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

            t_of = time_cuda(fwd)
            t_tf = time_cuda(torch_fwd)
            modes = [("fwd", t_of, t_tf, flops_f, ok_o)]
            if bwd_err is None:
                t_ob = time_cuda(ours_fwdbwd)
                t_tb = time_cuda(torch_fwdbwd)
                modes.append(("fwd+bwd", t_ob, t_tb, 3.5 * flops_f, ok_o and ok_q and ok_k and ok_v))
            else:
                rows.append({"case": f"{case} fwd+bwd", "error": bwd_err})
            for mode, ours, peer, fl, ok in modes:
                r = {"case": f"{case} {mode}", "shape": [B, H, S, D], "causal": causal, "mode": mode,
                     "ours_ms": ours, "torch_cudnn_ms": peer, "tflops": fl / (ours * 1e-3) / 1e12,
                     "peer_tflops": fl / (peer * 1e-3) / 1e12, "speedup_vs_torch_cudnn": peer / ours,
                     "plan": (fwd.name if mode == "fwd" else fwd.name + " + " + bwd.name), "matches_torch": bool(ok),
                     "max_abs_err": {"O": e_o, "dQ": e_q, "dK": e_k, "dV": e_v}}
                rows.append(r)
                print(json.dumps(r), flush=True)
    return rows


def gemm_cases(quick):
    rows = []
    shapes = [(4096, 4096, 4096), (8192, 8192, 8192)] if not quick else [(4096, 4096, 4096)]
    for M, N, K in shapes:
        a = torch.randn(1, M, K, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(1, K, N, device="cuda", dtype=torch.bfloat16)
        c = torch.empty(1, M, N, device="cuda", dtype=torch.bfloat16)
        case = f"gemm {M}x{N}x{K} bf16"
        try:
            p = make(LIB.opendnn_cudnn_matmul_plan, M, N, K)
        except RuntimeError as e:
            rows.append({"case": case, "error": str(e)[:400]})
            continue
        p.bind([a, b, c])
        p()
        ok, err = close(c, torch.matmul(a, b), 2e-2)
        t_o = time_cuda(p)
        t_t = time_cuda(lambda: torch.matmul(a, b))
        fl = 2.0 * M * N * K
        r = {"case": case, "shape": [M, N, K], "ours_ms": t_o, "torch_cublas_ms": t_t, "tflops": fl / (t_o * 1e-3) / 1e12,
             "peer_tflops": fl / (t_t * 1e-3) / 1e12, "speedup_vs_torch_cublas": t_t / t_o, "plan": p.name,
             "matches_torch": bool(ok), "max_abs_err": err}
        rows.append(r)
        print(json.dumps(r), flush=True)
    return rows


def conv_cases(quick):
    rows = []
    shapes = [(32, 256, 56, 56, 256, 3, 1, 1)] if quick else [(32, 256, 56, 56, 256, 3, 1, 1), (64, 64, 112, 112, 128, 3, 1, 1)]
    for N, C, H, W, K, R, pad, stride in shapes:
        x = torch.randn(N, C, H, W, device="cuda", dtype=torch.bfloat16).to(memory_format=torch.channels_last)
        w = torch.randn(K, C, R, R, device="cuda", dtype=torch.bfloat16).to(memory_format=torch.channels_last)
        case = f"conv N{N} C{C} {H}x{W} K{K} r{R} bf16 nhwc"
        try:
            p = make(LIB.opendnn_cudnn_conv_plan, N, C, H, W, K, R, pad, stride)
        except RuntimeError as e:
            rows.append({"case": case, "error": str(e)[:400]})
            continue
        ref = F.conv2d(x, w, padding=pad, stride=stride)
        y = torch.empty_like(ref).to(memory_format=torch.channels_last)
        p.bind([x, w, y])
        p()
        ok, err = close(y, ref, 3e-2)
        t_o = time_cuda(p)
        t_t = time_cuda(lambda: F.conv2d(x, w, padding=pad, stride=stride))
        fl = 2.0 * ref.numel() * C * R * R
        r = {"case": case, "shape": [N, C, H, W, K, R, pad, stride], "ours_ms": t_o, "torch_conv_ms": t_t,
             "tflops": fl / (t_o * 1e-3) / 1e12, "peer_tflops": fl / (t_t * 1e-3) / 1e12,
             "speedup_vs_torch_conv": t_t / t_o, "plan": p.name, "matches_torch": bool(ok), "max_abs_err": err}
        rows.append(r)
        print(json.dumps(r), flush=True)
    return rows


def main():
    quick = "--quick" in sys.argv
    torch.backends.cudnn.benchmark = True
    props = torch.cuda.get_device_properties(0)
    env = {"device": props.name, "sm_count": props.multi_processor_count, "torch": torch.__version__,
           "torch_cudnn": torch.backends.cudnn.version(), "cuda": torch.version.cuda,
           "opendnn_cudnn": LIB.opendnn_cudnn_describe().decode(), "libopendnn": LIB_PATH}
    print(json.dumps(env), flush=True)
    rows = []
    for f in (gemm_cases, conv_cases, sdpa_cases):
        try:
            rows += f(quick)
        except Exception as e:  # keep what was measured
            rows.append({"case": f.__name__, "error": repr(e)[:400]})
            print("ERROR", f.__name__, repr(e), flush=True)
    doc = {"benchmark": "cudnn_engine", "environment": env, "rows": rows,
           "command": "python bench/cudnn_engine.py" + (" --quick" if quick else "")}
    dirs = [os.path.join(os.path.dirname(__file__), "results")]
    if os.environ.get("OUT"):
        dirs.append(os.environ["OUT"])
    for d in dirs:
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "cudnn_engine.json"), "w") as fh:
            json.dump(doc, fh, indent=1)
        try:
            plot(doc, os.path.join(d, "cudnn_engine.png"))
        except Exception as e:
            print("plot failed", e)


if __name__ == "__main__":
    main()
