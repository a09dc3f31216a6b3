"""Why a Spark job of bin tasks failed on the cluster's Python workers, in one line a user can act on.

On Spark Connect the bins run in a ``mapInArrow``, and PySpark's own worker imports pyarrow before any
of our code runs: a server started without ``PYSPARK_PYTHON`` runs ``python3``, which often lacks it,
and the client sees only "An exception was thrown from the Python worker". When such a job fails, one
plain (pickled, not Arrow) UDF asks a worker which Python it runs and which required module it cannot
import (``bootstrap.probe_worker``); if one is missing, the job's bins fall back to the Spark rewrite
with that one line as the reason, and later batches of the same session go straight to Spark.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from ..tasks.bootstrap import missing_module_reason, probe_worker

__all__ = ["missing_module_problem"]

log = logging.getLogger(__name__)


def missing_module_problem(spark: Any) -> str | None:
    """The one-line reason when the workers' Python lacks a module bin tasks need; None when it has them
    all or cannot be asked (the job's own error is then the one to report)."""
    try:
        from pyspark.sql.functions import udf

        probe = udf(probe_worker, "string", useArrow=False)
        rows = spark.range(0, 1, 1, 1).select(probe("id").alias("worker")).collect()
        found = json.loads(rows[0]["worker"])
    except Exception as exc:  # the workers cannot run Python at all: the job's error says more
        log.debug("could not probe the Python workers: %s", exc)
        return None
    if not found["missing"]:
        return None
    module, error = found["missing"][0]
    return missing_module_reason(found["python"], found["version"], module, error)
