"""One exception hierarchy for everything this package raises on purpose.

Every message says what is wrong and what to do about it, because the reader is
often a dbt user looking at a log line, not at our source.
"""

from __future__ import annotations

__all__ = [
    "BAD_INPUT_ERRORS",
    "CommitConflictError",
    "CommitFailedError",
    "ConcurrentDeleteDeleteError",
    "ConcurrentDeleteReadError",
    "CorruptLogError",
    "DataFileError",
    "DeltaOptimizeError",
    "InvalidArgumentError",
    "InvalidConfigError",
    "InvalidPredicateError",
    "MetadataChangedError",
    "NotADeltaTableError",
    "ProtocolChangedError",
    "SparkConnectError",
    "TableNotFoundError",
    "UnsafePathError",
    "UnsupportedFeatureError",
    "ValidationError",
    "exit_code",
]


class DeltaOptimizeError(Exception):
    """Base class of every error this package raises deliberately."""


class InvalidArgumentError(DeltaOptimizeError, ValueError):
    """A caller passed a value we cannot act on (the message names it and the fix)."""


class InvalidConfigError(InvalidArgumentError):
    """A configuration key holds a value outside its allowed range or format."""


class InvalidPredicateError(InvalidArgumentError):
    """A WHERE predicate does not parse, or references something it may not."""


class StorageAccessError(InvalidArgumentError):
    """An object store refused or could not be reached: credentials, endpoint, network, or a missing capability."""


class SparkConnectError(InvalidArgumentError):
    """A Spark Connect server (``sc://``) could not be used: a bad address, no server there, or no client packages."""


class TableNotFoundError(DeltaOptimizeError):
    """The path or table name does not exist."""


class NotADeltaTableError(TableNotFoundError):
    """The location exists but holds no Delta transaction log."""


class UnsupportedFeatureError(DeltaOptimizeError):
    """The table uses protocol features our writer cannot honour yet."""

    def __init__(self, message: str, features: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.features = features


class CorruptLogError(DeltaOptimizeError):
    """The table's log cannot be replayed: a gap, bad JSON, a missing protocol, metadata or checkpoint."""

    def __init__(self, message: str, *, version: int | None = None) -> None:
        super().__init__(message)
        self.version = version


class UnsafePathError(CorruptLogError):
    """An action in the log names a file outside the table root (``../x``, a symlink out, a NUL byte)."""

    def __init__(self, message: str, *, version: int | None = None, path: str = "") -> None:
        super().__init__(message, version=version)
        self.path = path


class DataFileError(DeltaOptimizeError):
    """A data file the table lists cannot be read: missing, empty, not Parquet, or not the table's schema."""

    def __init__(self, message: str, *, path: str = "", reason: str = "") -> None:
        super().__init__(message)
        self.path = path
        self.reason = reason


class CommitFailedError(DeltaOptimizeError):
    """A commit could not be written (I/O failure, retries exhausted)."""


class CommitConflictError(CommitFailedError):
    """A concurrent commit changed something this transaction depends on.

    Nothing was written by us; re-running the operation on the new table state is safe.
    """

    def __init__(self, message: str, *, winning_version: int | None = None, paths: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.winning_version = winning_version
        self.paths = paths


class ConcurrentDeleteReadError(CommitConflictError):
    """A concurrent commit changed data in a file this transaction read (DELETE, UPDATE, MERGE, overwrite)."""


class ConcurrentDeleteDeleteError(CommitConflictError):
    """A concurrent data-rearranging commit (another OPTIMIZE) already removed a file this transaction removes."""


class MetadataChangedError(CommitConflictError):
    """A concurrent commit changed the table's metadata (schema, partitioning, properties)."""


class ProtocolChangedError(CommitConflictError):
    """A concurrent commit changed the table's protocol."""


class ValidationError(DeltaOptimizeError):
    """A planned or landed commit failed validation (a bug guard: nothing unsafe is written)."""


#: Errors that mean "fix your input" (exit 2); any other error is a failure (exit 1).
BAD_INPUT_ERRORS: tuple[type[DeltaOptimizeError], ...] = (
    InvalidArgumentError,
    TableNotFoundError,
    UnsupportedFeatureError,
    CorruptLogError,
)


def exit_code(exc: BaseException) -> int:
    """The process exit code for an error: 2 for bad input, 1 for anything else."""
    return 2 if isinstance(exc, BAD_INPUT_ERRORS) else 1
