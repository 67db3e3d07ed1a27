# SPDX-License-Identifier: Apache-2.0
"""Runs tests/distributed/ddp_train.py under torchrun: NCCL with one process per GPU (at most 2) where
CUDA GPUs exist, else 2 gloo processes on the CPU (the reference engine). Needs torch; skipped without.

    PYTHONPATH=<opendnn package> python -m pytest tests/distributed -q
"""

import os
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "ddp_train.py")


def _torchrun(nproc, *args, timeout=600):
    env = dict(os.environ, NCCL_NVLS_ENABLE="0", TORCH_SYMM_MEM_DISABLE_MULTICAST="1", NVSHMEM_DISABLE_NVLS="1",
               OMP_NUM_THREADS="1")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}", SCRIPT, *args]
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    assert r.returncode == 0, f"{' '.join(cmd)} failed:\n{r.stdout[-4000:]}\n{r.stderr[-8000:]}"
    assert "DDP-OK" in r.stdout, r.stdout[-4000:]
    print(r.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_ddp_nccl():
    _torchrun(min(2, torch.cuda.device_count()))


def test_ddp_gloo_cpu():
    _torchrun(2, "--cpu", "--steps", "3")
