"""Arrow arrays made and searched without numpy: what the driver's planning and log reads need of numpy.

The console script's ``optimize`` loads pyarrow without its numpy integration (``no_pandas.numpy_hidden``:
numpy's import is 40-50 ms of a fresh run's serial start, docs/performance.md, "Issue 45, a driver without
numpy"). There ``Array.to_numpy`` and ``pa.array(ndarray)`` raise, so the paths it runs build their arrays
from Python buffers and search them with Arrow's kernels. Everything here works the same with numpy loaded.
"""

from __future__ import annotations

from array import array
from bisect import bisect_left
from itertools import pairwise
from typing import Any

__all__ = ["all_false", "bounds", "mask_without", "repeated_int64", "runs"]


def repeated_int64(value: int, n: int) -> Any:
    """An Int64Array of ``n`` copies of ``value``, from one buffer (``pa.repeat`` would import pandas)."""
    import pyarrow as pa

    return pa.Array.from_buffers(pa.int64(), n, [None, pa.py_buffer(array("q", [value]) * n)])


def all_false(n: int) -> Any:
    """A BooleanArray of ``n`` false values, no nulls."""
    import pyarrow as pa

    return pa.Array.from_buffers(pa.bool_(), n, [None, pa.py_buffer(bytes((n + 7) // 8))])


def mask_without(n: int, drop: set[int] | list[int]) -> Any:
    """A BooleanArray of ``n`` values, true except at the positions in ``drop`` (few: a bitmap is set in Python)."""
    import pyarrow as pa

    bits = bytearray(b"\xff" * ((n + 7) // 8))
    for i in drop:
        if not 0 <= i < n:
            raise IndexError(f"position {i} is outside 0..{n - 1}")
        bits[i >> 3] &= ~(1 << (i & 7)) & 0xFF  # Arrow's bit order: bit 0 of byte 0 is position 0
    return pa.Array.from_buffers(pa.bool_(), n, [None, pa.py_buffer(bytes(bits))])


def bounds(ordered: Any, lo: int, hi: int) -> tuple[int, int]:
    """numpy's ``searchsorted(ordered, [lo, hi])`` on an ascending integer Arrow array without nulls: the first
    position holding a value not below ``lo``, and the first not below ``hi`` (a binary search, log n values read)."""

    def key(scalar: Any) -> int:
        return int(scalar.as_py())

    first = bisect_left(ordered, lo, key=key)
    return first, bisect_left(ordered, hi, lo=first, key=key)


def runs(ordered: Any) -> list[tuple[int, int]]:
    """(start, end) of each run of equal values in a sorted Arrow array (no nulls)."""
    from ..arrow_kernels import indices_nonzero, not_equal

    n = len(ordered)
    if not n:
        return []
    changes = indices_nonzero(not_equal(ordered.slice(1), ordered.slice(0, n - 1))).to_pylist()
    return list(pairwise([0, *(i + 1 for i in changes), n]))
