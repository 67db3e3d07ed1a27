# SPDX-License-Identifier: Apache-2.0
"""The public API of opendnn (re-exported by the package; see __init__).

``import opendnn as cudnn`` runs code written for cuDNN Frontend's classic Python API: build a
``pygraph``, validate it, build plans and ``execute`` it on numpy arrays, torch tensors, DLPack
objects or raw pointers. This package never imports torch.
"""

from . import _C  # noqa: F401
from ._C import (  # noqa: F401
    build_info,
    build_plan_policy,
    create_handle,
    cudnnGraphNotSupportedError,
    data_type,
    default_target,
    destroy_handle,
    device_kind,
    error_code,
    get_last_error_string,
    get_stream,
    handle,
    heur_mode,
    registered_engines,
    set_default_target,
    tensor,
    tensor_reordering,
    Target,
    unregister_engine,
)
from .enums import (  # noqa: F401
    attention_implementation,
    convolution_mode,
    diagonal_alignment,
    moe_grouped_matmul_mode,
    norm_forward_phase,
    padding_mode,
    pointwise_mode,
    reduction_mode,
    resample_mode,
    reshape_mode,
    rng_distribution,
    scalar_type,
)
from ._pygraph import pygraph  # noqa: F401
from .plans import (  # noqa: F401
    behavior_note,
    create_device_properties,
    create_kernel_cache,
    device_properties,
    kernel_cache,
    knob,
    knob_type,
    numerical_note,
)
from ._causal_conv1d import causal_conv1d_backward, causal_conv1d_forward  # noqa: F401
from .graph import graph, graph_cache, jit  # noqa: F401
from .wrapper import Graph  # noqa: F401
from .engines import register_engine  # noqa: F401

__version__ = _C.__version__
NotSupportedError = cudnnGraphNotSupportedError

# The cuDNN backend release whose graph-API feature set opendnn matches. Code written for cuDNN
# Frontend gates features on backend_version(); opendnn implements them all on every engine.
_CUDNN_FEATURE_LEVEL = 92400


def set_stream(handle, stream):
    """Sets the stream work on this handle is queued on (an int, or a torch/cupy stream)."""
    _C.set_stream(handle, stream)


def backend_version() -> int:
    """cuDNN-style version number (major*10000 + minor*100 + patch) of the feature level served."""
    return _CUDNN_FEATURE_LEVEL


def backend_version_string() -> str:
    v = backend_version()
    return f"{v // 10000}.{(v // 100) % 100}.{v % 100}"


def version() -> str:
    return __version__


def cmake_prefix() -> str:
    """The prefix holding opendnn's headers, library and CMake config (for CMAKE_PREFIX_PATH)."""
    import os

    return os.path.dirname(os.path.abspath(__file__))


def _at_exit():
    _C._shutdown()


import atexit as _atexit  # noqa: E402

_atexit.register(_at_exit)
del _atexit
