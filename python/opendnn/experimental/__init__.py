# SPDX-License-Identifier: Apache-2.0
"""cuDNN Frontend's ``cudnn.experimental``: ``experimental.ops`` holds torch-level entry points
(``scaled_dot_product_attention``, ``moe_grouped_matmul``). ``ops`` imports torch and loads on first
access."""

import importlib


def __getattr__(name):
    if name == "ops":
        return importlib.import_module(f"{__name__}.ops")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
