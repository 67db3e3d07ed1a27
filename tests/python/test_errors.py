# SPDX-License-Identifier: Apache-2.0
"""Error categories map to the Python exceptions cuDNN Frontend raises, with readable messages."""

import numpy as np
import pytest

import opendnn
from conftest import float_graph

F = opendnn.data_type.FLOAT


def test_shape_deduction_failed_is_value_error():
    g = float_graph()
    a = g.tensor(name="a", dim=[2, 3], data_type=F)
    b = g.tensor(name="b", dim=[4, 5], data_type=F)
    g.matmul(A=a, B=b, name="mm")
    with pytest.raises(ValueError, match=r'SHAPE_DEDUCTION_FAILED: matmul "mm".*inner dims'):
        g.validate()


def test_attribute_not_set_is_value_error():
    g = float_graph()
    x = g.tensor(name="x", dim=[2, 3], data_type=F)
    g.gen_index(x, axis=7, name="gi")
    with pytest.raises((ValueError, RuntimeError), match="gi"):
        g.validate()
    g2 = float_graph()
    x = g2.tensor(name="x", dim=[2, 3], data_type=F)
    g2._add_node(opendnn._C.op_specs()[[s["method"] for s in opendnn._C.op_specs()].index("pointwise")]["kind"],
                 [x], {}, {}, "nomode", None)
    with pytest.raises(ValueError, match="ATTRIBUTE_NOT_SET"):
        g2.validate()


def test_invalid_value_is_runtime_error():
    g = float_graph()
    x = g.tensor(name="x", dim=[2, -3], data_type=F)
    g.relu(x)
    with pytest.raises(RuntimeError, match="INVALID_VALUE") as e:
        g.validate()
    assert not isinstance(e.value, (ValueError, opendnn.NotSupportedError))


def test_unsupported_graph_format_is_not_supported_error():
    g = opendnn.pygraph()
    with pytest.raises(opendnn.cudnnGraphNotSupportedError) as e:
        g.deserialize("{ this is not json")
    assert isinstance(e.value, RuntimeError)
    assert "UNSUPPORTED_GRAPH_FORMAT" in str(e.value)


def test_graph_not_supported_when_every_engine_is_deselected():
    g = float_graph()
    x = g.tensor(name="x", dim=[2, 3], data_type=F)
    y = g.exp(x)
    y.set_output(True)
    g.validate()
    g.build_operation_graph()
    g.create_execution_plans([opendnn.heur_mode.A])
    names = {g.get_engine_name_at_index(i) for i in range(g.get_execution_plan_count())}
    g.deselect_engines(sorted(names))
    with pytest.raises(opendnn.NotSupportedError):
        g.check_support()
        g.build_plans()


def test_execute_before_build_is_an_error():
    g = float_graph()
    x = g.tensor(name="x", dim=[2, 3], data_type=F)
    y = g.exp(x)
    y.set_output(True)
    a = np.zeros((2, 3), np.float32)
    with pytest.raises((RuntimeError, ValueError)):
        g.execute({x: a, y: a}, None)


def test_bad_keyword_types_are_type_errors():
    g = float_graph()
    x = g.tensor(name="x", dim=[2, 3], data_type=F)
    with pytest.raises(TypeError, match="permutation"):
        g.transpose(x, permutation=["a", "b"])
    with pytest.raises(TypeError, match="graph tensor"):
        g.add(a=x, b=np.zeros(3))
    with pytest.raises(TypeError):
        g.tensor(dim=[2], data_type="no_such_type")


def test_an_array_smaller_than_its_tensor_is_refused_and_nothing_is_written():
    g = float_graph()
    x = g.tensor(name="x", dim=[4, 8], data_type=F)
    y = g.relu(input=x, name="act")
    y.set_output(True).set_data_type(F)
    g.build([opendnn.heur_mode.A, opendnn.heur_mode.FALLBACK])
    out = np.full((4, 8), 7.0, np.float32)
    with pytest.raises(ValueError, match=r'INVALID_VARIANT_PACK: tensor .*"x".* spans 128 bytes .* holds 64'):
        g.execute({x: np.ones((2, 8), np.float32), y: out}, None)
    assert (out == 7.0).all()
    g.execute({x: -np.ones((4, 8), np.float32), y: out}, None)
    assert (out == 0.0).all()
