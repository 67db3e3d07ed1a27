# SPDX-License-Identifier: Apache-2.0
"""Small helpers of cuDNN Frontend's ``cudnn.api_base``: ``ceil_div`` and the once-per-API warning
for experimental entry points."""

import logging
import threading

_warned = set()
_warned_lock = threading.Lock()


def ceil_div(a: int, b: int) -> int:
    """The smallest integer >= a / b (b > 0)."""
    if b <= 0:
        raise ValueError(f"ceil_div: divisor must be positive, got {b}")
    return -(-a // b)


def warn_experimental_api_once(logger: logging.Logger, api_name: str) -> None:
    """Logs "<api_name> is an experimental API" on ``logger``, once per api_name per process."""
    with _warned_lock:
        if api_name in _warned:
            return
        _warned.add(api_name)
    logger.warning("%s is an experimental API", api_name)


def _reset_experimental_api_warning_registry() -> None:
    with _warned_lock:
        _warned.clear()
