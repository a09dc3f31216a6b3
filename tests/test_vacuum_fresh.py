"""What makes a fresh ``vacuum`` process cheap, checked for what it must not change: the CLI loads a command's
module only when it runs (``--help`` still lists them all), and a large local delete (obstore's LocalStore)
deletes and counts exactly what the one-by-one loop does. Pure: no Spark. Speed is in bench/vacuum.py."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys

import pytest
from click.testing import CliRunner

from dbt_delta_optimize.cli.main import COMMAND_MODULES, cli
from dbt_delta_optimize.delta import storage
from dbt_delta_optimize.delta.storage import LocalStorage

SCRIPT = os.path.join(os.path.dirname(sys.executable), "dbt-delta-optimize")


def test_command_modules_name_exactly_their_commands():
    for module, names in COMMAND_MODULES.items():
        loaded = importlib.import_module(f"dbt_delta_optimize.cli.{module}")
        assert tuple(c.name for c in getattr(loaded, f"{module}_commands")) == names, module
    # a command module a merge adds must be registered too, or its commands would be missing from the CLI
    import pkgutil

    import dbt_delta_optimize.cli as package

    for info in pkgutil.iter_modules(package.__path__):
        loaded = importlib.import_module(f"dbt_delta_optimize.cli.{info.name}")
        tuples = [n for n in vars(loaded) if n.endswith("_commands") and isinstance(vars(loaded)[n], tuple)]
        assert tuples in ([], [f"{info.name}_commands"]) and (not tuples or info.name in COMMAND_MODULES), info.name


def test_help_lists_every_command_with_its_short_help():
    r = CliRunner().invoke(cli, ["--help"], terminal_width=200)
    assert r.exit_code == 0, r.output
    listed = r.output.split("Commands:")[1]
    for names in [*COMMAND_MODULES.values(), ("jars",)]:
        for name in names:
            command = cli.get_command(None, name)  # type: ignore[arg-type]
            assert command is not None
            assert f"  {name} " in listed and command.get_short_help_str(200)[:30] in listed, name
    assert CliRunner().invoke(cli, ["nope"]).exit_code == 2


PROBE = """
import sys
from dbt_delta_optimize.cli.main import main
import dbt_delta_optimize.cli.main as m
m.exit_process = lambda code: print(code, sorted(n for n in sys.modules if n.startswith("dbt_delta_optimize.cli.")
    or n in ("dbt_delta_optimize.delta.object_store", "dbt_delta_optimize.inspect.log_cleanup", "pyarrow",
    "deltalake", "rich", "pyspark")))
main(sys.argv[1:])
"""


def test_a_fresh_vacuum_imports_only_its_command(tmp_path):
    import pyarrow as pa
    from deltalake import write_deltalake

    path = str(tmp_path / "t")  # a tiny partitioned path table with one tombstone
    write_deltalake(path, pa.table({"id": [1], "p": ["a"]}), partition_by=["p"])
    write_deltalake(path, pa.table({"id": [2], "p": ["b"]}), partition_by=["p"], mode="overwrite")
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    argv = [sys.executable, "-c", PROBE, "vacuum", path, "--retain", "0h", "--allow-short-retention", "--json"]
    r = subprocess.run(argv, capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 0, r.stderr
    code, _, modules = r.stdout.strip().splitlines()[-1].partition(" ")
    assert code == "0" and '"filesDeleted": 1' in r.stdout, r.stdout
    assert modules == str(
        sorted(f"dbt_delta_optimize.cli.{m}" for m in ("common", "format", "main", "settings", "vacuum"))
    )
    r = subprocess.run([SCRIPT, "--help"], capture_output=True, text=True, timeout=60, env=env)
    assert r.returncode == 0 and "vacuum" in r.stdout and "optimize" in r.stdout


@pytest.fixture
def bulk_from_20(monkeypatch):
    """Batches of 20 or more go through the threads (2,000 in production): small tests, same code."""
    monkeypatch.setattr(storage, "_BULK_DELETE", 20)


@pytest.mark.parametrize("n", [0, 50, 300])  # the one-by-one loop (under 20 paths), one thread, two threads
def test_local_delete_many_deletes_and_counts_what_was_there(tmp_path, n, bulk_from_20):
    root = str(tmp_path)
    os.makedirs(f"{root}/p=1")
    os.makedirs(f"{root}/p=%3A x")
    files = [f"{root}/f{i}.parquet" for i in range(n)]
    files += [f"{root}/p=1/g{i}" for i in range(3)] + [f"{root}/p=%3A x/.h{i}.parquet.crc" for i in range(3)]
    files += [f"{root}/tab\tname", f"{root}/p%20q", f"{root}/é"]  # names object_store refused (a tab)
    for f in files:
        open(f, "w").close()
    open(f"{root}/kept", "w").close()
    missing = [f"{root}/gone{i}" for i in range(4)] + [f"{root}/nodir/x"]
    asked = [*missing[:2], *files, *missing[2:]] if n else files
    assert LocalStorage().delete_many(asked) == len(files)
    assert sorted(os.listdir(root)) == ["kept", "p=%3A x", "p=1"]
    assert os.listdir(f"{root}/p=1") == [] and os.listdir(f"{root}/p=%3A x") == []
    assert LocalStorage().delete_many(files) == 0


@pytest.mark.parametrize(("cores", "threads"), [(None, 2), (1, 2), (2, 2), (8, 8), (64, 16)])
def test_bulk_delete_takes_a_thread_per_core_within_bounds(monkeypatch, cores, threads):
    monkeypatch.setattr(storage.os, "cpu_count", lambda: cores)
    assert storage._delete_threads() == threads


def test_bulk_delete_raises_what_unlink_raises(tmp_path, bulk_from_20):
    root = str(tmp_path)
    files = [f"{root}/f{i}" for i in range(30)]
    for f in files:
        open(f, "w").close()
    os.makedirs(f"{root}/folder")
    with pytest.raises(IsADirectoryError):
        LocalStorage().delete_many([*files, f"{root}/folder"])
    assert os.listdir(root) == ["folder"]
