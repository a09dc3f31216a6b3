"""The row-group copy (``tasks/parquet_copy``) on files made here, without Spark.

Each test writes real Parquet files (pyarrow, with chosen row-group sizes), compacts them with
``copy_compact`` or ``rewrite_files``, and reads the output back with pyarrow and DuckDB (an
independent Parquet reader). That a row group was *copied* is checked on the bytes: its column
chunks appear verbatim in the output. Every fallback reason gets a bin that is re-encoded instead.
"""

from __future__ import annotations

import base64
import datetime
import decimal
import io
import os

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from dbt_delta_optimize.inspect.stats import stats_from_file
from dbt_delta_optimize.tasks import parquet_copy
from dbt_delta_optimize.tasks.arrow_schema import NeedsSparkRewrite, arrow_schema
from dbt_delta_optimize.tasks.parquet_copy import CopyInput, Reason, copy_compact
from dbt_delta_optimize.tasks.parquet_footer import (
    chunk_span,
    decode,
    encode,
    footer_of_bytes,
    leaf_paths,
    schema_difference,
    thrift,
)
from tests.helpers import rewrite_files

FIELDS = [
    {"name": "id", "type": "long", "nullable": True, "metadata": {}},
    {"name": "s", "type": "string", "nullable": True, "metadata": {}},
    {"name": "d", "type": "decimal(10,2)", "nullable": True, "metadata": {}},
    {"name": "ts", "type": "timestamp", "nullable": True, "metadata": {}},
    {
        "name": "arr",
        "type": {"type": "array", "elementType": "long", "containsNull": True},
        "nullable": True,
        "metadata": {},
    },
    {
        "name": "m",
        "type": {"type": "map", "keyType": "string", "valueType": "double", "valueContainsNull": True},
        "nullable": True,
        "metadata": {},
    },
    {
        "name": "st",
        "type": {"type": "struct", "fields": [{"name": "x", "type": "integer", "nullable": True, "metadata": {}}]},
        "nullable": True,
        "metadata": {},
    },
]
SCHEMA = {"type": "struct", "fields": FIELDS}
TARGET = arrow_schema(FIELDS)
MIN = 8 * 1024  # row groups of 8 KiB and more are copied


def rows(start: int, n: int, target: pa.Schema = TARGET) -> pa.Table:
    base = datetime.datetime(2021, 3, 4, tzinfo=datetime.timezone.utc)
    ids = range(start, start + n)
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "s": [None if i % 7 == 0 else f"value-{i:08d}" for i in ids],
            "d": [decimal.Decimal(i) / 100 for i in ids],
            "ts": [base + datetime.timedelta(seconds=i) for i in ids],
            "arr": [None if i % 5 == 0 else [i, None, -i] for i in ids],
            "m": pa.array([[(f"k{i % 3}", float(i) / 3)] for i in ids], pa.map_(pa.string(), pa.float64())),
            "st": [None if i % 11 == 0 else {"x": i % 1000} for i in ids],
        }
    ).cast(target)


def write(path: str, table: pa.Table, row_group_size: int, **kw) -> str:
    kw.setdefault("compression", "zstd")  # not the output's codec: a re-encoded chunk never equals its input
    pq.write_table(table, path, row_group_size=row_group_size, use_compliant_nested_type=True, **kw)
    return path


def opener(path: str):
    return open(path, "rb")


def rg_bytes(path: str) -> list[bytes]:
    """The bytes of each row group's column chunks (what a copy moves verbatim)."""
    with open(path, "rb") as fh:
        data = fh.read()
    footer = footer_of_bytes(data, path)
    out = []
    for rg in footer.meta.row_groups:
        spans = [chunk_span(c) for c in rg.columns]
        out.append(data[spans[0][0] : spans[-1][1]])
    return out


def copied_groups(inputs: list[str], output: str) -> int:
    """How many input row groups appear byte for byte in ``output``."""
    with open(output, "rb") as fh:
        out = fh.read()
    return sum(1 for p in inputs for chunk in rg_bytes(p) if out.find(chunk) >= 0)


def read_sorted(path_or_paths) -> pa.Table:
    paths = path_or_paths if isinstance(path_or_paths, list) else [path_or_paths]
    return pa.concat_tables([pq.read_table(p).cast(TARGET) for p in paths]).sort_by("id")


def duck(source: str) -> list[tuple]:
    """Every row as DuckDB reads it (its own Parquet reader), in id order."""
    return duckdb.sql(f"select * from {source} order by id").fetchall()


def assert_same(inputs: list[str], output: str) -> None:
    assert read_sorted(output).equals(read_sorted(inputs))
    files = ", ".join(f"'{p}'" for p in inputs)
    assert duck(f"read_parquet('{output}')") == duck(f"read_parquet([{files}])")


def stats(path: str) -> str:
    return stats_from_file(path, SCHEMA, [], {}, session_time_zone="UTC")


class WriteOnly:
    """A sink like a streaming upload: write() only, no seek, tell or read."""

    def __init__(self) -> None:
        self.parts: list[bytes] = []

    def write(self, data: bytes) -> int:
        self.parts.append(bytes(data))
        return len(data)

    def getvalue(self) -> bytes:
        return b"".join(self.parts)


@pytest.fixture
def mixed(tmp_path):
    """Two files of one large row group, one of five mid-sized, one of small row groups."""
    return [
        write(str(tmp_path / "a.parquet"), rows(0, 3000), 3000),
        write(str(tmp_path / "b.parquet"), rows(10_000, 3000), 600),
        write(str(tmp_path / "c.parquet"), rows(20_000, 300), 100),
        write(str(tmp_path / "d.parquet"), rows(30_000, 3000), 3000),
    ]


# ---------------------------------------------------------------------------- footers
def test_footers_round_trip_byte_for_byte(mixed):
    for p in mixed:
        with open(p, "rb") as fh:
            footer = footer_of_bytes(fh.read(), p)
        assert footer.exact and encode(footer.meta) == footer.raw
        assert footer.meta.num_rows == pq.ParquetFile(p).metadata.num_rows
    schema = pq.ParquetFile(mixed[-1]).schema
    expected = [[x.encode() for x in schema.column(i).path.split(".")] for i in range(len(schema))]
    assert leaf_paths(footer.meta.schema) == expected


def test_schema_difference_names_types_and_list_internals():
    def schema_of(table: pa.Table, **kw):
        buf = io.BytesIO()
        pq.write_table(table, buf, **kw)
        return footer_of_bytes(buf.getvalue()).meta.schema

    base = pa.table({"a": pa.array([[1]], pa.list_(pa.int64())), "b": [1]})
    compliant = schema_of(base, use_compliant_nested_type=True)
    legacy_names = schema_of(base, use_compliant_nested_type=False)  # list<item>, as delta-rs may write
    assert schema_difference(legacy_names, compliant) is None  # element names do not matter
    widened = schema_of(base.cast(pa.schema([("a", pa.list_(pa.int32())), ("b", pa.int64())])))
    assert "type" in schema_difference(widened, compliant)
    renamed = schema_of(base.rename_columns(["a", "B"]), use_compliant_nested_type=True)
    assert "name" in schema_difference(renamed, compliant)
    with_id = pa.schema(
        [pa.field("a", pa.list_(pa.int64())), pa.field("b", pa.int64(), metadata={b"PARQUET:field_id": b"7"})]
    )
    assert "field_id" in schema_difference(schema_of(base.cast(with_id), use_compliant_nested_type=True), compliant)


# ---------------------------------------------------------------------------- the copy
def test_mixed_bin_copies_large_row_groups_and_merges_small_ones(mixed, tmp_path):
    sink = WriteOnly()
    result = copy_compact([CopyInput(p) for p in mixed], sink, schema=TARGET, opener=opener, min_bytes=MIN)
    assert result.copied and result.fallback is None
    out = str(tmp_path / "out.parquet")
    with open(out, "wb") as fh:
        fh.write(sink.getvalue())
    large = [len(b) >= MIN for p in mixed for b in rg_bytes(p)]
    assert result.row_groups_copied == sum(large) >= 3
    assert result.row_groups_reencoded == len(large) - sum(large) >= 3
    assert copied_groups(mixed, out) == result.row_groups_copied
    assert result.rows == 9300 == pq.ParquetFile(out).metadata.num_rows
    assert result.size == os.path.getsize(out)
    assert result.row_groups_written == result.row_groups_copied + 1  # the small ones merged into one
    assert_same(mixed, out)
    # The footer: offsets point at the moved chunks, row groups numbered, nothing stale.
    footer = footer_of_bytes(sink.getvalue(), out)
    md = pq.ParquetFile(out).metadata
    assert md.created_by.startswith("parquet-cpp-arrow") and b"ARROW:schema" in md.metadata
    for i, rg in enumerate(footer.meta.row_groups):
        assert rg.ordinal == i and rg.file_offset == chunk_span(rg.columns[0])[0]
        for c in rg.columns:
            assert c.offset_index_offset is None and c.column_index_offset is None
            assert c.meta_data.bloom_filter_offset is None
    for i in range(md.num_row_groups):  # every chunk decodes where the footer says
        pq.ParquetFile(out).read_row_group(i)


def test_stats_from_the_merged_footer_equal_a_full_re_encode(mixed, tmp_path):
    copied, full = str(tmp_path / "copied.parquet"), str(tmp_path / "full.parquet")
    report: list = []
    assert rewrite_files(mixed, copied, FIELDS, copy_min_bytes=MIN, copy_report=report) == 9300
    assert report[0].row_groups_copied >= 3
    assert rewrite_files(mixed, full, FIELDS) == 9300
    assert copied_groups(mixed, full) == 0
    assert stats(copied) == stats(full)
    assert '"minValues":{"id":0' in stats(copied)


def test_spark_and_delta_rs_physical_types_are_matched(tmp_path):
    """INT96 timestamps and integer decimals (Spark's, delta-rs's) are copied: the output is written the same way."""
    a = write(
        str(tmp_path / "a.parquet"),
        rows(0, 3000),
        3000,
        use_deprecated_int96_timestamps=True,
        store_decimal_as_integer=True,
    )
    b = write(
        str(tmp_path / "b.parquet"),
        rows(5000, 300),
        300,
        use_deprecated_int96_timestamps=True,
        store_decimal_as_integer=True,
    )
    out = str(tmp_path / "out.parquet")
    with open(out, "wb") as sink:
        result = copy_compact([CopyInput(a), CopyInput(b)], sink, schema=TARGET, opener=opener, min_bytes=MIN)
    assert result.row_groups_copied == 1 and result.row_groups_reencoded == 1
    schema = pq.ParquetFile(out).schema
    assert schema.column(3).physical_type == "INT96" and schema.column(2).physical_type == "INT64"
    assert_same([a, b], out)
    full = str(tmp_path / "full.parquet")
    rewrite_files([a, b], full, FIELDS)
    assert stats(out) == stats(full)


def test_a_sink_that_fails_midway_raises(mixed):
    class Broken(WriteOnly):
        def write(self, data: bytes) -> int:
            if sum(map(len, self.parts)) > 20_000:
                raise OSError("upload failed")
            return super().write(data)

    with pytest.raises(OSError, match="upload failed"):
        copy_compact([CopyInput(p) for p in mixed], Broken(), schema=TARGET, opener=opener, min_bytes=MIN)


# ---------------------------------------------------------------------------- fallbacks
def fallback_through_rewrite_files(inputs: list[str], tmp_path, fields=FIELDS, **kw) -> tuple[Reason | None, str]:
    """The bin through rewrite_files with the copy on: the reason (if any) and the output."""
    out = str(tmp_path / "fallback.parquet")
    report: list = []
    rewrite_files(inputs, out, fields, copy_min_bytes=kw.pop("min_bytes", MIN), copy_report=report, **kw)
    return (report[0].fallback if report else None), out


def test_off_and_small_row_groups_re_encode(mixed, tmp_path):
    result = copy_compact([CopyInput(p) for p in mixed], WriteOnly(), schema=TARGET, opener=opener, min_bytes=0)
    assert result.fallback.kind == "off"
    sized = [CopyInput(p, size=os.path.getsize(p)) for p in mixed]
    result = copy_compact(sized, WriteOnly(), schema=TARGET, opener=opener, min_bytes=10**9)
    assert result.fallback.kind == "small_row_groups" and result.size == 0
    reason, out = fallback_through_rewrite_files(mixed, tmp_path, min_bytes=10**9)
    assert reason.kind == "small_row_groups"
    assert copied_groups(mixed, out) == 0
    assert_same(mixed, out)


def test_schema_difference_re_encodes_that_file_only(tmp_path):
    """Type widening: a file written before int -> long keeps INT32; it is re-encoded (cast), the others copied."""
    narrow = TARGET.set(0, pa.field("id", pa.int32()))
    old = write(str(tmp_path / "old.parquet"), rows(0, 3000, narrow), 3000)
    new = write(str(tmp_path / "new.parquet"), rows(5000, 3000), 3000)
    sink = WriteOnly()
    result = copy_compact([CopyInput(old), CopyInput(new)], sink, schema=TARGET, opener=opener, min_bytes=MIN)
    assert result.row_groups_copied == 1 and result.row_groups_reencoded == 1
    assert [r.kind for r in result.reencoded_because] == ["schema"]
    reason, out = fallback_through_rewrite_files([old], tmp_path)
    assert reason.kind == "schema" and "type" in reason.detail
    assert read_sorted(out).equals(read_sorted([old]))


def test_caller_reasons_re_encode_the_bin(mixed):
    for kind in ("clustering", "type_widening", "deletion_vectors", "row_tracking"):
        reason = Reason(kind, "said the caller")
        sink = WriteOnly()
        result = copy_compact(
            [CopyInput(p) for p in mixed], sink, schema=TARGET, opener=opener, min_bytes=MIN, reasons=[reason]
        )
        assert result.fallback == reason and sink.parts == []


def test_legacy_calendar_falls_back_to_spark(tmp_path, mixed):
    meta = {b"org.apache.spark.legacyDateTime": b"", b"org.apache.spark.version": b"3.0.0"}
    legacy = write(str(tmp_path / "legacy.parquet"), rows(50_000, 3000).replace_schema_metadata(meta), 3000)
    sink = WriteOnly()
    result = copy_compact([CopyInput(mixed[0]), CopyInput(legacy)], sink, schema=TARGET, opener=opener, min_bytes=MIN)
    assert result.fallback.kind == "legacy_calendar" and sink.parts == []
    with pytest.raises(NeedsSparkRewrite, match="legacy"):
        fallback_through_rewrite_files([mixed[0], legacy], tmp_path)


class _Kms:
    """A key 'service' in memory for writing an encrypted test file (keys are only base64-wrapped)."""

    def __new__(cls, config):
        import pyarrow.parquet.encryption as pe

        class Client(pe.KmsClient):
            def wrap_key(self, key_bytes, master_key_identifier):
                return base64.b64encode(key_bytes)

            def unwrap_key(self, wrapped_key, master_key_identifier):
                return base64.b64decode(wrapped_key)

        return Client()


@pytest.mark.parametrize("plaintext_footer", [False, True])
def test_encrypted_files_are_never_copied(tmp_path, mixed, plaintext_footer):
    import pyarrow.parquet.encryption as pe

    factory = pe.CryptoFactory(_Kms)
    config = pe.EncryptionConfiguration(
        footer_key="f", column_keys={"c": ["id"]}, plaintext_footer=plaintext_footer, double_wrapping=False
    )
    props = factory.file_encryption_properties(pe.KmsConnectionConfig(), config)
    secret = str(tmp_path / "secret.parquet")
    with pq.ParquetWriter(secret, TARGET, encryption_properties=props) as w:
        w.write_table(rows(0, 3000))
    sink = WriteOnly()
    result = copy_compact([CopyInput(mixed[0]), CopyInput(secret)], sink, schema=TARGET, opener=opener, min_bytes=MIN)
    assert result.fallback.kind == "encrypted" and sink.parts == []


def _rewrite_footer(path: str, change) -> None:
    """Rewrite a file's footer in place with ``change(meta)`` applied (data pages untouched)."""
    with open(path, "rb") as fh:
        data = fh.read()
    footer = footer_of_bytes(data, path)
    meta = decode(footer.raw)
    change(meta)
    raw = encode(meta)
    with open(path, "wb") as fh:
        fh.write(data[: footer.start] + raw + len(raw).to_bytes(4, "little") + b"PAR1")


def test_a_footer_with_unknown_fields_is_not_copied_from(tmp_path, mixed):
    """A newer writer's field our IDL lacks would be dropped by a copy: such a file is re-encoded."""
    import thriftpy2

    with open(os.path.join(os.path.dirname(parquet_copy.__file__), "parquet_footer.thrift")) as fh:
        idl = fh.read().replace(
            "9: optional binary footer_signing_key_metadata",
            "9: optional binary footer_signing_key_metadata\n  20: optional i32 future",
        )
    newer = thriftpy2.load_fp(io.StringIO(idl), module_name="newer_footer_thrift")
    future = write(str(tmp_path / "future.parquet"), rows(60_000, 3000), 3000)
    with open(future, "rb") as fh:
        data = fh.read()
    start = footer_of_bytes(data).start
    from thriftpy2.protocol import TCompactProtocolFactory
    from thriftpy2.utils import deserialize, serialize

    meta = deserialize(newer.FileMetaData(), footer_of_bytes(data).raw, TCompactProtocolFactory())
    meta.future = 42
    raw = serialize(meta, TCompactProtocolFactory())
    with open(future, "wb") as fh:
        fh.write(data[:start] + raw + len(raw).to_bytes(4, "little") + b"PAR1")
    assert pq.read_table(future).num_rows == 3000  # readers skip the field
    out = str(tmp_path / "out.parquet")
    with open(out, "wb") as sink:
        result = copy_compact(
            [CopyInput(mixed[0]), CopyInput(future)], sink, schema=TARGET, opener=opener, min_bytes=MIN
        )
    assert result.row_groups_copied == 1 and [r.kind for r in result.reencoded_because] == ["footer"]
    assert copied_groups([future], out) == 0
    assert_same([mixed[0], future], out)


def test_chunks_outside_one_range_are_not_copied(tmp_path, mixed):
    odd = write(str(tmp_path / "odd.parquet"), rows(70_000, 3000), 3000)

    def gap(meta):  # claim a byte less for the first chunk: the chunks no longer touch
        meta.row_groups[0].columns[0].meta_data.total_compressed_size -= 1

    _rewrite_footer(odd, lambda meta: None)
    assert copy_compact([CopyInput(odd)], WriteOnly(), schema=TARGET, opener=opener, min_bytes=MIN).copied
    _rewrite_footer(odd, gap)
    sink = WriteOnly()
    result = copy_compact([CopyInput(odd)], sink, schema=TARGET, opener=opener, min_bytes=MIN)
    assert result.fallback.kind == "layout" and sink.parts == []


def test_row_tracking_columns_with_nulls_are_filled_by_re_encoding(tmp_path):
    """A row group whose row-id column has nulls is re-encoded (ids = baseRowId + position); full ones are copied."""
    fields = [*FIELDS[:2]]
    rt = {"row_id": "_row_id", "commit_version": "_row_cv", "files": [[1000, 3], [5000, 4]]}
    target = arrow_schema([*fields, *[{"name": c, "type": "long"} for c in ("_row_id", "_row_cv")]])

    def table(start: int, ids) -> pa.Table:
        t = rows(start, 3000).select(["id", "s"])
        return t.append_column("_row_id", pa.array(ids, pa.int64())).append_column(
            "_row_cv", pa.array([1] * 3000, pa.int64())
        )

    full = write(str(tmp_path / "full.parquet"), table(0, range(7, 3007)).cast(target), 3000)
    holes = write(
        str(tmp_path / "holes.parquet"), table(9000, [None if i % 2 else i for i in range(3000)]).cast(target), 3000
    )
    out = str(tmp_path / "out.parquet")
    report: list = []
    assert rewrite_files([full, holes], out, fields, row_tracking=rt, copy_min_bytes=MIN, copy_report=report) == 6000
    assert report[0].row_groups_copied == 1 and [r.kind for r in report[0].reencoded_because] == ["row_tracking"]
    got = pq.read_table(out).sort_by("id").to_pydict()
    assert got["_row_id"][:3000] == list(range(7, 3007))
    assert got["_row_id"][3000:] == [5000 + i if i % 2 else i for i in range(3000)]


def test_deletion_vector_inputs_are_re_encoded_without_their_deleted_rows(tmp_path, mixed, monkeypatch):
    import numpy as np

    from dbt_delta_optimize.delta import deletion_vectors
    from dbt_delta_optimize.delta.deletion_vectors import DeletedRows

    dv = {"storageType": "i", "pathOrInlineDv": "x", "sizeInBytes": 1, "cardinality": 2}
    out = str(tmp_path / "out.parquet")
    report: list = []
    inputs = [mixed[0], {"path": mixed[3], "deletionVector": dv}]
    monkeypatch.setattr(deletion_vectors, "load_deleted_rows", lambda *_a, **_k: DeletedRows(np.array([0, 2999])))
    n = rewrite_files(inputs, out, FIELDS, copy_min_bytes=MIN, copy_report=report)
    assert n == 5998 and report[0].row_groups_copied == 1
    assert [r.kind for r in report[0].reencoded_because] == ["deletion_vectors"]
    ids = pq.read_table(out).column("id").to_pylist()
    assert 30_000 not in ids and 32_999 not in ids and 30_001 in ids and len(ids) == 5998


def test_no_thrift_library_falls_back(monkeypatch, mixed):
    def missing():
        raise ImportError("No module named 'thriftpy2'")

    monkeypatch.setattr(parquet_copy, "thrift", missing)
    result = copy_compact([CopyInput(p) for p in mixed], WriteOnly(), schema=TARGET, opener=opener, min_bytes=MIN)
    assert result.fallback.kind == "unavailable" and "thriftpy2" in result.fallback.detail


def test_thrift_module_loads_from_package_data():
    assert thrift().FileMetaData.__name__ == "FileMetaData"


def test_the_shipped_zip_carries_the_footer_idl(tmp_path):
    """Executors import the package from the zip Spark ships: the IDL is in it and loads from there."""
    import subprocess
    import sys

    from dbt_delta_optimize.engine.python_tasks import package_zip

    archive = package_zip(str(tmp_path))
    code = (
        "import sys; sys.path.insert(0, sys.argv[1]);"
        "from dbt_delta_optimize.tasks import parquet_footer as f;"
        "assert f.__file__.startswith(sys.argv[1]), f.__file__;"
        "print(f.thrift().FileMetaData.__name__)"
    )
    out = subprocess.run([sys.executable, "-c", code, archive], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "FileMetaData"


def test_int96_is_never_chosen_with_a_timestamp_ntz_column(tmp_path):
    """INT96 inputs of a table with a TIMESTAMP_NTZ column are re-encoded (Spark reads no NTZ from INT96)."""
    fields = [FIELDS[0], {"name": "local", "type": "timestamp_ntz", "nullable": True, "metadata": {}}]
    target = arrow_schema(fields)
    data = pa.table({"id": list(range(3000)), "local": [datetime.datetime(2020, 1, 1)] * 3000}).cast(target)
    a = write(str(tmp_path / "a.parquet"), data, 3000, use_deprecated_int96_timestamps=True)
    sink = WriteOnly()
    result = copy_compact([CopyInput(a)], sink, schema=target, opener=opener, min_bytes=MIN)
    assert result.fallback.kind == "schema" and sink.parts == []


def test_the_result_carries_the_output_metadata(mixed, tmp_path):
    """A streaming upload cannot be read back: the result's footer gives the output's metadata (for stats)."""
    from dbt_delta_optimize.inspect.stats import stats_from_parquet

    out = str(tmp_path / "out.parquet")
    with open(out, "wb") as sink:
        result = copy_compact([CopyInput(p) for p in mixed], sink, schema=TARGET, opener=opener, min_bytes=MIN)
    metadata = result.metadata()
    assert metadata.equals(pq.read_metadata(out))
    assert stats_from_parquet(metadata, SCHEMA, [], {}) == stats_from_parquet(pq.read_metadata(out), SCHEMA, [], {})


def test_local_files_are_copied_inside_the_kernel_byte_for_byte_as_streamed(mixed, tmp_path, monkeypatch):
    """Between local files the copied ranges go through os.copy_file_range, after whatever a buffered sink
    holds; the file is byte for byte what a write-only (streamed) sink gets, which never takes that path."""
    import os

    calls = []
    real = os.copy_file_range

    def counting(src, dst, count, offset_src=None, offset_dst=None):
        calls.append(count)
        return real(src, dst, count, offset_src, offset_dst)

    monkeypatch.setattr(os, "copy_file_range", counting)
    streamed = WriteOnly()
    copy_compact([CopyInput(p) for p in mixed], streamed, schema=TARGET, opener=opener, min_bytes=MIN)
    assert calls == []
    out = str(tmp_path / "kernel.parquet")
    with open(out, "wb") as sink:  # buffered: MAGIC and re-encoded row groups wait in its buffer
        result = copy_compact([CopyInput(p) for p in mixed], sink, schema=TARGET, opener=opener, min_bytes=MIN)
    assert calls and result.bytes_copied > 0
    with open(out, "rb") as fh:
        assert fh.read() == streamed.getvalue()
    assert_same(mixed, out)

    def unsupported(*_args, **_kw):  # another filesystem, or a kernel without it: the block copy does it all
        raise OSError(18, "Invalid cross-device link")

    monkeypatch.setattr(os, "copy_file_range", unsupported)
    again = str(tmp_path / "fallback.parquet")
    with open(again, "wb") as sink:
        copy_compact([CopyInput(p) for p in mixed], sink, schema=TARGET, opener=opener, min_bytes=MIN)
    with open(again, "rb") as fh:
        assert fh.read() == streamed.getvalue()
