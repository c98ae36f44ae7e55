"""A fresh virtual environment installs the package with one pip command,
`pip install SOURCE_ROOT`, and the installed package works on its own.

pip builds the wheel with meson-python in an isolated build environment, so
the build requirements (meson-python, meson, ninja) and the runtime
requirements (onnx, numpy) come from the package index: the test is skipped when the
index cannot be reached.  PIP_CONSTRAINT names the locks
(scripts/constraints.txt, scripts/build-constraints.txt), which pip applies to
the build environment too, and every package the venv ends up with must be
at its locked version.  The C side needs what scripts/setup.sh installs
(a C compiler, the Python headers, protobuf-c).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from conftest import ROOT, read_cli_stats, run_cli

# Runs in the fresh venv, outside the source and build trees.
CHECK_INSTALLED = r"""
import json, os, sys, sysconfig
import tpfuse
site = sysconfig.get_paths()["platlib"]
folder = os.path.dirname(tpfuse.__file__)
r = tpfuse.optimize(sys.argv[1], explain=True)
from onnx import TensorProto, helper
g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "relu",
                      [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                      [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
with tpfuse.Session(helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])) as s:
    relu = s.run(None, {"x": [-1.0, 2.0]})[0].tolist()
print(json.dumps({
    "folder": folder,
    "site": site,
    "version": tpfuse.__version__,
    "files": sorted(os.listdir(folder)),
    "site_files": sorted(os.listdir(site)),
    "stats": r.stats,
    "ops": [n.op_type for n in r.model.graph.node],
    "passes": [p.name for p in tpfuse.passes()],
    "relu": relu,
}))
"""


def _clean_env():
    env = dict(os.environ)
    for k in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "PIP_REQUIRE_VIRTUALENV"):
        env.pop(k, None)
    return env


def test_fresh_venv_installs_the_package_with_one_pip_command(tmp_path, dense_rank0, tpfuse_cli):
    venv = tmp_path / "venv"
    try:
        _install_and_check(tmp_path, venv, dense_rank0, tpfuse_cli)
    finally:
        shutil.rmtree(venv, ignore_errors=True)  # a few hundred MB (onnx, numpy)


def _install_and_check(tmp_path, venv, dense_rank0, tpfuse_cli):
    env = _clean_env()
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, env=env, timeout=300)
    py = str(venv / "bin" / "python")

    probe = subprocess.run(
        [py, "-m", "pip", "download", "--disable-pip-version-check", "--no-deps", "-q",
         "-d", str(tmp_path / "probe"), "meson-python"],
        capture_output=True, text=True, env=env, timeout=300,
    )
    if probe.returncode != 0:
        pytest.skip("the package index cannot be reached (the build needs meson-python "
                    "from it): " + (probe.stderr.strip().splitlines() or ["?"])[-1])

    # the one command, with the locks in force
    locks = [os.path.join(ROOT, "scripts", f) for f in ("constraints.txt", "build-constraints.txt")]
    lock_env = dict(env, PIP_CONSTRAINT=" ".join(locks))
    p = subprocess.run(
        [py, "-m", "pip", "install", "--disable-pip-version-check", ROOT],
        capture_output=True, text=True, env=lock_env, timeout=1500, cwd=str(tmp_path),
    )
    assert p.returncode == 0, "pip install failed:\n" + p.stdout[-4000:] + p.stderr[-4000:]
    # every package but the new one at its locked version
    frozen = tmp_path / "freeze.txt"
    f = subprocess.run([py, "-m", "pip", "freeze", "--all", "--exclude", "tpfuse"],
                       capture_output=True, text=True, env=env, timeout=300)
    assert f.returncode == 0, f.stderr
    frozen.write_text(f.stdout)
    c = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "check-lock.py"), locks[0],
                        "--freeze", str(frozen), "--subset"], capture_output=True, text=True)
    assert c.returncode == 0, c.stderr

    r = subprocess.run([py, "-c", CHECK_INSTALLED, dense_rank0], capture_output=True, text=True,
                       env=env, timeout=300, cwd=str(tmp_path))
    assert r.returncode == 0, r.stderr[-4000:]
    got = json.loads(r.stdout)
    assert got["folder"] == os.path.join(got["site"], "tpfuse")
    assert {"__init__.py", "_models.py", "_session.py", "_tpfuse.pyi", "py.typed"} <= set(got["files"])
    assert any(f.startswith("_tpfuse.") and f.endswith(".so") for f in got["files"])
    assert "onnx" in got["site_files"], "onnx, a runtime dependency, was installed"
    assert "numpy" in got["site_files"], "numpy, a runtime dependency, was installed"
    # only the package: no C library, headers or command
    assert not [f for f in got["site_files"] if f.startswith("libtpfuse")]
    assert not (venv / "bin" / "tpfuse").exists()
    assert not (venv / "include" / "tpfuse").exists()
    assert not (venv / "lib" / "libtpfuse.so").exists()

    import tpfuse

    assert got["version"] == tpfuse.__version__
    assert got["passes"] == [i.name for i in tpfuse.passes()]
    cli = run_cli(tpfuse_cli, "optimize", dense_rank0, "-o", str(tmp_path / "cli.onnx"), "--stats")
    assert cli.returncode == 0, cli.stderr
    assert got["stats"] == read_cli_stats(cli.stdout)
    assert "AllReduceRMSNorm" in got["ops"]
    assert got["relu"] == [0.0, 2.0], "the installed package runs a model"
