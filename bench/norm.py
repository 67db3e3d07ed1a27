# SPDX-License-Identifier: Apache-2.0
"""RMSNorm / LayerNorm forward and backward on the GPU: opendnn's cuda engine against torch eager
and cuDNN's norms (through opendnn's cudnn engine), bf16, LLM shapes. Writes bench/results/norm.json.

    python bench/norm.py [--quick]
"""
import argparse
import sys

import torch
import torch.nn.functional as F

import opendnn as cudnn
from common import copy_bandwidth_gbs, time_cuda, write_results

BF16 = cudnn.data_type.BFLOAT16
FP32 = cudnn.data_type.FLOAT


def build(kind, backward, T, H, engine):
    """A one-node norm graph planned on `engine` only; returns (graph, tensors) or None if declined."""
    g = cudnn.pygraph(io_data_type=BF16, intermediate_data_type=FP32, compute_data_type=FP32)
    x = g.tensor(name="x", dim=[T, H, 1, 1], stride=[H, 1, 1, 1], data_type=BF16)
    w = g.tensor(name="w", dim=[1, H, 1, 1], stride=[H, 1, 1, 1], data_type=BF16)
    t = {"x": x, "w": w}
    if kind == "layernorm":
        t["b"] = g.tensor(name="b", dim=[1, H, 1, 1], stride=[H, 1, 1, 1], data_type=BF16)
    if not backward:
        t["eps"] = g.tensor(name="eps", dim=[1, 1, 1, 1], stride=[1, 1, 1, 1], data_type=FP32, is_pass_by_value=True)
        if kind == "rmsnorm":
            y, iv = g.rmsnorm(norm_forward_phase=cudnn.norm_forward_phase.TRAINING, input=x, scale=w, epsilon=t["eps"])
        else:
            y, mean, iv = g.layernorm(norm_forward_phase=cudnn.norm_forward_phase.TRAINING, input=x, scale=w,
                                      bias=t["b"], epsilon=t["eps"])
            t["mean"] = mean.set_output(True).set_data_type(FP32)
        t["y"] = y.set_output(True)
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
    g.validate()
    g.build_operation_graph()
    g.create_execution_plans([cudnn.heur_mode.A])
    others = [e for e in ("cuda", "cudnn", "reference") if e != engine]
    g.deselect_engines(others)
    try:
        g.check_support()
        g.build_plans()
    except cudnn.cudnnGraphNotSupportedError as e:
        print(f"  {engine} declines {kind} {'bwd' if backward else 'fwd'} {T}x{H}: {str(e)[:120]}")
        return None
    return g, t


def run_case(kind, backward, T, H, copy_gbs, engines):
    torch.manual_seed(0)
    x = torch.randn(T, H, device="cuda", dtype=torch.bfloat16)
    w = torch.rand(1, H, device="cuda", dtype=torch.bfloat16) + 0.5
    b = torch.randn(1, H, device="cuda", dtype=torch.bfloat16)
    eps = 1e-5
    xf = x.float()
    if kind == "rmsnorm":
        iv = torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
        mean = torch.zeros_like(iv)
        ref_y = (xf * iv * w.float())
    else:
        mean = xf.mean(-1, keepdim=True)
        iv = torch.rsqrt(xf.var(-1, unbiased=False, keepdim=True) + eps)
        ref_y = (xf - mean) * iv * w.float() + b.float()
    dy = torch.randn_like(x)

    def torch_fwd():
        if kind == "rmsnorm":
            return F.rms_norm(x, (H,), w.view(H), eps)
        return F.layer_norm(x, (H,), w.view(H), b.view(H), eps)

    xg = x.detach().clone().requires_grad_(True)
    wg = w.view(H).detach().clone().requires_grad_(True)
    bg = b.view(H).detach().clone().requires_grad_(True)
    out_t = F.rms_norm(xg, (H,), wg, eps) if kind == "rmsnorm" else F.layer_norm(xg, (H,), wg, bg, eps)

    def torch_bwd():
        return torch.autograd.grad(out_t, [xg, wg] + ([bg] if kind == "layernorm" else []), dy, retain_graph=True)

    peer_fn = torch_bwd if backward else torch_fwd
    row = {"case": f"{kind}_{'bwd' if backward else 'fwd'}_{T}x{H}", "op": kind, "pass": "bwd" if backward else "fwd",
           "tokens": T, "hidden": H, "dtype": "bf16"}
    nbytes = T * H * 2 * (3 if backward else 2)
    row["torch_ms"] = time_cuda(peer_fn)
    results = {}
    for engine in engines:
        built = build(kind, backward, T, H, engine)
        if built is None:
            continue
        g, t = built
        ws = torch.empty(max(1, g.get_workspace_size()), dtype=torch.uint8, device="cuda")
        if not backward:
            y = torch.empty_like(x)
            ivo = torch.empty(T, 1, device="cuda", dtype=torch.float32)
            pack = {t["x"]: x, t["w"]: w, t["eps"]: torch.full((1, 1, 1, 1), eps, dtype=torch.float32), t["y"]: y, t["iv"]: ivo}
            if kind == "layernorm":
                meano = torch.empty(T, 1, device="cuda", dtype=torch.float32)
                pack.update({t["b"]: b, t["mean"]: meano})
        else:
            dx = torch.empty_like(x)
            dw = torch.empty_like(w)
            pack = {t["x"]: x, t["w"]: w, t["dy"]: dy, t["iv"]: iv.contiguous(), t["dx"]: dx, t["dw"]: dw}
            if kind == "layernorm":
                db = torch.empty_like(w)
                pack.update({t["mean"]: mean.contiguous(), t["db"]: db})
        ms = time_cuda(lambda: g.execute(pack, ws))
        # Check against torch's float32 computation in the same run.
        if not backward:
            err = ((y.float() - ref_y).norm() / ref_y.norm()).item()
        else:
            ref = torch_bwd()
            err = max(((dx.float() - ref[0].float()).norm() / ref[0].float().norm()).item(),
                      ((dw.view(H).float() - ref[1].float()).norm() / ref[1].float().norm()).item())
        results[engine] = (ms, err)
    if "cuda" in results:
        ms, err = results["cuda"]
        row.update({"opendnn_ms": ms, "rel_err": err, "gbs": nbytes / (ms * 1e-3) / 1e9})
        row["fraction_of_copy_bw"] = row["gbs"] / copy_gbs
        row["speedup_vs_torch"] = row["torch_ms"] / ms
        if "cudnn" in results:
            row["cudnn_ms"] = results["cudnn"][0]
            row["speedup_vs_cudnn"] = results["cudnn"][0] / ms
    return row


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--with-cudnn", action="store_true",
                    help="also time cuDNN's norms through the cudnn engine (a separate run: a failing peer must not lose our rows)")
    args = ap.parse_args()
    copy_gbs = copy_bandwidth_gbs()
    print(f"device copy bandwidth: {copy_gbs:.0f} GB/s")
    shapes = [(8192, 4096), (32768, 8192)] if args.quick else [(T, H) for T in (8192, 16384, 32768) for H in (4096, 8192)]
    rows = []
    for kind in ("rmsnorm", "layernorm"):
        for backward in (False, True):
            for T, H in shapes:
                r = run_case(kind, backward, T, H, copy_gbs, ("cuda", "cudnn") if args.with_cudnn else ("cuda",))
                rows.append(r)
                print(" ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in r.items()), flush=True)
    write_results("norm", rows, {"copy_bandwidth_gbs": copy_gbs})


if __name__ == "__main__":
    sys.exit(main())
