"""Two source trees, the same object-store cases: does a change regress at a given round trip?

``bench/latency.py`` runs each case once, so its figures carry no spread of their own. This bench answers the one
question a single run cannot: is the tree under test slower than a base tree (an older checkout, e.g.
``git worktree add --detach ../base <ref>``) beyond the noise the two measure on the same machine? Both trees' CLIs
run in fresh processes through the same delay line (bench/delay_line.py) in front of moto or Azurite, on
server-side copies of one table, in alternating order, ``--repeats`` times:

- ``optimize``: ``dbt-delta-optimize optimize T --json`` on a copy of the template table;
- ``vacuum``: ``vacuum T --retain 0h --allow-short-retention --json`` on a copy of the table that tree's own
  optimize left in the same round (every input file tombstoned).

It prints each tree's median wall time, min-max, requests, and the median of the per-round ratios (test / base)
with their range: a ratio whose range lies above 1 is a regression beyond the measured noise.

    .venv/bin/python bench/ab_latency.py --base ../wt-base [--test .] [--rtt-ms 0] [--stores s3,azure]
        [--partitions 4] [--files 250] [--repeats 5] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from bench.delay_line import DelayLine  # noqa: E402
from bench.latency import Store, build, store  # noqa: E402

OPS = ("optimize", "vacuum")


def run_cli(line: DelayLine, st: Store, tree: str, args: list[str]) -> dict[str, Any]:
    """One fresh process of ``tree``'s CLI through the proxy: wall seconds and the requests the proxy saw."""
    env = {**st.env(line.endpoint), "PYTHONPATH": tree}
    line.reset()
    t0 = time.perf_counter()
    out = subprocess.run(
        [sys.executable, "-m", "dbt_delta_optimize.cli.main", *args, "--json"],
        env=env,
        cwd=tree,  # -m puts the working directory first: this tree's package runs
        capture_output=True,
        text=True,
        timeout=1800,
    )
    wall = time.perf_counter() - t0
    if out.returncode != 0:  # reported, and the round left out of the ratios (a loaded Azurite can time out)
        print(f"{tree}: {args[:2]} failed ({out.returncode}): {out.stderr.strip()[-300:]}", flush=True)
        return {"wall_s": None, "requests": len(line.requests()), "exit": out.returncode}
    return {"wall_s": wall, "requests": len(line.requests())}


def one_round(
    line: DelayLine, st: Store, trees: dict[str, str], r: int, tag: str
) -> dict[str, dict[str, dict[str, Any]]]:
    """optimize then vacuum, each tree on its own copy, the trees' order swapped every round."""
    order = list(trees) if r % 2 == 0 else list(trees)[::-1]
    out: dict[str, dict[str, dict[str, Any]]] = {name: {} for name in trees}
    for name in order:
        st.copy("template", f"{tag}r{r}-opt-{name}")
    for name in order:
        out[name]["optimize"] = run_cli(line, st, trees[name], ["optimize", st.url(f"{tag}r{r}-opt-{name}")])
    for name in order:
        st.copy(f"{tag}r{r}-opt-{name}", f"{tag}r{r}-vac-{name}")
    for name in order:
        vac = ["vacuum", st.url(f"{tag}r{r}-vac-{name}"), "--retain", "0h", "--allow-short-retention"]
        out[name]["vacuum"] = run_cli(line, st, trees[name], vac)
    return out


def summarize(cloud: str, rtt: float, rounds: list[dict[str, dict[str, dict[str, Any]]]]) -> list[dict[str, Any]]:
    rows = []
    for op in OPS:
        done = [r for r in rounds if r["base"][op]["wall_s"] is not None and r["test"][op]["wall_s"] is not None]
        walls = {name: [r[name][op]["wall_s"] for r in done] for name in ("base", "test")}
        ratios = [t / b for t, b in zip(walls["test"], walls["base"])]
        if not ratios:
            print(f"{cloud:>5} {rtt:>3.0f} ms {op:>8}: no round where both trees succeeded", flush=True)
            continue
        row = {
            "store": cloud,
            "rtt_ms": rtt,
            "op": op,
            **{f"{name}_wall_s": walls[name] for name in walls},
            **{f"{name}_requests": [r[name][op]["requests"] for r in done] for name in walls},
            "failed_rounds": len(rounds) - len(done),
            "ratio_median": statistics.median(ratios),
            "ratios": ratios,
        }
        rows.append(row)
        b, t = walls["base"], walls["test"]
        print(
            f"{cloud:>5} {rtt:>3.0f} ms {op:>8}: base {statistics.median(b):6.2f}s [{min(b):.2f}-{max(b):.2f}] "
            f"{statistics.median(row['base_requests']):5.0f} req | test {statistics.median(t):6.2f}s "
            f"[{min(t):.2f}-{max(t):.2f}] {statistics.median(row['test_requests']):5.0f} req | "
            f"test/base {row['ratio_median']:.2f} [{min(ratios):.2f}-{max(ratios):.2f}]",
            flush=True,
        )
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base", required=True, help="the base source tree (a checkout of the older ref)")
    ap.add_argument("--test", default=ROOT, help="the tree under test (default: this checkout)")
    ap.add_argument("--rtt-ms", default="0", help="round trips to add, comma separated (ms)")
    ap.add_argument("--stores", default="s3,azure")
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--files", type=int, default=250, help="files per partition (one append each)")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--json", dest="json_out", default=None)
    args = ap.parse_args()
    trees = {"base": os.path.abspath(args.base), "test": os.path.abspath(args.test)}
    rows: list[dict[str, Any]] = []
    for cloud in [s for s in args.stores.split(",") if s]:
        with store(cloud) as st:
            build(st, "template", args.partitions, args.files)
            for rtt in [float(x) for x in args.rtt_ms.split(",") if x]:
                with DelayLine(("127.0.0.1", st.port), one_way_s=rtt / 2000) as line:
                    rounds = [one_round(line, st, trees, r, f"{rtt:g}ms-") for r in range(args.repeats)]
                rows.extend(summarize(cloud, rtt, rounds))
    out = {"load_average": os.getloadavg(), "trees": trees, "repeats": args.repeats, "cases": rows}
    if args.json_out:
        with open(args.json_out, "w") as fh:
            json.dump(out, fh, indent=2)


if __name__ == "__main__":
    main()
