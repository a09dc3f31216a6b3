"""VACUUM on a cluster: the table's listing by top-level prefix, then its deletes by prefix, each one Spark job.

A table of 100M files is not listed from one process: the driver lists the table root one level deep
(one delimiter listing: the partition folders and the few files beside them), and each top-level folder is
one ``ListTask`` of one job run by compaction's task runner (``task_runner.start_task_job``: the package
shipped to executors that lack it, outcomes as each task ends). A table without partition columns is one
task listing everything, as the driver would. Each task answers with its files as ``(path, size, mtime)``
and its folders; the driver plans from them with ``plan.vacuum.plan_vacuum`` exactly as from its own
listing, while the log is replayed. After every check, the deletes are grouped by top-level prefix into
batches, one ``DeleteTask`` each, again one job; the folders left empty are removed by the driver after it.

A prefix or a batch the job left without an outcome (executors that cannot import the package, a job
Spark lost) is listed or deleted in the driver, with a warning; a task's ``Failed`` (a store refusing) is
raised as a ``StorageAccessError`` (retryable when the store may answer later), before any delete when it
is a listing's.
"""

from __future__ import annotations

import logging
import queue
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..delta.file_info import Listed
from ..delta.storage import LocalStorage, Storage
from ..errors import StorageAccessError
from ..tasks.messages import DeletedFiles, DeleteTask, Failed, Fallback, ListedPrefix, ListTask, StoreRef
from ..tasks.vacuum_task import delete_batch, list_prefix, listing_skip
from .task_runner import JobEnded, TaskJob, start_task_job

if TYPE_CHECKING:
    from ..plan.vacuum import VacuumPlan
    from .spark_engine import SparkEngine

__all__ = ["ClusterVacuum", "SparkListing", "delete_tasks"]

log = logging.getLogger(__name__)

#: Up to this many top-level prefixes, one listing task each; above, at most 4 per core of the cluster (each
#: task lists several), so a table of 10,000 partitions is not 10,000 tasks.
FEW_PREFIXES = 64


def _store_ref(storage: Storage, root: str) -> StoreRef:
    """The table root and the options a Spark task needs to open it (as compaction's tasks get them)."""
    if isinstance(storage, LocalStorage):
        return StoreRef(root, {})
    from ..delta.object_store import task_options

    return StoreRef(root, task_options(root, storage.options))


def _by(spark: int, driver: int) -> str:
    """Who did the work: ``spark``, ``driver`` or ``mixed`` (some prefixes or batches fell back to the driver)."""
    return "mixed" if spark and driver else "spark" if spark else "driver"


def _failure(table: str, what: str, failed: Sequence[Failed]) -> StorageAccessError:
    first = failed[0]
    for f in failed:
        log.debug("vacuum %s task failed at %s:\n%s", what, f.path, f.trace)
    return StorageAccessError(
        f"{table}: {len(failed)} VACUUM {what} task(s) failed on the cluster; first, at {first.path}: "
        f"{first.error_type}: {first.message}",
        retryable=all(f.retryable for f in failed),
    )


class _Outcomes:
    """A job's outcomes as each task ends, up to its ``JobEnded``; ``close`` cancels it unless it ended, and joins."""

    def __init__(self, job: TaskJob, events: queue.Queue[Any]) -> None:
        self.job, self.events, self.ended, self.closed = job, events, False, False

    def __iter__(self) -> Iterator[Any]:
        try:
            while not self.ended:
                event = self.events.get()
                self.ended = isinstance(event, JobEnded)
                yield event
        finally:
            self.close()

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            if not self.ended:
                self.job.cancel()
            self.job.join()


class SparkListing:
    """The table's listing as ``Listed`` entries, its prefixes listed by one Spark job started now.

    Iterated once (as ``plan_vacuum`` reads a listing); ``close`` cancels the job if it still runs and joins it.
    """

    def __init__(self, cluster: ClusterVacuum) -> None:
        self.cluster = cluster
        self.spark_tasks = self.driver_tasks = 0
        columns = tuple(cluster.partition_columns)
        if columns:  # partition folders: the root one level deep here, a task per folder
            self.top, prefixes = cluster.storage.list_top(cluster.root, listing_skip(columns))
        else:  # no partition folders: one task lists the whole table, as the driver's walk does
            self.top, prefixes = [], [""]
        n = len(prefixes)
        if n > FEW_PREFIXES:
            n = max(FEW_PREFIXES, min(n, 4 * cluster.engine.default_parallelism))
        store = cluster.store
        self.tasks = [ListTask(i, store, tuple(prefixes[i::n]), columns) for i in range(n)]
        self.events: queue.Queue[Any] = queue.Queue()
        self.job = (
            start_task_job(
                cluster.engine,
                self.tasks,
                f"ddo-vacuum-list-{uuid.uuid4().hex[:12]}",
                f"vacuum: list {len(prefixes)} prefix(es) of {cluster.table}",
                self.events,
                task_runner="spark",
            )
            if self.tasks
            else None
        )
        self._outcomes = _Outcomes(self.job, self.events) if self.job is not None else None

    @property
    def listed_by(self) -> str:
        return _by(self.spark_tasks, self.driver_tasks)

    def __iter__(self) -> Iterator[Listed]:
        yield from self.top
        tally = _Tally()
        for event in self._outcomes or ():
            if isinstance(event, ListedPrefix):
                self.cluster.storage.requests.merge(event.requests)
                tally.got.add(event.bin_id)
                self.spark_tasks += 1
                log.info("vacuum: %s listed by %s on %s (package: %s)", ", ".join(self.tasks[event.bin_id].prefixes) or "/",
                         event.worker.python, event.worker.host, event.worker.package)  # fmt: skip
                for path, size, mtime in event.files:
                    yield Listed(path, size, mtime)
                for folder in event.folders:
                    yield Listed(folder, 0, 0, True)
            else:
                tally.note(event)
        if tally.failed:
            raise _failure(self.cluster.table, "listing", tally.failed)
        rest = [t for t in self.tasks if t.bin_id not in tally.got]
        if rest:
            log.warning("vacuum: %d prefix(es) of %s got no listing from the Spark job (%s); listing them in the driver",
                        sum(len(t.prefixes) for t in rest), self.cluster.table, tally.why)  # fmt: skip
        c = self.cluster
        for task in rest:
            self.driver_tasks += 1
            for prefix in task.prefixes:
                yield from list_prefix(c.storage, c.root, prefix, c.partition_columns)

    def close(self) -> None:
        if self._outcomes is not None:
            self._outcomes.close()


def delete_tasks(store: StoreRef, plan: VacuumPlan, batch: int) -> list[DeleteTask]:
    """The plan's files grouped by top-level prefix, in batches of at most ``batch``, each with its sidecars."""
    groups: dict[str, list[tuple[str, int]]] = {}
    for c in plan.files:
        groups.setdefault(c.path.split("/", 1)[0] if "/" in c.path else "", []).append((c.path, c.size))
    sidecars: dict[str, list[str]] = {}
    for s in plan.sidecars:
        sidecars.setdefault(s.split("/", 1)[0] if "/" in s else "", []).append(s)
    tasks: list[DeleteTask] = []
    for prefix, files in groups.items():
        for i in range(0, len(files), batch):
            chunk = files[i : i + batch]
            extra = tuple(sidecars.pop(prefix, ())) if i == 0 else ()
            tasks.append(DeleteTask(len(tasks), store, tuple(p for p, _ in chunk), tuple(s for _, s in chunk), extra))
    for rest in sidecars.values():  # sidecars of files in no batch (none in a plan; kept for safety)
        tasks.append(DeleteTask(len(tasks), store, (), (), tuple(rest)))
    return tasks


@dataclass
class ClusterVacuum:
    """One table's VACUUM work on a cluster: its listing and its deletes as Spark jobs of ``engine``."""

    engine: SparkEngine
    storage: Storage
    root: str
    partition_columns: Sequence[str]
    table: str
    deleted_by: str = "driver"

    @property
    def store(self) -> StoreRef:
        return _store_ref(self.storage, self.root)

    def listing(self) -> SparkListing:
        """The listing, its job started now (the log is replayed while it runs)."""
        return SparkListing(self)

    def delete(self, plan: VacuumPlan, progress: Callable[[int, int], None] | None, *, batch: int) -> tuple[int, int]:
        """Delete the plan's files as one Spark job (batches by prefix), then its empty folders here: the
        files deleted and the folders removed. A failed batch is raised once the job has ended."""
        tasks = delete_tasks(self.store, plan, batch)
        count = _Count(len(plan.files), progress)
        tally = _Tally()
        if tasks:
            events: queue.Queue[Any] = queue.Queue()
            job = start_task_job(self.engine, tasks, f"ddo-vacuum-delete-{uuid.uuid4().hex[:12]}",
                                 f"vacuum: delete {count.total} file(s) of {self.table}", events, task_runner="spark")  # fmt: skip
            outcomes = _Outcomes(job, events)
            try:
                for event in outcomes:
                    if isinstance(event, DeletedFiles):
                        self.storage.requests.merge(event.requests)
                        tally.got.add(event.bin_id)
                        count.add(event.files, len(tasks[event.bin_id].paths), event.bytes, spark=True)
                    else:
                        tally.note(event)
            finally:
                outcomes.close()
        rest = [t for t in tasks if t.bin_id not in tally.got]
        if rest:
            log.warning("vacuum: %d delete batch(es) of %s got no outcome from the Spark job (%s); deleting them in "
                        "the driver", len(rest), self.table, tally.why)  # fmt: skip
        for task in rest:
            count.add(
                delete_batch(self.storage, self.root, task.paths, task.sidecars), len(task.paths), sum(task.sizes)
            )
        self.deleted_by = _by(count.spark_tasks, len(rest))
        log.info("vacuum: %d file(s), %d bytes of %s deleted by %d Spark task(s) and %d in the driver", count.deleted,
                 count.bytes, self.table, count.spark_tasks, len(rest))  # fmt: skip
        if tally.failed:
            raise _failure(self.table, "delete", tally.failed)
        from ..delta.storage import join

        folders = sum(1 for d in plan.folders if self.storage.remove_empty_dir(join(self.root, d)))
        return count.deleted, folders


@dataclass
class _Tally:
    """What a job's other events said, the same for the listing and the deletes: the tasks that answered
    (a failed one too, so it is not redone in the driver), their failures, and why the rest got no answer."""

    got: set[int] = field(default_factory=set)
    failed: list[Failed] = field(default_factory=list)
    why: object = "the executors cannot run the task"

    def note(self, event: object) -> None:
        if isinstance(event, Failed):
            self.got.add(event.bin_id)
            self.failed.append(event)
        elif isinstance(event, Fallback):
            self.why = event.reason
        elif isinstance(event, JobEnded) and event.error is not None:
            self.why = event.error


@dataclass
class _Count:
    """The deletes so far (files the store deleted, files asked, bytes), reported to ``progress`` per batch."""

    total: int
    progress: Callable[[int, int], None] | None
    deleted: int = 0
    done: int = 0
    bytes: int = 0
    spark_tasks: int = 0

    def add(self, deleted: int, asked: int, size: int, *, spark: bool = False) -> None:
        self.deleted, self.done, self.bytes = self.deleted + deleted, self.done + asked, self.bytes + size
        self.spark_tasks += spark
        if self.progress is not None:
            self.progress(self.done, self.total)
