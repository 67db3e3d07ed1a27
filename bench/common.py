# SPDX-License-Identifier: Apache-2.0
"""Shared benchmark plumbing: CUDA-event timing with warm-up, L2 flush and medians, and the result
files (bench/results/<name>.json plus a PNG plot) that the README's tables are made from."""
import json
import os
import platform
import statistics
import sys

import torch

_L2_FLUSH = None


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
    return statistics.median(times)


def copy_bandwidth_gbs(nbytes=2 * 1024**3):
    """Device-to-device copy bandwidth (bytes read + written per second), the memory-bound ceiling."""
    a = torch.empty(nbytes // 2, dtype=torch.uint8, device="cuda")
    b = torch.empty_like(a)
    ms = time_cuda(lambda: b.copy_(a), warmup=3, reps=10, flush=False)
    return 2 * a.numel() / (ms * 1e-3) / 1e9


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


def write_results(name, rows, extra=None, out_dir=None):
    """Writes bench/results/<name>.json (and a copy under $OUT when set) and a speedup plot."""
    doc = {"benchmark": name, "environment": environment(), "rows": rows}
    if extra:
        doc.update(extra)
    dirs = [out_dir or os.path.join(os.path.dirname(__file__), "results")]
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
