"""Our own replay as the authority for the live files of large tables (deltalake loads every add with its
stats, and that load was the peak of planning a million-file table).

deltalake 1.6 ignores ``without_files``: it cannot give the protocol and metadata without loading every
file. So for a large checkpoint we read them ourselves too: the checkpoint's ``protocol`` and ``metaData``
columns (projected, the add columns untouched) and the commits after it, the last one winning. Anything
unexpected (an unknown reader feature, no protocol found, a file we cannot parse) returns None, and the
caller takes deltalake's path, which reports the problem as a typed error.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from .actions import Metadata, Protocol
from .checkpoint_v2 import all_null, checkpoint_files
from .log import LogListing, commit_bytes, in_order, parse_commit, read_threads
from .storage import Storage

__all__ = ["READABLE_FEATURES", "checkpoint_rows", "read_protocol_metadata"]

#: Reader features whose files we replay exactly as deltalake does (the rest go through deltalake).
READABLE_FEATURES = frozenset(
    {"deletionVectors", "columnMapping", "timestampNtz", "v2Checkpoint", "vacuumProtocolCheck", "typeWidening"}
)


def checkpoint_rows(storage: Storage, root: str, version: int | None, listing: LogListing) -> int:
    """Rows of the newest checkpoint at or before ``version`` (from the Parquet footers: nothing else read)."""
    import pyarrow.parquet as pq

    cp = listing.checkpoint_at_or_before(listing.latest if version is None else version)
    if cp is None:
        return 0
    rows = 0
    for path in checkpoint_files(storage, root, listing.checkpoints[cp]).parquet:
        with storage.open_input(path) as fh:
            rows += pq.ParquetFile(fh).metadata.num_rows
    return rows


def _map(value: Any) -> dict[str, Any]:
    if value is None:
        return {}
    return dict(value)  # pyarrow maps arrive as [(key, value), ...]


#: A field every action of each kind has: a row group whose statistics say it is null in every row holds none.
_REQUIRED_LEAF = {"protocol": "protocol.minReaderVersion", "metaData": "metaData.id"}


def _checkpoint_actions(storage: Storage, root: str, names: tuple[str, ...]) -> tuple[Any, Any]:
    """The checkpoint's (protocol, metaData) as JSON-shaped dicts (None when absent)."""
    import pyarrow.parquet as pq

    from ..arrow_kernels import filter_, is_valid

    where = checkpoint_files(storage, root, names)
    found: dict[str, Any] = {}
    for action in where.json_actions:
        for kind in ("protocol", "metaData"):
            if kind in action:
                found[kind] = action[kind]
    for path in where.parquet:
        with storage.open_input(path) as fh:
            pf = pq.ParquetFile(fh)
            for kind in ("protocol", "metaData"):
                if kind in found or kind not in pf.schema_arrow.names:
                    continue
                groups = [
                    g for g in range(pf.num_row_groups) if not all_null(pf.metadata.row_group(g), _REQUIRED_LEAF[kind])
                ]
                if not groups:
                    continue
                column = pf.read_row_groups(groups, columns=[kind], use_threads=False).column(kind)
                valid = filter_(column, is_valid(column))
                if len(valid):
                    found[kind] = valid[len(valid) - 1].as_py()
    meta = found.get("metaData")
    if meta is not None:
        meta = {**meta, "configuration": _map(meta.get("configuration"))}
    return found.get("protocol"), meta


def _readable(protocol: Mapping[str, Any]) -> bool:
    reader = int(protocol["minReaderVersion"])
    features = protocol.get("readerFeatures")
    if reader > 3:
        return False
    return reader < 3 or set(features or ()) <= READABLE_FEATURES


def read_protocol_metadata(
    storage: Storage,
    root: str,
    version: int,
    listing: LogListing,
    *,
    read: Callable[[int], bytes] | None = None,
    parse: Callable[[int, bytes], list[dict[str, Any]]] | None = None,
) -> tuple[Protocol, Metadata] | None:
    """The table's protocol and metadata at ``version``: the checkpoint's, then the commits' after it.

    ``read`` and ``parse``: a commit's bytes and its actions (``LogCache.read`` and ``LogCache.parsed``, so that
    the load's replay of the adds parses each commit once). None when they cannot be read here with certainty
    (the caller then asks deltalake)."""
    cp = listing.checkpoint_at_or_before(version)
    first = 0 if cp is None else cp + 1
    if [v for v in listing.commits if first <= v <= version] != list(range(first, version + 1)):
        return None  # a gap in the commits: deltalake's path names it
    protocol, meta = _checkpoint_actions(storage, root, listing.checkpoints[cp]) if cp is not None else (None, None)
    versions = [v for v in listing.commits if (cp is None or v > cp) and v <= version]
    threads = read_threads(storage)
    found = zip(versions, in_order(read, versions, threads=threads)) if read else commit_bytes(storage, root, versions)
    for v, data in found:
        for action in parse(v, data) if parse is not None else parse_commit(data, root, v):
            protocol = action.get("protocol", protocol)
            meta = action.get("metaData", meta)
    if not isinstance(protocol, dict) or not isinstance(meta, dict) or not _readable(protocol):
        return None
    if not isinstance(meta.get("schemaString"), str) or not isinstance(meta.get("id"), str):
        return None
    return Protocol.from_json(protocol), Metadata.from_json(meta)
