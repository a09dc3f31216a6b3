"""VACUUM's pure planning (plan/vacuum.py): delta-spark's rules, in milliseconds, no Spark."""

from __future__ import annotations

import pytest

from dbt_delta_optimize.delta.file_info import Listed
from dbt_delta_optimize.delta.vacuum_log import LogFile, dv_relative_path
from dbt_delta_optimize.plan.vacuum import (
    HOUR_MS,
    LITE_REFUSAL,
    active_commit_at,
    active_ict_commit,
    is_hidden,
    lite_range,
    parse_interval_ms,
    parse_retain_ms,
    plan_lite,
    plan_vacuum,
    protected_paths,
    relative_path,
    retention_problem,
)

ROOT = "/data/t"
NOW = 1_000 * HOUR_MS


def _plan(listing, live=(), dead=(), before=NOW, columns=("p",)):
    protected = protected_paths(ROOT, live, dead, before)
    return plan_vacuum(
        ROOT,
        listing,
        protected=protected,
        delete_before=before,
        partition_columns=columns,
        tombstone_paths=[t.path for t in dead if t.deletion_timestamp < before],
    )


def test_hidden_names_follow_is_hidden_directory():
    assert is_hidden("_delta_log", ["p"])
    assert is_hidden(".part-0.crc", ["p"])
    assert is_hidden("_tmp", ["p"])
    assert not is_hidden("_change_data", ["p"])
    assert not is_hidden("_delta_index", ["p"])
    assert not is_hidden("_p=1", ["_p"])
    assert is_hidden("_p=1", ["p"])
    assert not is_hidden("p=1", ["p"])
    assert is_hidden("metadata", [], iceberg=True) and not is_hidden("metadata", [])


def test_full_plan_deletes_old_unneeded_files_and_keeps_the_rest():
    old, young = NOW - 10 * HOUR_MS, NOW + 1
    listing = [
        Listed("p=1", 0, old, True),
        Listed("p=1/live.parquet", 10, old),
        Listed("p=1/gone.parquet", 20, old),  # expired tombstone
        Listed("p=1/kept.parquet", 30, old),  # tombstone inside the retention
        Listed("p=1/orphan.parquet", 40, old),
        Listed("p=1/young.parquet", 50, young),
        Listed("p=2", 0, old, True),
        Listed("p=2/gone2.parquet", 5, old),
        Listed("_delta_log/00000000000000000000.json", 1, old),
        Listed("_tmp/x", 1, old),
        Listed(".hidden", 1, old),
        Listed("p=1/.x.crc", 1, old),
        Listed("_change_data/cdc-1.c000.snappy.parquet", 7, old),
        Listed("deletion_vector_11111111-1111-1111-1111-111111111111.bin", 3, old),
        Listed("deletion_vector_22222222-2222-2222-2222-222222222222.bin", 3, old),
    ]
    live = [LogFile("p%3D1/live.parquet", dv_path="deletion_vector_22222222-2222-2222-2222-222222222222.bin")]
    dead = [
        LogFile("p=1/gone.parquet", 20, NOW - 5 * HOUR_MS),
        LogFile("p=2/gone2.parquet", 5, NOW - 5 * HOUR_MS),
        LogFile("p=1/kept.parquet", 30, NOW),
    ]
    plan = _plan(listing, live, dead)
    got = {c.path: c.reason for c in plan.files}
    assert got == {
        "p=1/gone.parquet": "expired tombstone",
        "p=2/gone2.parquet": "expired tombstone",
        "p=1/orphan.parquet": "untracked file",
        "_change_data/cdc-1.c000.snappy.parquet": "change data",
        "deletion_vector_11111111-1111-1111-1111-111111111111.bin": "unused deletion vector",
    }
    assert plan.bytes == 20 + 5 + 40 + 7 + 3
    assert set(plan.folders) == {"p=2", "_change_data"}  # p=1 keeps live, kept and young files
    assert "_delta_log/00000000000000000000.json" not in got


def test_a_tombstone_inside_the_retention_keeps_its_dv():
    dv = "ab/deletion_vector_33333333-3333-3333-3333-333333333333.bin"
    listing = [Listed(dv, 3, 0), Listed("f.parquet", 3, 0)]
    dead = [LogFile("f.parquet", 3, NOW, dv_path=dv)]
    assert _plan(listing, (), dead).files == ()
    dead = [LogFile("f.parquet", 3, NOW - 1, dv_path=dv)]
    assert {c.path for c in _plan(listing, (), dead).files} == {dv, "f.parquet"}


def test_relative_paths_fast_path_equals_decoding_and_normalising():
    """``relative_path`` skips decoding and normalising for plain paths: the same answer on hostile ones."""
    import posixpath
    import random
    from urllib.parse import unquote

    from dbt_delta_optimize.plan import vacuum as plan

    rng = random.Random(7)
    alphabet = ["a", "b", "=", "/", ".", "%", "2", "F", "3", "D", ":", " ", "_", "-"]
    paths = ["p=1/a.parquet", "a.", ".a", "a/.", "./a", "a//b", "../a", "p%3D1/a", "x:y", "/a", "a/", "."]
    paths += ["".join(rng.choice(alphabet) for _ in range(rng.randint(1, 12))) for _ in range(20_000)]
    plain = 0
    for p in paths:
        slow = None if plan.is_absolute(p) else posixpath.normpath(unquote(p))
        if slow is not None:
            assert plan.relative_path(p, ROOT) == slow, p
        plain += plan._plain(p)
        assert not plan._plain(p) or slow == p, p
    assert plain > 1_000  # the fast path is taken (and checked) often


def test_absolute_log_paths_are_relativized_and_outside_ones_ignored():
    assert relative_path("file:/data/t/p%3D1/a.parquet", ROOT) == "p=1/a.parquet"
    assert relative_path("file:///data/t/a.parquet", ROOT) == "a.parquet"
    assert relative_path("/data/other/a.parquet", ROOT) is None
    assert relative_path("s3://b/t/x/a.parquet", "s3a://b/t") == "x/a.parquet"
    assert relative_path("s3://c/t/a.parquet", "s3://b/t") is None
    listing = [Listed("a.parquet", 1, 0)]
    assert _plan(listing, [LogFile("file:/data/t/a.parquet")]).files == ()


def test_uuid_relative_dv_path_per_protocol():
    # PROTOCOL.md's example: prefix "ab", z85 of the UUID d2c639aa-8816-431a-aaf6-d3fe2512ff61
    dv = {"storageType": "u", "pathOrInlineDv": "ab^-aqEH.-t@S}K{vb[*k^", "sizeInBytes": 4}
    assert dv_relative_path(dv) == "ab/deletion_vector_d2c639aa-8816-431a-aaf6-d3fe2512ff61.bin"
    assert dv_relative_path({"storageType": "i", "pathOrInlineDv": "x"}) is None
    assert dv_relative_path({"storageType": "p", "pathOrInlineDv": "s3://b/dv.bin"}) is None


def test_lite_plan_reads_removes_and_change_data_only():
    files = [
        LogFile("a.parquet", 1, NOW - 1, dv_path="deletion_vector_11111111-1111-1111-1111-111111111111.bin", dv_size=2),
        LogFile("b.parquet", 1, NOW),  # inside the retention
        LogFile("c.parquet", 1, NOW - 1),  # live again
        LogFile("_change_data/x.parquet", 4, 0),
    ]
    protected = protected_paths(ROOT, [LogFile("c.parquet")], [], NOW)
    plan = plan_lite(ROOT, files, protected=protected, delete_before=NOW, start=0, end=3)
    assert {(c.path, c.reason) for c in plan.files} == {
        ("a.parquet", "expired tombstone"),
        ("deletion_vector_11111111-1111-1111-1111-111111111111.bin", "unused deletion vector"),
        ("_change_data/x.parquet", "change data"),
    }


def test_lite_range_as_delta_spark_and_refusal_after_a_pruned_log():
    assert lite_range(earliest=0, snapshot_version=9, outside=None, last_vacuum=None) is None
    assert lite_range(earliest=0, snapshot_version=9, outside=5, last_vacuum=None) == (0, 5)
    assert lite_range(earliest=0, snapshot_version=9, outside=5, last_vacuum=5) is None
    assert lite_range(earliest=3, snapshot_version=9, outside=7, last_vacuum=4) == (5, 7)
    with pytest.raises(ValueError, match="Please run VACUUM FULL"):
        lite_range(earliest=3, snapshot_version=9, outside=7, last_vacuum=None)
    with pytest.raises(ValueError, match="Please run VACUUM FULL"):
        lite_range(earliest=3, snapshot_version=9, outside=7, last_vacuum=2)
    assert "VACUUM FULL" in LITE_REFUSAL


def test_active_commit_monotonizes_timestamps():
    commits = [(0, 100), (1, 90), (2, 300)]  # version 1's clock went back: it counts as 101
    assert active_commit_at(commits, 99) is None
    assert active_commit_at(commits, 100) == 0
    assert active_commit_at(commits, 101) == 1
    assert active_commit_at(commits, 10_000) == 2


def test_in_commit_timestamps_are_searched_not_read_one_by_one():
    """The binary search finds what the linear scan finds, on growing timestamps with gaps in the versions,
    and reads about log2(n) commits."""
    import math
    import random

    rng = random.Random(7)
    for _ in range(300):
        n = rng.randint(1, 400)
        versions = sorted(rng.sample(range(5 * n), n))
        times = sorted(rng.sample(range(10 * n), n))  # strictly growing, as in-commit timestamps are
        ict = dict(zip(versions, times))
        read: list[int] = []

        def ict_of(v: int, _ict: dict[int, int] = ict, _read: list[int] = read) -> int:
            _read.append(v)
            return _ict[v]

        for t in (rng.randint(-5, 10 * n + 5), times[0] - 1, times[-1], times[rng.randrange(n)]):
            read.clear()
            assert active_ict_commit(versions, t, ict_of) == active_commit_at(list(ict.items()), t)
            assert len(read) <= math.ceil(math.log2(n)) + 2
    assert active_ict_commit([], 5, lambda v: 0) is None


def test_durations_and_the_retention_check():
    assert parse_interval_ms("interval 7 days") == 168 * HOUR_MS
    assert parse_interval_ms("interval 1 week") == 168 * HOUR_MS
    assert parse_interval_ms("interval 2 hours 30 minutes") == 150 * 60 * 1000
    assert parse_retain_ms("168h") == parse_retain_ms("7d") == parse_retain_ms(168) == 168 * HOUR_MS
    assert parse_retain_ms("0h") == parse_retain_ms("0") == 0
    assert parse_retain_ms("2 hours") == 2 * HOUR_MS
    with pytest.raises(ValueError, match="less than 0 hours"):
        parse_retain_ms("-1h")
    with pytest.raises(ValueError):
        parse_retain_ms("soon")
    week = 168 * HOUR_MS
    assert retention_problem(None, week, allow_short=False) is None
    assert retention_problem(week, week, allow_short=False) is None
    assert retention_problem(0, week, allow_short=True) is None
    problem = retention_problem(HOUR_MS, week, allow_short=False)
    assert problem is not None and "--allow-short-retention" in problem and "168h" in problem
