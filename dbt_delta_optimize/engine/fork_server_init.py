"""Imported first by the bin processes' fork server (``fork_server.PRELOAD``), so that every worker forked
from it has the same: pandas refused (``no_pandas``), Arrow's allocator without huge pages, and pyarrow loaded
without numpy.

Both are imports that server's start would otherwise pay, and a fresh run's first bin waits for that start
(docs/performance.md, "Issue 45, a fresh process without pandas" and "Issue 45, the log read once"): pandas
0.2-0.3 s, which a bin never uses; numpy 60-80 ms, which pyarrow imports as it loads. A bin needs numpy only
to decode a deletion vector, and hands pyarrow no numpy object then (``DeletedRows.keep`` passes a bitmap
buffer), so numpy stays importable; only pyarrow's own numpy integration is left out of the workers.
"""

from __future__ import annotations

from ..no_pandas import PYARROW_MODULES, block, load_pyarrow_without_numpy, no_huge_pages

__all__ = ["PYARROW_MODULES", "load_pyarrow_without_numpy"]

block()
no_huge_pages()
load_pyarrow_without_numpy()
