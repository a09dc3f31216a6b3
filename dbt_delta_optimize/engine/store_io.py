"""Spark DataFrames read from and written to an object store through Arrow inside the tasks.

The task bodies are ``tasks.frames``; this module builds the DataFrames around them. A bin's rows
are read by tasks that open the files through our storage (obstore, the same options as the log),
and a clustered DataFrame is written by tasks that stream each partition into one Parquet file on
the store: no Hadoop connector, one set of options.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ..tasks.arrow_schema import with_hidden_fields
from ..tasks.frames import ReadSpec, WriteSpec, read_files, write_files
from ..tasks.messages import InputFile, RowTrackingColumns, StoreRef

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from .spark_engine import SparkEngine

__all__ = ["read_store_files", "write_store_files"]


def read_store_files(
    engine: SparkEngine,
    inputs: Sequence[InputFile],
    fields: Sequence[Mapping[str, Any]],
    store: StoreRef,
    row_tracking: RowTrackingColumns | None = None,
    *,
    by_id: bool = False,
) -> DataFrame:
    """The files' live rows as one DataFrame with the table's (physical) data schema, read by tasks through the store.

    An input with a deletion vector loses the rows it deletes; with ``row_tracking`` the materialized
    row tracking columns follow, filled.
    """
    from pyspark.sql.types import StructType

    schema = StructType.fromJson({"type": "struct", "fields": with_hidden_fields(fields, row_tracking)})
    spec = ReadSpec(store, tuple(inputs), tuple(fields), row_tracking, by_id)
    ids = engine.spark.range(0, len(inputs), 1, max(1, min(len(inputs), engine.default_parallelism)))
    return ids.mapInArrow(functools.partial(read_files, spec), schema)


def write_store_files(
    df: DataFrame,
    staging: str,
    store: StoreRef,
    codec: str,
    fields: Sequence[Mapping[str, Any]] | None = None,
) -> list[str]:
    """Write each partition of ``df`` as one Parquet file under ``staging`` (in the store); their names.

    ``fields`` (the physical data schema) gives the written files the table's Parquet field ids,
    which Spark's Arrow batches do not carry (column mapping).
    """
    compression = None if codec in ("none", "uncompressed") else codec
    spec = WriteSpec(store, staging, compression, f"{codec}." if compression else "", tuple(fields or ()))
    written = df.mapInArrow(functools.partial(write_files, spec), "name string, rows long").collect()
    return [r["name"] for r in written]
