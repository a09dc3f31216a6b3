"""Python's cyclic garbage collector paused while the driver makes and drops many small objects at once.

Building a batch's task messages, each finished bin's actions and the batch's commit (its JSON lines,
the checks before and after) makes a few objects per input file, which reference counting frees: none
form cycles. In a warm Spark session the heap is large (pyspark, py4j, pyarrow, the caller's own), and
the full collections those allocations trigger walk all of it: on 5,000 files of 5.5 KB the commit's
payload took 30 ms with the collector paused and 40 to 115 ms without (docs/performance.md, "Issue 45,
the driver's share").

The pause covers those steps only, never a whole bin or Spark job (a bin in a thread beside one is paused
for as long as that step lasts), so garbage in cycles waits at most as long as one of them. Pauses nest and may overlap across threads (dbt runs models in threads): the
collector resumes when the last one ends, and only if it was running when the first began (a caller
that disabled it keeps it disabled).
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["collector_paused"]

_LOCK = threading.Lock()
_depth = 0
_resume = False


@contextmanager
def collector_paused() -> Iterator[None]:
    """Pause the cyclic collector for the ``with`` block; reference counting still frees everything else."""
    global _depth, _resume
    with _LOCK:
        if _depth == 0:
            _resume = gc.isenabled()
            gc.disable()
        _depth += 1
    try:
        yield
    finally:
        with _LOCK:
            _depth -= 1
            if _depth == 0 and _resume:
                gc.enable()
