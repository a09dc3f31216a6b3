"""Thrift's compact protocol, the little the chunk merge needs to write a Parquet footer without thriftpy2.

Loading thriftpy2 and parsing the Parquet IDL takes about 80 ms in a fresh process (its parser builds
LALR tables and imports ``urllib.request``), which every worker would pay before its first merged bin.
A merged file's footer is a few structures: they are encoded here from plain values, and the fields
taken unchanged from another footer (the output schema's) are copied as the byte spans ``fields`` finds.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

__all__ = [
    "BINARY",
    "BOOL",
    "I16",
    "I32",
    "I64",
    "LIST",
    "STRUCT",
    "Field",
    "Raw",
    "encode_struct",
    "fields",
    "read_struct",
]

# compact protocol type ids
BOOL_TRUE, BOOL_FALSE, BYTE, I16, I32, I64, DOUBLE, BINARY, LIST, SET, MAP, STRUCT = range(1, 13)
BOOL = BOOL_TRUE  #: a boolean field (its value goes in the field header)


@dataclass(frozen=True)
class Raw:
    """A field value already encoded (copied from another footer), with its compact type id."""

    ttype: int
    data: bytes


#: (field id, compact type, value): ints for I16/I32/I64, bytes for BINARY, ``Fields`` for STRUCT,
#: (element type, values) for LIST, a bool for BOOL; a None value leaves the field out.
Field = tuple[int, int, Any]
Fields = Sequence[Field | tuple[int, Raw]]


def _varint(out: bytearray, n: int) -> None:
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return


def _zigzag(n: int) -> int:
    return (n << 1) ^ (n >> 63)


def _value(out: bytearray, ttype: int, value: Any) -> None:
    if ttype in (I16, I32, I64):
        _varint(out, _zigzag(int(value)))
    elif ttype == BINARY:
        _varint(out, len(value))
        out += value
    elif ttype == STRUCT:
        _struct(out, value)
    elif ttype == LIST:
        etype, items = value
        if len(items) < 15:
            out.append((len(items) << 4) | etype)
        else:
            out.append(0xF0 | etype)
            _varint(out, len(items))
        for item in items:
            _value(out, etype, item)
    else:
        raise ValueError(f"compact type {ttype} is not written here")


def _struct(out: bytearray, items: Fields) -> None:
    last = 0
    for item in items:
        fid = item[0]
        if len(item) == 2:
            raw = item[1]
            ttype, data, value = raw.ttype, raw.data, None
        else:
            ttype, value, data = item[1], item[2], None
            if value is None:
                continue
            if ttype == BOOL:
                ttype = BOOL_TRUE if value else BOOL_FALSE
        if fid <= last:
            raise ValueError(f"fields out of order: {fid} after {last}")
        if fid - last <= 15:
            out.append(((fid - last) << 4) | ttype)
        else:
            out.append(ttype)
            _varint(out, _zigzag(fid))
        last = fid
        if data is not None:
            out += data
        elif ttype not in (BOOL_TRUE, BOOL_FALSE):
            _value(out, ttype, value)
    out.append(0)


def encode_struct(items: Fields) -> bytes:
    """The compact-protocol bytes of one struct (fields in increasing id order)."""
    out = bytearray()
    _struct(out, items)
    return bytes(out)


# ---------------------------------------------------------------------------- reading spans
class _Reader:
    def __init__(self, data: bytes | memoryview) -> None:
        self.data = data
        self.pos = 0

    def byte(self) -> int:
        if self.pos >= len(self.data):
            raise ValueError("the footer ends inside a value")
        b = self.data[self.pos]
        self.pos += 1
        return b

    def varint(self) -> int:
        shift = n = 0
        while True:
            b = self.byte()
            n |= (b & 0x7F) << shift
            if not b & 0x80:
                return n
            shift += 7

    def field(self, last: int) -> tuple[int, int] | None:
        """(field id, type) of the next field, None at the struct's end."""
        header = self.byte()
        if header == 0:
            return None
        ttype, delta = header & 0x0F, header >> 4
        if delta:
            return last + delta, ttype
        n = self.varint()
        return (n >> 1) ^ -(n & 1), ttype

    def values(self) -> dict[int, Any]:
        out: dict[int, Any] = {}
        last = 0
        while (f := self.field(last)) is not None:
            last, ttype = f
            if ttype in (I16, I32, I64):
                n = self.varint()
                out[last] = (n >> 1) ^ -(n & 1)
            elif ttype == STRUCT:
                out[last] = self.values()
            elif ttype in (BOOL_TRUE, BOOL_FALSE):
                out[last] = ttype == BOOL_TRUE
            else:
                self.skip(ttype)
        return out

    def skip(self, ttype: int, in_list: bool = False) -> None:
        if ttype in (BOOL_TRUE, BOOL_FALSE):
            if in_list:
                self.byte()
        elif ttype == BYTE:
            self.byte()
        elif ttype in (I16, I32, I64):
            self.varint()
        elif ttype == DOUBLE:
            self.pos += 8
        elif ttype == BINARY:
            length = self.varint()  # read before ``pos`` is: ``pos += varint()`` would add to the old position
            self.pos += length
        elif ttype in (LIST, SET):
            self._skip_list()
        elif ttype == MAP:
            self._skip_map()
        elif ttype == STRUCT:
            last = 0
            while (f := self.field(last)) is not None:
                last = f[0]
                self.skip(f[1])
        else:
            raise ValueError(f"unknown compact type {ttype}")

    def _skip_list(self) -> None:
        header = self.byte()
        size, etype = header >> 4, header & 0x0F
        if size == 15:
            size = self.varint()
        for _ in range(size):
            self.skip(etype, in_list=True)

    def _skip_map(self) -> None:
        size = self.varint()
        if size:
            kinds = self.byte()
            for _ in range(size):
                self.skip(kinds >> 4, in_list=True)
                self.skip(kinds & 0x0F, in_list=True)


def read_struct(data: bytes | memoryview, pos: int = 0) -> tuple[dict[int, Any], int]:
    """The struct at ``pos``: its integer, binary and struct fields by id (others skipped), and where it ends."""
    r = _Reader(data)
    r.pos = pos
    return r.values(), r.pos


def fields(data: bytes) -> dict[int, Raw]:
    """A struct's top-level fields as encoded values (the bytes after each field header), by field id."""
    r = _Reader(data)
    out: dict[int, Raw] = {}
    last = 0
    while (f := r.field(last)) is not None:
        fid, ttype = f
        start = r.pos
        r.skip(ttype)
        out[fid] = Raw(ttype, bytes(data[start : r.pos]))
        last = fid
    if r.pos != len(data):
        raise ValueError(f"{len(data) - r.pos} bytes after the struct's end")
    return out
