"""``purge`` and ``plan_purge`` (REORG TABLE ... APPLY (PURGE)), importable from here as before: see ``ops.purge``."""

from __future__ import annotations

from .ops.purge import plan_purge, purge

__all__ = ["plan_purge", "purge"]
