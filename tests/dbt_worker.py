"""One process that runs a project's dbt commands in turn through ``dbtRunner`` (tests/dbt_project.py starts it).

Why: a ``dbt`` subprocess per command paid for Python's and dbt's imports and, on dbt-spark ``method: session``,
a new Spark JVM with Delta every time: most of a dbt test's wall time. Here the commands share one interpreter,
and dbt-spark's ``SparkSession.builder.getOrCreate()`` returns the session the first command started. Each
command's output (dbt's and the JVM's, file descriptors 1 and 2) goes to the file the request names, as a
subprocess's would have gone to its pipes.

Protocol: one JSON request a line on the file descriptor given as argv[1], ``{"args": [...], "out": path}``;
one JSON reply a line on argv[2], ``{"rc": n}`` with dbt's exit code (0 success, 1 failure, 2 error).
"""

from __future__ import annotations

import json
import os
import sys
import traceback


def _invoke(args: list[str]) -> int:
    try:
        from dbt.cli.main import dbtRunner  # imported once, on the first request: its errors land in its output

        result = dbtRunner().invoke(args)
    except SystemExit as exit:  # a command that exits as the dbt executable would: its code, the worker lives on
        return exit.code if isinstance(exit.code, int) else 2
    except Exception:  # dbt raised past dbtRunner: an error, as the dbt command's exit code 2 says
        traceback.print_exc()
        return 2
    if result.exception is not None:
        traceback.print_exception(result.exception)
        return 2
    return 0 if result.success else 1


def main() -> None:
    requests = os.fdopen(int(sys.argv[1]), "r")
    replies = os.fdopen(int(sys.argv[2]), "w", buffering=1)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)  # nothing in dbt or Spark reads a terminal here

    for line in requests:
        request = json.loads(line)
        with open(request["out"], "w") as out:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(out.fileno(), 1)
            os.dup2(out.fileno(), 2)
            try:
                rc = _invoke(request["args"])
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
        replies.write(json.dumps({"rc": rc}) + "\n")


if __name__ == "__main__":
    sys.path.pop(0)  # the tests/ folder the script was started from: not a place to import packages from
    main()
