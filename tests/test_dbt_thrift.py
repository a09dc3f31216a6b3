"""The dbt package over dbt-spark's ``thrift`` method: a real Spark Thrift Server with Delta, no Spark session.

integration_tests/ runs against HiveThriftServer2 (started once per session on 127.0.0.1) through
PyHive, with no Spark Connect server anywhere: the hooks read the method from dbt's adapter, decide
from the table's log and run OPTIMIZE / REORG through dbt's own connection. Every table is then read
row for row by deltalake and by delta-spark (the server).
"""

from __future__ import annotations

import json
import os

import pytest
from deltalake import DeltaTable

from dbt_delta_optimize.delta.snapshot import load_snapshot
from tests.dbt_project import (
    DbtProject,
    columns_of,
    deltalake_rows,
    files_per_partition,
    matrix_runs,
    merged_rows,
    normalized,
    seed_rows,
)

pytestmark = [pytest.mark.slow, pytest.mark.spark]


@pytest.fixture(scope="module")
def project(thrift_server, tmp_path_factory):
    p = DbtProject(
        tmp_path_factory.mktemp("dbt-thrift"), "thrift", {"DBT_DELTA_OPTIMIZE_THRIFT_PORT": str(thrift_server.port)}
    )
    p("deps")
    # The server is shared by the session's thrift tests: each module builds the project from an empty schema.
    thrift_server.query("DROP SCHEMA IF EXISTS ddo_it CASCADE")
    yield p
    p.close()


def path(server, name: str, schema: str = "ddo_it") -> str:
    return os.path.join(server.warehouse, f"{schema}.db", name)


def same_rows(server, name: str, schema: str = "ddo_it") -> list[tuple]:
    """The table's rows, equal as deltalake reads them and as delta-spark (the server) does."""
    columns = columns_of(path(server, name, schema))
    ours = deltalake_rows(path(server, name, schema), columns)
    theirs = normalized(server.query(f"SELECT {', '.join(f'`{c}`' for c in columns)} FROM {schema}.{name}"))
    assert ours == theirs, f"{name}: deltalake and delta-spark read different rows"
    return ours


def last_commit(server, name: str) -> dict:
    return DeltaTable(path(server, name)).history(1)[0]


def test_the_connection_method_is_what_dbts_adapter_says(thrift_server, tmp_path):
    """dbt's `target` has no `method`; the bridge reads it from adapter.config.credentials (no connection opened)."""
    env = {"DBT_DELTA_OPTIMIZE_THRIFT_PORT": str(thrift_server.port), "DBT_DELTA_OPTIMIZE_JARS": "unused.jar"}
    DbtProject(tmp_path / "deps", "thrift", env)("deps")  # the package itself, whichever test runs first
    for target, engine in (("thrift", "through dbt's connection"), ("http", "through dbt's connection"),
                           ("session", "in dbt's own Spark session")):  # fmt: skip
        out = DbtProject(tmp_path / target, target, env)("run-operation", "delta_optimize_engine")
        assert f"delta_optimize: dbt-spark method '{target}'" in out and engine in out, out[-2000:]


def test_incremental_runs_are_compacted_by_the_post_hook_over_thrift(project, thrift_server):
    n = len(seed_rows())
    project("seed")
    out = project("build", "--vars", "{batch: 0}")
    first = project.by_table()
    delta_models = ("events_zordered", "events_clustered", "events_incremental", "events_merge", "events_snapshot")
    for name in delta_models:
        record = first[f"ddo_it.{name}"]
        assert record["engine"] == "sql" and record["method"] == "thrift" and record["log_readable"], record
    assert "via sql (thrift)" in out
    z = first["ddo_it.events_zordered"]
    assert z["status"] == "optimized" and z["files_before"] > z["files_after"] == 1
    assert z["validation"] == [{"version": 1, "ok": True, "codes": []}]
    zc = last_commit(thrift_server, "events_zordered")  # made by the server's delta-spark, not by our writer
    assert zc["operation"] == "OPTIMIZE" and json.loads(zc["operationParameters"]["zOrderBy"]) == ["user_id", "amount"]
    assert zc["engineInfo"].startswith("Apache-Spark")
    lc = first["ddo_it.events_clustered"]
    assert lc["status"] == "optimized" and lc["clustered_by"] == ["user_id", "amount"]
    assert json.loads(last_commit(thrift_server, "events_clustered")["operationParameters"]["clusterBy"]) == [
        "user_id",
        "amount",
    ]
    fail = first["ddo_it.failing_model"]
    assert fail["status"] == "failed" and "non-partition column 'amount'" in fail["error"]
    assert first["ddo_it.parquet_model"]["status"] == "skipped"
    assert first["ddo_it.events_incremental"]["status"] == "skipInsufficientFiles"
    for name in ("events_zordered", "events_clustered"):
        assert len(same_rows(thrift_server, name)) == n

    # Runs 2 and 3 append; each ends with the post-hook's OPTIMIZE of the partitions it wrote.
    inc = path(thrift_server, "events_incremental")
    for batch in (1, 2):
        project("run", "-s", "events_incremental", "--vars", f"{{batch: {batch}}}")
        (r,) = project.results()
        assert r["status"] == "runOnModifiedPartitions" and r["engine"] == "sql", r
        assert r["validation"] and all(v["ok"] for v in r["validation"])
        commit = last_commit(thrift_server, "events_incremental")
        assert commit["operation"] == "OPTIMIZE" and commit["engineInfo"].startswith("Apache-Spark")
        assert "event_date" in commit["operationParameters"]["predicate"]  # our chosen partitions, as a WHERE
        assert set(files_per_partition(inc).values()) == {1}
        rows = same_rows(thrift_server, "events_incremental")
        assert len(rows) == (batch + 1) * n and {row[-1] for row in rows} == set(range(batch + 1))


@pytest.mark.timeout(1800)  # 2 dbt invocations, about 20 models and batches
def test_every_commit_of_a_run_reaches_the_hook_over_thrift(project, thrift_server):
    """The session test's matrix through dbt's thrift connection: the SQL executor gets the same run's commits."""
    thrift_server.query("DROP SCHEMA IF EXISTS ddo_it_mx CASCADE")
    matrix_runs(project, lambda name: path(thrift_server, name, "ddo_it_mx"))


def test_run_operations_and_the_log_free_path_over_thrift(project, thrift_server):
    """run-operation optimize (plan and run) and purge through SQL; then a decision from DESCRIBE DETAIL."""
    n = len(seed_rows())
    inc = path(thrift_server, "events_incremental")
    project("run", "-s", "events_incremental", "--vars", "{batch: 3, DELTA_OPTIMIZE_SKIP: true}")
    version = DeltaTable(inc).version()
    project("run-operation", "optimize", "--args", "{select: events_incremental, dry_run: true}")
    (plan,) = project.results()
    assert plan["status"] == "planned" and plan["plan"]["statements"][0].startswith("OPTIMIZE `ddo_it`.")
    assert DeltaTable(inc).version() == version
    out = project("run-operation", "optimize", "--args", "{select: events_incremental}")
    assert "delta_optimize ddo_it.events_incremental: optimize via sql (thrift)" in out
    assert (
        set(files_per_partition(inc).values()) == {1} and len(same_rows(thrift_server, "events_incremental")) == 4 * n
    )

    dv = path(thrift_server, "events_dv")  # its post-hook deleted a quarter of the rows: deletion vectors
    before = load_snapshot(dv)
    deleted = sum(f.deletion_vector.cardinality for f in before.files if f.deletion_vector is not None)
    assert deleted > 0
    project("run-operation", "purge", "--args", "{select: events_dv}")
    (r,) = project.results()
    assert r["status"] == "purged" and r["validation"][0]["ok"], r
    after = load_snapshot(dv)
    assert all(f.deletion_vector is None for f in after.files)
    assert last_commit(thrift_server, "events_dv")["operation"] == "REORG"
    assert len(same_rows(thrift_server, "events_dv")) == n - deleted
    # vacuum through SQL: a retention under the table's is refused before anything is sent; a dry run with
    # the table's own retention lists nothing (the purge's tombstones are fresh) and writes nothing
    version = DeltaTable(dv).version()
    project("run-operation", "vacuum", "--args", "{select: events_dv, retain: 0}")
    (r,) = project.results()
    assert r["status"] == "failed" and "shorter than" in r["error"] and "statement" not in r, r
    project("run-operation", "vacuum", "--args", "{select: events_dv, dry_run: true}")
    (r,) = project.results()
    assert r["status"] == "planned" and r["statement"] == "VACUUM `ddo_it`.`events_dv` RETAIN 168 HOURS DRY RUN", r
    assert r["plan"]["filesDeleted"] == 0 and DeltaTable(dv).version() == version
    # analyze has no SQL in open-source Spark: the SQL path says so, and writes nothing
    version = DeltaTable(dv).version()
    out = project("run-operation", "analyze", "--args", "{select: events_dv, all: true}")
    (r,) = project.results()
    assert r["status"] == "skipped" and "not available over dbt's SQL connection" in r["reason"], r
    assert "not available over dbt's SQL connection" in out and DeltaTable(dv).version() == version

    # With delta_optimize_read_log: false the hook decides from DESCRIBE DETAIL / HISTORY alone.
    project("run", "-s", "events_incremental", "--vars", "{batch: 4, DELTA_OPTIMIZE_SKIP: true}")
    project("run", "-s", "events_incremental", "--vars", "{batch: 5, delta_optimize_read_log: false}")
    (r,) = project.results()
    assert r["log_readable"] is False and r["status"] == "runOnModifiedPartitions", r
    assert "estimated for the whole table from DESCRIBE DETAIL" in r["reason"] and r["files_after"] == 3
    assert last_commit(thrift_server, "events_incremental")["operation"] == "OPTIMIZE"
    assert len(same_rows(thrift_server, "events_incremental")) == 6 * n

    # Settings SQL cannot honour (a time budget, one commit per bin): the hook runs without them and says so in ONE
    # warning naming every one, once for the table, and the results file marks each not applied.
    out = project("run", "-s", "events_sql_ignored", "--vars", "{ddo_sql_settings: true}")
    (r,) = project.results()
    assert r["engine"] == "sql" and "commit_every=1" in r["warning"] and "max_duration=3600.0" in r["warning"], r
    assert out.count("cannot apply and were ignored") == 1, out[-3000:]
    assert out.count("commit_every=1") == 1 and out.count("max_duration=3600.0") == 1, out[-3000:]
    assert r["settings"]["commit_every"]["applied"] is False and r["settings"]["max_duration"]["applied"] is False
    assert r["settings"]["min_num_files"] == {"value": 2, "source": "meta", "applied": True}
    # on_error: fail over thrift: the server refuses the OPTIMIZE (WHERE on a non-partition column); the model fails
    failed = project.fails("run", "-s", "settings_fail", "--vars", "{ddo_settings: true}")
    (r,) = project.results()
    assert r["status"] == "failed" and r["engine"] == "sql" and "amount" in r["error"], r
    assert "delta_optimize ddo_it.settings_fail: failed via sql (thrift)" in failed, failed[-3000:]


def test_merge_snapshot_and_full_refresh_over_thrift(project, thrift_server):
    """A MERGE on a deletion-vector table, a snapshot's MERGE, and a --full-refresh: each compacted, rows kept."""
    seeds = seed_rows()
    merge = path(thrift_server, "events_merge")
    project("run", "-s", "events_merge", "--vars", "{batch: 1}")
    (r,) = project.results()
    assert r["status"] == "runOnModifiedPartitions", r
    assert r["metrics"]["deletionVectorStats"]["numDeletionVectorsRemoved"] > 0
    assert all(f.deletion_vector is None for f in load_snapshot(merge).files)
    assert same_rows(thrift_server, "events_merge") == merged_rows(seeds, changed=1, others=0)

    project("build", "-s", "events_snapshot", "events_merge", "--full-refresh", "--vars", "{batch: 2}")
    records = project.by_table()
    snap = records["ddo_it.events_snapshot"]
    assert (
        snap["status"] == "runOnModifiedPartitions"
        and snap["metrics"]["deletionVectorStats"]["numDeletionVectorsRemoved"] > 0
    )
    rows = same_rows(thrift_server, "events_snapshot")
    changed = sum(1 for s in seeds if int(s["id"]) % 4 == 0)
    assert len(rows) == len(seeds) + changed  # one new version per changed row, none lost
    full = records["ddo_it.events_merge"]  # rebuilt by CREATE OR REPLACE, then compacted
    assert full["status"] == "runOnModifiedPartitions" and full["files_after"] == 1, full
    assert DeltaTable(merge).history(2)[1]["operation"].startswith("CREATE OR REPLACE")
    assert same_rows(thrift_server, "events_merge") == merged_rows(seeds, changed=2, others=2)


class _PyHiveAdapter:
    """dbt's Jinja ``adapter`` as the bridge uses it (``config.credentials.method``, ``execute``), over PyHive."""

    def __init__(self, server) -> None:
        from types import SimpleNamespace

        from pyhive import hive

        self._conn = hive.connect(host=server.host, port=server.port, username="tests")
        self.config = SimpleNamespace(credentials=SimpleNamespace(method="thrift"))
        self.statements: list[str] = []

    def execute(self, sql: str, auto_begin: bool = False, fetch: bool = False):
        from types import SimpleNamespace

        self.statements.append(sql)
        cursor = self._conn.cursor()
        cursor.execute(sql)
        rows = cursor.fetchall() if cursor.description else []
        names = [d[0] for d in cursor.description or []]
        return None, SimpleNamespace(column_names=names, rows=rows)


NASTY = ["it's", "back\\slash", "${env:HOME}", "x' OR '1'='1", "semi; DROP TABLE q.nasty --", "ünï`code"]


def test_hostile_partition_values_reach_the_server_as_literals(thrift_server, tmp_path):
    """The partitions our planner chose go into OPTIMIZE's WHERE as escaped literals: quotes, backslashes,
    `${...}` (which the server's variable substitution would expand) and NULL each match their own partition."""
    from dbt_delta_optimize.dbt.bridge import Bridge

    adapter = _PyHiveAdapter(thrift_server)
    adapter.execute("CREATE SCHEMA IF NOT EXISTS q")
    adapter.execute("CREATE TABLE q.nasty (id INT, p STRING) USING delta PARTITIONED BY (p)")
    adapter.execute("INSERT INTO q.nasty VALUES (0, 'plain')")
    values = ", ".join(f"({i}, {v})" for i, v in enumerate([*(_sql(v) for v in NASTY), "NULL"], start=1))
    for _ in range(3):
        adapter.execute(f"INSERT INTO q.nasty VALUES {values}")
    before = same_rows(thrift_server, "nasty", "q")
    result = Bridge().run_model(
        "q.nasty",
        {"mode": "auto", "min_num_files": 2},
        spark_target={"adapter": adapter},
        invocation_id="nasty",
        target_path=str(tmp_path),
    )
    assert result["status"] == "runOnModifiedPartitions" and result["engine"] == "sql", result
    assert len(result["auto_compact"]["chosen"]) == len(NASTY) + 1  # every hostile value and NULL, not 'plain'
    table = os.path.join(thrift_server.warehouse, "q.db", "nasty")
    counts = files_per_partition(table)
    assert counts == {**{v: 1 for v in NASTY}, None: 1, "plain": 1}, counts
    assert same_rows(thrift_server, "nasty", "q") == before
    commit = DeltaTable(table).history(1)[0]
    assert commit["operation"] == "OPTIMIZE" and "${env:HOME}" in commit["operationParameters"]["predicate"]
    (optimize,) = [s for s in adapter.statements if s.startswith("OPTIMIZE")]
    assert "${" not in optimize and "\\u0024{env:HOME}" in optimize


def _sql(value: str) -> str:
    """A literal for the test's own INSERT (Spark's escapes; `$` as \\u0024 so the server keeps it)."""
    from dbt_delta_optimize.dbt.sql_statements import string_literal

    return string_literal(value)
