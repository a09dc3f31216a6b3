"""Pure planning logic: no Spark, milliseconds."""

from __future__ import annotations

from dbt_delta_optimize.delta.actions import AddFile, DeletionVector
from dbt_delta_optimize.plan.config import OptimizeConfig
from dbt_delta_optimize.plan.metrics import FileSizeMetrics, operation_metrics
from dbt_delta_optimize.plan.planner import Bin, bin_pack_by_size, group_into_bins, plan_optimize, should_compact


def fp(path, size, part):
    return AddFile(path, {"p": part}, size, 0)


def test_next_fit_packing_sorts_by_size_and_drops_single_file_bins():
    files = [fp("a", 50, "1"), fp("b", 10, "1"), fp("c", 30, "1"), fp("d", 40, "1")]
    bins = group_into_bins([({"p": "1"}, files)], max_bin_size=60, keep_single_file_bins=False)
    # sorted: b10 c30 d40 a50 -> [b,c] (40), d (40+40>60 -> new) [d], a (40+50>60) [a]
    assert [[x.path for x in b.files] for b in bins] == [["b", "c"]]


def test_oversized_first_file_pushes_empty_bin_that_is_dropped():
    files = [fp("big", 100, "1"), fp("s1", 1, "1"), fp("s2", 2, "1")]
    bins = group_into_bins([({"p": "1"}, files)], max_bin_size=50, keep_single_file_bins=False)
    assert [[x.path for x in b.files] for b in bins] == [["s1", "s2"]]


def test_zorder_keeps_single_file_bins():
    bins = group_into_bins([({"p": "1"}, [fp("a", 5, "1")])], max_bin_size=2**63 - 1, keep_single_file_bins=True)
    assert len(bins) == 1 and bins[0].files[0].path == "a"


def test_candidates_are_strictly_smaller_than_min_file_size():
    cfg = OptimizeConfig(min_file_size=100, max_file_size=1000)
    assert should_compact(fp("a", 99, "1"), cfg)
    assert not should_compact(fp("a", 100, "1"), cfg)


def test_deleted_rows_ratio_is_strict_and_dv_without_stats_is_always_compacted():
    cfg = OptimizeConfig(min_file_size=10, max_file_size=1000, max_deleted_rows_ratio=0.05)
    dv6 = DeletionVector("u", "x", 10, 6)
    dv5 = DeletionVector("u", "x", 10, 5)
    # numRecords counts every row of the file, deleted ones included (PROTOCOL.md, delta-spark's numPhysicalRecords)
    assert should_compact(AddFile("a", {}, 500, 0, stats='{"numRecords": 100}', deletion_vector=dv6), cfg)  # 6/100
    assert not should_compact(AddFile("a", {}, 500, 0, stats='{"numRecords": 100}', deletion_vector=dv5), cfg)  # 5/100
    assert should_compact(AddFile("a", {}, 500, 0, deletion_vector=dv5), cfg)


def test_lone_file_with_many_deleted_rows_is_rewritten_alone():
    """delta-io/delta#5781: delta-spark drops the one-file bin; a lone file 60% deleted is rewritten here."""
    cfg = OptimizeConfig(min_file_size=10, max_file_size=1000, max_deleted_rows_ratio=0.05)
    heavy = AddFile("big", {}, 500, 0, stats='{"numRecords": 10}', deletion_vector=DeletionVector("u", "x", 10, 6))
    light = AddFile("ok", {}, 500, 0, stats='{"numRecords": 100}', deletion_vector=DeletionVector("u", "y", 10, 5))
    small = AddFile("small", {}, 5, 0, stats='{"numRecords": 100}', deletion_vector=DeletionVector("u", "z", 10, 1))
    for files, expected in (([heavy], [["big"]]), ([light], []), ([small], []), ([heavy, light], [["big"]])):
        plan = plan_optimize(files, [], cfg, read_version=1)
        assert [[f.path for f in b.files] for b in plan.bins] == expected
    purge = OptimizeConfig(min_file_size=0, max_file_size=1000, max_deleted_rows_ratio=0.0)
    plan = plan_optimize([heavy, light, small, fp("clean", 5, "1")], [], purge, read_version=1)
    assert sorted(f.path for b in plan.bins for f in b.files) == ["big", "ok", "small"]


def test_plan_groups_by_partition_and_respects_matched_partitions():
    files = [fp(f"{p}/{i}", 10 + i, p) for p in ("0", "1", "2") for i in range(3)] + [fp("3/only", 5, "3")]
    cfg = OptimizeConfig(min_file_size=1000, max_file_size=1000)
    plan = plan_optimize(files, ["p"], cfg, read_version=7)
    assert sorted(b.partition_values["p"] for b in plan.bins) == ["0", "1", "2"]  # "3" has one file
    assert len(plan.considered_files) == 10 and plan.read_version == 7
    only1 = plan_optimize(files, ["p"], cfg, read_version=7, matched_partitions=[("1",)])
    assert [b.partition_values["p"] for b in only1.bins] == ["1"]
    assert len(only1.considered_files) == 3


def test_null_and_empty_string_partitions_group_together():
    files = [fp("a", 1, ""), AddFile("b", {"p": None}, 2, 0), fp("c", 3, "x")]
    plan = plan_optimize(files, ["p"], OptimizeConfig(), read_version=0)
    assert len(plan.bins) == 1 and {x.path for x in plan.bins[0].files} == {"a", "b"}


def test_normalizer_merges_differently_formatted_equal_values():
    files = [fp("a", 1, "2024-01-01 00:00:00"), fp("b", 2, "2024-01-01T00:00:00.000000Z")]
    same = {("2024-01-01 00:00:00",): "T0", ("2024-01-01T00:00:00.000000Z",): "T0"}
    plan = plan_optimize(files, ["p"], OptimizeConfig(), read_version=0, normalize=lambda k: same[k])
    assert len(plan.bins) == 1 and len(plan.bins[0].files) == 2
    assert len(plan_optimize(files, ["p"], OptimizeConfig(), read_version=0).bins) == 0


def test_batching_matches_delta_spark():
    bins = [Bin({"p": str(i)}, (fp(f"{i}a", s, str(i)), fp(f"{i}b", s, str(i)))) for i, s in enumerate([5, 1, 3, 10])]
    assert [len(b) for b in bin_pack_by_size(bins, 1)] == [1, 1, 1, 1]
    assert [len(b) for b in bin_pack_by_size(bins, 10**9)] == [4]
    # sizes 2,6,10,20 with batch 8: [2,6] -> 8 >= 8 closes; [10] alone (> 8); [20]
    assert [[b.size for b in batch] for batch in bin_pack_by_size(bins, 8)] == [[2, 6], [10], [20]]


def test_num_batches_semantics():
    files = [fp("a", 1, "1"), fp("b", 1, "1")]
    none = plan_optimize([], ["p"], OptimizeConfig(), read_version=0)
    assert none.is_noop and len(none.batches) == 1  # delta-spark: numBatches 1 without batching
    batched = plan_optimize([], ["p"], OptimizeConfig(batch_size=1), read_version=0)
    assert len(batched.batches) == 0
    assert len(plan_optimize(files, ["p"], OptimizeConfig(batch_size=1), read_version=0).batches) == 1


def test_skip_partition_hook_reports_skipped():
    files = [fp("a", 1, "1"), fp("b", 1, "1"), fp("c", 1, "2"), fp("d", 1, "2")]
    plan = plan_optimize(
        files, ["p"], OptimizeConfig(), read_version=0, mode="zorder", skip_partition=lambda fs: fs[0].path == "a"
    )
    assert [b.partition_values["p"] for b in plan.bins] == ["2"]
    assert [dict(p) for p in plan.skipped_partitions] == [{"p": "1"}]


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


def test_plan_to_dict_summary():
    files = [fp("p=1/a", 1, "1"), fp("p=1/b", 2, "1")]
    d = plan_optimize(files, ["p"], OptimizeConfig(), read_version=3).to_dict()
    assert (
        d["numBins"] == 1
        and d["filesToRewrite"] == 2
        and d["bytesToRewrite"] == 3
        and d["bins"][0]["paths"] == ["p=1/a", "p=1/b"]
    )
