"""The actions of a commit that just landed, without parsing again the removes validated before it was written.

OPTIMIZE checks its commit after it lands (``engine.committer``): the commit read back must hold exactly
the actions validated before it was written (``CheckedActions``). Most of its lines are removes, thousands
on a compaction of small files. Each RemoveFile keeps the line it was written as (``RemoveFile.json_line``)
and whether that line reads back as the same action (``RemoveFile.reads_back``); OPTIMIZE makes both as
each bin finishes, while the other bins run. When the landed commit holds exactly those lines, in order and
in one run after its first line, they read back as those very removes, so they are not parsed again (on
5,000 removes the check took 9-20 ms, not 41-69; the work moved to the bins' time is saved where the driver
has a core to spare: docs/performance.md, "Issue 45, the task messages and the commit's per-file work").
Anything else is parsed whole, as before.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..delta.actions import REMOVE, RemoveFile
from ..delta.log import parse_commit

__all__ = ["landed_actions"]


def landed_actions(
    data: bytes, root: str, version: int, removes: Sequence[RemoveFile]
) -> tuple[list[dict[str, Any]], list[RemoveFile] | None]:
    """(the commit's raw actions, None); or, when ``data`` holds exactly the lines of ``removes`` (each of which
    reads back as itself) in one run after its first line and no other remove: (its other raw actions, the removes).
    """
    if removes and all(r.reads_back for r in removes):
        run = b"".join(r.json_line for r in removes)
        at = data.find(run)
        if at > 0 and data[at - 1 : at] == b"\n":  # the first line (commitInfo) is not one of them: raw[0] is kept
            rest = parse_commit(data[:at] + data[at + len(run) :], root, version)
            if not any(REMOVE in a for a in rest):
                return rest, list(removes)
    return parse_commit(data, root, version), None
