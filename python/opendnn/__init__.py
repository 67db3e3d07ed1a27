# SPDX-License-Identifier: Apache-2.0
"""opendnn: an open-source graph API for deep-learning primitives.

``import opendnn as cudnn`` runs code written for cuDNN Frontend's classic Python API: build a
``pygraph``, validate it, build plans and ``execute`` it on numpy arrays, torch tensors, DLPack
objects or raw pointers. This package never imports torch.
"""

import sys as _sys


def _collect_env_requested():
    argv = getattr(_sys, "orig_argv", None) or _sys.argv
    return any(a in ("opendnn.collect_env", "opendnn/collect_env.py") or a.endswith("opendnn/collect_env.py")
               for a in argv)


try:
    from ._api import *  # noqa: F401,F403
    from ._api import (  # noqa: F401
        _C,
        __version__,
        backend_version,
        backend_version_string,
        cmake_prefix,
        set_stream,
        version,
    )

    _import_error = None
except Exception:  # noqa: BLE001
    # `python -m opendnn.collect_env` must still report when the extension is broken.
    if not _collect_env_requested():
        raise
    import traceback as _traceback

    _import_error = _traceback.format_exc()


def __getattr__(name):
    # ops / experimental / datatypes / api_base on first access; Blackwell-only kernels named clearly.
    from ._lazy import module_getattr

    return module_getattr(__name__, name)
