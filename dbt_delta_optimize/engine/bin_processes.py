"""Worker processes for the bins the driver runs itself, where they pay: many small local files.

On a local master the driver's threads run the Arrow bins. With inputs of a few KB, every file
releases and retakes the interpreter lock three times (open, decode, write), so two bin threads wait
for each other: on 5,000 files of 5.5 KB they use 1.3-1.5 s of CPU where two processes use 1.0 s
(docs/performance.md, "Tiny files"). So such bins run in a pool of worker processes, made once per run
and kept across its batches: the same task body (``tasks.worker.run_in_process``), the same typed
outcomes, pickled both ways.

The processes are forked by multiprocessing's fork server, which imports pyarrow and the task code
once per Python process (a warm session pays that once; a fork then costs milliseconds) and has no
thread of ours, no JVM gateway and no open table in it. Unlike multiprocessing's own children, ours do
not run the caller's ``__main__`` again (a script without a ``__main__`` guard, or dbt's entry point,
would run or import it once per process): ``_Popen`` leaves it out of what a child prepares. That is
the fork server's ``Popen._launch``, the same in CPython 3.10 to 3.13; other versions use threads. Cancelling sets one stop flag the bins ask
between row groups, as the threads' flag; a process still busy ``STUCK_SECONDS`` later is killed
(its partial file is the rewriter's to delete). ``close`` joins every process before it returns.
"""

from __future__ import annotations

import io
import logging
import multiprocessing
import os
import sys
import time
from collections.abc import Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from multiprocessing import context, forkserver, popen_forkserver, reduction, spawn, util
from typing import Any

from ..tasks.messages import BinTask, Outcome, Task
from ..tasks.worker import init_bin_process, run_in_process

__all__ = ["MAX_MEAN_FILE_BYTES", "MIN_FILES", "STUCK_SECONDS", "BinProcesses", "pays"]

log = logging.getLogger(__name__)

#: Processes pay when a batch's inputs are many small files: at least this many ...
MIN_FILES = 1000
#: ... of at most this many bytes on average (the lock handoffs per file outweigh a process's cost).
MAX_MEAN_FILE_BYTES = 64 * 1024
#: How long a cancelled bin gets to stop before its process is killed.
STUCK_SECONDS = 10.0
#: What the fork server imports once, so that a forked worker starts with them loaded.
_PRELOAD = [
    "pyarrow",
    "pyarrow.parquet",
    "pyarrow.compute",
    "dbt_delta_optimize.delta.storage",
    "dbt_delta_optimize.tasks.worker",
    "dbt_delta_optimize.tasks.parquet_sink",
    "dbt_delta_optimize.inspect.stats",
    "dbt_delta_optimize.inspect.stats_footer",
    "dbt_delta_optimize.delta.deletion_vectors",
    "pandas",  # pyarrow imports it on a bin's first array conversion: 0.3-0.5 s in every fresh process
    "zoneinfo",
    "encodings.utf_16_le",
]


class _Popen(popen_forkserver.Popen):
    """The fork server's ``Popen`` without the main module in the child's preparation data (else each
    child runs or imports the caller's ``__main__`` again). The rest is ``popen_forkserver.Popen._launch``."""

    def _launch(self, process_obj: Any) -> None:
        prep = spawn.get_preparation_data(process_obj._name)
        prep.pop("init_main_from_path", None)
        prep.pop("init_main_from_name", None)
        buf = io.BytesIO()
        context.set_spawning_popen(self)
        try:
            reduction.dump(prep, buf)
            reduction.dump(process_obj, buf)
        finally:
            context.set_spawning_popen(None)
        self.sentinel, w = forkserver.connect_to_new_process(self._fds)  # type: ignore[attr-defined]
        parent_w = os.dup(w)  # the child's sentinel of its parent, as the original keeps
        self.finalizer = util.Finalize(self, util.close_fds, (parent_w, self.sentinel))  # type: ignore[attr-defined]
        with open(w, "wb", closefd=True) as f:
            f.write(buf.getbuffer())
        self.pid = forkserver.read_signed(self.sentinel)


class _Process(context.ForkServerProcess):
    @staticmethod
    def _Popen(process_obj: Any) -> Any:
        return _Popen(process_obj)


class _Context(context.ForkServerContext):
    Process = _Process


def _supported() -> bool:
    """CPython 3.10 to 3.13 (``_Popen``'s copy of ``_launch``) on a system with a fork server."""
    return (3, 10) <= sys.version_info[:2] <= (3, 13) and "forkserver" in multiprocessing.get_all_start_methods()


def pays(tasks: Sequence[BinTask], *, workers: int, local: bool) -> bool:
    """Whether a batch's bins should run in worker processes: a local table, two or more workers and bins,
    and many small input files (else the driver's threads do as well without a process to fork)."""
    if not local or workers < 2 or len(tasks) < 2 or (os.cpu_count() or 1) < 2 or not _supported():
        return False
    files = sum(len(t.inputs) for t in tasks)
    size = sum(f.size for t in tasks for f in t.inputs)
    return files >= MIN_FILES and size <= MAX_MEAN_FILE_BYTES * files


class BinProcesses:
    """A run's pool of bin worker processes (``workers`` of them), its stop flag, and its end."""

    def __init__(self, workers: int) -> None:
        ctx = _Context()
        ctx.set_forkserver_preload(_PRELOAD)
        self.workers = workers
        # A byte in shared memory, not an Event: a bin asks it between row groups, thousands of times, and an
        # Event's lock is a semaphore round trip each time (it doubled a tiny bin's time).
        self.stop: Any = ctx.RawValue("b", 0)
        self.pool = ProcessPoolExecutor(
            max_workers=workers, mp_context=ctx, initializer=init_bin_process, initargs=(self.stop,)
        )
        self.cancelled = False
        self.closed = False

    def submit(self, task: Task) -> Future[Outcome]:
        return self.pool.submit(run_in_process, task)

    def cancel(self) -> None:
        """Bins not started are dropped; those running stop at their next row group. The pool is not reused."""
        self.cancelled = True
        self.stop.value = 1
        self.pool.shutdown(wait=False, cancel_futures=True)

    def _processes(self) -> list[Any]:
        processes = getattr(self.pool, "_processes", None)  # ProcessPoolExecutor has no public list before 3.14
        return list(processes.values()) if processes else []

    def kill(self) -> None:
        """End every process now (a bin stuck past the grace period): its outcome never comes."""
        for process in self._processes():
            if process.is_alive():
                process.kill()

    def close(self) -> None:
        """Stop taking bins and join every process: idle ones end at once, a cancelled bin gets
        ``STUCK_SECONDS`` to stop, then its process is killed. Never returns with a process running."""
        if self.closed:
            return
        self.closed = True
        processes = self._processes()
        self.pool.shutdown(wait=False, cancel_futures=True)
        until = time.monotonic() + STUCK_SECONDS
        for process in processes:
            process.join(max(0.0, until - time.monotonic()))
        stuck = [p for p in processes if p.is_alive()]
        if stuck:
            log.warning("%d bin process(es) did not stop within %.0fs of the end: killed", len(stuck), STUCK_SECONDS)
            for process in stuck:
                process.kill()
        for process in processes:
            process.join()
        self.pool.shutdown(wait=True)
