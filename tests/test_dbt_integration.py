"""The dbt package end to end: integration_tests/ driven through real dbt-spark (method: session)
with Delta, asserting through deltalake what the hooks and run-operation did, and comparing every
table's rows as deltalake and delta-spark read them."""

from __future__ import annotations

import json

import pytest
from deltalake import DeltaTable

from tests.dbt_project import (
    DbtProject,
    columns_of,
    deltalake_rows,
    files_per_partition,
    matrix_runs,
    merged_rows,
    microbatch_retry_and_full_refresh,
    optimize_commits,
    seed_rows,
    session_project,
    spark_rows,
)

pytestmark = [pytest.mark.slow, pytest.mark.spark]


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    project = session_project(tmp_path_factory.mktemp("dbt-it"))
    yield project
    project.close()


def table(project: DbtProject, name: str) -> str:
    return str(project.work / "wh" / "ddo_it.db" / name)


def same_rows(spark, project: DbtProject, name: str) -> list[tuple]:
    """The table's rows, equal as deltalake reads them and as delta-spark does."""
    path = table(project, name)
    columns = columns_of(path)
    ours = deltalake_rows(path, columns)
    assert ours == spark_rows(spark, path, columns), f"{name}: deltalake and delta-spark read different rows"
    return ours


@pytest.mark.timeout(1800)  # about 14 dbt commands (a JVM each with DDO_DBT_SUBPROCESS=1)
def test_dbt_package_end_to_end(project, spark):
    project("seed")
    n = len(seed_rows())

    # Run 1: every macro path in one `dbt build` (seeds, models, the snapshot).
    out = project("build", "--vars", "{batch: 0}")
    first = project.by_table()
    assert len(first) == 9 and {r["invocation_id"] for r in first.values()} == {project.invocation_id()}
    assert "delta_optimize ddo_it.events_view" not in out and "ddo_it.events_view" not in first  # views: silent
    pre_hook = json.loads((project.work / "target" / "delta_optimize_versions.json").read_text())
    assert pre_hook == {"invocation_id": project.invocation_id(), "versions": {}}  # every saved version was used
    inc = table(project, "events_incremental")
    assert first["ddo_it.events_incremental"]["status"] == "skipInsufficientFiles"  # a first write does not compact
    assert first["ddo_it.events_incremental"]["engine"] == "spark" and "via spark" in out
    assert optimize_commits(inc) == []
    z = first["ddo_it.events_zordered"]
    assert z["status"] == "optimized" and z["files_before"] > z["files_after"] == 1
    (zc,) = optimize_commits(table(project, "events_zordered"))
    assert json.loads(zc["operationParameters"]["zOrderBy"]) == ["user_id", "amount"]
    assert str(zc["operationParameters"]["auto"]).lower() == "false"
    lc = first["ddo_it.events_clustered"]  # liquid_clustered_by: ALTER TABLE CLUSTER BY, then clustered
    assert lc["status"] == "optimized" and lc["clustered_by"] == ["user_id", "amount"]
    assert lc["files_before"] > lc["files_after"]
    (lcc,) = optimize_commits(table(project, "events_clustered"))
    assert json.loads(lcc["operationParameters"]["clusterBy"]) == ["user_id", "amount"]
    fail = first["ddo_it.failing_model"]
    assert fail["status"] == "failed" and "non-partition column 'amount'" in fail["error"]  # on_error: warn
    assert "delta_optimize ddo_it.failing_model: failed" in out
    assert first["ddo_it.parquet_model"]["status"] == "skipped" and "parquet" in first["ddo_it.parquet_model"]["reason"]
    assert first["ddo_it.skipped_model"]["status"] == "skipped"
    skipped = table(project, "skipped_model")
    assert optimize_commits(skipped) == [] and files_per_partition(skipped)[None] > 1
    for name in ("events_zordered", "events_clustered"):
        assert len(same_rows(spark, project, name)) == n
    _purge_through_run_operation(project, spark, n)

    # Run 2: the incremental model's partitions now hold enough small files: auto compaction, auto=true;
    # the MERGE model's updated rows left deletion vectors, which its compaction drops.
    project("run", "-s", "events_incremental", "events_merge", "--vars", "{batch: 1}")
    second = project.by_table()
    r = second["ddo_it.events_incremental"]
    assert r["status"] == "runOnModifiedPartitions"
    assert r["auto_compact"]["sinceVersion"] == 0  # the pre-hook's version, handed over through the target path
    (ac,) = optimize_commits(inc)
    assert str(ac["operationParameters"]["auto"]).lower() == "true"
    assert set(files_per_partition(inc).values()) == {1}
    # the results entry counts the store requests: the hook's (decision and compaction) and the compaction's own
    hook, run = r["auto_compact"]["requests"], r["auto_compact"]["metrics"]["requests"]
    removed = r["auto_compact"]["metrics"]["filesRemoved"]
    added = r["auto_compact"]["metrics"]["filesAdded"]
    assert run["byKind"]["put"] >= 1 + added["totalFiles"]  # the new files and the commit
    assert run["byKind"]["get"] >= removed["totalFiles"] and run["bytesRead"] >= removed["totalSize"]
    assert run["bytesWritten"] > added["totalSize"] and "deltalake" in run["scope"]
    assert hook["total"] >= run["total"] > 0
    rows = same_rows(spark, project, "events_incremental")
    assert len(rows) == 2 * n and {row[-1] for row in rows} == {0, 1}
    _merge_compacted(project, spark, second["ddo_it.events_merge"], changed=1, others=0)

    # Run-wide opt-out: the write lands, nothing is compacted.
    before = len(optimize_commits(inc))
    project("run", "-s", "events_incremental", "--vars", "{batch: 2, DELTA_OPTIMIZE_SKIP: true}")
    assert len(optimize_commits(inc)) == before and max(files_per_partition(inc).values()) > 1

    # run-operation: dry run plans and writes nothing; a real run compacts; non-Delta and skip: true are noted.
    previous = {x["invocation_id"] for x in project.results()}
    version = DeltaTable(inc).version()
    project(
        "run-operation",
        "optimize",
        "--args",
        "{select: 'events_incremental parquet_model skipped_model', dry_run: true}",
    )
    new = project.results()
    assert {x["invocation_id"] for x in new}.isdisjoint(previous)
    by_table = {x["table"]: x for x in new}
    assert {t: x["status"] for t, x in by_table.items()} == {
        "ddo_it.events_incremental": "planned",
        "ddo_it.parquet_model": "skipped",
    }  # skipped_model (meta skip: true) is only logged
    plan = by_table["ddo_it.events_incremental"]["plan"]
    assert plan["numBins"] >= 1 and plan["partitionsToRewrite"] and "bins" not in plan  # no file lists
    assert DeltaTable(inc).version() == version
    assert "needs select" in project.fails("run-operation", "optimize")  # bad arguments: a compiler error
    out = project("run-operation", "optimize", "--args", "{select: events_incremental}")
    assert "delta_optimize ddo_it.events_incremental: optimize via spark" in out
    assert set(files_per_partition(inc).values()) == {1}
    last = optimize_commits(inc)[0]
    assert str(last["operationParameters"]["auto"]).lower() == "false"
    assert len(same_rows(spark, project, "events_incremental")) == 3 * n

    # on-run-end variant: hooks off, one pass at the end of the run; the last one with --target-path.
    for batch, target in ((3, "target"), (4, "target_flag")):
        project(
            "run",
            "-s",
            "events_incremental",
            "--target-path",
            str(project.work / target),
            "--vars",
            f"{{batch: {batch}, use_post_hooks: false, use_on_run_end: true}}",
        )
    (last,) = project.results("target_flag")
    assert last["status"] == "runOnModifiedPartitions"
    (third,) = project.results()  # batch 3's record: the file under the default target path was rewritten for that run
    assert third["status"] == "runOnModifiedPartitions" and third["invocation_id"] != last["invocation_id"]
    assert set(files_per_partition(inc).values()) == {1}
    assert len(same_rows(spark, project, "events_incremental")) == 5 * n

    # The snapshot's second run MERGEs new row versions (deletion vectors), --full-refresh rebuilds the MERGE model.
    project("build", "-s", "events_snapshot", "events_merge", "--full-refresh", "--vars", "{batch: 2}")
    records = project.by_table()
    snap = records["ddo_it.events_snapshot"]
    assert snap["status"] == "runOnModifiedPartitions", snap
    assert snap["auto_compact"]["metrics"]["deletionVectorStats"]["numDeletionVectorsRemoved"] > 0
    changed = sum(1 for s in seed_rows() if int(s["id"]) % 4 == 0)
    assert len(same_rows(spark, project, "events_snapshot")) == n + changed  # a new version per changed row
    assert DeltaTable(table(project, "events_merge")).history(2)[1]["operation"].startswith("CREATE OR REPLACE")
    _merge_compacted(project, spark, records["ddo_it.events_merge"], changed=2, others=2)


@pytest.mark.timeout(1800)  # 4 dbt invocations, about 30 models and batches
def test_every_commit_of_a_run_reaches_the_hook(project):
    """Microbatch backfills (with and without the pre-hook), every incremental strategy, a snapshot and a table
    created by the run: each run's qualifying partitions are compacted, and nothing else (method session)."""
    path_of = lambda name: str(project.work / "wh" / "ddo_it_mx.db" / name)  # noqa: E731
    matrix_runs(project, path_of)
    microbatch_retry_and_full_refresh(project, path_of)


def _merge_compacted(project: DbtProject, spark, record: dict, *, changed: int, others: int) -> None:
    from dbt_delta_optimize.delta.snapshot import load_snapshot

    assert record["status"] == "runOnModifiedPartitions" and record["files_after"] == 1, record
    merge = table(project, "events_merge")
    assert all(f.deletion_vector is None for f in load_snapshot(merge).files)
    assert same_rows(spark, project, "events_merge") == merged_rows(seed_rows(), changed=changed, others=others)


def _purge_through_run_operation(project: DbtProject, spark, n: int) -> None:
    """events_dv's post-hook left deletion vectors; run-operation purge rewrites those files without them."""
    from dbt_delta_optimize.delta.snapshot import load_snapshot

    dv = table(project, "events_dv")
    before = load_snapshot(dv)
    assert any(f.deletion_vector is not None for f in before.files)
    deleted = sum(f.deletion_vector.cardinality for f in before.files if f.deletion_vector is not None)
    assert deleted > 0
    out = project("run-operation", "purge", "--args", "{select: events_dv}")
    assert "delta_optimize ddo_it.events_dv: purge" in out
    after = load_snapshot(dv)
    assert after.version == before.version + 1 and all(f.deletion_vector is None for f in after.files)
    assert sum(f.num_records or 0 for f in after.files) == n - deleted
    (last, *_) = DeltaTable(dv).history(1)
    assert last["operation"] == "REORG" and str(last["operationParameters"]["applyPurge"]).lower() == "true"
    assert len(same_rows(spark, project, "events_dv")) == n - deleted
    # run-operation analyze: every file's stats recomputed as delta-spark writes them, one COMPUTE STATS commit
    out = project("run-operation", "analyze", "--args", "{select: events_dv, all: true}")
    assert "delta_optimize ddo_it.events_dv: analyze" in out, out
    (last, *_) = DeltaTable(dv).history(1)
    assert last["operation"] == "COMPUTE STATS"
    assert load_snapshot(dv).version == after.version + 1
    assert len(same_rows(spark, project, "events_dv")) == n - deleted
