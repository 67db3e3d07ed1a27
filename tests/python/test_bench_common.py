# SPDX-License-Identifier: Apache-2.0
"""bench/common.py's result-file merge (a sweep finished over several device calls with --append)."""
import json
import pathlib
import sys

import pytest

pytest.importorskip("torch")  # bench/common.py times on the GPU through torch
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "bench"))
from common import with_kept_rows  # noqa: E402


def test_no_file_keeps_the_new_rows(tmp_path):
    rows = [{"case": "a", "ms": 1.0}]
    assert with_kept_rows(tmp_path / "none.json", rows) == rows


def test_replaces_in_place_keeps_the_rest_and_appends_new_cases(tmp_path):
    path = tmp_path / "r.json"
    path.write_text(json.dumps({"rows": [{"case": "a", "ms": 1.0}, {"case": "b", "ms": 2.0}, {"case": "c", "ms": 3.0}]}))
    got = with_kept_rows(path, [{"case": "d", "ms": 9.0}, {"case": "b", "ms": 0.5}])
    assert [r["case"] for r in got] == ["a", "b", "c", "d"]
    assert got[1]["ms"] == 0.5 and got[0]["ms"] == 1.0 and got[3]["ms"] == 9.0


def test_merging_twice_is_idempotent(tmp_path):
    path = tmp_path / "r.json"
    path.write_text(json.dumps({"rows": [{"case": "a", "ms": 1.0}, {"case": "b", "ms": 2.0}]}))
    once = with_kept_rows(path, [{"case": "b", "ms": 0.5}])
    path.write_text(json.dumps({"rows": once}))
    assert with_kept_rows(path, [{"case": "b", "ms": 0.5}]) == once
