# SPDX-License-Identifier: Apache-2.0
"""Host overhead of graph.execute() from Python over the C++ hot path.

For a tiny graph on the reference engine, times N calls of ``graph.execute(pack, workspace)`` from a
Python loop and N calls of ``Graph::execute(slot_pointers, ...)`` in a C++ loop (``_C._bench_execute_cpp``:
slots resolved once), interleaved R times; the overhead is the per-call difference (median over the
R pairs, and the minimum). Also reports the dict -> slot conversion alone (``_C._bench_fill_slots``).

    PYTHONPATH=build-py/python python bench/host_overhead.py  # or after `pip install .`
Writes bench/results/host_overhead.json.
"""

import argparse
import json
import os
import platform
import statistics
import sys
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")  # the reference engine's own threading is not measured here
os.environ.setdefault("OPENDNN_TARGET", "cpu")

import numpy as np  # noqa: E402

import opendnn  # noqa: E402

F = opendnn.data_type.FLOAT


def tiny_graph(kind):
    g = opendnn.pygraph(io_data_type=F, intermediate_data_type=F, compute_data_type=F)
    x = g.tensor(name="x", dim=[1, 8], data_type=F)
    y = g.tensor(name="y", dim=[1, 8], data_type=F)
    if kind == "add":
        z = g.add(x, y)
        ts = [x, y, z]
    else:  # four inputs, one output: relu(x*y + b) + c
        b = g.tensor(name="b", dim=[1, 8], data_type=F)
        c = g.tensor(name="c", dim=[1, 8], data_type=F)
        z = g.add(g.relu(g.add(g.mul(x, y), b)), c)
        ts = [x, y, b, c, z]
    z.set_output(True)
    g.build([opendnn.heur_mode.A, opendnn.heur_mode.FALLBACK])
    ws = np.empty(g.get_workspace_size(), np.uint8) if g.get_workspace_size() else None
    arrays = [np.ones((1, 8), np.float32) for _ in ts]
    return g, ts, arrays, ws


def measure(g, pack, ws, n, reps):
    rows = []
    execute = g.execute
    for _ in range(reps):
        t0 = time.perf_counter_ns()
        for _ in range(n):
            execute(pack, ws)
        py = (time.perf_counter_ns() - t0) / n / 1e3
        cpp = opendnn._C._bench_execute_cpp(g, pack, ws, n) / 1e3
        rows.append((py, cpp))
    fill = min(opendnn._C._bench_fill_slots(g, pack, n) for _ in range(3)) / 1e3
    diffs = [p - c for p, c in rows]
    return {
        "python_execute_us_median": statistics.median(p for p, _ in rows),
        "cpp_execute_us_median": statistics.median(c for _, c in rows),
        "overhead_us_median": statistics.median(diffs),
        "overhead_us_min": min(diffs),
        "python_execute_us_min": min(p for p, _ in rows),
        "cpp_execute_us_min": min(c for _, c in rows),
        "dict_to_slots_us": fill,
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-n", type=int, default=20000, help="calls per timing")
    ap.add_argument("-r", type=int, default=15, help="interleaved repetitions")
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "results",
                                                   "host_overhead.json"))
    ap.add_argument("--quick", action="store_true", help="fewer calls and repetitions (-n 5000 -r 5)")
    args = ap.parse_args()
    if args.quick:
        args.n, args.r = min(args.n, 5000), min(args.r, 5)
    cases = []
    for kind in ("add", "pointwise_chain"):
        g, ts, arrays, ws = tiny_graph(kind)
        for key_kind in ("tensors", "uids"):
            keys = ts if key_kind == "tensors" else [t.get_uid() for t in ts]
            pack = dict(zip(keys, arrays))
            for _ in range(1000):  # warm-up
                g.execute(pack, ws)
            r = measure(g, pack, ws, args.n, args.r)
            r.update({"graph": kind, "variant_pack_keys": key_kind, "values": "numpy arrays",
                      "slots": len(g.variant_uids()), "plan": g.get_plan_name_at_index(g.selected_plan())})
            cases.append(r)
            print(f"{kind:16s} keys={key_kind:7s} python {r['python_execute_us_median']:7.2f} us  "
                  f"C++ {r['cpp_execute_us_median']:7.2f} us  overhead {r['overhead_us_median']:5.2f} us "
                  f"(min {r['overhead_us_min']:.2f})  dict->slots {r['dict_to_slots_us']:.3f} us")
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    doc = {
        "benchmark": "host_overhead",
        "description": "graph.execute() from Python vs the C++ hot path (Graph::execute on a resolved slot "
                       "array), tiny graphs on the reference engine; overhead = difference per call",
        "device": {"cpu": cpu, "logical_cpus": os.cpu_count(), "omp_num_threads": os.environ["OMP_NUM_THREADS"]},
        "versions": {"opendnn": opendnn.__version__, "python": sys.version.split()[0], "numpy": np.__version__,
                     "nanobind": opendnn.build_info().get("nanobind")},
        "iterations": args.n, "repetitions": args.r,
        "target_overhead_us": 5.0,
        "cases": cases,
    }
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(doc, f, indent=2)
        f.write("\n")
    print("wrote", args.out)


if __name__ == "__main__":
    main()
