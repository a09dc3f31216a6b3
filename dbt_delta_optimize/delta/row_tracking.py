"""Row tracking (PROTOCOL.md "Row Tracking"): fresh row ids and commit versions for the files we add.

A rewrite keeps each row's stable row id and row commit version by materializing them into the
hidden columns the table's configuration names (``engine/row_tracking_columns.py`` does that in
the data). The commit then gives every new file a fresh ``baseRowId`` above the table's high-water
mark, ``defaultRowCommitVersion`` = the version it lands in, and raises the mark with a
``delta.rowTracking`` domainMetadata action, as delta-spark's ``RowId.assignFreshRowIds`` and
``DefaultRowCommitVersion.assignIfMissing`` do. On a rebase over a winner that raised the mark,
the ids are assigned again above the winner's mark (``ConflictChecker.reassignOverlappingRowIds``).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from ..errors import CorruptLogError, UnsupportedFeatureError
from .actions import DOMAIN_METADATA, AddFile, DomainMetadata, Metadata, Protocol

__all__ = [
    "COMMIT_VERSION_COLUMN_PROP",
    "MISSING_HIGH_WATER_MARK",
    "PRESERVED_TAG",
    "ROW_ID_COLUMN_PROP",
    "ROW_TRACKING_DOMAIN",
    "RowTracking",
    "assign_fresh_row_ids",
    "high_water_mark",
    "high_water_mark_action",
    "winning_high_water_mark",
]

ROW_TRACKING_DOMAIN = "delta.rowTracking"
ROW_ID_COLUMN_PROP = "delta.rowTracking.materializedRowIdColumnName"
COMMIT_VERSION_COLUMN_PROP = "delta.rowTracking.materializedRowCommitVersionColumnName"
#: commitInfo tag delta-spark sets when every stable row id and commit version was preserved.
PRESERVED_TAG = "delta.rowTracking.preserved"
#: The mark of a table that never assigned a row id (the first id is then 0).
MISSING_HIGH_WATER_MARK = -1


def _true(value: str | None) -> bool:
    return (value or "").strip().lower() == "true"


@dataclass(frozen=True)
class RowTracking:
    """What row tracking asks of a writer on one table version."""

    supported: bool  #: rowTracking is a writer feature: new files need baseRowId/defaultRowCommitVersion
    enabled: bool  #: delta.enableRowTracking: stable ids must be preserved (materialized) on rewrite
    suspended: bool  #: delta.rowTrackingSuspended: assign nothing
    row_id_column: str | None = None
    commit_version_column: str | None = None

    @classmethod
    def of(cls, protocol: Protocol, metadata: Metadata, *, table: str = "table") -> RowTracking:
        supported = "rowTracking" in (protocol.writer_features or ())
        cfg = metadata.configuration
        enabled = _true(cfg.get("delta.enableRowTracking"))
        suspended = _true(cfg.get("delta.rowTrackingSuspended"))
        if enabled and not supported:
            raise UnsupportedFeatureError(
                f"{table} sets delta.enableRowTracking but its protocol lacks the rowTracking feature: the log is "
                "inconsistent. Nothing was written; repair the table with delta-spark.",
                ("rowTracking",),
            )
        if enabled and suspended:
            raise UnsupportedFeatureError(
                f"{table} sets both delta.enableRowTracking and delta.rowTrackingSuspended, which the protocol "
                "forbids. Nothing was written; unset one of them with delta-spark.",
                ("rowTracking",),
            )
        rt = cls(supported, enabled, suspended, cfg.get(ROW_ID_COLUMN_PROP), cfg.get(COMMIT_VERSION_COLUMN_PROP))
        if enabled and not (rt.row_id_column and rt.commit_version_column):
            raise CorruptLogError(
                f"{table} has row tracking enabled but its configuration names no materialized row id / row commit "
                f"version column ({ROW_ID_COLUMN_PROP}, {COMMIT_VERSION_COLUMN_PROP}). Nothing was written."
            )
        return rt

    @property
    def assigns(self) -> bool:
        """New files get fresh baseRowId and defaultRowCommitVersion, and the high-water mark moves."""
        return self.supported and not self.suspended

    @property
    def materializes(self) -> bool:
        """A rewrite must write each row's stable id and commit version into the hidden columns."""
        return self.enabled

    @property
    def columns(self) -> tuple[str, str]:
        """(materialized row id column, materialized row commit version column); only when enabled."""
        assert self.row_id_column is not None and self.commit_version_column is not None
        return self.row_id_column, self.commit_version_column

    def commit_tags(self) -> dict[str, str]:
        """commitInfo tags a preserving rewrite carries (delta-spark's addPreservedRowTrackingTagIfNotSet)."""
        return {PRESERVED_TAG: "true"} if self.enabled else {}


def _mark_of(config: Mapping[str, Any], where: str) -> int:
    value = config.get("rowIdHighWaterMark")
    if isinstance(value, bool) or not isinstance(value, int):
        raise CorruptLogError(f"The {ROW_TRACKING_DOMAIN} domain metadata {where} has no integer rowIdHighWaterMark.")
    return value


def high_water_mark(domains: Mapping[str, DomainMetadata]) -> int:
    """The highest row id assigned so far (-1 when none was), from the live domains."""
    dm = domains.get(ROW_TRACKING_DOMAIN)
    return MISSING_HIGH_WATER_MARK if dm is None else _mark_of(dm.config, "of the snapshot")


def winning_high_water_mark(actions: Iterable[Mapping[str, Any]], version: int) -> int | None:
    """The mark a winning commit set, if it set one."""
    for action in actions:
        body = action.get(DOMAIN_METADATA)
        if isinstance(body, Mapping) and body.get("domain") == ROW_TRACKING_DOMAIN and not body.get("removed"):
            return _mark_of(DomainMetadata.from_json(body).config, f"of version {version}")
    return None


def high_water_mark_action(mark: int) -> DomainMetadata:
    """The domainMetadata action recording ``mark`` (the configuration delta-spark writes)."""
    config = json.dumps({"rowIdHighWaterMark": mark, "domainName": ROW_TRACKING_DOMAIN}, separators=(",", ":"))
    return DomainMetadata(ROW_TRACKING_DOMAIN, config)


def assign_fresh_row_ids(adds: Sequence[AddFile], mark: int, version: int) -> tuple[list[AddFile], int]:
    """Each add's baseRowId from ``mark`` + 1 on (its physical rows reserve ids), commit version ``version``.

    Returns the adds and the new mark. Every file we add is new, so every one gets fresh values.
    """
    out: list[AddFile] = []
    for a in adds:
        rows = a.num_records
        if rows is None:
            raise CorruptLogError(
                f"Cannot assign row ids to new file {a.path!r}: its stats have no numRecords. Nothing was committed."
            )
        out.append(replace(a, base_row_id=mark + 1, default_row_commit_version=version))
        mark += rows
    return out, mark
