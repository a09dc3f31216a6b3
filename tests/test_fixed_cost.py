"""The fixed cost of a process, checked by what it loads (its time is measured by bench/imports.py, never asserted):
a fresh ``vacuum`` imports no library a plain VACUUM does not use (the package import: test_import), a command's
``--help`` loads only that command, and every command of the lazy group still helps. No Spark."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest
from click.testing import CliRunner

from dbt_delta_optimize.cli.main import COMMAND_MODULES, cli

#: What no VACUUM of a path needs (pyarrow.compute: its kernels; the rest: other commands' libraries).
NEVER_IN_VACUUM = ("pyarrow.compute", "pandas", "jinja2", "sqlglot", "deltalake", "rich", "pyspark", "py4j")
#: What a VACUUM of a table without a Parquet checkpoint does not need either (numpy: no VACUUM loads it).
NOT_FOR_A_JSON_LOG = ("numpy", "pyarrow")

PROBE = """
import json, os, sys
import dbt_delta_optimize.cli.main as m
m.exit_process = lambda code: print(
    json.dumps({"code": code, "modules": sorted(sys.modules), "blas": os.environ.get("OPENBLAS_NUM_THREADS")})
)
m.main(sys.argv[1:])
"""


def _fresh(*argv: str) -> tuple[dict[str, object], set[str]]:
    """Run the console script's main in a fresh process: (its JSON output, if any; the modules it loaded)."""
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    r = subprocess.run([sys.executable, "-c", PROBE, *argv], capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 0, r.stderr
    *out, last = r.stdout.strip().splitlines()
    probe = json.loads(last)
    assert probe["code"] == 0, r.stderr
    text = "\n".join(out)
    return (json.loads(text) if text.startswith("{") else {}), set(probe["modules"])


def _table(path: str, *, checkpoint: bool) -> str:
    """A partitioned path table with two tombstoned files, with or without a Parquet checkpoint."""
    import pyarrow as pa
    from deltalake import DeltaTable, write_deltalake

    write_deltalake(path, pa.table({"id": [1, 2], "p": ["a", "b"]}), partition_by=["p"])
    if checkpoint:
        DeltaTable(path).create_checkpoint()
    write_deltalake(path, pa.table({"id": [3], "p": ["c"]}), partition_by=["p"], mode="overwrite")
    return path


@pytest.mark.parametrize("mode", ["full", "lite"])
def test_vacuum_of_a_json_log_loads_no_arrow_numpy_pandas_or_template_library(tmp_path, mode):
    path = _table(str(tmp_path / "t"), checkpoint=False)
    argv = ("vacuum", path, "--mode", mode, "--retain", "0h", "--allow-short-retention", "--json")
    metrics, modules = _fresh(*argv)
    assert metrics["filesDeleted"] == 2, metrics  # the work was done, not skipped
    loaded = sorted(m for m in (*NEVER_IN_VACUUM, *NOT_FOR_A_JSON_LOG) if m in modules)
    assert loaded == [], f"a plain VACUUM loaded {loaded}"


def test_vacuum_of_a_checkpointed_table_loads_no_compute_kernels_pandas_or_deltalake(tmp_path):
    path = _table(str(tmp_path / "t"), checkpoint=True)
    assert any(n.endswith(".checkpoint.parquet") for n in os.listdir(os.path.join(path, "_delta_log")))
    metrics, modules = _fresh("vacuum", path, "--retain", "0h", "--allow-short-retention", "--json")
    assert metrics["filesDeleted"] == 2, metrics
    assert "pyarrow.parquet" in modules  # the checkpoint was read (the case this test is about)
    loaded = sorted(m for m in (*NEVER_IN_VACUUM, "numpy") if m in modules)
    assert loaded == [], f"a VACUUM of a checkpointed table loaded {loaded}"


CALLER = """
import json, sys
from click.testing import CliRunner
from dbt_delta_optimize.cli.main import cli
r = CliRunner().invoke(cli, sys.argv[1:])
import numpy, pyarrow as pa
print(json.dumps({"code": r.exit_code, "output": r.output, "sum": pa.array(numpy.arange(4)).to_pylist()}))
"""


def test_a_callers_process_keeps_numpy_after_the_vacuum_command(tmp_path):
    """pyarrow without numpy is the console script's choice alone: a process that runs the command and goes on
    (the API, a test runner) still converts numpy arrays afterwards."""
    path = _table(str(tmp_path / "t"), checkpoint=True)
    argv = ["vacuum", path, "--retain", "0h", "--allow-short-retention", "--json"]
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    r = subprocess.run([sys.executable, "-c", CALLER, *argv], capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["code"] == 0, out["output"]
    assert json.loads(out["output"])["filesDeleted"] == 2
    assert out["sum"] == [0, 1, 2, 3]


def test_a_command_help_loads_only_that_command():
    _, modules = _fresh("vacuum", "--help")
    ours = sorted(m for m in modules if m.startswith("dbt_delta_optimize.cli."))
    assert ours == [f"dbt_delta_optimize.cli.{m}" for m in ("common", "format", "main", "settings", "vacuum")]
    assert "dbt_delta_optimize.ops.vacuum" not in modules  # the operation is imported when the command runs


def test_every_command_has_its_own_help():
    """Each command of the lazy group still answers ``--help`` (the group's listing: test_vacuum_fresh)."""
    runner = CliRunner()
    for name in [n for group in COMMAND_MODULES.values() for n in group] + ["jars"]:
        command = cli.get_command(None, name)  # type: ignore[arg-type]
        assert command is not None, name
        r = runner.invoke(cli, [name, "--help"], terminal_width=200)
        assert r.exit_code == 0, (name, r.output)
        assert r.output.startswith((f"Usage: cli {name} ", f"Usage: cli {name}\n")), r.output
        assert (command.help or "").split("\n")[0][:30] in r.output and "Exit codes:" in r.output, name


def test_a_vacuum_without_numpy_finds_the_files_the_api_finds(tmp_path):
    """The console script's numpy-free VACUUM (a dry run) lists exactly what the API lists in this process, numpy
    loaded, on a table with tombstones in its checkpoint and after it, and a file no version references."""
    import pyarrow as pa
    from deltalake import DeltaTable, write_deltalake

    from dbt_delta_optimize.ops.vacuum import vacuum

    path = str(tmp_path / "t")
    for i in range(6):
        write_deltalake(path, pa.table({"id": [i], "p": [f"p{i % 3}"]}), partition_by=["p"], mode="append")
    DeltaTable(path).optimize.compact()
    DeltaTable(path).create_checkpoint()
    write_deltalake(path, pa.table({"id": [9], "p": ["p0"]}), partition_by=["p"], mode="overwrite")
    with open(os.path.join(path, "p=p1", "orphan.parquet"), "wb") as fh:
        fh.write(b"not referenced")
    argv = ("vacuum", path, "--retain", "0h", "--allow-short-retention", "--dry-run", "--json")
    metrics, modules = _fresh(*argv)
    assert "pyarrow.parquet" in modules and "numpy" not in modules
    api = vacuum(None, path, retain="0h", dry_run=True, allow_short_retention=True)
    assert sorted(f["path"] for f in metrics["files"]) == sorted(c.path for c in api.files)
    assert metrics["filesDeleted"] == api.files_deleted >= 10


def test_numpy_stays_importable_wherever_a_vacuum_may_use_spark(monkeypatch):
    """Spark's Python client needs numpy: a catalog name (resolved by a session), ``--task-runner spark`` and
    Spark Connect keep it (their end-to-end runs: test_cluster's remote vacuum); a path on the driver does not."""
    from dbt_delta_optimize.cli.vacuum import _without_spark

    monkeypatch.delenv("SPARK_REMOTE", raising=False)
    assert _without_spark("/data/t", None) and _without_spark("s3://b/t", "auto") and _without_spark("./t", "driver")
    assert not _without_spark("default.events", None)
    assert not _without_spark("/data/t", "spark")
    monkeypatch.setenv("SPARK_REMOTE", "sc://127.0.0.1:15002")
    assert not _without_spark("/data/t", "auto")


#: pyarrow conversions that import pandas on first use when it is installed (a type to infer, a Python number).
CONVERSIONS = """
import sys
import pyarrow as pa, pyarrow.compute as pc
from dbt_delta_optimize import no_pandas
refused = no_pandas.block() if sys.argv[1] == "block" else False
pa.array([{"a": 1}]); pa.scalar(1); pc.not_equal(pa.array([1, 2]), 1)
before = "pandas" in sys.modules
no_pandas.unblock()
import pandas as pd
kept = pa.array(pd.Series(pd.to_datetime(["2020-01-01T00:00:00.000000001"]))).type
print(refused, before, kept)
"""


@pytest.mark.parametrize("mode", ["block", "none"])
def test_pyarrow_converts_without_pandas_once_refused_and_keeps_its_integration_after(mode):
    """``no_pandas.block``: pyarrow's conversions no longer import pandas; ``unblock`` gives pyarrow its pandas
    integration back (a pandas Series of nanoseconds stays nanoseconds). Without the block they import it."""
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    r = subprocess.run([sys.executable, "-c", CONVERSIONS, mode], capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 0, r.stderr
    blocked = mode == "block"
    assert r.stdout.split() == [str(blocked), str(not blocked), "timestamp[ns]"]


#: The console script's main with bins of four files or more paying for processes (``MIN_FILES``), and what
#: is left of its processes at the end: whether it started a fork server, its live children, its pid.
PREFORK_PROBE = """
import json, multiprocessing, os, sys
from multiprocessing import forkserver
import dbt_delta_optimize.cli.main as m
from dbt_delta_optimize.engine import bin_processes
bin_processes.MIN_FILES = 4
m.exit_process = lambda code: print(json.dumps({
    "code": code, "modules": sorted(sys.modules), "blas": os.environ.get("OPENBLAS_NUM_THREADS"),
    "thp": os.environ.get("MIMALLOC_ALLOW_THP"), "server": forkserver._forkserver._forkserver_pid,
    "children": len(multiprocessing.active_children()), "pid": os.getpid(),
    "arrow_numpy": getattr(sys.modules.get("pyarrow.lib"), "np", None) is not None,
}))
m.main(sys.argv[1:])
"""


def test_a_fresh_optimize_forks_its_workers_and_imports_neither_pandas_nor_deltalake_nor_numpy(tmp_path):
    """The console script's OPTIMIZE of a local table forks its bin workers itself as it starts (no fork server,
    ``bin_processes.prefork``), its bins run in them, and none is left at the end; it imports pandas nowhere
    (``-X importtime`` is inherited by the workers), reads the log without deltalake, keeps OpenBLAS to one
    thread and Arrow's allocator off huge pages, and the table keeps its rows, as deltalake reads them.

    The driver never imports numpy (``cli.optimize._arrow_without_numpy``): not to read the stats of the removed
    files from delta-rs's checkpoint (``LazyFields.read``), not to plan, and not to write the checkpoint its own
    commit is due (interval 2), which deltalake then reads."""
    import pyarrow as pa
    from deltalake import DeltaTable, write_deltalake

    path = str(tmp_path / "t")
    for i in range(4):
        write_deltalake(
            path,
            pa.table({"id": [i, i + 10], "p": ["a", "b"]}),
            partition_by=["p"],
            mode="append",
            configuration={"delta.checkpointInterval": "2"},
        )
        if i == 2:
            DeltaTable(path).create_checkpoint()
    assert os.path.exists(f"{path}/_delta_log/00000000000000000002.checkpoint.parquet")  # the stats read from it
    expected = sorted(DeltaTable(path).to_pyarrow_table().to_pylist(), key=lambda r: r["id"])
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    for name in ("OPENBLAS_NUM_THREADS", "MIMALLOC_ALLOW_THP"):
        env.pop(name, None)
    argv = [sys.executable, "-X", "importtime", "-c", PREFORK_PROBE, "-v", "optimize", path, "--json"]
    r = subprocess.run(argv, capture_output=True, text=True, timeout=180, env=env)
    assert r.returncode == 0, r.stderr[-2000:]
    *out, last = r.stdout.strip().splitlines()
    probe = json.loads(last)
    assert probe["code"] == 0
    assert json.loads("\n".join(out))["numFilesRemoved"] == 8
    pids = {int(p) for p in re.findall(r"bin \S+ rewritten in \S+ by \S+ on \S+ \(pid (\d+)\)", r.stderr)}
    assert len(pids) >= 1 and probe["pid"] not in pids, "the bins did not run in worker processes"
    assert probe["server"] is None and probe["children"] == 0  # forked by the CLI itself; every one joined
    imported = {line.rsplit("|", 1)[-1].strip() for line in r.stderr.splitlines() if line.startswith("import time:")}
    assert "dbt_delta_optimize.engine.fork_server_init" not in imported
    modules = set(probe["modules"])
    assert "pandas" not in modules
    assert "deltalake" not in modules  # the log read by our own replay alone (snapshot.LEAN_REPLAY_ROWS)
    assert "numpy" not in modules and not probe["arrow_numpy"]  # pyarrow loaded without it, and nothing asked for it
    # nor pyarrow.compute (25-32 ms of wrappers), in the driver or its workers: their kernels by name (``arrow_kernels``)
    assert "pyarrow.compute" not in modules and "pyarrow.compute" not in imported
    assert os.path.exists(f"{path}/_delta_log/00000000000000000004.checkpoint.parquet")  # ours, written numpy-free
    assert probe["blas"] == "1" and probe["thp"] == "0"  # both set before pyarrow loads
    assert not modules & {"urllib.request", "http.client", "xml.etree.ElementTree"}  # the jars' download only
    assert not {m for m in imported if m.startswith("pandas.")}, "pandas was imported"
    table = DeltaTable(path)
    assert len(table.file_uris()) == 2
    assert sorted(table.to_pyarrow_table().to_pylist(), key=lambda r: r["id"]) == expected


BLAS_THREADS = """
import os, sys
if sys.argv[1] == "cli":
    from dbt_delta_optimize.no_pandas import one_blas_thread
    one_blas_thread()
import numpy
print(len(os.listdir("/proc/self/task")))
"""


def test_the_console_script_keeps_numpy_to_one_blas_thread():
    """numpy's OpenBLAS starts a thread per core as it loads; the console script's setting keeps it to none
    beside the main thread, and a user's own setting wins."""
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    env["PYTHONPATH"] = os.getcwd()

    def threads(mode: str, **extra: str) -> int:
        r = subprocess.run(
            [sys.executable, "-c", BLAS_THREADS, mode], capture_output=True, text=True, timeout=60, env={**env, **extra}
        )
        assert r.returncode == 0, r.stderr
        return int(r.stdout)

    assert threads("cli") == 1
    assert threads("plain") == (os.cpu_count() or 1)  # what it saves: one thread per further core
    assert threads("cli", OPENBLAS_NUM_THREADS="2") == min(2, os.cpu_count() or 1)


SERVER_PRELOAD = """
import json, sys
from dbt_delta_optimize.engine.fork_server import PRELOAD as _PRELOAD
for name in _PRELOAD:
    __import__(name)
loaded = "numpy" in sys.modules
import numpy, pyarrow as pa
try:
    pa.array([1]).to_numpy()
    integrated = True
except ImportError:
    integrated = False
print(json.dumps({"numpy_loaded": loaded, "integrated": integrated, "pandas": "pandas" in sys.modules}))
"""


def test_the_fork_servers_preload_loads_pyarrow_without_numpy_and_leaves_numpy_importable():
    """The bin workers' fork server imports what a bin needs but numpy (pyarrow would load it: 60-80 ms of the
    server's start) and pandas; numpy stays importable (a deletion vector's decoding uses it), and pyarrow, loaded
    without it, has no numpy integration (so ``DeletedRows.keep`` hands it a buffer)."""
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    r = subprocess.run([sys.executable, "-c", SERVER_PRELOAD], capture_output=True, text=True, timeout=60, env=env)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == {"numpy_loaded": False, "integrated": False, "pandas": False}
