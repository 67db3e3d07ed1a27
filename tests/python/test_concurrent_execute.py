# SPDX-License-Identifier: Apache-2.0
# execute() releases the GIL: many Python threads may run one built graph at once, each with its own
# arrays and workspace, and each must get its own right answer. The threads run in a child process,
# so a crash fails this test instead of ending the whole suite.
import os
import subprocess
import sys
import textwrap

_SCRIPT = textwrap.dedent("""
    import threading
    import numpy as np
    import opendnn as cudnn

    n = 1 << 12
    g = cudnn.pygraph(io_data_type=cudnn.data_type.FLOAT, intermediate_data_type=cudnn.data_type.FLOAT,
                      compute_data_type=cudnn.data_type.FLOAT)
    x = g.tensor(name="x", dim=[1, n], stride=[n, 1], data_type=cudnn.data_type.FLOAT)
    b = g.tensor(name="b", dim=[1, n], stride=[n, 1], data_type=cudnn.data_type.FLOAT)
    y = g.relu(input=g.add(a=g.mul(a=x, b=x), b=b))
    y.set_output(True)
    g.validate()
    g.build_operation_graph()
    g.create_execution_plans([cudnn.heur_mode.FALLBACK])
    g.check_support()
    g.build_plans()
    wrong, errors = [], []

    def work(t):
        try:
            xs = np.full((1, n), float(t + 1), np.float32)
            bs = np.full((1, n), float(t), np.float32)
            ys = np.empty((1, n), np.float32)
            ws = np.zeros(max(g.get_workspace_size(), 1), np.uint8)
            for it in range(60):
                v = float(t + 1 + it % 3)
                xs[0, :] = v
                ys[:] = -1
                g.execute({x: xs, b: bs, y: ys}, ws)
                if not np.all(ys == v * v + t):
                    wrong.append((t, it))
        except Exception as e:
            errors.append(repr(e))

    threads = [threading.Thread(target=work, args=(t,)) for t in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    print("errors", errors)
    print("wrong", len(wrong), "of 480")
    raise SystemExit(1 if errors or wrong else 0)
""")


def test_threads_share_one_built_graph():
    r = subprocess.run([sys.executable, "-c", _SCRIPT], capture_output=True, text=True, timeout=300,
                       env=dict(os.environ))
    assert r.returncode == 0, f"exit {r.returncode}\n{r.stdout}\n{r.stderr[-2000:]}"
