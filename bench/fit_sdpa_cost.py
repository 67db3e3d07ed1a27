# SPDX-License-Identifier: Apache-2.0
"""Refits the router's SDPA tile costs (src/plan/attention_cost.h) from the result files and reports, in
sample, how far each estimate is from the measured time and where the cheaper estimate is not the faster
plan (by more than 3%). Ours: kV2Cost in src/engines/cuda/sdpa/sdpa_{fwd,bwd}_adapter.cpp; cuDNN's:
kSdpaFwdSm90 / kSdpaBwdSm90 in src/engines/cudnn/cudnn_engine.cpp.

    python bench/fit_sdpa_cost.py   (numpy only; no GPU)

Forward: every head dim of sdpa.json (opendnn_ms of the default plan, cudnn_engine_ms of cuDNN's). Backward:
the sdpa_bwd.json rows that carry cudnn_engine_ms. Least squares in relative error with tile >= 0,
block >= 0 and block + diagonal >= 0 (no visible block costs less than nothing)."""
import itertools
import json
import os

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROWS = 128  # the model's tile height (attention_cost.h)


def features(b, h, sq, skv, causal, keys_resident, sms=132):
    """(tiles, blocks, diagonal blocks) per SM lane, as attention_us weighs them."""
    nq, nkv = -(-sq // ROWS), -(-skv // ROWS)
    blocks, diag = float(nq * nkv), 0.0
    if causal:
        blocks = 0.0
        for i in range(nq):
            n = -(-min(min(sq, (i + 1) * ROWS), skv) // ROWS)
            blocks, diag = blocks + n, diag + (n > 0)
    tiles = nkv if keys_resident else nq
    f = b * h / min(max(b * h * tiles, 1), sms)
    return np.array([f * tiles, f * blocks, f * diag])


def nnls(a, t):
    """Non-negative least squares by enumerating the active sets (three unknowns)."""
    best = None
    for k in range(1, a.shape[1] + 1):
        for sub in itertools.combinations(range(a.shape[1]), k):
            c = np.linalg.lstsq(a[:, sub], t, rcond=None)[0]
            if (c >= 0).all():
                full = np.zeros(a.shape[1])
                full[list(sub)] = c
                r = float(np.sum((a @ full - t) ** 2))
                best = best if best and best[1] <= r else (full, r)
    return best[0]


def fit(x, y_us, launch, factor=1.0):
    """(tile, block, diag) such that factor * (launch + x . c) ~ y, with block + diag >= 0."""
    z = np.stack([x[:, 0], x[:, 1] - x[:, 2], x[:, 2]], 1)  # diag' = block + diag >= 0
    target = y_us / factor
    c = nnls(z / target[:, None], (target - launch) / target)
    return np.array([c[0], c[1], c[2] - c[1]])


def report(label, rows, x, ours_us, cudnn_us, launch, factor):
    co, cc = fit(x, ours_us, launch, factor), fit(x, cudnn_us, launch)
    eo = factor * (launch + x @ co)
    ec = launch + x @ cc
    off = [(r["case"], round(min(o, c) / (o if a <= b else c), 3))
           for r, o, c, a, b in zip(rows, ours_us, cudnn_us, eo, ec) if min(o, c) / (o if a <= b else c) < 0.97]
    print(f"{label}: ours {np.round(co, 3).tolist()} (max error {np.max(np.abs(eo / ours_us - 1)):.2f}), "
          f"cuDNN {np.round(cc, 3).tolist()} (max error {np.max(np.abs(ec / cudnn_us - 1)):.2f}); picks off by > 3%: {off}")


def main():
    fwd = json.load(open(os.path.join(HERE, "results", "sdpa.json")))["rows"]
    for d in (64, 128, 256):
        rows = [r for r in fwd if f"_d{d}" in r["case"] and r.get("cudnn_engine_ms")]
        if not rows:
            continue
        x = np.array([features(16384 // s, 2048 // d, s, s, r["case"].endswith("causal"), False)
                      for r in rows for s in [int(r["case"].split("_S")[1].split("_")[0])]])
        factor = 0.9 if "persistent" in rows[0].get("plan", "") else 1.0  # the persistent plan's estimate
        report(f"forward d{d}", rows, x, np.array([r["opendnn_ms"] for r in rows]) * 1e3,
               np.array([r["cudnn_engine_ms"] for r in rows]) * 1e3, 5.0, factor)
    bwd = json.load(open(os.path.join(HERE, "results", "sdpa_bwd.json")))["rows"]
    for d in (64, 128, 256):
        rows = [r for r in bwd if r.get("head_dim") == d and r.get("cudnn_engine_ms")]
        if not rows:
            continue
        x = np.array([features(r["batch"], r["heads"], r["seq"], r["seq"], r["causal"], True) for r in rows])
        report(f"backward d{d}", rows, x, np.array([r["opendnn_ms"] for r in rows]) * 1e3,
               np.array([r["cudnn_engine_ms"] for r in rows]) * 1e3, 10.0, 1.0)


if __name__ == "__main__":
    main()
