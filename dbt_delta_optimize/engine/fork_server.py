"""The fork server the bin worker processes are forked from: what it preloads, and its start.

Apart from ``bin_processes`` (its pool, and what a worker runs) so that the CLI's OPTIMIZE starts the server
(``cli.optimize``) without importing the pool and the task messages first.
"""

from __future__ import annotations

import multiprocessing
import sys
from multiprocessing import forkserver

__all__ = ["PRELOAD", "fork_server_running", "start_fork_server", "supported"]

#: What the fork server imports once, so that a forked worker starts with them loaded.
PRELOAD = [
    "dbt_delta_optimize.engine.fork_server_init",  # first: pandas refused (pyarrow's conversions would import it)
    "pyarrow",
    "pyarrow.parquet",
    "pyarrow._compute",
    "dbt_delta_optimize.delta.storage",
    "dbt_delta_optimize.tasks.worker",
    "dbt_delta_optimize.tasks.parquet_sink",
    "dbt_delta_optimize.inspect.stats",
    "dbt_delta_optimize.inspect.stats_footer",
    "dbt_delta_optimize.delta.deletion_vectors",
    "zoneinfo",
    "encodings.utf_16_le",
]


def supported() -> bool:
    """CPython 3.10 to 3.13 (``bin_processes._Popen``'s copy of ``_launch``) on a system with a fork server."""
    return (3, 10) <= sys.version_info[:2] <= (3, 13) and "forkserver" in multiprocessing.get_all_start_methods()


def fork_server_running() -> bool:
    """Whether this process has started its fork server (a run's workers then fork in 3-8 ms each)."""
    return getattr(forkserver._forkserver, "_forkserver_pid", None) is not None


def start_fork_server() -> None:
    """Start the fork server without waiting for its imports, so that a later run of this process finds it
    up: a run whose bins would have paid for processes with a running server calls this as it ends."""
    if supported():
        forkserver.set_forkserver_preload(PRELOAD)
        forkserver.ensure_running()
