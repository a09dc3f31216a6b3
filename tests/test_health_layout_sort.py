"""The health layout's sorting and per-partition counts, made faster, equal the plain forms they replaced."""

from __future__ import annotations

import random

import numpy as np
import pytest

from dbt_delta_optimize.inspect.health import _add_rewrite_counts, _label, _Sorted


@pytest.mark.parametrize("partitions", [1, 7, 40_000])  # 40,000: codes beyond 16 bits, no radix sort
def test_sorted_equals_lexsort(partitions):
    rng = np.random.default_rng(partitions)
    codes = rng.integers(0, partitions, 5_000).astype(np.int32)
    sizes = rng.integers(0, 50, 5_000).astype(np.int64)  # many ties
    order = np.lexsort((sizes, codes))
    s = _Sorted(codes, sizes)
    assert (s.codes == codes[order]).all() and (s.sizes == sizes[order]).all()
    assert list(s.starts) == [0, *(np.flatnonzero(np.diff(codes[order])) + 1)]
    whole = _Sorted(None, sizes)
    assert (whole.sizes == np.sort(sizes)).all() and list(whole.starts) == [0] and list(whole.ends) == [len(sizes)]


def test_rewrite_counts_per_partition_equal_a_label_per_bin():
    rng = random.Random(3)
    cols = ["a", "b"]
    values = [{"a": rng.choice(["x", "y", None]), "b": rng.choice(["1", "2", None])} for _ in range(500)]
    bins = [{"partitionValues": v, "files": rng.randint(1, 9), "bytes": 1} for v in values]
    labels = sorted({_label(cols, [v.get(c) for c in cols]) for v in values} | {"a=z, b=9"})
    layout = {"partitionColumns": cols, "partitions": [{"partition": p} for p in labels]}
    _add_rewrite_counts(layout, {"bins": bins})
    expected: dict[str, int] = {}
    for b in bins:
        label = _label(cols, [b["partitionValues"].get(c) for c in cols])
        expected[label] = expected.get(label, 0) + b["files"]
    assert {p["partition"]: p["filesToRewrite"] for p in layout["partitions"]} == {
        p: expected.get(p, 0) for p in labels
    }
    assert layout["partitions"][labels.index("a=z, b=9")]["filesToRewrite"] == 0


@pytest.mark.parametrize("tagged", [None, 5, 101])  # none, a checkpointed file, a file of the later commit
def test_untagged_tables_are_known_from_the_checkpoint_statistics(tmp_path, tagged):
    """``FileTable.no_map_entries`` says a table has no tags without reading them, and only when none has one."""
    from dbt_delta_optimize.delta.snapshot import load_snapshot
    from dbt_delta_optimize.inspect.health import _tagged
    from dbt_delta_optimize.plan.curve import COLUMNS_TAG
    from tests.test_health_stats_arrow import _checkpointed_log, _stats

    root = str(tmp_path / "t")
    tags = {} if tagged is None else {tagged: {COLUMNS_TAG: '["id"]'}}
    _checkpointed_log(root, [_stats()] * 12, tags)
    table = load_snapshot(root).file_table
    assert table.lazy is not None and "tags" not in table.adds.type.names
    assert table.no_map_entries("tags") is (tagged is None)
    codes = np.zeros(len(table), np.int64)
    assert sum(len(v) for v in _tagged(load_snapshot(root), codes).values()) == (0 if tagged is None else 1)


def test_to_dict_without_copies_is_the_same_json_and_leaves_the_report_alone():
    from dbt_delta_optimize.inspect.health_report import HealthReport, Thresholds, Verdict

    bins = [{"partitionValues": {"p": "a"}, "files": 2, "bytes": 3}]
    report = HealthReport(
        table="/t",
        version=1,
        generated_at="now",
        layout={"table": "/t", "partitions": [{"partition": "p=a", "histogram": [{"files": 2}]}]},
        thresholds=Thresholds(1, 2, 3, 4, 5, {"optimizeMinFileSize": "default"}),
        verdict=Verdict("healthy", "fine"),
        protocol={"readerFeatures": []},
        auto_compact_enabled=False,
        last_optimize=None,
        optimize={"numBins": 1, "bins": bins},
        auto_compact={"status": "skip"},
        vacuum={"reclaimableFiles": 0},
    )
    shared, copied = report.to_dict(copy=False), report.to_dict()
    assert shared == copied and shared["optimize"]["bins"] is bins and copied["optimize"]["bins"] is not bins
    shared["extra"] = 1  # the top level is the caller's own
    assert "extra" not in report.layout and set(report.to_dict()) == set(copied)
