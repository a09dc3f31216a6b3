"""The outcome of one hook or run-operation on one table: a frozen, typed record.

The executors (``spark_hooks``, ``sql_hooks``) and the bridge fill a mutable ``Report`` as the work
proceeds (a string-keyed builder, the keys below); the bridge turns it into an ``Outcome`` once, when the
call ends (``Outcome.of``). The results file (``to_dict``) and the log line (``line``) are made from the
``Outcome`` only, so what is logged and what is written cannot disagree.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Outcome", "Report"]

#: The builder the executors fill while the work runs (the keys are ``Outcome``'s field names; an
#: operation may add its own payload under a new key, kept in ``Outcome.extra``).
Report = dict[str, Any]

#: how the log line names the engine that did the work (the results file has ``engine`` and ``method``)
_ENGINE_LABELS = {"spark": "spark", "connect": "spark connect", "sql": "sql ({method})"}


@dataclass(frozen=True, kw_only=True)
class Outcome:
    """What was done to one table, why, with which settings, and what it changed.

    ``reported`` keeps which keys the work reported, in order: the results file holds those keys (an
    absent key and a ``null`` one stay distinct, as the documented JSON has them), plus ``seconds`` and
    ``line``.
    """

    table: str
    seconds: float
    model: str | None = None
    at: str | None = None  #: when the post-hook started (local time, ISO 8601)
    mode: str | None = None  #: auto, optimize, never; or the run-operation (optimize, purge, analyze ...)
    on_error: str | None = None
    dry_run: bool | None = None
    decision: str | None = None  #: skipped, optimize, purge, plan, the auto compaction's status, failed ...
    status: str | None = None  #: skipped, optimized, nothingToDo, planned, failed, ...
    reason: str | None = None
    quiet: bool | None = None  #: a skip already explained earlier in this invocation
    engine: str | None = None  #: spark, connect, sql
    method: str | None = None  #: dbt's connection method (session, thrift, http, odbc ...)
    location: str | None = None
    log_readable: bool | None = None  #: SQL path: whether the dbt host reads the table's log
    files_before: int | None = None
    bytes_before: int | None = None
    files_after: int | None = None
    bytes_after: int | None = None
    clustered_by: tuple[str, ...] | None = None
    #: each setting in force: {"value", "source"} (and "applied" through SQL)
    settings: Mapping[str, Mapping[str, Any]] | None = None
    metrics: Mapping[str, Any] | None = None
    auto_compact: Mapping[str, Any] | None = None
    plan: Mapping[str, Any] | None = None
    analyze: Mapping[str, Any] | None = None
    statements: int | None = None  #: SQL path: statements sent
    validation: tuple[Mapping[str, Any], ...] | None = None  #: SQL path: the validator's reports
    warning: str | None = None  #: SQL path: the one warning naming every setting it cannot honour
    error: str | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)  #: keys an operation reported beyond these
    reported: tuple[str, ...] = ()

    @classmethod
    def of(cls, report: Mapping[str, Any], seconds: float) -> Outcome:
        """The record of a finished call; a report with an error is ``failed``, whatever its status said."""
        names = {f.name for f in dataclasses.fields(cls)} - {"extra", "reported", "seconds"}
        known = {k: v for k, v in report.items() if k in names}
        extra = {k: v for k, v in report.items() if k not in names and k not in ("seconds", "line")}
        keys = [k for k in report if k not in ("seconds", "line")]
        if known.get("error") and known.get("status") != "failed":
            known["status"] = "failed"
            keys += [] if "status" in keys else ["status"]
        for k in ("clustered_by", "validation"):
            if known.get(k) is not None:
                known[k] = tuple(known[k])
        return cls(**known, seconds=round(float(seconds), 2), extra=extra, reported=tuple(keys))

    def to_dict(self) -> dict[str, Any]:
        """The results file's entry: the reported keys, ``seconds`` and ``line`` (JSON-ready)."""
        out: dict[str, Any] = {}
        for k in self.reported:
            value = self.extra[k] if k in self.extra else getattr(self, k)
            out[k] = list(value) if isinstance(value, tuple) else value
        out["seconds"] = self.seconds
        out["line"] = self.line()
        return out

    def line(self) -> str:
        """The one line the macros log: table, decision, files and bytes before -> after, seconds."""
        fb, fa, bb, ba = self.files_before, self.files_after, self.bytes_before, self.bytes_after
        files = f"files {fb} -> {fa}" if fb is not None and fa is not None else "files -"
        size = f", bytes {bb} -> {ba}" if bb is not None and ba is not None else ""
        note = f" ({self.reason})" if self.status == "skipped" and self.reason else ""
        error = f" ERROR {self.error}" if self.error else ""
        decision = self.decision if "decision" in self.reported else self.status
        engine = _ENGINE_LABELS.get(str(self.engine))
        via = f" via {engine.format(method=self.method)}" if engine and decision != "skipped" else ""
        lite = self.extra.get("vacuum_lite")  # the post-hook's LITE VACUUM (``dbt.vacuum_hook``)
        vacuum = ""
        if isinstance(lite, Mapping) and lite.get("ran"):
            deleted = (lite.get("metrics") or {}).get("filesDeleted")
            vacuum = ", vacuum lite" + (f" deleted {deleted} files" if deleted is not None else "")
        return f"delta_optimize {self.table}: {decision}{via}, {files}{size}{vacuum}, {self.seconds}s{note}{error}"
