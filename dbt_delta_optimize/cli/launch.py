"""The console script's first module: an OPTIMIZE of a local table starts its bin workers' fork server before
anything else is imported, then the command line runs (``cli.main``).

The server's imports (pyarrow, the task code: about 0.2 s) then run on another core while this process imports
click and the operations layer and reads the log, instead of after them: the command itself could start it
only about 0.1 s into the process (docs/performance.md, "Issue 45, the fork server first").
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from typing import NoReturn

from ..no_pandas import one_blas_thread

__all__ = ["main", "workers_first"]

#: ``optimize`` flags after which no bin runs in a worker process of ours.
_NO_WORKERS = frozenset({"--dry-run", "-h", "--help", "--task-runner=driver", "--task-runner=spark"})


def workers_first(args: Sequence[str]) -> bool:
    """Whether a command line is ``optimize TABLE ...`` of a Delta table on the local disk whose bins may run in
    worker processes (no dry run, no other task runner). Only that form, the table first, is recognised before
    the command line is parsed; ``cli.optimize`` starts the server for the others once it is parsed."""
    if len(args) < 2 or args[0] != "optimize" or args[1].startswith("-"):
        return False
    flags = list(args[2:])
    if _NO_WORKERS.intersection(flags):
        return False
    if "--task-runner" in flags and flags[flags.index("--task-runner") + 1 :][:1] != ["auto"]:
        return False
    table = args[1]
    return "://" not in table and not table.startswith("file:") and os.path.isdir(os.path.join(table, "_delta_log"))


def main(argv: Sequence[str] | None = None) -> NoReturn:
    """The ``dbt-delta-optimize`` console script."""
    args = list(sys.argv[1:] if argv is None else argv)
    if workers_first(args):
        one_blas_thread()  # before the server inherits the environment
        from ..engine.fork_server import start_fork_server

        start_fork_server()
    from .main import main as run

    run(args)
