"""The landed check's removes: taken as validated only when the commit holds exactly their lines, and every one
reads back as itself; anything else is parsed and checked in full."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from dbt_delta_optimize.delta.actions import AddFile, RemoveFile, json_line
from dbt_delta_optimize.delta.log import parse_commit
from dbt_delta_optimize.inspect.landed import landed_actions

INFO = json_line({"commitInfo": {"operation": "OPTIMIZE", "timestamp": 1}})
ADD = json_line({"add": {"path": "p=a/new.parquet", "partitionValues": {"p": "a"}, "size": 9, "dataChange": False}})
TAIL = json_line({"domainMetadata": {"domain": "delta.rowTracking", "configuration": "{}", "removed": False}})


def _removes(n: int = 4) -> list[RemoveFile]:
    return [
        AddFile(path=f"p=a/f{i}.parquet", partition_values={"p": "a"}, size=10 + i, modification_time=i).remove(
            5, data_change=False
        )
        for i in range(n)
    ]


def _commit(removes: list[RemoveFile], *, head: bytes = INFO + ADD, tail: bytes = TAIL) -> bytes:
    return head + b"".join(r.json_line for r in removes) + tail


def test_the_written_lines_give_the_removes_back_and_the_rest_parsed():
    removes = _removes()
    data = _commit(removes)
    raw, known = landed_actions(data, "/t", 3, removes)
    assert known == removes and all(a is b for a, b in zip(known, removes))
    assert raw == [a for a in parse_commit(data, "/t", 3) if "remove" not in a]
    assert "commitInfo" in raw[0] and len(raw) == 3


def test_a_changed_line_is_parsed_in_full():
    removes = _removes()
    data = _commit(removes).replace(b'"size":11', b'"size":12')
    raw, known = landed_actions(data, "/t", 3, removes)
    assert known is None and raw == parse_commit(data, "/t", 3)
    assert [r["remove"]["size"] for r in raw if "remove" in r] == [10, 12, 12, 13]


@pytest.mark.parametrize(
    "landed",
    [
        lambda rs: _commit(rs[:-1]),  # one missing
        lambda rs: _commit(rs[1:] + rs[:1]),  # another order
        lambda rs: _commit(rs, tail=rs[0].json_line),  # one twice
        lambda rs: _commit(rs, head=b""),  # no first line before them: the commit's first action is a remove
        lambda rs: _commit(rs, head=INFO + _removes(6)[5].json_line),  # a remove nobody checked
        lambda rs: (INFO + ADD + b"".join(r.json_line for r in rs)).replace(b"\n", b"\r\n"),  # other line ends
    ],
)
def test_anything_but_exactly_the_checked_lines_is_parsed_in_full(landed):
    removes = _removes()
    data = landed(removes)
    raw, known = landed_actions(data, "/t", 3, removes)
    assert known is None and raw == parse_commit(data, "/t", 3)


def test_a_remove_that_does_not_read_back_as_itself_is_never_taken_on_trust():
    """Without extendedFileMetadata a remove's line leaves its partition values out: read back, it differs."""
    odd = RemoveFile(
        path="p=a/x.parquet", deletion_timestamp=5, extended_file_metadata=False, partition_values={"p": "a"}
    )
    assert not odd.reads_back
    removes = [*_removes(2), odd]
    raw, known = landed_actions(_commit(removes), "/t", 3, removes)
    assert known is None and len([a for a in raw if "remove" in a]) == 3
    assert all(r.reads_back for r in _removes())


def _table(tmp_path) -> str:
    p = str(tmp_path / "t")
    for i in range(4):
        write_deltalake(
            p, pa.table({"id": list(range(i * 10, i * 10 + 10)), "p": ["a"] * 10}), partition_by=["p"], mode="append"
        )
    return p


def test_our_optimize_lands_its_removes_as_written_and_a_later_change_is_found(tmp_path, monkeypatch):
    """A real run: the check after landing takes the removes as written (no parse), the rows are the same; the
    same check on a commit whose remove was altered afterwards parses it and reports the change."""
    import dbt_delta_optimize.inspect.landed as landed_module
    from dbt_delta_optimize.api import optimize
    from dbt_delta_optimize.delta.snapshot import load_snapshot
    from dbt_delta_optimize.inspect.validate import CheckedActions, validate_actions, validate_commit

    p = _table(tmp_path)
    expected = sorted(DeltaTable(p).to_pyarrow_table().column("id").to_pylist())
    seen: list[bool] = []
    real = landed_module.landed_actions
    monkeypatch.setattr(landed_module, "landed_actions", lambda *a: seen.append(real(*a)[1] is not None) or real(*a))
    m = optimize(None, p, task_runner="driver")
    assert m.num_files_removed == 4 and seen == [True]
    assert sorted(DeltaTable(p).to_pyarrow_table().column("id").to_pylist()) == expected

    log = os.path.join(p, "_delta_log", f"{m.committed_versions[0]:020d}.json")
    data = Path(log).read_bytes()
    actions = [json.loads(line) for line in data.splitlines()]
    before = load_snapshot(p, m.committed_versions[0] - 1)
    adds = tuple(AddFile.from_json(a["add"]) for a in actions if "add" in a)
    removes = tuple(RemoveFile.from_json(a["remove"]) for a in actions if "remove" in a)
    checked = CheckedActions(before, adds, removes, validate_actions(before, adds, removes))
    assert validate_commit(p, before.version + 1, before=before, checked=checked).ok and seen[-1] is True
    Path(log).write_bytes(
        data.replace(f'"size":{removes[1].size},'.encode(), f'"size":{removes[1].size + 1},'.encode(), 1)
    )
    r = validate_commit(p, before.version + 1, before=before, checked=checked)
    assert seen[-1] is False and not r.ok and "remove_size_mismatch" in r.codes, r.describe()
