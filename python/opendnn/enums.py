# SPDX-License-Identifier: Apache-2.0
"""Enumerations with cuDNN Frontend's class names, member names and integer values.

data_type, heur_mode, build_plan_policy and tensor_reordering come from the extension; the others
name the members of string-valued op attributes and pass to the graph by their name. Every enum is
an ``enum.IntEnum``: ``int(member)`` is cuDNN Frontend's value for it.
"""

import enum

from ._C import build_plan_policy, data_type, heur_mode, tensor_reordering  # noqa: F401


class _Enum(enum.IntEnum):
    """An IntEnum that prints as ``class.MEMBER`` (as cuDNN Frontend's enums do), not as its number."""

    def __str__(self):
        return f"{type(self).__name__}.{self.name}"

    __format__ = object.__format__


class norm_forward_phase(_Enum):
    NOT_SET = 0
    INFERENCE = 1
    TRAINING = 2


class reduction_mode(_Enum):
    NOT_SET = 0
    ADD = 1
    MUL = 2
    MIN = 3
    MAX = 4
    AMAX = 5
    AVG = 6
    NORM1 = 7
    NORM2 = 8
    MUL_NO_ZEROS = 9


class reshape_mode(_Enum):
    VIEW_ONLY = 0
    LOGICAL = 1


class diagonal_alignment(_Enum):
    TOP_LEFT = 0
    BOTTOM_RIGHT = 1


class attention_implementation(_Enum):
    AUTO = 0
    COMPOSITE = 1
    UNIFIED = 2


class convolution_mode(_Enum):
    CONVOLUTION = 1
    CROSS_CORRELATION = 2


class rng_distribution(_Enum):
    BERNOULLI = 1
    UNIFORM = 2
    NORMAL = 3


class resample_mode(_Enum):
    MAXPOOL = 1
    AVGPOOL_INCLUDE_PADDING = 2
    AVGPOOL_EXCLUDE_PADDING = 3
    BILINEAR = 4
    NEAREST = 5


class padding_mode(_Enum):
    ZERO_PAD = 1
    NEG_INF_PAD = 2
    EDGE_VAL_PAD = 3


class moe_grouped_matmul_mode(_Enum):
    NONE = 0
    GATHER = 1
    SCATTER = 2


class scalar_type(_Enum):
    COMPILE_TIME_CONST = 0
    RUNTIME_PARAM = 1


def _pointwise_enum():
    from ._C import pointwise_modes

    return _Enum("pointwise_mode", [(name, i + 1) for i, (name, _m, _a) in enumerate(pointwise_modes())])


pointwise_mode = _pointwise_enum()
