"""Parquet footers as Thrift structures: read one from a file's tail, compare schemas, encode a new one.

The row-group copy moves column chunks between files byte for byte and writes only a new footer
(``FileMetaData``, Thrift compact protocol). thriftpy2 decodes and encodes it from the IDL beside
this module (``parquet_footer.thrift``), loaded once per process, also from a shipped zip.

A footer field the IDL does not know would be dropped silently by the decoder, so every footer
read here is re-encoded once and compared with its bytes: a file whose footer does not round-trip
is never copied from (its row groups are re-encoded instead).
"""

from __future__ import annotations

import functools
import io
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any, BinaryIO

__all__ = [
    "MAGIC",
    "Footer",
    "FooterError",
    "chunk_span",
    "decode",
    "encode",
    "footer_metadata",
    "footer_of_bytes",
    "leaf_paths",
    "pyarrow_metadata",
    "read_exactly",
    "read_footer",
    "schema_difference",
    "thrift",
]

MAGIC = b"PAR1"
_ENCRYPTED_MAGIC = b"PARE"
_TAIL = 64 * 1024  #: one read at the end of a file usually holds the whole footer
_INT96 = 3
_LIST, _MAP = 3, 1  # ConvertedType values that mark list and map groups


class FooterError(Exception):
    """A file's footer cannot be used for a copy; ``kind`` says whether the file is encrypted or unreadable."""

    def __init__(self, kind: str, detail: str) -> None:
        super().__init__(detail)
        self.kind = kind
        self.detail = detail


@functools.cache
def thrift() -> Any:
    """The Thrift module generated from ``parquet_footer.thrift`` (read as package data, so zips work)."""
    from importlib.resources import files

    import thriftpy2

    text = files(__package__ or "dbt_delta_optimize.tasks").joinpath("parquet_footer.thrift").read_text("utf-8")
    return thriftpy2.load_fp(io.StringIO(text), module_name="parquet_footer_thrift")


def _compact() -> Any:
    import importlib

    return importlib.import_module("thriftpy2.protocol").TCompactProtocolFactory()


def decode(raw: bytes) -> Any:
    """A ``FileMetaData`` from its compact-protocol bytes."""
    from thriftpy2.utils import deserialize

    return deserialize(thrift().FileMetaData(), raw, _compact())


def encode(meta: Any) -> bytes:
    """Compact-protocol bytes of a ``FileMetaData``."""
    from thriftpy2.utils import serialize

    return bytes(serialize(meta, _compact()))


@dataclass(frozen=True)
class Footer:
    """One Parquet file's footer: where it starts, its bytes and its decoded structure."""

    path: str
    size: int  #: the file's size in bytes
    start: int  #: offset of the footer (the end of the data pages)
    raw: bytes
    meta: Any  #: FileMetaData

    @cached_property
    def exact(self) -> bool:
        """The decoded footer re-encodes to the same bytes (no field unknown to the IDL). Computed when asked:
        the row-group copy needs it, a footer read for its statistics does not (re-encoding costs ~10 ms)."""
        return bool(encode(self.meta) == self.raw)

    @property
    def key_values(self) -> dict[bytes, bytes | None]:
        return {kv.key: kv.value for kv in self.meta.key_value_metadata or ()}

    @property
    def created_by(self) -> str:
        return (self.meta.created_by or b"").decode("utf-8", "replace")


def _parse(path: str, size: int, tail: bytes) -> Footer | int:
    """The footer from the file's last bytes, or how many bytes from the end are needed."""
    if size < 12:
        raise FooterError("footer", f"{path} is too small to be a Parquet file ({size} bytes)")
    if tail[-4:] == _ENCRYPTED_MAGIC:
        raise FooterError("encrypted", f"{path} has an encrypted footer")
    if tail[-4:] != MAGIC:
        raise FooterError("footer", f"{path} does not end with Parquet's magic bytes")
    length = int.from_bytes(tail[-8:-4], "little")
    if length + 12 > size:
        raise FooterError("footer", f"{path} claims a footer of {length} bytes in a file of {size}")
    if length + 8 > len(tail):
        return length + 8
    raw = bytes(tail[len(tail) - 8 - length : len(tail) - 8])
    try:
        meta = decode(raw)
    except Exception as exc:
        raise FooterError("footer", f"{path}: the footer does not decode ({exc})") from exc
    if meta.encryption_algorithm is not None:
        raise FooterError("encrypted", f"{path} has encrypted columns")
    return Footer(path, size, size - 8 - length, raw, meta)


def read_footer(fh: BinaryIO, path: str, size: int | None = None) -> Footer:
    """Read and decode the footer of an open Parquet file (one read of its tail, two if the footer is large)."""
    if size is None:
        size = fh.seek(0, io.SEEK_END)
    want = min(size, _TAIL)
    for _ in range(2):
        fh.seek(size - want)
        tail = read_exactly(fh, want, path)
        parsed = _parse(path, size, tail)
        if isinstance(parsed, Footer):
            return parsed
        want = parsed
    raise FooterError("footer", f"{path}: the footer could not be read")  # pragma: no cover - sizes are checked


def footer_of_bytes(data: bytes | memoryview, path: str = "<buffer>") -> Footer:
    """The footer of a whole Parquet file held in memory."""
    parsed = _parse(path, len(data), bytes(data[-min(len(data), _TAIL) :]))
    if isinstance(parsed, Footer):
        return parsed
    return _parse(path, len(data), bytes(data))  # type: ignore[return-value]


def read_exactly(fh: BinaryIO, n: int, path: str) -> bytes:
    """Exactly ``n`` bytes from where ``fh`` is (a short file is a DataFileError, never short data)."""
    parts = []
    left = n
    while left:
        data = fh.read(left)
        if not data:
            from ..errors import DataFileError

            raise DataFileError(f"{path} ended {left} bytes early while reading it", path=path, reason="truncated")
        parts.append(data)
        left -= len(data)
    return b"".join(parts) if len(parts) != 1 else bytes(parts[0])


def footer_metadata(raw: bytes) -> Any:
    """pyarrow's ``FileMetaData`` for a footer's Thrift bytes (no file needed)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    return pq.read_metadata(pa.BufferReader(MAGIC + raw + struct.pack("<I", len(raw)) + MAGIC))


def pyarrow_metadata(footer: Footer) -> Any:
    """pyarrow's ``FileMetaData`` for this footer, without reading the file again."""
    return footer_metadata(footer.raw)


def chunk_span(chunk: Any) -> tuple[int, int]:
    """(start, end) of a column chunk's pages: from its dictionary page if it has one, as Parquet readers do."""
    md = chunk.meta_data
    start = md.data_page_offset
    dictionary = md.dictionary_page_offset
    if dictionary is not None and 0 < dictionary < start:
        start = dictionary
    return start, start + md.total_compressed_size


# ---------------------------------------------------------------------------- schemas
def _annotation(e: Any) -> str | None:
    """ "list" or "map" for a group annotated so (logical or converted type), else None."""
    lt = e.logicalType
    if lt is not None and lt.LIST is not None:
        return "list"
    if lt is not None and lt.MAP is not None:
        return "map"
    return {_LIST: "list", _MAP: "map"}.get(e.converted_type)


def _logical(e: Any) -> Any:
    """What an element's values mean: its logical type if it has one, else its converted type (+ decimal)."""
    if e.logicalType is not None:
        return e.logicalType  # thriftpy2 structs compare by value
    return (e.converted_type, e.scale, e.precision)


def _element_difference(have: Any, want: Any, loose_name: bool) -> str | None:
    for what in ("type", "type_length", "repetition_type", "num_children", "field_id"):
        if getattr(have, what) != getattr(want, what):
            return f"{what} {getattr(have, what)} instead of {getattr(want, what)}"
    if _logical(have) != _logical(want):
        return "another logical type"
    if not loose_name and have.name != want.name:
        return f"name {have.name!r} instead of {want.name!r}"
    return None


def _loose_names(elements: Sequence[Any]) -> set[int]:
    """Positions whose names do not matter: the repeated group of a list or map, and a 3-level list's element.

    Writers differ there (``list``/``element`` vs ``list``/``item``, ``key_value`` vs ``entries``);
    the data pages hold only levels and values, and readers resolve those elements by position.
    """
    loose: set[int] = set()

    def walk(i: int, parent: Any, grand: Any) -> int:
        e = elements[i]
        repeated_group = parent is not None and _annotation(parent) in ("list", "map") and e.repetition_type == 2
        element = grand is not None and _annotation(grand) == "list" and parent.num_children == 1
        if repeated_group or (element and parent.name == b"list"):
            loose.add(i)
        j = i + 1
        for _ in range(e.num_children or 0):
            j = walk(j, e, parent)
        return j

    j = 1
    for _ in range(elements[0].num_children or 0 if elements else 0):
        j = walk(j, None, None)
    return loose


def schema_difference(have: Sequence[Any], want: Sequence[Any]) -> str | None:
    """Why a file's Parquet schema is not ``want`` (None when its column chunks fit ``want`` byte for byte).

    Compared: structure, physical types and lengths, repetition, field ids, logical types and names
    (except where writers name list/map internals differently). The root's name never matters.
    """
    if len(have) != len(want):
        return f"{len(have) - 1} schema elements instead of {len(want) - 1}"
    if have and have[0].num_children != want[0].num_children:
        return f"{have[0].num_children} top-level columns instead of {want[0].num_children}"
    loose = _loose_names(have) & _loose_names(want)
    for i in range(1, len(want)):
        why = _element_difference(have[i], want[i], i in loose)
        if why is not None:
            return f"column {want[i].name.decode('utf-8', 'replace')!r} has {why}"
    return None


def leaf_paths(elements: Sequence[Any]) -> list[list[bytes]]:
    """The path of every leaf column, in column-chunk order (``path_in_schema``)."""
    out: list[list[bytes]] = []

    def walk(i: int, prefix: list[bytes]) -> int:
        e = elements[i]
        path = [*prefix, e.name]
        if not e.num_children:
            out.append(path)
            return i + 1
        j = i + 1
        for _ in range(e.num_children):
            j = walk(j, path)
        return j

    j = 1
    for _ in range(elements[0].num_children or 0 if elements else 0):
        j = walk(j, [])
    return out


def is_int96(column: Any) -> bool:
    """Whether a ``ColumnMetaData`` holds INT96 values (timestamps whose statistics no reader trusts)."""
    return bool(column.type == _INT96)
