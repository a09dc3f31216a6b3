"""A built wheel, installed with pip into a fresh venv, is found by dbt as a plugin (no editable tricks).

dbt discovers plugins with ``pkgutil.iter_modules()`` over ``dbt_*`` top-level modules, which an
editable install in setuptools' default (strict) mode hides; a user's ``pip install`` of the wheel
must work. The fresh venv gets only the wheel; the heavy dependencies (pyspark, dbt) are borrowed
from the test venv through a path entry, whose own ``.pth`` files (our editable install) are not run.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

CHECK = """
import os, sys
import dbt_delta_optimize
from dbt.plugins.manager import PluginManager
from dbt.context import base

assert dbt_delta_optimize.__file__.startswith(sys.prefix), dbt_delta_optimize.__file__
assert "dbt_delta_optimize" in PluginManager.get_prefixed_modules()
manager = PluginManager.from_modules("demo")
assert [type(p).__name__ for p in manager._plugins] == ["DeltaOptimizePlugin"], manager._plugins
modules = base.get_context_modules()
assert "delta_optimize" in modules, sorted(modules)
assert callable(modules["delta_optimize"]["run_model"])
print("plugin OK")
"""


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> str:
    out = tmp_path_factory.mktemp("wheel")
    src = out / "src"  # a clean copy: setuptools' build/ folder in the work tree may hold deleted modules
    skip = shutil.ignore_patterns(
        ".*", "build", "*.egg-info", "__pycache__", "node_modules", "bench", "integration_tests"
    )
    shutil.copytree(ROOT, src, ignore=skip)
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(out), str(src)],
        check=True,
        capture_output=True,
        cwd=str(out),
        timeout=300,
    )
    (name,) = [n for n in os.listdir(out) if n.endswith(".whl")]
    return str(out / name)


def test_wheel_ships_the_package_data(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    assert "dbt_delta_optimize/py.typed" in names
    assert "dbt_delta_optimize/engine/log4j2-quiet.properties" in names
    assert "dbt_delta_optimize/inspect/templates/health.html.j2" in names
    assert not [n for n in names if n.startswith(("tests/", "integration_tests/", "bench/"))]


@pytest.mark.slow
def test_pip_installed_wheel_is_a_dbt_plugin(wheel, tmp_path):
    venv = tmp_path / "fresh"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = str(venv / "bin" / "python")
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", python, "install", "-q", "--no-deps", wheel],
        check=True,
        capture_output=True,
        timeout=300,
    )
    site = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    with open(os.path.join(site, "_borrowed_deps.pth"), "w") as fh:
        fh.write(sysconfig.get_paths()["purelib"] + "\n")  # dependencies only: its .pth files are not read
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    run = subprocess.run([python, "-c", CHECK], cwd=str(tmp_path), env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0 and "plugin OK" in run.stdout, run.stdout + run.stderr
    cli = subprocess.run(
        [str(venv / "bin" / "dbt-delta-optimize"), "--version"],
        cwd=str(tmp_path),
        env=env,
        capture_output=True,
        text=True,
    )
    assert cli.returncode == 0 and "dbt-delta-optimize" in cli.stdout, cli.stdout + cli.stderr
