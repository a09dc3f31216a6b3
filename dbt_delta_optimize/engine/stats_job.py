"""``analyze`` on a cluster: the files' stats tasks as one Spark job, through compaction's task runner.

Each file is one ``StatsTask`` message; ``task_runner.start_task_job`` runs them as the tasks of one
job (the package shipped to executors that lack it, outcomes as each task ends). What comes back is one
outcome per file: ``StatsComputed``, ``Failed``, or ``Fallback`` when the executors cannot import the
package or pyarrow (the caller computes those files in the driver). Files a failed job left without an
outcome are returned as missing, for the same reason.
"""

from __future__ import annotations

import queue
import uuid
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ..tasks.messages import Outcome, StatsTask
from .task_runner import JobEnded, start_task_job

if TYPE_CHECKING:
    from .spark_engine import SparkEngine

__all__ = ["run_stats_job"]


def run_stats_job(engine: SparkEngine, tasks: Sequence[StatsTask], *, table: str) -> dict[int, Outcome]:
    """Each task's outcome by ``bin_id`` (absent: the job ended without one)."""
    events: queue.Queue[Any] = queue.Queue()
    group = f"ddo-analyze-{uuid.uuid4().hex[:12]}"  # unique: a cancelled group's later jobs are refused
    job = start_task_job(
        engine, tasks, group, f"analyze: stats of {len(tasks)} file(s) of {table}", events, task_runner="spark"
    )
    out: dict[int, Outcome] = {}
    ended = False
    try:
        while not ended:
            event = events.get()
            ended = isinstance(event, JobEnded)
            if not ended:
                out[event.bin_id] = event
        return out
    finally:
        if not ended:  # interrupted while waiting (Ctrl-C): nothing of the job outlives the call
            job.cancel()
        job.join()
