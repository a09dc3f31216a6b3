"""Bounded-memory snapshot loading: the checkpoint read per row group, deltalake's table let go on large tables.

The synthetic table is bench/plan_scale.py's (a checkpoint written directly with pyarrow, in row groups,
then a commit that removes 1,000 files and adds 500), small here; the bench runs it at 1M and 5M files.
"""

from __future__ import annotations

import glob
import os
import sys

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable

from dbt_delta_optimize.delta import snapshot as snapshot_module
from dbt_delta_optimize.delta.file_table import match_live, read_log_adds
from dbt_delta_optimize.delta.log import list_log
from dbt_delta_optimize.delta.snapshot import load_snapshot
from dbt_delta_optimize.delta.storage import storage_for
from dbt_delta_optimize.errors import DeltaOptimizeError

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bench"))
from plan_scale import build

FILES, PARTITIONS = 3_000, 7

#: ``LEAN_REPLAY_ROWS`` above every table: deltalake's path (a local table's default is our own replay).
DELTALAKES_PATH = 2**62


@pytest.fixture(scope="module")
def table(tmp_path_factory) -> str:
    path = str(tmp_path_factory.mktemp("scale") / "t")
    build(path, FILES, PARTITIONS, batch=1_000)
    (checkpoint,) = glob.glob(os.path.join(path, "_delta_log", "*.checkpoint.parquet"))
    assert pq.ParquetFile(checkpoint).metadata.num_row_groups == 4  # protocol + metadata, then 3 of adds
    return path


def _columns(snap) -> dict:
    t = snap.file_table
    return {
        "path": t.column("path").to_pylist(),
        "size": t.column("size").to_pylist(),
        "partitionValues": t.column("partitionValues").to_pylist(),
        "modificationTime": t.column("modificationTime").to_pylist(),
        "versions": t.versions.to_pylist(),
        "stats": t.column("stats").to_pylist(),
    }


def test_the_snapshot_is_the_same_whether_or_not_deltalakes_table_is_let_go(table, monkeypatch):
    monkeypatch.setattr(snapshot_module, "LEAN_REPLAY_ROWS", DELTALAKES_PATH)
    kept = load_snapshot(table)
    assert kept.delta_table is not None  # 2,500 files: under the threshold
    monkeypatch.setattr(snapshot_module, "RELEASE_DELTA_TABLE_FILES", 1)
    released = load_snapshot(table)
    assert released.delta_table is None
    assert _columns(released) == _columns(kept)
    live = sorted(pa.table(DeltaTable(table).get_add_actions()).column("path").to_pylist())
    assert released.file_table.paths == live and len(live) == FILES - 1_000 + 500
    # The commit's adds (version 1) and the checkpoint's (version 0), each with its own stats.
    cols = _columns(released)
    by_path = dict(zip(cols["path"], zip(cols["versions"], cols["stats"], cols["size"])))
    assert by_path[f"part={3003 % PARTITIONS}/part-0003003-c000.snappy.parquet"][0] == 1
    assert by_path[f"part={3003 % PARTITIONS}/part-0003003-c000.snappy.parquet"][1].startswith('{"numRecords": 50000')
    version, stats, size = by_path[f"part={1001 % PARTITIONS}/part-0001001-c000.snappy.parquet"]
    assert version == 0 and stats.startswith(f'{{"numRecords":{size // 20},')
    assert "part=0/part-0000000-c000.snappy.parquet" not in by_path  # removed by the commit
    # deltalake's table is loaded anew when a checkpoint needs it.
    assert released.delta_table_at(released.version).version() == released.version == 1


def test_matching_consumes_the_logs_adds(table):
    storage = storage_for(table)
    log = read_log_adds(storage, table, 1, list_log(storage, table))
    assert len(log.parts) == 4  # one per row group of adds, and the commit's: never concatenated
    file_table, missing = match_live(storage, table, log, pa.table(DeltaTable(table).get_add_actions()).column("path"))
    assert missing == [] and len(file_table) == FILES - 500 and log.parts == []


@pytest.mark.timeout(120)
def test_a_log_deltalake_refuses_does_not_leave_the_waiting_reader_behind(table, tmp_path, monkeypatch):
    """The reader waits for deltalake's table to be let go; a load that fails must release it, not hang."""
    import shutil

    broken = str(tmp_path / "broken")
    shutil.copytree(table, broken)
    with open(os.path.join(broken, "_delta_log", f"{1:020d}.json"), "a") as fh:
        fh.write("{not json\n")
    monkeypatch.setattr(snapshot_module, "RELEASE_DELTA_TABLE_FILES", 1)
    with pytest.raises(DeltaOptimizeError):
        load_snapshot(broken)


def test_our_own_replay_gives_deltalakes_snapshot_of_a_large_table(table, monkeypatch):
    """Above LEAN_REPLAY_ROWS the live files, protocol and metadata come from our projected replay alone
    (deltalake never loads the table); they equal deltalake's."""
    import json

    monkeypatch.setattr(snapshot_module, "LEAN_REPLAY_ROWS", DELTALAKES_PATH)
    checked = load_snapshot(table)
    assert checked.delta_table is not None
    monkeypatch.setattr(snapshot_module, "LEAN_REPLAY_ROWS", 1)
    lean = load_snapshot(table)
    assert lean.delta_table is None and lean.version == checked.version == 1
    assert _columns(lean) == _columns(checked)
    assert lean.protocol == checked.protocol
    assert json.loads(lean.metadata.schema_string) == json.loads(checked.metadata.schema_string)
    assert (lean.metadata.id, lean.metadata.partition_columns) == (
        checked.metadata.id,
        checked.metadata.partition_columns,
    )
    assert dict(lean.metadata.configuration) == dict(checked.metadata.configuration)
    assert lean.delta_table_at(lean.version).version() == 1  # deltalake loaded when a commit needs it
    old = load_snapshot(table, 0)  # at the checkpoint itself: the commit's removes not applied
    assert len(old.file_table) == FILES and old.delta_table is None


def test_a_lean_snapshot_holds_four_fields_and_reads_the_rest_on_demand(table, monkeypatch):
    """Path, partition values and size per file (no DV column when no file has one); stats, tags and the
    rest read again from the checkpoint, for some rows or one row group at a time, equal to deltalake's."""
    from dbt_delta_optimize.inspect.health_stats import statistics_coverage
    from dbt_delta_optimize.plan.builder import build_plan
    from dbt_delta_optimize.plan.config import OptimizeConfig
    from dbt_delta_optimize.plan.predicate import select_partitions

    monkeypatch.setattr(snapshot_module, "LEAN_REPLAY_ROWS", DELTALAKES_PATH)
    checked = load_snapshot(table)
    monkeypatch.setattr(snapshot_module, "LEAN_REPLAY_ROWS", 1)
    lean = load_snapshot(table)
    t = lean.file_table
    assert [f.name for f in t.adds.type] == ["path", "partitionValues", "size"]
    assert t.null_fields == {"deletionVector"} and not t.has_deletion_vectors()
    stats = checked.file_table.column("stats").to_pylist()
    rows = [len(t) - 1, 0, 1234, 7]  # the commit's last add and checkpoint rows, out of order
    assert t.values_at("stats", rows) == [stats[r] for r in rows]
    assert t._loaded == {}  # read for those rows only, nothing kept
    assert sorted(v for chunk in t.iter_column("stats") for v in chunk.to_pylist()) == sorted(stats)
    assert statistics_coverage(lean) == statistics_coverage(checked)
    config = OptimizeConfig(min_file_size=30_000_000, max_file_size=100_000_000)
    plans = [build_plan(s, config, selection=select_partitions(s)) for s in (lean, checked)]
    assert [b.paths for b in plans[0].bins] == [b.paths for b in plans[1].bins] and plans[0].bins
    assert list(plans[0].bins[0].files) == list(plans[1].bins[0].files)  # every field, read back for the AddFiles
