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
from fit_sdpa_cost import off_picks, persistent_factor, samples  # noqa: E402

SOURCES = {  # pass: (our plan's costs, cuDNN's)
    "forward": (("src/engines/cuda/sdpa/sdpa_fwd_adapter.cpp", "kV2Cost"), ("src/engines/cudnn/cudnn_engine.cpp", "kSdpaFwdSm90")),
    "backward": (("src/engines/cuda/sdpa/sdpa_bwd_adapter.cpp", "kV2Cost"), ("src/engines/cudnn/cudnn_engine.cpp", "kSdpaBwdSm90")),
}


def tile_costs(path, name):
    """The three (tile, block, diag) triples of `constexpr cost::TileCost name[3] = {...};` in path."""
    text = (ROOT / path).read_text()
    m = re.search(r"TileCost\s+" + name + r"\[3\]\s*=\s*\{(.*?)\};", text, re.S)
    assert m, f"{name} not found in {path}"
    triples = re.findall(r"\{\s*([-\d.eE]+)\s*,\s*([-\d.eE]+)\s*,\s*([-\d.eE]+)\s*\}", m.group(1))
    assert len(triples) == 3, m.group(0)
    return [np.array([float(x) for x in t]) for t in triples]


@pytest.mark.parametrize("kind", ["forward", "backward"])
def test_picks_within_3_percent(kind):
    ours, cudnn = (tile_costs(*src) for src in SOURCES[kind])
    sets = [x for x in samples() if x[0] == kind]
    bad = []
    for _, d, rows, x, ours_us, cudnn_us, launch, persistent in sets:
        i = 0 if d <= 64 else 1 if d <= 128 else 2
        bad += off_picks(rows, x, ours_us, cudnn_us, launch, persistent_factor() if persistent else 1.0, ours[i], cudnn[i])
    assert sets and not bad, f"router picks more than 3% off the faster plan: {bad}"
