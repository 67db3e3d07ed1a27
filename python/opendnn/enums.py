# SPDX-License-Identifier: Apache-2.0
"""Enumerations with cuDNN Frontend's class and member names.

data_type, heur_mode, build_plan_policy and tensor_reordering come from the extension; the others
name the members of string-valued op attributes and pass to the graph by their name.
"""

import enum

from ._C import build_plan_policy, data_type, heur_mode, tensor_reordering  # noqa: F401


class norm_forward_phase(enum.Enum):
    TRAINING = "TRAINING"
    INFERENCE = "INFERENCE"
    NOT_SET = "NOT_SET"


class reduction_mode(enum.Enum):
    ADD = "ADD"
    MUL = "MUL"
    MIN = "MIN"
    MAX = "MAX"
    AMAX = "AMAX"
    AVG = "AVG"
    NORM1 = "NORM1"
    NORM2 = "NORM2"
    MUL_NO_ZEROS = "MUL_NO_ZEROS"


class reshape_mode(enum.Enum):
    VIEW_ONLY = "VIEW_ONLY"
    LOGICAL = "LOGICAL"


class diagonal_alignment(enum.Enum):
    TOP_LEFT = "TOP_LEFT"
    BOTTOM_RIGHT = "BOTTOM_RIGHT"


class attention_implementation(enum.Enum):
    AUTO = "AUTO"
    COMPOSITE = "COMPOSITE"
    UNIFIED = "UNIFIED"


class convolution_mode(enum.Enum):
    CONVOLUTION = "CONVOLUTION"
    CROSS_CORRELATION = "CROSS_CORRELATION"


class rng_distribution(enum.Enum):
    BERNOULLI = "BERNOULLI"
    UNIFORM = "UNIFORM"
    NORMAL = "NORMAL"


class resample_mode(enum.Enum):
    MAXPOOL = "MAXPOOL"
    AVGPOOL_INCLUDE_PADDING = "AVGPOOL_INCLUDE_PADDING"
    AVGPOOL_EXCLUDE_PADDING = "AVGPOOL_EXCLUDE_PADDING"
    BILINEAR = "BILINEAR"
    NEAREST = "NEAREST"


class padding_mode(enum.Enum):
    ZERO_PAD = "ZERO_PAD"
    NEG_INF_PAD = "NEG_INF_PAD"
    EDGE_VAL_PAD = "EDGE_VAL_PAD"


class moe_grouped_matmul_mode(enum.Enum):
    NONE = "NONE"
    GATHER = "GATHER"
    SCATTER = "SCATTER"


class scalar_type(enum.Enum):
    COMPILE_TIME_CONST = "COMPILE_TIME_CONST"
    RUNTIME_PARAM = "RUNTIME_PARAM"


def _pointwise_enum():
    from ._C import pointwise_modes

    return enum.Enum("pointwise_mode", {name: name for name, _method, _arity in pointwise_modes()})


pointwise_mode = _pointwise_enum()
