# SPDX-License-Identifier: Apache-2.0
"""Import boundaries, the environment report and the command-line entry."""

import os
import shutil
import subprocess
import sys

import pytest

import opendnn

PKG = os.path.dirname(os.path.abspath(opendnn.__file__))


def _run(code_or_args, env_extra=None, path_first=None):
    env = dict(os.environ)
    paths = ([path_first] if path_first else []) + [p for p in sys.path if p]
    env["PYTHONPATH"] = os.pathsep.join(paths)
    env.update(env_extra or {})
    args = code_or_args if isinstance(code_or_args, list) else ["-c", code_or_args]
    return subprocess.run([sys.executable] + args, capture_output=True, text=True, env=env, timeout=300)


def _poisoned_torch(tmp_path):
    d = tmp_path / "poison"
    (d / "torch").mkdir(parents=True)
    (d / "torch" / "__init__.py").write_text("raise RuntimeError('torch must not be imported by opendnn')\n")
    return str(d)


def test_import_does_not_import_torch(tmp_path):
    code = ("import sys, opendnn, numpy as np\n"
            "g = opendnn.pygraph(io_data_type=opendnn.data_type.FLOAT)\n"
            "x = g.tensor_like(np.zeros((2, 3), np.float32))\n"
            "y = g.relu(x); y.set_output(True); g.validate()\n"
            "assert 'torch' not in sys.modules, 'torch imported'\n"
            "print('ok')\n")
    r = _run(code)
    assert r.returncode == 0 and "ok" in r.stdout, r.stderr
    # Even with a torch on the path that explodes when imported.
    r = _run(code, path_first=_poisoned_torch(tmp_path))
    assert r.returncode == 0 and "ok" in r.stdout, r.stderr


def test_collect_env_report():
    r = _run(["-m", "opendnn.collect_env"])
    assert r.returncode == 0, r.stderr
    for section in ("== opendnn", "== Python", "== OS", "== CPU", "== GPU", "== CUDA", "== cuDNN", "== torch",
                    "== flags"):
        assert section in r.stdout
    assert f"version: {opendnn.__version__}" in r.stdout
    assert "imports torch: no" in r.stdout


def test_collect_env_with_broken_opendnn_and_torch(tmp_path):
    # A copy of the package whose extension fails to import, and a torch that raises on import.
    fake = tmp_path / "fake"
    shutil.copytree(PKG, fake / "opendnn", ignore=shutil.ignore_patterns("_C*.so", "__pycache__", "bin", "lib",
                                                                          "include"))
    (fake / "opendnn" / "_C.py").write_text("raise ImportError('simulated: libopendnn.so: cannot open shared object')\n")
    (fake / "torch").mkdir()
    (fake / "torch" / "__init__.py").write_text("raise OSError('simulated broken torch')\n")
    env = dict(os.environ, PYTHONPATH=str(fake))
    r = subprocess.run([sys.executable, "-m", "opendnn.collect_env"], capture_output=True, text=True, env=env,
                       timeout=300, cwd=str(tmp_path))
    assert r.returncode == 0, r.stderr
    assert "import opendnn: FAILED" in r.stdout and "simulated: libopendnn.so" in r.stdout
    assert "torch: not importable (OSError: simulated broken torch)" in r.stdout
    assert "== cuDNN" in r.stdout and "`import opendnn` fails" in r.stdout
    # A plain import of the broken package still raises.
    r = subprocess.run([sys.executable, "-c", "import opendnn"], capture_output=True, text=True, env=env,
                       timeout=300, cwd=str(tmp_path))
    assert r.returncode != 0 and "simulated" in r.stderr


def test_cli_entry():
    from opendnn import cli

    r = _run(["-m", "opendnn", "--version"], env_extra={"OPENDNN_CLI_PYTHON": "1"})
    assert r.returncode == 0 and opendnn.__version__ in r.stdout, r.stderr
    assert callable(cli.main)


def test_cli_validates_example_graphs(tmp_path):
    g = opendnn.pygraph(io_data_type=opendnn.data_type.FLOAT)
    x = g.tensor(name="x", dim=[2, 3], data_type=opendnn.data_type.FLOAT)
    y = g.relu(x)
    y.set_output(True)
    g.validate()
    f = tmp_path / "g.json"
    f.write_text(g.to_json())
    r = _run(["-m", "opendnn", "validate", str(f)], env_extra={"OPENDNN_CLI_PYTHON": "1"})
    assert r.returncode == 0, r.stderr
    f.write_text("{}")
    r = _run(["-m", "opendnn", "validate", str(f)], env_extra={"OPENDNN_CLI_PYTHON": "1"})
    assert r.returncode != 0


def test_cli_fallback_reads_are_bounded_and_name_the_os_reason(tmp_path):
    env = {"OPENDNN_CLI_PYTHON": "1"}
    r = _run(["-m", "opendnn", "validate", str(tmp_path)], env_extra=env)
    assert r.returncode == 1 and f"cannot read {tmp_path}: Is a directory" in r.stderr, r.stderr
    r = _run(["-m", "opendnn", "validate", str(tmp_path / "none.json")], env_extra=env)
    assert r.returncode == 1 and "No such file or directory" in r.stderr, r.stderr
    r = _run(["-m", "opendnn", "validate", "/dev/zero"], env_extra=env)
    assert r.returncode == 1 and "larger than 64 MiB" in r.stderr, r.stderr


@pytest.mark.skipif(not os.path.isdir(os.path.join(PKG, "include", "opendnn")), reason="needs `pip install .`")
def test_installed_layout():
    assert os.path.isfile(os.path.join(PKG, "include", "opendnn", "graph.h"))
    assert os.path.isfile(os.path.join(PKG, "lib", "cmake", "opendnn", "opendnnConfig.cmake"))
    assert any(f.startswith("libopendnn.so") for f in os.listdir(os.path.join(PKG, "lib")))
    assert opendnn.cmake_prefix() == PKG
