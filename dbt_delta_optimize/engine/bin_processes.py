"""Worker processes for the bins the driver runs itself, where they pay: many small local files.

On a local master the driver's threads run the Arrow bins. With inputs of a few KB, every file
releases and retakes the interpreter lock three times (open, decode, write), so two bin threads wait
for each other: on 5,000 files of 5.5 KB they use 1.3-1.5 s of CPU where two processes use 1.0 s
(docs/performance.md, "Tiny files"). So such bins run in a pool of worker processes, made once per run
and kept across its batches: the same task body (``tasks.worker.serve_bins``), the same typed outcomes,
pickled both ways over one pipe per process (no executor thread, no shared queue whose lock a killed
process could hold).

The processes are forked by multiprocessing's fork server, which imports pyarrow and the task code
once per Python process (a warm session pays that once; a fork then costs milliseconds) and has no
thread of ours, no JVM gateway and no open table in it. The console script forks its workers itself
instead (``prefork``), as it starts, before it has a thread or an open table: no server process to
start, import into and fork from (0.2 s of CPU on a 2-core machine's busy cores, docs/performance.md,
"Issue 45, huge pages and forking the workers from the CLI"). Unlike multiprocessing's own children, ours do
not run the caller's ``__main__`` again (a script without a ``__main__`` guard, or dbt's entry point,
would run or import it once per process): ``_Popen`` leaves it out of what a child prepares. That is
the fork server's ``Popen._launch``, the same in CPython 3.10 to 3.13; other versions use threads.

Cancelling sets one stop flag the bins ask between row groups, as the threads' flag. A bin that has not
stopped ``STUCK_SECONDS`` later (a read that never returns: a FIFO, a hung mount) is killed with its
process, and its partial file is the rewriter's to delete; a process that dies fails its own bin only.
``close`` joins every process before it returns.
"""

from __future__ import annotations

import importlib
import io
import logging
import multiprocessing
import os
import sys
import threading
import time
from collections.abc import Callable, Sequence
from multiprocessing import connection, context, forkserver, popen_forkserver, reduction, spawn, util
from typing import Any

from ..tasks.messages import BinTask, Failed, Outcome, Task
from .fork_server import PRELOAD, fork_server_running, start_fork_server, supported

__all__ = [
    "COLD_MAX_MEAN_FILE_BYTES",
    "MAX_MEAN_FILE_BYTES",
    "MIN_FILES",
    "STUCK_SECONDS",
    "BinProcesses",
    "close_preforked",
    "fork_server_running",
    "pays",
    "prefork",
    "preforked",
    "start_fork_server",
    "take_preforked",
]

log = logging.getLogger(__name__)

#: Processes pay when a batch's inputs are many small files: at least this many ...
MIN_FILES = 1000
#: ... of at most this many bytes on average, once this process's fork server runs (the GIL handoffs per file
#: outweigh a fork). Measured on this 2-core machine, processes against threads in one warm session,
#: alternating, medians of 11 rounds: 2,000 files of 57 KB 0.91 against 1.02 s, 1,212 of 40 KB 0.51 against
#: 0.57 s, 1,000 of 200 KB 1.30 against 1.44 s (docs/performance.md, "Issue 45, processes for small files
#: too"). Larger files spend their time in pyarrow, outside the GIL, where threads do as well.
MAX_MEAN_FILE_BYTES = 256 * 1024
#: ... or of at most this many while the fork server must start first: its imports took 0.6 s (0.2-0.3 s without
#: pandas and with pyarrow loaded without numpy, ``engine.fork_server_init``), which only the
#: tiniest files win back in one run (a fresh process: 5,000 files of 5.5 KB 1.60 s against 1.90 s on threads,
#: 1,212 of 40 KB 1.11-1.45 s against 0.76-0.87 s).
COLD_MAX_MEAN_FILE_BYTES = 16 * 1024
#: How long a cancelled bin gets to stop before its process is killed.
STUCK_SECONDS = 10.0
#: How long a process that was asked to end (or killed) is waited for.
_JOIN_SECONDS = 5.0
#: How often a running batch looks for a cancel between outcomes.
_POLL_SECONDS = 0.05


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


def pays(tasks: Sequence[BinTask], *, workers: int, local: bool, warm: bool | None = None) -> bool:
    """Whether a batch's bins should run in worker processes: a local table, two or more workers and bins,
    and many small input files (else the driver's threads do as well without a process to fork). ``warm``:
    whether processes are ready to fork or forked (by default, whether the fork server runs now or the console
    script's preforked workers wait)."""
    if not local or workers < 2 or len(tasks) < 2 or (os.cpu_count() or 1) < 2 or not supported():
        return False
    files = sum(len(t.inputs) for t in tasks)
    size = sum(f.size for t in tasks for f in t.inputs)
    warm = (fork_server_running() or preforked()) if warm is None else warm
    return files >= MIN_FILES and size <= (MAX_MEAN_FILE_BYTES if warm else COLD_MAX_MEAN_FILE_BYTES) * files


class _Worker:
    """One worker process and the driver's end of its pipe; ``task`` is the bin it runs, if any."""

    def __init__(self, process: Any, conn: Any) -> None:
        self.process = process
        self.conn = conn
        self.task: Task | None = None
        self.told_to_end = False  #: sent None by ``release``: it is ending on its own


class BinProcesses:
    """A run's worker processes for the driver's bins (at most ``workers``), its stop flag, and its end.

    ``run`` hands a batch's bins to idle processes, one at a time over each one's pipe, and delivers each
    outcome as it comes; it is the only caller of the processes while it runs (one job's thread). ``close``
    ends them all. Every wait is bounded: a bin that does not stop within ``STUCK_SECONDS`` of a cancel is
    killed with its process, and ``close`` kills what does not end at once.
    """

    def __init__(self, workers: int) -> None:
        self._ctx = _Context()
        self._ctx.set_forkserver_preload(PRELOAD)
        self.workers = workers
        # A byte in shared memory, not an Event: a bin asks it between row groups, thousands of times, and an
        # Event's lock is a semaphore round trip each time (it doubled a tiny bin's time).
        self.stop: Any = self._ctx.RawValue("b", 0)
        self._live: list[_Worker] = []
        self._ended: list[Any] = []  #: processes that ended or were killed, joined (``close`` checks them again)
        self.cancelled = False
        self.closed = False
        self.released = False  #: ``release`` was called: the pool takes no more bins
        self._running = threading.Lock()  #: held by ``run``: ``close`` waits for it (bounded) before it ends them

    # ------------------------------------------------------------------ processes
    def _start(self, *, fork: bool = False) -> _Worker:
        """A new worker process: forked from the fork server, or from this process when ``fork`` (``prefork``)."""
        from ..tasks.worker import serve_bins

        ctx: Any = multiprocessing.get_context("fork") if fork else self._ctx
        parent, child = ctx.Pipe()
        process = ctx.Process(target=serve_bins, args=(child, self.stop), name="OptimizeBin", daemon=True)
        try:
            process.start()
        finally:
            child.close()
        worker = _Worker(process, parent)
        self._live.append(worker)
        return worker

    def _fit(self, workers: int) -> None:
        """At most ``workers`` processes from now on: idle ones beyond that are ended (a preforked pool
        taken by a run with fewer bins or threads than it has processes)."""
        self.workers = workers
        for worker in [w for w in self._live if w.task is None][: max(0, len(self._live) - workers)]:
            self._tell_to_end(worker)
            self._end(worker, kill=False)

    def _end(self, worker: _Worker, *, kill: bool) -> None:
        """Join a worker's process (killed first when ``kill``), close its pipe, and forget it."""
        if kill and worker.process.is_alive():
            worker.process.kill()
        worker.process.join(_JOIN_SECONDS)
        worker.conn.close()
        if worker in self._live:
            self._live.remove(worker)
            self._ended.append(worker.process)

    def processes(self) -> list[Any]:
        """Every process this pool started (the tests check none outlives ``close``)."""
        return [w.process for w in self._live] + self._ended

    def cancel(self) -> None:
        """Bins not started are dropped; those running stop at their next row group. The pool is not reused."""
        self.cancelled = True
        self.stop.value = 1

    # ------------------------------------------------------------------ running a batch
    def run(self, tasks: Sequence[Task], deliver: Callable[[Outcome], None]) -> BaseException | None:
        """Run the bins, ``deliver`` each outcome as it comes; the error that ends the batch (a bug in a
        bin, as in a driver thread) or None. Returns within ``STUCK_SECONDS`` (plus a kill) of a cancel,
        with no bin of the batch running: a process that dies fails its bin alone (``Failed``, internal)."""
        with self._running:
            if self.closed or self.released:
                raise RuntimeError("the bin processes were closed or released")
            return self._run(list(reversed(tasks)), deliver)

    def _run(self, todo: list[Task], deliver: Callable[[Outcome], None]) -> BaseException | None:
        error: BaseException | None = None
        stopped_at: float | None = None
        retried: set[int] = set()
        while True:
            if stopped_at is None and (self.cancelled or error is not None):
                self.cancelled = True
                self.stop.value = 1
                stopped_at = time.monotonic()
            if stopped_at is None:
                error = self._dispatch(todo, retried, deliver)
            busy = [w for w in self._live if w.task is not None]
            if not busy:
                return error
            if stopped_at is not None and time.monotonic() - stopped_at >= STUCK_SECONDS:
                log.warning(
                    "%d bin(s) did not stop within %.0fs of being cancelled: their processes are killed",
                    len(busy),
                    STUCK_SECONDS,
                )
                for worker in busy:
                    self._end(worker, kill=True)  # no outcome: the bin is left; its partial file is deleted
                return error
            ready = set(connection.wait([w.conn for w in busy] + [w.process.sentinel for w in busy], _POLL_SECONDS))
            for worker in busy:
                if worker.conn in ready or worker.process.sentinel in ready:
                    error = self._receive(worker, deliver) or error

    def _dispatch(
        self, todo: list[Task], retried: set[int], deliver: Callable[[Outcome], None]
    ) -> BaseException | None:
        """Give each idle process a bin (starting processes up to ``workers``); an error if one cannot start."""
        while todo:
            worker = next((w for w in self._live if w.task is None), None)
            try:
                if worker is None and len(self._live) < self.workers:
                    worker = self._start()
            except Exception as exc:  # no process to run it (the fork server could not start or fork)
                return exc
            if worker is None:
                return None
            task = todo.pop()
            try:
                worker.conn.send(task)
                worker.task = task
            except OSError:  # it died while idle: its bin goes to another process, once
                self._end(worker, kill=True)
                if task.bin_id in retried:
                    deliver(Failed(task.bin_id, "internal", "WorkerProcessDied", "its worker processes ended"))
                else:
                    retried.add(task.bin_id)
                    todo.append(task)
            except Exception as exc:  # it cannot be pickled: a bug
                return exc
        return None

    def _receive(self, worker: _Worker, deliver: Callable[[Outcome], None]) -> BaseException | None:
        task = worker.task
        assert task is not None
        try:
            if not worker.conn.poll(0):  # its process ended without a word (``wait`` saw its sentinel)
                raise EOFError
            message = worker.conn.recv()
        except (EOFError, OSError):  # the process died with its bin: that bin fails, the others go on
            self._end(worker, kill=True)
            code = worker.process.exitcode
            how = f"killed by signal {-code}" if code is not None and code < 0 else f"exit code {code}"
            deliver(Failed(task.bin_id, "internal", "WorkerProcessDied", f"its worker process ended ({how})"))
            return None
        except Exception as exc:  # an outcome that cannot be unpickled: a bug
            worker.task = None
            return exc
        worker.task = None
        if isinstance(message, str):  # a bug in the task code (run_bin types every bin failure)
            return RuntimeError(f"a bin's worker process raised: {message}")
        deliver(message)
        return None

    # ------------------------------------------------------------------ the end
    def release(self) -> None:
        """The run has no bins left for this pool: its idle processes are told to end now, so they exit while
        the driver commits (joining two took 12 ms after the commit). ``close`` still joins every one; the
        pool takes no more bins."""
        if not self._running.acquire(timeout=STUCK_SECONDS + 2 * _JOIN_SECONDS):  # a run ends first (bounded)
            return
        try:
            self.released = True
            for worker in self._live:
                if worker.task is None:
                    self._tell_to_end(worker)
        finally:
            self._running.release()

    @staticmethod
    def _tell_to_end(worker: _Worker) -> None:
        """Ask an idle process to end, once (``close`` joins it)."""
        if worker.told_to_end:
            return
        worker.told_to_end = True
        try:
            worker.conn.send(None)
        except OSError:  # it ended already
            pass

    def close(self) -> None:
        """Join every process: idle ones end at once when asked, any other is killed. Never returns with a
        process of the pool running (but one in an uninterruptible kernel wait, logged)."""
        if self.closed:
            return
        self.closed = True
        self.cancel()
        if self._running.acquire(timeout=STUCK_SECONDS + 2 * _JOIN_SECONDS):  # a run in another thread ends first
            self._running.release()
        for worker in list(self._live):
            if worker.task is None:
                self._tell_to_end(worker)
        until = time.monotonic() + _JOIN_SECONDS
        for worker in list(self._live):
            worker.process.join(max(0.0, until - time.monotonic()))
            self._end(worker, kill=True)
        alive = [p for p in self._ended if p.is_alive()]
        if alive:
            log.warning("%d bin process(es) did not end after being killed (an uninterruptible read?)", len(alive))


#: The console script's pool, forked as it starts (``prefork``) and not yet taken by its run.
_PREFORKED: list[BinProcesses] = []


def prefork(workers: int) -> bool:
    """Fork ``workers`` bin processes from this process now, for the run about to start (``take_preforked``);
    False (nothing done) where ``pays`` would never choose processes, or where a fork would copy a thread.

    For the console script only, as a command starts: no thread of Python's runs yet, nor any native one but
    jemalloc's background thread (pyarrow's; it takes its locks around a fork), no JVM, no open table. What
    a worker needs is imported here first (``PRELOAD``, but the fork server's own set-up), so each child
    starts with it. The caller ends the pool if its run did not take it (``close_preforked``)."""
    if _PREFORKED or workers < 2 or (os.cpu_count() or 1) < 2 or not supported():
        return False
    if threading.active_count() > 1:
        return False
    for name in PRELOAD[1:]:
        importlib.import_module(name)
    for stream in (sys.stdout, sys.stderr):  # a child's exit flushes what it inherited: nothing, then
        stream.flush()
    pool = BinProcesses(workers)
    try:
        for _ in range(workers):
            pool._start(fork=True)
    except Exception:  # no process (out of memory, a process limit): the fork server's, later
        pool.close()
        log.debug("forking the bin processes failed", exc_info=True)
        return False
    _PREFORKED.append(pool)
    return True


def preforked() -> bool:
    """Whether this process forked bin processes that no run has taken yet."""
    return bool(_PREFORKED)


def take_preforked(workers: int) -> BinProcesses | None:
    """The preforked pool, with at most ``workers`` processes, for a run to use and close; None if there is none."""
    if not _PREFORKED:
        return None
    pool = _PREFORKED.pop()
    pool._fit(workers)
    return pool


def close_preforked() -> None:
    """End the preforked pool if no run took it (joining every process)."""
    while _PREFORKED:
        _PREFORKED.pop().close()
