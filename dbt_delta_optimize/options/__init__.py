"""Every setting, declared once: its type, default, Spark conf key, CLI flag, dbt meta key and help.

Everything else is derived from this table: ``OptimizeConfig.resolve`` and ``AutoCompactConfig.resolve``
(per-call value > session conf > default), the CLI's flags, the dbt meta keys and their validation,
and the settings table of the docs' settings page (``options_table_markdown``). The public keyword
signatures stay explicit for type checkers; tests check them against this table. A leaf package: it
imports only ``errors`` and the standard library; how values are written is ``options.values``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any, Literal, get_args

from ..errors import InvalidConfigError
from .values import (
    MAX_SIZE,
    GiB,
    MiB,
    format_size,
    parse_bool,
    parse_choice,
    parse_duration,
    parse_every,
    parse_int,
    parse_interval,
    parse_ratio,
    parse_size,
)

__all__ = [
    "ANALYZE_OPTIONS",
    "AUTO_COMPACT_OPTIONS",
    "MAX_SIZE",
    "OPTIMIZE_OPTIONS",
    "PREFIX",
    "PURGE_FIXED",
    "REPORT_OPTIONS",
    "VACUUM_MODEL_OPTIONS",
    "VACUUM_OPTIONS",
    "ConfGetter",
    "Effective",
    "GiB",
    "Kind",
    "MiB",
    "OptimizeOptions",
    "Option",
    "Order",
    "RewriteEngine",
    "TaskRunner",
    "effective_dict",
    "format_size",
    "options_table_markdown",
    "parse_bool",
    "parse_duration",
    "parse_int",
    "parse_interval",
    "parse_size",
    "resolve_effective",
    "resolve_values",
]

PREFIX = "spark.databricks.delta."
OURS = "spark.dbt_delta_optimize."

ConfGetter = Callable[[str], "str | None"]
Order = Literal["files-desc", "bytes-desc", "partition", "oldest-first"]
RewriteEngine = Literal["arrow", "spark"]
TaskRunner = Literal["auto", "driver", "spark"]

# ----------------------------------------------------------------------------- the declaration
#: What a setting's value is: how it is parsed, shown as a CLI flag and typed in the API.
Kind = Literal["size", "count", "ratio", "flag", "choice", "duration", "bins_or_duration", "interval"]


@dataclass(frozen=True)
class Option:
    """One setting. Its name is the API keyword, the ``OptimizeOptions`` field and the dbt meta key."""

    name: str
    kind: Kind
    conf: str  #: the full Spark conf key
    default: Any  #: the value when neither the call nor the session sets it (None: unset)
    help: str  #: one sentence: what it does (no default, no choices: those are derived)
    minimum: int = 0  #: count: the smallest value; size: 1 refuses 0
    choices: tuple[str, ...] = ()
    unset: str = "unset"  #: how an unset (None) default reads
    note: str = ""  #: said after the default in the docs, e.g. delta-spark's own default
    meta: bool = True  #: a dbt ``meta.delta_optimize`` key
    targets: tuple[str, ...] = ()  #: the config fields a tuple value is spread over (default: ``name``)

    @property
    def flag(self) -> str:
        """The CLI flag."""
        return "--" + self.name.replace("_", "-")

    @property
    def meta_key(self) -> str | None:
        """The dbt ``meta.delta_optimize`` key (None: not settable from a model)."""
        return self.name if self.meta else None

    def parse(self, value: Any, *, key: str | None = None) -> Any:
        """The typed value of ``value``; an InvalidConfigError naming ``key`` (default: the name) if invalid."""
        key = key or self.name
        if self.kind == "size":
            n = parse_size(value, key=key)
            if n < self.minimum:
                raise InvalidConfigError(f"{key} must be a positive size like 1g, got {value!r}.")
            return n
        if self.kind == "count":
            return parse_int(value, key=key, minimum=self.minimum)
        if self.kind == "ratio":
            return parse_ratio(value, key=key)
        if self.kind == "flag":
            return parse_bool(value, key=key)
        if self.kind == "choice":
            return parse_choice(value, key=key, choices=self.choices)
        if self.kind == "duration":
            return parse_duration(value, key=key)
        if self.kind == "interval":
            return parse_interval(value, key=key)
        return parse_every(value, key=key)

    def default_text(self) -> str:
        """The default as the docs and ``--help`` show it."""
        d = self.default
        if d is None:
            text = self.unset
        elif isinstance(d, bool):
            text = str(d).lower()
        elif self.kind == "size":
            text = format_size(d).replace(".0 ", " ")
        else:
            text = str(d)
        return f"{text} {self.note}".strip()


OPTIMIZE_OPTIONS: tuple[Option, ...] = (
    Option("min_file_size", "size", PREFIX + "optimize.minFileSize", GiB, "Files smaller than this are compacted."),
    Option(
        "max_file_size",
        "size",
        PREFIX + "optimize.maxFileSize",
        GiB,
        "Target (maximum) size of a compacted file.",
        minimum=1,
    ),
    Option("max_threads", "count", PREFIX + "optimize.maxThreads", 15, "Bins rewritten concurrently.", minimum=1),
    Option(
        "batch_size",
        "size",
        PREFIX + "optimize.batchSize",
        None,
        "Commit every this many bytes of bins.",
        minimum=1,
        unset="unset (one commit)",
    ),
    Option(
        "max_deleted_rows_ratio",
        "ratio",
        PREFIX + "optimize.maxDeletedRowsRatio",
        0.05,
        "A file whose share of deleted rows (deletion vectors) is above this is rewritten, however large.",
    ),
    Option(
        "repartition_enabled",
        "flag",
        PREFIX + "optimize.repartition.enabled",
        False,
        "Spark rewrite: repartition(1) instead of coalesce(1).",
    ),
    Option(
        "max_commit_attempts",
        "count",
        PREFIX + "maxCommitAttempts",
        100,
        "Attempts of one commit against concurrent writers.",
        minimum=1,
        note="(delta-spark: 10,000,000)",
    ),
    Option(
        "rewrite_engine",
        "choice",
        OURS + "rewriteEngine",
        "arrow",
        "How a compaction bin is rewritten: streamed through Arrow in a Spark task, or a DataFrame coalesce(1).",
        choices=get_args(RewriteEngine),
    ),
    Option(
        "validate_commits",
        "flag",
        OURS + "validateCommits",
        True,
        "Check the planned actions before committing and the landed commit after.",
    ),
    Option(
        "max_duration",
        "duration",
        OURS + "maxDuration",
        None,
        "Time budget (25s, 10m, 1h): no bin starts after it; what is done is committed.",
    ),
    Option(
        "max_failed_bins",
        "count",
        OURS + "maxFailedBins",
        0,
        "Bins that may fail (reported, exit 1) while the others commit; 0: all or nothing.",
    ),
    Option(
        "order",
        "choice",
        OURS + "order",
        "files-desc",
        "Which bins run first (matters with a time budget or partial commits).",
        choices=get_args(Order),
    ),
    Option(
        "commit_every",
        "bins_or_duration",
        OURS + "commitEvery",
        None,
        "Commit finished bins every N bins (an integer) or every period (5m).",
        unset="unset (one commit per batch)",
        targets=("commit_every_bins", "commit_every_seconds"),
    ),
    Option(
        "allow_external_paths",
        "flag",
        OURS + "allowExternalPaths",
        False,
        "Allow add and remove paths outside the table root (shallow clones); only files the table's own "
        "storage options reach.",
    ),
    Option(
        "row_group_copy_min_bytes",
        "size",
        OURS + "rowGroupCopyMinBytes",
        32 * MiB,
        "Input row groups at least this large are copied byte for byte instead of re-encoded, and small local files' "
        "plain-encoded pages are joined unchanged (the chunk merge); 0 turns both off.",
    ),
    Option(
        "task_runner",
        "choice",
        OURS + "taskRunner",
        "auto",
        "Where Arrow bins run: auto (the driver's threads on a local master, or its worker processes for "
        "1,000 or more small local files; else one Spark job per batch), driver (its threads), or spark.",
        choices=get_args(TaskRunner),
    ),
)

#: Options a purge fixes (REORG ... APPLY (PURGE) rewrites every file with deleted rows, whatever its size).
PURGE_FIXED: Mapping[str, Any] = {"min_file_size": 0, "max_deleted_rows_ratio": 0.0}

AUTO_COMPACT_OPTIONS: tuple[Option, ...] = (
    Option(
        "max_file_size",
        "size",
        PREFIX + "autoCompact.maxFileSize",
        128 * MiB,
        "Auto-compact target file size.",
        minimum=1,
    ),
    Option(
        "min_file_size",
        "size",
        PREFIX + "autoCompact.minFileSize",
        None,
        "Files smaller than this count as small.",
        unset="max_file_size / 2",
    ),
    Option(
        "min_num_files",
        "count",
        PREFIX + "autoCompact.minNumFiles",
        50,
        "Small files a partition needs before auto compaction runs.",
    ),
    Option(
        "modified_partitions_only",
        "flag",
        PREFIX + "autoCompact.modifiedPartitionsOnly.enabled",
        True,
        "Consider only the partitions the triggering write touched.",
        meta=False,
    ),
    Option(
        "non_blind_append",
        "flag",
        PREFIX + "autoCompact.nonBlindAppend.enabled",
        False,
        "Skip writes that were blind appends (with modified_partitions_only).",
        meta=False,
    ),
    Option(
        "max_num_modified_partitions",
        "count",
        PREFIX + "autoCompact.maxNumModifiedPartitions",
        128,
        "At most this many partitions are compacted (those with most small files first).",
        minimum=1,
        meta=False,
    ),
)


#: VACUUM's settings (the retention and the mode are the command's arguments, as in ``VACUUM ... RETAIN n HOURS``).
VACUUM_OPTIONS: tuple[Option, ...] = (
    Option(
        "allow_short_retention",
        "flag",
        OURS + "vacuum.allowShortRetention",
        False,
        "Allow a retention shorter than the table's delta.deletedFileRetentionDuration (delta-spark: "
        "spark.databricks.delta.retentionDurationCheck.enabled=false).",
        meta=False,
    ),
    Option(
        "vacuum_logging",
        "flag",
        PREFIX + "vacuum.logging.enabled",
        None,
        "Record VACUUM START and VACUUM END commits in the table's history.",
        unset="as delta-spark: on for local, Azure, GCS paths; off for S3",
        meta=False,
    ),
    Option(
        "clean_logs",
        "flag",
        OURS + "vacuum.cleanLogs",
        False,
        "Also delete expired _delta_log files (older than delta.logRetentionDuration and covered by a kept "
        "checkpoint), as delta-spark does after each checkpoint; a dry run lists them.",
        meta=False,
    ),
    Option(
        "task_runner",
        "choice",
        OURS + "vacuum.taskRunner",
        "auto",
        "Where VACUUM lists the table and deletes: auto (the driver's threads on a local master or without a "
        "session, else a Spark job split by top-level prefix for the listing and one for the deletes), driver, "
        "or spark.",
        choices=get_args(TaskRunner),
        meta=False,
    ),
)


#: analyze's settings (which files and columns are the command's arguments, as in delta-spark's recompute).
ANALYZE_OPTIONS: tuple[Option, ...] = (
    Option(
        "files_per_commit",
        "count",
        OURS + "analyze.filesPerCommit",
        10_000,
        "Files whose new statistics one COMPUTE STATS commit carries (a large table's backfill lands in several).",
        minimum=1,
        meta=False,
    ),
    Option(
        "max_threads",
        "count",
        OURS + "analyze.maxThreads",
        None,
        "Files whose statistics the driver computes at once (footer reads overlap on object stores).",
        minimum=1,
        unset="4 per core, at most 32",
        meta=False,
    ),
    Option(
        "task_runner",
        "choice",
        OURS + "analyze.taskRunner",
        "auto",
        "Where files' statistics are computed: auto (the driver's threads on a local master or without a "
        "session, else one Spark job per commit batch), driver, or spark.",
        choices=get_args(TaskRunner),
        meta=False,
    ),
)


#: VACUUM after a model's write: dbt ``meta.delta_optimize`` keys only (no CLI flag: the CLI has ``vacuum``).
VACUUM_MODEL_OPTIONS: tuple[Option, ...] = (
    Option(
        "vacuum_lite_every",
        "interval",
        OURS + "vacuum.liteEvery",
        None,
        "After the model's write, run a LITE VACUUM at the table's own retention when the last VACUUM is older "
        "than this interval (7d, 12h, 1w).",
        unset="off",
    ),
)


#: The reports' settings (``health`` and ``maintain``: flags and keywords, not dbt meta keys).
REPORT_OPTIONS: tuple[Option, ...] = (
    Option(
        "trend_days",
        "count",
        OURS + "report.trendDays",
        30,
        "Days of history the trends show (files, bytes, small files, tombstones, statistics coverage, maintenance "
        "cost), read from each table's log in one pass.",
        minimum=1,
        meta=False,
    ),
)


#: Where an effective setting came from: the caller (a keyword, a flag, a model's meta key, run-operation's
#: settings: the caller names it), the Spark session's conf, or the declared default.
SettingSource = str
CONF: SettingSource = "conf"
DEFAULT: SettingSource = "default"


@dataclass(frozen=True)
class Effective:
    """One setting as resolved for a run: its parsed value and where it came from (JSON-ready)."""

    name: str
    value: Any
    source: SettingSource

    def to_dict(self) -> dict[str, Any]:
        return {"value": self.value, "source": self.source}


def resolve_effective(
    options: Sequence[Option],
    get_conf: ConfGetter | None,
    overrides: Mapping[str, Any] | None,
    *,
    what: str,
    given: SettingSource = "call",
) -> tuple[Effective, ...]:
    """Per-call override > session conf > default for each option, parsed, with where each value came from.

    ``given`` names the per-call source in the result (``meta`` for a dbt model's key, ``flag`` for the CLI).
    """
    values = dict(overrides or {})
    unknown = set(values) - {o.name for o in options}
    if unknown:
        raise InvalidConfigError(
            f"Unknown {what} setting(s): {', '.join(sorted(unknown))}. "
            f"Valid settings: {', '.join(o.name for o in options)}."
        )
    out = []
    for option in options:
        raw, key, source = values.get(option.name), option.name, given
        if raw is None and get_conf is not None:
            raw, key, source = get_conf(option.conf), option.conf, CONF
        if raw is None:
            out.append(Effective(option.name, option.default, DEFAULT))
        else:
            out.append(Effective(option.name, option.parse(raw, key=key), source))
    return tuple(out)


def effective_dict(effective: Sequence[Effective]) -> dict[str, dict[str, Any]]:
    """``{name: {value, source}}``: the settings in force, as results files and ``--json`` show them."""
    return {e.name: e.to_dict() for e in effective}


def resolve_values(
    options: Sequence[Option], get_conf: ConfGetter | None, overrides: Mapping[str, Any] | None, *, what: str
) -> dict[str, Any]:
    """Per-call override > session conf > default for each option, every value parsed (by config field)."""
    by_name = {o.name: o for o in options}
    values: dict[str, Any] = {}
    for e in resolve_effective(options, get_conf, overrides, what=what):
        targets = by_name[e.name].targets
        if targets:
            spread = e.value if e.value is not None else (None,) * len(targets)
            values.update(zip(targets, spread))
        else:
            values[e.name] = e.value
    return values


# ----------------------------------------------------------------------------- per-call values
@dataclass(frozen=True)
class OptimizeOptions:
    """Per-call overrides of the session's settings (None: take the session conf, then the default).

    One field per entry of ``OPTIMIZE_OPTIONS``, in its order (a test keeps them equal).
    """

    min_file_size: int | str | None = None
    max_file_size: int | str | None = None
    max_threads: int | None = None
    batch_size: int | str | None = None
    max_deleted_rows_ratio: float | None = None
    repartition_enabled: bool | None = None
    max_commit_attempts: int | None = None
    rewrite_engine: RewriteEngine | None = None
    validate_commits: bool | None = None
    max_duration: float | str | None = None
    max_failed_bins: int | None = None
    order: Order | None = None
    commit_every: int | str | None = None
    allow_external_paths: bool | None = None
    row_group_copy_min_bytes: int | str | None = None
    task_runner: TaskRunner | None = None

    def overrides(self) -> dict[str, Any]:
        """The options that were set, by name (what ``OptimizeConfig.resolve`` takes)."""
        return {f.name: getattr(self, f.name) for f in fields(self) if getattr(self, f.name) is not None}


# ----------------------------------------------------------------------------- documentation
def _table(options: Sequence[Option], *, cli_command: str | None) -> list[str]:
    rows = [
        "| setting (API keyword, dbt meta key) | CLI flag | Spark conf | default | meaning |",
        "|---|---|---|---|---|",
    ]
    for o in options:
        meaning = o.help + (f" One of {', '.join(f'`{c}`' for c in o.choices)}." if o.choices else "")
        key = f"`{o.name}`" if o.meta else f"`{o.name}` (no meta key)"
        flag = f"`{cli_command} {o.flag}`" if cli_command else "(dbt only)"
        rows.append(f"| {key} | {flag} | `{o.conf}` | {o.default_text()} | {meaning} |")
    return rows


def options_table_markdown() -> str:
    """The settings tables (OPTIMIZE and purge; auto compaction) in Markdown, for the docs' settings page."""
    lines = [
        "Each setting is resolved per call: the API keyword (or `OptimizeOptions` field, CLI flag, dbt",
        "`meta.delta_optimize` key) wins over the Spark session's conf, which wins over the default.",
        "Sizes take `128m`, `1g` or bytes (binary units); durations `25s`, `10m`, `1h`.",
        f"`purge` takes every OPTIMIZE setting but {', '.join(f'`{k}`' for k in PURGE_FIXED)}, which it fixes to 0.",
        "",
        "**OPTIMIZE and purge**",
        "",
        *_table(OPTIMIZE_OPTIONS, cli_command="optimize"),
        "",
        "**Auto compaction** (in a model, `min_file_size` and `max_file_size` are these in `mode: auto`)",
        "",
        *_table(AUTO_COMPACT_OPTIONS, cli_command="auto-compact"),
        "",
        "**VACUUM** (`--retain` and `--mode` are arguments, as delta-spark's `RETAIN n HOURS` and `LITE`)",
        "",
        *_table(VACUUM_OPTIONS, cli_command="vacuum"),
        "",
        "**VACUUM after a model's write** (a dbt `meta.delta_optimize` key)",
        "",
        *_table(VACUUM_MODEL_OPTIONS, cli_command=None),
        "",
        "**ANALYZE** (`--columns`, `--all` and `--where` are arguments, as delta-spark's recompute takes them)",
        "",
        *_table(ANALYZE_OPTIONS, cli_command="analyze"),
    ]
    return "\n".join(lines) + "\n"
