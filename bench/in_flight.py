"""Requests in flight behind a delay line: our CLI's optimize, VACUUM and ``maintain --dry-run`` on moto S3.

A table of P partitions x F small files (deltalake appends, one file per partition each) is written straight
to moto; each command then runs in a fresh process pointed at a delay line (``bench/delay_line.py``) in front
of it. Per command: wall time, requests by kind, the most requests in flight at once, and the mean in flight
while the data GETs ran (optimize) or the BATCH_DELETEs (VACUUM).

    .venv/bin/python bench/in_flight.py [--partitions 4] [--files 250] [--one-way-ms 10] [--tables 8]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from collections import Counter

import pyarrow as pa
from deltalake import write_deltalake

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from bench.delay_line import DelayLine, Request, critical_path
from tests.servers import moto_s3


def max_in_flight(requests: list[Request]) -> int:
    """The most requests whose [start, end] overlap at one instant."""
    events = sorted(e for r in requests for e in ((r.start, 1), (r.end, -1)))  # an end sorts before a start
    most = now = 0
    for _, step in events:
        now += step
        most = max(most, now)
    return most


def mean_in_flight(chosen: list[Request]) -> float:
    """Requests in flight on average, between the first one's start and the last one's end."""
    if not chosen:
        return 0.0
    span = max(r.end for r in chosen) - min(r.start for r in chosen)
    return sum(r.end - r.start for r in chosen) / span if span > 0 else float(len(chosen))


def build(url: str, partitions: int, files: int) -> None:
    for f in range(files):
        ids = list(range(f * 20 * partitions, (f + 1) * 20 * partitions))
        data = pa.table({"id": ids, "v": [str(i) * 3 for i in ids], "part": [i % partitions for i in ids]})
        write_deltalake(url, data, partition_by=["part"], mode="append")


def run(env: dict[str, str], *args: str) -> float:
    t = time.perf_counter()
    # run from the checkout itself: ``-m`` puts the working folder first on sys.path
    where = env.get("PYTHONPATH") or os.getcwd()
    subprocess.run([sys.executable, "-m", "dbt_delta_optimize.cli.main", *args], env=env, check=True, cwd=where,
                   capture_output=True)  # fmt: skip
    return time.perf_counter() - t


def report(name: str, wall: float, seen: list[Request], kinds: tuple[str, ...], *, data: bool = False) -> None:
    """One command's line; ``data``: only requests outside ``_delta_log`` count as the phase's."""
    counts = dict(sorted(Counter(r.kind for r in seen).items()))
    phase = [r for r in seen if r.kind in kinds and not (data and "_delta_log" in r.path)]
    span = max(r.end for r in phase) - min(r.start for r in phase) if phase else 0.0
    print(
        f"{name}: {wall:.2f}s, {len(seen)} requests {counts}, critical path {critical_path(seen)} round trips, "
        f"max in flight {max_in_flight(seen)}; {len(phase)} {'/'.join(kinds)}{' (data)' if data else ''} in "
        f"{span:.2f}s: max in flight {max_in_flight(phase)}, mean {mean_in_flight(phase):.1f}",
        flush=True,
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--files", type=int, default=250)
    ap.add_argument("--one-way-ms", type=float, default=10.0)
    ap.add_argument("--tables", type=int, default=8, help="tables for maintain --dry-run")
    ap.add_argument("--only", default="optimize,vacuum,maintain")
    ap.add_argument("--code", action="append", default=None,
                    help="PYTHONPATH of the commands run (repeatable: each checkout on a table of its own)")  # fmt: skip
    args = ap.parse_args()
    only = set(args.only.split(","))
    codes = args.code or [os.environ.get("PYTHONPATH", "")]
    with moto_s3() as server:
        os.environ.update(server.env())
        bucket = server.new_bucket()
        port = int(server.endpoint.rsplit(":", 1)[1])
        for n, code in enumerate(codes):
            print(f"-- {code}", flush=True)
            url = f"s3://{bucket}/t{n}"
            if only & {"optimize", "vacuum"}:
                build(url, args.partitions, args.files)
            with DelayLine(("127.0.0.1", port), one_way_s=args.one_way_ms / 1000) as line:
                env = {**os.environ, "AWS_ENDPOINT_URL": line.endpoint, "PYTHONPATH": code}
                if "optimize" in only:
                    line.reset()
                    wall = run(env, "optimize", url, "--min-file-size", "256m", "--max-file-size", "256m")
                    report("optimize", wall, line.requests(), ("GET",), data=True)
                if "vacuum" in only:
                    line.reset()
                    wall = run(env, "vacuum", url, "--retain", "0h", "--allow-short-retention")
                    report("vacuum --retain 0h", wall, line.requests(), ("BATCH_DELETE", "DELETE"))
                if "maintain" in only:
                    tables = [f"s3://{bucket}/m{n}-{i}" for i in range(args.tables)]
                    for t in tables:
                        build(t, 2, 10)
                    line.reset()
                    wall = run(env, "maintain", *tables[:1], "--dry-run")
                    report("maintain --dry-run, 1 table", wall, line.requests(), ("GET", "LIST"))
                    line.reset()
                    wall = run(env, "maintain", *tables, "--dry-run")
                    report(f"maintain --dry-run, {len(tables)} tables", wall, line.requests(), ("GET", "LIST"))


if __name__ == "__main__":
    main()
