"""Reading only the live rows of files with deletion vectors, in a Spark DataFrame.

A deletion vector names deleted rows by their position in the data file. The Arrow paths (the
bin task, the object-store reader) filter by position while streaming row groups. The Spark path
reads ``_metadata.row_index`` (Spark's Parquet row position) with each row and anti-joins it with
the deleted positions, which tasks decode from the DVs through the table's storage (nothing is
collected on the driver, no py4j or RDD call: DataFrame operations only, as on Spark Connect).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ..delta.actions import AddFile
from ..delta.snapshot import Snapshot

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from .spark_engine import SparkEngine

__all__ = ["live_row_count", "read_live"]

_FILE, _ROW = "_ddo_file", "_ddo_row"
#: Up to this many deleted positions per bin are broadcast to the scan (a few tens of MB at most);
#: beyond it Spark joins by shuffling, which any number of rows survives.
BROADCAST_MAX_ROWS = 2_000_000


def live_row_count(files: Sequence[AddFile]) -> int | None:
    """Rows the files hold once their DVs are applied (None when some file has no numRecords)."""
    total = 0
    for f in files:
        n = f.num_records
        if n is None:
            return None
        total += n - (f.deletion_vector.cardinality if f.deletion_vector else 0)
    return total


def _deleted_positions(
    engine: SparkEngine, snapshot: Snapshot, files: Sequence[AddFile], names: list[str]
) -> DataFrame:
    """(file name, deleted position) of every DV of ``files``, decoded by tasks through the storage."""
    import functools

    from ..tasks.frames import DecodeSpec, decode_deletion_vectors
    from ..tasks.messages import StoreRef

    dvs = tuple((n, f.deletion_vector.to_json()) for n, f in zip(names, files) if f.deletion_vector is not None)
    spec = DecodeSpec(StoreRef(snapshot.location, {}), dvs)  # the Spark reader serves local tables only
    ids = engine.spark.range(0, len(dvs), 1, max(1, min(len(dvs), engine.default_parallelism)))
    return ids.mapInArrow(functools.partial(decode_deletion_vectors, spec), f"{_FILE} string, {_ROW} long")


def _read_with_positions(
    engine: SparkEngine, paths: list[str], fields: list[dict[str, Any]], row_tracking: Mapping[str, Any] | None
) -> DataFrame:
    if row_tracking is not None:  # the hidden row-id columns are filled from physical positions first
        from .row_tracking_columns import read_with_row_tracking

        return read_with_row_tracking(engine, paths, fields, row_tracking, positions=(_FILE, _ROW))
    from pyspark.sql import functions as F
    from pyspark.sql.types import StructType

    from .spark_engine import LISTING_THRESHOLD_KEY

    schema = StructType.fromJson({"type": "struct", "fields": fields})
    local = all(p.startswith(("/", "file:")) for p in paths)
    with engine.scoped_defaults({LISTING_THRESHOLD_KEY: str(max(32, len(paths) + 1))} if local else {}):
        df = engine.spark.read.schema(schema).parquet(*paths)
    return df.select(
        *[F.col(f"`{f['name']}`") for f in fields],
        F.col("_metadata.file_name").alias(_FILE),
        F.col("_metadata.row_index").alias(_ROW),
    )


def read_live(
    engine: SparkEngine,
    snapshot: Snapshot,
    files: Sequence[AddFile],
    row_tracking: Mapping[str, Any] | None = None,
) -> DataFrame:
    """The files' live rows as one DataFrame with the table's data schema (local tables; Spark's reader).

    ``row_tracking`` (``row_tracking_spec``): the hidden row-id columns follow the data columns.
    """
    from .row_tracking_columns import row_tracking_fields

    fields = snapshot.physical_data_fields
    paths = [snapshot.file_path(f.path) for f in files]
    names = [os.path.basename(p) for p in paths]
    hidden = row_tracking_fields(row_tracking) if row_tracking else []
    columns = [f"`{f['name']}`" for f in [*fields, *hidden]]
    if len(set(names)) == len(names):
        from pyspark.sql import functions as F

        rows = _read_with_positions(engine, paths, fields, row_tracking)
        deleted = _deleted_positions(engine, snapshot, files, names)
        if sum(f.deletion_vector.cardinality for f in files if f.deletion_vector) <= BROADCAST_MAX_ROWS:
            deleted = F.broadcast(deleted)  # the scan filters in place: no shuffle of the bin's rows
        return rows.join(deleted, on=[_FILE, _ROW], how="left_anti").select(*columns)
    # Two inputs share a file name (different folders): join each file with its own positions.
    out: DataFrame | None = None
    for i, (path, name, f) in enumerate(zip(paths, names, files)):
        one = {**row_tracking, "files": [row_tracking["files"][i]]} if row_tracking else None
        part = _read_with_positions(engine, [path], fields, one)
        if f.deletion_vector is not None:
            part = part.join(_deleted_positions(engine, snapshot, [f], [name]), on=[_FILE, _ROW], how="left_anti")
        part = part.select(*columns)
        out = part if out is None else out.unionByName(part)
    assert out is not None
    return out
