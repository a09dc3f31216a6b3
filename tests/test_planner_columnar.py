"""The columnar planner (a snapshot's FileTable) gives exactly the plan of the object planner."""

from __future__ import annotations

import dataclasses
import json
import os

import pyarrow as pa
import pytest
from deltalake import write_deltalake

from dbt_delta_optimize.delta.snapshot import load_snapshot
from dbt_delta_optimize.plan.builder import build_plan
from dbt_delta_optimize.plan.config import OptimizeConfig
from dbt_delta_optimize.plan.curve import ClusteringSpec
from dbt_delta_optimize.plan.predicate import select_partitions


@pytest.fixture(scope="module")
def table(tmp_path_factory) -> str:
    """4 partitions (one null, one with a quote), files of varied sizes, a re-added path, a DV."""
    p = str(tmp_path_factory.mktemp("columnar") / "t")
    for i in range(14):
        n = 5 + (i * 37) % 400
        part = [None, "a", "b'c", "d"][i % 4]
        write_deltalake(
            p,
            pa.table({"id": pa.array(range(n), pa.int64()), "part": pa.array([part] * n, pa.string())}),
            partition_by=["part"],
            mode="append",
        )
    # A deletion vector on one large-ish file (the planner reads only its cardinality and the stats).
    log = os.path.join(p, "_delta_log")
    last = max(int(n[:20]) for n in os.listdir(log) if n.endswith(".json"))
    with open(os.path.join(log, f"{last:020d}.json")) as fh:
        add = next(json.loads(line)["add"] for line in fh if '"add"' in line)
    dv = {"storageType": "u", "pathOrInlineDv": "ab" + "0" * 20, "sizeInBytes": 34, "cardinality": 300, "offset": 1}
    readd = {**add, "deletionVector": dv, "dataChange": True}
    with open(os.path.join(log, f"{last + 1:020d}.json"), "w") as fh:
        fh.write(json.dumps({"commitInfo": {"operation": "DELETE"}}) + "\n")
        fh.write(json.dumps({"remove": {"path": add["path"], "dataChange": True}}) + "\n")
        fh.write(json.dumps({"add": readd}) + "\n")
    return p


def _plans(p: str, config: OptimizeConfig, where=(), clustering=None):
    snap = load_snapshot(p)
    assert snap.file_table is not None
    objects = dataclasses.replace(snap, files=tuple(snap.files), file_table=None)
    out = []
    for s in (snap, objects):
        selection = select_partitions(s, list(where))
        plan = build_plan(
            s, config, selection=selection, clustering=clustering, zorder_by=("id",) if clustering else ()
        )
        out.append((plan.to_dict(), plan.summary(), [list(map(str, b.paths)) for b in plan.bins], plan.predicates))
    return out


@pytest.mark.parametrize(
    "settings",
    [
        {},
        {"min_file_size": 2000},
        {"min_file_size": 4000, "max_file_size": 5000},
        {"min_file_size": 10**9, "max_file_size": 3000, "batch_size": 4000},
        {"min_file_size": 1},
        {"min_file_size": 1, "max_deleted_rows_ratio": 0.01},
    ],
)
@pytest.mark.parametrize("where", [(), ("part = 'a'",), ("part IS NULL OR part > 'b'",)])
def test_same_plan_as_the_object_planner(table, settings, where):
    columnar, objects = _plans(table, OptimizeConfig(**settings), where)
    assert columnar == objects


def test_same_clustering_plan(table):
    spec = ClusteringSpec((("id",),), "zorder")
    columnar, objects = _plans(table, OptimizeConfig(), clustering=spec)
    assert columnar == objects and columnar[0]["numBins"] == 4


def test_dv_file_is_a_candidate_by_its_ratio(table):
    (columnar, *_), (objects, *_) = _plans(table, OptimizeConfig(min_file_size=1, max_file_size=10**9))
    # a lone file with too many deleted rows is rewritten alone (delta-spark drops it: delta-io/delta#5781)
    assert columnar == objects and columnar["filesToRewrite"] == 1 and columnar["numBins"] == 1
    snap = load_snapshot(table)
    (dv_file,) = [f for f in snap.files if f.deletion_vector is not None]
    assert columnar["bins"][0]["paths"] == [dv_file.path]


def test_files_are_built_only_when_read(table):
    snap = load_snapshot(table)
    plan = build_plan(snap, OptimizeConfig(), selection=select_partitions(snap))
    assert plan.bins and all(not b.files._cache for b in plan.bins)  # type: ignore[attr-defined]
    first = plan.bins[0].files[0]
    assert first.path == plan.bins[0].paths[0] and first.size > 0


def _live(p: str) -> pa.Array:
    from deltalake import DeltaTable

    return pa.table(DeltaTable(p).get_add_actions(flatten=False)).column("path").combine_chunks()


@pytest.fixture(scope="module")
def checkpointed(tmp_path_factory) -> str:
    """A checkpoint, then commits that remove a checkpointed file, re-add one path and add new files."""
    from deltalake import DeltaTable

    p = str(tmp_path_factory.mktemp("replay") / "t")
    for i in range(4):
        write_deltalake(
            p, pa.table({"id": [i], "part": ["x y" if i % 2 else "z"]}), partition_by=["part"], mode="append"
        )
    DeltaTable(p).create_checkpoint()
    log = os.path.join(p, "_delta_log")
    with open(os.path.join(log, f"{0:020d}.json")) as fh:
        first = next(json.loads(line)["add"] for line in fh if '"add"' in line)
    with open(os.path.join(log, f"{1:020d}.json")) as fh:
        second = next(json.loads(line)["add"] for line in fh if '"add"' in line)
    with open(os.path.join(log, f"{4:020d}.json"), "w") as fh:
        fh.write(json.dumps({"commitInfo": {"operation": "DELETE"}}) + "\n")
        fh.write(json.dumps({"remove": {"path": first["path"], "dataChange": True}}) + "\n")
        fh.write(json.dumps({"remove": {"path": second["path"], "dataChange": True}}) + "\n")
    with open(os.path.join(log, f"{5:020d}.json"), "w") as fh:  # the same path added back (a RESTORE does this)
        fh.write(json.dumps({"commitInfo": {"operation": "RESTORE"}}) + "\n")
        fh.write(json.dumps({"add": {**second, "tags": {"readded": "yes"}}}) + "\n")
    write_deltalake(p, pa.table({"id": [9], "part": ["z"]}), partition_by=["part"], mode="append")
    return p


def test_replay_after_a_checkpoint_matches_deltalake(checkpointed, monkeypatch):
    from dbt_delta_optimize.delta import file_table as ft
    from dbt_delta_optimize.delta.log import list_log
    from dbt_delta_optimize.delta.storage import LocalStorage

    def no_fallback(*_a):
        raise AssertionError("the replay disagreed with deltalake")

    monkeypatch.setattr(ft, "_matched_rows", no_fallback)
    storage, live = LocalStorage({}), _live(checkpointed)
    table, missing = ft.build_file_table(storage, checkpointed, 6, list_log(storage, checkpointed), live)
    assert missing == [] and len(table) == 4 == len(live)
    assert table.paths == sorted(live.to_pylist())
    assert table.paths == sorted(table.paths)
    assert [table.file(i).num_records for i in range(len(table))] == [1, 1, 1, 1]  # stats, read on demand
    by_path = dict(zip(table.paths, table.versions.to_pylist()))
    readded = [i for i in range(len(table)) if table.file(i).tags.get("readded") == "yes"]
    assert len(readded) == 1 and by_path[table.paths[readded[0]]] == 5  # the last add wins, with its version
    assert sorted(by_path.values()) == [3, 3, 5, 6]  # files from the checkpoint carry its version


def test_a_live_list_the_replay_does_not_give_falls_back_to_lookup(checkpointed):
    from dbt_delta_optimize.delta import file_table as ft
    from dbt_delta_optimize.delta.log import list_log
    from dbt_delta_optimize.delta.storage import LocalStorage

    storage, live = LocalStorage({}), _live(checkpointed)
    listing = list_log(storage, checkpointed)
    fewer = live.slice(1)
    table, missing = ft.build_file_table(storage, checkpointed, 6, listing, fewer)
    assert missing == [] and table.paths == sorted(fewer.to_pylist())
    more = pa.concat_arrays([live, pa.array(["part=q/not-in-the-log.parquet"])])
    table, missing = ft.build_file_table(storage, checkpointed, 6, listing, more)
    assert missing == ["part=q/not-in-the-log.parquet"] and len(table) == len(live)


@pytest.mark.parametrize("threshold", [1, 400, 2500, 10**9])
def test_auto_compact_counts_from_columns_match_objects(table, threshold):
    from dbt_delta_optimize.plan.autocompact import AutoCompactConfig, decide_counts, partition_counts

    snap = load_snapshot(table)
    objects = dataclasses.replace(snap, files=tuple(snap.files), file_table=None)
    columnar, by_object = partition_counts(snap, threshold), partition_counts(objects, threshold)
    assert columnar == by_object and sum(by_object[1].values()) == len(snap.files)
    config = AutoCompactConfig(min_num_files=2, modified_partitions_only=False)
    assert decide_counts(*columnar, (), snap.partition_columns, config) == decide_counts(
        *by_object, (), snap.partition_columns, config
    )


def test_partitions_of_paths(table):
    from urllib.parse import unquote

    from dbt_delta_optimize.plan.autocompact import partitions_of

    snap = load_snapshot(table)
    objects = dataclasses.replace(snap, files=tuple(snap.files), file_table=None)
    some = {unquote(f.path) for f in snap.files if f.partition_values.get("part") in ("b'c", None)}
    assert partitions_of(snap, some) == partitions_of(objects, some) == {("b'c",), (None,)}


def test_health_layout_from_columns_matches_objects(table):
    from dbt_delta_optimize.inspect.health import _layout

    snap = load_snapshot(table)
    objects = dataclasses.replace(snap, files=tuple(snap.files), file_table=None)
    columnar, by_object = _layout(snap, 2000, 1000), _layout(objects, 2000, 1000)
    assert columnar == by_object and by_object["numPartitions"] == 4
    assert [p["partitionValues"]["part"] for p in columnar["partitions"]] == ["a", "b'c", "d", None]
