# SPDX-License-Identifier: Apache-2.0
"""Convenience layers of cuDNN Frontend's Python package: ``graph`` (context manager), ``jit``
(builds a graph-returning function) and ``graph_cache`` (a small FIFO cache of built graphs)."""

import contextlib
import functools
from collections import OrderedDict

from ._C import data_type, heur_mode
from ._pygraph import pygraph


@contextlib.contextmanager
def graph(handle=None, name: str = "cudnn_graph", io_data_type=data_type.HALF,
          intermediate_data_type=data_type.FLOAT, compute_data_type=data_type.FLOAT, **graph_kwargs):
    """Yields ``(pygraph, [])``; the list is for the caller to collect tensors in. Extra keywords go
    to ``pygraph``."""
    g = pygraph(name=name, io_data_type=io_data_type, intermediate_data_type=intermediate_data_type,
                compute_data_type=compute_data_type, handle=handle, **graph_kwargs)
    yield g, []


def jit(heur_modes=heur_mode.A, **kwargs):
    """Decorates a function returning ``(graph, [tensors])``: builds the graph's plans with
    ``heur_modes`` (one mode or a list; default A) unless it already has plans, and returns
    ``(graph, [uids])``. Other keywords are accepted, as cuDNN Frontend does, and not used."""
    modes = list(heur_modes) if isinstance(heur_modes, (list, tuple)) else [heur_modes]
    for m in modes:
        if not isinstance(m, heur_mode):
            raise TypeError(f"jit: heur_modes must be a heur_mode or a list of them, got {m!r}")

    def decorate(fn):
        @functools.wraps(fn)
        def wrapper(*args, **kw):
            g, tensors = fn(*args, **kw)
            if g.get_execution_plan_count() <= 0:
                g.build(modes)
            return g, [None if t is None else t.get_uid() for t in tensors]

        return wrapper

    return decorate


def graph_cache(key_fn=None, maxsize: int = 256):
    """Caches the result of a graph-building function, keyed by ``key_fn(*args, **kwargs)`` (default:
    the arguments themselves), evicting the oldest entry beyond ``maxsize``."""

    def decorate(fn):
        cache = OrderedDict()

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            key = key_fn(*args, **kwargs) if key_fn else (args, tuple(sorted(kwargs.items())))
            if key in cache:
                return cache[key]
            value = fn(*args, **kwargs)
            cache[key] = value
            while len(cache) > maxsize:
                cache.popitem(last=False)
            return value

        wrapper.cache = cache
        wrapper.cache_clear = cache.clear
        return wrapper

    return decorate
