"""Where a VACUUM of issue 45's table spends its CPU, phase by phase (docs/performance.md's profile).

The table of ``bench/vacuum.py`` (``--files`` files in ``--partitions`` folders, all compacted away), each run
on a fresh copy in a fresh process: the imports, the log replay (live files and tombstones), the protected set,
then in full mode the table's listing and the plan, in lite mode the commits' removes and the plan, and the
deletes. CPU (``time.process_time``, every thread of the process) and wall time per phase, medians, and per file.

    .venv/bin/python bench/vacuum_phases.py [--files 10000] [--partitions 100] [--repeats 5]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)

#: One run in a fresh process: argv = table copy, template, mode.
CODE = r"""
import json, shutil, sys, time
P, W = time.process_time, time.perf_counter
c0, w0 = P(), W()
from dbt_delta_optimize.delta.storage import LocalStorage
from dbt_delta_optimize.delta.vacuum_log import LogReads, range_files, read_state
from dbt_delta_optimize.ops import vacuum as V
from dbt_delta_optimize.plan.vacuum import is_hidden, plan_lite, plan_vacuum, protected_paths
out = {"import": (P() - c0, W() - w0)}
root, template, mode = sys.argv[1:4]
shutil.rmtree(root, ignore_errors=True)
shutil.copytree(template, root)
storage, now = LocalStorage(), int(time.time() * 1000) + 1000

def step(name, fn):
    c, w = P(), W()
    found = fn()
    out[name] = (P() - c, W() - w)
    return found

reads = LogReads(storage, root, keep_actions=mode == "lite")
live, dead = step("replay", lambda: read_state(reads, reads.listing().latest))
protected = step("protected", lambda: protected_paths(root, live, dead, now))
if mode == "full":
    skip = lambda n: is_hidden(n, ["p"]) and not n.endswith(".crc")
    listing = step("walk", lambda: list(storage.walk(root, skip)))
    expired = [t.path for t in dead]
    plan = step("plan", lambda: plan_vacuum(root, listing, protected=protected, delete_before=now,
                                            partition_columns=["p"], tombstone_paths=expired))
else:
    files = step("range", lambda: range_files(reads, 0, reads.listing().latest))
    plan = step("plan", lambda: plan_lite(root, files, protected=protected, delete_before=now, start=0,
                                          end=reads.listing().latest, sidecars=True))
deleted = step("delete", lambda: V._delete(storage, root, plan, None))[0]
out["files"] = deleted
print(json.dumps(out))
"""


def main() -> None:
    from vacuum import build_local

    ap = argparse.ArgumentParser()
    ap.add_argument("--files", type=int, default=10_000)
    ap.add_argument("--partitions", type=int, default=100)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    env = {**os.environ, "PYTHONPATH": ROOT}
    found: dict[tuple[str, str], list[tuple[float, float]]] = {}
    with tempfile.TemporaryDirectory(prefix="ddo-vacuum-phases-") as work:
        template = os.path.join(work, "template")
        build_local(template, args.files, args.partitions)
        for r in range(args.repeats):
            for mode in ("full", "lite") if r % 2 == 0 else ("lite", "full"):
                run = subprocess.run([sys.executable, "-c", CODE, os.path.join(work, "t"), template, mode],
                                     env=env, capture_output=True, text=True, check=True)  # fmt: skip
                out = json.loads(run.stdout)
                assert out.pop("files") == args.files, out
                for phase, value in out.items():
                    found.setdefault((mode, phase), []).append(tuple(value))
    print(f"{'mode':5} {'phase':10} {'cpu ms':>8} {'wall ms':>8} {'cpu us/file':>12}")
    for (mode, phase), values in found.items():
        cpu = statistics.median(v[0] for v in values)
        wall = statistics.median(v[1] for v in values)
        print(f"{mode:5} {phase:10} {cpu * 1e3:8.1f} {wall * 1e3:8.1f} {cpu * 1e6 / args.files:12.2f}")
    print("load average", os.getloadavg())


if __name__ == "__main__":
    main()
