"""commitInfo of a data-rearranging commit: in delta-spark's shape (also ours) or delta-rs's,
and its operationMetrics against the commit's actions."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..delta.actions import AddFile, RemoveFile
from .findings import Finding

__all__ = ["DELTA_RS", "DELTA_SPARK", "OTHER", "OURS", "check_commit_info", "commit_engine", "int_string"]

OURS = "dbt-delta-optimize"
DELTA_SPARK = "delta-spark"
DELTA_RS = "delta-rs"
OTHER = "other"


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


def int_string(v: Any) -> int | None:
    """An integer written as a string (delta-spark's metrics), else None."""
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


def _json_sizes(v: Any) -> Mapping[str, Any] | None:
    try:
        parsed = json.loads(v) if isinstance(v, str) else v
    except ValueError:
        return None
    ok = isinstance(parsed, Mapping) and all(
        isinstance(parsed.get(f), (int, float)) for f in ("totalFiles", "totalSize")
    )
    return parsed if ok else None


@dataclass
class _InfoCheck:
    """Collects findings about one commitInfo; each method checks one part of it."""

    info: Mapping[str, Any]
    version: int
    adds: Sequence[AddFile]
    removes: Sequence[RemoveFile]
    removed_sizes: Sequence[int | None]
    out: list[Finding] = field(default_factory=list)

    def bad(self, msg: str) -> None:
        self.out.append(Finding("commit_info_malformed", msg))

    def mismatch(self, name: str, recorded: Any, actual: Any) -> None:
        if actual is not None and recorded is not None and recorded != actual:
            msg = f"operationMetrics.{name} is {recorded}, the commit's actions give {actual}"
            self.out.append(Finding("metrics_mismatch", msg))

    @property
    def removed_bytes(self) -> int | None:
        sizes = self.removed_sizes
        return sum(s for s in sizes if s is not None) if all(s is not None for s in sizes) else None

    def common(self) -> tuple[Mapping[str, Any], Mapping[str, Any] | None]:
        """Fields every engine writes; returns (operationParameters, operationMetrics) as usable."""
        info = self.info
        op = info.get("operation")
        if not isinstance(op, str) or not op:
            self.bad("operation is missing or not a string")
        ts, rv = info.get("timestamp"), info.get("readVersion")
        if ts is not None and not _is_count(ts):
            self.bad(f"timestamp is not a number of milliseconds: {ts!r}")
        if rv is not None and (not _is_count(rv) or rv >= self.version):
            self.bad(f"readVersion {rv!r} is not a version before {self.version}")
        if info.get("isBlindAppend") not in (None, False):
            self.bad(f"isBlindAppend is {info.get('isBlindAppend')!r}; a data-rearranging commit is not a blind append")
        params, metrics = info.get("operationParameters", {}), info.get("operationMetrics")
        if not isinstance(params, Mapping):
            self.bad("operationParameters is not an object")
            params = {}
        if metrics is not None and not isinstance(metrics, Mapping):
            self.bad("operationMetrics is not an object")
            metrics = None
        return params, metrics

    def spark_parameters(self, params: Mapping[str, Any]) -> None:
        for name in ("predicate", "zOrderBy"):
            if name not in params:
                self.bad(f"operationParameters.{name} is missing")
            elif not _json_list(params[name]):
                self.bad(f"operationParameters.{name} is not a JSON list of strings: {params[name]!r}")
        if "clusterBy" in params and not _json_list(params["clusterBy"]):
            self.bad(f"operationParameters.clusterBy is not a JSON list of strings: {params['clusterBy']!r}")
        if "auto" in params and params["auto"] not in (True, False, "true", "false"):
            self.bad(f"operationParameters.auto is not a boolean: {params['auto']!r}")

    def ours(self) -> None:
        info = self.info
        if info.get("isolationLevel") != "SnapshotIsolation":
            self.bad(f"isolationLevel is {info.get('isolationLevel')!r}, expected 'SnapshotIsolation'")
        if not isinstance(info.get("readVersion"), int):
            self.bad("readVersion is missing")
        if not isinstance(info.get("txnId"), str):
            self.bad("txnId is missing")

    def spark_metrics(self, metrics: Mapping[str, Any]) -> None:
        values: dict[str, int] = {}
        for k, v in metrics.items():
            n = int_string(v)
            if n is None:
                self.bad(f"operationMetrics.{k} is not an integer string: {v!r}")
            else:
                values[k] = n
        for k in ("numAddedFiles", "numRemovedFiles", "numAddedBytes", "numRemovedBytes"):
            if k not in metrics:
                self.bad(f"operationMetrics.{k} is missing")
        self.mismatch("numAddedFiles", values.get("numAddedFiles"), len(self.adds))
        self.mismatch("numRemovedFiles", values.get("numRemovedFiles"), len(self.removes))
        self.mismatch("numAddedBytes", values.get("numAddedBytes"), sum(a.size for a in self.adds))
        self.mismatch("numRemovedBytes", values.get("numRemovedBytes"), self.removed_bytes)
        # Every DV removed belongs to a removed file: the count is that of the removes carrying one.
        dvs = sum(1 for r in self.removes if r.deletion_vector is not None)
        self.mismatch("numDeletionVectorsRemoved", values.get("numDeletionVectorsRemoved"), dvs)
        if self.adds:
            sizes = sorted(a.size for a in self.adds)
            self.mismatch("minFileSize", values.get("minFileSize"), sizes[0])
            self.mismatch("maxFileSize", values.get("maxFileSize"), sizes[-1])

    def spark_shape(self, params: Mapping[str, Any], metrics: Mapping[str, Any] | None, engine: str) -> None:
        self.spark_parameters(params)
        if engine == OURS:
            self.ours()
        if metrics is not None:
            self.spark_metrics(metrics)
        elif engine == OURS:
            self.bad("operationMetrics is missing")

    def reorg_shape(self, params: Mapping[str, Any], metrics: Mapping[str, Any] | None, engine: str) -> None:
        """REORG TABLE ... APPLY (PURGE) (delta-spark's and ours): predicate and applyPurge, OPTIMIZE's metrics."""
        if "predicate" in params and not _json_list(params["predicate"]):
            self.bad(f"operationParameters.predicate is not a JSON list of strings: {params['predicate']!r}")
        if "applyPurge" in params and params["applyPurge"] not in (True, False, "true", "false"):
            self.bad(f"operationParameters.applyPurge is not a boolean: {params['applyPurge']!r}")
        if engine == OURS:
            self.ours()
        if metrics is not None and engine in (OURS, DELTA_SPARK):
            self.spark_metrics(metrics)

    def rs_parameters(self, params: Mapping[str, Any]) -> None:
        target = params.get("targetSize")
        if "targetSize" not in params:
            self.bad("operationParameters.targetSize is missing")
        elif not (_is_count(target) or int_string(target) is not None):
            self.bad(f"operationParameters.targetSize is not a size: {target!r}")
        predicate = params.get("predicate")
        if predicate is not None and not isinstance(predicate, str):
            self.bad(f"operationParameters.predicate is not a string: {predicate!r}")

    def rs_counts(self, metrics: Mapping[str, Any]) -> None:
        for k in ("numFilesAdded", "numFilesRemoved"):
            if k not in metrics:
                self.bad(f"operationMetrics.{k} is missing")
            elif not _is_count(metrics[k]):
                self.bad(f"operationMetrics.{k} is not a number: {metrics[k]!r}")
        for k in ("partitionsOptimized", "numBatches", "totalConsideredFiles", "totalFilesSkipped"):
            if k in metrics and not _is_count(metrics[k]):
                self.bad(f"operationMetrics.{k} is not a number: {metrics[k]!r}")
        if _is_count(metrics.get("numFilesAdded")):
            self.mismatch("numFilesAdded", metrics["numFilesAdded"], len(self.adds))
        if _is_count(metrics.get("numFilesRemoved")):
            self.mismatch("numFilesRemoved", metrics["numFilesRemoved"], len(self.removes))

    def rs_sizes(self, metrics: Mapping[str, Any]) -> None:
        actual = {"filesAdded": sum(a.size for a in self.adds), "filesRemoved": self.removed_bytes}
        for k, total in actual.items():
            v = metrics.get(k)
            if v is None:
                continue
            sizes = _json_sizes(v)
            if sizes is None:
                self.bad(f"operationMetrics.{k} is not a JSON object with totalFiles/totalSize: {v!r}")
            else:
                self.mismatch(f"{k}.totalSize", sizes["totalSize"], total)

    def rs_shape(self, params: Mapping[str, Any], metrics: Mapping[str, Any] | None) -> None:
        self.rs_parameters(params)
        if metrics is not None:
            self.rs_counts(metrics)
            self.rs_sizes(metrics)


def check_commit_info(
    info: Any, version: int, adds: Sequence[AddFile], removes: Sequence[RemoveFile], removed_sizes: Sequence[int | None]
) -> list[Finding]:
    """commitInfo in delta-spark's shape (also ours) or delta-rs's, and its metrics against the actions."""
    if not isinstance(info, Mapping):
        return [Finding("commit_info_malformed", f"commitInfo is not an object: {info!r}")]
    check = _InfoCheck(info, version, adds, removes, removed_sizes)
    params, metrics = check.common()
    engine = commit_engine(info)
    if info.get("operation") == "REORG":
        check.reorg_shape(params, metrics, engine)
        return check.out
    if info.get("operation") != "OPTIMIZE":
        return check.out  # others: only the common fields have a known shape
    numeric = metrics is not None and any(
        isinstance(v, (int, float)) and not isinstance(v, bool) for v in metrics.values()
    )
    if engine == DELTA_RS or (engine == OTHER and numeric):
        check.rs_shape(params, metrics)
    else:
        check.spark_shape(params, metrics, engine)
    return check.out
