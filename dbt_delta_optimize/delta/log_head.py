"""The newest protocol and metadata of a table, read from its log without a full replay.

VACUUM replays the add and remove actions itself (``delta/vacuum_log.py``); loading deltalake's table
only for its protocol and metadata would replay every action a second time (a third of a 10,000-file
VACUUM, and the ``deltalake`` import). This reads the commits after the newest checkpoint from the
newest down (concurrently, in a bounded window), parsing only the lines that hold a ``protocol`` or ``metaData`` action, and the
checkpoint's two columns when a commit did not change them. ``None`` whenever the log is not plain
(a gap in the versions, no such action found): the caller then loads the table through deltalake,
whose errors name what is wrong.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

from .actions import Metadata, Protocol
from .checkpoint_v2 import checkpoint_files
from .log import LogListing, commit_path, in_order, read_threads
from .storage import Storage

__all__ = ["read_head"]

_KEYS = ("protocol", "metaData")


def _metadata(m: Mapping[str, Any]) -> Metadata:
    """A checkpoint's Parquet map arrives as (key, value) pairs; a commit's as an object."""
    conf = m.get("configuration")
    if conf is not None and not isinstance(conf, dict):
        m = {**m, "configuration": {str(k): str(v) for k, v in conf}}
    return Metadata.from_json(m)


def _from_commit(data: bytes, found: dict[str, Any]) -> None:
    """Only the lines holding a key are parsed, found by searching the whole commit (no loop over 10,000 lines)."""
    for key in _KEYS:
        needle = f'"{key}"'.encode()
        at = data.find(needle)
        while at >= 0 and key not in found:
            start, end = data.rfind(b"\n", 0, at) + 1, data.find(b"\n", at)
            end = len(data) if end < 0 else end
            action = json.loads(data[start:end])
            if key in action:  # else the word was inside another action (a commitInfo's text)
                found[key] = action[key]
            at = data.find(needle, end)


def _from_checkpoint(storage: Storage, root: str, names: tuple[str, ...], found: dict[str, Any]) -> None:
    import pyarrow.parquet as pq

    where = checkpoint_files(storage, root, names)
    for action in where.json_actions:
        for key in _KEYS:
            if key in action and key not in found:
                found[key] = action[key]
    for path in where.parquet:
        with storage.open_input(path) as fh:
            pf = pq.ParquetFile(fh)
            wanted = [k for k in _KEYS if k not in found and k in pf.schema_arrow.names]
            if not wanted:
                continue
            table = pf.read(columns=wanted)
        for key in wanted:
            rows = [r for r in table.column(key).to_pylist() if r is not None]
            if rows:
                found[key] = rows[-1]


def read_head(
    storage: Storage, root: str, listing: LogListing, *, read: Callable[[int], bytes] | None = None
) -> tuple[int, Protocol, Metadata] | None:
    """(latest version, protocol, metadata), or None when the log is not plain enough to read this way.
    ``read`` gives a commit's bytes (a caller that reads them again keeps them); else they are read here."""
    version = listing.latest
    cp = listing.checkpoint_at_or_before(version)
    first = cp + 1 if cp is not None else 0
    need = tuple(range(first, version + 1))
    if need and listing.commits[-len(need) :] != need:
        return None  # a gap in the commits: deltalake's load says which version is missing
    found: dict[str, Any] = {}
    reader = read if read is not None else (lambda v: storage.read_bytes(commit_path(root, v)))
    # Newest first, read concurrently (``in_order``: a bounded window ahead, the rest dropped once both are found).
    for data in in_order(reader, range(version, first - 1, -1), threads=read_threads(storage)):
        _from_commit(data, found)
        if len(found) == len(_KEYS):
            break
    if len(found) < len(_KEYS) and cp is not None:
        _from_checkpoint(storage, root, listing.checkpoints[cp], found)
    if len(found) < len(_KEYS):
        return None
    return version, Protocol.from_json(found["protocol"]), _metadata(found["metaData"])
