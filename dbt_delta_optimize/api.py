"""The public operations (``dbt_delta_optimize.api``): the ``ops`` layer's entry points under their public names.

``plan_optimize`` starts no JVM for a table given by path (predicates are evaluated in Python);
``optimize`` runs the plan on Spark and commits it with our writer; ``purge`` rewrites the files with
deleted rows; ``auto_compact`` decides from the log whether a write left enough small files, and only
then starts Spark. Every setting is declared once, in ``dbt_delta_optimize.options``.
"""

from __future__ import annotations

from .ops.auto_compact import auto_compact
from .ops.optimize import optimize, plan_optimize
from .ops.pipeline import active_conf
from .ops.purge import plan_purge, purge
from .ops.vacuum import VacuumMetrics, vacuum
from .options import OptimizeOptions

__all__ = [
    "OptimizeOptions",
    "VacuumMetrics",
    "active_conf",
    "auto_compact",
    "optimize",
    "plan_optimize",
    "plan_purge",
    "purge",
    "vacuum",
]
