# SPDX-License-Identifier: Apache-2.0
"""Attributes of the opendnn package resolved on first access (PEP 562).

``opendnn.ops`` and ``opendnn.experimental`` import torch, so they load only when used: ``import
opendnn`` never imports torch. The CuTe-DSL kernel classes of cuDNN Frontend (``GemmSwigluSm100``,
``NSA``, ...) are Blackwell-only; naming one raises a not-supported error that says so.
"""

import importlib

from ._C import cudnnGraphNotSupportedError

_SUBMODULES = ("ops", "experimental", "datatypes", "api_base")

# cuDNN Frontend's CuTe-DSL packages and classes (Blackwell, sm_100, only).
_BLACKWELL_NAMES = frozenset({
    "NSA", "grouped_gemm", "discrete_grouped_gemm", "sdpa", "native_sparse_attention", "rmsnorm_rht_amax",
    "gemm_swiglu", "gemm_srelu", "gemm_dsrelu", "gemm_amax",
})


class BlackwellOnlyError(cudnnGraphNotSupportedError, AttributeError):
    """A cuDNN Frontend kernel that exists for Blackwell GPUs only (also an AttributeError, so that
    ``hasattr`` is False)."""


def _is_blackwell_only(name):
    return (name in _BLACKWELL_NAMES or name.endswith(("Sm100", "Sm100D256", "_sm100"))
            or "_wrapper_sm100" in name)


def module_getattr(package, name):
    if name == "_compiled_module":  # cuDNN Frontend's name for its extension module
        return importlib.import_module(f"{package}._C")
    if name in _SUBMODULES:
        return importlib.import_module(f"{package}.{name}")
    if _is_blackwell_only(name):
        raise BlackwellOnlyError(f"not supported: {name} is one of cuDNN Frontend's CuTe-DSL kernels for Blackwell "
                                 "(sm_100) GPUs only; opendnn does not provide it")
    raise AttributeError(f"module {package!r} has no attribute {name!r}")
