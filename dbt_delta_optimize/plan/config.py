"""The settings of one OPTIMIZE run, resolved from the one declaration of options (``options``).

Resolution order for every setting: explicit per-call override > Spark session conf > default.
Parsing is pure (a conf getter is passed in) so it is testable without Spark.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..options import (
    MAX_SIZE,
    OPTIMIZE_OPTIONS,
    PREFIX,
    ConfGetter,
    GiB,
    MiB,
    OptimizeOptions,
    Order,
    format_size,
    parse_bool,
    parse_duration,
    parse_size,
    resolve_values,
)

__all__ = [
    "MAX_SIZE",
    "PREFIX",
    "ConfGetter",
    "GiB",
    "MiB",
    "OptimizeConfig",
    "OptimizeOptions",
    "Order",
    "format_size",
    "parse_bool",
    "parse_duration",
    "parse_size",
]

_DEFAULT = {o.name: o.default for o in OPTIMIZE_OPTIONS}


@dataclass(frozen=True)
class OptimizeConfig:
    """Settings of one OPTIMIZE run: one field per option of ``OPTIMIZE_OPTIONS`` (see there for the docs).

    ``commit_every`` resolves to two fields: a number of bins or a period in seconds.
    """

    min_file_size: int = _DEFAULT["min_file_size"]
    max_file_size: int = _DEFAULT["max_file_size"]
    max_threads: int = _DEFAULT["max_threads"]
    batch_size: int | None = _DEFAULT["batch_size"]
    max_deleted_rows_ratio: float = _DEFAULT["max_deleted_rows_ratio"]
    repartition_enabled: bool = _DEFAULT["repartition_enabled"]
    max_commit_attempts: int = _DEFAULT["max_commit_attempts"]
    rewrite_engine: str = _DEFAULT["rewrite_engine"]
    validate_commits: bool = _DEFAULT["validate_commits"]
    max_duration: float | None = _DEFAULT["max_duration"]
    max_failed_bins: int = _DEFAULT["max_failed_bins"]
    order: str = _DEFAULT["order"]
    commit_every_bins: int | None = None
    commit_every_seconds: float | None = None
    allow_external_paths: bool = _DEFAULT["allow_external_paths"]
    row_group_copy_min_bytes: int = _DEFAULT["row_group_copy_min_bytes"]
    task_runner: str = _DEFAULT["task_runner"]

    @classmethod
    def resolve(cls, get_conf: ConfGetter | None = None, overrides: Mapping[str, Any] | None = None) -> OptimizeConfig:
        """Overrides > session conf > defaults, every value validated."""
        return cls(**resolve_values(OPTIMIZE_OPTIONS, get_conf, overrides, what="optimize"))
