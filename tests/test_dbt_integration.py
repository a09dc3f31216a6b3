"""The dbt package end to end: integration_tests/ driven through real dbt-spark (method: session)
with Delta, asserting through deltalake what the hooks and run-operation did."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from deltalake import DeltaTable

from dbt_delta_optimize.engine.session import delta_jars

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROJECT = os.path.join(ROOT, "integration_tests")
DBT = os.path.join(os.path.dirname(sys.executable), "dbt")

pytestmark = [pytest.mark.slow, pytest.mark.spark]


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    work = tmp_path_factory.mktemp("dbt-it")
    jars = delta_jars()
    assert jars, "Delta's jars are missing: run `make setup`"
    e = dict(os.environ)
    e.update(
        DBT_PROFILES_DIR=PROJECT,
        DBT_DELTA_OPTIMIZE_JARS=",".join(jars),
        DBT_DELTA_OPTIMIZE_WAREHOUSE=str(work / "wh"),
        DBT_DELTA_OPTIMIZE_METASTORE=str(work / "metastore_db"),
        DBT_TARGET_PATH=str(work / "target"),
        DBT_LOG_PATH=str(work / "logs"),
        DBT_SEND_ANONYMOUS_USAGE_STATS="false",
        PYSPARK_PYTHON=sys.executable,
    )
    e["PATH"] = os.path.dirname(sys.executable) + os.pathsep + e.get("PATH", "")
    return {"env": e, "work": work}


def dbt(env, *args: str) -> str:
    proc = subprocess.run([DBT, *args], cwd=PROJECT, env=env["env"], capture_output=True, text=True, timeout=900)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"dbt {' '.join(args)} failed:\n{out[-5000:]}"
    return out


def dbt_fails(env, *args: str) -> str:
    proc = subprocess.run([DBT, *args], cwd=PROJECT, env=env["env"], capture_output=True, text=True, timeout=900)
    assert proc.returncode != 0, f"dbt {' '.join(args)} should have failed"
    return proc.stdout + proc.stderr


def results(env, target: str = "target") -> list[dict]:
    """The results file: the records of the latest invocation that wrote one, all of that invocation."""
    path = env["work"] / target / "delta_optimize_results.json"
    records = json.loads(path.read_text()) if path.exists() else []
    assert len({r["invocation_id"] for r in records}) <= 1, "records of an earlier invocation were kept"
    return records


def invocation_id(env) -> str:
    return json.loads((env["work"] / "target" / "run_results.json").read_text())["metadata"]["invocation_id"]


def table(env, name: str) -> str:
    return str(env["work"] / "wh" / "ddo_it.db" / name)


def files_per_partition(path: str) -> dict:
    import pyarrow as pa

    actions = pa.table(DeltaTable(path).get_add_actions(flatten=True)).to_pydict()
    out: dict = {}
    for k in (k for k in actions if k.startswith("partition.")):
        for v in actions[k]:
            out[v] = out.get(v, 0) + 1
    return out or {None: len(actions["path"])}


def optimize_commits(path: str) -> list[dict]:
    return [h for h in DeltaTable(path).history() if h["operation"] == "OPTIMIZE"]


def seed_rows() -> int:
    with open(os.path.join(PROJECT, "seeds", "raw_events.csv")) as fh:
        return sum(1 for _ in fh) - 1


def seed(spark, env) -> list[dict]:
    """The seed's rows as the models select them (delta-spark reads the seed table dbt wrote)."""
    df = spark.read.format("delta").load(table(env, "raw_events"))
    return [
        r.asDict() for r in df.selectExpr("id", "cast(event_date as date) as event_date", "user_id", "amount").collect()
    ]


def assert_rows(spark, path: str, expected: list[dict]) -> None:
    """delta-spark and deltalake both read exactly ``expected``, row for row (columns sorted by name)."""
    from tests.helpers import _key, _norm, rows_deltars, rows_spark

    columns = sorted(expected[0])
    want = sorted((tuple(_norm(r[c]) for c in columns) for r in expected), key=_key)
    assert rows_spark(spark, path, columns) == want, f"delta-spark reads other rows of {path}"
    assert rows_deltars(path, columns) == want, f"deltalake reads other rows of {path}"


def incremental(rows: list[dict], batches: int) -> list[dict]:
    """events_incremental after ``batches`` runs: the seed again per batch, ids shifted, the batch kept."""
    return [{**r, "id": r["id"] + b * 1000, "batch": b} for b in range(batches) for r in rows]


@pytest.mark.timeout(1800)  # many dbt invocations, each starting its own Spark; slower on a loaded machine
def test_dbt_package_end_to_end(env, spark):
    dbt(env, "deps")
    dbt(env, "seed")
    n = seed_rows()
    rows = seed(spark, env)
    assert len(rows) == n

    # Run 1: every macro path in one `dbt run`.
    out = dbt(env, "run", "--vars", "{batch: 0}")
    first = {r["table"]: r for r in results(env)}
    assert len(first) == 7 and {r["invocation_id"] for r in first.values()} == {invocation_id(env)}
    assert "delta_optimize ddo_it.events_view" not in out and "ddo_it.events_view" not in first  # views: silent
    pre_hook = json.loads((env["work"] / "target" / "delta_optimize_versions.json").read_text())
    assert pre_hook == {"invocation_id": invocation_id(env), "versions": {}}  # every saved version was used
    inc = table(env, "events_incremental")
    assert first["ddo_it.events_incremental"]["status"] == "skipInsufficientFiles"  # a first write does not compact
    assert optimize_commits(inc) == []
    z = first["ddo_it.events_zordered"]
    assert z["status"] == "optimized" and z["files_before"] > z["files_after"] == 1
    (zc,) = optimize_commits(table(env, "events_zordered"))
    assert json.loads(zc["operationParameters"]["zOrderBy"]) == ["user_id", "amount"]
    assert str(zc["operationParameters"]["auto"]).lower() == "false"
    lc = first["ddo_it.events_clustered"]  # liquid_clustered_by: ALTER TABLE CLUSTER BY, then clustered
    assert lc["status"] == "optimized" and lc["clustered_by"] == ["user_id", "amount"]
    assert lc["files_before"] > lc["files_after"]
    (lcc,) = optimize_commits(table(env, "events_clustered"))
    assert json.loads(lcc["operationParameters"]["clusterBy"]) == ["user_id", "amount"]
    assert_rows(spark, table(env, "events_clustered"), rows)
    fail = first["ddo_it.failing_model"]
    assert fail["status"] == "failed" and "non-partition column 'amount'" in fail["error"]  # on_error: warn
    assert "delta_optimize ddo_it.failing_model: failed" in out
    assert first["ddo_it.parquet_model"]["status"] == "skipped" and "parquet" in first["ddo_it.parquet_model"]["reason"]
    assert first["ddo_it.skipped_model"]["status"] == "skipped"
    assert (
        optimize_commits(table(env, "skipped_model")) == []
        and files_per_partition(table(env, "skipped_model"))[None] > 1
    )
    assert_rows(spark, table(env, "events_zordered"), rows)
    _purge_through_run_operation(env, spark, rows)

    # Run 2: the incremental model's partitions now hold enough small files: auto compaction, auto=true.
    dbt(env, "run", "-s", "events_incremental", "--vars", "{batch: 1}")
    (r,) = results(env)  # this invocation's record only
    assert r["table"] == "ddo_it.events_incremental" and r["status"] == "runOnModifiedPartitions"
    assert r["auto_compact"]["sinceVersion"] == 0  # the pre-hook's version, handed over through the target path
    (ac,) = optimize_commits(inc)
    assert str(ac["operationParameters"]["auto"]).lower() == "true"
    assert set(files_per_partition(inc).values()) == {1}
    assert_rows(spark, inc, incremental(rows, 2))

    # Run-wide opt-out: the write lands, nothing is compacted.
    before = len(optimize_commits(inc))
    dbt(env, "run", "-s", "events_incremental", "--vars", "{batch: 2, DELTA_OPTIMIZE_SKIP: true}")
    assert len(optimize_commits(inc)) == before and max(files_per_partition(inc).values()) > 1

    # run-operation: dry run plans and writes nothing; a real run compacts; non-Delta and skip: true are noted.
    previous = {x["invocation_id"] for x in results(env)}
    version = DeltaTable(inc).version()
    dbt(
        env,
        "run-operation",
        "optimize",
        "--args",
        "{select: 'events_incremental parquet_model skipped_model', dry_run: true}",
    )
    new = results(env)
    assert {x["invocation_id"] for x in new}.isdisjoint(previous)
    by_table = {x["table"]: x for x in new}
    assert {t: x["status"] for t, x in by_table.items()} == {
        "ddo_it.events_incremental": "planned",
        "ddo_it.parquet_model": "skipped",
    }  # skipped_model (meta skip: true) is only logged
    plan = by_table["ddo_it.events_incremental"]["plan"]
    assert plan["numBins"] >= 1 and plan["partitionsToRewrite"] and "bins" not in plan  # no file lists
    assert DeltaTable(inc).version() == version
    assert "needs select" in dbt_fails(env, "run-operation", "optimize")  # bad arguments: a compiler error
    out = dbt(env, "run-operation", "optimize", "--args", "{select: events_incremental}")
    assert "delta_optimize ddo_it.events_incremental: optimize" in out
    assert set(files_per_partition(inc).values()) == {1}
    last = optimize_commits(inc)[0]
    assert str(last["operationParameters"]["auto"]).lower() == "false"
    assert_rows(spark, inc, incremental(rows, 3))

    # on-run-end variant: hooks off, one pass at the end of the run; the last one with --target-path.
    for batch, target in ((3, "target"), (4, "target_flag")):
        dbt(
            env,
            "run",
            "-s",
            "events_incremental",
            "--target-path",
            str(env["work"] / target),
            "--vars",
            f"{{batch: {batch}, use_post_hooks: false, use_on_run_end: true}}",
        )
    (last,) = results(env, "target_flag")
    assert last["status"] == "runOnModifiedPartitions"
    (third,) = results(env)  # batch 3's record: the file under the default target path was rewritten for that run
    assert third["status"] == "runOnModifiedPartitions" and third["invocation_id"] != last["invocation_id"]
    assert set(files_per_partition(inc).values()) == {1}
    assert_rows(spark, inc, incremental(rows, 5))


def _purge_through_run_operation(env, spark, rows: list[dict]) -> None:
    """events_dv's post-hook left deletion vectors; run-operation purge rewrites those files without them."""
    from dbt_delta_optimize.delta.snapshot import load_snapshot

    dv = table(env, "events_dv")
    before = load_snapshot(dv)
    assert any(f.deletion_vector is not None for f in before.files)
    deleted = sum(f.deletion_vector.cardinality for f in before.files if f.deletion_vector is not None)
    assert deleted > 0
    out = dbt(env, "run-operation", "purge", "--args", "{select: events_dv}")
    assert "delta_optimize ddo_it.events_dv: purge" in out
    after = load_snapshot(dv)
    assert after.version == before.version + 1 and all(f.deletion_vector is None for f in after.files)
    assert sum(f.num_records or 0 for f in after.files) == len(rows) - deleted
    assert_rows(spark, dv, [{k: r[k] for k in ("id", "user_id", "amount")} for r in rows if r["id"] % 4 != 0])
    (last, *_) = DeltaTable(dv).history(1)
    assert last["operation"] == "REORG" and str(last["operationParameters"]["applyPurge"]).lower() == "true"
