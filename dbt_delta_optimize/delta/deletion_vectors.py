"""Deletion vectors: resolve a descriptor, read it through a Storage, check it, decode the rows.

A deletion vector (PROTOCOL.md, "Deletion Vector Format") marks rows of one data file as
deleted. Its descriptor is untrusted input like every log entry: the size, offset, checksum
and cardinality are all checked, and a UUID-relative file must stay inside the table root.

Storage forms: ``i`` inline (Z85 bytes in the log), ``u`` a ``deletion_vector_<uuid>.bin`` file
under the table root (optionally below a random prefix folder), ``p`` an absolute path.
On disk a DV file is a version byte (1) and blocks of [size: int32 BE][payload][CRC-32: int32 BE];
the descriptor's offset points at the size. The payload is a RoaringBitmapArray: magic 1681511377
(int32 LE), the number of 32-bit bitmaps (int64 LE), then per bitmap its high 32 bits (int32 LE)
and a portable-format Roaring bitmap, decoded here with numpy (``_portable``).
"""

from __future__ import annotations

import itertools
import struct
import uuid
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..errors import CorruptLogError
from .actions import DeletionVector
from .paths import check_log_path
from .storage import Storage, join, local_path

__all__ = ["DV_MAGIC", "DeletedRows", "deleted_rows", "dv_location", "load_deleted_rows", "z85_decode"]

DV_MAGIC = 1681511377
_Z85 = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#"
_Z85_INDEX = {c: i for i, c in enumerate(_Z85)}
#: A DV larger than this is not plausible for one data file (2^31 rows as a full bitmap is ~256 MiB).
MAX_DV_BYTES = 512 * 1024 * 1024


def _bad(dv: DeletionVector, table: str, why: str) -> CorruptLogError:
    return CorruptLogError(
        f"A deletion vector of '{table}' ({dv.storage_type}:{dv.path_or_inline_dv[:60]}) is invalid: {why}. "
        "Its rows cannot be read safely, so nothing was written. Check the table with delta-spark "
        "(e.g. REORG TABLE ... APPLY (PURGE) there), or restore the DV file."
    )


def z85_decode(text: str) -> bytes:
    """Decode Z85 (ZeroMQ's base85, which Delta uses); a partial last group decodes to fewer bytes."""
    out = bytearray()
    for i in range(0, len(text), 5):
        chunk = text[i : i + 5]
        pad = 5 - len(chunk)
        value = 0
        for ch in chunk + "#" * pad:
            value = value * 85 + _Z85_INDEX[ch]
        out += value.to_bytes(4, "big")[: 4 - pad] if pad else value.to_bytes(4, "big")
    return bytes(out)


def dv_location(dv: DeletionVector, root: str) -> str | None:
    """Where a file-stored DV lives (None for inline DVs); a UUID-relative DV stays under the root."""
    if dv.storage_type == "i":
        return None
    if dv.storage_type == "p":
        path = dv.path_or_inline_dv
        return local_path(path) if path.startswith("file:") else path
    if dv.storage_type != "u" or len(dv.path_or_inline_dv) < 20:
        raise _bad(dv, root, f"unknown storage type {dv.storage_type!r} or malformed path")
    prefix, encoded = dv.path_or_inline_dv[:-20], dv.path_or_inline_dv[-20:]
    name = f"deletion_vector_{uuid.UUID(bytes=z85_decode(encoded))}.bin"
    rel = check_log_path(f"{prefix}/{name}" if prefix else name, table=root)
    return join(root, rel)


def _payload(dv: DeletionVector, root: str, storage: Storage) -> bytes:
    if not 0 < dv.size_in_bytes <= MAX_DV_BYTES:
        raise _bad(dv, root, f"implausible sizeInBytes {dv.size_in_bytes}")
    location = dv_location(dv, root)
    if location is None:
        data = z85_decode(dv.path_or_inline_dv)
        if len(data) < dv.size_in_bytes:
            raise _bad(dv, root, "the inline data is shorter than sizeInBytes")
        return data[: dv.size_in_bytes]
    offset = dv.offset if dv.offset is not None else 1
    try:
        with storage.open_input(location) as fh:
            fh.seek(offset)
            block = fh.read(4 + dv.size_in_bytes + 4)
    except FileNotFoundError as exc:
        raise _bad(dv, root, f"its file {location} is missing") from exc
    if len(block) != 4 + dv.size_in_bytes + 4:
        raise _bad(dv, root, "the file is shorter than offset + sizeInBytes")
    (size,) = struct.unpack(">i", block[:4])
    data, (crc,) = block[4:-4], struct.unpack(">I", block[-4:])
    if size != dv.size_in_bytes:
        raise _bad(dv, root, f"the stored size {size} is not sizeInBytes {dv.size_in_bytes}")
    if zlib.crc32(data) != crc:
        raise _bad(dv, root, "the checksum does not match")
    return data


_SERIAL_COOKIE = 12347  #: portable Roaring with run containers (the high 16 bits: containers - 1)
_SERIAL_COOKIE_NO_RUN = 12346  #: portable Roaring without run containers (a uint32 count follows)
_NO_OFFSET_THRESHOLD = 4  #: with run containers, fewer containers than this have no offset header
_ARRAY_MAX = 4096  #: a non-run container with more values than this is a 2^16-bit bitmap


def _take(data: bytes, pos: int, n: int) -> int:
    """The position after ``n`` more bytes from ``pos``; an error if the data ends before."""
    if n < 0 or pos + n > len(data):
        raise ValueError("the bitmap ends before its containers do")
    return pos + n


def _container(data: bytes, pos: int, run: bool, cardinality: int) -> tuple[Any, int]:
    """The low 16 bits of one container's values (sorted, unique) and the position after it."""
    import numpy as np

    if run:
        (runs,) = struct.unpack_from("<H", data, _take(data, pos, 2) - 2)
        end = _take(data, pos + 2, 4 * runs)
        pairs = np.frombuffer(data, "<u2", 2 * runs, pos + 2).astype(np.int64).reshape(-1, 2)
        starts, lengths = pairs[:, 0], pairs[:, 1] + 1
        if np.any(starts + lengths > 1 << 16) or np.any(starts[1:] < starts[:-1] + lengths[:-1]):
            raise ValueError("a run container's runs overlap or leave the container")
        total = int(lengths.sum())
        values = np.repeat(starts - np.concatenate(([0], np.cumsum(lengths)[:-1])), lengths) + np.arange(total)
        return values, end
    if cardinality <= _ARRAY_MAX:
        end = _take(data, pos, 2 * cardinality)
        values = np.frombuffer(data, "<u2", cardinality, pos).astype(np.int64)
        if np.any(values[1:] <= values[:-1]):
            raise ValueError("an array container is not sorted")
        return values, end
    end = _take(data, pos, 8192)
    bits = np.unpackbits(np.frombuffer(data, np.uint8, 8192, pos), bitorder="little")
    return np.flatnonzero(bits).astype(np.int64), end


def _headers(data: bytes, pos: int) -> tuple[list[tuple[int, int, bool]], int]:
    """(key, cardinality, is run) per container of the portable bitmap at ``pos``, and where containers start."""
    (cookie,) = struct.unpack_from("<I", data, _take(data, pos, 4) - 4)
    pos += 4
    if cookie & 0xFFFF == _SERIAL_COOKIE:
        size = (cookie >> 16) + 1
        flags = data[pos : _take(data, pos, (size + 7) // 8)]
        pos += (size + 7) // 8
        runs = [bool(flags[i // 8] >> (i % 8) & 1) for i in range(size)]
        has_offsets = size >= _NO_OFFSET_THRESHOLD
    elif cookie == _SERIAL_COOKIE_NO_RUN:
        (size,) = struct.unpack_from("<I", data, _take(data, pos, 4) - 4)
        pos += 4
        if size > 1 << 16:  # one container per 16-bit key at most (the other form cannot say more)
            raise ValueError(f"{size} containers")
        runs, has_offsets = [False] * size, True
    else:
        raise ValueError(f"not a portable Roaring bitmap (cookie {cookie})")
    keys = struct.unpack_from(f"<{2 * size}H", data, _take(data, pos, 4 * size) - 4 * size)
    pos += 4 * size + (4 * size if has_offsets else 0)
    _take(data, pos, 0)
    headers = [(keys[2 * i], keys[2 * i + 1] + 1, runs[i]) for i in range(size)]
    if any(b[0] <= a[0] for a, b in itertools.pairwise(headers)):
        raise ValueError("container keys are not increasing")
    return headers, pos


def _portable(data: bytes, pos: int) -> tuple[Any, int]:
    """One portable-format Roaring bitmap (RoaringFormatSpec) at ``pos``: its values and the end.

    Decoded with numpy (no per-value Python, no native Roaring library): a Spark worker's Python has
    numpy wherever it has pyarrow, so deletion vectors are read the same way on the driver and on any
    cluster's executors.
    """
    import numpy as np

    headers, pos = _headers(data, pos)
    parts = []
    for key, cardinality, run in headers:
        values, pos = _container(data, pos, run, cardinality)
        if len(values) != cardinality:
            raise ValueError(f"a container holds {len(values)} values but its header says {cardinality}")
        parts.append(values + (key << 16))
    return (np.concatenate(parts) if parts else np.zeros(0, np.int64)), pos


def _decode(data: bytes) -> Any:
    """The sorted row positions of a RoaringBitmapArray (int64 numpy array)."""
    import numpy as np

    magic, count = struct.unpack_from("<iq", data, 0)
    if magic != DV_MAGIC or count < 0:
        raise ValueError("not a RoaringBitmapArray (bad magic or count)")
    pos, parts, last = 12, [], -1
    for _ in range(count):
        (high,) = struct.unpack_from("<i", data, _take(data, pos, 4) - 4)
        if high <= last:
            raise ValueError("the bitmaps' high 32 bits are not increasing")
        values, pos = _portable(data, pos + 4)
        parts.append(values + (high << 32))
        last = high
    if pos != len(data):
        raise ValueError(f"{len(data) - pos} trailing bytes after the bitmaps")
    return np.concatenate(parts) if parts else np.zeros(0, np.int64)


def _deleted_array(dv: DeletionVector, root: str, storage: Storage) -> Any:
    data = _payload(dv, root, storage)
    try:
        rows = _decode(data)
    except (ValueError, struct.error) as exc:
        raise _bad(dv, root, f"the bitmap cannot be decoded ({exc})") from exc
    if len(rows) != dv.cardinality:
        raise _bad(dv, root, f"it holds {len(rows)} rows but its cardinality says {dv.cardinality}")
    return rows


def deleted_rows(dv: DeletionVector, *, root: str, storage: Storage) -> list[int]:
    """The sorted row indexes a DV deletes, after checking size, checksum and cardinality."""
    rows: list[int] = _deleted_array(dv, root, storage).tolist()
    return rows


@dataclass(frozen=True)
class DeletedRows:
    """The sorted row positions one file's DV deletes, as a filter over its rows read in order."""

    rows: Any  # numpy int64 array, sorted

    def __len__(self) -> int:
        return len(self.rows)

    def keep(self, start: int, length: int) -> Any | None:
        """Arrow mask of the live rows among positions [start, start + length); None when all are live.

        Handed to Arrow as a bitmap buffer, not a numpy array: a bin worker's pyarrow is loaded without numpy
        (``engine.fork_server_init``), and takes a buffer all the same."""
        import numpy as np
        import pyarrow as pa

        lo, hi = np.searchsorted(self.rows, [start, start + length])
        if lo == hi:
            return None
        mask = np.ones(length, dtype=bool)
        mask[self.rows[lo:hi] - start] = False
        bits = pa.py_buffer(np.packbits(mask, bitorder="little"))  # Arrow's validity order: bit 0 first
        return pa.BooleanArray.from_buffers(pa.bool_(), length, [None, bits])


def load_deleted_rows(dv: Mapping[str, Any] | DeletionVector, *, root: str, storage: Storage) -> DeletedRows:
    """``deleted_rows`` of a descriptor (as logged, or parsed) as a ``DeletedRows`` filter."""
    import numpy as np

    parsed = dv if isinstance(dv, DeletionVector) else DeletionVector.from_json(dv)
    if parsed is None:
        return DeletedRows(np.zeros(0, dtype=np.int64))
    return DeletedRows(_deleted_array(parsed, root, storage))
