# SPDX-License-Identifier: Apache-2.0
"""cuDNN Frontend's ``cudnn.datatypes`` helpers: conversions between torch dtypes and data_type.

Nothing here imports torch unless a torch dtype is asked for.
"""

import sys

from ._C import data_type
from ._dtypes import is_torch_dtype, to_data_type

# data_type -> name of the torch dtype (attributes of the torch module).
_TORCH_NAMES = {
    data_type.HALF: "float16", data_type.BFLOAT16: "bfloat16", data_type.FLOAT: "float32",
    data_type.DOUBLE: "float64", data_type.INT8: "int8", data_type.UINT8: "uint8", data_type.INT32: "int32",
    data_type.INT64: "int64", data_type.BOOLEAN: "bool", data_type.FP8_E4M3: "float8_e4m3fn",
    data_type.FP8_E5M2: "float8_e5m2", data_type.FP8_E8M0: "float8_e8m0fnu",
}


def _is_torch_tensor(obj) -> bool:
    torch = sys.modules.get("torch")  # a torch tensor exists only once torch is imported
    return torch is not None and isinstance(obj, torch.Tensor)


def _torch_to_cudnn_data_type(torch_dtype):
    """The data_type of a torch dtype, or None when it has none."""
    if not is_torch_dtype(torch_dtype):
        return None
    try:
        return to_data_type(torch_dtype)
    except TypeError:
        return None


def _cudnn_to_torch_data_type(cudnn_dtype):
    """The torch dtype of a data_type, or None when torch has none."""
    name = _TORCH_NAMES.get(cudnn_dtype)
    if name is None:
        return None
    import torch

    return getattr(torch, name, None)


def _library_type(input_type) -> data_type:
    """input_type as a data_type (a data_type passes through; torch dtypes are converted)."""
    if isinstance(input_type, data_type):
        return input_type
    out = _torch_to_cudnn_data_type(input_type)
    if out is None:
        raise TypeError(f"No available conversion from type {input_type} to a library type.")
    return out
