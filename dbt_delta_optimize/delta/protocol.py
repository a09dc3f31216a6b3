"""The protocol gate: which table features our writer honours.

Checked before any data file is written, so a refused table is never touched.
Every unsupported feature is listed in one error (delta-kernel-rs's ensure_write_supported).
"""

from __future__ import annotations

import json

from ..errors import UnsupportedFeatureError
from .actions import Metadata, Protocol

__all__ = ["SUPPORTED_READER_FEATURES", "SUPPORTED_WRITER_FEATURES", "active_features", "ensure_write_supported"]

#: Writer features a data-rearranging (dataChange=false) commit honours: the rows and the schema are
#: unchanged, so constraints, generated values and identity high-water marks stay true; no CDC file is
#: written (delta-spark's OPTIMIZE writes none either); appendOnly allows dataChange=false removes;
#: vacuumProtocolCheck asks only VACUUM for something. Deletion vectors are applied on read (the new
#: files carry none) and each remove carries its file's DV; variant columns are copied as Spark reads them.
_AS_IS = frozenset(
    {
        "appendOnly",
        "invariants",
        "checkConstraints",
        "generatedColumns",
        "changeDataFeed",
        "timestampNtz",
        "identityColumns",
        "deletionVectors",
        "vacuumProtocolCheck",
        "variantType",
        "variantType-preview",
    }
)
#: Column mapping (physical names, field ids) and type widening (files read in the current type):
#: honoured by the rewriters (delta/column_mapping.py, engine/rewrite.py).
_MAPPING_AND_WIDENING = frozenset({"columnMapping", "typeWidening", "typeWidening-preview"})
#: Row ids and commit versions materialized on rewrite, the mark kept, other domains carried through
#: (delta/row_tracking.py); commitInfo first with its in-commit timestamp (delta/in_commit_timestamps.py).
_ROW_TRACKING_AND_ICT = frozenset({"rowTracking", "domainMetadata", "inCommitTimestamp"})
#: Liquid clustering: OPTIMIZE clusters by the delta.clustering domain (plan/liquid.py);
#: v2Checkpoint: V2 checkpoints read and written (delta/checkpoint_v2.py).
_CLUSTERING_AND_V2_CHECKPOINTS = frozenset({"clustering", "v2Checkpoint"})
SUPPORTED_WRITER_FEATURES = _AS_IS | _MAPPING_AND_WIDENING | _ROW_TRACKING_AND_ICT | _CLUSTERING_AND_V2_CHECKPOINTS
SUPPORTED_READER_FEATURES = frozenset(
    {"timestampNtz", "deletionVectors", "vacuumProtocolCheck", "variantType", "variantType-preview", "v2Checkpoint"}
    | _MAPPING_AND_WIDENING
)

# Features implied by legacy (pre table-features) protocol versions.
_LEGACY_WRITER = {
    2: ("appendOnly", "invariants"),
    3: ("checkConstraints",),
    4: ("changeDataFeed", "generatedColumns"),
    5: ("columnMapping",),
    6: ("identityColumns",),
}

_WHY = {
    "icebergCompatV1": "Iceberg compatibility is not maintained by this writer",
    "icebergCompatV2": "Iceberg compatibility is not maintained by this writer",
    "variantShredding": "shredded variant columns are not rewritten faithfully yet",
    "variantShredding-preview": "shredded variant columns are not rewritten faithfully yet",
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
    if not problems:
        return
    details = "; ".join(f"{p} ({_WHY[p]})" if p in _WHY else p for p in problems)
    raise UnsupportedFeatureError(
        f"{table} uses Delta protocol features that dbt-delta-optimize cannot honour: {details}. "
        f"Nothing was written. Use delta-spark's OPTIMIZE for this table, or skip it "
        f"(meta.delta_optimize.skip: true in dbt).",
        tuple(bad),
    )
