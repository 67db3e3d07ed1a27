# SPDX-License-Identifier: Apache-2.0
"""The planning target of the Python GPU tests (imported by them; needs torch and a GPU)."""

import contextlib

import opendnn
import torch


@contextlib.contextmanager
def planning_target(kind):
    """Plans made inside are for GPU 0 ("cuda": its SM version and count) or the host ("cpu")."""
    before = opendnn.default_target()
    if kind == "cuda":
        major, minor = torch.cuda.get_device_capability(0)
        sms = torch.cuda.get_device_properties(0).multi_processor_count
        opendnn.set_default_target(opendnn.Target(opendnn.device_kind.CUDA, 0, major * 10 + minor, sms))
    else:
        opendnn.set_default_target(opendnn.Target(opendnn.device_kind.CPU, -1, 0, 0))
    try:
        yield
    finally:
        opendnn.set_default_target(before)
