"""The post-hook's decision, made once for both executors: skip, liquid clustering, OPTIMIZE or auto compaction.

The model's settings decide what to do (``decide``); the table decides whether it can be done
(``table_skip``: a non-Delta model or a missing table is skipped, whatever the settings). Carrying it out
is one of two executors: our engine on a Spark session (``spark_hooks``) or SQL through dbt's connection
(``sql_hooks``). Each reports the settings the work ran with (``settings_record``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from ..ops.effective import Kind as SettingsKind
from ..ops.effective import effective_settings
from ..options import ConfGetter, effective_dict
from .settings import ModelSettings

__all__ = ["Decision", "Work", "decide", "model_settings", "run_summary", "table_skip"]

#: What a post-hook does.
Work = Literal["skip", "liquid", "optimize", "auto"]

#: The settings each kind of work runs with (``ops.effective``).
_SETTINGS_OF: Mapping[Work, SettingsKind] = {"liquid": "optimize", "optimize": "optimize", "auto": "auto_compact"}


@dataclass(frozen=True)
class Decision:
    """What the post-hook does for one model, and why when it does nothing."""

    work: Work
    reason: str = ""


def decide(s: ModelSettings) -> Decision:
    """From the model's settings alone: no table is read to decide this."""
    if s.skip or s.mode == "never":
        return Decision("skip", "meta.delta_optimize skip/never")
    if s.liquid_clustered_by:
        return Decision("liquid")
    if s.mode == "optimize":
        return Decision("optimize")
    return Decision("auto")


def table_skip(file_format: str | None, *, table_format: str | None = "delta") -> str | None:
    """Why the table cannot be optimized (a non-Delta model, a non-Delta table), else None.

    A missing table each executor names in its own words (the catalog's error, or SQL's lookup).
    """
    if file_format is not None and str(file_format).lower() != "delta":
        return f"file_format is {file_format}, not delta"
    if table_format is not None and table_format != "delta":
        return f"a {table_format} table, not delta"
    return None


def model_settings(decision: Decision, s: ModelSettings, get_conf: ConfGetter | None) -> dict[str, dict[str, Any]]:
    """The settings the decided work runs with, and where each came from (meta, conf, default)."""
    if decision.work == "skip":
        return {}
    auto = {"min_file_size": s.options.min_file_size, "max_file_size": s.options.max_file_size}
    auto["min_num_files"] = s.min_num_files
    kind = _SETTINGS_OF[decision.work]
    return effective_dict(effective_settings(kind, get_conf, s.options, auto, given="meta"))


def run_summary(record: dict[str, Any], auto: Mapping[str, Any]) -> None:
    """The results entry's one-glance view of an auto compaction: how many commits the model's run made
    (``batches``: one per microbatch batch), which versions were counted as the run's, and the partitions
    compacted (empty when none was)."""
    run = auto.get("runCommits") or {}
    record["batches"] = run.get("count")
    record["run_versions"] = run.get("versions")
    ran = bool(auto.get("metrics"))
    record["partitions_compacted"] = [c.get("partition") for c in auto.get("chosen") or []] if ran else []
