"""dbt-delta-optimize: Delta Lake OPTIMIZE, Z-ORDER and auto compaction for dbt on Spark.

Importing this package is cheap on purpose (dbt imports every ``dbt_*`` module on each
invocation): the public names below are loaded lazily, on first attribute access.
"""

from __future__ import annotations

from ._version import __version__

#: ``typing`` is not imported at run time (a third of this module's import): mypy reads the block below.
TYPE_CHECKING = False

_LAZY = {
    "AddFile": "delta.actions",
    "AutoCompactResult": "plan.autocompact",
    "CommitResult": "delta.commit",
    "DeletionVector": "delta.actions",
    "HealthReport": "inspect.health",
    "MaintenanceReport": "ops.maintain",
    "Metadata": "delta.actions",
    "OptimizeConfig": "plan.config",
    "OptimizeExecutor": "engine.executor",
    "OptimizeMetrics": "plan.metrics",
    "OptimizeOptions": "options",
    "OptimizePlan": "plan.planner",
    "Protocol": "delta.actions",
    "RemoveFile": "delta.actions",
    "Snapshot": "delta.snapshot",
    "Transaction": "delta.commit",
    "auto_compact": "ops.auto_compact",
    "ensure_write_supported": "delta.protocol",
    "get_spark": "engine.session",
    "health_report": "inspect.health",
    "load_snapshot": "delta.snapshot",
    "maintain": "ops.maintain",
    "optimize": "ops.optimize",
    "options_table_markdown": "options",
    "plan_optimize": "ops.optimize",
    "plan_purge": "ops.purge",
    "purge": "ops.purge",
    "read_commits": "delta.snapshot",
    "validate_actions": "inspect.validate",
    "validate_commit": "inspect.validate",
    "AnalyzeMetrics": "ops.analyze",
    "analyze": "ops.analyze",
    "VacuumMetrics": "ops.vacuum",
    "vacuum": "ops.vacuum",
}

__all__ = [
    "AddFile",
    "AnalyzeMetrics",
    "AutoCompactResult",
    "CommitResult",
    "DeletionVector",
    "HealthReport",
    "MaintenanceReport",
    "Metadata",
    "OptimizeConfig",
    "OptimizeExecutor",
    "OptimizeMetrics",
    "OptimizeOptions",
    "OptimizePlan",
    "Protocol",
    "RemoveFile",
    "Snapshot",
    "Transaction",
    "VacuumMetrics",
    "__version__",
    "analyze",
    "auto_compact",
    "ensure_write_supported",
    "errors",
    "get_spark",
    "health_report",
    "load_snapshot",
    "maintain",
    "optimize",
    "options_table_markdown",
    "plan_optimize",
    "plan_purge",
    "purge",
    "read_commits",
    "vacuum",
    "validate_actions",
    "validate_commit",
]

if TYPE_CHECKING:  # pragma: no cover
    from typing import Any

    from . import errors
    from .delta.actions import AddFile, DeletionVector, Metadata, Protocol, RemoveFile
    from .delta.commit import CommitResult, Transaction
    from .delta.protocol import ensure_write_supported
    from .delta.snapshot import Snapshot, load_snapshot, read_commits
    from .engine.executor import OptimizeExecutor
    from .engine.session import get_spark
    from .inspect.health import HealthReport, health_report
    from .inspect.validate import validate_actions, validate_commit
    from .ops.analyze import AnalyzeMetrics, analyze
    from .ops.auto_compact import auto_compact
    from .ops.optimize import optimize, plan_optimize
    from .ops.purge import plan_purge, purge
    from .ops.vacuum import VacuumMetrics, vacuum
    from .options import OptimizeOptions, options_table_markdown
    from .plan.autocompact import AutoCompactResult
    from .plan.config import OptimizeConfig
    from .plan.metrics import OptimizeMetrics
    from .plan.planner import OptimizePlan


def __getattr__(name: str) -> Any:
    if name == "plugins":  # read by dbt's PluginManager, which has already imported dbt
        from .dbt.bridge import DeltaOptimizePlugin

        globals()["plugins"] = [DeltaOptimizePlugin]
        return globals()["plugins"]
    import importlib

    if name == "errors":  # a module of the package (importing it sets the attribute)
        return importlib.import_module(".errors", __name__)
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'dbt_delta_optimize' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value
