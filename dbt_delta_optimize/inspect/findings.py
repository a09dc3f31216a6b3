"""What validation reports: findings with stable codes, and the report of one commit."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..errors import ValidationError

__all__ = ["Finding", "ValidationReport"]


@dataclass(frozen=True)
class Finding:
    """One problem, named by a stable code so callers can match on it (the message is for humans)."""

    code: str
    message: str
    path: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"code": self.code, "message": self.message, "path": self.path}

    def __str__(self) -> str:
        return f"[{self.code}] {self.path + ': ' if self.path else ''}{self.message}"


@dataclass(frozen=True)
class ValidationReport:
    """Outcome of validating one commit (``version`` is None for actions not committed yet)."""

    table: str
    version: int | None
    operation: str | None
    ok: bool
    findings: tuple[Finding, ...]
    adds: int
    removes: int
    rows_added: int | None
    rows_removed: int | None
    engine: str | None = None
    read_version: int | None = None

    @property
    def codes(self) -> tuple[str, ...]:
        """Distinct finding codes, in first-seen order."""
        return tuple(dict.fromkeys(f.code for f in self.findings))

    def to_dict(self) -> dict[str, Any]:
        return {
            "table": self.table,
            "version": self.version,
            "readVersion": self.read_version,
            "operation": self.operation,
            "engine": self.engine,
            "ok": self.ok,
            "adds": self.adds,
            "removes": self.removes,
            "rowsAdded": self.rows_added,
            "rowsRemoved": self.rows_removed,
            "codes": list(self.codes),
            "findings": [f.to_dict() for f in self.findings],
        }

    def describe(self) -> str:
        """A readable multi-line summary (what the CLI prints)."""
        what = (
            f"version {self.version}"
            if self.version is not None
            else f"uncommitted actions on version {self.read_version}"
        )
        by = f" by {self.engine}" if self.engine else ""
        head = (
            f"{self.table} {what} ({self.operation or 'unknown operation'}{by}): "
            f"{self.removes} file(s) removed, {self.adds} added, rows {self.rows_removed} -> {self.rows_added}"
        )
        if self.ok:
            return head + "\nOK: no findings"
        lines = [head, f"FAILED: {len(self.findings)} finding(s)"]
        lines += [f"  {f}" for f in self.findings]
        return "\n".join(lines)

    def raise_if_invalid(self) -> ValidationReport:
        """Raise ValidationError listing the findings (the executor's guard); return self when ok."""
        if not self.ok:
            shown = "; ".join(str(f) for f in self.findings[:10])
            more = f" (and {len(self.findings) - 10} more)" if len(self.findings) > 10 else ""
            raise ValidationError(
                f"Commit validation failed for {self.table} "
                f"({'version ' + str(self.version) if self.version is not None else 'before commit'}): "
                f"{shown}{more}. This is a bug guard: please report it with the table's _delta_log."
            )
        return self
