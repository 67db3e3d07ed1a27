# SPDX-License-Identifier: Apache-2.0
"""Shared benchmark plumbing: planning a graph on one engine, CUDA-event timing with warm-up, L2
flush and medians, relative errors, and the result files (bench/results/<name>.json plus a PNG plot)
that the README's tables are made from."""
import json
import os
import platform
import statistics
import sys
import time

import torch

_L2_FLUSH = None


def new_graph():
    """A bf16-io graph with fp32 intermediates and compute, the form every benchmark uses."""
    import opendnn

    f32 = opendnn.data_type.FLOAT
    return opendnn.pygraph(io_data_type=opendnn.data_type.BFLOAT16, intermediate_data_type=f32, compute_data_type=f32)


def plan_on(g, engine="cuda", heur_modes=None, all_plans=False):
    """Validates `g` and plans it on `engine` alone: (plan name, workspace tensor). When `engine`
    proposes nothing, check_support raises with every engine's decline reasons. `all_plans` builds
    every plan of the engine and sizes the workspace for the largest, for autotuning. engine=None keeps
    every engine: the plan is the router's own first choice (what a user gets by default)."""
    import opendnn

    g.validate()
    g.build_operation_graph()
    g.create_execution_plans(heur_modes or [opendnn.heur_mode.A])
    if engine is not None:
        others = {g.get_engine_name_at_index(i) for i in range(g.get_execution_plan_count())} - {engine}
        g.deselect_engines(sorted(others))
    g.check_support()
    g.build_plans(opendnn.build_plan_policy.ALL if all_plans else opendnn.build_plan_policy.HEURISTICS_CHOICE)
    idx = g.selected_plan()
    chosen = g.get_engine_name_at_index(idx)
    if engine is not None and chosen != engine:
        raise RuntimeError(f"planned on {chosen}, not {engine}")
    sizes = [g.get_workspace_size()]
    for i in range(g.get_execution_plan_count()) if all_plans else ():
        if engine is not None and g.get_engine_name_at_index(i) != engine:
            continue
        try:
            sizes.append(g.get_workspace_size_plan_at_index(i))
        except Exception:  # a plan that did not build has no size; it is never selected
            pass
    return g.get_plan_name_at_index(idx), torch.empty(max(1, *sizes), dtype=torch.uint8, device="cuda")


class Bound:
    """A graph planned on one engine (see plan_on) and bound to torch tensors: subclasses fill
    `pack` with the variant pack; calling the object executes the selected plan."""

    def __init__(self, g, engine="cuda", **plan_kw):
        self.g, self.pack = g, {}
        self.plan, self.ws = plan_on(g, engine, **plan_kw)

    def __call__(self):
        self.g.execute(self.pack, self.ws)


def first_run(row, make):
    """Builds our Bound plan with make() and runs it once (synchronised), or records why it could
    not be made (the engines' decline reasons) in row["opendnn_declined"] and returns None."""
    try:
        ours = make()
    except Exception as e:  # a decline or a failed build: recorded in the row, never fatal
        row["opendnn_declined"] = failure(e)
        return None
    row["plan"] = ours.plan
    ours()
    torch.cuda.synchronize()
    return ours


def bind_output(t, like):
    """Marks graph tensor `t` an output with the shape, strides and dtype of torch tensor `like`."""
    return t.set_output(True).set_dim(list(like.shape)).set_stride(list(like.stride())).set_data_type(like.dtype)


def time_router(row, make, reps=30, rotate_with=None):
    """Our cudnn engine's heuristic plan (cudnn_engine_*) and the router's own pick among every engine
    (router_*: what a user gets by default), each a Bound from make(engine), timed like ours:
    router_vs_best = the faster of our two engines (opendnn_ms, cudnn_engine_ms) / the pick.
    rotate_with ({row key: callable}, e.g. {"opendnn_ms": ours, "torch_matmul_ms": peer}): those are timed
    again in the same alternating rounds as the two engines (time_rotating) and their row keys
    overwritten, so every column of the row saw the same clock and thermal drift. A callable under
    "router_round_opendnn_ms" is our plan timed in those rounds only for router_vs_best (opendnn_ms stays)."""
    entries = {}
    for key, engine in (("cudnn_engine", "cudnn"), ("router", None)):
        r = {}
        bound = first_run(r, lambda e=engine: make(e))
        if bound is None:
            row[f"{key}_declined"] = r.get("opendnn_declined", "")[:300]
            continue
        row[f"{key}_plan"] = r["plan"]
        entries[f"{key}_ms"] = bound
    if rotate_with:
        entries.update(rotate_with)
        row.update(time_rotating({k: ((lambda: None), fn) for k, fn in entries.items()}))
    else:
        row.update({k: time_cuda(fn, reps=reps) for k, fn in entries.items()})
    ours = "router_round_opendnn_ms" if "router_round_opendnn_ms" in row else "opendnn_ms"
    timed = [row[k] for k in (ours, "cudnn_engine_ms") if k in row]
    if "router_ms" in row and timed:
        row["router_vs_best"] = min(timed) / row["router_ms"]


ROUNDS, ROUND_REPS = 5, 10


def time_rotating(entries, rounds=ROUNDS, reps=ROUND_REPS):
    """entries: {key: (prepare, fn)}. Times every fn in each of `rounds` rounds (prepare() before each block),
    so clock and thermal drift during the rounds falls on all of them alike: {key: median of the rounds' medians}."""
    times = {k: [] for k in entries}
    for _ in range(rounds):
        for key, (prepare, fn) in entries.items():
            prepare()
            times[key].append(time_cuda(fn, warmup=2, reps=reps))
    return {k: statistics.median(v) for k, v in times.items()}


def failure(e, limit=1200):
    """An exception as a row value: its type and message, long enough to keep the decline reasons."""
    return f"{type(e).__name__}: {str(e)[:limit]}"


def rel_err(a, ref, dtype=torch.float32):
    """Relative Frobenius error of `a` against `ref` (a reshaped to ref's shape), computed in `dtype`."""
    a, ref = a.to(dtype).reshape(ref.shape), ref.to(dtype)
    return ((a - ref).norm() / ref.norm().clamp_min(1e-30)).item()


def poisoned(like, dtype=None):
    """A NaN-filled tensor shaped and strided like `like`, so an output the plan never writes shows."""
    return torch.full_like(like, float("nan"), dtype=dtype)


def add_speedups(row, peers, ours="opendnn_ms", prefix=""):
    """speedup_vs_<peer> = peer time / our time for each peer timed in the row."""
    for p in peers:
        if f"{prefix}{p}_ms" in row and ours in row:
            row[f"{prefix}speedup_vs_{p}"] = row[f"{prefix}{p}_ms"] / row[ours]


def show(row, skip=()):
    """One row on one line, floats to four digits."""
    print(" ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in row.items() if k not in skip),
          flush=True)


def flush_l2():
    """Overwrites a buffer larger than the H200's 50 MB L2 so each timed run starts cold."""
    global _L2_FLUSH
    if _L2_FLUSH is None:
        _L2_FLUSH = torch.empty(256 * 1024 * 1024, dtype=torch.uint8, device="cuda")
    _L2_FLUSH.zero_()


def time_cuda(fn, warmup=5, reps=30, flush=True):
    """Median milliseconds of fn() over `reps` runs, each bracketed by CUDA events."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        if flush:
            flush_l2()
        start = torch.cuda.Event(enable_timing=True)
        stop = torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop))
    if os.environ.get("OPENDNN_BENCH_KERNELS") == "1":
        print_kernel_split(fn)
    return statistics.median(times)


def time_pair(ours, peer, rounds=5, reps=20):
    """(ours ms, peer ms): medians over `rounds` alternating rounds of time_cuda, so clock and thermal
    drift during the run falls on both sides alike instead of on whichever was timed second."""
    a, b = [], []
    for _ in range(rounds):
        a.append(time_cuda(ours, warmup=2, reps=reps))
        b.append(time_cuda(peer, warmup=2, reps=reps))
    return statistics.median(a), statistics.median(b)


def print_kernel_split(fn, top=8):
    """One more run of fn under torch's profiler (CUPTI), printing each GPU kernel's time: where the time of
    a multi-kernel op goes, on machines without nsys. Set OPENDNN_BENCH_KERNELS=1 to get it for every
    time_cuda call."""
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    kernels = {}
    for e in prof.events():
        if e.device_type.name == "CUDA":
            us, n = kernels.get(e.name, (0.0, 0))
            kernels[e.name] = (us + e.time_range.elapsed_us(), n + 1)
    total = sum(us for us, _ in kernels.values()) or 1.0
    for name, (us, n) in sorted(kernels.items(), key=lambda kv: -kv[1][0])[:top]:
        print(f"    kernel {us:10.1f} us {100 * us / total:5.1f}% x{n} {name[:110]}", flush=True)


def copy_bandwidth_gbs(nbytes=2 * 1024**3, flush=False):
    """Device-to-device copy bandwidth (bytes read + written per second), the memory-bound ceiling. With a
    kernel's own byte count and flush=True (timed like the kernel: L2 flushed, launch and ramp included) it
    is the ceiling at that size."""
    a = torch.empty(nbytes // 2, dtype=torch.uint8, device="cuda")
    b = torch.empty_like(a)
    ms = time_cuda(lambda: b.copy_(a), warmup=3, reps=10 if not flush else 30, flush=flush)
    return 2 * a.numel() / (ms * 1e-3) / 1e9


RUN_STARTED = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def environment():
    import opendnn

    props = torch.cuda.get_device_properties(0)
    return {
        "device": props.name,
        "sm_count": props.multi_processor_count,
        "torch": torch.__version__,
        "torch_cudnn": torch.backends.cudnn.version(),
        "cuda": torch.version.cuda,
        "opendnn": getattr(opendnn, "__version__", "?"),
        "python": sys.version.split()[0],
        "host": platform.node(),
    }


def with_kept_rows(path, rows):
    """`rows` merged into the rows of the result file at `path`: a row of the same case replaces the old one
    in place, new cases go at the end, the file's other rows stay. Each row keeps the numbers of the run that
    measured it (ours and the peers timed together), so a long sweep can be finished over several runs."""
    if not os.path.exists(path):
        return rows
    with open(path) as f:
        old = json.load(f).get("rows", [])
    new = {r["case"]: r for r in rows}
    merged = [new.pop(r["case"], r) for r in old]
    return merged + [r for r in rows if r["case"] in new]


def add_append_argument(ap):
    """--append: the flag that makes write_results keep the rows of the cases a run skips."""
    ap.add_argument("--append", action="store_true",
                    help="keep the result file's rows of the cases this run does not measure (each row is one "
                         "run's numbers, ours and the peers' timed together; finish a sweep over several runs)")


def write_results(name, rows, extra=None, out_dir=None, append=False):
    """Writes bench/results/<name>.json (and a copy under $OUT when set) and a speedup plot. append: keep
    the existing file's rows of the cases this run did not measure (with_kept_rows)."""
    for r in rows:  # when this run measured the row: a file merged from several runs says which is which
        r.setdefault("measured_utc", RUN_STARTED)
    results = out_dir or os.path.join(os.path.dirname(__file__), "results")
    if append:
        rows = with_kept_rows(os.path.join(results, name + ".json"), rows)
    doc = {"benchmark": name, "environment": environment(), "rows": rows}
    if extra:
        doc.update(extra)
    dirs = [results]
    if os.environ.get("OUT"):
        dirs.append(os.environ["OUT"])
    for d in dirs:
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, name + ".json"), "w") as f:
            json.dump(doc, f, indent=1)
        plot(doc, os.path.join(d, name + ".png"))
    return doc


def plot(doc, path):
    """One bar group per case: opendnn's speedup over each peer (1.0 = parity)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    rows = doc["rows"]
    peers = sorted({k[len("speedup_vs_"):] for r in rows for k in r if k.startswith("speedup_vs_")})
    if not peers:
        return
    fig, ax = plt.subplots(figsize=(max(6, len(rows) * 0.6), 4))
    width = 0.8 / len(peers)
    for i, p in enumerate(peers):
        ax.bar([j + i * width for j in range(len(rows))], [r.get("speedup_vs_" + p, 0) for r in rows], width, label=p)
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_xticks([j + 0.4 - width / 2 for j in range(len(rows))])
    ax.set_xticklabels([r["case"] for r in rows], rotation=60, ha="right", fontsize=7)
    ax.set_ylabel("speedup (peer time / opendnn time)")
    ax.set_title(f"{doc['benchmark']} on {doc['environment']['device']}")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
