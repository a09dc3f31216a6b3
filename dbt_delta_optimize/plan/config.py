"""Configuration under delta-spark's keys and defaults, so users' settings carry over.

Resolution order for every setting: explicit per-call override > Spark session conf > default.
Parsing is pure (a conf getter is passed in) so it is testable without Spark.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from typing import Any, Literal

from ..errors import InvalidConfigError

__all__ = [
    "PREFIX",
    "ConfGetter",
    "OptimizeConfig",
    "OptimizeOptions",
    "format_size",
    "parse_bool",
    "parse_size",
]

PREFIX = "spark.databricks.delta."
GiB = 1024**3
MiB = 1024**2

ConfGetter = Callable[[str], "str | None"]

_UNITS = {
    "": 1,
    "b": 1,
    "k": 1024,
    "kb": 1024,
    "m": MiB,
    "mb": MiB,
    "g": GiB,
    "gb": GiB,
    "t": 1024**4,
    "tb": 1024**4,
    "p": 1024**5,
    "pb": 1024**5,
}
_SIZE_RE = re.compile(r"^\s*(\d+)\s*([a-zA-Z]*)\s*$")


#: The largest size Delta can record (sizes are Java longs in the log and in Spark confs).
MAX_SIZE = 2**63 - 1


def _size_error(key: str, value: Any, why: str = "") -> InvalidConfigError:
    return InvalidConfigError(
        f"{key} must be a size like 128m, 1g or a whole number of bytes{why}, got {value!r}. "
        "Units are binary (k, m, g, t, p; an optional trailing b) and fractions are refused, as in Spark."
    )


def parse_size(value: Any, *, key: str = "size") -> int:
    """Parse a byte size as Spark's bytes confs do: ``128m``, ``1g``, ``1024`` (bytes). Binary units.

    Strict like Spark's ``JavaUtils.byteStringAs``: a whole number and a unit, so ``1.5g`` is
    refused (Spark refuses it too), and the result must fit in a long, as Delta stores sizes.
    """
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise _size_error(key, value)
    if isinstance(value, int):
        n = value
    else:
        m = _SIZE_RE.match(value)
        if not m or m.group(2).lower() not in _UNITS:
            raise _size_error(key, value)
        n = int(m.group(1)) * _UNITS[m.group(2).lower()]
    if n < 0:
        raise _size_error(key, value, " (not negative)")
    if n > MAX_SIZE:
        raise _size_error(key, value, f" up to {MAX_SIZE} (a long)")
    return n


def format_size(n: int | float) -> str:
    for unit, size in (("GiB", GiB), ("MiB", MiB), ("KiB", 1024)):
        if abs(n) >= size:
            return f"{n / size:.1f} {unit}"
    return f"{int(n)} B"


def parse_bool(value: Any, *, key: str) -> bool:
    if isinstance(value, bool):
        return value
    s = str(value).strip().strip("'\"").lower()
    if s in ("true", "false"):
        return s == "true"
    raise InvalidConfigError(f"{key} must be true or false, got {value!r}.")


def _parse_int(value: Any, *, key: str, minimum: int) -> int:
    try:
        n = int(str(value).strip()) if not isinstance(value, int) or isinstance(value, bool) else value
    except ValueError:
        raise InvalidConfigError(f"{key} must be a whole number >= {minimum}, got {value!r}.") from None
    if isinstance(value, bool) or n < minimum:
        raise InvalidConfigError(f"{key} must be a whole number >= {minimum}, got {value!r}.")
    return n


def _parse_ratio(value: Any, *, key: str) -> float:
    try:
        r = float(value)
    except (TypeError, ValueError):
        raise InvalidConfigError(f"{key} must be a number between 0 and 1, got {value!r}.") from None
    if not 0.0 <= r <= 1.0:
        raise InvalidConfigError(f"{key} must be a number between 0 and 1, got {value!r}.")
    return r


@dataclass(frozen=True)
class OptimizeConfig:
    """Settings of one OPTIMIZE run (delta-spark's names in the field docs)."""

    min_file_size: int = GiB  #: optimize.minFileSize: files strictly smaller are candidates
    max_file_size: int = GiB  #: optimize.maxFileSize: bin cap; Z-order output target
    max_threads: int = 15  #: optimize.maxThreads: bins rewritten concurrently
    batch_size: int | None = None  #: optimize.batchSize: bytes per commit; None = one commit
    max_deleted_rows_ratio: float = 0.05  #: optimize.maxDeletedRowsRatio
    repartition_enabled: bool = False  #: optimize.repartition.enabled: repartition(1) vs coalesce(1)
    max_commit_attempts: int = 100  #: maxCommitAttempts (delta-spark: 10,000,000)
    #: ours (spark.dbt_delta_optimize.rewriteEngine): "arrow" streams a compaction bin through Arrow
    #: inside a Spark task; "spark" writes it with a DataFrame coalesce(1), as delta-spark does.
    rewrite_engine: str = "arrow"
    #: ours (spark.dbt_delta_optimize.validateCommits): check planned actions before committing and
    #: the landed commit after (validate module); a failure before the commit writes nothing.
    validate_commits: bool = True
    #: ours (spark.dbt_delta_optimize.maxDuration): wall-clock budget in seconds from the start of
    #: the run; when it runs out no new bin starts, and what is done is committed. None: no budget.
    max_duration: float | None = None
    #: ours (spark.dbt_delta_optimize.maxFailedBins): bins that may fail (reported, the rest commit)
    #: before the run fails; 0 keeps delta-spark's all-or-nothing.
    max_failed_bins: int = 0
    #: ours (spark.dbt_delta_optimize.order): which bins run first (matters with a budget or partial
    #: commits): files-desc (most small files first), bytes-desc, partition, oldest-first.
    order: str = "files-desc"
    #: ours (spark.dbt_delta_optimize.commitEvery): commit finished bins every N bins (an integer)
    #: or every T seconds ("30s", "5m"), so a long run keeps its work if it is killed. None: per batch.
    commit_every_bins: int | None = None
    commit_every_seconds: float | None = None

    @classmethod
    def resolve(cls, get_conf: ConfGetter | None = None, overrides: Mapping[str, Any] | None = None) -> OptimizeConfig:
        """Overrides > session conf > defaults, every value validated."""
        get_conf = get_conf or (lambda _k: None)
        overrides = dict(overrides or {})
        unknown = set(overrides) - {f.name for f in fields(cls)} - {"commit_every"}
        if unknown:
            raise InvalidConfigError(
                f"Unknown optimize setting(s): {', '.join(sorted(unknown))}. "
                f"Valid settings: {', '.join(f.name for f in fields(cls))}."
            )
        values: dict[str, Any] = {}
        for name, (key, parse) in _OPTIMIZE_KEYS.items():
            raw = overrides.get(name)
            source = name
            if raw is None:
                full = key if key.startswith("spark.") else PREFIX + key
                raw = get_conf(full)
                source = full
            if raw is None:
                continue
            values[name] = parse(raw, key=source)
        if "commit_every" in values:
            values["commit_every_bins"], values["commit_every_seconds"] = values.pop("commit_every")
        cfg = cls(**values)
        if cfg.max_file_size == 0:
            raise InvalidConfigError("max_file_size (optimize.maxFileSize) must be greater than 0.")
        return cfg


@dataclass(frozen=True)
class OptimizeOptions:
    """Per-call overrides of the session's settings (None: take the session conf, then the default)."""

    min_file_size: int | str | None = None
    max_file_size: int | str | None = None
    max_threads: int | None = None
    batch_size: int | str | None = None
    max_deleted_rows_ratio: float | None = None
    repartition_enabled: bool | None = None
    max_commit_attempts: int | None = None
    rewrite_engine: Literal["arrow", "spark"] | None = None
    validate_commits: bool | None = None
    max_duration: float | str | None = None
    max_failed_bins: int | None = None
    order: Order | None = None
    commit_every: int | str | None = None

    def overrides(self) -> dict[str, Any]:
        """The options that were set, by name (what ``OptimizeConfig.resolve`` takes)."""
        return {f.name: getattr(self, f.name) for f in fields(self) if getattr(self, f.name) is not None}


Order = Literal["files-desc", "bytes-desc", "partition", "oldest-first"]
ORDERS: tuple[str, ...] = ("files-desc", "bytes-desc", "partition", "oldest-first")
_DURATION_UNITS = {"s": 1.0, "sec": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0}


def parse_duration(value: Any, *, key: str) -> float:
    """Seconds from ``25s``, ``10m``, ``1h`` or a number of seconds (> 0, at most a week)."""
    text = str(value).strip().lower()
    unit = text.lstrip("0123456789.")
    number = text[: len(text) - len(unit)] if unit else text
    try:
        if isinstance(value, bool) or unit.strip() not in ("", *_DURATION_UNITS):
            raise ValueError
        seconds = float(number) * _DURATION_UNITS.get(unit.strip(), 1.0)
    except ValueError:
        raise InvalidConfigError(f"{key} must be a duration like 25s, 10m or 1h, got {value!r}.") from None
    if not 0 < seconds <= 7 * 86400:
        raise InvalidConfigError(f"{key} must be a duration between 1s and 7 days, got {value!r}.")
    return seconds


def _order(v: Any, *, key: str) -> str:
    s = str(v).strip().lower()
    if s not in ORDERS:
        raise InvalidConfigError(f"{key} must be one of {', '.join(ORDERS)}, got {v!r}.")
    return s


def _commit_every(v: Any, *, key: str) -> tuple[int | None, float | None]:
    """An integer is a number of bins; a duration (``30s``, ``5m``) a period. Bytes are ``batch_size``."""
    text = str(v).strip()
    if text.isdigit() and not isinstance(v, bool):
        return _parse_int(text, key=key, minimum=1), None
    return None, parse_duration(v, key=key)


def _threads(v: Any, *, key: str) -> int:
    return _parse_int(v, key=key, minimum=1)


def _attempts(v: Any, *, key: str) -> int:
    return _parse_int(v, key=key, minimum=1)


def _batch(v: Any, *, key: str) -> int:
    n = parse_size(v, key=key)
    if n <= 0:
        raise InvalidConfigError(f"{key} must be a positive size like 1g, got {v!r}.")
    return n


_OPTIMIZE_KEYS: dict[str, tuple[str, Callable[..., Any]]] = {
    "min_file_size": ("optimize.minFileSize", parse_size),
    "max_file_size": ("optimize.maxFileSize", parse_size),
    "max_threads": ("optimize.maxThreads", _threads),
    "batch_size": ("optimize.batchSize", _batch),
    "max_deleted_rows_ratio": ("optimize.maxDeletedRowsRatio", _parse_ratio),
    "repartition_enabled": ("optimize.repartition.enabled", parse_bool),
    "max_commit_attempts": ("maxCommitAttempts", _attempts),
    "rewrite_engine": ("spark.dbt_delta_optimize.rewriteEngine", lambda v, *, key: _engine(v, key=key)),
    "validate_commits": ("spark.dbt_delta_optimize.validateCommits", parse_bool),
    "max_duration": ("spark.dbt_delta_optimize.maxDuration", parse_duration),
    "max_failed_bins": ("spark.dbt_delta_optimize.maxFailedBins", lambda v, *, key: _parse_int(v, key=key, minimum=0)),
    "order": ("spark.dbt_delta_optimize.order", _order),
    "commit_every": ("spark.dbt_delta_optimize.commitEvery", _commit_every),
}


def _engine(v: Any, *, key: str) -> str:
    s = str(v).strip().lower()
    if s not in ("arrow", "spark"):
        raise InvalidConfigError(f"{key} must be 'arrow' or 'spark', got {v!r}.")
    return s
