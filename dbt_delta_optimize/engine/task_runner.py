"""One Spark job for a batch of bin tasks, with each outcome handed over as its task ends.

The bins of a batch become the tasks of one job (one partition, one message each), so Spark
spreads them over the executors and pays its job overhead once, not once per bin. Outcomes come
back while the job still runs, so the driver can commit finished bins (``commit_every``), report
progress and cancel the rest (time budget, too many failures):

* classic sessions: an RDD of messages; each task also adds its outcome to an accumulator, which
  Spark merges on the driver as each task ends (the job's result is the authoritative copy);
* Spark Connect: a ``mapInArrow`` over a range with one row per message, read back with
  ``toLocalIterator``, which streams partitions in order as they are computed.

The task function is the stdlib-only ``tasks.bootstrap``, pickled by value: a worker that cannot
import this package answers with a typed fallback instead of failing the job. A job that fails before
our code runs (Connect's ``mapInArrow`` needs pyarrow in PySpark's own worker) is explained by
``python_workers``: when the workers lack a module, its bins fall back to Spark with that one line.

On a local master (``SparkEngine.runs_tasks_in_driver``) the executors are this machine's cores, so
the driver's own threads run the bins instead: the same task body, the same outcomes, without a
Python worker to start or a task to serialize. The ``task_runner`` setting (``spark``) keeps them on
Spark.
"""

from __future__ import annotations

import functools
import logging
import queue
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..tasks import bootstrap
from ..tasks.messages import Fallback, Outcome, Task, decode_outcome, encode

if TYPE_CHECKING:
    from .bin_processes import BinProcesses
    from .spark_engine import SparkEngine

__all__ = ["JobEnded", "TaskJob", "start_task_job"]

log = logging.getLogger(__name__)

_POLL_SECONDS = 0.02
#: How long cancelled driver threads get to stop before they are left behind (a bin checks between row groups).
STUCK_SECONDS = 10.0


@dataclass(frozen=True)
class JobEnded:
    """The job is over; ``error`` is set when Spark failed or cancelled it (bins without an outcome got none)."""

    error: BaseException | None


def _pickle_bootstrap_by_value() -> None:
    from pyspark import cloudpickle

    register: Any = cloudpickle.register_pickle_by_value
    register(bootstrap)


class TaskJob:
    """A running job: its outcomes and its end arrive on ``events`` (a queue shared with the caller)."""

    def __init__(
        self,
        engine: SparkEngine,
        tasks: Sequence[Task],
        group: str,
        description: str,
        events: Any,
        *,
        max_threads: int,
        in_driver: bool,
        processes: BinProcesses | None = None,
    ):
        self.engine = engine
        self.processes = processes  #: the run's worker processes, when this job's bins run there
        self.max_threads = max_threads
        self.tasks = list(tasks)
        self.in_driver = in_driver
        self.texts = [] if self.in_driver else [encode(t) for t in tasks]
        self._stop = threading.Event()
        self.group = group
        self.description = description
        self.events: queue.Queue[Any] = events
        self._seen: set[int] = set()
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self._done = threading.Event()
        self._abandoned = threading.Event()
        self._failed = False  #: Spark failed or cancelled the job: its other tasks may still be ending

    # ------------------------------------------------------------------ outcomes
    def _deliver(self, text: str) -> None:
        self._deliver_outcome(decode_outcome(text))

    def _deliver_outcome(self, outcome: Outcome) -> None:
        with self._lock:
            if outcome.bin_id in self._seen:  # the accumulator and the job's result both carry it
                return
            self._seen.add(outcome.bin_id)
        self.events.put(outcome)

    def _finish(self, error: BaseException | None) -> None:
        """Every outcome first (the poller drains the accumulator once more), then the end."""
        self._done.set()
        for thread in self._threads:
            if thread is not threading.current_thread() and not self._abandoned.is_set():
                thread.join()
        self.events.put(JobEnded(error))

    def _explain(self, error: BaseException) -> BaseException | None:
        """A failed job's error, or None when the workers lack a module: then every bin without an outcome
        falls back to Spark with that reason (and so do later jobs of this engine)."""
        if self._stop.is_set() or not isinstance(error, Exception):
            return error
        from .python_workers import missing_module_problem

        problem = missing_module_problem(self.engine.spark)
        if problem is None:
            return error
        self.engine.python_workers_problem = problem
        self._fall_back(problem)
        return None

    def _fall_back(self, reason: str) -> None:
        for task in self.tasks:
            self._deliver_outcome(Fallback(task.bin_id, reason))

    def _run_known_problem(self) -> None:
        """An earlier job found the workers' Python lacking a module: no job, every bin to Spark."""
        self._fall_back(self.engine.python_workers_problem or "")
        self._finish(None)

    def _spawn(self, target: Any) -> None:
        thread = threading.Thread(target=target, name=f"OptimizeJob-{self.group}", daemon=True)
        self._threads.append(thread)
        thread.start()

    # ------------------------------------------------------------------ classic
    def _run_classic(self) -> None:
        from pyspark.accumulators import AddingAccumulatorParam

        sc = self.engine.spark.sparkContext
        sink: Any = sc.accumulator([], AddingAccumulatorParam([]))
        self._spawn(lambda: self._poll(sink))
        error: BaseException | None = None
        try:
            with self.engine.job_group(self.group, self.description):
                rdd = sc.parallelize(self.texts, len(self.texts))
                results = rdd.mapPartitions(functools.partial(bootstrap.run_messages, sink)).collect()
            for text in results:
                self._deliver(text)
        except BaseException as exc:  # cancelled, or Spark lost the job: bins without an outcome are the caller's
            self._failed = True
            error = self._explain(exc)
        finally:
            self._finish(error)

    def _poll(self, sink: Any) -> None:
        delivered = 0
        while True:
            done = self._done.is_set()
            values = sink.value
            for text in values[delivered:]:
                self._deliver(text)
            delivered = len(values)
            if done:
                return
            time.sleep(_POLL_SECONDS)

    # ------------------------------------------------------------------ Connect
    def _run_connect(self) -> None:
        spark = self.engine.spark
        error: BaseException | None = None
        try:
            with self.engine.job_group(self.group, self.description):
                n = len(self.texts)
                body = functools.partial(bootstrap.run_arrow_batches, self.texts)
                frame = spark.range(0, n, 1, n).mapInArrow(body, "outcome string")
                for row in frame.toLocalIterator():
                    self._deliver(row["outcome"])
        except BaseException as exc:
            self._failed = True
            error = self._explain(exc)
        finally:
            self._finish(error)

    # ------------------------------------------------------------------ in the driver (local masters)
    def _run_in_driver(self) -> None:
        """A local master's executors share this machine: the driver's own threads run the bins, with no
        Python worker to start and no task to serialize (about half the CPU of the same bins as Spark tasks).

        The workers are daemon threads that stop taking bins once cancelled; a bin stops between row
        groups. One stuck in a read that cannot be interrupted (a hung mount) is left behind by ``join``
        rather than hanging the run; when it wakes it sees the stop and deletes what it wrote.
        """
        from ..tasks.worker import run_task

        todo: queue.SimpleQueue[Task] = queue.SimpleQueue()
        for task in self.tasks:
            todo.put(task)
        errors: list[BaseException] = []

        def work() -> None:
            while not self._stop.is_set():
                try:
                    task = todo.get_nowait()
                except queue.Empty:
                    return
                try:
                    self._deliver_outcome(run_task(task, self._stop.is_set))
                except BaseException as exc:  # run_bin types every bin failure: this is a bug, end the job
                    errors.append(exc)
                    self._stop.set()

        threads = max(1, min(self.max_threads, self.engine.driver_threads, len(self.tasks)))
        workers = [
            threading.Thread(target=work, name=f"OptimizeJob-{self.group}-{i}", daemon=True) for i in range(threads)
        ]
        for worker in workers:
            worker.start()
        for worker in workers:
            while worker.is_alive() and not self._abandoned.is_set():
                worker.join(_POLL_SECONDS * 10)
        self._finish(errors[0] if errors else None)

    def _run_in_processes(self) -> None:
        """The driver's bins in the run's worker processes (``bin_processes``): outcomes as each bin ends.
        A bug in a bin ends the job with that error, as in a driver thread; ``BinProcesses.run`` returns
        within ``STUCK_SECONDS`` of a cancel (it kills a bin that does not stop)."""
        assert self.processes is not None
        error: BaseException | None = None
        try:
            error = self.processes.run(self.tasks, self._deliver_outcome)
        except BaseException as exc:  # a process could not be started or reached
            error = exc
            self.processes.cancel()
        finally:
            self._finish(error)

    # ------------------------------------------------------------------ control
    def start(self) -> TaskJob:
        if self.in_driver and self.processes is not None:
            self._spawn(self._run_in_processes)
            return self
        if self.in_driver:
            self._spawn(self._run_in_driver)
            return self
        if self.engine.python_workers_problem is not None:
            self._spawn(self._run_known_problem)
            return self
        _pickle_bootstrap_by_value()
        self._spawn(self._run_connect if self.engine.connect else self._run_classic)
        return self

    def cancel(self) -> None:
        self._stop.set()
        if self.processes is not None:
            self.processes.cancel()
        if not self.in_driver:
            self.engine.cancel(self.group)

    def join(self) -> None:
        """Wait for the job's threads, and for a cancelled or failed Spark job's tasks (``SparkEngine.settle``):
        Spark ends such a job for us before it has killed its other tasks. After a cancel, driver threads get
        ``STUCK_SECONDS`` to notice it; one still in a read that cannot be interrupted is left running (a
        daemon, logged), not waited for."""
        if not self.in_driver or not self._stop.is_set() or self.processes is not None:
            for thread in self._threads:  # worker processes: bounded by BinProcesses.run, which kills a stuck bin
                thread.join()
            if not self.in_driver and (self._failed or self._stop.is_set()):
                self.engine.settle(self.group)
            return
        until = time.monotonic() + STUCK_SECONDS
        for thread in self._threads:
            thread.join(max(0.0, until - time.monotonic()))
        if any(thread.is_alive() for thread in self._threads):
            self._abandoned.set()
            log.warning(
                "a bin did not stop within %.0fs of being cancelled (a read that cannot be interrupted); left running "
                "in the background: it deletes what it wrote when it wakes, and the next run removes any leftover",
                STUCK_SECONDS,
            )


def start_task_job(
    engine: SparkEngine,
    tasks: Sequence[Task],
    group: str,
    description: str,
    events: Any,
    *,
    max_threads: int = 1 << 30,
    task_runner: str = "auto",
    processes: BinProcesses | None = None,
) -> TaskJob:
    """Start one job running ``tasks``; every outcome, then one ``JobEnded``, is put on ``events``.

    ``task_runner``: auto, driver or spark (``SparkEngine.runs_tasks_in_driver``). ``max_threads``
    (delta-spark's ``optimize.maxThreads``) caps the bins the driver runs at once; a Spark job runs as
    many as the cluster has task slots. ``processes``: the run's worker processes, which run the bins
    instead of the driver's threads when the bins run in the driver (``bin_processes.pays``).
    """
    in_driver = engine.runs_tasks_in_driver(task_runner)
    if not in_driver:
        engine.prepare_python_tasks()
    job = TaskJob(
        engine,
        tasks,
        group,
        description,
        events,
        max_threads=max_threads,
        in_driver=in_driver,
        processes=processes if in_driver else None,
    )
    return job.start()
