"""Which bins run first. With a time budget or partial commits the order decides what gets done.

Like Iceberg's rewrite-job-order. The default, ``files-desc``, runs first the bins that turn the most
small files into one: each removed file is one less open and footer read for every query, so that
is where a cut-short run helps readers most. Ties keep the planner's order, so the order is stable.
"""

from __future__ import annotations

from collections.abc import Sequence

from .planner import Bin

__all__ = ["order_bins"]


def _partition(b: Bin) -> tuple[tuple[bool, str], ...]:
    return tuple((v is None, v or "") for _, v in sorted(b.partition_values.items()))


def _oldest(b: Bin) -> int:
    return min((f.modification_time for f in b.files), default=0)


def order_bins(bins: Sequence[Bin], order: str) -> list[Bin]:
    """``bins`` in the order to run them: files-desc, bytes-desc, partition or oldest-first."""
    if order == "files-desc":
        return sorted(bins, key=lambda b: -len(b.files))
    if order == "bytes-desc":
        return sorted(bins, key=lambda b: -b.size)
    if order == "partition":
        return sorted(bins, key=_partition)
    if order == "oldest-first":
        return sorted(bins, key=_oldest)
    raise ValueError(f"unknown bin order {order!r}")
