"""Real clusters: spark-submit on a standalone master + worker, and Spark Connect, both started by the tests.

The executors (and the Connect server's Python workers) run ``.venv-executor``: pyarrow, numpy and
pandas, but not this package. The Arrow rewrite must still run there, because the package is
shipped; each task logs the interpreter it ran in and where the package came from.

Connect clients run in subprocesses: creating one switches PySpark into Connect mode for the whole
process, which the in-process classic ``spark`` fixture of the other tests must not see.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from dbt_delta_optimize.delta.snapshot import load_snapshot
from tests.helpers import deltalake_table
from tests.servers import EXECUTOR_PYTHON, ROOT, delta_confs, spark_home

pytestmark = [pytest.mark.slow, pytest.mark.spark]

JOB = os.path.join(ROOT, "python", "optimize_job.py")
FALLBACK = "instead of Arrow"
#: What the driver logs for each bin an Arrow task rewrote (with the interpreter and where the package came from).
ARROW_TASK = "package from"


def small_files_table(path: str, appends: int = 5) -> None:
    """4 partitions x ``appends`` files: 20 small files by default."""
    for i in range(appends):
        n = 200
        write_deltalake(
            path,
            pa.table(
                {
                    "id": pa.array(range(i * n, (i + 1) * n), pa.int64()),
                    "x": pa.array([(k * 7919) % 1000 / 10 for k in range(n)], pa.float64()),
                    "y": pa.array([(k * 104729) % 997 for k in range(n)], pa.int64()),
                    "p": pa.array([f"p{k % 4}" for k in range(n)]),
                }
            ),
            partition_by=["p"],
            mode="append",
        )


def rows(path: str) -> list[tuple]:
    t = deltalake_table(path)
    return sorted(zip(*(t.column(c).to_pylist() for c in ("id", "x", "y", "p"))))


def live_files(path: str) -> int:
    return len(DeltaTable(path).file_uris())


def brief(text: str) -> str:
    """Output without Java stack frames and INFO lines, for assertion messages."""
    return "\n".join(x for x in text.splitlines() if " INFO " not in x and not x.lstrip().startswith("at "))[-4000:]


def _client_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("SPARK_REMOTE", "MASTER")}
    env.update(PYTHONPATH=ROOT, COLUMNS="500", SPARK_HOME=spark_home(), **extra)
    return env


def run_client(script: str, *args: str) -> subprocess.CompletedProcess[str]:
    """A Connect client script in its own process (Connect mode must not leak into this one)."""
    return subprocess.run(
        [sys.executable, "-c", script, *args], env=_client_env(), capture_output=True, text=True, timeout=600
    )


def job_json(out: str) -> dict:
    """The JSON the job printed (spark-submit sends the Python driver's stderr to stdout too, logs first)."""
    lines = out.splitlines()
    start = lines.index("{")
    return json.loads("\n".join(lines[start : lines.index("}", start) + 1]))


def submit(cluster, *args: str, python: str = EXECUTOR_PYTHON) -> subprocess.CompletedProcess[str]:
    """``spark-submit python/optimize_job.py ARGS`` on the standalone cluster (driver: this venv; logs on stdout;
    executors: ``python``)."""
    cmd = [
        os.path.join(spark_home(), "bin", "spark-submit"),
        *("--master", cluster.master, "--driver-memory", "512m", "--executor-memory", "512m"),
        *("--conf", "spark.cores.max=2", "--conf", "spark.ui.enabled=false", "--conf", "spark.log.level=WARN"),
        *(
            "--conf",
            f"spark.pyspark.python={python}",
            "--conf",
            f"spark.pyspark.driver.python={sys.executable}",
        ),
        *delta_confs(),
        JOB,
        *args,
    ]
    proc = subprocess.run(cmd, env=_client_env(), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, (
        proc.stdout[-2000:] + "\n".join(x for x in proc.stderr.splitlines() if " INFO " not in x)[-3000:]
    )
    return proc


def test_spark_submit_compacts_and_zorders_with_arrow_on_executors_without_the_package(standalone_cluster, tmp_path):
    path = str(tmp_path / "events")
    small_files_table(path)
    before = rows(path)
    assert live_files(path) == 20

    proc = submit(standalone_cluster, "-v", path)
    metrics = job_json(proc.stdout)
    assert (metrics["numFilesRemoved"], metrics["numFilesAdded"]) == (20, 4)
    assert FALLBACK not in proc.stdout + proc.stderr
    # The executor's marker: its interpreter, and the package imported from the zip this run shipped.
    ran = [line for line in proc.stdout.splitlines() if ARROW_TASK in line]
    assert len(ran) == 4, proc.stdout[-3000:]
    assert all(EXECUTOR_PYTHON in line and "package from" in line for line in ran), ran
    assert "dbt_delta_optimize-0.1.0-" in proc.stdout and ".zip/dbt_delta_optimize/__init__.py" in proc.stdout
    assert live_files(path) == 4 and rows(path) == before

    proc = submit(standalone_cluster, path, "--zorder-by", "x,y", "--curve", "hilbert", "--full")
    metrics = job_json(proc.stdout)
    assert metrics["numFilesRemoved"] == 4 and metrics["zOrderStats"] is not None
    assert FALLBACK not in proc.stdout + proc.stderr
    assert rows(path) == before
    (last, *_) = DeltaTable(path).history()
    assert last["operation"] == "OPTIMIZE" and json.loads(last["operationParameters"]["zOrderBy"]) == ["x", "y"]


def test_optimize_job_passes_every_cli_option():
    sys.path.insert(0, os.path.join(ROOT, "python"))
    try:
        from optimize_job import cli_args
    finally:
        sys.path.pop(0)
    assert cli_args(["t", "--zorder-by", "a", "-v", "--remote", "sc://h:1"]) == [
        "-v",
        "--remote",
        "sc://h:1",
        "optimize",
        "t",
        "--zorder-by",
        "a",
        "--json",
    ]
    assert cli_args(["auto-compact", "t", "--enable", "--storage-option", "K=V"]) == [
        "auto-compact",
        "t",
        "--enable",
        "--storage-option",
        "K=V",
        "--json",
    ]
    assert cli_args(["vacuum", "t", "--mode", "lite"]) == ["vacuum", "t", "--mode", "lite", "--json"]


CONNECT_SCRIPT = textwrap.dedent(
    """
    import json, logging, sys
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING, format="%(name)s %(message)s")
    logging.getLogger("dbt_delta_optimize").setLevel(logging.INFO)
    from dbt_delta_optimize import get_spark, optimize
    from dbt_delta_optimize.dbt.bridge import Bridge

    url, path, zpath, target = sys.argv[1:5]
    spark = get_spark(remote=url)
    assert type(spark).__module__.startswith("pyspark.sql.connect"), type(spark)
    out = {"compact": optimize(spark, path).to_dict()}
    spark.sql(f"CREATE TABLE spark_catalog.default.zt USING delta LOCATION '{zpath}'")
    out["zorder"] = optimize(spark, "spark_catalog.default.zt", zorder_by=["x", "y"]).to_dict()
    # dbt on a server method (thrift): the hook runs through Spark Connect, with a three-part name.
    out["thrift"] = Bridge().run_operation(
        "spark_catalog.default.zt", zorder_by=["y"], invocation_id="inv", target_path=target,
        spark_target={"method": "thrift", "remote": url},
    )
    # VACUUM through Spark Connect: the catalog name resolved and the conf read on the Connect session.
    from dbt_delta_optimize import vacuum
    kw = dict(retain=0, allow_short_retention=True)
    out["vacuum_dry"] = vacuum(spark, "spark_catalog.default.zt", dry_run=True, **kw).to_dict()
    out["vacuum"] = vacuum(spark, "spark_catalog.default.zt", **kw).to_dict()
    print(json.dumps(out))
    """
)


def test_spark_connect_python_api_and_dbt_server_method(connect_server, tmp_path):
    path, zpath = str(tmp_path / "events"), str(tmp_path / "zt")
    small_files_table(path)
    small_files_table(zpath, appends=2)
    before, zbefore = rows(path), rows(zpath)
    proc = run_client(CONNECT_SCRIPT, connect_server.url, path, zpath, str(tmp_path / "target"))
    assert proc.returncode == 0, brief(proc.stderr)
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert (out["compact"]["numFilesRemoved"], out["compact"]["numFilesAdded"]) == (20, 4)
    assert out["compact"]["sparkFallbacks"] == []
    assert rows(path) == before and live_files(path) == 4
    assert FALLBACK not in proc.stderr
    ran = [line for line in proc.stderr.splitlines() if ARROW_TASK in line]
    assert len(ran) == 4 and all(EXECUTOR_PYTHON in line for line in ran), proc.stderr[-3000:]
    assert out["zorder"]["numFilesRemoved"] == 8 and out["zorder"]["zOrderStats"] is not None
    thrift = out["thrift"]
    assert thrift["status"] == "optimized" and thrift["location"].rstrip("/").endswith("zt"), thrift
    assert rows(zpath) == zbefore
    # VACUUM (retain 0) through Connect deletes what both compactions of zt removed, and leaves the live files.
    removed = out["zorder"]["numFilesRemoved"] + thrift["metrics"]["numFilesRemoved"]
    assert out["vacuum_dry"]["filesDeleted"] == out["vacuum"]["filesDeleted"] == removed, out["vacuum_dry"]
    # on Connect the listing and the deletes are Spark jobs (engine/vacuum_job), run by the server's Python workers
    assert (out["vacuum_dry"]["listedBy"], out["vacuum"]["listedBy"], out["vacuum"]["deletedBy"]) == ("spark",) * 3
    listed = [line for line in proc.stderr.splitlines() if " listed by " in line]
    assert len(listed) == 8 and all(EXECUTOR_PYTHON in line for line in listed), proc.stderr[
        -3000:
    ]  # 4 partitions, twice
    on_disk = [n for d, _, names in os.walk(zpath) if "_delta_log" not in d for n in names if not n.startswith(".")]
    assert len(on_disk) == live_files(zpath) and rows(zpath) == zbefore


def test_cli_remote(connect_server, tmp_path):
    path = str(tmp_path / "events")
    small_files_table(path, appends=2)
    before = rows(path)
    cli = os.path.join(os.path.dirname(sys.executable), "dbt-delta-optimize")
    proc = subprocess.run(
        [cli, "--remote", connect_server.url, "optimize", path, "--json"],
        env=_client_env(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, brief(proc.stderr)
    metrics = json.loads(proc.stdout)
    assert metrics["numFilesAdded"] == 4 and rows(path) == before
    assert metrics["totalClusterParallelism"] == 2  # the server's local[2], read from a range's plan
    # The python/ job's vacuum through Spark Connect: the 8 files the compaction removed, nothing live. A path
    # needs no session; --task-runner spark lists and deletes with Spark jobs on the server all the same.
    job = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "python", "optimize_job.py")
    vacuum = [sys.executable, job, "--remote", connect_server.url, "vacuum", path, "--retain", "0"]
    proc = subprocess.run(
        [*vacuum, "--allow-short-retention", "--task-runner", "spark"],
        env=_client_env(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, brief(proc.stderr)
    metrics = json.loads(proc.stdout)
    assert (metrics["listedBy"], metrics["deletedBy"]) == ("spark", "spark"), metrics
    assert metrics["filesDeleted"] == 8 and rows(path) == before and live_files(path) == 4
    # SPARK_REMOTE works as --remote; a server that is not there is one clear line, exit 3 (retry later).
    proc = subprocess.run(
        [cli, "optimize", path, "--json"],
        env=_client_env(SPARK_REMOTE="sc://127.0.0.1:9"),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 3 and proc.stderr.startswith("error: cannot reach the Spark Connect server"), proc.stderr
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


def test_dbt_project_through_spark_connect(connect_server, tmp_path):
    """dbt-spark's session method with SPARK_REMOTE: dbt's SQL and our hooks both run on the Connect server."""
    project = os.path.join(ROOT, "integration_tests")
    env = _client_env(
        SPARK_REMOTE=connect_server.url,
        DBT_PROFILES_DIR=project,
        DBT_TARGET_PATH=str(tmp_path / "target"),
        DBT_LOG_PATH=str(tmp_path / "logs"),
        DBT_SEND_ANONYMOUS_USAGE_STATS="false",
    )
    dbt = os.path.join(os.path.dirname(sys.executable), "dbt")
    results = tmp_path / "target" / "delta_optimize_results.json"
    build = ["build", "--target", "connect", "-s", "raw_events", "events_zordered", "events_merge"]
    for args in (["deps"], build):
        proc = subprocess.run([dbt, *args], cwd=project, env=env, capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, brief(proc.stdout + proc.stderr)
    record = {r["table"]: r for r in json.loads(results.read_text())}["ddo_it.events_zordered"]
    assert record["status"] == "optimized" and record["files_before"] > record["files_after"] == 1, record
    path = os.path.join(connect_server.warehouse, "ddo_it.db", "events_zordered")
    (commit, *_) = DeltaTable(path).history()
    assert commit["operation"] == "OPTIMIZE" and json.loads(commit["operationParameters"]["zOrderBy"]) == [
        "user_id",
        "amount",
    ]
    assert "Traceback" not in proc.stdout and FALLBACK not in proc.stdout + proc.stderr

    # A MERGE leaves deletion vectors and small files; its post-hook compacts them with Arrow bins, which
    # run as Spark tasks on the server's Python workers (a Python without this package): no fallback.
    merge = os.path.join(connect_server.warehouse, "ddo_it.db", "events_merge")
    before = rows_of(merge)
    run = ["run", "--target", "connect", "-s", "events_merge", "--vars", "{batch: 1}"]
    proc = subprocess.run([dbt, *run], cwd=project, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, brief(proc.stdout + proc.stderr)
    (record,) = json.loads(results.read_text())
    metrics = record["auto_compact"]["metrics"]
    assert record["status"] == "runOnModifiedPartitions" and record["files_after"] == 1, record
    assert metrics["numFilesRemoved"] > metrics["numFilesAdded"] == 1, metrics
    assert metrics["sparkFallbacks"] == [] and FALLBACK not in proc.stdout + proc.stderr, metrics
    assert metrics["numBins"] == 1 and metrics["totalClusterParallelism"] == 2  # one Spark job on the server
    after = rows_of(merge)
    assert len(after) == len(before) and sorted(r[0] for r in after) == sorted(r[0] for r in before)
    changed = [r for r in after if r[0] % 3 == 0]
    assert changed and all(r[-1] == 1 for r in changed) and all(r[-1] == 0 for r in after if r[0] % 3)
    assert all(f.deletion_vector is None for f in load_snapshot(merge).files)


def rows_of(path: str) -> list[tuple]:
    t = deltalake_table(path)
    return sorted(zip(*(t.column(c).to_pylist() for c in t.column_names)))


# ---------------------------------------------------------------------------- workers whose Python lacks pyarrow
NO_PYARROW_SCRIPT = textwrap.dedent(
    """
    import json, logging, sys
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING, format="%(levelname)s %(name)s %(message)s")
    from dbt_delta_optimize import get_spark, optimize

    url, path = sys.argv[1:3]
    spark = get_spark(remote=url)
    print(json.dumps(optimize(spark, path).to_dict()))
    """
)


def bare_python(tmp_path) -> str:
    """A venv of this interpreter without pip or any package (no pyarrow): what a server's ``python3`` often is."""
    venv = tmp_path / "bare-venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = str(venv / "bin" / "python")
    assert subprocess.run([python, "-c", "import pyarrow"], capture_output=True).returncode != 0
    return python


def warnings_of(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith(("WARNING ", "ERROR "))]


def test_connect_server_whose_workers_lack_pyarrow_falls_back_to_spark_in_one_line(tmp_path):
    """PySpark's worker imports pyarrow before any of our code runs a ``mapInArrow``: the client used to get
    only "An exception was thrown from the Python worker. Please see the stack trace below."."""
    from tests.servers import spark_connect_server

    python = bare_python(tmp_path)
    path = str(tmp_path / "events")
    small_files_table(path, appends=2)
    before = rows(path)
    with spark_connect_server(str(tmp_path / "connect"), python=python) as server:
        proc = run_client(NO_PYARROW_SCRIPT, server.url, path)
    assert proc.returncode == 0, brief(proc.stderr)
    metrics = json.loads(proc.stdout.strip().splitlines()[-1])
    assert (metrics["numFilesRemoved"], metrics["numFilesAdded"]) == (8, 4)
    assert rows(path) == before and live_files(path) == 4
    reasons = {f["reason"] for f in metrics["sparkFallbacks"]}
    assert len(metrics["sparkFallbacks"]) == 4 and len(reasons) == 1, metrics["sparkFallbacks"]
    (reason,) = reasons
    assert python in reason and "cannot import pyarrow" in reason and "PYSPARK_PYTHON" in reason, reason
    (warning,) = warnings_of(proc.stderr)  # one line for the four bins
    assert reason in warning and FALLBACK in warning, warning
    assert "stack trace below" not in proc.stderr and "Traceback" not in proc.stderr, brief(proc.stderr)


def test_standalone_executors_without_pyarrow_fall_back_to_spark_in_one_line(standalone_cluster, tmp_path):
    """Classic sessions run the stdlib-only bootstrap on the executors: it answers with the missing module."""
    python = bare_python(tmp_path)
    path = str(tmp_path / "events")
    small_files_table(path, appends=2)
    before = rows(path)
    proc = submit(standalone_cluster, path, python=python)
    metrics = job_json(proc.stdout)
    assert (metrics["numFilesRemoved"], metrics["numFilesAdded"]) == (8, 4)
    assert rows(path) == before and live_files(path) == 4
    (reason,) = {f["reason"] for f in metrics["sparkFallbacks"]}
    assert python in reason and "cannot import pyarrow" in reason and "PYSPARK_PYTHON" in reason, reason
    out = " ".join((proc.stdout + proc.stderr).split())  # rich wraps the CLI's log lines
    assert out.count(FALLBACK) == 1 and "cannot import pyarrow (ModuleNotFoundError" in out, brief(proc.stdout)
    assert "stack trace below" not in out


def test_analyze_runs_as_a_spark_job_on_the_standalone_cluster(standalone_cluster, tmp_path):
    """analyze's per-file stats tasks run on the executors (which lack the package: it is shipped), and the
    stats equal those the driver's threads compute for the same files."""
    import shutil

    from dbt_delta_optimize.ops.analyze import analyze

    path, copy = str(tmp_path / "a"), str(tmp_path / "b")
    small_files_table(path, appends=2)
    shutil.copytree(path, copy)
    before = rows(path)

    local = analyze(None, copy, all=True)  # the driver's threads, no Spark
    proc = submit(standalone_cluster, "-v", "analyze", path, "--all", "--json")

    metrics = job_json(proc.stdout)
    assert metrics["filesUpdated"] == local.files_updated == 8 and metrics["failed"] == []
    ran = [line for line in proc.stdout.splitlines() if "stats of" in line and "package from" in line]
    assert len(ran) == 8 and all(EXECUTOR_PYTHON in line for line in ran), proc.stdout[-3000:]
    assert ".zip/dbt_delta_optimize/__init__.py" in proc.stdout  # the package this run shipped
    assert "got no stats from the Spark job" not in proc.stdout + proc.stderr

    def last_stats(p: str) -> dict[str, dict]:
        snap = load_snapshot(p)
        return {f.path: json.loads(f.stats or "{}") for f in snap.file_table.files(list(range(len(snap.file_table))))}

    assert last_stats(path) == last_stats(copy) and len(last_stats(path)) == 8
    (last, *_) = DeltaTable(path).history()
    assert last["operation"] == "COMPUTE STATS" and rows(path) == before
