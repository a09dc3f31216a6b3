"""One exception hierarchy for everything this package raises on purpose.

Every message says what is wrong and what to do about it, because the reader is
often a dbt user looking at a log line, not at our source.

A scheduler acts on the kind of an error, so each kind has one exit code (``exit_code``):
0 done or nothing to do; 1 a failure (bins failed while the rest committed, a lost conflict, an
unreadable data file); 2 bad input or an unsupported table, which will never succeed as is;
3 retryable: the store or the Spark Connect server could not be reached, throttled, or timed out.
"""

from __future__ import annotations

__all__ = [
    "BAD_INPUT_ERRORS",
    "EXIT_BAD_INPUT",
    "EXIT_FAILED",
    "EXIT_OK",
    "EXIT_RETRYABLE",
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
    "OutputPathError",
    "ProtocolChangedError",
    "SparkConnectError",
    "SparkStartError",
    "StorageAccessError",
    "TableNotFoundError",
    "UnsafePathError",
    "UnsupportedFeatureError",
    "ValidationError",
    "exit_code",
]


#: Process exit codes by kind of outcome (the CLI's, documented in its --help and docs/errors.md).
EXIT_OK = 0
EXIT_FAILED = 1
EXIT_BAD_INPUT = 2
EXIT_RETRYABLE = 3


class DeltaOptimizeError(Exception):
    """Base class of every error this package raises deliberately."""

    #: Running again later, unchanged, may succeed (an unreachable or throttling store or server).
    retryable: bool = False


class InvalidArgumentError(DeltaOptimizeError, ValueError):
    """A caller passed a value we cannot act on (the message names it and the fix)."""


class InvalidConfigError(InvalidArgumentError):
    """A configuration key holds a value outside its allowed range or format."""


class InvalidPredicateError(InvalidArgumentError):
    """A WHERE predicate does not parse, or references something it may not."""


class OutputPathError(InvalidArgumentError):
    """A file the command would write cannot be written there (no such folder, a folder, not writable):
    refused before any table is opened, so no work is done and then lost."""

    def __init__(self, message: str, *, option: str = "", path: str = "") -> None:
        super().__init__(message)
        self.option = option
        self.path = path


class StorageAccessError(DeltaOptimizeError, OSError):
    """An object store could not be used: unreachable, throttling or timing out (``retryable``), or refusing
    the request for good (credentials, permissions, a missing capability such as put-if-absent)."""

    def __init__(self, message: str, *, retryable: bool = False) -> None:
        super().__init__(message)
        self.retryable = retryable


class SparkConnectError(DeltaOptimizeError, OSError):
    """A Spark Connect server (``sc://``) could not be used: no server answering there (``retryable``),
    or for good: a malformed address, or no client packages installed."""

    def __init__(self, message: str, *, retryable: bool = False) -> None:
        super().__init__(message)
        self.retryable = retryable


class SparkStartError(DeltaOptimizeError):
    """The embedded Spark session could not start (no Java, a ``JAVA_HOME`` without one): fix the set-up."""


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


#: Errors that mean "fix your input" (exit 2), unless retryable; a lost conflict or other failure is exit 1.
BAD_INPUT_ERRORS: tuple[type[DeltaOptimizeError], ...] = (
    InvalidArgumentError,
    TableNotFoundError,
    UnsupportedFeatureError,
    CorruptLogError,
    StorageAccessError,
    SparkConnectError,
    SparkStartError,
)


def exit_code(exc: BaseException) -> int:
    """The process exit code for an error: 3 retryable, 2 bad input or unsupported table, 1 anything else.

    Besides our own errors, the builtin ``TimeoutError`` and ``ConnectionError`` (a library's network
    failure that reached us untranslated) count as retryable.
    """
    if isinstance(exc, DeltaOptimizeError):
        if exc.retryable:
            return EXIT_RETRYABLE
        return EXIT_BAD_INPUT if isinstance(exc, BAD_INPUT_ERRORS) else EXIT_FAILED
    if isinstance(exc, (TimeoutError, ConnectionError)):
        return EXIT_RETRYABLE
    return EXIT_FAILED
