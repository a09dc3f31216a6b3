"""delta/log_head.py: the newest protocol and metadata from the log equal deltalake's, checkpoint or not."""

import os

import pyarrow as pa
from deltalake import DeltaTable, write_deltalake

from dbt_delta_optimize.delta.log import list_log
from dbt_delta_optimize.delta.log_head import read_head
from dbt_delta_optimize.delta.snapshot import load_log_snapshot
from dbt_delta_optimize.delta.storage import LocalStorage


def _head(path):
    storage = LocalStorage()
    return read_head(storage, path, list_log(storage, path))


def _same_as_deltalake(path):
    version, protocol, metadata = _head(path)
    ref = load_log_snapshot(path)
    assert (version, protocol, metadata) == (ref.version, ref.protocol, ref.metadata)
    return metadata


def test_head_from_commits_then_from_a_checkpoint(tmp_path):
    path = str(tmp_path / "t")
    data = pa.table({"id": [1, 2], "p": ["a", "b"]})
    write_deltalake(
        path, data, partition_by=["p"], configuration={"delta.deletedFileRetentionDuration": "interval 2 days"}
    )
    write_deltalake(path, data, mode="append")
    assert _same_as_deltalake(path).configuration["delta.deletedFileRetentionDuration"] == "interval 2 days"
    DeltaTable(path).create_checkpoint()
    for name in os.listdir(tmp_path / "t" / "_delta_log"):
        if name.endswith(".json") and not name.startswith("00000000000000000001"):
            os.remove(tmp_path / "t" / "_delta_log" / name)  # only the checkpoint names the metadata now
    write_deltalake(path, data, mode="append")
    metadata = _same_as_deltalake(path)
    assert metadata.partition_columns == ("p",)


def test_a_gap_in_the_commits_is_left_to_deltalake(tmp_path):
    path = str(tmp_path / "t")
    for _ in range(3):
        write_deltalake(path, pa.table({"id": [1]}), mode="append")
    os.remove(tmp_path / "t" / "_delta_log" / "00000000000000000001.json")
    assert _head(path) is None


def test_a_commit_parses_in_one_go_blank_lines_and_crlf_too_and_bad_json_still_raises():
    import pytest

    from dbt_delta_optimize.delta.log import parse_commit
    from dbt_delta_optimize.errors import CorruptLogError

    assert parse_commit(b'{"a":1}\r\n\r\n  \n{"b":2}\n', "t", 3) == [{"a": 1}, {"b": 2}]
    assert parse_commit(b'{"a":1}\n{"b":2}', "t", 3) == [{"a": 1}, {"b": 2}]
    with pytest.raises(CorruptLogError, match=r"line 2 of 00000000000000000003\.json"):
        parse_commit(b'{"a":1}\n{bad\n', "t", 3)
    with pytest.raises(CorruptLogError, match="line 1 of"):  # two objects on one line are not two actions
        parse_commit(b'{"a":1},{"b":2}\n', "t", 3)
