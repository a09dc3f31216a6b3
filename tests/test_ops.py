"""The operations' one pipeline: what is refused is refused before any JVM starts, a dry run refuses it
with the same message and exit code, auto compaction reads one snapshot and maps errors as optimize does.

Tables come from deltalake (no Spark); every CLI run happens in a fresh process that reports whether
pyspark or py4j was ever imported (a JVM can only start through them).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pyarrow as pa
import pytest
from deltalake import write_deltalake

from dbt_delta_optimize.api import auto_compact, plan_optimize, plan_purge
from dbt_delta_optimize.errors import CorruptLogError, InvalidPredicateError, UnsupportedFeatureError
from tests.helpers import data_files, log_snapshot

CLI_WITHOUT_SPARK = """
import sys
from dbt_delta_optimize.cli.main import cli
try:
    cli.main(sys.argv[1:], prog_name="dbt-delta-optimize")
finally:
    print("JVM", "pyspark" in sys.modules or "py4j" in sys.modules, file=sys.stderr)
"""


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", CLI_WITHOUT_SPARK, *args], capture_output=True, text=True, timeout=120)


def _table(path: str, commits: int = 3) -> str:
    for i in range(commits):
        data = pa.table({"id": [i, i + 10], "part": ["a", "b"]})
        write_deltalake(path, data, partition_by=["part"], mode="append")
    return path


def _commit(path: str, *actions: dict) -> None:
    log = os.path.join(path, "_delta_log")
    last = max(int(n[:20]) for n in os.listdir(log) if n.endswith(".json"))
    with open(os.path.join(log, f"{last + 1:020d}.json"), "w") as fh:
        fh.write("".join(json.dumps(a) + "\n" for a in actions))


@pytest.fixture
def refused(tmp_path) -> str:
    """A table whose protocol names a writer feature we do not know (deltalake still reads it)."""
    path = _table(str(tmp_path / "refused"))
    protocol = {"minReaderVersion": 1, "minWriterVersion": 7, "writerFeatures": ["appendOnly", "futureFeature"]}
    _commit(path, {"commitInfo": {"operation": "SET TBLPROPERTIES"}}, {"protocol": protocol})
    return path


def _error(r: subprocess.CompletedProcess[str]) -> str:
    lines = [line for line in r.stderr.splitlines() if not line.startswith("JVM ")]
    assert len(lines) == 1 and lines[0].startswith("error: "), r.stderr
    return lines[0]


def test_a_refused_protocol_is_refused_before_any_jvm_and_the_dry_run_refuses_it_alike(refused):
    log, files = log_snapshot(refused), data_files(refused)
    runs = {
        "optimize": cli("optimize", refused),
        "dry run": cli("optimize", refused, "--dry-run"),
        "purge": cli("purge", refused),
        "purge dry run": cli("purge", refused, "--dry-run", "--json"),
    }
    for what, r in runs.items():
        assert r.returncode == 2 and "futureFeature" in r.stderr and "JVM False" in r.stderr, (what, r.stderr)
    assert len({_error(r) for r in runs.values()}) == 1, [_error(r) for r in runs.values()]
    with pytest.raises(UnsupportedFeatureError, match="futureFeature"):
        plan_optimize(None, refused)
    with pytest.raises(UnsupportedFeatureError, match="futureFeature"):
        plan_purge(None, refused)
    assert log_snapshot(refused) == log and data_files(refused) == files


def test_a_bad_predicate_is_refused_before_any_jvm(tmp_path):
    path = _table(str(tmp_path / "t"))
    for args in (("optimize", path, "--where", "id = 1"), ("purge", path, "--where", "part = = 'a'")):
        r = cli(*args)
        assert r.returncode == 2 and "JVM False" in r.stderr and _error(r), r.stderr
    with pytest.raises(InvalidPredicateError, match="non-partition column"):
        plan_optimize(None, path, where="id = 1")


def test_a_corrupt_commit_is_the_same_error_from_optimize_and_auto_compact(tmp_path):
    path = _table(str(tmp_path / "t"))
    with open(os.path.join(path, "_delta_log", f"{2:020d}.json"), "a") as fh:
        fh.write("{not json\n")
    runs = [cli("optimize", path), cli("optimize", path, "--dry-run"), cli("auto-compact", path, "--enable")]
    for r in runs:
        assert r.returncode == 2 and "JVM False" in r.stderr and "corrupt" in r.stderr, r.stderr
    assert len({_error(r) for r in runs}) == 1
    with pytest.raises(CorruptLogError) as ei:
        auto_compact(None, path, enabled=True, throw_on_error=True)
    assert ei.value.version == 2
    result = auto_compact(None, path, enabled=True, throw_on_error=False)
    assert result.status == "failed" and result.error is not None and result.error.startswith("CorruptLogError")


def test_auto_compaction_decides_from_one_snapshot(tmp_path, monkeypatch):
    from dbt_delta_optimize.delta import snapshot

    path = _table(str(tmp_path / "t"))
    loads: list[str] = []
    real = snapshot.load_snapshot
    monkeypatch.setattr(snapshot, "load_snapshot", lambda loc, *a, **k: loads.append(loc) or real(loc, *a, **k))
    r = auto_compact(None, path, since_version=-1, enabled=True, min_num_files=50)
    assert r.status == "skipInsufficientFiles" and loads == [path]
    assert r.triggering_versions == (0, 1, 2) and {c.partition["part"]: c.small_files for c in r.considered} == {
        "a": 3,
        "b": 3,
    }


def test_storage_options_reach_the_snapshot(tmp_path, monkeypatch):
    """Every operation reads the table through storage made with the caller's storage options."""
    from dbt_delta_optimize.delta import storage

    path = _table(str(tmp_path / "t"))
    seen: list[object] = []
    real = storage.storage_for
    monkeypatch.setattr(storage, "storage_for", lambda loc, options=None: seen.append(options) or real(loc, options))
    options = {"SOME_OPTION": "x"}
    plan_optimize(None, path, storage_options=options)
    plan_purge(None, path, storage_options=options)
    auto_compact(None, path, enabled=True, min_num_files=50, storage_options=options)
    assert seen == [options] * 3


def test_nothing_to_do_needs_no_spark(tmp_path):
    """A path table with no bins: the run plans, cleans debris and reports, and never imports pyspark."""
    path = _table(str(tmp_path / "t"), commits=1)  # one file per partition: nothing to compact
    log = log_snapshot(path)
    r = cli("optimize", path, "--json")
    assert r.returncode == 0 and "JVM False" in r.stderr, r.stderr
    m = json.loads(r.stdout)
    assert (m["numBins"], m["committedVersions"], m["totalConsideredFiles"], m["numBatches"]) == (0, [], 2, 1)
    assert m["totalClusterParallelism"] == max(2, os.cpu_count() or 2)  # the embedded session's
    assert log_snapshot(path) == log


@pytest.mark.spark
def test_nothing_to_do_reports_what_a_spark_run_reports(spark, tmp_path):
    from dbt_delta_optimize.api import optimize
    from dbt_delta_optimize.ops.pipeline import nothing_to_do, open_snapshot

    path = _table(str(tmp_path / "t"), commits=1)
    with_spark = optimize(spark, path).to_dict()
    snapshot = open_snapshot(path, None)
    plan = plan_optimize(spark, path)
    without = nothing_to_do(snapshot, plan, start_ms=0).to_dict()
    varying = ("startTimeMs", "endTimeMs", "totalClusterParallelism", "requests")  # requests: per path taken
    assert {k: v for k, v in without.items() if k not in varying} == {
        k: v for k, v in with_spark.items() if k not in varying
    }
    assert with_spark["numBins"] == 0 and with_spark["committedVersions"] == []


def test_an_opened_table_is_planned_from_its_snapshot_without_loading_it_again(tmp_path, monkeypatch):
    """The handle is opened once; plan_optimize and plan_purge given it read no log (a load would be counted)."""
    from dbt_delta_optimize.delta import snapshot as snapshot_module
    from dbt_delta_optimize.ops.table import open_table

    path = _table(str(tmp_path / "t"), commits=4)
    table = open_table(path)
    assert table.version == 3 and table.location == path and len(table.snapshot.files) == 8
    loads: list[str] = []
    real = snapshot_module.load_snapshot
    monkeypatch.setattr(snapshot_module, "load_snapshot", lambda *a, **k: loads.append(a[0]) or real(*a, **k))
    plan = plan_optimize(None, table, min_file_size="1m")
    assert plan.read_version == 3 and len(plan.bins) == 2
    plan_purge(None, table)
    assert loads == []
    write_deltalake(path, pa.table({"id": [99], "part": ["a"]}), partition_by=["part"], mode="append")
    assert table.refresh().version == 4 and loads == [path]
    assert plan_optimize(None, table.refresh(), min_file_size="1m").read_version == 4
