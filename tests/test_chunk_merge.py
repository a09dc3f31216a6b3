"""The chunk merge (``tasks/chunk_merge.py``) on files written here: which columns are joined, and what comes out.

Each case writes small Parquet files with pyarrow, plans and writes the merge in memory, and compares the
output with what pyarrow writes for the same rows: the rows, and every column's statistics (what the add
action's stats are made from). A joined column is proven on the bytes: its chunk is the inputs' chunks.
"""

from __future__ import annotations

import io
import math
import random
import struct

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from dbt_delta_optimize.tasks.chunk_merge import (
    MIN_CHUNK_BYTES,
    MergeInput,
    plan_merge,
    read_inputs,
    reference_footer,
    write_merge,
)
from dbt_delta_optimize.tasks.parquet_footer import footer_metadata

ROWS = 40_000  # per input: enough for every plain column (booleans too) to pass MIN_CHUNK_BYTES


def _file(table: pa.Table, **kwargs) -> bytes:
    buf = io.BytesIO()
    pq.write_table(table, buf, **{"use_dictionary": False, "compression": "snappy", **kwargs})
    return buf.getvalue()


def _input(data: bytes, name: str = "in.parquet") -> MergeInput:
    return MergeInput(name, data, pq.read_metadata(pa.BufferReader(data)))


def _write(table: pa.Table, buf) -> None:
    pq.write_table(table, buf, compression="snappy", row_group_size=max(1, table.num_rows))


def _merge(datas: list[bytes], target: pa.Schema, **plan_kwargs):
    """(plan, output bytes or None when the plan refused)."""
    ref = reference_footer(target)
    plan = plan_merge(
        [_input(d, f"in-{i}.parquet") for i, d in enumerate(datas)],
        footer_metadata(ref),
        codec="SNAPPY",
        **plan_kwargs,
    )
    if isinstance(plan, str):
        return plan, None
    out = io.BytesIO()
    merged = write_merge(plan, out, target=target, reference=ref, write=_write)
    data = out.getvalue()
    assert merged.size == len(data)
    assert merged.rows == pq.read_metadata(pa.BufferReader(data)).num_rows
    return plan, data


def _table(start: int, rows: int = ROWS) -> pa.Table:
    ids = list(range(start, start + rows))
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "name": pa.array([f"name-{i * 7919 % 1_000_003:08d}-{'x' * (i % 5)}" for i in ids]),
            "score": pa.array([(i * 37 % 1000) / 7 - 50 for i in ids], pa.float64()),
            "day": pa.array([i * 7919 % 20_000 for i in ids], pa.int32()).cast(pa.date32()),
            "flag": pa.array([random.Random(i).random() < 0.5 for i in ids]),
            "maybe": pa.array([None if i % 4 else i for i in ids], pa.int32()),
        }
    )


def _stats(data: bytes) -> dict[str, tuple]:
    md = pq.read_metadata(pa.BufferReader(data))
    out = {}
    for c in range(md.num_columns):
        chunks = [md.row_group(r).column(c) for r in range(md.num_row_groups)]
        st = [ch.statistics for ch in chunks]
        lo = min((s.min for s in st if s.has_min_max), default=None)
        hi = max((s.max for s in st if s.has_min_max), default=None)
        out[chunks[0].path_in_schema] = (lo, hi, sum(s.null_count for s in st))
    return out


def _reference_rewrite(tables: list[pa.Table]) -> bytes:
    buf = io.BytesIO()
    _write(pa.concat_tables(tables), buf)
    return buf.getvalue()


def test_plain_columns_are_joined_and_the_output_matches_a_rewrite():
    tables = [_table(i * ROWS) for i in range(3)]
    datas = [_file(t) for t in tables]
    plan, out = _merge(datas, tables[0].schema)
    assert not isinstance(plan, str)
    assert all(plan.joined), plan.joined
    result = pq.read_table(pa.BufferReader(out))
    assert result.equals(pa.concat_tables(tables))
    assert _stats(out) == _stats(_reference_rewrite(tables))
    md = pq.read_metadata(pa.BufferReader(out))
    assert md.num_row_groups == 1
    # the joined chunk is the inputs' chunks, bytes unchanged, one after another
    col = md.row_group(0).column(1)
    pieces = []
    for d in datas:
        ch = pq.read_metadata(pa.BufferReader(d)).row_group(0).column(1)
        pieces.append(d[ch.data_page_offset : ch.data_page_offset + ch.total_compressed_size])
    start = col.data_page_offset
    assert out[start : start + col.total_compressed_size] == b"".join(pieces)


def test_dictionary_columns_are_re_encoded_beside_the_joined_ones():
    tables = [_table(i * ROWS) for i in range(3)]
    datas = [_file(t, use_dictionary=["day", "name"]) for t in tables]
    plan, out = _merge(datas, tables[0].schema)
    assert not isinstance(plan, str)
    assert dict(zip(plan.names, plan.joined)) == {
        "id": True,
        "name": False,
        "score": True,
        "day": False,
        "flag": True,
        "maybe": True,
    }
    assert pq.read_table(pa.BufferReader(out)).equals(pa.concat_tables(tables))
    assert _stats(out) == _stats(_reference_rewrite(tables))


def test_null_counts_add_up_and_an_all_null_chunk_gives_no_bound():
    schema = pa.schema([("v", pa.int64()), ("pad", pa.string())])
    pad = ["p" * 40] * ROWS
    a = pa.table({"v": pa.nulls(ROWS, pa.int64()), "pad": pad}, schema=schema)
    b = pa.table({"v": pa.array([None if i % 2 else -i for i in range(ROWS)], pa.int64()), "pad": pad}, schema=schema)
    plan, out = _merge([_file(a), _file(b)], schema)
    assert not isinstance(plan, str) and plan.joined[0]
    assert _stats(out)["v"] == (-(ROWS - 2), 0, ROWS + ROWS // 2)
    assert _stats(out) == _stats(_reference_rewrite([a, b]))


def test_a_zero_bound_is_signed_as_parquet_says():
    schema = pa.schema([("x", pa.float64())])
    a = pa.table({"x": pa.array([0.0] + [float(i) for i in range(1, ROWS)])}, schema=schema)
    b = pa.table({"x": pa.array([-float(i) for i in range(1, ROWS)] + [0.0])}, schema=schema)
    c = pa.table({"x": pa.array([0.0] * ROWS)}, schema=schema)
    for tables, (lo, hi) in (([a, c], (-0.0, ROWS - 1)), ([b, c], (-(ROWS - 1), 0.0))):
        plan, out = _merge([_file(t) for t in tables], schema)
        assert not isinstance(plan, str) and plan.joined == (True,)
        st = pq.read_metadata(pa.BufferReader(out)).row_group(0).column(0).statistics
        assert (st.min, st.max) == (lo, hi)
        assert math.copysign(1, st.min) == math.copysign(1, lo) and math.copysign(1, st.max) == math.copysign(1, hi)
        assert _stats(out) == _stats(_reference_rewrite(tables))


def test_unsigned_integers_and_another_codec_are_re_encoded():
    schema = pa.schema([("u", pa.uint32()), ("s", pa.string())])
    tables = [
        pa.table(
            {
                "u": pa.array([(i * 2654435761) % 2**32 for i in range(k, k + ROWS)], pa.uint32()),
                "s": pa.array([f"{i:012d}" for i in range(k, k + ROWS)]),
            }
        )
        for k in (0, ROWS)
    ]
    plan, out = _merge([_file(t) for t in tables], schema)
    assert not isinstance(plan, str) and plan.joined == (False, True)  # Python's order of raw int32 is not UINT32's
    assert pq.read_table(pa.BufferReader(out)).equals(pa.concat_tables(tables))
    assert _stats(out) == _stats(_reference_rewrite(tables))
    plan, out = _merge([_file(t, compression="zstd") for t in tables], schema)
    assert plan == "no column's pages can be joined" and out is None


def test_refusals_before_anything_is_written():
    t = _table(0)
    data = _file(t)
    assert "has no column 'extra'" in _merge([data], t.schema.append(pa.field("extra", pa.int64())))[0]
    nested = pa.table({"s": pa.array([{"a": i} for i in range(ROWS)])})
    assert _merge([_file(nested)], nested.schema)[0] == "the table has nested columns"
    legacy = _file(t.replace_schema_metadata({"org.apache.spark.legacyDateTime": ""}))
    assert "legacy hybrid calendar" in _merge([legacy], t.schema)[0]
    tiny = [_file(_table(i * 20, 20)) for i in range(3)]
    assert _merge(tiny, t.schema)[0] == "no column's pages can be joined"
    assert len(tiny[0]) // t.num_columns < MIN_CHUNK_BYTES


def test_row_tracking_columns_must_be_materialized():
    schema = pa.schema([("id", pa.int64()), ("_row_id", pa.int64())])
    full = pa.table({"id": pa.array(range(ROWS), pa.int64()), "_row_id": pa.array(range(ROWS), pa.int64())})
    gaps = full.set_column(1, "_row_id", pa.array([None if i == 3 else i for i in range(ROWS)], pa.int64()))
    plan, _ = _merge([_file(full)], schema, materialized=["_row_id"])
    assert not isinstance(plan, str)
    plan, _ = _merge([_file(full), _file(gaps)], schema, materialized=["_row_id"])
    assert plan == "in-1.parquet has row tracking columns not materialized in every row"


def test_read_inputs_reads_each_file_once(tmp_path):
    paths = []
    for i in range(2):
        p = tmp_path / f"f{i}.parquet"
        p.write_bytes(_file(_table(i * ROWS)))
        paths.append(str(p))
    read: list[str] = []

    def read_bytes(path: str) -> bytes:
        read.append(path)
        with open(path, "rb") as fh:
            return fh.read()

    inputs = read_inputs(paths, read_bytes)
    assert read == paths
    assert [i.meta.num_rows for i in inputs] == [ROWS, ROWS]
    assert inputs[0].data == (tmp_path / "f0.parquet").read_bytes()


@pytest.mark.parametrize("value", [1.5, -2.25])
def test_float_bounds_round_trip_through_the_footer(value):
    schema = pa.schema([("f", pa.float32()), ("pad", pa.string())])
    t = pa.table({"f": pa.array([value] * ROWS, pa.float32()), "pad": ["q" * 30] * ROWS}, schema=schema)
    plan, out = _merge([_file(t), _file(t)], schema)
    assert not isinstance(plan, str) and plan.joined[0]
    st = pq.read_metadata(pa.BufferReader(out)).row_group(0).column(0).statistics
    assert (st.min, st.max) == (value, value)
    assert struct.pack("<f", st.min) == struct.pack("<f", value)


def test_a_file_total_that_lies_is_not_trusted():
    """A footer's own row count (FileMetaData.num_rows) says 5 more rows than its row groups hold: the merged
    file counts the rows its row groups hold."""
    from dbt_delta_optimize.tasks import thrift_compact as tc

    t = _table(0)
    data = _file(t)
    length = int.from_bytes(data[-8:-4], "little")
    spans = tc.fields(data[-8 - length : -8])
    raw = tc.encode_struct(
        [(fid, tc.I64, t.num_rows + 5) if fid == 3 else (fid, span) for fid, span in sorted(spans.items())]
    )
    lying = data[: -8 - length] + raw + len(raw).to_bytes(4, "little") + b"PAR1"
    assert pq.read_metadata(pa.BufferReader(lying)).num_rows == t.num_rows + 5
    plan, out = _merge([lying, _file(_table(ROWS))], t.schema)
    assert not isinstance(plan, str) and plan.rows == 2 * ROWS
    md = pq.read_metadata(pa.BufferReader(out))
    assert md.num_rows == md.row_group(0).num_rows == 2 * ROWS
    assert pq.read_table(pa.BufferReader(out)).equals(pa.concat_tables([t, _table(ROWS)]))


def test_a_damaged_page_sends_the_bin_to_the_usual_rewrite():
    """One flipped byte in a page (its checksum no longer matches), or a page header overwritten: nothing is
    joined, and the usual rewrite decodes the file and reports the damage."""
    t = _table(0)
    good = _file(t, write_page_checksum=True)
    chunk = pq.read_metadata(pa.BufferReader(good)).row_group(0).column(1)
    middle = chunk.data_page_offset + chunk.total_compressed_size // 2
    flipped = good[:middle] + bytes([good[middle] ^ 0x01]) + good[middle + 1 :]
    plan, out = _merge([_file(_table(ROWS)), flipped], t.schema)
    assert plan == "in-1.parquet: the pages of column 'name' are not what its footer says" and out is None
    start = chunk.data_page_offset
    overwritten = good[:start] + b"\xff" * 8 + good[start + 8 :]
    plan, _ = _merge([overwritten], t.schema)
    assert plan == "in-0.parquet: the pages of column 'name' are not what its footer says"
    not_parquet = b"NOTP" + good[4:]
    assert _merge([not_parquet], t.schema)[0] == "in-0.parquet does not start with Parquet's magic bytes"
    plan, _ = _merge([good], t.schema)  # the same file undamaged, checksums and all, is joined
    assert not isinstance(plan, str) and all(plan.joined)
