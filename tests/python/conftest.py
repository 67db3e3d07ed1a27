# SPDX-License-Identifier: Apache-2.0
"""Shared fixtures. The suite runs against the installed package (`pip install .`) or a development
build (PYTHONPATH=build-py/python). The reference engine runs single-threaded for stable timings."""

import os
import sys

import numpy as np
import pytest

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENDNN_TARGET", "cpu")

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

import opendnn  # noqa: E402


@pytest.fixture
def cudnn():
    return opendnn


@pytest.fixture
def rng():
    return np.random.default_rng(1234)


def build(graph, modes=None):
    graph.validate()
    graph.build_operation_graph()
    graph.create_execution_plans(modes or [opendnn.heur_mode.A, opendnn.heur_mode.FALLBACK])
    graph.check_support()
    graph.build_plans()
    return np.empty(graph.get_workspace_size(), np.uint8)


def float_graph(**kw):
    f = opendnn.data_type.FLOAT
    return opendnn.pygraph(io_data_type=f, intermediate_data_type=f, compute_data_type=f, **kw)
