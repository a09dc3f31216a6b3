"""Deletion vectors: resolve a descriptor, read it through a Storage, check it, decode the rows.

A deletion vector (PROTOCOL.md, "Deletion Vector Format") marks rows of one data file as
deleted. Its descriptor is untrusted input like every log entry: the size, offset, checksum
and cardinality are all checked, and a UUID-relative file must stay inside the table root.

Storage forms: ``i`` inline (Z85 bytes in the log), ``u`` a ``deletion_vector_<uuid>.bin`` file
under the table root (optionally below a random prefix folder), ``p`` an absolute path.
On disk a DV file is a version byte (1) and blocks of [size: int32 BE][payload][CRC-32: int32 BE];
the descriptor's offset points at the size. The payload is a RoaringBitmapArray: magic 1681511377
(int32 LE), the number of 32-bit bitmaps (int64 LE), then per bitmap its high 32 bits (int32 LE)
and a portable-format Roaring bitmap, decoded by pyroaring.
"""

from __future__ import annotations

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


def _decode(data: bytes) -> list[int]:
    from pyroaring import BitMap

    magic, count = struct.unpack_from("<iq", data, 0)
    if magic != DV_MAGIC or count < 0:
        raise ValueError("not a RoaringBitmapArray (bad magic or count)")
    pos, rows = 12, list[int]()
    for _ in range(count):
        (high,) = struct.unpack_from("<i", data, pos)
        bitmap = BitMap.deserialize(data[pos + 4 :])
        pos += 4 + len(bitmap.serialize())  # the portable format is canonical for a decoded bitmap
        rows.extend((high << 32) | low for low in bitmap)
    if pos != len(data):
        raise ValueError(f"{len(data) - pos} trailing bytes after the bitmaps")
    return rows


def deleted_rows(dv: DeletionVector, *, root: str, storage: Storage) -> list[int]:
    """The sorted row indexes a DV deletes, after checking size, checksum and cardinality."""
    data = _payload(dv, root, storage)
    try:
        rows = _decode(data)
    except (ValueError, struct.error) as exc:
        raise _bad(dv, root, f"the bitmap cannot be decoded ({exc})") from exc
    if len(rows) != dv.cardinality:
        raise _bad(dv, root, f"it holds {len(rows)} rows but its cardinality says {dv.cardinality}")
    return rows


@dataclass(frozen=True)
class DeletedRows:
    """The sorted row positions one file's DV deletes, as a filter over its rows read in order."""

    rows: Any  # numpy int64 array, sorted

    def __len__(self) -> int:
        return len(self.rows)

    def keep(self, start: int, length: int) -> Any | None:
        """Arrow mask of the live rows among positions [start, start + length); None when all are live."""
        import numpy as np
        import pyarrow as pa

        lo, hi = np.searchsorted(self.rows, [start, start + length])
        if lo == hi:
            return None
        mask = np.ones(length, dtype=bool)
        mask[self.rows[lo:hi] - start] = False
        return pa.array(mask)


def load_deleted_rows(dv: Mapping[str, Any] | DeletionVector, *, root: str, storage: Storage) -> DeletedRows:
    """``deleted_rows`` of a descriptor (as logged, or parsed) as a ``DeletedRows`` filter."""
    import numpy as np

    parsed = dv if isinstance(dv, DeletionVector) else DeletionVector.from_json(dv)
    if parsed is None:
        return DeletedRows(np.zeros(0, dtype=np.int64))
    return DeletedRows(np.asarray(deleted_rows(parsed, root=root, storage=storage), dtype=np.int64))
