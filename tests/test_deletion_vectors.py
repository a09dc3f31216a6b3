"""Deletion vectors are read through the storage, checked (size, checksum, cardinality, path) and decoded."""

from __future__ import annotations

import struct
import uuid
import zlib

import pytest
from pyroaring import BitMap

from dbt_delta_optimize.delta.actions import DeletionVector
from dbt_delta_optimize.delta.deletion_vectors import DV_MAGIC, deleted_rows, dv_location, z85_decode
from dbt_delta_optimize.delta.storage import LocalStorage
from dbt_delta_optimize.errors import CorruptLogError, UnsafePathError

Z85 = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#"


def z85_encode(data: bytes) -> str:
    padded = data + b"\0" * (-len(data) % 4)
    out = []
    for i in range(0, len(padded), 4):
        value = int.from_bytes(padded[i : i + 4], "big")
        chars = []
        for _ in range(5):
            value, r = divmod(value, 85)
            chars.append(Z85[r])
        out.append("".join(reversed(chars)))
    text = "".join(out)
    return text[: len(text) - (-len(data) % 4)] if len(data) % 4 else text


def payload(rows: list[int]) -> bytes:
    by_high: dict[int, list[int]] = {}
    for r in rows:
        by_high.setdefault(r >> 32, []).append(r & 0xFFFFFFFF)
    out = struct.pack("<iq", DV_MAGIC, len(by_high))
    for high in sorted(by_high):
        out += struct.pack("<i", high) + BitMap(by_high[high]).serialize()
    return out


def dv_file(tmp_path, rows: list[int], prefix: str = "") -> DeletionVector:
    u = uuid.uuid4()
    data = payload(rows)
    block = b"\x01" + struct.pack(">i", len(data)) + data + struct.pack(">I", zlib.crc32(data))
    folder = tmp_path / prefix if prefix else tmp_path
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"deletion_vector_{u}.bin").write_bytes(block)
    return DeletionVector("u", prefix + z85_encode(u.bytes), len(data), len(rows), 1)


def test_z85_round_trip():
    for data in (b"", b"\x00", b"\x86\x4f\xd2\x6f\xb5\x59\xf7\x5b", bytes(range(23))):
        assert z85_decode(z85_encode(data)) == data
    assert z85_encode(b"\x86\x4f\xd2\x6f\xb5\x59\xf7\x5b") == "HelloWorld"  # the Z85 spec's example


@pytest.mark.parametrize("prefix", ["", "ab"])
def test_uuid_relative_file(tmp_path, prefix):
    rows = [0, 3, 7, 70_000, 2**32 + 5]
    dv = dv_file(tmp_path, rows, prefix)
    assert dv_location(dv, str(tmp_path)).startswith(str(tmp_path / prefix) if prefix else str(tmp_path))
    assert deleted_rows(dv, root=str(tmp_path), storage=LocalStorage()) == rows


def test_inline(tmp_path):
    rows = list(range(0, 100, 3))
    data = payload(rows)
    dv = DeletionVector("i", z85_encode(data), len(data), len(rows))
    assert deleted_rows(dv, root=str(tmp_path), storage=LocalStorage()) == rows


def test_absolute_path(tmp_path):
    rows = [1, 2]
    rel = dv_file(tmp_path / "other", rows)
    path = dv_location(rel, str(tmp_path / "other"))
    absolute = DeletionVector("p", "file://" + path, rel.size_in_bytes, 2, 1)
    assert deleted_rows(absolute, root=str(tmp_path), storage=LocalStorage()) == rows


def test_checksum_size_cardinality_and_missing_file_are_refused(tmp_path):
    root, storage = str(tmp_path), LocalStorage()
    dv = dv_file(tmp_path, [1, 2, 3])
    path = dv_location(dv, root)
    with pytest.raises(CorruptLogError, match="cardinality"):
        deleted_rows(
            DeletionVector(dv.storage_type, dv.path_or_inline_dv, dv.size_in_bytes, 4, 1), root=root, storage=storage
        )
    with pytest.raises(CorruptLogError, match="stored size"):
        deleted_rows(
            DeletionVector(dv.storage_type, dv.path_or_inline_dv, dv.size_in_bytes - 1, 3, 1),
            root=root,
            storage=storage,
        )
    with open(path, "rb") as fh:
        raw = bytearray(fh.read())
    raw[10] ^= 0xFF
    with open(path, "wb") as fh:
        fh.write(bytes(raw))
    with pytest.raises(CorruptLogError, match="checksum"):
        deleted_rows(dv, root=root, storage=storage)
    missing = DeletionVector("u", z85_encode(uuid.uuid4().bytes), 10, 1, 1)
    with pytest.raises(CorruptLogError, match="missing"):
        deleted_rows(missing, root=root, storage=storage)
    with pytest.raises(CorruptLogError, match="sizeInBytes"):
        deleted_rows(DeletionVector("u", dv.path_or_inline_dv, 2**40, 3, 1), root=root, storage=storage)


def test_prefix_escaping_the_root_is_refused(tmp_path):
    dv = DeletionVector("u", "../../" + z85_encode(uuid.uuid4().bytes), 10, 1, 1)
    with pytest.raises(UnsafePathError):
        dv_location(dv, str(tmp_path))


def test_log_replay_keys_files_by_path_and_dv():
    """A DELETE writes add(path, new DV) and remove(path, old DV) in one commit: the file stays live."""
    from dbt_delta_optimize.delta.file_table import _CommitReplay

    dv = {"storageType": "u", "pathOrInlineDv": "ab" + "0" * 20, "offset": 1, "sizeInBytes": 34, "cardinality": 2}
    add = {"path": "p.parquet", "partitionValues": {}, "size": 10, "modificationTime": 0, "dataChange": True}
    replay = _CommitReplay()
    replay.apply(0, {"add": add})
    replay.apply(1, {"add": {**add, "deletionVector": dv}})
    replay.apply(1, {"remove": {"path": "p.parquet", "dataChange": True}})
    assert replay.latest == {"p.parquet": 1} and not replay.removed
    replay.apply(2, {"remove": {"path": "p.parquet", "deletionVector": dv}})
    assert replay.latest == {} and replay.removed == {"p.parquet"}


def test_deleted_rows_filter_by_position():
    import numpy as np

    from dbt_delta_optimize.delta.deletion_vectors import DeletedRows

    deleted = DeletedRows(np.array([0, 3, 7, 12], dtype=np.int64))
    assert deleted.keep(0, 5).to_pylist() == [False, True, True, False, True]
    assert deleted.keep(5, 5).to_pylist() == [True, True, False, True, True]
    assert deleted.keep(8, 4) is None  # nothing deleted among rows 8..11
    assert deleted.keep(12, 1).to_pylist() == [False]


# ----------------------------------------------------------------------------- the portable Roaring decoder
def _rows_strategy():
    from hypothesis import strategies as st

    sparse = st.lists(st.integers(0, 2**20), max_size=300)
    runs = st.lists(st.tuples(st.integers(0, 2**19), st.integers(1, 9000)), max_size=6).map(
        lambda spans: [r for start, n in spans for r in range(start, start + n)]
    )
    dense = st.tuples(st.integers(0, 40), st.integers(4097, 60000)).map(
        lambda t: [t[0] * 65536 + k for k in range(0, 65536, max(1, 65536 // t[1]))]
    )
    high = st.lists(st.integers(0, 2**40), max_size=20)  # several 32-bit bitmaps
    return st.lists(st.one_of(sparse, runs, dense, high), min_size=1, max_size=3).map(
        lambda parts: sorted({r for p in parts for r in p})
    )


def _payload_with_runs(rows: list[int], run_optimize: bool) -> bytes:
    by_high: dict[int, list[int]] = {}
    for r in rows:
        by_high.setdefault(r >> 32, []).append(r & 0xFFFFFFFF)
    out = struct.pack("<iq", DV_MAGIC, len(by_high))
    for high in sorted(by_high):
        bitmap = BitMap(by_high[high])
        if run_optimize:  # delta-spark's writer run-optimizes its bitmaps: run containers in the file
            bitmap.run_optimize()
        out += struct.pack("<i", high) + bitmap.serialize()
    return out


def test_the_numpy_decoder_reads_what_roaring_writes():
    """Array, bitmap and run containers, one or many 32-bit bitmaps: the rows pyroaring serialized, exactly."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from dbt_delta_optimize.delta.deletion_vectors import _decode

    @settings(max_examples=150, deadline=None)
    @given(_rows_strategy(), st.booleans())
    def check(rows, run_optimize):
        decoded = _decode(_payload_with_runs(rows, run_optimize))
        assert decoded.dtype.kind == "i" and decoded.tolist() == rows

    check()


def test_damaged_bitmaps_are_a_clear_error_never_a_crash(tmp_path):
    """Truncated or altered payloads (with a matching checksum: the log is untrusted) end in CorruptLogError."""
    import random

    rows = sorted({*range(100, 9000), *range(70000, 70100, 3), 2**33 + 5})
    good = _payload_with_runs(rows, run_optimize=True)
    rng = random.Random(7)
    damaged = [good[:n] for n in (12, 16, 20, len(good) // 2, len(good) - 1)]
    for _ in range(200):
        data = bytearray(good)
        for _ in range(rng.randint(1, 4)):
            data[rng.randrange(12, len(data))] = rng.randrange(256)
        damaged.append(bytes(data))
    for n, data in enumerate(damaged):
        u = uuid.uuid4()
        block = b"\x01" + struct.pack(">i", len(data)) + data + struct.pack(">I", zlib.crc32(data))
        (tmp_path / f"deletion_vector_{u}.bin").write_bytes(block)
        dv = DeletionVector("u", z85_encode(u.bytes), len(data), len(rows), 1)
        try:
            out = deleted_rows(dv, root=str(tmp_path), storage=LocalStorage())
        except CorruptLogError as exc:
            assert "is invalid" in str(exc), (n, exc)
        else:  # a flip that still decodes must still hold the declared number of rows
            assert len(out) == len(rows), n
