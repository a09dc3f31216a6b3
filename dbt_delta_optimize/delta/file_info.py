"""What a store says about one object (a leaf: ``storage`` and its backends share it)."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["FileInfo"]


@dataclass(frozen=True)
class FileInfo:
    """Size and modification time of one stored object."""

    size: int
    modification_time_ms: int
