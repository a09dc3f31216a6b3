"""The public operations (``dbt_delta_optimize.api``): the ``ops`` layer's entry points under their public names.

``plan_optimize`` starts no JVM for a table given by path (predicates are evaluated in Python);
``optimize`` runs the plan on Spark and commits it with our writer; ``purge`` rewrites the files with
deleted rows; ``auto_compact`` decides from the log whether a write left enough small files, and only
then starts Spark; ``analyze`` computes the per-file statistics files lack, as delta-spark writes them;
``vacuum`` deletes the files no version inside the retention needs, as delta-spark's VACUUM does;
``maintain`` ranks many tables by what maintenance would buy and runs the most valuable work first
within a budget. Every setting is declared once, in ``dbt_delta_optimize.options``.
"""

from __future__ import annotations

from .ops.analyze import AnalyzeMetrics, analyze
from .ops.auto_compact import auto_compact
from .ops.maintain import MaintenanceReport, maintain
from .ops.optimize import optimize, plan_optimize
from .ops.pipeline import active_conf
from .ops.purge import plan_purge, purge
from .ops.vacuum import VacuumMetrics, vacuum
from .options import OptimizeOptions

__all__ = [
    "AnalyzeMetrics",
    "MaintenanceReport",
    "OptimizeOptions",
    "VacuumMetrics",
    "active_conf",
    "analyze",
    "auto_compact",
    "maintain",
    "optimize",
    "plan_optimize",
    "plan_purge",
    "purge",
    "vacuum",
]
