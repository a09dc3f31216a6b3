"""Child process for the multi-process commit races in test_commit.py (no Spark here).

Usage: python commit_race_worker.py JOB.json

JOB.json holds {"table", "go_file", "commits": [[action, ...], ...]} where each action is
{"add": {...}} or {"remove": {...}} in log shape. The worker loads one snapshot, waits for
go_file to appear (so every worker starts committing at once), commits every action list as
its own Transaction on that same (increasingly stale) snapshot, and prints one JSON line per
commit: the CommitResult, or the conflict error's class name and winning version.
"""

from __future__ import annotations

import json
import os
import sys
import time


def main(job_path: str) -> int:
    from dbt_delta_optimize.delta.actions import AddFile, RemoveFile
    from dbt_delta_optimize.delta.commit import Transaction
    from dbt_delta_optimize.delta.snapshot import load_snapshot
    from dbt_delta_optimize.errors import CommitConflictError

    with open(job_path) as fh:
        job = json.load(fh)
    snapshot = load_snapshot(job["table"])
    batches = [
        [AddFile.from_json(a["add"]) if "add" in a else RemoveFile.from_json(a["remove"]) for a in actions]
        for actions in job["commits"]
    ]
    print(json.dumps({"ready": True, "read_version": snapshot.version}), flush=True)
    deadline = time.time() + 60
    while not os.path.exists(job["go_file"]):
        if time.time() > deadline:
            raise SystemExit("go file never appeared")
        time.sleep(0.001)
    for actions in batches:
        txn = Transaction(snapshot)
        txn.track_read(
            [a for a in snapshot.files if any(r.path == a.path for r in actions if isinstance(r, RemoveFile))]
        )
        try:
            res = txn.commit(
                actions, job.get("operation", "WRITE"), job.get("parameters", {}), {"numFiles": len(actions)}
            )
        except CommitConflictError as exc:
            out = {"error": type(exc).__name__, "winning_version": exc.winning_version, "paths": list(exc.paths)}
        else:
            out = {
                "version": res.version,
                "read_version": res.read_version,
                "attempts": res.attempts,
                "rebased_over": list(res.rebased_over),
            }
        print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
