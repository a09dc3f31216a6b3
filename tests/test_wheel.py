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
    assert not [n for n in names if n.endswith("demo.py")]  # the demo needs the source tree's dbt project


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


@pytest.mark.slow
@pytest.mark.spark
def test_a_pip_only_install_resolves_delta_jars_and_optimizes(wheel, tmp_path):
    """A user's path: `pip install <wheel>` into a fresh venv (its dependencies from the registry, pip's cache
    warm), `dbt-delta-optimize jars` from Maven Central into the user cache, then `optimize` on a local table."""
    import json

    import pyarrow as pa
    from deltalake import DeltaTable, write_deltalake

    venv = tmp_path / "user-venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = str(venv / "bin" / "python")
    install = subprocess.run(
        [sys.executable, "-m", "pip", "--python", python, "install", "-q", "--no-compile", wheel],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert install.returncode == 0, install.stdout[-3000:] + install.stderr[-3000:]
    home = tmp_path / "home"  # the user cache, empty: the jars come from Maven Central
    drop = ("PYTHONPATH", "VIRTUAL_ENV", "SPARK_REMOTE", "DBT_DELTA_OPTIMIZE_JARS", "SPARK_HOME")
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env["DBT_DELTA_OPTIMIZE_HOME"] = str(home)
    cli = str(venv / "bin" / "dbt-delta-optimize")
    jars = subprocess.run([cli, "jars"], env=env, cwd=str(tmp_path), capture_output=True, text=True, timeout=600)
    assert jars.returncode == 0, jars.stdout + jars.stderr
    paths = jars.stdout.strip().split(",")
    assert all(os.path.isfile(p) and p.startswith(str(home / "jars")) for p in paths), paths
    assert any(os.path.basename(p).startswith("delta-spark_") for p in paths), paths

    table = str(tmp_path / "events")
    for i in range(4):
        write_deltalake(table, pa.table({"id": list(range(i * 10, i * 10 + 10)), "part": ["a"] * 10}), mode="append")
    before = sorted(DeltaTable(table).to_pyarrow_table().column("id").to_pylist())
    run = subprocess.run(
        [cli, "optimize", table, "--json"], env=env, cwd=str(tmp_path), capture_output=True, text=True, timeout=900
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    metrics = json.loads(run.stdout)
    assert metrics["numFilesRemoved"] == 4 and metrics["numFilesAdded"] == 1
    assert sorted(DeltaTable(table).to_pyarrow_table().column("id").to_pylist()) == before
    assert DeltaTable(table).history(1)[0]["operation"] == "OPTIMIZE"
