"""The first code a bin task runs: standard library only, shipped inside the task itself.

Spark pickles these functions by value (``python_tasks.task_function``), so a Python worker that
cannot import this package (a cluster the package never reached) still runs them, and answers each
message with a typed ``Fallback`` outcome instead of failing the job with an import error. Nothing
here may use a module-level name of this package: keep every import inside the functions.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

__all__ = ["run_arrow_batches", "run_messages"]


def _runner() -> tuple[Callable[[str], str] | None, str]:
    """The task body, or None and why it cannot be imported here."""
    try:
        from dbt_delta_optimize.tasks.worker import run_text

        return run_text, ""
    except Exception as exc:  # ImportError, or a broken install: the driver falls back to Spark
        return None, f"{type(exc).__name__}: {exc}"


def _cannot_import(text: str, why: str) -> str:
    import json
    import sys

    bin_id = json.loads(text).get("bin_id", -1)
    reason = f"the Python workers ({sys.executable}) cannot import the Arrow rewriter ({why})"
    return json.dumps({"type": "Fallback", "bin_id": bin_id, "reason": reason})


def run_messages(sink: Any, texts: Iterator[str]) -> Iterator[str]:
    """RDD partition body (classic sessions): answer each message; each answer also goes to ``sink``.

    ``sink`` is an accumulator: the driver sees each answer as soon as its task ends, while the
    job's other tasks still run.
    """
    run, why = _runner()
    for text in texts:
        out = run(text) if run is not None else _cannot_import(text, why)
        sink.add([out])
        yield out


def run_arrow_batches(texts: Sequence[str], batches: Iterator[Any]) -> Iterator[Any]:
    """``mapInArrow`` body (Spark Connect): each input row's id picks a message; one answer row each."""
    import pyarrow as pa

    run, why = _runner()
    for batch in batches:
        for i in batch.column(0).to_pylist():
            text = texts[i]
            out = run(text) if run is not None else _cannot_import(text, why)
            yield pa.RecordBatch.from_pydict({"outcome": [out]})
