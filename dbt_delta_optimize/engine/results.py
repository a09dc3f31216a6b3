"""OPTIMIZE results as Spark rows, shaped like delta-spark's command output."""

from __future__ import annotations

from typing import Any

from ..plan.metrics import SPARK_METRICS_FIELDS, OptimizeMetrics

__all__ = ["metrics_row"]


def metrics_row(metrics: OptimizeMetrics) -> Any:
    """A Spark Row like delta-spark's OPTIMIZE result: (path, metrics struct in its field order)."""
    from pyspark.sql import Row

    d = metrics.to_dict()
    d.setdefault("clusteringStats", None)  # liquid clustering only; never set by this package

    def conv(v: Any) -> Any:
        if isinstance(v, dict):
            return Row(**{k: conv(x) for k, x in v.items()})
        return v

    # delta-spark's struct field order (to_dict moves zOrderStats last; ours-only fields dropped)
    return Row(path=metrics.path, metrics=Row(**{k: conv(d[k]) for k in SPARK_METRICS_FIELDS}))
