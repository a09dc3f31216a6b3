"""OptimizeExecutor: runs an OptimizePlan on Spark and commits it with our Delta writer.

Spark appears only in the engine, where data is read and written: the bins a batch rewrites with
Arrow are the tasks of one Spark job; bins that need Spark's own writer (clustering) are Spark jobs
of their own, up to maxThreads at once. All adds and removes of a batch are one
dataChange=false OPTIMIZE commit. A run journals what it writes before writing it, cleans up what
dead runs left behind before it starts, and deletes its own uncommitted files when it fails.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..delta.commit import CommitResult
from ..delta.debris import STAGING_DIR, RunJournal, clean_debris
from ..delta.protocol import ensure_write_supported
from ..delta.snapshot import Snapshot
from ..errors import CommitConflictError, CommitFailedError
from ..plan.metrics import OptimizeMetrics, RunOutcome, run_metrics
from ..plan.ordering import order_bins
from ..plan.planner import Bin, OptimizePlan
from .bin_rewriter import BinResult, BinRewriter
from .bin_runner import BinRunner
from .committer import DroppedBin, commit_batch
from .gc_pause import collector_paused
from .layout import check_output_folders, hive_dir
from .spark_engine import SparkEngine

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from ..inspect.validate_actions import RemovesCheck

__all__ = ["STAGING_DIR", "BinResult", "OptimizeExecutor", "ProgressCallback"]

log = logging.getLogger(__name__)

ProgressCallback = Callable[[int, int, int, int], None]  # bins done, bins total, bytes done, bytes total


@dataclass
class _Progress:
    callback: ProgressCallback | None
    bins_total: int
    bytes_total: int
    bins: int = 0
    bytes: int = 0

    def advance(self, b: Bin) -> None:
        self.bins += 1
        self.bytes += b.size
        if self.callback:
            self.callback(self.bins, self.bins_total, self.bytes, self.bytes_total)


@dataclass
class _Run:
    results: list[BinResult] = field(default_factory=list)
    committed: list[CommitResult] = field(default_factory=list)
    dropped: list[DroppedBin] = field(default_factory=list)


class OptimizeExecutor:
    """delta-spark's OptimizeExecutor, in Python: rewrite a plan's bins in parallel, commit per batch.

    Beyond delta-spark: a wall-clock budget (``max_duration``), commits every N bins or T seconds
    (``commit_every``), bins that may fail while the others commit (``max_failed_bins``), and bins
    dropped, not the whole run failed, when a concurrent DML commit changes some of their files.
    """

    def __init__(
        self,
        spark: SparkSession | SparkEngine,
        snapshot: Snapshot,
        plan: OptimizePlan,
        *,
        progress: ProgressCallback | None = None,
        started: float | None = None,
    ) -> None:
        """``started``: ``time.monotonic()`` when the command began (the time budget counts from it)."""
        ensure_write_supported(snapshot.protocol, snapshot.metadata, table=snapshot.location)
        self.engine = spark if isinstance(spark, SparkEngine) else SparkEngine(spark)
        self.snapshot = snapshot
        self.plan = plan
        self.config = plan.config
        self.progress = progress
        self.operation_timestamp = int(time.time() * 1000)
        self.started = time.monotonic() if started is None else started

    # ------------------------------------------------------------------ running
    def optimize(self) -> OptimizeMetrics:
        """Run the plan; returns delta-spark's metrics (plus the versions this run committed)."""
        plan, snap = self.plan, self.snapshot
        journal = RunJournal(snap.storage, snap.location, read_version=snap.version)
        rewriter = BinRewriter(self.engine, snap, plan, journal, self.operation_timestamp)
        in_driver = self.engine.runs_tasks_in_driver(self.config.task_runner)
        if plan.bins and (not in_driver or any(not rewriter.takes_arrow(b) for b in plan.bins)):
            # A deferred embedded session starts here (not in a bin's thread), before the clock of the metrics
            # starts: like delta-spark's, they time the command in a running session.
            self.engine.start()
        start_ms = int(time.time() * 1000)
        snap.storage.requests.mark("rewrite")
        group = f"dbt-delta-optimize-{uuid.uuid4().hex[:12]}"
        folders = {hive_dir(b.partition_values, snap.physical_partition_columns) for b in plan.bins}
        check_output_folders(snap.storage, snap.location, sorted(folders))
        cleaned = clean_debris(snap.storage, snap.location)
        if cleaned.removed:
            log.info("removed what earlier killed runs left in %s: %s", snap.location, cleaned.to_dict())
        if plan.bins and not in_driver:
            self.engine.prepare_python_tasks()  # a cluster's executors get this package before the first task
        progress = _Progress(self.progress, len(plan.bins), plan.bytes_to_rewrite)
        runner = self._runner(rewriter, group, progress)
        run = _Run()
        try:
            for i, batch in enumerate(plan.batches):
                if runner.out_of_time():
                    runner.left.extend(batch)
                    continue
                last = i == len(plan.batches) - 1
                self._run_batch(order_bins(batch, self.config.order), runner, rewriter, run, last=last)
        finally:
            runner.close()  # the bins' worker processes, if any, end before their files are deleted
            rewriter.discard_uncommitted()  # failed, cancelled or dropped bins; nothing committed is in here
            journal.close()
        return self._metrics(run, runner, start_ms, self.engine.scheduled_tasks(group))

    def _runner(self, rewriter: BinRewriter, group: str, progress: _Progress) -> BinRunner:
        budget = self.config.max_duration
        return BinRunner(
            self.engine,
            rewriter,
            group,
            self.config.max_threads,
            deadline=None if budget is None else self.started + budget,
            max_failed=self.config.max_failed_bins,
            on_done=progress.advance,
        )

    def _run_batch(
        self, batch: Sequence[Bin], runner: BinRunner, rewriter: BinRewriter, run: _Run, *, last: bool
    ) -> None:
        pending: list[BinResult] = []
        last_commit = time.monotonic()
        checked = self._removes_check()
        for result in runner.run(batch):
            if not pending and not run.results:
                _load_commit_modules()  # the first bin is done: the others run
            pending.append(result)
            checked = _checked(checked, result)
            if self._commit_due(len(pending), last_commit):
                self._commit(pending, rewriter, run, checked)
                pending, last_commit, checked = [], time.monotonic(), self._removes_check()
        if last:
            runner.release()  # no bins follow: the worker processes end during the commit, not after it
        if pending:
            self._commit(pending, rewriter, run, checked)

    def _removes_check(self) -> RemovesCheck | None:
        """The check of the next commit's removes, made bin by bin as the bins finish (``RemovesCheck``): when
        commits are validated, against the snapshot the bins were planned on."""
        if not self.config.validate_commits or self.plan.read_version != self.snapshot.version:
            return None
        from ..inspect.validate_actions import RemovesCheck

        return RemovesCheck(self.snapshot)

    def _commit_due(self, finished: int, last_commit: float) -> bool:
        every_bins, every_seconds = self.config.commit_every_bins, self.config.commit_every_seconds
        if every_bins is not None and finished >= every_bins:
            return True
        return every_seconds is not None and time.monotonic() - last_commit >= every_seconds

    def _commit(
        self, results: list[BinResult], rewriter: BinRewriter, run: _Run, checked: RemovesCheck | None = None
    ) -> None:
        self.snapshot.storage.requests.mark("commit")  # and what follows it: validation, checkpoint, log cleanup
        ours = tuple(c.version for c in run.committed)
        try:
            with collector_paused():  # thousands of short-lived actions and lines: gc_pause.py
                outcome = commit_batch(self.snapshot, self.plan, results, ours=ours, checked_removes=checked)
        except CommitFailedError as exc:
            raise _truthful(exc, run) from exc
        rewriter.discard(d.bin for d in outcome.dropped)
        rewriter.committed(r.bin for r in outcome.committed)
        run.dropped.extend(outcome.dropped)
        if outcome.result is not None:
            run.committed.append(outcome.result)
            run.results.extend(outcome.committed)

    # ------------------------------------------------------------------ metrics
    def _metrics(self, run: _Run, runner: BinRunner, start_ms: int, tasks: int) -> OptimizeMetrics:
        outcome = RunOutcome(
            added=tuple(a.size for r in run.results for a in r.adds),
            removed=tuple(rm.size or 0 for r in run.results for rm in r.removes),
            bins=tuple(r.bin for r in run.results),
            committed_versions=tuple(c.version for c in run.committed),
            left=tuple(runner.left),
            failed=tuple(f.to_dict() for f in runner.failures),
            dropped=tuple(d.to_dict() for d in run.dropped),
            spark_fallbacks=tuple(runner.fallbacks),
            log_files_deleted=sum(c.log_files_deleted for c in run.committed),
            log_bytes_deleted=sum(c.log_bytes_deleted for c in run.committed),
            **_copy_metrics(run.results),
        )
        return run_metrics(
            self.plan,
            self.snapshot,
            outcome,
            parallelism=self.engine.default_parallelism,
            tasks=tasks,
            start_ms=start_ms,
        )


def _load_commit_modules() -> None:
    """Import what the commit and its checks use while bins still run: once the last bin is done, these imports
    would be on the commit's path (about 20 ms in a fresh process: pyarrow.parquet with pyarrow.fs for the added
    files' footers, the validators; log cleanup only once a checkpoint is written: ``committer._log_cleanup``)."""
    import pyarrow.parquet  # noqa: F401

    from ..inspect import landed, validate  # noqa: F401


def _checked(check: RemovesCheck | None, result: BinResult) -> RemovesCheck | None:
    """``check`` with a finished bin's removes checked; None (the commit checks every remove itself, and says
    what is wrong) if checking them failed."""
    if check is None:
        return None
    try:
        check.add(result.bin.files, result.removes)
    except Exception:
        log.debug("checking the removes of a bin as it finished failed; the commit checks them all", exc_info=True)
        return None
    return check


def _truthful(exc: CommitFailedError, run: _Run) -> CommitFailedError:
    """The failure, saying which batches did commit before it (their work is kept) and what is left."""
    if not run.committed:
        return exc
    versions = ", ".join(str(c.version) for c in run.committed)
    message = str(exc).replace("Nothing was committed", "This batch was not committed")
    message = (
        f"{message} Earlier batches of this run did commit (versions {versions}, "
        f"{sum(len(r.bin.files) for r in run.results)} files compacted); re-run optimize for the rest."
    )
    if isinstance(exc, CommitConflictError):
        return type(exc)(message, winning_version=exc.winning_version, paths=exc.paths)
    return type(exc)(message)


def _copy_metrics(results: Sequence[BinResult]) -> dict[str, Any]:
    """The row-group copy's counts over the committed bins, and why bins were re-encoded."""
    reports = [(r.bin, r.copy) for r in results if r.copy is not None]
    return {
        "row_groups_copied": sum(c.row_groups_copied for _, c in reports),
        "bytes_copied": sum(c.bytes_copied for _, c in reports),
        "row_groups_reencoded": sum(c.row_groups_reencoded for _, c in reports),
        "bytes_reencoded": sum(c.bytes_reencoded for _, c in reports),
        "bytes_joined": sum(c.bytes_joined for _, c in reports),
        "copy_fallbacks": tuple(
            {
                "partition": dict(b.partition_values),
                "files": len(b.files),
                "wholeBin": c.fallback,
                "reasons": [f"{kind}: {detail}" for kind, detail in c.reasons],
            }
            for b, c in reports
            if c.reasons
        ),
    }
