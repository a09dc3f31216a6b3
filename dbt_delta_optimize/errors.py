"""One exception hierarchy for everything this package raises on purpose.

Every message says what is wrong and what to do about it, because the reader is
often a dbt user looking at a log line, not at our source.
"""

from __future__ import annotations

__all__ = [
    "CommitConflictError",
    "CommitFailedError",
    "ConcurrentDeleteDeleteError",
    "ConcurrentDeleteReadError",
    "DeltaOptimizeError",
    "InvalidArgumentError",
    "InvalidConfigError",
    "InvalidPredicateError",
    "MetadataChangedError",
    "NotADeltaTableError",
    "ProtocolChangedError",
    "TableNotFoundError",
    "UnsupportedFeatureError",
    "ValidationError",
]


class DeltaOptimizeError(Exception):
    """Base class of every error this package raises deliberately."""


class InvalidArgumentError(DeltaOptimizeError, ValueError):
    """A caller passed a value we cannot act on (the message names it and the fix)."""


class InvalidConfigError(InvalidArgumentError):
    """A configuration key holds a value outside its allowed range or format."""


class InvalidPredicateError(InvalidArgumentError):
    """A WHERE predicate does not parse, or references something it may not."""


class TableNotFoundError(DeltaOptimizeError):
    """The path or table name does not exist."""


class NotADeltaTableError(TableNotFoundError):
    """The location exists but holds no Delta transaction log."""


class UnsupportedFeatureError(DeltaOptimizeError):
    """The table uses protocol features our writer cannot honour yet."""

    def __init__(self, message: str, features: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.features = features


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
