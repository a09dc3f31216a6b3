"""``maintain --dry-run`` over many tables on an object store behind a delay line, against the same over one table
(issue 44: over 50 tables at a 20 ms round trip it takes at most 5 times one table's).

The tables: one template of ``--partitions`` x ``--commits`` small files (deltalake appends), copied inside the
store to ``--tables`` names, so every table has the same log. Each run is a fresh process of our CLI through the
delay line (bench/delay_line.py), ``maintain --dry-run --json`` over the first table alone, then over all of them,
alternating which goes first over ``--repeats``; the figures are medians. Reported: wall time of the process, the
report's own ``wallSeconds`` (the process less its start-up), the requests the proxy saw and the round trips on
the critical path, and the ratios many / one.

    .venv/bin/python bench/maintain_latency.py [--tables 50] [--rtt-ms 20] [--repeats 3] [--stores s3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from bench.delay_line import DelayLine, critical_path  # noqa: E402
from bench.latency import CLI, build, run, store  # noqa: E402


def _once(line: DelayLine, st: Any, urls: list[str]) -> dict[str, Any]:
    t0, t1, seen, stdout = run(line, st, [*CLI, "maintain", *urls, "--dry-run", "--json"])
    report = json.loads(stdout)
    failed = [t["table"] for t in report["tables"] if t.get("status") == "failed"]
    if failed or len(report["tables"]) != len(urls):
        raise RuntimeError(f"maintain did not score every table: {failed or report['tables']}")
    return {
        "wall_s": round(t1 - t0, 3),
        "inside_s": float(report["wallSeconds"]),
        "requests": len(seen),
        "critical_path": critical_path(seen),
    }


def measure(st: Any, rtt_ms: float, urls: list[str], repeats: int) -> dict[str, Any]:
    runs: dict[str, list[dict[str, Any]]] = {"one": [], "many": []}
    with DelayLine(("127.0.0.1", st.port), one_way_s=rtt_ms / 2000) as line:
        for i in range(repeats):
            order = ["one", "many"] if i % 2 == 0 else ["many", "one"]
            for which in order:
                runs[which].append(_once(line, st, urls[:1] if which == "one" else urls))

    def med(which: str, key: str) -> float:
        return float(statistics.median(r[key] for r in runs[which]))

    out: dict[str, Any] = {"store": st.cloud, "rtt_ms": rtt_ms, "tables": len(urls), "runs": runs}
    for key in ("wall_s", "inside_s", "requests", "critical_path"):
        out[f"one_{key}"], out[f"many_{key}"] = med("one", key), med("many", key)
    out["many_vs_one"] = out["many_wall_s"] / out["one_wall_s"]
    out["many_vs_one_inside"] = out["many_inside_s"] / out["one_inside_s"]
    #: per-repeat ratios (repeat i of each ran back to back): this run's noise for bench/suite.py
    out["per_repeat"] = [m["wall_s"] / o["wall_s"] for m, o in zip(runs["many"], runs["one"])]
    print(
        f"{st.cloud:>5} {rtt_ms:>3.0f} ms maintain --dry-run: 1 table {out['one_wall_s']:.2f}s "
        f"({out['one_inside_s']:.2f}s inside, {out['one_requests']:.0f} req, {out['one_critical_path']:.0f} rt) | "
        f"{len(urls)} tables {out['many_wall_s']:.2f}s ({out['many_inside_s']:.2f}s inside, "
        f"{out['many_requests']:.0f} req, {out['many_critical_path']:.0f} rt) | "
        f"{out['many_vs_one']:.2f}x ({out['many_vs_one_inside']:.2f}x inside)",
        flush=True,
    )
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tables", type=int, default=50)
    ap.add_argument("--rtt-ms", default="20", help="round trips to add, comma separated (ms)")
    ap.add_argument("--stores", default="s3")
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--commits", type=int, default=8, help="appends per table (one small file per partition each)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json", dest="json_out", default=None)
    args = ap.parse_args()
    cases = []
    for cloud in [s for s in args.stores.split(",") if s]:
        with store(cloud) as st:
            t = time.perf_counter()
            build(st, "template", args.partitions, args.commits, checkpoint=False)
            for i in range(args.tables):
                st.copy("template", f"t{i:03d}")
            print(f"{cloud}: {args.tables} tables of {args.partitions} x {args.commits} files in "
                  f"{time.perf_counter() - t:.1f}s", flush=True)  # fmt: skip
            urls = [st.url(f"t{i:03d}") for i in range(args.tables)]
            for rtt in [float(x) for x in args.rtt_ms.split(",") if x]:
                cases.append(measure(st, rtt, urls, args.repeats))
    out = {
        "load_average": os.getloadavg(),
        "table": f"{args.partitions} partitions x {args.commits} appends of ~1 KB files (deltalake), no checkpoint",
        "cases": cases,
    }
    if args.json_out:
        with open(args.json_out, "w") as fh:
            json.dump(out, fh, indent=2)


if __name__ == "__main__":
    main()
