"""A table's log is untrusted input: escaping paths and broken logs are typed errors, never library text."""

from __future__ import annotations

import json
import os
import shutil

import pyarrow as pa
import pytest
from deltalake import write_deltalake

from dbt_delta_optimize.delta.paths import check_log_path, data_file_location
from dbt_delta_optimize.delta.snapshot import file_counts, latest_version, load_snapshot, read_commit
from dbt_delta_optimize.errors import (
    CorruptLogError,
    TableNotFoundError,
    UnsafePathError,
    UnsupportedFeatureError,
    exit_code,
)


def _table(tmp_path, name: str = "t") -> str:
    p = str(tmp_path / name)
    write_deltalake(p, pa.table({"id": [1, 2], "part": ["a", "b"]}), partition_by=["part"])
    write_deltalake(p, pa.table({"id": [3], "part": ["a"]}), partition_by=["part"], mode="append")
    write_deltalake(p, pa.table({"id": [4], "part": ["b"]}), partition_by=["part"], mode="append")
    return p


def _log(p: str, v: int) -> str:
    return os.path.join(p, "_delta_log", f"{v:020d}.json")


def _rewrite_protocol(p: str, protocol: dict) -> None:
    lines = []
    with open(_log(p, 0)) as fh:
        for line in fh:
            action = json.loads(line)
            lines.append(json.dumps({"protocol": protocol} if "protocol" in action else action))
    with open(_log(p, 0), "w") as fh:
        fh.write("\n".join(lines) + "\n")


def _append_add(p: str, path: str, size: int = 10) -> int:
    v = latest_version(p) + 1
    add = {"path": path, "partitionValues": {"part": "a"}, "size": size, "modificationTime": 1, "dataChange": True}
    info = {"timestamp": 1, "operation": "WRITE", "operationParameters": {}}
    with open(_log(p, v), "w") as fh:
        fh.write(json.dumps({"commitInfo": info}) + "\n" + json.dumps({"add": add}) + "\n")
    return v


@pytest.mark.parametrize(
    "path",
    ["../outside/f.parquet", "part=a/../../x.parquet", "..%2F..%2Fx.parquet", "part=a/f%00.parquet", ".."],
)
def test_add_path_escaping_the_root_is_refused_naming_path_and_version(tmp_path, path):
    p = _table(tmp_path)
    v = _append_add(p, path)
    with pytest.raises(UnsafePathError) as info:
        load_snapshot(p)
    assert info.value.version == v and info.value.path == path
    assert repr(path) in str(info.value) and f"version {v}" in str(info.value)
    assert exit_code(info.value) == 2


@pytest.mark.parametrize("path", ["part=a/x.parquet", "part=a%2Fb/x.parquet", "a/./b/../c.parquet"])
def test_relative_paths_inside_the_root_are_accepted(path):
    assert not check_log_path(path).startswith("..")
    assert data_file_location("/root/t", path).startswith("/root/t/")


def test_absolute_paths_are_read_as_they_are():
    assert data_file_location("/root/t", "file:///elsewhere/f.parquet") == "/elsewhere/f.parquet"
    assert data_file_location("/root/t", "s3://bucket/clone/f.parquet") == "s3://bucket/clone/f.parquet"


def test_reader_version_4_is_unsupported_not_a_kernel_error(tmp_path):
    p = _table(tmp_path)
    _rewrite_protocol(p, {"minReaderVersion": 4, "minWriterVersion": 7, "readerFeatures": [], "writerFeatures": []})
    with pytest.raises(UnsupportedFeatureError) as info:
        load_snapshot(p)
    assert "Kernel error" not in str(info.value) and exit_code(info.value) == 2


def test_catalog_managed_table_is_unsupported(tmp_path):
    p = _table(tmp_path)
    feats = ["catalogOwned-preview"]
    _rewrite_protocol(
        p, {"minReaderVersion": 3, "minWriterVersion": 7, "readerFeatures": feats, "writerFeatures": feats}
    )
    with pytest.raises(UnsupportedFeatureError) as info:
        file_counts(p)
    assert "Kernel error" not in str(info.value)


def test_gap_in_versions_is_a_corrupt_log_naming_the_missing_commit(tmp_path):
    p = _table(tmp_path)
    os.unlink(_log(p, 1))
    with pytest.raises(CorruptLogError, match="commit 1 is missing") as info:
        load_snapshot(p)
    assert "Kernel error" not in str(info.value) and exit_code(info.value) == 2


@pytest.mark.parametrize("damage", ["garbage", "truncate"])
def test_bad_json_is_a_corrupt_log_naming_the_version(tmp_path, damage):
    p = _table(tmp_path)
    with open(_log(p, 2)) as fh:
        text = fh.read()
    with open(_log(p, 2), "w") as fh:
        fh.write(text + "{not json\n" if damage == "garbage" else text[: len(text) // 2])
    with pytest.raises(CorruptLogError) as info:
        load_snapshot(p)
    assert info.value.version == 2 and "Kernel error" not in str(info.value)
    with pytest.raises(CorruptLogError):
        read_commit(p, 2)


def test_missing_metadata_is_a_corrupt_log(tmp_path):
    p = _table(tmp_path)
    with open(_log(p, 0)) as fh:
        lines = [line for line in fh if "metaData" not in line]
    with open(_log(p, 0), "w") as fh:
        fh.writelines(lines)
    with pytest.raises(CorruptLogError, match="metadata"):
        load_snapshot(p)


def test_version_out_of_range_names_the_range(tmp_path):
    p = _table(tmp_path)
    with pytest.raises(TableNotFoundError, match=r"versions are 0\.\.2") as info:
        load_snapshot(p, 99)
    assert "Kernel error" not in str(info.value)


def test_invalid_protocol_is_refused(tmp_path):
    p = _table(tmp_path)
    _rewrite_protocol(p, {"minReaderVersion": "x", "minWriterVersion": 2})
    with pytest.raises((CorruptLogError, UnsupportedFeatureError)) as info:
        load_snapshot(p)
    assert "Kernel error" not in str(info.value) and exit_code(info.value) == 2


def test_copy_of_a_healthy_table_still_loads(tmp_path):
    p = _table(tmp_path)
    q = str(tmp_path / "copy")
    shutil.copytree(p, q)
    snap = load_snapshot(q)
    assert snap.version == 2 and len(snap.files) == 4 and snap.storage is not None


def test_stats_claiming_another_row_count_are_refused_naming_the_file(spark, tmp_path):
    """Wrong numRecords in the log: the row guard trips, and the error says the stats lie (not a bug)."""
    from dbt_delta_optimize.api import optimize
    from tests.helpers import data_files, log_snapshot

    p = _table(tmp_path)
    with open(_log(p, 1)) as fh:
        actions = [json.loads(line) for line in fh]
    lied = next(a["add"] for a in actions if "add" in a)
    stats = json.loads(lied["stats"])
    lied["stats"] = json.dumps({**stats, "numRecords": 99})
    with open(_log(p, 1), "w") as fh:
        fh.write("\n".join(json.dumps(a) for a in actions) + "\n")
    before_log, before_files = log_snapshot(p), data_files(p)
    with pytest.raises(CorruptLogError) as info:
        optimize(spark, p)
    assert lied["path"] in str(info.value) and "claim 99 rows" in str(info.value) and "holds 1" in str(info.value)
    assert exit_code(info.value) == 2
    assert log_snapshot(p) == before_log and data_files(p) == before_files


def _external_file(tmp_path, rows: list[int]) -> str:
    """A real Parquet file with the table's data column, in a folder beside the table (another table's data)."""
    import pyarrow.parquet as pq

    outside = tmp_path / "elsewhere" / "part-00000-secret.parquet"
    outside.parent.mkdir()
    pq.write_table(pa.table({"id": pa.array(rows, pa.int64())}), outside)
    return str(outside)


def test_absolute_add_path_outside_the_root_is_refused_unless_allowed(spark, tmp_path):
    """An absolute add path elsewhere: the CLI and its dry run refuse it (exit 2, path and version named)
    before any data file is read; with allow_external_paths (a shallow clone) it is read and compacted."""
    from click.testing import CliRunner

    from dbt_delta_optimize.api import optimize
    from dbt_delta_optimize.cli.main import cli
    from tests.helpers import assert_same_rows, log_snapshot, rows_spark

    p = _table(tmp_path)
    outside = _external_file(tmp_path, [99, 100])
    v = _append_add(p, f"file://{outside}", os.path.getsize(outside))
    expected = rows_spark(spark, p)  # delta-spark reads the external file, as the protocol allows
    assert len(expected) == 6
    os.utime(outside, (0, os.stat(outside).st_mtime))  # atime before mtime: a read of it would update atime
    before = log_snapshot(p)
    for args in (["optimize", p], ["optimize", p, "--dry-run"], ["purge", p]):
        r = CliRunner().invoke(cli, args)
        assert r.exit_code == 2, (args, r.output)
        assert r.stderr.count("\n") == 1 and outside in r.stderr and f"version {v}" in r.stderr, r.stderr
        assert "outside the table root" in r.stderr and "allow_external_paths" in r.stderr
    assert log_snapshot(p) == before and os.stat(outside).st_atime == 0  # nothing written, nothing read
    with pytest.raises(UnsafePathError) as info:
        optimize(None, p, dry_run=True)
    assert info.value.version == v and info.value.path == f"file://{outside}" and exit_code(info.value) == 2
    metrics = optimize(spark, p, allow_external_paths=True)
    assert metrics.num_files_removed == 5 and len(metrics.committed_versions) == 1
    assert_same_rows(spark, p, expected)


def test_external_paths_even_when_allowed_stay_in_the_tables_store(tmp_path):
    """allow_external_paths reaches only what the table's own storage reaches: the same local file system,
    or the same bucket; a path in another store is refused naming it."""
    from dbt_delta_optimize.delta.paths import check_external_path
    from dbt_delta_optimize.delta.snapshot import check_external_paths

    p = _table(tmp_path)
    v = _append_add(p, "s3://other-bucket/t/part-0.parquet")
    snapshot = load_snapshot(p)
    for allow in (False, True):
        with pytest.raises(UnsafePathError) as info:
            check_external_paths(snapshot, allow=allow)
        assert info.value.version == v and "s3://other-bucket/t/part-0.parquet" in str(info.value)
        assert ("another store" in str(info.value)) is allow
    check_external_path("s3a://bkt/clone/f.parquet", root="s3://bkt/t", allow=True)  # same bucket
    check_external_path(f"file://{p}/part=a/f.parquet", root=p)  # absolute but inside the root
    for path in ("s3://bkt2/t/f.parquet", "gs://bkt/t/f.parquet", "/etc/passwd"):
        with pytest.raises(UnsafePathError, match="another store"):
            check_external_path(path, root="s3://bkt/t", allow=True)
    with pytest.raises(UnsafePathError, match="outside the table root"):
        check_external_path(f"{p}/../elsewhere/f.parquet", root=p)
