"""The first code a bin task runs: standard library only, shipped inside the task itself.

Spark pickles these functions by value (``python_tasks.task_function``), so a Python worker that
cannot import this package (a cluster the package never reached) still runs them, and answers each
message with a typed ``Fallback`` outcome instead of failing the job with an import error. Nothing
here may use a module-level name of this package: keep every import inside the functions.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

__all__ = ["REQUIRED_MODULES", "missing_module_reason", "probe_worker", "run_arrow_batches", "run_messages"]

#: What a bin task imports besides this package (shipped) and the standard library.
REQUIRED_MODULES = ("pyarrow",)


def missing_module_reason(python: str, version: str, module: str, error: str) -> str:
    """One line: which module the workers' Python lacks, which Python that is, and the setting that picks it."""
    return (
        f"the Spark Python workers ({python}, Python {version}) cannot import {module} ({error}); set PYSPARK_PYTHON "
        f"(or spark.pyspark.python) on the Spark Connect server or cluster to a Python that has {module}"
    )


def _runner() -> tuple[Callable[[str], str] | None, str]:
    """The task body, or None and why it cannot be imported here."""
    import importlib
    import sys

    try:
        for name in REQUIRED_MODULES:  # the task body imports them lazily: ask before the first bin
            importlib.import_module(name)
        from dbt_delta_optimize.tasks.worker import run_text

        return run_text, ""
    except ModuleNotFoundError as exc:  # a dependency this Python lacks (not the package: it is shipped)
        if exc.name and not exc.name.startswith("dbt_delta_optimize"):
            version = sys.version.split()[0]
            why = f"{type(exc).__name__}: {exc}"
            return None, missing_module_reason(sys.executable, version, exc.name.split(".")[0], why)
        return None, f"the Python workers ({sys.executable}) cannot import the Arrow rewriter ({exc})"
    except Exception as exc:  # a broken install: the driver falls back to Spark
        why = f"{type(exc).__name__}: {exc}"
        return None, f"the Python workers ({sys.executable}) cannot import the Arrow rewriter ({why})"


def _cannot_import(text: str, reason: str) -> str:
    import json

    bin_id = json.loads(text).get("bin_id", -1)
    return json.dumps({"type": "Fallback", "bin_id": bin_id, "reason": reason})


def probe_worker(_: Any) -> str:
    """A plain (not Arrow) UDF's body: the worker's Python and the required modules it cannot import, as JSON.

    It runs where ``mapInArrow`` cannot even start (PySpark's worker imports pyarrow before our code runs).
    """
    import importlib
    import json
    import sys

    missing = []
    for name in REQUIRED_MODULES:
        try:
            importlib.import_module(name)
        except Exception as exc:
            missing.append([name, f"{type(exc).__name__}: {exc}"])
    return json.dumps({"python": sys.executable, "version": sys.version.split()[0], "missing": missing})


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
