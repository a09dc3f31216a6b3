"""Row-group copy: compact a bin by moving its large Parquet row groups byte for byte.

Decoding and re-encoding every value is most of what a compaction costs. A row group that is
already large (``min_bytes`` or more, compressed) goes into the output unchanged: its column
chunks' bytes are copied with large reads through the caller's opener, and only its footer entry
is rewritten (offsets shifted; page index and bloom filter offsets dropped, since those structures
are not copied). The bin's small row groups are re-encoded with pyarrow and merged into row groups
of the usual size, in the same output file. One new footer describes them all, with the schema,
key-value metadata and ``created_by`` of the table writer (pyarrow, as in the usual rewrite).

A row group is copied only when that is exactly right: its file has the physical schema the output
has (types, repetition, field ids, logical types), is not encrypted, holds no legacy-calendar values,
its footer decodes without loss, and the caller has no reason against it (a deletion vector on the
file, row tracking columns not yet materialized, clustering). ``plan_copy`` decides from the footers
alone, before a byte is written, so a bin that cannot be copied falls back to the usual rewrite with
nothing to undo. The output goes to a sequential sink (a local file, a streaming multipart upload):
it is written once, front to back, never sought or read.
"""

from __future__ import annotations

import io
import os
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, BinaryIO, Literal, Protocol

from .parquet_footer import (
    MAGIC,
    Footer,
    FooterError,
    chunk_span,
    footer_metadata,
    footer_of_bytes,
    leaf_paths,
    pyarrow_metadata,
    read_footer,
    schema_difference,
    thrift,
)
from .parquet_sink import ParquetOutput, Sink, rg_bytes, span

__all__ = [
    "DEFAULT_MIN_BYTES",
    "LEGACY_CALENDAR_KEYS",
    "UNTRUSTED_WRITERS",
    "Conform",
    "CopyInput",
    "CopyPlan",
    "CopyResult",
    "InputPlan",
    "Reason",
    "ReasonKind",
    "Sink",
    "WriterOptions",
    "copy_compact",
    "plan_copy",
    "write_plan",
    "writer_kwargs",
]

DEFAULT_MIN_BYTES = 32 * 1024 * 1024
DEFAULT_ROW_GROUP_BYTES = 128 * 1024 * 1024
#: Footer keys Spark writes when values use the legacy hybrid calendar (must be rebased by Spark).
LEGACY_CALENDAR_KEYS = (b"org.apache.spark.legacyDateTime", b"org.apache.spark.legacyINT96")
_MAX_GAP = 1024 * 1024  #: neighbouring copied row groups closer than this are read as one range
#: parquet-mr before 1.10 wrote wrong chunk sizes and statistics in some cases: never copy from it.
UNTRUSTED_WRITERS = tuple(f"parquet-mr version 1.{minor}." for minor in range(10))

ReasonKind = Literal[
    "off",  # min_bytes is 0
    "small_row_groups",  # no row group of the bin reaches min_bytes
    "unavailable",  # thriftpy2 cannot be imported in this Python
    "footer",  # an input's footer cannot be read, does not round-trip, or comes from an untrusted writer
    "encrypted",
    "legacy_calendar",
    "schema",  # an input's physical schema is not the output's
    "layout",  # column chunks not where a copy needs them (another file, gaps, index pages)
    "deletion_vectors",
    "row_tracking",
    "type_widening",
    "clustering",
]


@dataclass(frozen=True)
class Reason:
    """Why a bin (or one input's large row groups) was re-encoded rather than copied."""

    kind: ReasonKind
    detail: str

    def __str__(self) -> str:
        return f"not copyable ({self.kind}): {self.detail}"


@dataclass(frozen=True)
class CopyInput:
    """One input file of a bin, as the caller knows it."""

    path: str
    #: its size when known (from the log): a bin whose files are all smaller than ``min_bytes`` reads nothing
    size: int | None = None
    #: the caller's reason never to copy this file (e.g. ``Reason("deletion_vectors", ...)``): re-encoded
    reencode: Reason | None = None


class Conform(Protocol):
    """Turns a row group read from an input into rows of the output schema (casts, deleted rows, row ids)."""

    def __call__(self, table: Any, *, input_index: int, first_row: int) -> Any: ...


@dataclass(frozen=True)
class WriterOptions:
    """The pyarrow writer settings that decide the output's physical types, chosen to match the inputs."""

    int96: bool = False  #: timestamps as INT96 (what Spark writes by default)
    decimal_as_int: bool = False  #: decimals of precision <= 18 as INT32/INT64 (Spark, delta-rs)


def writer_kwargs(options: WriterOptions, compression: str) -> dict[str, Any]:
    """``pq.ParquetWriter`` arguments: the usual rewrite's, plus the physical-type options."""
    return {
        "compression": None if compression in ("none", "uncompressed") else compression,
        "use_compliant_nested_type": True,
        "coerce_timestamps": "us",
        "allow_truncated_timestamps": False,
        "write_statistics": True,
        "use_deprecated_int96_timestamps": options.int96,
        "store_decimal_as_integer": options.decimal_as_int,
    }


@dataclass(frozen=True)
class InputPlan:
    """One input: which of its row groups are copied, and why its large ones are not (if so)."""

    footer: Footer
    copy: tuple[bool, ...]
    reason: Reason | None = None


@dataclass(frozen=True)
class CopyPlan:
    """What ``copy_compact`` writes: the inputs' copied row groups, and the writer whose footer the output takes."""

    inputs: tuple[InputPlan, ...]
    options: WriterOptions
    reference: Footer  #: pyarrow's footer for the output schema with ``options`` (schema, key-values, created_by)

    @property
    def row_groups_copied(self) -> int:
        return sum(sum(p.copy) for p in self.inputs)

    @property
    def bytes_copied(self) -> int:
        return sum(rg_bytes(rg) for p in self.inputs for rg, c in zip(p.footer.meta.row_groups, p.copy) if c)


@dataclass(frozen=True)
class CopyResult:
    """What a bin's copy did. ``fallback`` set: nothing was written; rewrite the bin the usual way."""

    rows: int = 0
    size: int = 0  #: bytes written to the sink
    row_groups_copied: int = 0
    bytes_copied: int = 0  #: compressed bytes of the copied row groups
    row_groups_reencoded: int = 0  #: input row groups decoded and re-encoded
    bytes_reencoded: int = 0  #: their compressed bytes in the inputs
    row_groups_written: int = 0  #: row groups in the output file
    fallback: Reason | None = None
    #: why an input's large row groups were re-encoded anyway (one entry per such input)
    reencoded_because: tuple[Reason, ...] = field(default=())
    #: the output's footer (Thrift bytes); ``metadata()`` turns it into pyarrow's, for the add action's stats
    footer: bytes = field(default=b"", repr=False)

    @property
    def copied(self) -> bool:
        return self.fallback is None

    def metadata(self) -> Any:
        """pyarrow's ``FileMetaData`` of the output (what ``stats_from_metadata`` takes), from ``footer``."""
        return footer_metadata(self.footer)


# ---------------------------------------------------------------------------- planning
def _name(footer: Footer) -> str:
    return os.path.basename(footer.path.rstrip("/")) or footer.path


def _reference(target: Any, options: WriterOptions) -> Footer:
    """The footer pyarrow writes for the output schema with these options (no rows)."""
    import pyarrow.parquet as pq

    buf = io.BytesIO()
    pq.ParquetWriter(buf, target, **writer_kwargs(options, "snappy")).close()
    return footer_of_bytes(buf.getvalue(), "<output schema>")


def _candidate_options(target: Any) -> list[WriterOptions]:
    """The writer settings worth trying: only those that change a column of this schema.

    INT96 only when every timestamp is a UTC one: INT96 means an instant to Spark, which refuses
    to read it as a TIMESTAMP_NTZ column (and pyarrow would write every timestamp as INT96).
    """
    import pyarrow as pa

    kinds: set[str] = set()

    def visit(t: Any) -> None:
        if pa.types.is_timestamp(t):
            kinds.add("ts" if t.tz is not None else "ntz")
        elif pa.types.is_decimal(t) and t.precision <= 18:
            kinds.add("dec")
        elif pa.types.is_struct(t):
            for i in range(t.num_fields):
                visit(t.field(i).type)
        elif pa.types.is_map(t):
            visit(t.key_type)
            visit(t.item_type)
        elif pa.types.is_list(t) or pa.types.is_large_list(t):
            visit(t.value_type)

    for f in target:
        visit(f.type)
    return [
        WriterOptions(int96, dec)
        for int96 in ((False, True) if "ts" in kinds and "ntz" not in kinds else (False,))
        for dec in ((False, True) if "dec" in kinds else (False,))
    ]


def _layout_problem(footer: Footer, rg: Any, leaves: int) -> str | None:
    """Why this row group's chunks cannot be moved as one byte range (None: they can)."""
    if len(rg.columns) != leaves:
        return f"a row group has {len(rg.columns)} column chunks for {leaves} columns"
    end = None
    for c in rg.columns:
        md = c.meta_data
        if md is None or c.crypto_metadata is not None or c.encrypted_column_metadata is not None:
            return "a column chunk has no plain metadata"
        if c.file_path is not None:
            return "a column chunk lives in another file"
        if md.index_page_offset is not None:
            return "a column chunk has an index page"
        start, stop = chunk_span(c)
        if (end is not None and start != end) or start < len(MAGIC) or stop > footer.start:
            return "the column chunks of a row group are not one contiguous range"
        end = stop
    return None


def _materialized(rg: Any, columns: Sequence[str]) -> bool:
    """Every named top-level column has no null in this row group (from its chunk statistics)."""
    wanted = {name.encode() for name in columns}
    seen = 0
    for c in rg.columns:
        path = c.meta_data.path_in_schema if c.meta_data is not None else []
        if len(path) == 1 and path[0] in wanted:
            st = c.meta_data.statistics
            if st is None or st.null_count is None or st.null_count != 0:
                return False
            seen += 1
    return seen == len(wanted)


def _input_plan(
    footer: Footer,
    reference: Footer,
    *,
    min_bytes: int,
    caller: Reason | None,
    materialized: Sequence[str],
) -> InputPlan:
    """Which of one input's row groups are copied: the large ones, when nothing speaks against it."""
    groups = footer.meta.row_groups
    large = tuple(rg_bytes(rg) >= min_bytes for rg in groups)
    none = tuple(False for _ in groups)
    if not any(large):
        return InputPlan(footer, none)
    name = _name(footer)
    problem: Reason | None = caller
    if problem is None and not footer.exact:
        problem = Reason("footer", f"{name}: its footer has fields this reader does not know")
    if problem is None and footer.created_by.startswith(UNTRUSTED_WRITERS):
        problem = Reason("footer", f"{name} was written by {footer.created_by}, whose chunk sizes are not trusted")
    if problem is None:
        diff = schema_difference(footer.meta.schema, reference.meta.schema)
        problem = None if diff is None else Reason("schema", f"{name}: {diff}")
    if problem is None:
        leaves = len(leaf_paths(reference.meta.schema))
        layout = next(
            (p for rg, big in zip(groups, large) if big for p in [_layout_problem(footer, rg, leaves)] if p), None
        )
        problem = None if layout is None else Reason("layout", f"{name}: {layout}")
    if problem is not None:
        return InputPlan(footer, none, problem)
    copy = tuple(big and (not materialized or _materialized(rg, materialized)) for rg, big in zip(groups, large))
    if copy != large:
        why = Reason("row_tracking", f"{name}: row tracking columns are not materialized in every row group")
        return InputPlan(footer, copy, why)
    return InputPlan(footer, copy)


def _bin_reason(footers: Sequence[Footer], min_bytes: int) -> Reason | None:
    for f in footers:
        if any(k in f.key_values for k in LEGACY_CALENDAR_KEYS):
            return Reason("legacy_calendar", f"{_name(f)} uses Spark's legacy hybrid calendar")
    if not any(rg_bytes(rg) >= min_bytes for f in footers for rg in f.meta.row_groups):
        return Reason("small_row_groups", f"no row group of {len(footers)} files reaches {min_bytes} bytes")
    return None


def plan_copy(
    footers: Sequence[Footer],
    target: Any,
    *,
    min_bytes: int,
    reasons: Sequence[Reason] = (),
    reencode: Sequence[Reason | None] = (),
    materialized: Sequence[str] = (),
) -> CopyPlan | Reason:
    """Decide, from the inputs' footers alone, which row groups a bin copies; or why it copies none.

    ``target``: the output's Arrow schema (the table's physical data schema, as the usual rewrite
    writes it). ``reasons``: the caller's reasons against copying anything in this bin;
    ``reencode[i]``: against copying input ``i``. ``materialized``: top-level columns (row tracking's)
    that must hold no null in a copied row group. The writer settings (INT96 timestamps, decimals as
    integers) are chosen to copy the most bytes.
    """
    if min_bytes <= 0:
        return Reason("off", "the row-group copy is turned off")
    if reasons:
        return reasons[0]
    why = _bin_reason(footers, min_bytes)
    if why is not None:
        return why
    best: CopyPlan | None = None
    for options in _candidate_options(target):
        reference = _reference(target, options)
        plans = tuple(
            _input_plan(
                f,
                reference,
                min_bytes=min_bytes,
                caller=reencode[i] if i < len(reencode) else None,
                materialized=materialized,
            )
            for i, f in enumerate(footers)
        )
        plan = CopyPlan(plans, options, reference)
        if best is None or plan.bytes_copied > best.bytes_copied:
            best = plan
    assert best is not None
    if best.row_groups_copied == 0:
        return next((p.reason for p in best.inputs if p.reason is not None), Reason("schema", "nothing to copy"))
    return best


# ---------------------------------------------------------------------------- entry
def _default_conform(target: Any) -> Conform:
    """Columns by name in the output's order and types (a missing column is all null)."""

    def conform(table: Any, *, input_index: int, first_row: int) -> Any:
        import pyarrow as pa

        columns = []
        for f in target:
            if f.name in table.column_names:
                column = table.column(f.name)
                columns.append(column if column.type.equals(f.type) else column.cast(f.type))
            else:
                columns.append(pa.nulls(table.num_rows, f.type))
        return pa.Table.from_arrays(columns, schema=target)

    return conform


def _runs(plan: InputPlan) -> Iterator[tuple[bool, list[int]]]:
    """The input's row groups in order as (copied?, indices): neighbouring copied ones read as one range."""
    groups = plan.footer.meta.row_groups
    run: list[int] = []
    for i, rg in enumerate(groups):
        if not plan.copy[i]:
            if run:
                yield True, run
                run = []
            yield False, [i]
            continue
        if run and span(rg)[0] - span(groups[run[-1]])[1] > _MAX_GAP:
            yield True, run
            run = []
        run.append(i)
    if run:
        yield True, run


def _write_input(
    out: ParquetOutput, index: int, plan: InputPlan, fh: BinaryIO, conform: Conform, pool: ThreadPoolExecutor
) -> None:
    """Copy one input's copied row groups and feed its others, conformed, to the re-encoder."""
    import pyarrow.parquet as pq

    footer = plan.footer
    starts = [0]
    for rg in footer.meta.row_groups:
        starts.append(starts[-1] + rg.num_rows)
    pf = None
    for copied, indices in _runs(plan):
        if copied:
            out.copy(fh, footer, indices, pool)
            continue
        if pf is None:
            pf = pq.ParquetFile(fh, metadata=pyarrow_metadata(footer), coerce_int96_timestamp_unit="us")
        (i,) = indices
        table = conform(pf.read_row_group(i), input_index=index, first_row=starts[i])
        out.reencode(table, rg_bytes(footer.meta.row_groups[i]))


def write_plan(
    plan: CopyPlan,
    sink: Sink,
    *,
    schema: Any,
    opener: Callable[[str], BinaryIO],
    compression: str = "snappy",
    row_group_bytes: int = DEFAULT_ROW_GROUP_BYTES,
    conform: Conform | None = None,
) -> CopyResult:
    """Write the bin ``plan`` describes into ``sink``: one Parquet file, front to back."""
    out = ParquetOutput(sink, plan.reference, schema, writer_kwargs(plan.options, compression), row_group_bytes)
    conform = conform or _default_conform(schema)
    with ThreadPoolExecutor(1, thread_name_prefix="ddo-copy-read") as pool:
        for index, input_plan in enumerate(plan.inputs):
            with opener(input_plan.footer.path) as fh:
                _write_input(out, index, input_plan, fh, conform, pool)
    written = out.close()
    return CopyResult(
        rows=written.rows,
        size=written.size,
        row_groups_copied=written.row_groups_copied,
        bytes_copied=written.bytes_copied,
        row_groups_reencoded=written.row_groups_reencoded,
        bytes_reencoded=written.bytes_reencoded,
        row_groups_written=written.row_groups_written,
        reencoded_because=tuple(p.reason for p in plan.inputs if p.reason is not None),
        footer=written.footer,
    )


def _early_reason(inputs: Sequence[CopyInput], min_bytes: int, reasons: Sequence[Reason]) -> Reason | None:
    """A reason not to copy that needs no footer: off, the caller's, all files small, no Thrift library."""
    if min_bytes <= 0:
        return Reason("off", "the row-group copy is turned off")
    if reasons:
        return reasons[0]
    if inputs and all(i.size is not None and i.size < min_bytes for i in inputs):
        return Reason("small_row_groups", f"every input is smaller than {min_bytes} bytes")
    try:
        thrift()
    except (ImportError, OSError) as exc:
        return Reason("unavailable", f"the Parquet footer library cannot be loaded here ({exc})")
    return None


def copy_compact(
    inputs: Sequence[CopyInput],
    sink: Sink,
    *,
    schema: Any,
    opener: Callable[[str], BinaryIO],
    min_bytes: int = DEFAULT_MIN_BYTES,
    compression: str = "snappy",
    row_group_bytes: int = DEFAULT_ROW_GROUP_BYTES,
    conform: Conform | None = None,
    reasons: Sequence[Reason] = (),
    materialized: Sequence[str] = (),
) -> CopyResult:
    """Compact a bin's inputs into ONE Parquet file written to ``sink``, copying row groups of ``min_bytes``+.

    ``schema``: the output's Arrow schema (as the usual rewrite writes it). ``opener``: opens an
    input for reading (seekable). ``conform``: turns a row group read from input ``input_index``
    (its first row at ``first_row`` in that file) into rows of ``schema`` (dropping deleted rows,
    filling row ids); by default columns are taken by name and cast. ``reasons``/``materialized``:
    see ``plan_copy``; a ``CopyInput.reencode`` reason keeps that file from being copied.

    When the result's ``fallback`` is set, nothing was written to ``sink``: rewrite the bin the usual way.
    """
    why = _early_reason(inputs, min_bytes, reasons)
    if why is not None:
        return CopyResult(fallback=why)
    footers = []
    try:
        for item in inputs:
            with opener(item.path) as fh:
                footers.append(read_footer(fh, item.path))
    except FooterError as exc:
        kind: ReasonKind = "encrypted" if exc.kind == "encrypted" else "footer"
        return CopyResult(fallback=Reason(kind, exc.detail))
    plan = plan_copy(
        footers, schema, min_bytes=min_bytes, reencode=[i.reencode for i in inputs], materialized=materialized
    )
    if isinstance(plan, Reason):
        return CopyResult(fallback=plan)
    return write_plan(
        plan,
        sink,
        schema=schema,
        opener=opener,
        compression=compression,
        row_group_bytes=row_group_bytes,
        conform=conform,
    )
