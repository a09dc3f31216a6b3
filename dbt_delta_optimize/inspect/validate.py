"""Validation of data-rearranging commits (OPTIMIZE, REORG): before they are written and after they land.

A compaction must never change what a reader sees. Whoever wrote it (us, delta-spark or delta-rs),
such a commit only swaps live files for new files holding the same rows, so it can be checked
against the version it was applied to (V-1) without reading any data: every finding has a stable
string code that tests, the CLI and the executor's guard can rely on.

Finding codes (see ``CODES``):

* ``data_change_true``: an add or remove has dataChange=true.
* ``remove_not_live``: a removed path was not live at V-1.
* ``remove_size_mismatch``: a remove's size differs from the live file's.
* ``remove_dv_mismatch``: a remove's deletion vector differs from the live file's.
* ``remove_duplicate`` / ``add_duplicate``: the same path removed / added twice.
* ``add_missing_file``: an added file is not in storage.
* ``add_size_mismatch``: an added file's size on disk differs from the recorded size.
* ``add_already_live``: an added path was already live at V-1.
* ``path_added_and_removed``: one path is both added and removed.
* ``partition_values_mismatch``: an add's partition values match none of the removes', or rows moved
  between partitions ("" and null are the same value; typed values are compared as values).
* ``row_count_mismatch``: the adds hold a different number of rows than the removes.
* ``row_count_unknown``: a file's rows are known neither from stats nor from its Parquet footer.
* ``stats_unparsable``: an add's stats are not a JSON object of the Delta stats shape.
* ``stats_num_records_mismatch``: an add's numRecords differs from its Parquet footer's row count.
* ``stats_min_gt_max``: a column's (possibly nested) minValue is greater than its maxValue.
* ``stats_null_count_gt_records``: a column's nullCount exceeds numRecords.
* ``action_malformed``: an add/remove action lacks required fields.
* ``unexpected_action``: a metaData or protocol action inside a data-rearranging commit.
* ``commit_info_missing`` / ``commit_info_malformed``: commitInfo absent, or in neither reference
  engine's shape (delta-spark and ours: string metrics, predicate/zOrderBy parameters; delta-rs:
  numeric camelCase metrics, targetSize/predicate parameters).
* ``metrics_mismatch``: operationMetrics disagree with the commit's actions (file counts, bytes).
"""

from __future__ import annotations

import datetime
import json
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

from ..delta.actions import ADD, COMMIT_INFO, METADATA, PROTOCOL, REMOVE, AddFile, RemoveFile, parse_stats
from ..delta.storage import local_path, table_uri
from ..errors import InvalidArgumentError, ValidationError

if TYPE_CHECKING:
    from ..delta.snapshot import Snapshot

__all__ = [
    "CODES",
    "REARRANGING_OPERATIONS",
    "Finding",
    "ValidationReport",
    "commit_engine",
    "validate_actions",
    "validate_commit",
]

#: Operations whose commits only rearrange data (every action dataChange=false).
REARRANGING_OPERATIONS = frozenset({"OPTIMIZE", "REORG"})

CODES = (
    "data_change_true",
    "remove_not_live",
    "remove_size_mismatch",
    "remove_dv_mismatch",
    "remove_duplicate",
    "add_missing_file",
    "add_size_mismatch",
    "add_already_live",
    "add_duplicate",
    "path_added_and_removed",
    "partition_values_mismatch",
    "row_count_mismatch",
    "row_count_unknown",
    "stats_unparsable",
    "stats_num_records_mismatch",
    "stats_min_gt_max",
    "stats_null_count_gt_records",
    "action_malformed",
    "unexpected_action",
    "commit_info_missing",
    "commit_info_malformed",
    "metrics_mismatch",
)

OURS = "dbt-delta-optimize"
DELTA_SPARK = "delta-spark"
DELTA_RS = "delta-rs"
OTHER = "other"


@dataclass(frozen=True)
class Finding:
    """One problem, named by a stable code so callers can match on it (the message is for humans)."""

    code: str
    message: str
    path: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"code": self.code, "message": self.message, "path": self.path}

    def __str__(self) -> str:
        return f"[{self.code}] {self.path + ': ' if self.path else ''}{self.message}"


@dataclass(frozen=True)
class ValidationReport:
    """Outcome of validating one commit (``version`` is None for actions not committed yet)."""

    table: str
    version: int | None
    operation: str | None
    ok: bool
    findings: tuple[Finding, ...]
    adds: int
    removes: int
    rows_added: int | None
    rows_removed: int | None
    engine: str | None = None
    read_version: int | None = None

    @property
    def codes(self) -> tuple[str, ...]:
        """Distinct finding codes, in first-seen order."""
        return tuple(dict.fromkeys(f.code for f in self.findings))

    def to_dict(self) -> dict[str, Any]:
        return {
            "table": self.table,
            "version": self.version,
            "readVersion": self.read_version,
            "operation": self.operation,
            "engine": self.engine,
            "ok": self.ok,
            "adds": self.adds,
            "removes": self.removes,
            "rowsAdded": self.rows_added,
            "rowsRemoved": self.rows_removed,
            "codes": list(self.codes),
            "findings": [f.to_dict() for f in self.findings],
        }

    def describe(self) -> str:
        """A readable multi-line summary (what the CLI prints)."""
        what = (
            f"version {self.version}"
            if self.version is not None
            else f"uncommitted actions on version {self.read_version}"
        )
        by = f" by {self.engine}" if self.engine else ""
        head = (
            f"{self.table} {what} ({self.operation or 'unknown operation'}{by}): "
            f"{self.removes} file(s) removed, {self.adds} added, rows {self.rows_removed} -> {self.rows_added}"
        )
        if self.ok:
            return head + "\nOK: no findings"
        lines = [head, f"FAILED: {len(self.findings)} finding(s)"]
        lines += [f"  {f}" for f in self.findings]
        return "\n".join(lines)

    def raise_if_invalid(self) -> ValidationReport:
        """Raise ValidationError listing the findings (the executor's guard); return self when ok."""
        if not self.ok:
            shown = "; ".join(str(f) for f in self.findings[:10])
            more = f" (and {len(self.findings) - 10} more)" if len(self.findings) > 10 else ""
            raise ValidationError(
                f"Commit validation failed for {self.table} "
                f"({'version ' + str(self.version) if self.version is not None else 'before commit'}): "
                f"{shown}{more}. This is a bug guard: please report it with the table's _delta_log."
            )
        return self


# --------------------------------------------------------------------------- helpers
def _norm_path(path: str, root: str) -> str:
    """Comparable form of a log path: URI-decoded, scheme stripped, relative to the table root."""
    p = unquote(path)
    if p.startswith("file:"):
        p = local_path(path)
    root = root.rstrip("/")
    if os.path.isabs(p) and p.startswith(root + "/"):
        p = p[len(root) + 1 :]
    return p


def _file_path(root: str, log_path: str) -> str:
    """Absolute local path of a file named in the log (as Snapshot.file_path, without a snapshot)."""
    if "://" in log_path or log_path.startswith("file:"):
        return local_path(log_path)
    return os.path.join(root, unquote(log_path))


def _footer_rows(path: str) -> int | None:
    try:
        import pyarrow.parquet as pq

        return int(pq.read_metadata(path).num_rows)
    except Exception:  # missing or unreadable: the caller reports what that means
        return None


def _dv_id(dv: Any) -> str | None:
    return dv.unique_id if dv is not None else None


_INTEGRAL = {"byte", "short", "integer", "long"}
_FLOATING = {"float", "double"}
_TS = {"timestamp", "timestamp_ntz"}


def _parse_ts(value: str) -> datetime.datetime | None:
    s = value.strip().replace(" ", "T", 1)
    if s.endswith("Z"):
        s = s[:-1] + "+00:00"
    try:
        return datetime.datetime.fromisoformat(s)
    except ValueError:
        return None


def _norm_partition_value(value: str | None, typ: str) -> Any:
    """Typed value of a partition string, so "1" == "01" for ints and "" == null (delta-spark's rule)."""
    if value is None or value == "":
        return None
    try:
        if typ in _INTEGRAL:
            return ("i", int(value))
        if typ in _FLOATING:
            return ("f", float(value))
        if typ.startswith("decimal"):
            return ("d", Decimal(value).normalize())
        if typ == "boolean":
            return ("b", value.strip().lower())
        if typ in _TS:
            ts = _parse_ts(value)
            if ts is not None:
                if ts.tzinfo is not None:
                    ts = ts.astimezone(datetime.timezone.utc).replace(tzinfo=None)
                return ("t", ts)
    except (ValueError, InvalidOperation):
        pass
    return ("s", value)


def _utf16_key(s: str) -> bytes:
    return s.encode("utf-16-be", "surrogatepass")


def _min_gt_max(lo: Any, hi: Any, typ: str | None) -> bool:
    """True only when ``lo > hi`` for sure (NaN, truncated strings and odd encodings never flag)."""
    if lo is None or hi is None or isinstance(lo, bool) or isinstance(hi, bool):
        return False
    if isinstance(lo, (int, float)) and isinstance(hi, (int, float)):
        return lo > hi  # NaN compares False
    if isinstance(lo, str) and isinstance(hi, str):
        if typ in _TS or (typ is None and _parse_ts(lo) is not None and "T" in lo):
            a, b = _parse_ts(lo), _parse_ts(hi)
            if a is not None and b is not None and (a.tzinfo is None) == (b.tzinfo is None):
                return a > b
            return False
        if typ is not None and (typ in _INTEGRAL or typ in _FLOATING or typ.startswith("decimal")):
            try:
                return Decimal(lo) > Decimal(hi)
            except InvalidOperation:
                return False
        # Strings: Spark orders by UTF-8 bytes (code points), delta-spark truncates in UTF-16 units.
        return lo > hi and _utf16_key(lo) > _utf16_key(hi)
    if (isinstance(lo, (int, float)) and isinstance(hi, str)) or (isinstance(lo, str) and isinstance(hi, (int, float))):
        try:
            return Decimal(str(lo)) > Decimal(str(hi))
        except InvalidOperation:
            return False
    return False


def _stats_types(snapshot: Snapshot | None) -> dict[tuple[str, ...], str]:
    """Stats-JSON leaf path (physical names) -> Delta type name, from the table schema."""
    if snapshot is None:
        return {}
    from ..delta.stats_schema import stats_columns

    out: dict[tuple[str, ...], str] = {}

    def walk(fields: Iterable[Any], prefix: tuple[str, ...]) -> None:
        for f in fields:
            if f.is_struct:
                walk(f.children or (), (*prefix, f.name))
            elif isinstance(f.type, str):
                out[(*prefix, f.name)] = f.type

    try:
        walk(stats_columns(snapshot.schema, snapshot.partition_columns, snapshot.configuration), ())
    except Exception:  # an odd schema only loses type hints
        return {}
    return out


def check_stats(path: str, stats: str | None, types: Mapping[tuple[str, ...], str]) -> tuple[list[Finding], int | None]:
    """Findings for one add's stats JSON, and its numRecords (None when absent or unusable)."""
    if stats is None:
        return [], None
    parsed = parse_stats(stats)
    if parsed is None:
        return [Finding("stats_unparsable", f"stats are not a JSON object: {stats[:80]!r}", path)], None
    findings: list[Finding] = []
    n = parsed.get("numRecords")
    if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n < 0):
        findings.append(Finding("stats_unparsable", f"numRecords is not a non-negative integer: {n!r}", path))
        n = None
    for key in ("minValues", "maxValues", "nullCount"):
        if key in parsed and parsed[key] is not None and not isinstance(parsed[key], dict):
            findings.append(Finding("stats_unparsable", f"{key} is not an object: {parsed[key]!r}", path))
            parsed[key] = None
    if "tightBounds" in parsed and not isinstance(parsed["tightBounds"], bool):
        findings.append(Finding("stats_unparsable", f"tightBounds is not a boolean: {parsed['tightBounds']!r}", path))

    def bounds(lo: Mapping[str, Any], hi: Mapping[str, Any], prefix: tuple[str, ...]) -> None:
        for k in lo.keys() & hi.keys():
            a, b, p = lo[k], hi[k], (*prefix, k)
            if isinstance(a, dict) and isinstance(b, dict):
                bounds(a, b, p)
            elif isinstance(a, dict) or isinstance(b, dict):
                findings.append(
                    Finding("stats_unparsable", f"minValues/maxValues disagree on the shape of {'.'.join(p)}", path)
                )
            elif _min_gt_max(a, b, types.get(p)):
                findings.append(Finding("stats_min_gt_max", f"column {'.'.join(p)}: min {a!r} > max {b!r}", path))

    def nulls(counts: Mapping[str, Any], prefix: tuple[str, ...]) -> None:
        for k, v in counts.items():
            p = (*prefix, k)
            if isinstance(v, dict):
                nulls(v, p)
            elif v is None:
                continue
            elif isinstance(v, bool) or not isinstance(v, int) or v < 0:
                findings.append(Finding("stats_unparsable", f"nullCount of {'.'.join(p)} is not a count: {v!r}", path))
            elif n is not None and v > n:
                findings.append(
                    Finding(
                        "stats_null_count_gt_records", f"column {'.'.join(p)}: nullCount {v} > numRecords {n}", path
                    )
                )

    if parsed.get("minValues") and parsed.get("maxValues"):
        bounds(parsed["minValues"], parsed["maxValues"], ())
    if parsed.get("nullCount"):
        nulls(parsed["nullCount"], ())
    return findings, n


def _logical_rows(n: int | None, dv: Any) -> int | None:
    if n is None:
        return None
    return n - (dv.cardinality if dv is not None else 0)


def _partition_label(key: tuple, columns: Sequence[str]) -> str:
    if not columns:
        return "(unpartitioned)"
    return ", ".join(f"{c}={'null' if v is None else v[1]}" for c, v in zip(columns, key))


# --------------------------------------------------------------------------- core checks
def _check_actions(
    root: str,
    before: Snapshot | None,
    adds: Sequence[AddFile],
    removes: Sequence[RemoveFile],
    findings: list[Finding],
    *,
    check_footers: bool = True,
) -> tuple[int | None, int | None]:
    """Every check that needs only the V-1 snapshot, the actions and the files; returns (rows added, removed)."""
    columns = tuple(before.partition_columns) if before is not None else ()
    ptypes = before.partition_types if before is not None else {}
    types = _stats_types(before)
    live = {_norm_path(f.path, root): f for f in (before.files if before is not None else ())}

    def key_of(values: Mapping[str, str | None]) -> tuple:
        return tuple(_norm_partition_value(values.get(c), ptypes.get(c, "string")) for c in columns)

    # dataChange
    for a in adds:
        if a.data_change:
            findings.append(Finding("data_change_true", "add has dataChange=true in a data-rearranging commit", a.path))
    for r in removes:
        if r.data_change:
            findings.append(
                Finding("data_change_true", "remove has dataChange=true in a data-rearranging commit", r.path)
            )

    # removes against V-1
    removed_paths: dict[str, RemoveFile] = {}
    rows_removed: dict[tuple, int] = {}
    removed_keys: set[tuple] = set()
    rows_removed_known = True
    for r in removes:
        p = _norm_path(r.path, root)
        if p in removed_paths:
            findings.append(Finding("remove_duplicate", "the same path is removed twice", r.path))
            continue
        removed_paths[p] = r
        f = live.get(p)
        if f is None:
            findings.append(
                Finding(
                    "remove_not_live", f"removed file is not live at version {before.version if before else -1}", r.path
                )
            )
            continue
        if r.size is not None and r.size != f.size:
            findings.append(
                Finding("remove_size_mismatch", f"remove records size {r.size}, the live file has {f.size}", r.path)
            )
        if _dv_id(r.deletion_vector) != _dv_id(f.deletion_vector):
            findings.append(
                Finding(
                    "remove_dv_mismatch",
                    f"remove names deletion vector {_dv_id(r.deletion_vector)}, the live file has {_dv_id(f.deletion_vector)}",
                    r.path,
                )
            )
        k = key_of(f.partition_values)
        if r.extended_file_metadata and r.partition_values and key_of(r.partition_values) != k:
            findings.append(
                Finding(
                    "partition_values_mismatch",
                    f"remove records partition values {dict(r.partition_values)}, the live file has {dict(f.partition_values)}",
                    r.path,
                )
            )
        removed_keys.add(k)
        n = f.num_records
        if n is None:
            n = _footer_rows(_file_path(root, f.path))
        rows = _logical_rows(n, f.deletion_vector)
        if rows is None:
            rows_removed_known = False
            findings.append(
                Finding("row_count_unknown", "removed file has no numRecords stats and no readable footer", r.path)
            )
        else:
            rows_removed[k] = rows_removed.get(k, 0) + rows

    # adds
    added_paths: set[str] = set()
    rows_added: dict[tuple, int] = {}
    rows_added_known = True
    for a in adds:
        p = _norm_path(a.path, root)
        if p in added_paths:
            findings.append(Finding("add_duplicate", "the same path is added twice", a.path))
            continue
        added_paths.add(p)
        if p in removed_paths:
            findings.append(Finding("path_added_and_removed", "the path is both added and removed", a.path))
        if p in live:
            findings.append(
                Finding("add_already_live", f"added file was already live at version {before.version}", a.path)
            )
        local = _file_path(root, a.path)
        try:
            on_disk = os.stat(local).st_size
        except FileNotFoundError:
            on_disk = None
            findings.append(Finding("add_missing_file", f"added file does not exist at {local}", a.path))
        if on_disk is not None and on_disk != a.size:
            findings.append(
                Finding("add_size_mismatch", f"add records size {a.size}, the file has {on_disk} bytes", a.path)
            )
        stat_findings, n = check_stats(a.path, a.stats, types)
        findings.extend(stat_findings)
        footer = _footer_rows(local) if on_disk is not None and (check_footers or n is None) else None
        if n is not None and footer is not None and n != footer:
            findings.append(
                Finding(
                    "stats_num_records_mismatch",
                    f"stats say numRecords={n}, the Parquet footer has {footer} rows",
                    a.path,
                )
            )
        k = key_of(a.partition_values)
        if removed_keys and k not in removed_keys:
            findings.append(
                Finding(
                    "partition_values_mismatch",
                    f"add's partition values {dict(a.partition_values)} match none of the removed files' partitions",
                    a.path,
                )
            )
        # The footer is the file's truth; stats are what readers will believe (checked above).
        rows = _logical_rows(footer if footer is not None else n, a.deletion_vector)
        if rows is None:
            rows_added_known = False
            findings.append(
                Finding("row_count_unknown", "added file has no numRecords stats and no readable footer", a.path)
            )
        else:
            rows_added[k] = rows_added.get(k, 0) + rows

    total_added = sum(rows_added.values()) if rows_added_known else None
    total_removed = sum(rows_removed.values()) if rows_removed_known else None
    if total_added is not None and total_removed is not None:
        diffs = sorted(
            (
                (_partition_label(k, columns), rows_removed.get(k, 0), rows_added.get(k, 0))
                for k in rows_added.keys() | rows_removed.keys()
                if rows_added.get(k, 0) != rows_removed.get(k, 0)
            ),
        )
        detail = "; ".join(f"{label}: {rm} removed, {ad} added" for label, rm, ad in diffs[:10])
        if total_added != total_removed:
            findings.append(
                Finding(
                    "row_count_mismatch", f"the adds hold {total_added} rows, the removes {total_removed} ({detail})"
                )
            )
        elif diffs:
            findings.append(Finding("partition_values_mismatch", f"rows moved between partitions ({detail})"))
    return total_added, total_removed


# --------------------------------------------------------------------------- commitInfo
def commit_engine(info: Mapping[str, Any] | None) -> str:
    """Which writer produced a commitInfo: dbt-delta-optimize, delta-spark, delta-rs or other."""
    if not isinstance(info, Mapping):
        return OTHER
    engine = str(info.get("engineInfo") or "")
    client = str(info.get("clientVersion") or "")
    if engine.startswith(OURS + "/"):
        return OURS
    if "delta-rs" in engine or client.startswith("delta-rs"):
        return DELTA_RS
    if "Delta-Lake/" in engine or engine.startswith("Apache-Spark/"):
        return DELTA_SPARK
    return OTHER


def _int_string(v: Any) -> int | None:
    if isinstance(v, str):
        try:
            return int(v)
        except ValueError:
            return None
    return None


def _json_list(v: Any) -> bool:
    if not isinstance(v, str):
        return False
    try:
        parsed = json.loads(v)
    except ValueError:
        return False
    return isinstance(parsed, list) and all(isinstance(x, str) for x in parsed)


def _is_count(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def _check_commit_info(
    info: Any, version: int, adds: Sequence[AddFile], removes: Sequence[RemoveFile], removed_sizes: Sequence[int | None]
) -> list[Finding]:
    """commitInfo in delta-spark's shape (also ours) or delta-rs's, and its metrics against the actions."""
    out: list[Finding] = []

    def bad(msg: str) -> None:
        out.append(Finding("commit_info_malformed", msg))

    if not isinstance(info, Mapping):
        return [Finding("commit_info_malformed", f"commitInfo is not an object: {info!r}")]
    op = info.get("operation")
    if not isinstance(op, str) or not op:
        bad("operation is missing or not a string")
    ts = info.get("timestamp")
    if ts is not None and not _is_count(ts):
        bad(f"timestamp is not a number of milliseconds: {ts!r}")
    rv = info.get("readVersion")
    if rv is not None and (not _is_count(rv) or rv >= version):
        bad(f"readVersion {rv!r} is not a version before {version}")
    if info.get("isBlindAppend") not in (None, False):
        bad(f"isBlindAppend is {info.get('isBlindAppend')!r}; a data-rearranging commit is not a blind append")
    params = info.get("operationParameters", {})
    metrics = info.get("operationMetrics")
    if not isinstance(params, Mapping):
        bad("operationParameters is not an object")
        params = {}
    if metrics is not None and not isinstance(metrics, Mapping):
        bad("operationMetrics is not an object")
        metrics = None
    if op != "OPTIMIZE":
        return out  # REORG and others: only the common fields have a known shape

    engine = commit_engine(info)
    numeric = metrics is not None and any(
        isinstance(v, (int, float)) and not isinstance(v, bool) for v in metrics.values()
    )
    rs_shape = engine == DELTA_RS or (engine == OTHER and numeric)
    n_add, n_rm = len(adds), len(removes)
    add_bytes = sum(a.size for a in adds)
    rm_bytes = sum(s for s in removed_sizes if s is not None) if all(s is not None for s in removed_sizes) else None

    def mismatch(name: str, recorded: Any, actual: Any) -> None:
        if actual is not None and recorded is not None and recorded != actual:
            out.append(
                Finding(
                    "metrics_mismatch", f"operationMetrics.{name} is {recorded}, the commit's actions give {actual}"
                )
            )

    if not rs_shape:  # delta-spark and ours
        for name in ("predicate", "zOrderBy"):
            if name not in params:
                bad(f"operationParameters.{name} is missing")
            elif not _json_list(params[name]):
                bad(f"operationParameters.{name} is not a JSON list of strings: {params[name]!r}")
        if "clusterBy" in params and not _json_list(params["clusterBy"]):
            bad(f"operationParameters.clusterBy is not a JSON list of strings: {params['clusterBy']!r}")
        if "auto" in params and params["auto"] not in (True, False, "true", "false"):
            bad(f"operationParameters.auto is not a boolean: {params['auto']!r}")
        if engine == OURS:
            if info.get("isolationLevel") != "SnapshotIsolation":
                bad(f"isolationLevel is {info.get('isolationLevel')!r}, expected 'SnapshotIsolation'")
            if not isinstance(rv, int):
                bad("readVersion is missing")
            if not isinstance(info.get("txnId"), str):
                bad("txnId is missing")
        if metrics is None:
            if engine == OURS:
                bad("operationMetrics is missing")
            return out
        values: dict[str, int] = {}
        for k, v in metrics.items():
            n = _int_string(v)
            if n is None:
                bad(f"operationMetrics.{k} is not an integer string: {v!r}")
            else:
                values[k] = n
        for k in ("numAddedFiles", "numRemovedFiles", "numAddedBytes", "numRemovedBytes"):
            if k not in metrics:
                bad(f"operationMetrics.{k} is missing")
        mismatch("numAddedFiles", values.get("numAddedFiles"), n_add)
        mismatch("numRemovedFiles", values.get("numRemovedFiles"), n_rm)
        mismatch("numAddedBytes", values.get("numAddedBytes"), add_bytes)
        mismatch("numRemovedBytes", values.get("numRemovedBytes"), rm_bytes)
        if adds:
            sizes = sorted(a.size for a in adds)
            mismatch("minFileSize", values.get("minFileSize"), sizes[0])
            mismatch("maxFileSize", values.get("maxFileSize"), sizes[-1])
        return out

    # delta-rs
    if "targetSize" not in params:
        bad("operationParameters.targetSize is missing")
    elif not (_is_count(params["targetSize"]) or _int_string(params["targetSize"]) is not None):
        bad(f"operationParameters.targetSize is not a size: {params['targetSize']!r}")
    if "predicate" in params and params["predicate"] is not None and not isinstance(params["predicate"], str):
        bad(f"operationParameters.predicate is not a string: {params['predicate']!r}")
    if metrics is None:
        return out
    for k in ("numFilesAdded", "numFilesRemoved"):
        if k not in metrics:
            bad(f"operationMetrics.{k} is missing")
        elif not _is_count(metrics[k]):
            bad(f"operationMetrics.{k} is not a number: {metrics[k]!r}")
    for k in ("partitionsOptimized", "numBatches", "totalConsideredFiles", "totalFilesSkipped"):
        if k in metrics and not _is_count(metrics[k]):
            bad(f"operationMetrics.{k} is not a number: {metrics[k]!r}")
    sizes: dict[str, Mapping[str, Any]] = {}
    for k in ("filesAdded", "filesRemoved"):
        v = metrics.get(k)
        if v is None:
            continue
        try:
            parsed = json.loads(v) if isinstance(v, str) else v
        except ValueError:
            parsed = None
        if not isinstance(parsed, Mapping) or not all(
            isinstance(parsed.get(f), (int, float)) for f in ("totalFiles", "totalSize")
        ):
            bad(f"operationMetrics.{k} is not a JSON object with totalFiles/totalSize: {v!r}")
        else:
            sizes[k] = parsed
    if _is_count(metrics.get("numFilesAdded")):
        mismatch("numFilesAdded", metrics["numFilesAdded"], n_add)
    if _is_count(metrics.get("numFilesRemoved")):
        mismatch("numFilesRemoved", metrics["numFilesRemoved"], n_rm)
    if "filesAdded" in sizes:
        mismatch("filesAdded.totalSize", sizes["filesAdded"]["totalSize"], add_bytes)
    if "filesRemoved" in sizes:
        mismatch("filesRemoved.totalSize", sizes["filesRemoved"]["totalSize"], rm_bytes)
    return out


# --------------------------------------------------------------------------- public API
def validate_actions(
    snapshot: Snapshot,
    adds: Sequence[AddFile],
    removes: Sequence[RemoveFile],
    *,
    operation: str = "OPTIMIZE",
    check_footers: bool = True,
) -> ValidationReport:
    """Check planned actions against the snapshot they were planned on, before they are committed.

    Pure (no Spark): the added files must already be in place on disk. ``check_footers`` also
    compares each add's numRecords with its Parquet footer (one small read per added file).
    """
    findings: list[Finding] = []
    added, removed = _check_actions(
        snapshot.location, snapshot, list(adds), list(removes), findings, check_footers=check_footers
    )
    return ValidationReport(
        table=snapshot.location,
        version=None,
        operation=operation,
        ok=not findings,
        findings=tuple(findings),
        adds=len(adds),
        removes=len(removes),
        rows_added=added,
        rows_removed=removed,
        engine=OURS,
        read_version=snapshot.version,
    )


def validate_commit(table: str, version: int | None = None, *, check_footers: bool = True) -> ValidationReport:
    """Validate a landed data-rearranging commit (default: the latest) against version - 1.

    Raises InvalidArgumentError when the version is not a data-rearranging commit, and
    TableNotFoundError / NotADeltaTableError for a missing table or version.
    """
    from ..delta.snapshot import latest_version, load_snapshot, read_commit

    root = table_uri(table)
    latest = latest_version(root)
    if version is None:
        version = latest
    if version < 0 or version > latest:
        raise InvalidArgumentError(f"Version {version} of '{table}' does not exist (latest is {latest}).")
    raw = read_commit(root, version)
    findings: list[Finding] = []
    info = next((a[COMMIT_INFO] for a in raw if COMMIT_INFO in a), None)
    adds: list[AddFile] = []
    removes: list[RemoveFile] = []
    for action in raw:
        for kind, parse, into in ((ADD, AddFile.from_json, adds), (REMOVE, RemoveFile.from_json, removes)):
            if kind in action:
                body = action[kind]
                try:
                    if not isinstance(body, Mapping) or not isinstance(body.get("path"), str):
                        raise KeyError("path")
                    into.append(parse(body))  # type: ignore[arg-type]
                except (KeyError, TypeError, ValueError) as exc:
                    findings.append(
                        Finding("action_malformed", f"{kind} action cannot be read ({exc}): {str(body)[:120]}")
                    )
    operation = info.get("operation") if isinstance(info, Mapping) else None
    if info is None:
        if (adds or removes) and not any(a.data_change for a in adds) and not any(r.data_change for r in removes):
            findings.append(Finding("commit_info_missing", "the commit has no commitInfo action"))
        else:
            raise InvalidArgumentError(
                f"Version {version} of '{table}' has no commitInfo and changes data: it is not a data-rearranging commit."
            )
    elif operation not in REARRANGING_OPERATIONS:
        raise InvalidArgumentError(
            f"Version {version} of '{table}' is a {operation or 'unnamed'} commit; only data-rearranging commits "
            f"({', '.join(sorted(REARRANGING_OPERATIONS))}) can be validated. Pass --version of an OPTIMIZE commit."
        )
    for action in raw:
        for kind in (METADATA, PROTOCOL):
            if kind in action:
                findings.append(Finding("unexpected_action", f"a {kind} action in a data-rearranging commit"))
    before = load_snapshot(root, version - 1) if version > 0 else None
    added, removed = _check_actions(root, before, adds, removes, findings, check_footers=check_footers)
    if info is not None:
        live = {_norm_path(f.path, root): f for f in (before.files if before is not None else ())}
        removed_sizes = [
            r.size if r.size is not None else (live[p].size if (p := _norm_path(r.path, root)) in live else None)
            for r in removes
        ]
        findings.extend(_check_commit_info(info, version, adds, removes, removed_sizes))
    return ValidationReport(
        table=root,
        version=version,
        operation=operation,
        ok=not findings,
        findings=tuple(findings),
        adds=len(adds),
        removes=len(removes),
        rows_added=added,
        rows_removed=removed,
        engine=commit_engine(info) if info is not None else None,
        read_version=info.get("readVersion") if isinstance(info, Mapping) else None,
    )
