"""Benchmark: cost of the post-hook in a real `dbt run` (integration project, dbt-spark session).

Not a test. For each case, runs the same `dbt run -s events_incremental` with the post-hook and
without it (var use_post_hooks), alternating order over repeats, each on fresh state:
- nothing qualifies: the first build of the table (1-2 small files per partition, min_num_files 3);
- compaction runs: a third append after two hook-less runs (auto compaction compacts).
Prints median wall times and the overhead ratio.

    .venv/bin/python bench/dbt_hook.py --repeats 3
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "integration_tests"))  # the demo is a script of the source tree

from demo import PROJECT, demo_env  # noqa: E402


def dbt(env, *args) -> float:
    t0 = time.perf_counter()
    p = subprocess.run(
        [os.path.join(os.path.dirname(sys.executable), "dbt"), *args],
        cwd=PROJECT,
        env=env,
        capture_output=True,
        text=True,
    )
    if p.returncode != 0:
        raise SystemExit((p.stdout + p.stderr)[-3000:])
    return time.perf_counter() - t0


def fresh(base: str, name: str) -> dict:
    work = os.path.join(base, name)
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    env = demo_env(work)
    dbt(env, "seed")
    return env


def hook_seconds(env) -> float:
    """Seconds spent inside our post-hook calls, as recorded in target/delta_optimize_results.json."""
    path = os.path.join(env["DBT_TARGET_PATH"], "delta_optimize_results.json")
    try:
        with open(path) as fh:
            return sum(r.get("seconds", 0) for r in json.load(fh))
    except OSError:
        return 0.0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json", dest="json_out", default=None, help="also write the results to this file")
    args = ap.parse_args()
    base = tempfile.mkdtemp(prefix="ddo-hook-bench-")
    dbt(demo_env(os.path.join(base, "deps")), "deps")
    times = {(case, hooks): [] for case in ("nothing qualifies", "compaction runs") for hooks in (True, False)}
    inside = {case: [] for case in ("nothing qualifies", "compaction runs")}
    for r in range(args.repeats):
        order = (True, False) if r % 2 == 0 else (False, True)
        for hooks in order:
            flag = "true" if hooks else "false"
            env = fresh(base, f"q{r}{flag}")
            t = dbt(env, "run", "-s", "events_incremental", "--vars", f"{{batch: 0, use_post_hooks: {flag}}}")
            times[("nothing qualifies", hooks)].append(t)
            if hooks:
                inside["nothing qualifies"].append(hook_seconds(env))
            env = fresh(base, f"c{r}{flag}")
            for b in (0, 1):
                dbt(env, "run", "-s", "events_incremental", "--vars", f"{{batch: {b}, use_post_hooks: false}}")
            t = dbt(env, "run", "-s", "events_incremental", "--vars", f"{{batch: 2, use_post_hooks: {flag}}}")
            times[("compaction runs", hooks)].append(t)
            if hooks:
                inside["compaction runs"].append(hook_seconds(env))
            print(
                f"repeat {r} hooks={hooks}: nothing-qualifies {times[('nothing qualifies', hooks)][-1]:.1f}s, "
                f"compaction {times[('compaction runs', hooks)][-1]:.1f}s",
                flush=True,
            )
    print("\n| case | dbt run with hook | without | overhead (wall) | time inside the hook | hook / run |")
    print("|---|---|---|---|---|---|")
    out = {}
    for case in ("nothing qualifies", "compaction runs"):
        on, off = statistics.median(times[(case, True)]), statistics.median(times[(case, False)])
        h = statistics.median(inside[case])
        out[case] = {"with_hook_s": on, "without_s": off, "overhead_pct": 100 * (on - off) / off, "hook_s": h}
        out[case]["times_s"] = {"with": times[(case, True)], "without": times[(case, False)]}  #: per repeat
        print(f"| {case} | {on:.1f}s | {off:.1f}s | {100 * (on - off) / off:+.1f}% | {h:.2f}s | {100 * h / off:.1f}% |")
    if args.json_out:
        with open(args.json_out, "w") as fh:
            json.dump(out, fh, indent=2)
    print(
        "Wall-clock differences of one or two seconds are run-to-run noise (dbt and Spark start-up);"
        " the time inside the hook is measured by the hook itself."
    )
    shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
