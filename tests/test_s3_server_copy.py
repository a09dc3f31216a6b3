"""The row-group copy on S3 (a moto server): large row groups copied inside the store with UploadPartCopy.

The bytes that pass through this process are counted where they do: every read and write of our
obstore-backed Storage, and every request and response body of botocore. Compacting files of one
large row group each must move under 10% of their bytes; the rows are read back by delta-rs and
pyarrow. A store that refuses the copy gets the bytes uploaded instead, in the same upload.
"""

from __future__ import annotations

import io
import logging

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable, WriterProperties, write_deltalake

from dbt_delta_optimize.api import optimize
from dbt_delta_optimize.delta import object_store
from dbt_delta_optimize.delta.object_store import store_options
from dbt_delta_optimize.delta.s3_copy import MIN_PART, S3CopyOutput, s3_client, s3_connector
from dbt_delta_optimize.delta.storage import storage_for
from dbt_delta_optimize.tasks.parquet_footer import footer_of_bytes
from tests.helpers import deltalake_table

FILES = 8
ROWS = 320_000  #: one row group of about 6 MiB (random integers: hardly compressible)


class Counted:
    """Bytes through the process: obstore reads and writes via our Storage, botocore request and response bodies."""

    def __init__(self, monkeypatch) -> None:
        self.bytes = 0
        counter = self
        reader_readinto = object_store._Reader.readinto
        writer_write = object_store._Writer.write
        read_bytes = object_store.ObjectStorage.read_bytes

        def readinto(self, buffer):
            n = reader_readinto(self, buffer)
            counter.bytes += n
            return n

        def write(self, data):
            n = writer_write(self, data)
            counter.bytes += n
            return n

        def read_all(self, path):
            data = read_bytes(self, path)
            counter.bytes += len(data)
            return data

        monkeypatch.setattr(object_store._Reader, "readinto", readinto)
        monkeypatch.setattr(object_store._Writer, "write", write)
        monkeypatch.setattr(object_store.ObjectStorage, "read_bytes", read_all)

        import botocore.endpoint

        send = botocore.endpoint.Endpoint._send

        def counted_send(self, request):
            body = request.body
            if isinstance(body, bytes | bytearray):
                counter.bytes += len(body)
            elif body is not None and hasattr(body, "seek"):
                counter.bytes += body.seek(0, io.SEEK_END)
                body.seek(0)
            response = send(self, request)
            counter.bytes += int(response.headers.get("content-length") or 0)  # a streamed body is not read here
            return response

        monkeypatch.setattr(botocore.endpoint.Endpoint, "_send", counted_send)


@pytest.fixture
def s3_env(s3_server, monkeypatch):
    for key, value in s3_server.env().items():
        monkeypatch.setenv(key, value)
    return s3_server


def _build(url: str, files: int = FILES) -> tuple[int, list[int]]:
    rng = np.random.default_rng(3)
    props = WriterProperties(max_row_group_size=ROWS + 1, compression="SNAPPY")
    for k in range(files):
        ids = np.arange(k * ROWS, (k + 1) * ROWS, dtype=np.int64)
        # no float column: its Delta stats are read from the data (Parquet's bounds skip NaN), a cost of its own
        v, w = rng.integers(0, 2**62, ROWS), rng.integers(0, 2**31 - 1, ROWS, dtype=np.int32)
        data = pa.table({"id": ids, "v": v, "w": w, "p": ["a"] * ROWS})
        write_deltalake(url, data, mode="append", writer_properties=props, partition_by=["p"])
    small = {"id": np.arange(-50, 0), "v": np.arange(50), "w": np.arange(50, dtype=np.int32), "p": ["a"] * 50}
    write_deltalake(url, pa.table(small), mode="append", partition_by=["p"])
    adds = pa.table(DeltaTable(url).get_add_actions(flatten=True)).to_pydict()
    return sum(adds["size_bytes"]), sorted(adds["num_records"])


def _rows(url: str) -> pa.Table:
    """The table as delta-rs reads it, sorted; its one partition value checked and dropped."""
    t = deltalake_table(url)
    assert set(t.column("p").to_pylist()) == {"a"}
    return t.drop_columns(["p"]).sort_by("id")


def test_large_row_groups_are_copied_inside_the_store(s3_env):
    url = f"s3://{s3_env.new_bucket()}/t"
    size, counts = _build(url)
    assert counts == [50] + [ROWS] * FILES and size > FILES * MIN_PART
    before = _rows(url)
    with pytest.MonkeyPatch.context() as patch:
        counted = Counted(patch)
        m = optimize(None, url, row_group_copy_min_bytes=str(MIN_PART), max_file_size="1g", min_file_size="1g")
    assert (m.num_files_removed, m.num_files_added) == (FILES + 1, 1)
    assert counted.bytes < size / 10, f"{counted.bytes} bytes went through the process for {size} of input"
    assert _rows(url).equals(before)
    add = pa.table(DeltaTable(url).get_add_actions(flatten=True)).to_pylist()[0]
    assert (add["num_records"], add["min.id"], add["max.id"]) == (FILES * ROWS + 50, -50, FILES * ROWS - 1)
    (new,) = DeltaTable(url).file_uris()
    assert new.startswith(f"{url}/p=a/")  # in its partition's folder, as the usual rewrite puts it
    data = storage_for(url).read_bytes(new)
    meta = footer_of_bytes(data, new).meta
    assert [rg.num_rows for rg in meta.row_groups] == [ROWS] * FILES + [50]  # large ones copied, the small re-encoded
    assert pq.read_table(pa.BufferReader(data)).sort_by("id").equals(before)


def _refuse_copies(client) -> None:
    """The store answers UploadPartCopy as one without it does: 501 NotImplemented (botocore raises its ClientError)."""

    class Refused:
        status_code = 501

    def refuse(**_):
        return Refused(), {"Error": {"Code": "NotImplemented", "Message": "no copy here"}}

    client.meta.events.register("before-call.s3.UploadPartCopy", refuse)


def test_a_store_without_the_copy_gets_todays_copy_with_one_warning(s3_env, monkeypatch, caplog):
    from dbt_delta_optimize.delta import s3_copy

    made = s3_copy.s3_connector

    def refusing(*args):
        connect = made(*args)

        def refused_client():
            client = connect()
            _refuse_copies(client)
            return client

        return refused_client

    monkeypatch.setattr(s3_copy, "s3_connector", refusing)
    url = f"s3://{s3_env.new_bucket()}/t"
    size, _ = _build(url, files=3)
    before = _rows(url)
    with caplog.at_level(logging.WARNING), pytest.MonkeyPatch.context() as patch:
        counted = Counted(patch)
        m = optimize(None, url, row_group_copy_min_bytes=str(MIN_PART), max_file_size="1g", min_file_size="1g")
    assert (m.num_files_removed, m.num_files_added) == (4, 1)
    assert counted.bytes > size  # read and written here
    assert sum("refused a server-side copy" in r.message for r in caplog.records) == 1
    assert _rows(url).equals(before)
    (new,) = DeltaTable(url).file_uris()
    meta = footer_of_bytes(storage_for(url).read_bytes(new), new).meta
    assert [rg.num_rows for rg in meta.row_groups] == [ROWS] * 3 + [50]  # still copied, through the process


def _upload(client, bucket: str, key: str, data: bytes) -> None:
    client.put_object(Bucket=bucket, Key=key, Body=data)


def test_a_refused_copy_uploads_the_bytes_in_the_same_upload(s3_env, caplog):
    """The store answers UploadPartCopy with 501 NotImplemented: the ranges go through here, the file is exact."""
    bucket = s3_env.new_bucket()
    client = s3_client(*store_options("aws", s3_env.env()))
    assert client is not None
    rng = np.random.default_rng(5)
    source = b"PAR1" + rng.bytes(MIN_PART + 1000)
    _upload(client, bucket, "t/a.parquet", source)
    _refuse_copies(client)
    out = S3CopyOutput(lambda: client, bucket, "t/out.parquet", "t", RuntimeError)
    out.write(b"PAR1")
    reads: list[tuple[int, int]] = []

    def read(start: int, n: int) -> bytes:
        reads.append((start, n))
        return source[start : start + n]

    with caplog.at_level(logging.WARNING):
        assert out.copy_range(f"s3://{bucket}/t/a.parquet", 4, len(source), read)
        assert not out.copy_range(f"s3://{bucket}/t/a.parquet", 4, len(source), read)  # refused once: no retry
        later = S3CopyOutput(lambda: client, bucket, "t/b.parquet", "t", RuntimeError, store_state=out.store_state)
        assert not later.copy_range(f"s3://{bucket}/t/a.parquet", 4, len(source), read)  # nor by the store's others
    out.write(b"tail")
    out.close()
    got = client.get_object(Bucket=bucket, Key="t/out.parquet")["Body"].read()
    assert got == source + b"tail"
    assert reads == [(0, len(source))]
    assert sum("refused a server-side copy" in r.message for r in caplog.records) == 1
    # outside the table root, or a range too short for a part: never copied
    assert not S3CopyOutput(lambda: client, bucket, "u/o", "u", RuntimeError).copy_range(
        f"s3://{bucket}/t/a.parquet", 4, len(source), read
    )


def test_bytes_before_a_copied_range_make_a_part_of_their_own(s3_env):
    """A copied range after bytes its source does not hold: the buffer is topped up to 5 MiB from the range."""
    bucket = s3_env.new_bucket()
    client = s3_client(*store_options("aws", s3_env.env()))
    source = np.random.default_rng(6).bytes(2 * MIN_PART + 300)
    _upload(client, bucket, "t/a.parquet", source)
    out = S3CopyOutput(lambda: client, bucket, "t/out.parquet", "t", RuntimeError)
    out.write(b"head")
    reads: list[tuple[int, int]] = []

    def read(start: int, n: int) -> bytes:
        reads.append((start, n))
        return source[start : start + n]

    assert out.copy_range(f"s3://{bucket}/t/a.parquet", 100, len(source), read)
    out.write(b"tail")
    out.close()
    got = client.get_object(Bucket=bucket, Key="t/out.parquet")["Body"].read()
    assert got == b"head" + source[100:] + b"tail"
    assert reads == [(100, MIN_PART - 4)] and out.counts["server_copied"] == len(source) - 100 - (MIN_PART - 4)
    assert len(out.parts) == 3  # uploaded 5 MiB, copied the rest, the tail last


def test_settings_botocore_would_not_honour_keep_the_copy_in_the_process(monkeypatch):
    """No server: what decides whether the copy may run inside the store (nothing is connected to)."""
    for key in [k for k in __import__("os").environ if k.startswith("AWS_")]:
        monkeypatch.delenv(key)
    keys = {"AWS_ACCESS_KEY_ID": "k", "AWS_SECRET_ACCESS_KEY": "s", "AWS_REGION": "eu-west-1"}
    assert callable(s3_connector(*store_options("aws", keys)))
    assert s3_connector(*store_options("aws", {**keys, "AWS_SSE_KMS_KEY_ID": "arn:k"})) is None
    assert s3_connector(*store_options("aws", {**keys, "AWS_ENDPOINT_URL": "http://h:9000"})) is None
    http = {**keys, "AWS_ENDPOINT_URL": "http://h:9000", "AWS_ALLOW_HTTP": "true"}
    assert callable(s3_connector(*store_options("aws", http)))
    assert storage_for("az://c/t", {}).open_copy_output("az://c/t/a.parquet", "az://c/t") is None
    out = storage_for("s3://b/t", keys).open_copy_output("s3://b/t/x.parquet", "s3://b/t")
    assert out is not None and out.key == "t/x.parquet" and out.root == "t" and not out._made  # no client yet
    # copied sources: keys as the store has them, only under the table root in the same bucket
    assert out._source_key("s3a://b/t/p=a#1?/x.parquet") == "t/p=a#1?/x.parquet"
    assert [out._source_key(p) for p in ("s3://b/u/x", "s3://c/t/x", "s3://b/t/../u/x", "s3://b/tt/x")] == [None] * 4
