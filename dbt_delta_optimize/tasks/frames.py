"""``mapInArrow`` bodies of the Spark rewrite paths: files read, written and DVs decoded through our storage.

Spark reads ``s3://`` or ``abfss://`` only with Hadoop connectors (hundreds of MB of jars, and
their own credential settings). When a bin goes through Spark (Z-order, Hilbert, liquid, or a
fallback), tasks read its files through our storage (obstore, the same options as the log),
streaming each partition's rows into one Parquet file on the store, and decode deletion vectors
for the Spark reader's anti-join. Each body takes a frozen spec; the functions are pickled by
reference (the package is shipped to the executors first).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from .arrow_schema import arrow_schema, with_hidden_fields
from .inputs import read_live_tables
from .messages import InputFile, RowTrackingColumns, StoreRef
from .worker import task_storage

__all__ = ["DecodeSpec", "ReadSpec", "WriteSpec", "decode_deletion_vectors", "read_files", "write_files"]


@dataclass(frozen=True)
class ReadSpec:
    """Files of a bin whose live rows tasks read (row ``i`` of the driving range reads ``inputs[i]``)."""

    store: StoreRef
    inputs: tuple[InputFile, ...]
    fields: tuple[Mapping[str, Any], ...]
    row_tracking: RowTrackingColumns | None
    by_id: bool


@dataclass(frozen=True)
class WriteSpec:
    """Each partition of a DataFrame streamed into one Parquet file under ``staging`` on the store."""

    store: StoreRef
    staging: str
    compression: str | None
    suffix: str
    fields: tuple[Mapping[str, Any], ...]


@dataclass(frozen=True)
class DecodeSpec:
    """Deletion vectors to decode (row ``i`` decodes ``files[i]``: a file name and its DV as logged)."""

    store: StoreRef
    files: tuple[tuple[str, Mapping[str, Any]], ...]


def read_files(spec: ReadSpec, batches: Iterator[Any]) -> Iterator[Any]:
    """Each input row names one file (by index): yield its live rows in the table schema."""
    storage, local = task_storage(spec.store)
    target = arrow_schema(with_hidden_fields(spec.fields, spec.row_tracking))
    for batch in batches:
        for i in batch.column(0).to_pylist():
            inputs = (spec.inputs[i],)
            for t in read_live_tables(
                storage,
                spec.store.root,
                inputs,
                target,
                local=local,
                by_id=spec.by_id,
                row_tracking=spec.row_tracking,
            ):
                yield from t.to_batches()


def _conformed(batch: Any, target: Any) -> Any:
    """Spark's Arrow batches carry no Parquet field ids: give them the table's (column mapping)."""
    import pyarrow as pa

    if target is None or batch.schema.names != target.names:
        return batch
    return pa.RecordBatch.from_arrays([c.cast(f.type) for c, f in zip(batch.columns, target)], schema=target)


def write_files(spec: WriteSpec, batches: Iterator[Any]) -> Iterator[Any]:
    """Stream this partition's rows into one Parquet file uploaded under ``spec.staging``; yield its name."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from ..delta.storage import join

    storage, _ = task_storage(spec.store)
    target = arrow_schema(spec.fields) if spec.fields else None
    name = f"part-{uuid.uuid4()}.c000.{spec.suffix}parquet"
    writer, rows, sink = None, 0, None
    try:
        for batch in batches:
            batch = _conformed(batch, target)
            if writer is None:
                sink = storage.open_output(join(spec.staging, name))
                writer = pq.ParquetWriter(sink, batch.schema, compression=spec.compression)
            writer.write_batch(batch)
            rows += batch.num_rows
    finally:
        if writer is not None:
            writer.close()
        if sink is not None:
            sink.close()
    if writer is not None:
        yield pa.RecordBatch.from_pydict({"name": [name], "rows": [rows]})


def decode_deletion_vectors(spec: DecodeSpec, batches: Iterator[Any]) -> Iterator[Any]:
    """Each input row names one file (by index): yield (file name, deleted position) rows."""
    import pyarrow as pa

    from ..delta.deletion_vectors import load_deleted_rows

    storage, _ = task_storage(spec.store)
    for batch in batches:
        for i in batch.column(0).to_pylist():
            name, dv = spec.files[i]
            rows = load_deleted_rows(dv, root=spec.store.root, storage=storage).rows
            yield pa.RecordBatch.from_arrays(
                [pa.array([name] * len(rows), pa.string()), pa.array(rows, pa.int64())], names=["_ddo_file", "_ddo_row"]
            )
