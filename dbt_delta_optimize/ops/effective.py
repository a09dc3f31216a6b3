"""The settings in force for one run, and where each came from (the caller, the session's conf, the default).

Resolved exactly as the operations resolve them (``options.resolve_effective``: per-call > conf > default),
from the same conf getter and the same per-call values, so a results file or ``--json`` shows what the
run used. ``given`` names the per-call source: ``meta`` for a dbt model's key, ``args`` for run-operation's
``settings``, ``flag`` for the CLI, ``call`` for the API.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from ..options import (
    AUTO_COMPACT_OPTIONS,
    OPTIMIZE_OPTIONS,
    PURGE_FIXED,
    ConfGetter,
    Effective,
    OptimizeOptions,
    resolve_effective,
)

__all__ = ["FIXED", "Kind", "effective_settings"]

#: The source of a value the operation fixes whatever is asked (purge's sizes).
FIXED = "fixed"

#: Which operation's settings: OPTIMIZE (and liquid), auto compaction, or purge.
Kind = Literal["optimize", "auto_compact", "purge"]

_AUTO_NAMES = frozenset(o.name for o in AUTO_COMPACT_OPTIONS)


def effective_settings(
    kind: Kind,
    get_conf: ConfGetter | None,
    options: OptimizeOptions | None = None,
    auto_overrides: Mapping[str, Any] | None = None,
    *,
    given: str | Mapping[str, str] = "call",
) -> tuple[Effective, ...]:
    """Every setting ``kind`` runs with: auto compaction's own, then OPTIMIZE's (sizes are auto compaction's).

    ``given``: the source of every per-call value, or the source of each by name (run-operation's mix).
    """
    resolved = _resolved(kind, get_conf, options, auto_overrides)
    if isinstance(given, str):
        return tuple(Effective(e.name, e.value, given) if e.source == _CALL else e for e in resolved)
    return tuple(Effective(e.name, e.value, given.get(e.name, _CALL)) if e.source == _CALL else e for e in resolved)


_CALL = "call"


def _resolved(
    kind: Kind,
    get_conf: ConfGetter | None,
    options: OptimizeOptions | None,
    auto_overrides: Mapping[str, Any] | None,
) -> tuple[Effective, ...]:
    overrides = (options or OptimizeOptions()).overrides()
    if kind == "auto_compact":
        auto = {k: v for k, v in (auto_overrides or {}).items() if v is not None}
        own = resolve_effective(AUTO_COMPACT_OPTIONS, get_conf, auto, what="auto-compaction")
        rest = tuple(o for o in OPTIMIZE_OPTIONS if o.name not in _AUTO_NAMES)
        sized = {k: v for k, v in overrides.items() if k not in _AUTO_NAMES}
        return own + resolve_effective(rest, get_conf, sized, what="optimize")
    resolved = resolve_effective(OPTIMIZE_OPTIONS, get_conf, overrides, what="optimize")
    if kind == "purge":
        return tuple(Effective(e.name, PURGE_FIXED[e.name], FIXED) if e.name in PURGE_FIXED else e for e in resolved)
    return resolved
