"""The protocol gate: which table features our writer honours.

Checked before any data file is written, so a refused table is never touched.
Every unsupported feature is listed in one error (delta-kernel-rs's ensure_write_supported).
"""

from __future__ import annotations

import json

from ..errors import UnsupportedFeatureError
from .actions import Metadata, Protocol

__all__ = ["SUPPORTED_READER_FEATURES", "SUPPORTED_WRITER_FEATURES", "active_features", "ensure_write_supported"]

#: Writer features a data-rearranging (dataChange=false) commit can honour as-is.
SUPPORTED_WRITER_FEATURES = frozenset(
    {"appendOnly", "invariants", "checkConstraints", "generatedColumns", "changeDataFeed", "timestampNtz"}
    # liquid clustering: OPTIMIZE clusters by the delta.clustering domain (plan/liquid.py); that needs
    # domainMetadata, which an OPTIMIZE honours by writing no domain. v2Checkpoint: delta/checkpoint_v2.py.
    | {"clustering", "domainMetadata", "v2Checkpoint"}
)
SUPPORTED_READER_FEATURES = frozenset({"timestampNtz"} | {"v2Checkpoint"})

# Features implied by legacy (pre table-features) protocol versions.
_LEGACY_WRITER = {
    2: ("appendOnly", "invariants"),
    3: ("checkConstraints",),
    4: ("changeDataFeed", "generatedColumns"),
    5: ("columnMapping",),
    6: ("identityColumns",),
}

_WHY = {
    "deletionVectors": "rewriting files with deletion vectors is not supported yet",
    "columnMapping": "column mapping (physical column names) is not supported yet",
    "rowTracking": "row tracking would need row ids preserved",
    "domainMetadata": "domain metadata is not supported yet",
    "clustering": "liquid clustering tables must be optimized by their own clustering",
    "liquid": "liquid clustering tables must be optimized by their own clustering",
    "inCommitTimestamp": "in-commit timestamps are not written by this writer",
    "typeWidening": "type widening is not supported yet",
    "typeWidening-preview": "type widening is not supported yet",
    "identityColumns": "identity columns are not supported yet",
    "v2Checkpoint": "v2 checkpoints are not written by this writer",
    "vacuumProtocolCheck": "not supported yet",
    "icebergCompatV1": "Iceberg compatibility is not maintained by this writer",
    "icebergCompatV2": "Iceberg compatibility is not maintained by this writer",
    "variantType": "variant columns are not supported yet",
    "catalogManaged": "catalog-managed tables must be committed through their catalog",
    "catalogOwned-preview": "catalog-managed tables must be committed through their catalog",
}


def _has_identity_column(metadata: Metadata | None) -> bool:
    if metadata is None:
        return False
    try:
        fields = json.loads(metadata.schema_string).get("fields", [])
    except ValueError:
        return False
    return any("delta.identity.start" in (f.get("metadata") or {}) for f in fields)


def active_features(protocol: Protocol, metadata: Metadata | None = None) -> tuple[set[str], set[str]]:
    """(reader features, writer features) the table actually uses, legacy versions included."""
    readers: set[str] = set(protocol.reader_features or ())
    writers: set[str] = set(protocol.writer_features or ())
    if protocol.min_writer_version < 7:
        for version, feats in _LEGACY_WRITER.items():
            if protocol.min_writer_version >= version:
                writers.update(feats)
        # Legacy versions imply capability, not use: only count what the table really uses.
        cfg = metadata.configuration if metadata else {}
        if cfg.get("delta.columnMapping.mode", "none") in ("none", None):
            writers.discard("columnMapping")
        if not _has_identity_column(metadata):
            writers.discard("identityColumns")
    if protocol.min_reader_version == 2:
        cfg = metadata.configuration if metadata else {}
        if cfg.get("delta.columnMapping.mode", "none") not in ("none", None):
            readers.add("columnMapping")
    return readers, writers


def ensure_write_supported(protocol: Protocol, metadata: Metadata | None = None, *, table: str = "table") -> None:
    """Raise UnsupportedFeatureError naming every feature we cannot honour."""
    problems: list[str] = []
    if protocol.min_reader_version > 3:
        problems.append(f"minReaderVersion {protocol.min_reader_version}")
    if protocol.min_writer_version > 7:
        problems.append(f"minWriterVersion {protocol.min_writer_version}")
    readers, writers = active_features(protocol, metadata)
    bad = sorted((readers - SUPPORTED_READER_FEATURES) | (writers - SUPPORTED_WRITER_FEATURES))
    problems.extend(bad)
    dv_enabled = (
        metadata is not None and metadata.configuration.get("delta.enableDeletionVectors", "").lower() == "true"
    )
    if dv_enabled and "deletionVectors" not in bad:
        bad.append("deletionVectors")
        problems.append("deletionVectors")
    if not problems:
        return
    details = "; ".join(f"{p} ({_WHY[p]})" if p in _WHY else p for p in problems)
    raise UnsupportedFeatureError(
        f"{table} uses Delta protocol features that dbt-delta-optimize cannot honour: {details}. "
        f"Nothing was written. Use delta-spark's OPTIMIZE for this table, or skip it "
        f"(meta.delta_optimize.skip: true in dbt).",
        tuple(bad),
    )
