"""``tasks/thrift_compact.py`` against thriftpy2's compact protocol and the Parquet IDL (``parquet_footer``)."""

from __future__ import annotations

import io

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from dbt_delta_optimize.tasks import thrift_compact as tc
from dbt_delta_optimize.tasks.parquet_footer import decode, footer_of_bytes, thrift


def _footer(table: pa.Table, **kwargs) -> bytes:
    buf = io.BytesIO()
    pq.write_table(table, buf, **kwargs)
    return footer_of_bytes(buf.getvalue()).raw


TABLES = [
    pa.table({"a": pa.array([1, None, -3], pa.int64()), "s": ["x", "yy", None]}),
    pa.table(
        {
            "st": pa.array([{"x": 1, "l": [1.5, None]}, None]),
            "m": pa.array([[("k", 1)], []], pa.map_(pa.string(), pa.int32())),
            "b": [True, False],
            "d": pa.array([1, 2], pa.date32()),
        }
    ),
    pa.table({f"c{i}": [i] for i in range(40)}),  # lists of 15 or more, field ids beyond a delta of 15
]


@pytest.mark.parametrize("table", TABLES)
def test_fields_splits_a_footer_and_its_spans_encode_back_to_the_same_bytes(table):
    for kwargs in ({}, {"write_page_index": True, "use_dictionary": False}):
        raw = _footer(table, **kwargs)
        spans = tc.fields(raw)
        assert set(spans) >= {1, 2, 3, 4}
        assert tc.encode_struct([(fid, spans[fid]) for fid in sorted(spans)]) == raw


def test_an_encoded_structure_decodes_as_thriftpy2_reads_it():
    stats = [(1, tc.BINARY, b"\x05"), (3, tc.I64, 7), (5, tc.BINARY, b"\x05"), (6, tc.BINARY, b"\xff" * 3)]
    md = [
        (1, tc.I32, 2),
        (2, tc.LIST, (tc.I32, [0, 3])),
        (3, tc.LIST, (tc.BINARY, [b"col"])),
        (4, tc.I32, 1),
        (5, tc.I64, 2**40),
        (6, tc.I64, 100),
        (7, tc.I64, 90),
        (9, tc.I64, 4),
        (11, tc.I64, None),  # left out
        (12, tc.STRUCT, stats),
    ]
    chunk = [(2, tc.I64, 4), (3, tc.STRUCT, md)]
    group = [(1, tc.LIST, (tc.STRUCT, [chunk] * 16)), (2, tc.I64, 100), (3, tc.I64, 5), (7, tc.I16, -2)]
    schema = thrift().SchemaElement(name=b"root", num_children=0)
    from thriftpy2.protocol import TCompactProtocolFactory
    from thriftpy2.utils import serialize

    schema_bytes = bytes(serialize(schema, TCompactProtocolFactory()))
    raw = tc.encode_struct(
        [
            (1, tc.I32, 2),
            (2, tc.LIST, (tc.STRUCT, [])),  # replaced below by a raw span
            (3, tc.I64, -5),
            (4, tc.LIST, (tc.STRUCT, [group])),
            (6, tc.BINARY, b"me"),
        ]
    )
    meta = decode(raw)
    assert (meta.version, meta.num_rows, meta.created_by) == (2, -5, b"me")
    rg = meta.row_groups[0]
    assert (len(rg.columns), rg.num_rows, rg.ordinal) == (16, 5, -2)
    c = rg.columns[0].meta_data
    assert (c.type, c.encodings, c.path_in_schema, c.num_values, c.dictionary_page_offset) == (
        2,
        [0, 3],
        [b"col"],
        2**40,
        None,
    )
    assert (c.statistics.null_count, c.statistics.min_value, c.statistics.max) == (7, b"\xff\xff\xff", b"\x05")
    # a raw span goes in unchanged
    spliced = tc.encode_struct(
        [
            (1, tc.I32, 1),
            (2, tc.Raw(tc.LIST, bytes([0x1C]) + schema_bytes)),
            (3, tc.I64, 0),
            (4, tc.LIST, (tc.STRUCT, [])),
        ]
    )
    assert decode(spliced).schema[0].name == b"root"


def test_bad_input_is_refused():
    with pytest.raises(ValueError, match="out of order"):
        tc.encode_struct([(2, tc.I32, 1), (1, tc.I32, 1)])
    with pytest.raises(ValueError, match="ends inside"):
        tc.fields(b"\x15")
    with pytest.raises(ValueError, match="after the struct"):
        tc.fields(b"\x15\x02\x00\x00")
