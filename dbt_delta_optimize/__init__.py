"""dbt-delta-optimize: Delta Lake OPTIMIZE, Z-ORDER and auto compaction for dbt on Spark.

Importing this package is cheap on purpose (dbt imports every ``dbt_*`` module on each
invocation): the public names below are loaded lazily, on first attribute access.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._version import __version__

_LAZY = {
    "AddFile": "actions",
    "AutoCompactResult": "autocompact",
    "auto_compact": "autocompact",
    "CommitResult": "commit",
    "DeletionVector": "actions",
    "Metadata": "actions",
    "OptimizeConfig": "config",
    "Protocol": "actions",
    "RemoveFile": "actions",
    "Snapshot": "snapshot",
    "Transaction": "commit",
    "ensure_write_supported": "protocol",
    "get_spark": "spark",
    "health_report": "health",
    "optimize": "executor",
    "OptimizeExecutor": "executor",
    "OptimizeMetrics": "metrics",
    "OptimizePlan": "planner",
    "validate_actions": "validate",
    "validate_commit": "validate",
    "load_snapshot": "snapshot",
    "read_commits": "snapshot",
}

__all__ = sorted([*_LAZY, "__version__", "errors"])

if TYPE_CHECKING:  # pragma: no cover
    from .actions import AddFile, DeletionVector, Metadata, Protocol, RemoveFile
    from .autocompact import AutoCompactResult, auto_compact
    from .commit import CommitResult, Transaction
    from .config import OptimizeConfig
    from .protocol import ensure_write_supported
    from .snapshot import Snapshot, load_snapshot, read_commits
    from .executor import OptimizeExecutor, optimize
    from .health import health_report
    from .metrics import OptimizeMetrics
    from .planner import OptimizePlan
    from .spark import get_spark
    from .validate import validate_actions, validate_commit


def __getattr__(name: str) -> Any:
    if name == "plugins":  # read by dbt's PluginManager, which has already imported dbt
        from .dbt_bridge import DeltaOptimizePlugin

        globals()["plugins"] = [DeltaOptimizePlugin]
        return globals()["plugins"]
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'dbt_delta_optimize' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value
