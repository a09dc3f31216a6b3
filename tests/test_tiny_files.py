"""Tiny-file compaction (issue 36): the bin's many small inputs joined before encoding, and the landed
commit parsed as one JSON array, each checked against what it replaced."""

from __future__ import annotations

import json
import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from dbt_delta_optimize.delta.log import _parse_each, parse_commit
from dbt_delta_optimize.errors import CorruptLogError
from tests.helpers import arrow_rewrite

FIELDS = [
    {"name": "id", "type": "long", "nullable": True, "metadata": {}},
    {"name": "label", "type": "string", "nullable": True, "metadata": {}},
    {"name": "score", "type": "double", "nullable": True, "metadata": {}},
]


def _tiny_files(tmp_path, n: int) -> tuple[list[str], pa.Table]:
    paths, tables = [], []
    for i in range(n):
        t = pa.table(
            {
                "id": pa.array(range(i * 7, i * 7 + 7), pa.int64()),
                "label": pa.array([f"l{(i + k) % 3}" if k != 3 else None for k in range(7)]),
                "score": pa.array([float("nan") if (i, k) == (5, 2) else i - k / 10 for k in range(7)]),
            }
        )
        p = str(tmp_path / f"in-{i:03d}.parquet")
        pq.write_table(t, p)
        paths.append(p)
        tables.append(t)
    return paths, pa.concat_tables(tables)


def _rows(t: pa.Table) -> list[tuple]:
    """Rows in order, NaN made comparable."""
    return [tuple("NaN" if v != v else v for v in row.values()) for row in t.to_pylist()]


def test_a_bin_of_many_tiny_files_is_one_row_group_with_every_row_and_spark_stats(tmp_path):
    """More inputs than the join threshold: one contiguous row group, rows equal in order, stats exact
    (the NaN is the max, as delta-spark computes it, and the nulls are counted)."""
    from dbt_delta_optimize.tasks import bin_task

    paths, expected = _tiny_files(tmp_path, 3 * bin_task._JOIN_CHUNKS)
    out = str(tmp_path / "out.parquet")
    outcome = arrow_rewrite(paths, out, FIELDS)
    assert outcome.rows == expected.num_rows == 3 * bin_task._JOIN_CHUNKS * 7
    written = pq.ParquetFile(out)
    assert written.metadata.num_row_groups == 1
    assert _rows(written.read()) == _rows(expected)
    stats = json.loads(outcome.stats)
    assert stats["numRecords"] == expected.num_rows
    assert stats["nullCount"] == {"id": 0, "label": 3 * bin_task._JOIN_CHUNKS, "score": 0}
    assert stats["minValues"]["id"] == 0 and stats["maxValues"]["id"] == expected.num_rows - 1
    assert stats["maxValues"]["score"] == "NaN" and stats["minValues"]["score"] == -0.6
    assert outcome.size == os.path.getsize(out)


def test_the_dictionary_sample_is_the_first_rows_only(monkeypatch, tmp_path):
    """The distinct count sees the first ``_SAMPLE_ROWS`` rows (as before, when every buffered table was
    joined first): a column repetitive there keeps its dictionary, a unique one does not."""
    from dbt_delta_optimize.tasks import bin_task

    monkeypatch.setattr(bin_task, "_SAMPLE_ROWS", 20)
    head = pa.table({"id": pa.array(range(20), pa.int64()), "label": pa.array(["a", "b"] * 10)})
    tail = pa.table({"id": pa.array(range(20, 40), pa.int64()), "label": pa.array([str(i) for i in range(20)])})
    target = head.schema
    assert bin_task._dictionary([head, tail], target) == ["label"]
    assert bin_task._dictionary([tail, head], target) == []


def test_a_column_unique_in_the_probe_is_judged_unique_without_the_full_count(monkeypatch):
    """The first ``_PROBE_ROWS`` values all distinct: no dictionary, the rest not hashed. One repeat (or a null)
    among them: the whole sample decides, as before the probe."""
    from dbt_delta_optimize import arrow_kernels
    from dbt_delta_optimize.tasks import bin_task

    monkeypatch.setattr(bin_task, "_PROBE_ROWS", 10)
    counted: list[int] = []
    real = arrow_kernels.count_distinct
    monkeypatch.setattr(arrow_kernels, "count_distinct", lambda column: counted.append(len(column)) or real(column))

    # unique in the probe, repetitive over the sample (a rule for the usual columns, not a proof)
    unique_head = pa.chunked_array([pa.array(list(range(10)) + [0] * 30, pa.int64())])
    assert bin_task._repetitive(unique_head) is False and counted == [10]
    counted.clear()
    one_repeat = pa.chunked_array([pa.array([0, *range(9), *range(100, 130)], pa.int64())])
    assert bin_task._repetitive(one_repeat) is False and counted == [10, 40]  # 39 of 40 distinct
    counted.clear()
    with_null = pa.chunked_array([pa.array([None] + list(range(9)) + [1] * 30, pa.int64())])
    assert bin_task._repetitive(with_null) is True and counted == [10, 40]  # 9 of 40 distinct
    counted.clear()
    short = pa.chunked_array([pa.array(range(10), pa.int64())])  # no more rows than the probe: counted once
    assert bin_task._repetitive(short) is False and counted == [10]
    target = pa.schema([("id", pa.int64()), ("day", pa.int32())])
    table = pa.table({"id": pa.array(range(40), pa.int64()), "day": pa.array([i % 3 for i in range(40)], pa.int32())})
    assert bin_task._dictionary([table], target) == ["day"]


def _commit(lines: list[str]) -> bytes:
    return ("\n".join(lines) + "\n").encode()


def test_a_commit_parses_to_the_same_actions_as_line_by_line():
    actions = [{"commitInfo": {"operation": "OPTIMIZE"}}] + [
        {"add": {"path": f"p={i % 3}/f{i}.parquet", "size": i, "stats": json.dumps({"numRecords": i})}}
        for i in range(50)
    ]
    data = _commit([json.dumps(a) for a in actions]) + b"\n\n"
    assert parse_commit(data, "t", 3) == _parse_each(data, "t", 3) == actions


@pytest.mark.parametrize(
    ("lines", "message"),
    [
        (['{"add": {"path": "a"}}', "{not json"], "line 2 of 00000000000000000003.json is not valid JSON"),
        (['{"add": {"path": "a"}}', "[1, 2]"], "line 2 of 00000000000000000003.json is not a JSON object"),
        # two objects on one line parse as an array of two, yet the line itself is not JSON: refused as before
        (['{"add": {"path": "a"}}, {"add": {"path": "b"}}'], "line 1 of 00000000000000000003.json is not valid JSON"),
    ],
)
def test_a_damaged_commit_still_names_its_line(lines, message):
    with pytest.raises(CorruptLogError, match=message) as info:
        parse_commit(_commit(lines), "t", 3)
    assert info.value.version == 3
