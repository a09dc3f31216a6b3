"""Run a batch's bins within a time budget and a failure allowance, handing each result over as it finishes.

Bins that Arrow rewrites are the tasks of one Spark job (``task_runner``); bins that need Spark
(Z-order, liquid, the Spark engine, an Arrow fallback) are Spark jobs of their own, up to
``max_threads`` at once. Both report into one queue, so results reach the caller in the order they
finish. A task checks the deadline before it starts its bin; once the deadline passes no Spark job
starts either, and after a short grace period whatever still runs is cancelled (its files deleted by
the rewriter). A bin that fails is recorded with its cause while the others go on, until more than
``max_failed`` have failed: then the rest is cancelled and that failure raised as a typed error
(``max_failed=0`` is delta-spark's all-or-nothing).
"""

from __future__ import annotations

import logging
import queue
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from ..delta.storage import LocalStorage
from ..errors import DataFileError, DeltaOptimizeError, StorageAccessError
from ..plan.planner import Bin
from ..tasks.messages import BinTask, Failed, Fallback, NotStarted, Rewritten
from .bin_processes import BinProcesses, fork_server_running, pays, start_fork_server, take_preforked
from .bin_rewriter import BinResult, BinRewriter
from .data_files import diagnose_inputs
from .gc_pause import collector_paused
from .spark_engine import SparkEngine, spark_error_summary
from .task_runner import JobEnded, TaskJob, start_task_job

__all__ = ["BinFailure", "BinRunner"]

log = logging.getLogger(__name__)

#: Longest wait for bins in flight once the budget is spent, before they are cancelled.
MAX_GRACE_SECONDS = 10.0


@dataclass(frozen=True)
class BinFailure:
    """A bin that failed; the others went on (``max_failed_bins``)."""

    bin: Bin
    error: str

    def to_dict(self) -> dict[str, Any]:
        return {"partition": dict(self.bin.partition_values), "files": len(self.bin.files), "error": self.error}


@dataclass(frozen=True)
class _SparkDone:
    bin: Bin
    future: Future[BinResult]


@dataclass
class BinRunner:
    """Runs the bins of a run, batch after batch, sharing one deadline and one failure count."""

    engine: SparkEngine
    rewriter: BinRewriter
    group: str
    max_threads: int
    deadline: float | None = None  #: time.monotonic() after which no bin starts
    max_failed: int = 0
    on_done: Callable[[Bin], None] | None = None
    failures: list[BinFailure] = field(default_factory=list)
    left: list[Bin] = field(default_factory=list)  #: not run (budget) or cancelled at the deadline
    #: bins Arrow could not write, handed to Spark (partition, files, reason)
    fallbacks: list[dict[str, Any]] = field(default_factory=list)
    #: the run's worker processes for the driver's bins, made by the first batch they pay for (``close`` ends them)
    processes: BinProcesses | None = None
    #: a batch ran on threads that processes would have won with the fork server up: ``close`` starts it
    wants_fork_server: bool = False

    def out_of_time(self) -> bool:
        return self.deadline is not None and time.monotonic() >= self.deadline

    def processes_for(self, tasks: Sequence[BinTask]) -> BinProcesses | None:
        """The run's worker processes when these bins run in the driver, ``task_runner`` is auto and processes
        pay for them (``bin_processes.pays``), else None (the driver's threads or a Spark job run them;
        ``task_runner`` driver keeps the threads)."""
        runner = self.rewriter.plan.config.task_runner
        if runner != "auto" or not self.engine.runs_tasks_in_driver(runner):
            return None
        workers = min(self.max_threads, self.engine.driver_threads, len(tasks))
        local = isinstance(self.rewriter.snapshot.storage, LocalStorage)
        if not pays(tasks, workers=workers, local=local):
            self.wants_fork_server = self.wants_fork_server or pays(tasks, workers=workers, local=local, warm=True)
            return None
        if self.processes is not None and (self.processes.cancelled or self.processes.released):  # not reused
            self.processes.close()
            self.processes = None
        if self.processes is None:
            self.processes = take_preforked(workers) or BinProcesses(workers)
        return self.processes

    def release(self) -> None:
        """The run's last batch has run: its worker processes end while the driver commits (``close`` joins them)."""
        if self.processes is not None:
            self.processes.release()

    def close(self) -> None:
        """End the run's worker processes, joining every one: nothing of the run outlives this. The fork server
        they forked from is the process's: started here when a later run would use it (``wants_fork_server``)."""
        if self.processes is not None:
            self.processes.close()
        if self.wants_fork_server and not fork_server_running():
            start_fork_server()

    def run(self, bins: Sequence[Bin]) -> Iterator[BinResult]:
        """Yield each bin's result as it finishes (the caller may commit between results)."""
        batch = _Batch(self)
        try:
            yield from batch.run(bins)
        finally:
            batch.stop()

    # ------------------------------------------------------------------ failures
    def error_of(self, b: Bin, outcome: Failed) -> DeltaOptimizeError:
        """The typed error of a failed Arrow task, naming the file it concerns."""
        snap = self.rewriter.snapshot
        if outcome.trace:
            log.debug("%s failed in its task:\n%s", b.describe(), outcome.trace.rstrip())
        if outcome.kind == "data_file":
            logged = next((f.path for f in b.files if snap.file_path(f.path) == outcome.path), outcome.path or "")
            return DataFileError(
                f"Cannot read data file {logged!r} of '{snap.location}': {outcome.message}. Nothing was committed. "
                "Restore the file, or remove it from the table (e.g. RESTORE to an earlier version, or DELETE its rows).",
                path=logged,
                reason=outcome.message,
            )
        if outcome.kind == "storage":
            return StorageAccessError(outcome.message, retryable=outcome.retryable)
        return DeltaOptimizeError(
            f"Rewriting {b.describe()} of '{snap.location}' failed: {outcome.error_type}: {outcome.message}. "
            "Nothing of this bin was committed."
        )

    def spark_error(self, b: Bin, exc: BaseException) -> BaseException:
        """A Spark-path failure, as a DataFileError naming the file when an input is unreadable."""
        if isinstance(exc, DeltaOptimizeError) or not isinstance(exc, Exception):
            return exc
        diagnosed = diagnose_inputs(self.rewriter.snapshot, b.files)
        if diagnosed is not None:
            return diagnosed
        return DeltaOptimizeError(f"Rewriting {b.describe()} with Spark failed: {spark_error_summary(exc)}")

    def record(self, b: Bin, error: BaseException) -> None:
        """Count one failed bin; raise ``error`` once more than ``max_failed`` bins failed."""
        if not isinstance(error, Exception) or len(self.failures) >= self.max_failed:
            raise error
        log.warning("bin %s failed, the others go on: %s", b.describe(), error)
        first = str(error).splitlines()[0] if str(error) else ""
        self.failures.append(BinFailure(b, f"{type(error).__name__}: {first}"))


class _Batch:
    """One batch in flight: its Arrow job, its Spark-path bins, and the queue both report into."""

    def __init__(self, runner: BinRunner) -> None:
        self.runner = runner
        self.events: queue.Queue[Any] = queue.Queue()
        self.job: TaskJob | None = None
        self.arrow: dict[int, tuple[Bin, BinTask]] = {}  #: bin_id -> bin and task, until its outcome arrives
        self.spark: deque[Bin] = deque()
        self.inflight: dict[Future[BinResult], Bin] = {}
        self.pool: ThreadPoolExecutor | None = None
        self.cancelled = False
        #: a Spark job of the batch was cancelled or failed: Spark may still be killing its tasks
        self.unsettled = False

    # ------------------------------------------------------------------ starting
    def _start_arrow(self, bins: list[Bin]) -> None:
        r = self.runner
        if not bins:
            return
        if r.out_of_time():
            r.left.extend(bins)
            return
        deadline = None if r.deadline is None else time.time() + (r.deadline - time.monotonic())
        with collector_paused():  # a message per input file: gc_pause.py
            tasks = r.rewriter.tasks(bins, deadline)
        self.arrow = {t.bin_id: (b, t) for b, t in zip(bins, tasks)}
        description = f"{r.rewriter.snapshot.location}<br/>Optimizing {len(bins)} bin(s) with Arrow"
        self.job = start_task_job(
            r.engine,
            tasks,
            r.group,
            description,
            self.events,
            max_threads=r.max_threads,
            task_runner=r.rewriter.plan.config.task_runner,
            processes=r.processes_for(tasks),
        )

    def _start_spark(self) -> None:
        r = self.runner
        while self.spark and len(self.inflight) < r.max_threads and not r.out_of_time():
            b = self.spark.popleft()
            if self.pool is None:
                self.pool = ThreadPoolExecutor(max_workers=r.max_threads, thread_name_prefix="OptimizeJob")
            fut = self.pool.submit(r.rewriter.rewrite_with_spark, b, r.group)
            self.inflight[fut] = b
            fut.add_done_callback(self._reporter(b))
        if self.spark and r.out_of_time():
            r.left.extend(self.spark)
            self.spark.clear()

    def _reporter(self, b: Bin) -> Callable[[Future[BinResult]], None]:
        return lambda fut: self.events.put(_SparkDone(b, fut))

    # ------------------------------------------------------------------ running
    def run(self, bins: Sequence[Bin]) -> Iterator[BinResult]:
        r = self.runner
        arrow = [b for b in bins if r.rewriter.takes_arrow(b)]
        self.spark.extend(b for b in bins if not r.rewriter.takes_arrow(b))
        self._start_arrow(arrow)
        while True:
            self._start_spark()
            if not (self.arrow or self.inflight or self.spark or self.job is not None):
                return
            event = self._next_event()
            if event is None:  # grace period over: cancel what still runs
                self._cancel(as_left=True)
                return
            result = self._handle(event)
            if result is not None:
                if r.on_done is not None:
                    r.on_done(result.bin)
                yield result

    def _next_event(self) -> Any:
        r = self.runner
        timeout = None if r.deadline is None else max(0.0, r.deadline + MAX_GRACE_SECONDS - time.monotonic())
        try:
            return self.events.get(timeout=timeout)
        except queue.Empty:
            return None

    def _handle(self, event: Any) -> BinResult | None:
        if isinstance(event, _SparkDone):
            return self._spark_done(event)
        if isinstance(event, JobEnded):
            self._job_ended(event)
            return None
        self.runner.rewriter.snapshot.storage.requests.merge(getattr(event, "requests", {}))  # the task's requests
        entry = self.arrow.pop(event.bin_id, None)
        if entry is None:  # cancelled meanwhile
            return None
        b, task = entry
        if isinstance(event, Rewritten):
            with collector_paused():  # the bin's actions, one per input file
                return self.runner.rewriter.result(b, task, event)
        if isinstance(event, Fallback):  # one warning per reason: a misconfigured cluster is one line, not one a bin
            again = any(f["reason"] == event.reason for f in self.runner.fallbacks)
            level = logging.DEBUG if again else logging.WARNING
            log.log(level, "rewriting %s with Spark instead of Arrow: %s", b.describe(), event.reason)
            self.runner.fallbacks.append(
                {"partition": dict(b.partition_values), "files": len(b.files), "reason": event.reason}
            )
            self.spark.append(b)
        elif isinstance(event, NotStarted):
            self.runner.left.append(b)
        else:
            self._fail(b, self.runner.error_of(b, event))
        return None

    def _spark_done(self, event: _SparkDone) -> BinResult | None:
        self.inflight.pop(event.future, None)
        exc = event.future.exception() if not event.future.cancelled() else None
        self.unsettled = self.unsettled or exc is not None
        if event.future.cancelled() or (exc is not None and self.cancelled):
            return None
        if exc is None:
            return event.future.result()
        self._fail(event.bin, self.runner.spark_error(event.bin, exc))
        return None

    def _job_ended(self, event: JobEnded) -> None:
        """The Arrow job is over: bins it gave no outcome were cancelled (ours) or lost with the job."""
        self.job = None
        self.unsettled = self.unsettled or event.error is not None
        pending = [b for b, _ in self.arrow.values()]
        self.arrow.clear()
        if not pending:
            return
        if self.cancelled or event.error is None:
            self.runner.left.extend(pending)
            return
        error = DeltaOptimizeError(
            f"The Spark job rewriting {len(pending)} bin(s) failed: {spark_error_summary(event.error)}"
        )
        for b in pending:
            self._fail(b, error)

    def _fail(self, b: Bin, error: BaseException) -> None:
        self.runner.rewriter.discard([b])
        try:
            self.runner.record(b, error)
        except BaseException:
            self._cancel(as_left=False)
            raise

    # ------------------------------------------------------------------ stopping
    def _cancel(self, *, as_left: bool) -> None:
        r = self.runner
        self.cancelled = self.unsettled = True
        if self.job is not None:
            self.job.cancel()
        if self.inflight:
            r.engine.cancel(r.group)
        for fut in self.inflight:
            fut.cancel()
        if as_left:
            r.left.extend(b for b, _ in self.arrow.values())
            r.left.extend(self.inflight.values())
            r.left.extend(self.spark)
            log.warning("time budget spent: cancelled %d bin(s) in flight", len(self.arrow) + len(self.inflight))
        self.arrow.clear()
        self.spark.clear()

    def stop(self) -> None:
        """Nothing of this batch runs after this: cancel what is left, join every thread, and wait for the tasks
        of a cancelled or failed Spark job (``SparkEngine.settle``), which Spark kills after their job has ended
        for us: the caller deletes what they wrote and reports, and nothing of the batch may outlive that."""
        if self.job is not None or self.inflight:
            self._cancel(as_left=False)
        if self.job is not None:
            self.job.join()
        if self.pool is not None:
            self.pool.shutdown(wait=True)
        if self.unsettled:
            self.runner.engine.settle(self.runner.group)
