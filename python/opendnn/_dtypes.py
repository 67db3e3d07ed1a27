# SPDX-License-Identifier: Apache-2.0
"""Conversion of data-type spellings (opendnn, numpy, ml_dtypes, torch, strings) to data_type.

Nothing here imports torch: a torch dtype is recognised by the name of its type.
"""

from ._C import data_type

# numpy / ml_dtypes / torch names (without the "torch." prefix) and our own member names.
_BY_NAME = {
    "float32": data_type.FLOAT, "float": data_type.FLOAT, "float16": data_type.HALF, "half": data_type.HALF,
    "bfloat16": data_type.BFLOAT16, "float64": data_type.DOUBLE, "double": data_type.DOUBLE,
    "int8": data_type.INT8, "uint8": data_type.UINT8, "int32": data_type.INT32, "int": data_type.INT32,
    "int64": data_type.INT64, "long": data_type.INT64, "bool": data_type.BOOLEAN,
    "float8_e4m3fn": data_type.FP8_E4M3, "float8_e4m3": data_type.FP8_E4M3,
    "float8_e5m2": data_type.FP8_E5M2, "float8_e8m0fnu": data_type.FP8_E8M0,
    "float4_e2m1fn": data_type.FP4_E2M1, "float4_e2m1fn_x2": data_type.FP4_E2M1,
}
for _m in data_type:
    _BY_NAME[_m.name] = _m

# data_type -> numpy dtype name (ml_dtypes names for the narrow floats).
NUMPY_NAME = {
    data_type.FLOAT: "float32", data_type.HALF: "float16", data_type.BFLOAT16: "bfloat16",
    data_type.DOUBLE: "float64", data_type.INT8: "int8", data_type.UINT8: "uint8",
    data_type.INT32: "int32", data_type.INT64: "int64", data_type.BOOLEAN: "bool",
    data_type.FP8_E4M3: "float8_e4m3fn", data_type.FP8_E5M2: "float8_e5m2",
    data_type.FP8_E8M0: "float8_e8m0fnu", data_type.FP4_E2M1: "float4_e2m1fn",
}

# DLPack (type code, bits) -> data_type. Codes: 0 int, 1 uint, 2 float, 4 bfloat, 6 bool,
# 7-13 float8/float4 variants (DLPack 1.1).
DLPACK = {
    (0, 8): data_type.INT8, (0, 32): data_type.INT32, (0, 64): data_type.INT64, (1, 8): data_type.UINT8,
    (2, 16): data_type.HALF, (2, 32): data_type.FLOAT, (2, 64): data_type.DOUBLE, (4, 16): data_type.BFLOAT16,
    (6, 8): data_type.BOOLEAN, (1, 1): data_type.BOOLEAN,
    (7, 8): data_type.FP8_E4M3, (9, 8): data_type.FP8_E5M2, (13, 8): data_type.FP8_E8M0,
    (17, 4): data_type.FP4_E2M1,
}


def is_torch_dtype(obj) -> bool:
    return str(type(obj)) == "<class 'torch.dtype'>"


def to_data_type(obj) -> data_type:
    """Any spelling of a data type -> opendnn.data_type (NOT_SET for None)."""
    if isinstance(obj, data_type):
        return obj
    if obj is None:
        return data_type.NOT_SET
    if is_torch_dtype(obj):
        name = str(obj)
        name = name[6:] if name.startswith("torch.") else name
        if name in _BY_NAME:
            return _BY_NAME[name]
        raise TypeError(f"torch dtype {obj} has no opendnn data_type")
    if isinstance(obj, str):
        if obj in _BY_NAME:
            return _BY_NAME[obj]
        raise TypeError(f"unknown data type name {obj!r}")
    if obj is float:
        return data_type.FLOAT
    if obj is int:
        return data_type.INT64
    if obj is bool:
        return data_type.BOOLEAN
    # numpy dtypes, scalar types (np.float16, ml_dtypes.bfloat16) and anything with .dtype
    name = getattr(obj, "name", None) if type(obj).__name__.endswith("DType") or type(obj).__name__ == "dtype" else None
    if name is None:
        try:
            import numpy as np  # numpy is a dependency; imported lazily to keep `import opendnn` light

            name = np.dtype(obj).name
        except Exception:
            name = None
    if name in _BY_NAME:
        return _BY_NAME[name]
    raise TypeError(f"cannot convert {obj!r} to an opendnn data_type")


def numpy_dtype(dt):
    """The numpy dtype of a data_type (bf16 and fp8 through ml_dtypes)."""
    import numpy as np

    name = NUMPY_NAME.get(to_data_type(dt))
    if name is None:
        raise TypeError(f"{dt} has no numpy dtype")
    try:
        return np.dtype(name)
    except TypeError:
        import ml_dtypes  # registers bfloat16, float8_*, float4_* with numpy

        return np.dtype(getattr(ml_dtypes, name))
