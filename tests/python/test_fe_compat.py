# SPDX-License-Identifier: Apache-2.0
"""A script written for cuDNN Frontend's Python API runs unchanged under `import opendnn as cudnn`."""

import importlib
import subprocess
import sys

import numpy as np
import pytest

import opendnn


@pytest.fixture
def script(monkeypatch):
    monkeypatch.setitem(sys.modules, "cudnn", opendnn)  # what `import cudnn` finds
    sys.modules.pop("fe_compat_script", None)
    return importlib.import_module("fe_compat_script")


def test_matmul_bias_relu(script):
    got, want = script.matmul_bias_relu(opendnn.create_handle())
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_rmsnorm(script):
    (y, inv_var), (ref_y, ref_inv) = script.rmsnorm(opendnn.create_handle())
    np.testing.assert_allclose(y, ref_y, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(inv_var, ref_inv, rtol=1e-5)


def test_causal_sdpa_bf16(script):
    (o, stats), (ref_o, ref_lse) = script.causal_sdpa(opendnn.create_handle())
    np.testing.assert_allclose(o, ref_o, atol=2e-2, rtol=2e-2)  # O is rounded to bf16
    np.testing.assert_allclose(stats, ref_lse, atol=1e-4, rtol=1e-4)


def test_script_runs_as_a_program(tmp_path):
    # The same file as a standalone program with `cudnn` resolving to opendnn.
    (tmp_path / "cudnn.py").write_text("from opendnn import *\nfrom opendnn import __version__\n")
    import os

    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path)] + sys.path))
    here = os.path.dirname(os.path.abspath(__file__))
    r = subprocess.run([sys.executable, os.path.join(here, "fe_compat_script.py")], capture_output=True, text=True,
                       env=env, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "causal_sdpa" in r.stdout
