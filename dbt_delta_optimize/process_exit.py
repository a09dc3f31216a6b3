"""How a console script of ours ends: output flushed, then the exit code, without the interpreter's teardown.

Used by the CLI and the demo (``integration_tests/demo.py``); the API never ends its caller's process.
"""

from __future__ import annotations

import logging
import os
import sys
from typing import NoReturn

__all__ = ["exit_process", "status_of"]


def exit_process(code: int) -> NoReturn:
    """End the CLI's process with ``code``: output flushed, then ``os._exit``, skipping the interpreter's teardown.

    Everything this package starts (threads, Spark jobs, readers) is joined before a command returns. What
    can still run are native pools of libraries (Arrow's I/O threads, grpc's for Spark Connect); one that
    calls back into Python while the interpreter tears down aborts the process (SIGABRT, "terminate called
    without an active exception": apache/arrow#34314, delta-io/delta-rs#2184), turning a correct exit code
    into 134. Only the console entry point ends this way; the API, running in its caller's process, never does.
    """
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe (`... | head`) or a closed stream: nothing left to say
            pass
    os._exit(code)


def status_of(exc: SystemExit) -> int:
    """The exit status a SystemExit asks for, as the interpreter would compute it (a message is printed, 1)."""
    if exc.code is None:
        return 0
    if isinstance(exc.code, int):
        return exc.code
    print(exc.code, file=sys.stderr)
    return 1
