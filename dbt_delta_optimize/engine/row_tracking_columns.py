"""Materialized row tracking columns: each rewritten row keeps its stable row id and row commit version.

A rewritten row lands in a new file with a new baseRowId, so its default row id (baseRowId + row
position) and commit version would change. As delta-spark's ``RowTracking.preserveRowTrackingColumns``
does for OPTIMIZE, the rewrite writes every row's stable values into the hidden columns the table's
configuration names: the value already materialized in the input when not null, else the input
file's ``baseRowId`` + the row's physical position in that file, and its ``defaultRowCommitVersion``.

Two ways, one rule: Arrow batches in a task (``tasks.row_ids``), and, here, a Spark DataFrame read
with ``_metadata.row_index`` (``read_with_row_tracking``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from ..delta.actions import AddFile
    from ..delta.row_tracking import RowTracking
    from .spark_engine import SparkEngine

__all__ = ["read_with_row_tracking", "row_tracking_fields", "row_tracking_spec"]


def row_tracking_fields(rt: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The two hidden columns as Delta schema fields (longs), appended to the data fields of a rewrite."""
    from ..tasks.arrow_schema import hidden_fields

    return hidden_fields(rt["row_id"], rt["commit_version"])


def row_tracking_spec(rt: RowTracking, files: Sequence[AddFile], table: str) -> dict[str, Any] | None:
    """Plain data for a task: the column names and each input's (baseRowId, defaultRowCommitVersion)."""
    from ..errors import CorruptLogError

    if not rt.materializes:
        return None
    missing = [f.path for f in files if f.base_row_id is None or f.default_row_commit_version is None]
    if missing:
        raise CorruptLogError(
            f"{table} has row tracking enabled but data file {missing[0]!r} has no baseRowId/defaultRowCommitVersion "
            "in the log, so its rows' ids cannot be kept. Nothing was written; backfill row tracking with delta-spark."
        )
    row_id, commit_version = rt.columns
    return {
        "row_id": row_id,
        "commit_version": commit_version,
        "files": [[f.base_row_id, f.default_row_commit_version] for f in files],
    }


def read_with_row_tracking(
    engine: SparkEngine,
    paths: Sequence[str],
    fields: list[dict[str, Any]],
    rt: Mapping[str, Any],
    *,
    positions: tuple[str, str] | None = None,
) -> DataFrame:
    """The files as one DataFrame: the data columns, then the two hidden columns filled for every row.

    The input is told apart by its name (``_metadata.file_name``), looked up in a literal map of
    (baseRowId, defaultRowCommitVersion); the position is ``_metadata.row_index`` (Spark >= 3.5).
    ``positions``: also keep (file name, row position) under these two column names, for the
    deletion-vector anti-join that follows (live_rows.read_live).
    """
    from pyspark.sql import functions as F

    names = [p.rstrip("/").rsplit("/", 1)[-1] for p in paths]
    if len(set(names)) != len(names):  # one name in two folders: read them one by one
        frames = [
            read_with_row_tracking(engine, [p], fields, {**rt, "files": [f]}, positions=positions)
            for p, f in zip(paths, rt["files"])
        ]
        out = frames[0]
        for frame in frames[1:]:
            out = out.unionByName(frame)
        return out
    from pyspark.sql.types import StructType

    from .spark_engine import LISTING_THRESHOLD_KEY

    schema = StructType.fromJson({"type": "struct", "fields": fields + row_tracking_fields(rt)})
    local = all(p.startswith(("/", "file:")) for p in paths)
    with engine.scoped_defaults({LISTING_THRESHOLD_KEY: str(max(32, len(paths) + 1))} if local else {}):
        df = engine.spark.read.schema(schema).parquet(*paths)
    pairs = []
    for name, (base, version) in zip(names, rt["files"]):
        pairs += [F.lit(name), F.struct(F.lit(base).cast("long").alias("b"), F.lit(version).cast("long").alias("v"))]
    info = F.element_at(F.create_map(*pairs), F.col("_metadata.file_name"))
    row_id, version = F.col(f"`{rt['row_id']}`"), F.col(f"`{rt['commit_version']}`")
    return df.select(
        *[F.col(f"`{f['name']}`") for f in fields],
        F.coalesce(row_id, info["b"] + F.col("_metadata.row_index")).alias(rt["row_id"]),
        F.coalesce(version, info["v"]).alias(rt["commit_version"]),
        *(
            [F.col("_metadata.file_name").alias(positions[0]), F.col("_metadata.row_index").alias(positions[1])]
            if positions
            else []
        ),
    )
