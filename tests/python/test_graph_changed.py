# SPDX-License-Identifier: Apache-2.0
# A tensor edited after build (through the Python handles the user still holds) makes the graph
# unvalidated: execute refuses, naming the tensor, and building again re-validates.
import numpy as np
import pytest

import opendnn as cudnn


def test_edit_after_build_fails_execute_and_rebuild_recovers():
    n = 64
    g = cudnn.pygraph(io_data_type=cudnn.data_type.FLOAT, intermediate_data_type=cudnn.data_type.FLOAT,
                      compute_data_type=cudnn.data_type.FLOAT)
    x = g.tensor(name="x", dim=[1, n], stride=[n, 1], data_type=cudnn.data_type.FLOAT)
    sq = g.mul(a=x, b=x, name="square")
    y = g.relu(input=sq)
    y.set_output(True)
    g.build([cudnn.heur_mode.FALLBACK])
    assert g.is_validated()
    xs = np.full((1, n), 3.0, np.float32)
    ys = np.zeros((1, n), np.float32)
    ws = np.zeros(max(g.get_workspace_size(), 1), np.uint8)
    g.execute({x: xs, y: ys}, ws)
    assert np.all(ys == 9.0)

    # The intermediate is virtual (no array of the user's describes it): only the graph can notice.
    sq.set_data_type(cudnn.data_type.HALF)
    assert not g.is_validated()
    with pytest.raises(Exception, match="graph changed since build.*square.*data type"):
        g.execute({x: xs, y: ys}, ws)

    g.build([cudnn.heur_mode.FALLBACK])
    assert g.is_validated()
    xs[:] = 101.0  # 10201 rounds to 10200 in the half intermediate
    ws = np.zeros(max(g.get_workspace_size(), 1), np.uint8)
    g.execute({x: xs, y: ys}, ws)
    assert np.all(ys == 10200.0)
