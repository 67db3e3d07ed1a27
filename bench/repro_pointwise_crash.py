# SPDX-License-Identifier: Apache-2.0
"""Reproducer of an open bug: on the H200, planning bench/pointwise.py's chain inside a Python process that
imported torch crashes (segmentation fault in create_execution_plans), with every heuristic mode, even
OPENSOURCE (our engines only); the C++ GPU test of the same family and the CPU generator test pass.

    PYTHONPATH=build-gpu/python python3 -X faulthandler bench/repro_pointwise_crash.py [A|OPENSOURCE] [--copy]
    cuda-gdb -q -batch -ex run -ex bt --args python3 bench/repro_pointwise_crash.py OPENSOURCE   # native frame

--copy first runs the benchmark's device-copy bandwidth measurement (torch kernels), as pointwise.py does.
"""
import os
import sys

import torch  # noqa: F401  (part of the reproduction: the crash was seen only with torch loaded)

import opendnn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import copy_bandwidth_gbs, new_graph  # noqa: E402

mode = sys.argv[1] if len(sys.argv) > 1 else "OPENSOURCE"
if "--copy" in sys.argv:
    copy_bandwidth_gbs()
BF16, FP32 = opendnn.data_type.BFLOAT16, opendnn.data_type.FLOAT
g = new_graph()
M = N = 8192
x = g.tensor(name="x", dim=[M, N], data_type=BF16)
bias = g.tensor(name="bias", dim=[1, N], data_type=BF16)
gate = g.tensor(name="gate", dim=[M, N], data_type=BF16)
s = g.tensor_scalar(0.125, FP32).set_dim([1, 1]).set_stride([1, 1])
o = g.tensor_scalar(1.5, FP32).set_dim([1, 1]).set_stride([1, 1])
y = g.identity(g.mul(g.mul(g.gelu(g.add(g.mul(x, s), bias)), gate), o))
y.set_output(True).set_data_type(BF16)
g.validate()
g.build_operation_graph()
g.create_execution_plans([getattr(opendnn.heur_mode, mode)])
print("planned:", [g.get_plan_name_at_index(i) for i in range(g.get_execution_plan_count())])
