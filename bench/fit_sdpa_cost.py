# SPDX-License-Identifier: Apache-2.0
"""Refits the router's SDPA tile costs (src/plan/attention_cost.h) from the result files and reports, in
sample, how far each estimate is from the measured time and where the cheaper estimate is not the faster
plan (by more than 3%). Ours: kV2Cost in src/engines/cuda/sdpa/sdpa_{fwd,bwd}_adapter.cpp; cuDNN's:
kSdpaFwdSm90 / kSdpaBwdSm90 in src/engines/cudnn/cudnn_engine.cpp.

    python bench/fit_sdpa_cost.py   (numpy only; no GPU)

Forward: every head dim of sdpa.json (opendnn_ms of the default plan, cudnn_engine_ms of cuDNN's). Backward:
the sdpa_bwd.json rows that carry cudnn_engine_ms. Least squares in relative error with tile >= 0,
block >= 0 and block + diagonal >= 0 (no visible block costs less than nothing), the rows picked wrong
weighed up until the picks are right."""
import itertools
import json
import os
import re

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


def fit(x, y_us, launch, factor=1.0, weight=None):
    """(tile, block, diag) such that factor * (launch + x . c) ~ y, with block + diag >= 0; weight: per row."""
    z = np.stack([x[:, 0], x[:, 1] - x[:, 2], x[:, 2]], 1)  # diag' = block + diag >= 0
    target = y_us / factor
    w = np.ones(len(target)) if weight is None else weight
    c = nnls(z / target[:, None] * w[:, None], (target - launch) / target * w)
    return np.array([c[0], c[1], c[2] - c[1]])


def persistent_factor():
    """kPersistentFactor in sdpa_fwd_adapter.cpp, read from the source: the persistent plan's estimate is the v2
    estimate times this."""
    text = open(os.path.join(HERE, "..", "src", "engines", "cuda", "sdpa", "sdpa_fwd_adapter.cpp")).read()
    return float(re.search(r"kPersistentFactor\s*=\s*([\d.]+)", text).group(1))


def samples():
    """(pass, head dim, rows, features, ours us, cuDNN us, launch us, persistent) per head dim and pass, from
    the result files' rows that timed both engines."""
    out = []
    fwd = json.load(open(os.path.join(HERE, "results", "sdpa.json")))["rows"]
    for d in (64, 128, 256):
        rows = [r for r in fwd if f"_d{d}" in r["case"] and r.get("cudnn_engine_ms")]
        x = [features(16384 // s, 2048 // d, s, s, r["case"].endswith("causal"), False)
             for r in rows for s in [int(r["case"].split("_S")[1].split("_")[0])]]
        out.append(("forward", d, rows, x, 5.0, bool(rows) and "persistent" in rows[0].get("plan", "")))
    bwd = json.load(open(os.path.join(HERE, "results", "sdpa_bwd.json")))["rows"]
    for d in (64, 128, 256):
        rows = [r for r in bwd if r.get("head_dim") == d and r.get("cudnn_engine_ms")]
        x = [features(r["batch"], r["heads"], r["seq"], r["seq"], r["causal"], True) for r in rows]
        out.append(("backward", d, rows, x, 10.0, False))
    return [(p, d, rows, np.array(x), np.array([r["opendnn_ms"] for r in rows]) * 1e3,
             np.array([r["cudnn_engine_ms"] for r in rows]) * 1e3, launch, persistent)
            for p, d, rows, x, launch, persistent in out if rows]


def off_picks(rows, x, ours_us, cudnn_us, launch, factor, ours_cost, cudnn_cost):
    """(case, faster time / picked time) where the cheaper estimate's plan is more than 3% slower."""
    eo, ec = factor * (launch + x @ ours_cost), launch + x @ cudnn_cost
    ratio = np.minimum(ours_us, cudnn_us) / np.where(eo <= ec, ours_us, cudnn_us)
    return [(r["case"], round(float(q), 3)) for r, q in zip(rows, ratio) if q < 0.97]


def main():
    for p, d, rows, x, ours_us, cudnn_us, launch, persistent in samples():
        factor = persistent_factor() if persistent else 1.0
        # Near a crossover the two fits' errors (up to ~10%) can flip the pick: weigh the rows picked wrong
        # more and refit both, a few rounds.
        w, cases = np.ones(len(rows)), [r["case"] for r in rows]
        for _ in range(6):
            co, cc = fit(x, ours_us, launch, factor, w), fit(x, cudnn_us, launch, 1.0, w)
            off = off_picks(rows, x, ours_us, cudnn_us, launch, factor, co, cc)
            if not off:
                break
            for case, _ in off:
                w[cases.index(case)] *= 3
        eo, ec = factor * (launch + x @ co), launch + x @ cc
        print(f"{p} d{d}: ours {np.round(co, 3).tolist()} (max error {np.max(np.abs(eo / ours_us - 1)):.2f}), "
              f"cuDNN {np.round(cc, 3).tolist()} (max error {np.max(np.abs(ec / cudnn_us - 1)):.2f}); "
              f"picks off by > 3%: {off_picks(rows, x, ours_us, cudnn_us, launch, factor, co, cc)}")


if __name__ == "__main__":
    main()
