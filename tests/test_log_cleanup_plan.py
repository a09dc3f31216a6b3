"""The log cleanup planner (plan/log_cleanup.py): delta-spark's MetadataCleanup rules, without a store."""

from __future__ import annotations

import pytest

from dbt_delta_optimize.delta.file_info import Listed
from dbt_delta_optimize.errors import CorruptLogError
from dbt_delta_optimize.plan.log_cleanup import (
    log_cutoff_ms,
    parse_log_name,
    plan_log_cleanup,
    plan_sidecar_cleanup,
    sidecar_checkpoints,
)
from dbt_delta_optimize.plan.vacuum import DAY_MS

NOW = 100 * DAY_MS + 15 * 3600 * 1000  # day 100, 15:00 UTC
OLD = 10 * DAY_MS  # far before any cutoff
CONF = {"delta.logRetentionDuration": "interval 30 days"}


def v(n: int, ext: str = "json") -> str:
    return f"{n:020d}.{ext}"


def log(versions: range, checkpoints: dict[int, list[str]], *, t0: int = OLD, crc: bool = True) -> list[Listed]:
    """A listing: commit (and crc) per version, checkpoint files at some; mtimes increase with the version."""
    out = []
    for n in versions:
        t = t0 + n * 1000
        out.append(Listed(v(n), 10, t))
        if crc:
            out.append(Listed(v(n, "crc"), 1, t))
        out.extend(Listed(name, 100, t + 500) for name in checkpoints.get(n, []))
    return sorted(out, key=lambda f: f.path)


def names(files: tuple[Listed, ...]) -> set[str]:
    return {f.path for f in files}


def test_cutoff_is_truncated_to_midnight_utc() -> None:
    assert log_cutoff_ms(NOW, 30 * DAY_MS) == 70 * DAY_MS
    assert log_cutoff_ms(70 * DAY_MS, 0) == 70 * DAY_MS


def test_groups_before_kept_checkpoint_go_and_newest_checkpoint_stays() -> None:
    ck = {n: [v(n, "checkpoint.parquet")] for n in (10, 20, 30)}
    listing = log(range(0, 35), ck)
    plan = plan_log_cleanup(listing, last_checkpoint=30, configuration=CONF, now_ms=NOW)
    # everything below 30 (commits, crcs, checkpoints 10 and 20) goes; checkpoint 30 and its commit stay
    assert names(plan.delete) == {f.path for f in listing if parse_log_name(f.path).version < 30}  # type: ignore[union-attr]
    assert plan.oldest_kept_checkpoint == 30 and plan.deletes_checkpoint
    assert plan.bytes == sum(f.size for f in plan.delete)


def test_young_group_keeps_it_and_everything_after() -> None:
    ck = {n: [v(n, "checkpoint.parquet")] for n in (10, 20)}
    listing = [
        f if parse_log_name(f.path).version < 10 else Listed(f.path, f.size, NOW - DAY_MS)  # type: ignore[union-attr]
        for f in log(range(0, 25), ck)
    ]
    plan = plan_log_cleanup(listing, last_checkpoint=20, configuration=CONF, now_ms=NOW)
    assert names(plan.delete) == {v(n) for n in range(10)} | {v(n, "crc") for n in range(10)}
    assert plan.oldest_kept_checkpoint == 10
    # a longer retention keeps everything
    keep = plan_log_cleanup(
        listing, last_checkpoint=20, configuration={"delta.logRetentionDuration": "interval 1000 days"}, now_ms=NOW
    )
    assert keep.delete == ()


def test_no_checkpoint_or_last_checkpoint_deletes_nothing() -> None:
    assert plan_log_cleanup(log(range(0, 5), {}), last_checkpoint=None, configuration=CONF, now_ms=NOW).delete == ()
    # _last_checkpoint names 10: only files below 10 can go, the group up to checkpoint 20 stays
    ck = {n: [v(n, "checkpoint.parquet")] for n in (10, 20)}
    plan = plan_log_cleanup(log(range(0, 25), ck), last_checkpoint=10, configuration=CONF, now_ms=NOW)
    assert max(parse_log_name(f.path).version for f in plan.delete) == 9  # type: ignore[union-attr]


def test_multi_part_checkpoint_counts_only_when_complete() -> None:
    parts = [f"{10:020d}.checkpoint.{i:010d}.{2:010d}.parquet" for i in (1, 2)]
    ck = {10: parts, 20: [v(20, "checkpoint.parquet")]}
    plan = plan_log_cleanup(log(range(0, 25), ck), last_checkpoint=20, configuration=CONF, now_ms=NOW)
    assert set(parts) <= names(plan.delete)
    # one part missing: checkpoint 10 is no boundary, so 0..19 go as one group ending before checkpoint 20;
    # the lone part is never buffered, so it stays (as in delta-spark)
    half = [f for f in log(range(0, 25), ck) if f.path != parts[1]]
    plan = plan_log_cleanup(half, last_checkpoint=20, configuration=CONF, now_ms=NOW)
    assert v(19) in names(plan.delete) and v(20) not in names(plan.delete) and parts[0] not in names(plan.delete)
    # the only checkpoint named by _last_checkpoint is incomplete: refused
    with pytest.raises(CorruptLogError, match="no complete checkpoint"):
        plan_log_cleanup(half, last_checkpoint=10, configuration=CONF, now_ms=NOW)


def test_v2_checkpoints_and_unreferenced_sidecars() -> None:
    v2 = {n: [f"{n:020d}.checkpoint.{n:08d}-uuid.json"] for n in (10, 20)}
    listing = log(range(0, 25), v2)
    plan = plan_log_cleanup(listing, last_checkpoint=20, configuration=CONF, now_ms=NOW)
    assert v2[10][0] in names(plan.delete) and v2[20][0] not in names(plan.delete)
    assert sidecar_checkpoints(listing, plan) == (v2[20][0],)
    sidecars = [Listed("a.parquet", 5, OLD), Listed("b.parquet", 5, OLD), Listed("c.parquet", 5, NOW)]
    gone = plan_sidecar_cleanup(sidecars, {"b.parquet"}, plan.cutoff_ms)
    assert names(gone) == {"a.parquet"}  # b is referenced, c is young (maybe a checkpoint being written)


def test_compacted_files_before_kept_checkpoint_go_others_stay_and_others_ignored() -> None:
    ck = {n: [v(n, "checkpoint.parquet")] for n in (10, 20)}
    extra = [
        Listed(f"{0:020d}.{9:020d}.compacted.json", 7, OLD),
        Listed(f"{15:020d}.{25:020d}.compacted.json", 7, OLD),
        Listed("_last_checkpoint", 3, OLD),
        Listed("00000000000000000003.json.tmp", 3, OLD),
    ]
    listing = sorted(log(range(0, 30), ck) + extra, key=lambda f: f.path)
    plan = plan_log_cleanup(listing, last_checkpoint=20, configuration=CONF, now_ms=NOW)
    gone = names(plan.delete)
    assert extra[0].path in gone and extra[1].path not in gone
    assert not {"_last_checkpoint", "00000000000000000003.json.tmp"} & gone


def test_gap_is_refused_before_anything() -> None:
    ck = {n: [v(n, "checkpoint.parquet")] for n in (10, 20)}
    listing = [f for f in log(range(0, 25), ck) if f.path != v(15)]
    with pytest.raises(CorruptLogError, match=r"15\.\.15 are missing") as err:
        plan_log_cleanup(listing, last_checkpoint=20, configuration=CONF, now_ms=NOW)
    assert err.value.version == 15


def test_timestamps_out_of_order_are_adjusted_as_delta_spark() -> None:
    # version 10's checkpoint has an mtime not after version 9's: it is adjusted and is no boundary
    ck = {n: [v(n, "checkpoint.parquet")] for n in (10, 20)}
    listing = [
        Listed(f.path, f.size, OLD) if f.path == v(10, "checkpoint.parquet") else f for f in log(range(0, 25), ck)
    ]
    plan = plan_log_cleanup(listing, last_checkpoint=20, configuration=CONF, now_ms=NOW)
    assert v(19) in names(plan.delete) and v(10, "checkpoint.parquet") in names(plan.delete)
    assert all(f in listing for f in plan.delete)  # the files as listed, not adjusted copies


def test_staged_commits_up_to_newest_deleted_commit() -> None:
    ck = {n: [v(n, "checkpoint.parquet")] for n in (10,)}
    staged = [Listed(f"{n:020d}.abc.json", 4, OLD) for n in (5, 9, 12)]
    plan = plan_log_cleanup(log(range(0, 15), ck), last_checkpoint=10, configuration=CONF, now_ms=NOW, staged=staged)
    assert names(plan.staged) == {staged[0].path, staged[1].path}


def test_bad_retention_property_is_a_typed_error() -> None:
    with pytest.raises(CorruptLogError, match="logRetentionDuration"):
        plan_log_cleanup([], last_checkpoint=None, configuration={"delta.logRetentionDuration": "soon"}, now_ms=NOW)


def test_hadoop_checksums_go_with_their_files() -> None:
    ck = {n: [v(n, "checkpoint.parquet")] for n in (10,)}
    crcs = [Listed(f".{v(3)}.crc", 1, OLD), Listed(f".{v(12)}.crc", 1, OLD)]
    listing = sorted(log(range(0, 15), ck) + crcs, key=lambda f: f.path)
    plan = plan_log_cleanup(listing, last_checkpoint=10, configuration=CONF, now_ms=NOW)
    assert names(plan.checksums) == {crcs[0].path} and crcs[0] in plan.files
