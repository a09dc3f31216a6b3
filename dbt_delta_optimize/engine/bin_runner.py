"""Run bins in parallel within a time budget and a failure allowance, handing each result over as it finishes.

At most ``max_threads`` bins are in flight. Once the deadline passes no new bin starts; bins in
flight get a short grace period, then their Spark jobs are cancelled (and their files deleted by
the rewriter), so a run ends within its budget plus a small bound. A bin that fails is recorded
with its cause while the others go on, until more than ``max_failed`` have failed: then the rest
is cancelled and the first failure is raised (``max_failed=0`` is delta-spark's all-or-nothing).
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Any

from ..plan.planner import Bin
from .bin_rewriter import BinResult
from .spark_engine import SparkEngine

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


@dataclass
class BinRunner:
    """Runs the bins of a run, batch after batch, sharing one deadline and one failure count."""

    engine: SparkEngine
    rewrite: Callable[[Bin], BinResult]
    group: str
    max_threads: int
    deadline: float | None = None  #: time.monotonic() after which no bin starts
    max_failed: int = 0
    on_done: Callable[[Bin], None] | None = None
    failures: list[BinFailure] = field(default_factory=list)
    left: list[Bin] = field(default_factory=list)  #: not run (budget) or cancelled at the deadline

    def out_of_time(self) -> bool:
        return self.deadline is not None and time.monotonic() >= self.deadline

    def _grace_end(self) -> float | None:
        if self.deadline is None:
            return None
        return self.deadline + MAX_GRACE_SECONDS

    def run(self, bins: Sequence[Bin]) -> Iterator[BinResult]:
        """Yield each bin's result as it finishes (the caller may commit between results)."""
        queue = deque(bins)
        inflight: dict[Future[BinResult], Bin] = {}
        pool = ThreadPoolExecutor(
            max_workers=max(1, min(self.max_threads, len(bins))), thread_name_prefix="OptimizeJob"
        )
        try:
            while queue or inflight:
                while queue and len(inflight) < self.max_threads and not self.out_of_time():
                    b = queue.popleft()
                    inflight[pool.submit(self.rewrite, b)] = b
                if not inflight:
                    break
                done = self._wait(inflight)
                if not done:  # grace period over: cancel what is still running
                    self._cancel(inflight, as_left=True)
                    break
                for fut in done:
                    result = self._finished(fut, inflight.pop(fut), inflight)
                    if result is not None:
                        yield result
            self.left.extend(queue)
        finally:
            if inflight:  # the caller stopped early (an error): stop the bins still running
                self._cancel(inflight, as_left=False)
            pool.shutdown(wait=True)

    def _wait(self, inflight: dict[Future[BinResult], Bin]) -> set[Future[BinResult]]:
        grace_end = self._grace_end()
        timeout = None if grace_end is None else max(0.0, grace_end - time.monotonic())
        done, _ = wait(inflight, timeout=timeout, return_when=FIRST_COMPLETED)
        return done

    def _finished(self, fut: Future[BinResult], b: Bin, inflight: dict[Future[BinResult], Bin]) -> BinResult | None:
        exc = fut.exception()
        if exc is None:
            if self.on_done is not None:
                self.on_done(b)
            return fut.result()
        if not isinstance(exc, Exception) or len(self.failures) >= self.max_failed:
            self._cancel(inflight, as_left=False)
            raise exc
        log.warning("bin %s failed, the others go on: %s", b.describe(), exc)
        self.failures.append(BinFailure(b, f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"))
        return None

    def _cancel(self, inflight: dict[Future[BinResult], Bin], *, as_left: bool) -> None:
        for fut in inflight:
            fut.cancel()
        self.engine.cancel(self.group)
        wait(inflight)
        if as_left:
            self.left.extend(inflight.values())
            log.warning("time budget spent: cancelled %d bin(s) in flight", len(inflight))
        inflight.clear()
