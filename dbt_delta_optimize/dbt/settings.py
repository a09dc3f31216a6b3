"""A model's ``meta.delta_optimize`` settings and ``run-operation optimize``'s arguments, validated.

They arrive from YAML and Jinja as loosely typed data; each key is checked here once, so a wrong
type is an ``InvalidArgumentError`` naming the key (the hook reports it, per ``on_error``), never
a TypeError deep inside a compaction. The keys are the model's own (mode, where, ...) and every
setting the one declaration of options (``dbt_delta_optimize.options``) marks as a meta key,
parsed by that declaration.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, cast

from ..errors import InvalidArgumentError
from ..options import AUTO_COMPACT_OPTIONS, OPTIMIZE_OPTIONS, VACUUM_MODEL_OPTIONS, OptimizeOptions, Option

__all__ = ["SETTINGS", "ModelSettings", "OperationArgs", "operation_options", "parse_operation_args", "parse_settings"]

Mode = Literal["auto", "optimize", "never"]
OnError = Literal["warn", "fail"]
Curve = Literal["zorder", "hilbert"]

_PREFIX = "meta.delta_optimize."


@dataclass(frozen=True)
class ModelSettings:
    """What one model asked for (docs/dbt.md: "Model settings")."""

    mode: Mode = "auto"
    where: tuple[str, ...] = ()
    zorder_by: tuple[str, ...] = ()
    curve: Curve = "zorder"
    #: the OPTIMIZE settings the model gave (``min_file_size`` and ``max_file_size`` also size auto compaction)
    options: OptimizeOptions = field(default_factory=OptimizeOptions)
    min_num_files: int | None = None
    on_error: OnError = "warn"
    skip: bool = False
    storage_options: Mapping[str, str] | None = None
    #: liquid clustering columns (dbt-databricks' config name; dbt-spark has none): the post-hook
    #: makes the table CLUSTER BY these columns and clusters it
    liquid_clustered_by: tuple[str, ...] = ()
    #: ms: after the write, a LITE VACUUM when the last VACUUM is older than this (None: off)
    vacuum_lite_every: int | None = None


@dataclass(frozen=True)
class OperationArgs:
    """``dbt run-operation optimize``'s per-table arguments."""

    where: tuple[str, ...] = ()
    zorder_by: tuple[str, ...] = ()
    dry_run: bool = False
    storage_options: Mapping[str, str] | None = None
    #: the OPTIMIZE settings in force: the model's ``meta.delta_optimize`` keys, under run-operation's ``settings``
    options: OptimizeOptions = field(default_factory=OptimizeOptions)
    #: where each given setting came from (``meta`` or ``args``), by name
    given: Mapping[str, str] = field(default_factory=dict)


def _choice(key: str, value: Any, allowed: tuple[str, ...]) -> str:
    if value not in allowed:
        raise InvalidArgumentError(f"{_PREFIX}{key} must be one of {', '.join(allowed)}, got {value!r}.")
    return cast(str, value)


def _strings(key: str, value: Any, prefix: str = _PREFIX) -> tuple[str, ...]:
    """A string (``where``: one predicate; ``zorder_by``: comma-separated) or a list of strings."""
    if value is None:
        return ()
    if isinstance(value, str):
        return (value,) if key == "where" else tuple(c.strip() for c in value.split(",") if c.strip())
    if isinstance(value, (list, tuple)) and all(isinstance(x, str) for x in value):
        return tuple(value)
    raise InvalidArgumentError(f"{prefix}{key} must be a string or a list of strings, got {value!r}.")


def _setting(option: Option) -> Callable[[str, Any], Any]:
    """A declared option's meta parser: None stays unset, anything else is parsed by the declaration."""

    def parse(key: str, value: Any) -> Any:
        if value is None:
            return None
        parsed = option.parse(value, key=_PREFIX + key)
        # a value spread over several config fields (commit_every: bins or seconds) stays as given: checked
        # here, resolved (and spread) where the run's config is made
        return value if option.targets else parsed

    return parse


def _storage_options(key: str, value: Any, prefix: str = _PREFIX) -> dict[str, str] | None:
    """A mapping of deltalake storage option names to values (numbers and booleans become strings)."""
    if value is None:
        return None
    ok = isinstance(value, Mapping) and all(
        isinstance(k, str) and isinstance(v, (str, int, float, bool)) for k, v in value.items()
    )
    if not ok:
        raise InvalidArgumentError(
            f"{prefix}{key} must be a mapping of option names to values (deltalake's keys, e.g. AWS_REGION)."
        )
    return {k: str(v).lower() if isinstance(v, bool) else str(v) for k, v in value.items()}


def _flag(key: str, value: Any) -> bool:
    if value is None:
        return False
    if not isinstance(value, bool):
        raise InvalidArgumentError(f"{_PREFIX}{key} must be true or false, got {value!r}.")
    return value


#: The model's own keys.
_MODEL: dict[str, Callable[[str, Any], Any]] = {
    "mode": lambda k, v: _choice(k, "auto" if v is None else v, ("auto", "optimize", "never")),
    "where": _strings,
    "zorder_by": _strings,
    "curve": lambda k, v: _choice(k, "zorder" if v is None else v, ("zorder", "hilbert")),
    "on_error": lambda k, v: _choice(k, "warn" if v is None else v, ("warn", "fail")),
    "skip": _flag,
    "storage_options": lambda k, v: _storage_options(k, v),
    "liquid_clustered_by": _strings,
}
#: The declared settings a model may give: every OPTIMIZE option, auto compaction's own ones, VACUUM's hook ones.
_DECLARED = (*AUTO_COMPACT_OPTIONS, *OPTIMIZE_OPTIONS, *VACUUM_MODEL_OPTIONS)
_OPTIONS: dict[str, Option] = {o.name: o for o in _DECLARED if o.meta_key is not None}
_PARSERS: dict[str, Callable[[str, Any], Any]] = {**_MODEL, **{k: _setting(o) for k, o in _OPTIONS.items()}}
_OPTIMIZE = frozenset(o.name for o in OPTIMIZE_OPTIONS)

#: Every key ``meta.delta_optimize`` may hold.
SETTINGS = tuple(_PARSERS)


def parse_settings(settings: Any) -> ModelSettings:
    """Validate a model's ``meta.delta_optimize`` mapping (None or {} for the defaults)."""
    if settings is None:
        return ModelSettings()
    if not isinstance(settings, Mapping):
        raise InvalidArgumentError(f"meta.delta_optimize must be a mapping of settings, got {settings!r}.")
    unknown = sorted(str(k) for k in settings if k not in _PARSERS)
    if unknown:
        raise InvalidArgumentError(
            f"Unknown meta.delta_optimize setting(s): {', '.join(unknown)}. Valid: {', '.join(sorted(SETTINGS))}."
        )
    values = {key: parse(key, settings.get(key)) for key, parse in _PARSERS.items()}
    options = OptimizeOptions(**{k: values.pop(k) for k in list(values) if k in _OPTIMIZE})
    return ModelSettings(options=options, **values)


def parse_operation_args(
    where: Any, zorder_by: Any, dry_run: Any, storage_options: Any = None, settings: Any = None, meta: Any = None
) -> OperationArgs:
    """Validate ``run-operation optimize``'s ``where``, ``zorder_by``, ``dry_run`` and ``storage_options``,
    and its OPTIMIZE ``settings`` over the selected model's own ``meta.delta_optimize`` ones."""
    if not isinstance(dry_run, bool):
        raise InvalidArgumentError(f"dry_run must be true or false, got {dry_run!r}.")
    options, given = operation_options(settings, meta)
    return OperationArgs(
        _strings("where", where, ""),
        _strings("zorder_by", zorder_by, ""),
        dry_run,
        _storage_options("storage_options", storage_options, "var "),
        options,
        given,
    )


def operation_options(settings: Any, meta: Any) -> tuple[OptimizeOptions, dict[str, str]]:
    """A run-operation's OPTIMIZE settings: its ``settings`` argument over the model's meta keys.

    ``settings`` takes OPTIMIZE settings only (a mode or a where has its own argument): anything else is
    refused, naming the valid keys. The model's other meta keys (mode, on_error ...) are the hook's.
    """
    if settings is not None and not isinstance(settings, Mapping):
        raise InvalidArgumentError(f"settings must be a mapping of OPTIMIZE settings, got {settings!r}.")
    extra = sorted(str(k) for k in (settings or {}) if k not in _OPTIMIZE or k not in _OPTIONS)
    if extra:
        valid = ", ".join(o.name for o in OPTIMIZE_OPTIONS if o.meta_key)
        raise InvalidArgumentError(f"Unknown run-operation setting(s): {', '.join(extra)}. Valid: {valid}.")
    model = parse_settings(meta).options.overrides() if isinstance(meta, Mapping) else {}
    args = parse_settings(settings).options.overrides() if settings else {}
    given = {**dict.fromkeys(model, "meta"), **dict.fromkeys(args, "args")}
    return OptimizeOptions(**{**model, **args}), given
