"""Checks of a data-rearranging commit's adds and removes against the version before it (V-1).

Every check needs only the V-1 snapshot, the actions and the added files' sizes and footers, read
through the table's storage: no data is read. Rows are counted per partition, from stats where
present, else from the Parquet footer, less the rows deletion vectors delete.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..delta.actions import AddFile, RemoveFile
from ..delta.paths import data_file_location
from ..delta.storage import Storage
from .findings import Finding
from .live_files import LiveFiles, norm_path
from .validate_stats import check_stats, norm_partition_value, stats_types

if TYPE_CHECKING:
    from ..delta.snapshot import Snapshot

__all__ = ["RemovesCheck", "check_actions", "norm_path"]

PartitionKey = tuple[Any, ...]


def _dv_id(dv: Any) -> str | None:
    return dv.unique_id if dv is not None else None


def _logical_rows(n: int | None, dv: Any) -> int | None:
    if n is None:
        return None
    return n - (dv.cardinality if dv is not None else 0)


def _partition_label(key: PartitionKey, columns: Sequence[str]) -> str:
    if not columns:
        return "(unpartitioned)"
    return ", ".join(f"{c}={'null' if v is None else v[1]}" for c, v in zip(columns, key))


@dataclass
class _RowCount:
    """Rows per partition; ``known`` turns False once one file's rows are unknown."""

    by_key: dict[PartitionKey, int] = field(default_factory=dict)
    known: bool = True

    def add(self, key: PartitionKey, rows: int | None) -> bool:
        if rows is None:
            self.known = False
            return False
        self.by_key[key] = self.by_key.get(key, 0) + rows
        return True

    @property
    def total(self) -> int | None:
        return sum(self.by_key.values()) if self.known else None


@dataclass
class _ActionCheck:
    root: str
    before: Snapshot | None
    storage: Storage
    findings: list[Finding]
    check_footers: bool
    live: LiveFiles
    removed_keys: set[PartitionKey] = field(default_factory=set)
    removed_paths: dict[str, RemoveFile] = field(default_factory=dict)
    #: log path -> (size on storage, footer rows), fetched ahead for every add (``probe``)
    probed: dict[str, tuple[int | None, int | None]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        b = self.before
        # partitionValues are keyed by physical names (column mapping); their types by logical names.
        self.columns = tuple(b.physical_partition_columns) if b is not None else ()
        self.ptypes = (
            {p: b.partition_types[c] for p, c in zip(self.columns, b.partition_columns)} if b is not None else {}
        )
        self.types = stats_types(b)
        self.version = self.live.version

    def found(self, code: str, message: str, path: str | None = None) -> None:
        self.findings.append(Finding(code, message, path))

    def key_of(self, values: Mapping[str, str | None]) -> PartitionKey:
        return tuple(norm_partition_value(values.get(c), self.ptypes.get(c, "string")) for c in self.columns)

    def footer_rows(self, log_path: str) -> int | None:
        try:
            import pyarrow.parquet as pq

            with self.storage.open_input(data_file_location(self.root, log_path)) as fh:
                return int(pq.ParquetFile(fh).metadata.num_rows)
        except Exception:  # missing or unreadable: the caller reports what that means
            return None

    def size_on_storage(self, log_path: str) -> int | None:
        try:
            return self.storage.stat(data_file_location(self.root, log_path)).size
        except FileNotFoundError:
            return None

    def data_change(self, adds: Sequence[AddFile], removes: Sequence[RemoveFile]) -> None:
        for kind, actions in (("add", adds), ("remove", removes)):
            for a in actions:
                if a.data_change:
                    self.found("data_change_true", f"{kind} has dataChange=true in a data-rearranging commit", a.path)

    def remove_matches_live(self, r: RemoveFile, f: AddFile) -> None:
        if r.size is not None and r.size != f.size:
            self.found("remove_size_mismatch", f"remove records size {r.size}, the live file has {f.size}", r.path)
        if _dv_id(r.deletion_vector) != _dv_id(f.deletion_vector):
            msg = (
                f"remove names deletion vector {_dv_id(r.deletion_vector)}, "
                f"the live file has {_dv_id(f.deletion_vector)}"
            )
            self.found("remove_dv_mismatch", msg, r.path)
        if (
            r.extended_file_metadata
            and r.partition_values
            and r.partition_values is not f.partition_values  # a remove made from the live file carries its map
            and self.key_of(r.partition_values) != self.key_of(f.partition_values)
        ):
            msg = f"remove records partition values {dict(r.partition_values)}, the live file has {dict(f.partition_values)}"
            self.found("partition_values_mismatch", msg, r.path)

    def removes(self, removes: Sequence[RemoveFile]) -> _RowCount:
        rows = _RowCount()
        paths = [norm_path(r.path, self.root) for r in removes]
        live = self.live.lookup(paths)
        for r, p in zip(removes, paths):
            if p in self.removed_paths:
                self.found("remove_duplicate", "the same path is removed twice", r.path)
                continue
            self.removed_paths[p] = r
            f = live.get(p)
            if f is None:
                self.found("remove_not_live", f"removed file is not live at version {self.version}", r.path)
                continue
            self.remove_matches_live(r, f)
            k = self.key_of(f.partition_values)
            self.removed_keys.add(k)
            n = f.num_records if f.num_records is not None else self.footer_rows(f.path)
            if not rows.add(k, _logical_rows(n, f.deletion_vector)):
                self.found("row_count_unknown", "removed file has no numRecords stats and no readable footer", r.path)
        return rows

    def add_identity(self, a: AddFile, p: str) -> None:
        if p in self.removed_paths:
            self.found("path_added_and_removed", "the path is both added and removed", a.path)
        if p in self.live:
            self.found("add_already_live", f"added file was already live at version {self.version}", a.path)

    def probe(self, adds: Sequence[AddFile]) -> None:
        """The size and footer rows of every added file, asked of an object store concurrently (a round trip
        or two each, which one after another cost more than the rest of a small commit's checks)."""
        from concurrent.futures import ThreadPoolExecutor

        from ..delta.storage import LocalStorage

        if isinstance(self.storage, LocalStorage) or len(adds) < 2:
            return

        def facts(path: str) -> tuple[int | None, int | None]:
            size = self.size_on_storage(path)
            return size, self.footer_rows(path) if size is not None and self.check_footers else None

        paths = list(dict.fromkeys(a.path for a in adds))
        with ThreadPoolExecutor(max_workers=min(8, len(paths)), thread_name_prefix="ddo-validate") as pool:
            self.probed.update(zip(paths, pool.map(facts, paths)))

    def add_rows(self, a: AddFile) -> int | None:
        """The add's rows (footer first: the file's truth), after checking size and stats against the file."""
        probed = self.probed.get(a.path)
        on_storage = probed[0] if probed is not None else self.size_on_storage(a.path)
        if on_storage is None:
            self.found(
                "add_missing_file", f"added file does not exist at {data_file_location(self.root, a.path)}", a.path
            )
        elif on_storage != a.size:
            self.found("add_size_mismatch", f"add records size {a.size}, the file has {on_storage} bytes", a.path)
        stat_findings, n = check_stats(a.path, a.stats, self.types)
        self.findings.extend(stat_findings)
        footer = None
        if probed is not None and self.check_footers:  # the probe read it (None: missing or unreadable)
            footer = probed[1]
        elif on_storage is not None and (self.check_footers or n is None):
            footer = self.footer_rows(a.path)
        if n is not None and footer is not None and n != footer:
            msg = f"stats say numRecords={n}, the Parquet footer has {footer} rows"
            self.found("stats_num_records_mismatch", msg, a.path)
        return _logical_rows(footer if footer is not None else n, a.deletion_vector)

    def adds(self, adds: Sequence[AddFile]) -> _RowCount:
        rows, seen = _RowCount(), set()
        self.live.lookup(norm_path(a.path, self.root) for a in adds)
        self.probe(adds)
        for a in adds:
            p = norm_path(a.path, self.root)
            if p in seen:
                self.found("add_duplicate", "the same path is added twice", a.path)
                continue
            seen.add(p)
            self.add_identity(a, p)
            k = self.key_of(a.partition_values)
            if self.removed_keys and k not in self.removed_keys:
                msg = f"add's partition values {dict(a.partition_values)} match none of the removed files' partitions"
                self.found("partition_values_mismatch", msg, a.path)
            if not rows.add(k, self.add_rows(a)):
                self.found("row_count_unknown", "added file has no numRecords stats and no readable footer", a.path)
        return rows

    def totals(self, added: _RowCount, removed: _RowCount) -> None:
        if added.total is None or removed.total is None:
            return
        keys = added.by_key.keys() | removed.by_key.keys()
        diffs = sorted(
            (_partition_label(k, self.columns), removed.by_key.get(k, 0), added.by_key.get(k, 0))
            for k in keys
            if added.by_key.get(k, 0) != removed.by_key.get(k, 0)
        )
        detail = "; ".join(f"{label}: {rm} removed, {ad} added" for label, rm, ad in diffs[:10])
        if added.total != removed.total:
            msg = f"the adds hold {added.total} rows, the removes {removed.total} ({detail})"
            self.found("row_count_mismatch", msg)
        elif diffs:
            self.found("partition_values_mismatch", f"rows moved between partitions ({detail})")


class RemovesCheck:
    """The check of a commit's removes (``_ActionCheck.removes``), made a bin at a time as each bin finishes, while
    the others run, instead of all at once after the last bin, when OPTIMIZE's commit would wait for it (where
    the driver has a core of its own: docs/performance.md, "Issue 45, the driver's serial work around the bins").
    The same per-file checks, in the same order, against the snapshot the commit is validated against, and with
    one record of the paths removed, so a path two bins remove is found as before. ``check_actions`` takes it
    only for exactly these removes.
    """

    def __init__(self, snapshot: Snapshot) -> None:
        self.snapshot = snapshot
        self.live = LiveFiles(snapshot)
        self.removes: list[RemoveFile] = []
        self.rows = _RowCount()
        self._check = _ActionCheck(snapshot.location, snapshot, snapshot.storage, [], False, self.live)

    def add(self, files: Sequence[AddFile], removes: Sequence[RemoveFile]) -> None:
        """One bin's removes; ``files``: its input files, the snapshot's live files the removes retire."""
        self.live.remember(files)
        rows = self._check.removes(removes)
        self.removes.extend(removes)
        for key, n in rows.by_key.items():
            self.rows.by_key[key] = self.rows.by_key.get(key, 0) + n
        self.rows.known = self.rows.known and rows.known

    def covers(self, before: Snapshot | None, removes: Sequence[RemoveFile]) -> bool:
        """Whether this is the check of exactly ``removes`` (the same objects, in order) against ``before``."""
        return (
            before is self.snapshot
            and len(removes) == len(self.removes)
            and all(a is b for a, b in zip(removes, self.removes))
        )

    def _into(self, check: _ActionCheck) -> _RowCount:
        check.findings.extend(self._check.findings)
        check.removed_paths.update(self._check.removed_paths)
        check.removed_keys.update(self._check.removed_keys)
        return self.rows


def check_actions(
    root: str,
    before: Snapshot | None,
    adds: Sequence[AddFile],
    removes: Sequence[RemoveFile],
    findings: list[Finding],
    *,
    storage: Storage,
    check_footers: bool = True,
    live: LiveFiles | None = None,
    checked_removes: RemovesCheck | None = None,
) -> tuple[int | None, int | None]:
    """Every check that needs only the V-1 snapshot, the actions and the files; returns (rows added, removed).

    ``live``: the V-1 snapshot's live files, when the caller shares them with other checks. ``checked_removes``:
    the removes checked already, bin by bin; taken when it covers exactly ``removes`` against ``before``.
    """
    check = _ActionCheck(root, before, storage, findings, check_footers, live or LiveFiles(before))
    check.data_change(adds, removes)
    if checked_removes is not None and checked_removes.covers(before, removes):
        removed = checked_removes._into(check)
    else:
        removed = check.removes(removes)
    added = check.adds(adds)
    check.totals(added, removed)
    return added.total, removed.total
