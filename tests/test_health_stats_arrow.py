"""Health's statistics coverage through Arrow's JSON reader equals the per-file json.loads path (the oracle),
on clean stats and on hostile ones (where the Arrow path must give the same counts or hand the chunk back).

No Spark: snapshots made by hand, as tests/test_analyze_validate.py does.
"""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

from dbt_delta_optimize.delta.actions import AddFile, Metadata, Protocol
from dbt_delta_optimize.delta.snapshot import Snapshot
from dbt_delta_optimize.inspect import health_stats
from dbt_delta_optimize.inspect.stats_arrow import count_arrow, count_python
from dbt_delta_optimize.plan.analyze import named_leaves


def _field(name: str, t: object, physical: str | None = None) -> dict:
    meta = {"delta.columnMapping.physicalName": physical} if physical else {}
    return {"name": name, "type": t, "nullable": True, "metadata": meta}


def _schema(mapped: bool) -> str:
    n = (lambda s: f"col-{s}") if mapped else (lambda s: None)
    inner = {"type": "struct", "fields": [_field("a", "integer", n("a")), _field("b", "string", n("b"))]}
    fields = [
        _field("id", "long", n("id")),
        _field("note", "string", n("note")),
        _field("s", inner, n("s")),
        _field("flag", "boolean", n("flag")),
    ]
    return json.dumps({"type": "struct", "fields": fields})


def _snapshot(stats: list[str | None], *, mapped: bool = False) -> Snapshot:
    conf = {"delta.columnMapping.mode": "name"} if mapped else {}
    files = tuple(AddFile(f"f{i}", {}, 10, 1, stats=s) for i, s in enumerate(stats))
    return Snapshot("/t", 1, Protocol(1, 2), Metadata("x", _schema(mapped), (), conf), files)


def _stats(mapped: bool = False, **over: object) -> str:
    k = (lambda s: f"col-{s}") if mapped else (lambda s: s)
    base: dict = {
        "numRecords": 3,
        "minValues": {k("id"): 1, k("note"): "a", k("s"): {k("a"): 1, k("b"): "x"}},
        "maxValues": {k("id"): 9, k("note"): "z", k("s"): {k("a"): 5, k("b"): "y"}},
        "nullCount": {k("id"): 0, k("note"): 0, k("s"): {k("a"): 0, k("b"): 0}, k("flag"): 1},
        "tightBounds": True,
    }
    base.update(over)
    return json.dumps(base)


def _clean(mapped: bool = False) -> list[str | None]:
    k = (lambda s: f"col-{s}") if mapped else (lambda s: s)
    full = json.loads(_stats(mapped))
    no_b = {**full["nullCount"], k("s"): {k("a"): 0}}
    note_nulls = {**full["nullCount"], k("note"): 3}
    note_some = {**full["nullCount"], k("note"): 2}
    unbounded_note = {k("id"): 1, k("s"): full["minValues"][k("s")]}
    return [
        _stats(mapped),
        None,
        "",
        _stats(mapped, nullCount=no_b),  # incomplete: s.b has no null count
        _stats(mapped, nullCount=note_nulls, minValues=unbounded_note, maxValues=unbounded_note),  # all null: covered
        _stats(mapped, nullCount=note_some, minValues=unbounded_note, maxValues=unbounded_note),  # incomplete
        _stats(mapped, maxValues={**full["maxValues"], k("note"): "x" * 33}),  # truncated
        _stats(mapped, maxValues={**full["maxValues"], k("note"): "x" * 32}),  # at the prefix: not truncated
        _stats(mapped, maxValues={**full["maxValues"], k("note"): "\u00e9" * 33}),  # 33 characters, 66 bytes
        _stats(mapped, nullCount={**full["nullCount"], "gone": 0, "old": {"x": 0, "y": {"z": 0}}}),  # stale
        json.dumps({"minValues": {k("id"): 1}, "nullCount": {k("id"): 0}}),  # no numRecords: missing
        json.dumps({"numRecords": 4}),  # no null counts: incomplete, lacking every column
        _stats(mapped, maxValues={**full["maxValues"], k("s"): {}}),  # s.b bounds missing
        '  {"numRecords": 2, "nullCount": {}}\t',
        _stats(mapped, nullCount={**full["nullCount"], k("s"): {k("a"): 0, k("b"): 0, "c": {}}}),
        '{"numRecords":1,"minValues":{"note":"a b c"},"nullCount":{"null":0}}',  # "null" as a key
    ]


HOSTILE = [
    '{"numRecords":',  # malformed
    '{"numRecords":1,"nullCount":{"id":null}}',  # JSON null: present for json.loads, absent for Arrow
    '{"numRecords":null}',
    "null",
    "[1]",
    "1",
    '{"numRecords":1} {"numRecords":2}',  # two objects in one row
    "   ",
    '{\n"numRecords": 1}',
    '{"numRecords":1.0}',
    '{"numRecords":true}',
    '{"numRecords":' + str(2**70) + "}",
    '{"numRecords":1,"nullCount":{"id":"0"}}',
    '{"numRecords":1,"nullCount":{"id":0,"id":1}}',  # duplicate key
    '\ufeff{"numRecords":1}',
    '{"numRecords":1,"nullCount":{"id":NaN}}',
    '{"numRecords":1,"nullCount":{"id":1.0}}',
    '{"numRecords":1,"maxValues":{"note":"\\ud800"}}',  # lone surrogate
    '{"numRecords":1,"maxValues":{"note":"2024-01-01"}}',  # Arrow infers a timestamp from it
    '{"numRecords":1,"maxValues":{"id":"x"}}',  # conflicts with the clean rows' integer
    '{"numRecords":1,"nullCount":{"s":0}}',  # a leaf where the clean rows have a struct
    '{"numRecords":1,"nullCount":{"note":true}}',
    '{"numRecords":1,"maxValues":{"note":["x"]}}',
    '{"numRecords":1,"maxValues":{"note":' + json.dumps("n\u00e9" * 40) + "}}",
    '{"numRecords":1}x',
    "{}",
]


def _leaves(mapped: bool) -> list:
    return [leaf for _, leaf in named_leaves(_snapshot([], mapped=mapped))]


@pytest.mark.parametrize("mapped", [False, True])
def test_clean_chunks_take_the_arrow_path_and_equal_json_loads(mapped):
    values = _clean(mapped)
    leaves = _leaves(mapped)
    for prefix in (32, 4):
        got = count_arrow(pa.array(values), leaves, prefix)
        assert got is not None and got == count_python(values, leaves, prefix)
    got = count_arrow(pa.array(values), leaves, 32)
    assert got is not None and got.missing == 3 and got.incomplete == 6 and got.truncated
    assert got.stale and got.lacking and got.stats_bytes == sum(len(v or "") for v in values)
    for one in values:  # each row alone too (other types inferred from one row)
        alone = count_arrow(pa.array([one], pa.large_string()), leaves, 32)
        assert alone is None or alone == count_python([one], leaves, 32)
    assert count_arrow(pa.array([None, ""]), leaves, 32) == count_python([None, ""], leaves, 32)
    sliced = pa.array(["x", *values, "y"])[1:-1]  # a slice of a chunk, its offsets not at 0
    assert count_arrow(sliced, leaves, 32) == count_python(values, leaves, 32)
    stated = [v for v in values if v]
    assert count_arrow(pa.array(["x", *stated])[1:], leaves, 32) == count_python(stated, leaves, 32)


@pytest.mark.parametrize("bad", HOSTILE)
def test_hostile_stats_give_the_same_counts_or_fall_back(bad):
    leaves = _leaves(False)
    for values in ([bad], [*_clean(), bad], [bad, *_clean()]):
        for prefix in (32, 4):  # 4: the date string is a truncated max, which a timestamp would hide
            got = count_arrow(pa.array(values), leaves, prefix)
            assert got is None or got == count_python(values, leaves, prefix), values


@pytest.mark.parametrize("mapped", [False, True])
def test_statistics_coverage_equals_the_python_path(mapped, monkeypatch):
    snap = _snapshot([*_clean(mapped), *HOSTILE] if not mapped else _clean(mapped), mapped=mapped)
    fast = health_stats.statistics_coverage(snap)
    monkeypatch.setattr(health_stats, "count_arrow", lambda *a: None)
    assert fast == health_stats.statistics_coverage(snap)
    assert fast["filesWithoutStats"] and fast["filesIncomplete"] and fast["staleColumns"]


def test_the_null_check_in_numpy_is_the_regex():
    """``_holds_null`` over the joined text says what ``_NULL`` says row by row (which sends a chunk the Python way)."""
    import random

    import pyarrow.compute as pc

    from dbt_delta_optimize.inspect.stats_arrow import _NULL, _holds_null

    pieces = ["null", '"null', "anull", "_null", "9null", ":null", " null", "{null", "énull", "nul", "ull", "x", "{"]
    rng = random.Random(36)
    for _ in range(3000):
        rows = ["".join(rng.choice(pieces) for _ in range(rng.randint(1, 4))) for _ in range(rng.randint(1, 3))]
        joined = pa.py_buffer("\n".join(rows).encode())
        expected = pc.any(pc.match_substring_regex(pa.array(rows), _NULL)).as_py()
        assert _holds_null(joined) == expected, rows


def _checkpointed_log(root: str, stats: list[str | None], tags: dict[int, dict[str, str]] | None = None) -> None:
    """A log whose checkpoint (row groups of 4 rows, protocol and metadata first) holds files with ``stats``,
    every fifth with a deletion vector; then a commit removing two of them and adding three (files 100-102).
    ``tags``: the tags of some files, by number."""
    import os

    import pyarrow.parquet as pq
    from deltalake import DeltaTable

    log = os.path.join(root, "_delta_log")
    os.makedirs(log)
    dv = {"storageType": "u", "pathOrInlineDv": "ab" + "0" * 20, "sizeInBytes": 34, "cardinality": 1, "offset": 1}

    def add(i: int, s: str | None) -> dict:
        a = {"path": f"f{i}.parquet", "partitionValues": {}, "size": 10 + i, "modificationTime": 1, "dataChange": True}
        if tags and i in tags:
            a["tags"] = tags[i]
        return {
            "add": {**a, **({"stats": s} if s is not None else {}), **({"deletionVector": dv} if i % 5 == 0 else {})}
        }

    meta = {
        "id": "x",
        "format": {"provider": "parquet", "options": {}},
        "schemaString": _schema(False),
        "configuration": {},
    }
    head = [
        {"protocol": {"minReaderVersion": 1, "minWriterVersion": 2}},
        {"metaData": {**meta, "partitionColumns": []}},
    ]
    with open(os.path.join(log, f"{0:020d}.json"), "w") as fh:
        fh.writelines(json.dumps(a) + "\n" for a in [*head, *(add(i, s) for i, s in enumerate(stats))])
    DeltaTable(root).create_checkpoint()
    checkpoint = os.path.join(log, f"{0:020d}.checkpoint.parquet")
    table = pq.read_table(checkpoint)
    first = pa.compute.is_null(table.column("add"))
    pq.write_table(
        pa.concat_tables([table.filter(first), table.filter(pa.compute.invert(first))]), checkpoint, row_group_size=4
    )
    with open(os.path.join(log, f"{1:020d}.json"), "w") as fh:
        removes = [{"remove": {"path": f"f{i}.parquet", "dataChange": True}} for i in (1, 6)]
        fh.writelines(json.dumps(a) + "\n" for a in [*removes, *(add(100 + i, s) for i, s in enumerate(stats[:3]))])


def test_coverage_of_a_lean_snapshot_read_per_row_group_equals_the_python_path(tmp_path, monkeypatch):
    """Through a real checkpoint (row groups of adds only, and one with protocol and metadata), read one row
    group at a time by the lean snapshot: the Arrow count equals json.loads' count and deltalake's snapshot's."""
    from dbt_delta_optimize.delta import snapshot as snapshot_module
    from dbt_delta_optimize.delta.snapshot import load_snapshot

    clean = [s for s in _clean() if s != ""]  # deltalake refuses an empty stats string
    stats = [*clean, *clean[::-1], '{"numRecords":1,"nullCount":{"id":null}}', *clean]
    root = str(tmp_path / "t")
    _checkpointed_log(root, stats)
    monkeypatch.setattr(snapshot_module, "LEAN_REPLAY_ROWS", 2**62)  # deltalake's path (ours is the default)
    checked = load_snapshot(root)
    monkeypatch.setattr(snapshot_module, "LEAN_REPLAY_ROWS", 1)
    lean = load_snapshot(root)
    assert lean.delta_table is None and len(lean.file_table) == len(stats) + 1 == len(checked.file_table)
    answers: list[object] = []
    arrow = health_stats.count_arrow
    monkeypatch.setattr(health_stats, "count_arrow", lambda *a: answers.append(arrow(*a)) or answers[-1])
    fast = health_stats.statistics_coverage(lean)
    assert any(a is not None for a in answers) and any(a is None for a in answers)  # both paths taken
    assert fast == health_stats.statistics_coverage(checked)
    monkeypatch.setattr(health_stats, "count_arrow", lambda *a: None)
    assert fast == health_stats.statistics_coverage(lean)
    # the oracle: json.loads over the live files' stats as the log wrote them (not read back from the checkpoint)
    live = [s for i, s in enumerate(stats) if i not in (1, 6)] + stats[:3]
    expected = health_stats.statistics_coverage(_snapshot(live))
    assert {**fast, "recommendation": None} == {**expected, "recommendation": None}
    assert (
        fast["filesWithoutStats"] and fast["filesIncomplete"] and fast["staleColumns"] and fast["freeTextColumns"] == []
    )
