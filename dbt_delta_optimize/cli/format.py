"""One unit style for every size the CLI prints: binary units through rich (KiB, MiB, GiB)."""

from __future__ import annotations

__all__ = ["human_size"]


def human_size(n: int | float | None) -> str:
    """``1.5 MiB``; bytes below 1 KiB as ``512 B``; None as ``-``."""
    if n is None:
        return "-"
    from rich.filesize import _to_str

    return _to_str(int(n), ("KiB", "MiB", "GiB", "TiB", "PiB", "EiB"), 1024, precision=1, separator=" ")
