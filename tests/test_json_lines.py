"""The commit's add and remove lines by orjson are byte for byte what ``json.dumps`` wrote: every ASCII
character (controls, DEL, quotes, backslash), non-ASCII text, integers at and beyond 64 bits."""

from __future__ import annotations

import json

import pytest

from dbt_delta_optimize.delta.actions import json_line, loads

ALL_ASCII = "".join(chr(i) for i in range(128))
ADD = {
    "add": {
        "path": ALL_ASCII,
        "partitionValues": {"k\x01": None, "b": "x"},
        "size": 2**63 - 1,
        "dataChange": False,
        "stats": json.dumps({"minValues": {"s": "a\x7f"}, "x": 1.5e-7}),
        "tags": {},
        "n": [1, -2, 0],
    }
}
NON_ASCII = {"remove": {"path": "part=é/f.parquet", "size": -(2**63)}}
HUGE = {"remove": {"path": "a", "size": 2**70}}


@pytest.mark.parametrize("objects", [[], [ADD], [ADD, ADD, ADD], [ADD, NON_ASCII], [ADD, HUGE], [HUGE]])
def test_json_lines_are_the_standard_librarys_text(objects):
    want = "".join(json.dumps(o, separators=(",", ":")) + "\n" for o in objects).encode()
    got = b"".join(map(json_line, objects))
    assert got == want
    assert [loads(line) for line in got.splitlines()] == [json.loads(line) for line in want.splitlines()]


def test_loads_falls_back_where_orjson_refuses():
    assert loads(b'{"a": NaN}')["a"] != loads(b'{"a": NaN}')["a"]  # NaN, as json reads it
    assert loads('{"a": 1180591620717411303424}') == {"a": 2**70}
    with pytest.raises(ValueError):
        loads(b"{not json")


@pytest.mark.parametrize("path", ["part=a/f.parquet", "part=é/f.parquet", "p=a\x7fb/f%20x.parquet"])
def test_a_removes_own_line_is_the_line_the_commit_writes(path):
    """``RemoveFile.json_line`` (made as a bin finishes, kept for the commit) is json's text of the action."""
    from dbt_delta_optimize.delta.actions import AddFile, DeletionVector

    f = AddFile(
        path=path,
        partition_values={"p": path[:3], "q": None},
        size=123,
        modification_time=1,
        stats='{"numRecords":3,"minValues":{"s":"\\u007f"}}',
        tags={"t": "v"},
        deletion_vector=DeletionVector("u", "ab^-aqEH.-t@S}K{vb[*k^", 1, 36, 2),
        base_row_id=2**62,
        default_row_commit_version=7,
    )
    r = f.remove(1_700_000_000_000, data_change=False)
    want = (json.dumps({"remove": r.to_json()}, separators=(",", ":")) + "\n").encode()
    assert r.json_line == want == json_line({"remove": r.to_json()})
    assert r.json_line is r.json_line  # made once
    assert loads(r.json_line)["remove"]["path"] == path
