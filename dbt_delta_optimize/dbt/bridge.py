"""The dbt bridge: a dbt plugin that adds ``modules.delta_optimize`` to dbt's Jinja context.

dbt imports every top-level ``dbt_*`` module on each invocation and instantiates the classes in
its ``plugins`` list; ``initialize()`` then wraps ``dbt.context.base.get_context_modules`` (looked
up at call time by the ``modules`` context property) to add one namespace of whitelisted
functions. They take and return plain data (dbt's Jinja is sandboxed) and find dbt's own
SparkSession with ``SparkSession.builder.getOrCreate()``.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import threading
import time
import uuid
from collections.abc import Mapping
from typing import Any

from dbt.plugins.manager import dbtPlugin

__all__ = ["DeltaOptimizePlugin", "functions", "install"]

log = logging.getLogger(__name__)

NAMESPACE = "delta_optimize"
RESULTS_FILE = "delta_optimize_results.json"
_MODES = ("auto", "optimize", "never")
_SETTINGS = {
    "mode",
    "where",
    "zorder_by",
    "curve",
    "min_file_size",
    "max_file_size",
    "min_num_files",
    "on_error",
    "skip",
}
_versions: dict[str, int] = {}


def _spark() -> Any:
    from pyspark.sql import SparkSession

    return SparkSession.builder.getOrCreate()


def _target_path() -> str:
    return os.environ.get("DBT_TARGET_PATH") or os.path.join(os.getcwd(), "target")


_RESULTS_LOCK = threading.Lock()


def _append_result(record: Mapping[str, Any]) -> None:
    """Append one call's outcome to target/delta_optimize_results.json (a JSON list), one writer at a time."""
    with _RESULTS_LOCK:
        _append_locked(record)


def _append_locked(record: Mapping[str, Any]) -> None:
    path = os.path.join(_target_path(), RESULTS_FILE)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    try:
        with open(path) as fh:
            data = json.load(fh)
        if not isinstance(data, list):
            data = []
    except (OSError, ValueError):
        data = []
    data.append(dict(record))
    # dbt runs models in threads: one temp name per write, so no two writers share a file.
    tmp = f"{path}.{os.getpid()}.{threading.get_ident()}.{uuid.uuid4().hex[:8]}.tmp"
    with open(tmp, "w") as fh:
        json.dump(data, fh, indent=2, default=str)
    os.replace(tmp, path)


def _validate_settings(settings: Mapping[str, Any] | None) -> dict[str, Any]:
    from ..errors import InvalidArgumentError

    s = dict(settings or {})
    unknown = set(s) - _SETTINGS
    if unknown:
        raise InvalidArgumentError(
            f"Unknown meta.delta_optimize setting(s): {', '.join(sorted(unknown))}. Valid: {', '.join(sorted(_SETTINGS))}."
        )
    mode = s.get("mode", "auto")
    if mode not in _MODES:
        raise InvalidArgumentError(f"meta.delta_optimize.mode must be one of {', '.join(_MODES)}, got {mode!r}.")
    on_error = s.get("on_error", "warn")
    if on_error not in ("warn", "fail"):
        raise InvalidArgumentError(f"meta.delta_optimize.on_error must be warn or fail, got {on_error!r}.")
    for key in ("where", "zorder_by"):
        v = s.get(key)
        if isinstance(v, str):
            s[key] = [v] if key == "where" else [c.strip() for c in v.split(",") if c.strip()]
        elif v is not None and not (isinstance(v, (list, tuple)) and all(isinstance(x, str) for x in v)):
            raise InvalidArgumentError(f"meta.delta_optimize.{key} must be a string or a list of strings, got {v!r}.")
    return s


def _files(location: str) -> tuple[int, int]:
    from ..delta.snapshot import file_counts

    return file_counts(location)


def _table_location(table: str) -> tuple[str | None, str | None]:
    """(location, None) for a Delta table; (None, note) for a missing or non-Delta one."""
    from ..engine.session import resolve_table
    from ..errors import NotADeltaTableError, TableNotFoundError

    try:
        location: str = resolve_table(table, _spark())
        return location, None
    except (NotADeltaTableError, TableNotFoundError) as exc:
        return None, f"skipped: {exc}"


def _delta_location(record: dict[str, Any], table: str, file_format: str | None) -> str | None:
    """The table's location, or None after marking ``record`` skipped (non-Delta model, missing table)."""
    if file_format is not None and str(file_format).lower() != "delta":
        record.update(decision="skipped", status="skipped", reason=f"file_format is {file_format}, not delta")
        return None
    location, note = _table_location(table)
    if location is None:
        record.update(decision="skipped", status="skipped", reason=note)
        return None
    record["location"] = location
    record["files_before"], record["bytes_before"] = _files(location)
    return location


def record_version(table: str) -> str:
    """Pre-hook: remember the table's version before the model writes (auto compaction looks after it)."""
    from ..delta.snapshot import latest_version

    location, _ = _table_location(table)
    try:
        _versions[table] = latest_version(location) if location else -1
    except Exception:
        _versions[table] = -1
    return ""


def run_model(
    table: str, settings: Mapping[str, Any] | None = None, *, model: str | None = None, file_format: str | None = None
) -> dict[str, Any]:
    """Post-hook body: auto compaction (default) or a full OPTIMIZE of one model's table, per its settings.

    Never raises for a failed compaction: the result carries ``status`` ``failed`` and ``error``,
    and the macro decides (on_error) whether the model fails. The cost when nothing qualifies is
    kept to a catalog lookup and two log reads (the hook runs after every model).
    """
    t0 = time.perf_counter()
    record: dict[str, Any] = {"table": table, "model": model, "at": time.strftime("%Y-%m-%dT%H:%M:%S")}
    since = _versions.pop(table, None)
    try:
        s = _validate_settings(settings)
        record["mode"] = s.get("mode", "auto")
        record["on_error"] = s.get("on_error", "warn")
        if s.get("skip") or record["mode"] == "never":
            record.update(decision="skipped", status="skipped", reason="meta.delta_optimize skip/never")
            return _finish(record, t0)
        location = _delta_location(record, table, file_format)
        if location is None:
            return _finish(record, t0)
        spark = _spark()
        overrides = {k: s[k] for k in ("min_file_size", "max_file_size") if s.get(k) is not None}
        if record["mode"] == "optimize":
            from ..api import optimize

            m = optimize(
                spark,
                location,
                where=s.get("where"),
                zorder_by=s.get("zorder_by"),
                curve=s.get("curve", "zorder"),
                min_file_size=overrides.get("min_file_size"),
                max_file_size=overrides.get("max_file_size"),
            )
            wrote = bool(m.committed_versions)
            record.update(decision="optimize", status="optimized" if wrote else "nothingToDo", metrics=m.to_dict())
        else:
            from ..api import auto_compact

            r = auto_compact(
                spark,
                location,
                since if since is not None and since >= 0 else None,
                enabled=True,
                min_file_size=overrides.get("min_file_size"),
                max_file_size=overrides.get("max_file_size"),
                min_num_files=s.get("min_num_files"),
            )
            wrote = r.ran or bool(r.error)  # a failed run may have committed some batches
            record.update(decision=r.status, status=r.status, reason=r.reason, auto_compact=r.to_dict())
            if r.error:
                record["error"] = r.error
        _files_after(record, location, wrote)
    except Exception as exc:  # the model must not fail because compaction did (unless on_error: fail)
        record.update(status="failed", decision=record.get("decision", "failed"), error=f"{type(exc).__name__}: {exc}")
    return _finish(record, t0)


def _files_after(record: dict[str, Any], location: str, wrote: bool) -> None:
    if wrote:
        record["files_after"], record["bytes_after"] = _files(location)
    else:  # nothing committed: the counts cannot have changed because of us
        record["files_after"], record["bytes_after"] = record["files_before"], record["bytes_before"]


def _finish(record: dict[str, Any], t0: float) -> dict[str, Any]:
    record["seconds"] = round(time.perf_counter() - t0, 2)
    if record.get("error") and record.get("status") != "failed":
        record["status"] = "failed"
    fb, fa = record.get("files_before"), record.get("files_after")
    files = f"files {fb} -> {fa}" if fb is not None and fa is not None else "files -"
    bb, ba = record.get("bytes_before"), record.get("bytes_after")
    size = f", bytes {bb} -> {ba}" if bb is not None and ba is not None else ""
    record["line"] = (
        f"delta_optimize {record['table']}: {record.get('decision', record.get('status'))}, {files}{size}, "
        f"{record['seconds']}s"
        + (f" ({record['reason']})" if record.get("status") == "skipped" and record.get("reason") else "")
        + (f" ERROR {record['error']}" if record.get("error") else "")
    )
    try:
        _append_result(record)
    except OSError as exc:  # reporting must not break the run
        log.warning("could not write %s: %s", RESULTS_FILE, exc)
    out: dict[str, Any] = json.loads(json.dumps(record, default=str))
    return out


def run_operation(
    table: str,
    *,
    where: Any = None,
    zorder_by: Any = None,
    dry_run: bool = False,
    model: str | None = None,
    file_format: str | None = None,
) -> dict[str, Any]:
    """``dbt run-operation optimize`` body for one table: a full OPTIMIZE (or its plan)."""
    t0 = time.perf_counter()
    record: dict[str, Any] = {"table": table, "model": model, "mode": "optimize", "dry_run": bool(dry_run)}
    try:
        s = _validate_settings({"where": where, "zorder_by": zorder_by})
        location = _delta_location(record, table, file_format)
        if location is None:
            return _finish(record, t0)
        from ..api import optimize, plan_optimize

        if dry_run:
            plan = plan_optimize(_spark(), location, where=s.get("where"), zorder_by=s.get("zorder_by"))
            record.update(decision="plan", status="planned", plan=plan.to_dict())
            _files_after(record, location, False)
        else:
            result = optimize(_spark(), location, where=s.get("where"), zorder_by=s.get("zorder_by"))
            wrote = bool(result.committed_versions)
            record.update(decision="optimize", status="optimized" if wrote else "nothingToDo", metrics=result.to_dict())
            _files_after(record, location, wrote)
    except Exception as exc:
        record.update(status="failed", decision="failed", error=f"{type(exc).__name__}: {exc}")
    return _finish(record, t0)


def functions() -> dict[str, Any]:
    """The whitelisted namespace exposed as ``modules.delta_optimize``."""
    return {"record_version": record_version, "run_model": run_model, "run_operation": run_operation}


def install() -> None:
    """Wrap dbt's ``get_context_modules`` once (idempotent) so Jinja sees ``modules.delta_optimize``."""
    import dbt.context.base as base

    current = base.get_context_modules
    if getattr(current, "_delta_optimize", False):
        return

    def get_context_modules() -> dict[str, Any]:
        modules = current()
        modules[NAMESPACE] = functions()
        return modules

    get_context_modules._delta_optimize = True  # type: ignore[attr-defined]
    base.get_context_modules = get_context_modules


class DeltaOptimizePlugin(dbtPlugin):
    """Registers ``modules.delta_optimize`` for this package's macros."""

    def initialize(self) -> None:
        # Spark's Python workers must run this interpreter (with pyarrow), whoever creates the session.
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        install()
