"""Planning pinned to delta-spark's rules (reference §1.3-1.4), over FileTables: pure, no Spark, milliseconds.

Hand-made files go through ``FileTable.from_files`` (the representation the planner reads); a small
table written by deltalake checks the same rules on a real log, and that the snapshot's slow path
(live files the log replay could not match) plans exactly like the fast one.
"""

from __future__ import annotations

import json
import os

import pyarrow as pa
import pytest
from deltalake import write_deltalake

from dbt_delta_optimize.delta.actions import AddFile, DeletionVector
from dbt_delta_optimize.delta.file_table import FileTable
from dbt_delta_optimize.delta.snapshot import load_snapshot
from dbt_delta_optimize.plan.builder import build_plan
from dbt_delta_optimize.plan.config import OptimizeConfig
from dbt_delta_optimize.plan.curve import ClusteringSpec
from dbt_delta_optimize.plan.metrics import FileSizeMetrics, operation_metrics
from dbt_delta_optimize.plan.operation import AutoCompact, Compact, Liquid, Purge, ZOrder
from dbt_delta_optimize.plan.planner import Bin, OptimizePlan, batches_of, bin_pack_by_size, select_bins
from dbt_delta_optimize.plan.predicate import select_partitions


def fp(path, size, part, **kw):
    return AddFile(path, {"p": part}, size, 0, **kw)


def bins_of(files, config, columns=("p",), **kw):
    """The bins as lists of paths."""
    selected = select_bins(FileTable.from_files(files), list(columns), config, **kw)
    return [[f.path for f in b.files] for b in selected.bins]


COMPACT = OptimizeConfig(min_file_size=1000, max_file_size=60)


# ----------------------------------------------------------------------------- §1.4 groupFilesIntoBins
def test_next_fit_over_files_sorted_by_size_drops_single_file_bins():
    files = [fp("a", 50, "1"), fp("b", 10, "1"), fp("c", 30, "1"), fp("d", 40, "1")]
    # sorted: b10 c30 d40 a50 -> [b,c] (40); d: 40+40 > 60 -> [d]; a: 40+50 > 60 -> [a]; one-file bins dropped
    assert bins_of(files, COMPACT) == [["b", "c"]]


def test_equal_sizes_are_packed_in_path_order():
    files = [fp("z", 10, "1"), fp("m", 10, "1"), fp("a", 10, "1")]
    assert bins_of(files, OptimizeConfig(min_file_size=1000, max_file_size=20)) == [["a", "m"]]


def test_an_oversized_first_file_pushes_an_empty_bin_that_is_dropped():
    files = [fp("big", 100, "1"), fp("s1", 1, "1"), fp("s2", 2, "1")]
    assert bins_of(files, OptimizeConfig(min_file_size=1000, max_file_size=50)) == [["s1", "s2"]]


def test_zorder_rewrites_each_partition_as_one_bin_even_of_one_file():
    files = [fp("a", 5, "1"), fp("b", 10**12, "2"), fp("c", 10**12, "2")]
    assert bins_of(files, OptimizeConfig(min_file_size=1, max_file_size=1), mode="zorder") == [["a"], ["b", "c"]]


# ----------------------------------------------------------------------------- §1.3 candidates
def test_candidates_are_strictly_smaller_than_min_file_size():
    cfg = OptimizeConfig(min_file_size=100, max_file_size=1000)
    assert bins_of([fp("a", 99, "1"), fp("b", 99, "1")], cfg) == [["a", "b"]]
    assert bins_of([fp("a", 100, "1"), fp("b", 99, "1")], cfg) == []


def test_deleted_rows_ratio_is_strict_and_a_dv_without_stats_is_always_compacted():
    cfg = OptimizeConfig(min_file_size=10, max_file_size=10**6, max_deleted_rows_ratio=0.05)
    stats = '{"numRecords": 100}'  # numRecords counts every row of the file, deleted ones included
    six = fp("six", 500, "1", stats=stats, deletion_vector=DeletionVector("u", "x", 10, 6))
    five = fp("five", 500, "1", stats=stats, deletion_vector=DeletionVector("u", "y", 10, 5))
    bare = fp("bare", 500, "1", deletion_vector=DeletionVector("u", "z", 10, 5))
    assert bins_of([six, five], cfg) == [["six"]]  # 6/100 > 0.05; 5/100 is not
    assert bins_of([five, bare], cfg) == [["bare"]]


def test_a_lone_file_with_many_deleted_rows_is_rewritten_alone():
    """delta-io/delta#5781: delta-spark drops the one-file bin; a lone file 60% deleted is rewritten here."""
    cfg = OptimizeConfig(min_file_size=10, max_file_size=1000, max_deleted_rows_ratio=0.05)
    heavy = AddFile("big", {}, 500, 0, stats='{"numRecords": 10}', deletion_vector=DeletionVector("u", "x", 10, 6))
    light = AddFile("ok", {}, 500, 0, stats='{"numRecords": 100}', deletion_vector=DeletionVector("u", "y", 10, 5))
    small = AddFile("small", {}, 5, 0, stats='{"numRecords": 100}', deletion_vector=DeletionVector("u", "z", 10, 1))
    for files, expected in (([heavy], [["big"]]), ([light], []), ([small], []), ([heavy, light], [["big"]])):
        assert bins_of(files, cfg, columns=()) == expected


def test_purge_rewrites_every_file_with_deleted_rows_and_records_a_reorg(tmp_path):
    heavy = AddFile("big", {}, 500, 0, stats='{"numRecords": 10}', deletion_vector=DeletionVector("u", "x", 10, 6))
    light = AddFile("ok", {}, 500, 0, stats='{"numRecords": 100}', deletion_vector=DeletionVector("u", "y", 10, 1))
    clean = AddFile("clean", {}, 5, 0, stats='{"numRecords": 100}')
    snap = _snapshot([heavy, light, clean], ())
    plan = build_plan(snap, OptimizeConfig(), selection=select_partitions(snap), operation=Purge())
    assert sorted(p for b in plan.bins for p in b.paths) == ["big", "ok"]
    assert (plan.config.min_file_size, plan.config.max_deleted_rows_ratio) == (0, 0.0)
    assert plan.commit_name == "REORG" and plan.commit_parameters() == {"predicate": "[]", "applyPurge": True}


# ----------------------------------------------------------------------------- §1.3 grouping by partition
def test_bins_group_by_partition_and_matched_partitions_are_the_considered_files():
    files = [fp(f"{p}/{i}", 10 + i, p) for p in ("0", "1", "2") for i in range(3)] + [fp("3/only", 5, "3")]
    table = FileTable.from_files(files)
    cfg = OptimizeConfig(min_file_size=1000, max_file_size=1000)
    every = select_bins(table, ["p"], cfg)
    assert [b.partition_values["p"] for b in every.bins] == ["0", "1", "2"]  # "3" has one file
    assert len(every.considered) == 10
    only1 = select_bins(table, ["p"], cfg, matched_partitions=[("1",)])
    assert [b.partition_values["p"] for b in only1.bins] == ["1"] and len(only1.considered) == 3


def test_null_and_empty_string_share_a_bin_written_as_null():
    files = [fp("a", 1, ""), AddFile("b", {"p": None}, 2, 0), fp("c", 3, "x")]
    (only,) = select_bins(FileTable.from_files(files), ["p"], OptimizeConfig()).bins
    assert only.paths == ["a", "b"] and dict(only.partition_values) == {"p": None}


def test_equal_typed_values_share_a_bin_with_the_first_files_raw_values():
    files = [fp("b", 1, "2024-01-01 00:00:00"), fp("a", 2, "2024-01-01T00:00:00.000000Z")]
    same = {("2024-01-01 00:00:00",): "T0", ("2024-01-01T00:00:00.000000Z",): "T0"}
    table = FileTable.from_files(files)
    (only,) = select_bins(table, ["p"], OptimizeConfig(), normalize=lambda k: same[k]).bins
    assert only.paths == ["b", "a"]  # by size
    assert only.partition_values == {"p": "2024-01-01T00:00:00.000000Z"}  # the first file in path order
    assert select_bins(table, ["p"], OptimizeConfig()).bins == ()


def test_skip_partition_reports_the_partitions_left_alone():
    files = [fp("a", 1, "1"), fp("b", 1, "1"), fp("c", 1, "2"), fp("d", 1, "2")]
    selected = select_bins(
        FileTable.from_files(files), ["p"], OptimizeConfig(), mode="zorder", skip_partition=lambda fs: fs[0].path == "a"
    )
    assert [b.partition_values["p"] for b in selected.bins] == ["2"]
    assert [dict(p) for p in selected.skipped_partitions] == [{"p": "1"}]


# ----------------------------------------------------------------------------- §1.3 batching
def test_batching_matches_delta_spark():
    bins = [Bin({"p": str(i)}, (fp(f"{i}a", s, str(i)), fp(f"{i}b", s, str(i)))) for i, s in enumerate([5, 1, 3, 10])]
    assert [len(b) for b in bin_pack_by_size(bins, 1)] == [1, 1, 1, 1]
    assert [len(b) for b in bin_pack_by_size(bins, 10**9)] == [4]
    # sizes 2,6,10,20 with batch 8: [2,6] -> 8 >= 8 closes; [10] alone (> 8); [20]
    assert [[b.size for b in batch] for batch in bin_pack_by_size(bins, 8)] == [[2, 6], [10], [20]]


def test_without_batch_size_there_is_one_batch_even_of_no_bins():
    assert batches_of((), OptimizeConfig()) == ((),)  # delta-spark: numBatches 1 without batching
    assert batches_of((), OptimizeConfig(batch_size=1)) == ()
    two = select_bins(FileTable.from_files([fp("a", 1, "1"), fp("b", 1, "1")]), ["p"], OptimizeConfig()).bins
    assert len(batches_of(two, OptimizeConfig(batch_size=1))) == 1


# ----------------------------------------------------------------------------- the plan and its operation
def _snapshot(files, columns=("p",)):
    from dbt_delta_optimize.delta.actions import Metadata, Protocol
    from dbt_delta_optimize.delta.snapshot import Snapshot

    fields = [{"name": c, "type": "string", "nullable": True, "metadata": {}} for c in ("id", *columns)]
    schema = json.dumps({"type": "struct", "fields": fields})
    return Snapshot("/t", 3, Protocol(1, 2), Metadata("id", schema, tuple(columns)), tuple(files))


def test_plan_summary_and_to_dict():
    snap = _snapshot([fp("p=1/a", 1, "1"), fp("p=1/b", 2, "1")])
    plan = build_plan(snap, OptimizeConfig(), selection=select_partitions(snap))
    d = plan.to_dict()
    assert (d["readVersion"], d["mode"], d["numBins"], d["filesToRewrite"], d["bytesToRewrite"]) == (
        3,
        "compaction",
        1,
        2,
        3,
    )
    assert d["bins"][0]["paths"] == ["p=1/a", "p=1/b"] and not plan.is_noop
    assert plan.summary()["partitionsToRewrite"] == [{"partition": "p=1", "bins": 1, "files": 2, "bytes": 3}]


def test_each_operation_records_what_delta_spark_records():
    spec = ClusteringSpec((("id",),), "zorder")
    preds = ("(p = '1')",)
    base = {"predicate": "[\"(p = '1')\"]", "zOrderBy": "[]", "clusterBy": "[]", "auto": False}
    assert Compact().commit_parameters(preds) == base
    assert ZOrder(("id",), spec).commit_parameters(preds) == {**base, "zOrderBy": '["id"]'}
    assert Liquid(("id",), spec, full=True).commit_parameters(()) == {
        **base,
        "predicate": "[]",
        "clusterBy": '["id"]',
        "isFull": True,
    }
    assert AutoCompact().commit_parameters(preds) == {**base, "auto": True}
    assert [op.kind for op in (Compact(), ZOrder(("id",), spec), Liquid(("id",), spec), Purge(), AutoCompact())] == [
        "compact",
        "zorder",
        "liquid",
        "purge",
        "auto",
    ]
    assert ZOrder(("id",), spec).mode == "zorder" == Liquid(("id",), spec).mode and Purge().mode == "compaction"


def test_auto_compaction_plans_only_the_chosen_partitions_and_records_them():
    files = [fp(f"{p}/{i}", 1, p) for p in ("a", "b", "c") for i in range(2)]
    snap = _snapshot(files)
    plan = build_plan(
        snap, OptimizeConfig(), selection=select_partitions(snap), operation=AutoCompact(frozenset({("a",), ("c",)}))
    )
    assert [b.partition_values["p"] for b in plan.bins] == ["a", "c"]
    assert plan.predicates == ("((`p` <=> CAST('a' AS string))) OR ((`p` <=> CAST('c' AS string)))",)
    assert plan.commit_parameters()["auto"] is True and plan.commit_name == "OPTIMIZE"


# ----------------------------------------------------------------------------- a real log
@pytest.fixture(scope="module")
def table(tmp_path_factory) -> str:
    """4 partitions (one null, one with a quote), files of varied sizes, a re-added path, a DV."""
    p = str(tmp_path_factory.mktemp("planner") / "t")
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


def test_a_lone_dv_file_is_a_candidate_by_its_ratio(table):
    snap = load_snapshot(table)
    plan = build_plan(snap, OptimizeConfig(min_file_size=1, max_file_size=10**9), selection=select_partitions(snap))
    (dv_file,) = [f for f in snap.files if f.deletion_vector is not None]
    assert [b.paths for b in plan.bins] == [[dv_file.path]]


def test_zorder_plans_one_bin_per_partition(table):
    snap = load_snapshot(table)
    spec = ClusteringSpec((("id",),), "zorder")
    plan = build_plan(snap, OptimizeConfig(), selection=select_partitions(snap), operation=ZOrder(("id",), spec))
    assert len(plan.bins) == 4 and plan.num_files_to_rewrite == len(snap.files) == 14
    assert plan.clustering == spec and plan.commit_parameters()["zOrderBy"] == '["id"]'


def test_files_are_built_only_when_read(table):
    snap = load_snapshot(table)
    plan = build_plan(snap, OptimizeConfig(), selection=select_partitions(snap))
    assert plan.bins and all(not b.files._cache for b in plan.bins)  # type: ignore[attr-defined]
    first = plan.bins[0].files[0]
    assert first.path == plan.bins[0].paths[0] and first.size > 0


def _plans(snap: object) -> list[tuple[dict, tuple]]:
    out = []
    for settings in ({}, {"min_file_size": 2000}, {"min_file_size": 10**9, "max_file_size": 3000, "batch_size": 4000}):
        for where in ((), ("part = 'a'",), ("part IS NULL OR part > 'b'",)):
            plan = build_plan(snap, OptimizeConfig(**settings), selection=select_partitions(snap, list(where)))  # type: ignore[arg-type]
            out.append((plan.to_dict(), plan.predicates))
    return out


def test_the_snapshots_slow_path_plans_like_the_replay(table, monkeypatch):
    """When deltalake lists a live file the replay did not find, the snapshot looks each file up and
    builds its FileTable from those AddFiles: the same plans, down to every path and version."""
    from dbt_delta_optimize.delta import snapshot as snapshot_module

    monkeypatch.setattr(snapshot_module, "LEAN_REPLAY_ROWS", 2**62)  # deltalake's path, whose slow path this is
    fast = load_snapshot(table)
    real = snapshot_module.match_live
    monkeypatch.setattr(snapshot_module, "match_live", lambda *a: (real(*a)[0], ["missing"]))
    slow = load_snapshot(table)
    assert slow.file_table is not fast.file_table and slow.file_table.paths == fast.file_table.paths
    assert slow.file_table.versions.to_pylist() == fast.file_table.versions.to_pylist()
    assert list(slow.files) == list(fast.files)
    assert _plans(slow) == _plans(fast)


def test_a_hand_made_snapshot_gets_its_file_table_from_its_files():
    files = [fp("b", 2, "1"), fp("a", 1, "1")]
    snap = _snapshot(files)
    assert snap.file_table.paths == ["a", "b"] and [snap.file_table.file(i) for i in (0, 1)] == sorted(
        files, key=lambda f: f.path
    )
    assert isinstance(build_plan(snap, OptimizeConfig(), selection=select_partitions(snap)), OptimizePlan)


# ----------------------------------------------------------------------------- metrics
def test_operation_metrics_percentiles_by_index_and_strings():
    m = operation_metrics([40, 10, 30, 20, 50], [1, 2, 3], dvs_removed=0)
    assert m == {
        "numAddedFiles": "5",
        "numRemovedFiles": "3",
        "numAddedBytes": "150",
        "numRemovedBytes": "6",
        "minFileSize": "10",
        "p25FileSize": "20",
        "p50FileSize": "30",
        "p75FileSize": "40",
        "maxFileSize": "50",
        "numDeletionVectorsRemoved": "0",
    }


def test_file_size_metrics_empty():
    assert FileSizeMetrics.of([]) == FileSizeMetrics(None, None, 0.0, 0, 0)
    assert FileSizeMetrics.of([1, 3]).to_dict() == {"min": 1, "max": 3, "avg": 2.0, "totalFiles": 2, "totalSize": 4}


# ----------------------------------------------------------------------------- the same view for auto compaction and health
@pytest.mark.parametrize("threshold", [1, 400, 2500, 10**9])
def test_auto_compaction_counts_small_files_by_live_bytes(table, threshold):
    from dbt_delta_optimize.plan.autocompact import logical_size, partition_counts

    snap = load_snapshot(table)
    small: dict = {}
    total: dict = {}
    for f in snap.files:  # the rule, file by file: a file with a DV counts by its live bytes
        key = (f.partition_values.get("part") or None,)
        total[key] = total.get(key, 0) + 1
        dv = f.deletion_vector
        if (logical_size(f.size, f.num_records, dv.cardinality) if dv else f.size) < threshold:
            small[key] = small.get(key, 0) + 1
    assert partition_counts(snap, threshold) == (small, total) and sum(total.values()) == 14


def test_partitions_of_paths(table):
    from urllib.parse import unquote

    from dbt_delta_optimize.plan.autocompact import partitions_of

    snap = load_snapshot(table)
    some = {unquote(f.path) for f in snap.files if f.partition_values.get("part") in ("b'c", None)}
    assert partitions_of(snap, some) == {("b'c",), (None,)}


def test_health_layout_reads_the_same_table(table):
    from dbt_delta_optimize.inspect.health import _layout

    snap = load_snapshot(table)
    layout = _layout(snap, 2000, 1000)
    assert layout["numPartitions"] == 4 and layout["numFiles"] == 14
    assert [p["partitionValues"]["part"] for p in layout["partitions"]] == ["a", "b'c", "d", None]
    assert sum(p["numFiles"] for p in layout["partitions"]) == len(snap.files)
