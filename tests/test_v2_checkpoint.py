"""V2 checkpoints (PROTOCOL.md "V2 Checkpoint"): read with sidecars, written under delta.checkpointPolicy=v2."""

from __future__ import annotations

import json
import os
import re
import shutil

import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from deltalake import DeltaTable

from dbt_delta_optimize.cli.main import cli
from dbt_delta_optimize.delta.log import list_log, raw_adds
from dbt_delta_optimize.delta.snapshot import load_snapshot
from dbt_delta_optimize.delta.storage import LocalStorage
from tests.helpers import _key, log_versions, rows_spark

_UUID_PARQUET = re.compile(r"^(\d{20})\.checkpoint\.[0-9a-f-]{36}\.parquet$")


def _v2_table(spark, path: str, inserts: int) -> None:
    spark.sql(
        f"CREATE TABLE delta.`{path}` (id BIGINT, s STRING) USING delta "
        "TBLPROPERTIES ('delta.checkpointPolicy'='v2', 'delta.checkpointInterval'='2')"
    )
    for i in range(inserts):
        spark.sql(f"INSERT INTO delta.`{path}` VALUES ({i}, 'r{i}'), ({i + 100}, NULL)")


def rows_deltalake(path: str) -> list[tuple]:
    """The rows of deltalake's live files: its replay reads V2 checkpoints, its scan refuses the feature."""
    import pyarrow as pa

    uris = DeltaTable(path).file_uris()
    data = pa.concat_tables([pq.read_table(u) for u in uris]).to_pylist() if uris else []
    return sorted(((r["id"], r["s"]) for r in data), key=_key)


def _live_paths(path: str) -> set[str]:
    import pyarrow as pa

    return set(pa.table(DeltaTable(path).get_add_actions(flatten=False)).column("path").to_pylist())


def _checkpoint_only_copy(src: str, dst: str, version: int, *, drop: tuple[str, ...] = ()) -> None:
    """A copy without the commits before ``version``: every reader must use the checkpoint at ``version``."""
    shutil.copytree(src, dst)
    log = os.path.join(dst, "_delta_log")
    for name in os.listdir(log):
        m = re.match(r"^\.?(\d{20})\.(json|crc)", name)
        if (m and int(m.group(1)) < version) or name in drop:
            os.remove(os.path.join(log, name))


def _clear_spark_cache(spark) -> None:
    spark._jvm.org.apache.spark.sql.delta.DeltaLog.clearCache()


@pytest.mark.spark
@pytest.mark.slow
def test_our_optimize_writes_a_v2_checkpoint_both_engines_read(spark, tmp_path):
    p = str(tmp_path / "t")
    _v2_table(spark, p, inserts=3)  # versions 0..3; delta-spark checkpointed at 2
    before = rows_spark(spark, p)
    r = CliRunner().invoke(cli, ["optimize", p, "--json"], catch_exceptions=False)
    assert r.exit_code == 0, r.stderr
    assert log_versions(p)[-1] == 4
    log = os.path.join(p, "_delta_log")
    ours = [n for n in os.listdir(log) if (m := _UUID_PARQUET.match(n)) and int(m.group(1)) == 4]
    assert len(ours) == 1, os.listdir(log)
    top = pq.read_table(os.path.join(log, ours[0]))
    assert [m for m in top.column("checkpointMetadata").to_pylist() if m] == [{"version": 4, "tags": None}]
    assert not any(top.column("add").to_pylist()), "file actions live in the sidecar"
    (sidecar,) = [s["path"] for s in top.column("sidecar").to_pylist() if s]
    adds = [a for a in pq.read_table(os.path.join(log, "_sidecars", sidecar)).column("add").to_pylist() if a]
    assert {a["path"] for a in adds} == _live_paths(p) and len(adds) == 1
    # written by us from the state the commit held (checkpoint_v1), not converted from deltalake's classic file:
    # no classic file at 4, and the sidecar's removes (the tombstones of our optimize) carry no stats or tags
    assert not os.path.exists(os.path.join(log, "00000000000000000004.checkpoint.parquet"))
    side = pq.read_table(os.path.join(log, "_sidecars", sidecar))
    remove_fields = {f.name for f in side.schema.field("remove").type}
    assert {"stats", "tags"}.isdisjoint(remove_fields) and {"path", "deletionTimestamp"} <= remove_fields
    removed = len([r for r in side.column("remove").to_pylist() if r])
    assert removed == json.loads(r.stdout)["numFilesRemoved"] > 1  # the inserts' files, compacted
    with open(os.path.join(log, "_last_checkpoint")) as fh:
        last = json.loads(fh.read())
    assert last["version"] == 4

    # readers that must use our UUID-named checkpoint: no commits up to 4, no classic file
    q = str(tmp_path / "copy")
    _checkpoint_only_copy(p, q, 4, drop=("00000000000000000004.checkpoint.parquet",))
    _clear_spark_cache(spark)
    assert rows_spark(spark, q) == before and rows_deltalake(q) == before
    snap = load_snapshot(q)
    assert snap.file_table is not None and {f.path for f in snap.files} == {a["path"] for a in adds}
    spark.sql(f"INSERT INTO delta.`{q}` VALUES (7, 'new')")
    r = CliRunner().invoke(cli, ["optimize", q, "--json"], catch_exceptions=False)  # commits 6: a checkpoint
    assert r.exit_code == 0 and json.loads(r.stdout)["numFilesRemoved"] == 2
    _clear_spark_cache(spark)
    expected = sorted([*before, (7, "new")], key=_key)
    assert rows_spark(spark, q) == expected and rows_deltalake(q) == expected


@pytest.mark.spark
@pytest.mark.slow
def test_delta_spark_v2_checkpoints_with_sidecars_feed_our_readers(spark, tmp_path):
    p = str(tmp_path / "t")
    keys = ("spark.databricks.delta.checkpointV2.topLevelFileFormat", "spark.databricks.delta.checkpoint.partSize")
    spark.conf.set(keys[0], "json")
    spark.conf.set(keys[1], "1")  # one action per sidecar: several sidecars
    try:
        _v2_table(spark, p, inserts=4)  # checkpoints at 2 and 4
    finally:
        for k in keys:
            spark.conf.unset(k)
    log = os.path.join(p, "_delta_log")
    assert any(n.endswith(".json") and ".checkpoint." in n for n in os.listdir(log))
    assert len([n for n in os.listdir(os.path.join(log, "_sidecars")) if n.endswith(".parquet")]) >= 2
    q = str(tmp_path / "copy")
    _checkpoint_only_copy(p, q, 4)
    storage = LocalStorage()
    for table in (p, q):
        found = raw_adds(storage, table, 4, list_log(storage, table))
        assert set(found) == _live_paths(table) and len(found) >= 4
    assert {v for v, _ in raw_adds(storage, q, 4, list_log(storage, q)).values()} == {4}
    snap = load_snapshot(q)
    live = _live_paths(q)
    assert snap.file_table is not None and {f.path for f in snap.files} == live
    assert all(f.stats for f in snap.files), "stats come from the sidecars"
    before = rows_spark(spark, q)
    r = CliRunner().invoke(cli, ["optimize", q, "--json"], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["numFilesRemoved"] == len(live)
    _clear_spark_cache(spark)
    assert rows_spark(spark, q) == before and rows_deltalake(q) == before
