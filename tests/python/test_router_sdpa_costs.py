# SPDX-License-Identifier: Apache-2.0
"""The router's SDPA tile costs in the source against the committed H200 results (issue 7: the router picks,
at each benchmark shape, a plan within 3% of the faster of ours and cuDNN's). At every row of
bench/results/sdpa.json and sdpa_bwd.json that timed both engines, the plan with the cheaper estimate must be
the faster one or within 3% of it. When new results break this, refit with bench/fit_sdpa_cost.py."""
import json
import pathlib
import re
import sys

import pytest

np = pytest.importorskip("numpy")

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))
from fit_sdpa_cost import features  # noqa: E402


def tile_costs(path, name):
    """The three (tile, block, diag) triples of `constexpr cost::TileCost name[3] = {...};` in path."""
    text = (ROOT / path).read_text()
    m = re.search(r"TileCost\s+" + name + r"\[3\]\s*=\s*\{(.*?)\};", text, re.S)
    assert m, f"{name} not found in {path}"
    triples = re.findall(r"\{\s*([-\d.eE]+)\s*,\s*([-\d.eE]+)\s*,\s*([-\d.eE]+)\s*\}", m.group(1))
    assert len(triples) == 3, m.group(0)
    return [np.array([float(x) for x in t]) for t in triples]


def persistent_factor():
    text = (ROOT / "src/engines/cuda/sdpa/sdpa_fwd_adapter.cpp").read_text()
    return float(re.search(r"kPersistentFactor\s*=\s*([\d.]+)", text).group(1))


def off_picks(rows, x, ours_cost, cudnn_cost, launch, factor):
    bad = []
    for r, xi in zip(rows, x):
        ours, cudnn = r["opendnn_ms"], r["cudnn_engine_ms"]
        pick = ours if factor * (launch + xi @ ours_cost) <= launch + xi @ cudnn_cost else cudnn
        if min(ours, cudnn) / pick < 0.97:
            bad.append((r["case"], round(min(ours, cudnn) / pick, 3)))
    return bad


def index_of(d):
    return 0 if d <= 64 else 1 if d <= 128 else 2


def test_forward_picks():
    rows = [r for r in json.loads((ROOT / "bench/results/sdpa.json").read_text())["rows"] if r.get("cudnn_engine_ms")]
    ours, cudnn = (tile_costs("src/engines/cuda/sdpa/sdpa_fwd_adapter.cpp", "kV2Cost"),
                   tile_costs("src/engines/cudnn/cudnn_engine.cpp", "kSdpaFwdSm90"))
    bad = []
    for d in (64, 128, 256):
        rs = [r for r in rows if f"_d{d}" in r["case"]]
        x = [features(16384 // s, 2048 // d, s, s, r["case"].endswith("causal"), False)
             for r in rs for s in [int(r["case"].split("_S")[1].split("_")[0])]]
        factor = persistent_factor() if rs and "persistent" in rs[0].get("plan", "") else 1.0
        bad += off_picks(rs, x, ours[index_of(d)], cudnn[index_of(d)], 5.0, factor)
    assert rows and not bad, f"router picks more than 3% off the faster plan: {bad}"


def test_backward_picks():
    rows = [r for r in json.loads((ROOT / "bench/results/sdpa_bwd.json").read_text())["rows"] if r.get("cudnn_engine_ms")]
    ours, cudnn = (tile_costs("src/engines/cuda/sdpa/sdpa_bwd_adapter.cpp", "kV2Cost"),
                   tile_costs("src/engines/cudnn/cudnn_engine.cpp", "kSdpaBwdSm90"))
    bad = []
    for r in rows:
        x = [features(r["batch"], r["heads"], r["seq"], r["seq"], r["causal"], True)]
        i = index_of(r["head_dim"])
        bad += off_picks([r], x, ours[i], cudnn[i], 10.0, 1.0)
    assert rows and not bad, f"router picks more than 3% off the faster plan: {bad}"
