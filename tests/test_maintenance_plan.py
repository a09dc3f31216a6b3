"""Maintenance scoring and ranking from hand-made snapshots and log facts: pure, no Spark, milliseconds."""

from __future__ import annotations

import json

import pytest

from dbt_delta_optimize.delta.actions import AddFile, DeletionVector, Metadata, Protocol
from dbt_delta_optimize.delta.snapshot import Snapshot
from dbt_delta_optimize.plan.cluster_overlap import cluster_overlap
from dbt_delta_optimize.plan.config import OptimizeConfig
from dbt_delta_optimize.plan.maintenance import (
    Calibration,
    CommitSummary,
    LogFacts,
    MaintenanceConfig,
    Tombstone,
    estimate_table,
    indexed_columns,
    parse_interval,
    retention_ms,
)
from dbt_delta_optimize.plan.maintenance_queue import calibration_factors, queue_of, table_cap

DAY = 86_400_000
NOW = 100 * DAY
MB = 1024 * 1024


def _stats(n=10, cols=("id", "v"), lo=0, hi=9):
    return json.dumps(
        {
            "numRecords": n,
            "minValues": {c: lo for c in cols},
            "maxValues": {c: hi for c in cols},
            "nullCount": {c: 0 for c in cols},
        }
    )


def _file(name, size=1000, stats="default", part=None, dv=None, tags=None):
    return AddFile(
        name,
        part or {},
        size,
        0,
        stats=_stats() if stats == "default" else stats,
        deletion_vector=dv,
        tags=tags or {},
    )


def _snap(files, *, columns=(), conf=None, location="/t/x", version=5):
    fields = [{"name": c, "type": "long", "nullable": True, "metadata": {}} for c in ("id", "v")]
    fields += [{"name": c, "type": "string", "nullable": True, "metadata": {}} for c in columns]
    schema = json.dumps({"type": "struct", "fields": fields})
    return Snapshot(location, version, Protocol(1, 2), Metadata("id", schema, tuple(columns), conf or {}), tuple(files))


def _facts(tombstones=(), commits=(), now=NOW):
    return LogFacts(now, tuple(tombstones), tuple(commits))


def _est(name, snap, facts=None, **kw):
    return estimate_table(name, snap, facts or _facts(), **kw)


def test_compact_table_has_no_action_and_scores_zero():
    s = _est("c", _snap([_file("a", 2 * 1024**3)]))
    assert s.actions == () and s.score == 0.0
    assert s.reason.startswith("nothing to do")
    assert s.health["statsCoverage"] == 1.0 and s.health["smallFiles"] == 0


def test_compaction_uses_optimizes_bins_and_more_small_files_rank_first():
    a = _est("a", _snap([_file(f"f{i:03d}") for i in range(160)]))
    b = _est("b", _snap([_file(f"f{i:03d}") for i in range(10)]))
    (opt,) = a.actions
    assert opt.action == "optimize"
    assert opt.benefit["smallFiles"] == 160 and opt.benefit["filesRemoved"] == 159
    assert opt.benefit["bytesRewritten"] == 160_000 and opt.bytes_read == 160_000
    assert [e.score.table for e in queue_of([b, a])] == ["a", "b"]
    assert a.score > b.score > 0


def test_small_files_are_counted_per_partition_with_the_optimize_threshold():
    files = [_file(f"p=1/f{i}", part={"p": "1"}) for i in range(3)] + [_file("p=2/f0", part={"p": "2"})]
    (opt,) = _est("t", _snap(files, columns=("p",))).actions
    # p=2 has one file: a one-file bin is not rewritten (OPTIMIZE's rule)
    assert opt.benefit["smallFilesPerPartition"] == {"p=1": 3}
    # with a lower minFileSize nothing is small
    s = _est("t", _snap(files, columns=("p",)), optimize_config=OptimizeConfig(min_file_size=500))
    assert s.actions == ()


def test_purge_from_deletion_vector_cardinality():
    dv = DeletionVector("u", "abc", 10, cardinality=5)
    s = _est("t", _snap([_file("a", 2 * 1024**3, dv=dv), _file("b", 2 * 1024**3)]))
    (purge,) = s.actions
    assert purge.action == "purge" and purge.benefit["deletedRowRatio"] == 0.5
    assert purge.benefit["deletedRows"] == 5 and purge.bytes_read == 2 * 1024**3
    few = DeletionVector("u", "abc", 10, cardinality=1)
    many = _snap([_file("a", 2 * 1024**3, stats=_stats(n=1000), dv=few)])
    assert _est("t", many).actions == ()  # 0.1% deleted: under min_purge_ratio


def test_vacuum_counts_only_tombstones_past_the_tables_retention():
    snap = _snap([_file("live", 2 * 1024**3)], conf={"delta.deletedFileRetentionDuration": "interval 2 days"})
    facts = _facts(
        [
            Tombstone("old", 500, NOW - 3 * DAY),
            Tombstone("old", 500, NOW - 3 * DAY),  # the same path twice (checkpoint and commit)
            Tombstone("young", 700, NOW - 1 * DAY),
            Tombstone("live", 900, NOW - 9 * DAY),  # re-added since: not reclaimable
        ]
    )
    (vac,) = _est("e", snap, facts).actions
    assert vac.action == "vacuum" and vac.benefit == {"reclaimableFiles": 1, "reclaimableBytes": 500}
    # a logged VACUUM at NOW - 0.5 day deleted everything older than its own horizon (NOW - 2.5 days)
    done = _facts(facts.tombstones, [CommitSummary(9, NOW - DAY // 2, "VACUUM END")])
    assert _est("e", snap, done).actions == ()
    # a VACUUM ... RETAIN 0 HOURS two days before (its START records the retention it ran with) deleted them
    # all, though its time less the table's retention would not reach them
    start = CommitSummary(8, NOW - 2 * DAY, "VACUUM START", vacuum_cutoff_ms=NOW - 2 * DAY)
    zero = _facts(facts.tombstones, [CommitSummary(9, NOW - 2 * DAY + 5, "VACUUM END"), start])
    assert _est("e", snap, zero).actions == ()
    assert _est("e", snap, _facts(facts.tombstones, [CommitSummary(9, NOW - 2 * DAY, "VACUUM END")])).actions
    # default retention (7 days): nothing past it
    assert _est("e", _snap([_file("live", 2 * 1024**3)]), facts).actions == ()


def test_analyze_for_files_without_statistics_or_missing_indexed_columns():
    files = [
        _file("a", 2 * 1024**3, stats=None),
        _file("b", 2 * 1024**3, stats=json.dumps({"numRecords": 3})),
        _file("c", 2 * 1024**3),
    ]
    (an,) = _est("f", _snap(files)).actions
    assert an.action == "analyze"
    assert an.benefit == {"filesWithoutStats": 1, "filesWithPartialStats": 1, "statsCoverage": pytest.approx(0.3333)}
    snap = _snap(files[2:], conf={"delta.dataSkippingNumIndexedCols": "1"})
    assert indexed_columns(snap) == ["id"] and _est("f", snap).actions == ()
    named = _snap(files[1:], conf={"delta.dataSkippingStatsColumns": "v"})
    assert indexed_columns(named) == ["v"]


def test_cluster_overlap_from_min_max_ranges():
    disjoint = [_stats(lo=i * 10, hi=i * 10 + 9) for i in range(4)]
    same = [_stats(lo=0, hi=99) for _ in range(4)]
    snap = _snap([])
    assert cluster_overlap(snap, ["id"], disjoint) == 1.0
    assert cluster_overlap(snap, ["id"], same) == 4.0
    tag = {"dbt_delta_optimize.clusteredBy": '["id"]'}
    big = 2 * 1024**3
    overlapping = _snap([_file(f"f{i}", big, stats=same[i], tags=tag) for i in range(4)])
    # files are large (no compaction) but their clustered ranges overlap: nothing to compact, reported
    s = _est("z", overlapping)
    assert s.health["clusterOverlap"] == 4.0 and s.actions == ()
    small = _snap([_file(f"f{i}", 100, stats=same[i], tags=tag) for i in range(4)])
    (opt,) = _est("z", small).actions
    assert opt.benefit["clusteredBy"] == ["id"] and opt.benefit["clusterOverlap"] == 4.0
    assert "overlap 4.0x" in opt.reason


def test_aging_lifts_a_table_that_waited_and_ties_break_by_name():
    files = [_file(f"f{i}") for i in range(10)]
    fresh = _facts(commits=[CommitSummary(3, NOW - DAY, "OPTIMIZE")])
    old = _facts(commits=[CommitSummary(3, NOW - 30 * DAY, "OPTIMIZE")])
    s_fresh, s_old = _est("a", _snap(files), fresh), _est("b", _snap(files), old)
    assert s_old.score > s_fresh.score and s_old.waited_days == pytest.approx(30)
    # a smaller table that waited long enough overtakes a bigger fresh one
    big = _est("big", _snap([_file(f"f{i}") for i in range(40)]), fresh)
    assert queue_of([big, s_old])[0].score.table == "b"
    twins = [_est(n, _snap(files), fresh) for n in ("m", "k", "z")]
    assert [e.score.table for e in queue_of(twins)] == ["k", "m", "z"]
    assert [e.rank for e in queue_of(reversed(twins))] == [1, 2, 3]


def test_same_inputs_same_order():
    tables = [_est(f"t{i}", _snap([_file(f"f{j}") for j in range(i % 7 + 2)])) for i in range(20)]
    first = [e.score.table for e in queue_of(tables)]
    assert first == [e.score.table for e in queue_of(list(reversed(tables)))]


def test_cost_is_calibrated_by_the_log_or_a_previous_run():
    files = [_file(f"f{i}", 10 * MB) for i in range(10)]
    (d,) = _est("t", _snap(files)).actions
    assert d.calibration == "default"
    timed = CommitSummary(2, NOW - DAY, "OPTIMIZE", bytes_read=100 * MB, bytes_written=100 * MB, duration_ms=1000)
    (logged,) = _est("t", _snap(files), _facts(commits=[timed])).actions
    assert logged.calibration == "log" and logged.seconds < d.seconds  # 200 MB/s observed, faster than defaults
    (cal,) = _est("t", _snap(files), calibration=Calibration({"optimize": 2.0})).actions
    assert cal.calibration == "previous run" and cal.seconds == pytest.approx(2 * cal.raw_seconds)
    previous = {
        "tables": [
            {"table": "t", "ran": [{"action": "optimize", "status": "done", "predictedRawSeconds": 4, "seconds": 8}]},
            {"table": "u", "ran": [{"action": "optimize", "status": "done", "predictedRawSeconds": 4, "seconds": 2}]},
            {"table": "v", "ran": [{"action": "vacuum", "status": "failed", "predictedRawSeconds": 4, "seconds": 1}]},
        ]
    }
    assert calibration_factors(previous, "t") == {"optimize": 2.0}
    assert calibration_factors(previous, "new") == {"optimize": 1.25}  # the median of every table's
    assert calibration_factors(None, "t") == {}


def test_only_restricts_the_actions_and_the_cap_is_a_share_of_the_budget():
    files = [_file(f"f{i}", stats=None) for i in range(5)]
    assert [a.action for a in _est("t", _snap(files)).actions] == ["optimize", "analyze"]
    assert [a.action for a in _est("t", _snap(files), only=["analyze"]).actions] == ["analyze"]
    assert table_cap(None) is None and table_cap(100.0) == 50.0
    assert table_cap(100.0, MaintenanceConfig(table_share=0.25)) == 25.0


@pytest.mark.parametrize(
    ("text", "ms"),
    [
        ("interval 1 weeks", 7 * DAY),
        ("interval 7 days", 7 * DAY),
        ("168 hours", 7 * DAY),
        ("interval 0 seconds", 0),
        ("interval 1 day 2 hours", DAY + 2 * 3_600_000),
        ("forever", None),
        ("interval x days", None),
    ],
)
def test_retention_intervals(text, ms):
    assert parse_interval(text) == ms


def test_retention_default_is_a_week():
    assert retention_ms({}) == 7 * DAY
    assert retention_ms({"delta.deletedFileRetentionDuration": "nonsense"}) == 7 * DAY
