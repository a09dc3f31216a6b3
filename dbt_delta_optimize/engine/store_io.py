"""Spark DataFrames read from and written to an object store through Arrow inside the tasks.

Spark reads ``s3://`` or ``abfss://`` only with Hadoop connectors (hundreds of MB of jars, and
their own credential settings). The rows of a bin are read by tasks that open the files through
our storage (obstore, the same options as the log), and a clustered DataFrame is written by tasks
that stream each partition into one Parquet file and upload it: no connector, one set of options.
"""

from __future__ import annotations

import os
import tempfile
import uuid
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from .spark_engine import SparkEngine

__all__ = ["read_store_files", "write_store_files"]


def _reader(spec: Mapping[str, Any]) -> Any:
    """mapInArrow body: each input row names one file (by index); yield its rows in the table schema."""

    def read(batches: Iterator[Any]) -> Iterator[Any]:
        import pyarrow.parquet as pq

        from ..delta.deletion_vectors import load_deleted_rows
        from ..delta.storage import storage_for
        from .rewrite import _live_row_groups, _row_tracking_filler, _with_hidden_fields, arrow_schema, input_path

        storage = storage_for(spec["base"], spec["options"])
        row_tracking = spec.get("row_tracking")
        target = arrow_schema(_with_hidden_fields(spec["fields"], row_tracking))
        for batch in batches:
            for i in batch.column(0).to_pylist():
                item = spec["paths"][i]
                dv = None if isinstance(item, str) else item.get("deletionVector")
                deleted = load_deleted_rows(dv, root=spec["base"], storage=storage) if dv else None
                with storage.open_input(input_path(item)) as fh:
                    pf = pq.ParquetFile(fh, coerce_int96_timestamp_unit="us")
                    fill = _row_tracking_filler(row_tracking, i)
                    for t in _live_row_groups(pf, target, deleted, fill, by_id=spec["by_id"]):
                        yield from t.to_batches()

    return read


def read_store_files(
    engine: SparkEngine,
    paths: Sequence[str | Mapping[str, Any]],
    fields: list[dict[str, Any]],
    store: Mapping[str, Any],
    row_tracking: Mapping[str, Any] | None = None,
    *,
    by_id: bool = False,
) -> DataFrame:
    """The files' live rows as one DataFrame with the table's (physical) data schema, read by tasks through the store.

    An input given as ``{"path", "deletionVector"}`` loses the rows its DV deletes; ``row_tracking``
    (``row_tracking_spec``): the materialized row tracking columns follow, filled.
    """
    from pyspark.sql.types import StructType

    from .rewrite import _with_hidden_fields

    schema = StructType.fromJson({"type": "struct", "fields": _with_hidden_fields(fields, row_tracking)})
    spec = {"paths": list(paths), "fields": fields, "row_tracking": row_tracking, "by_id": by_id, **store}
    ids = engine.spark.range(0, len(paths), 1, max(1, min(len(paths), engine.default_parallelism)))
    return ids.mapInArrow(_reader(spec), schema)


def _writer(spec: Mapping[str, Any]) -> Any:
    """mapInArrow body: stream one partition's rows into one Parquet file, upload it to the staging folder."""

    def write(batches: Iterator[Any]) -> Iterator[Any]:
        import pyarrow as pa
        import pyarrow.parquet as pq

        from ..delta.storage import join, storage_for
        from .rewrite import arrow_schema

        storage = storage_for(spec["base"], spec["options"])
        target = arrow_schema(spec["fields"]) if spec.get("fields") else None
        writer, rows = None, 0
        with tempfile.TemporaryDirectory(prefix="ddo-part-") as tmp:
            local = os.path.join(tmp, "part.parquet")
            for batch in batches:
                if target is not None and batch.schema.names == target.names:
                    columns = [c.cast(f.type) for c, f in zip(batch.columns, target)]
                    batch = pa.RecordBatch.from_arrays(columns, schema=target)
                if writer is None:
                    writer = pq.ParquetWriter(local, batch.schema, compression=spec["compression"])
                writer.write_batch(batch)
                rows += batch.num_rows
            if writer is None:
                return
            writer.close()
            name = f"part-{uuid.uuid4()}.c000.{spec['suffix']}parquet"
            storage.put_file(join(spec["staging"], name), local)
        yield pa.RecordBatch.from_pydict({"name": [name], "rows": [rows]})

    return write


def write_store_files(
    df: DataFrame,
    staging: str,
    store: Mapping[str, Any],
    codec: str,
    fields: list[dict[str, Any]] | None = None,
) -> list[str]:
    """Write each partition of ``df`` as one Parquet file under ``staging`` (in the store); their names.

    ``fields`` (the physical data schema) gives the written files the table's Parquet field ids,
    which Spark's Arrow batches do not carry (column mapping).
    """
    compression = None if codec in ("none", "uncompressed") else codec
    spec = {
        "staging": staging,
        "compression": compression,
        "suffix": f"{codec}." if compression else "",
        "fields": fields,
        **store,
    }
    written = df.mapInArrow(_writer(spec), "name string, rows long").collect()
    return [r["name"] for r in written]
