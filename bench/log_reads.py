"""How often a run reads the log: each CLI operation in a fresh process behind a delay line in front of moto.

The table: P partitions x F files of a few rows, written by F appends of deltalake (one file per partition
each), with deltalake's checkpoint at version 99. Each operation runs in a fresh process
whose S3 endpoint is the delay line; the line counts every request by kind, and this prints them with the
round trips on the critical path, the log requests apart (LISTs of ``_delta_log``, GETs of its files, and
how many log files were read more than once), and the wall time.

    .venv/bin/python bench/log_reads.py [--partitions 4] [--files 120] [--rtt-ms 20]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import pyarrow as pa
from deltalake import write_deltalake

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from bench.delay_line import DelayLine, Request, critical_path
from tests.servers import moto_s3


def build(url: str, partitions: int, files: int) -> None:
    """``files`` appends (versions 0..files-1) by deltalake, which writes a checkpoint at versions 99, 199, ...
    (no ``delta.checkpointInterval``: our commit writer checkpoints every 10 versions, at 120, 130, ...)."""
    for f in range(files):
        ids = list(range(f * partitions, (f + 1) * partitions))
        data = pa.table({"id": ids, "v": [str(i) for i in ids], "part": [i % partitions for i in ids]})
        write_deltalake(url, data, partition_by=["part"], mode="append")


def summary(name: str, seen: list[Request], wall: float, out: dict[str, object]) -> None:
    kinds = Counter(r.kind for r in seen)
    log = [r for r in seen if "/_delta_log/" in r.path or r.path.endswith("/_delta_log")]
    log_lists = sum(1 for r in seen if r.kind == "LIST")
    log_gets = [r for r in log if r.kind in ("GET", "RANGE_GET", "HEAD")]
    per_file = Counter(r.path for r in log_gets if r.kind == "GET")
    again = {p.rsplit("/", 1)[-1]: n for p, n in per_file.items() if n > 1}
    row = {
        "wall_s": round(wall, 2),
        "requests": len(seen),
        "by_kind": dict(sorted(kinds.items())),
        "round_trips": critical_path(seen),
        "log_round_trips": critical_path(log),
        "lists": log_lists,
        "log_gets": sum(1 for r in log_gets if r.kind == "GET"),
        "log_range_gets": sum(1 for r in log_gets if r.kind == "RANGE_GET"),
        "log_heads": sum(1 for r in log_gets if r.kind == "HEAD"),
        "log_files_read_twice_or_more": len(again),
    }
    out[name] = row
    print(f"== {name}: {json.dumps(row)}")
    if again:
        print(f"   read again: {dict(list(sorted(again.items()))[:8])}{' ...' if len(again) > 8 else ''}")


def timeline(seen: list[Request]) -> None:
    """Every request but the data files' (their count is in the summary)."""
    t0 = min((r.start for r in seen), default=0.0)
    for r in sorted(seen, key=lambda r: r.start):
        if "/part=" in r.path:
            continue
        print(f"   {r.start - t0:7.3f} {r.end - t0:7.3f} {r.kind:9s} {r.path[-70:]}")


def run(line: DelayLine, env: dict[str, str], args: list[str], name: str, out: dict[str, object], show: bool) -> None:
    line.reset()
    cmd = [sys.executable, "-m", "dbt_delta_optimize.cli.main", *args]
    t = time.perf_counter()
    done = subprocess.run(cmd, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t
    if done.returncode != 0:
        print(done.stdout, done.stderr, file=sys.stderr)
        raise SystemExit(f"{name} failed ({done.returncode})")
    seen = line.requests()
    summary(name, seen, wall, out)
    if show:
        timeline(seen)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--files", type=int, default=120)
    ap.add_argument("--hook-commits", type=int, default=8)
    ap.add_argument("--rtt-ms", type=float, default=20.0)
    ap.add_argument("--only", default="", help="comma-separated: optimize,vacuum,auto-compact,history,health")
    ap.add_argument("--timeline", action="store_true", help="print every request")
    ap.add_argument("--json", dest="json_out", default=None)
    args = ap.parse_args()
    only = set(filter(None, args.only.split(",")))
    out: dict[str, object] = {}
    with moto_s3() as server:
        os.environ.update(server.env())
        bucket = server.new_bucket()
        opt, vac, hook = (f"s3://{bucket}/{n}" for n in ("opt", "vac", "hook"))
        t = time.perf_counter()
        wanted = {"optimize": opt, "history": opt, "vacuum": vac, "auto-compact": hook}
        need = {url for name, url in wanted.items() if not only or name in only}
        with ThreadPoolExecutor(3) as pool:
            shapes = [(opt, args.files), (vac, args.files - 20), (hook, args.hook_commits)]
            list(pool.map(lambda s: build(s[0], args.partitions, s[1]), [s for s in shapes if s[0] in need]))
        if vac in need:
            base = [sys.executable, "-m", "dbt_delta_optimize.cli.main"]
            subprocess.run([*base, "optimize", vac], check=True, capture_output=True)  # files to vacuum
            build(vac, args.partitions, 19)  # 19 commits after the optimize's checkpoint
        print(f"built in {time.perf_counter() - t:.1f} s")
        port = int(server.endpoint.rsplit(":", 1)[1])
        with DelayLine(("127.0.0.1", port), one_way_s=args.rtt_ms / 2000) as line:
            env = {**os.environ, "AWS_ENDPOINT_URL": line.endpoint}
            cases = {
                "auto-compact": ["auto-compact", hook, "--enable"],
                "history": ["history", opt],
                "optimize": ["optimize", opt],
                "vacuum": ["vacuum", vac, "--retain", "0h", "--allow-short-retention"],
            }
            for name, argv in cases.items():
                if not only or name in only:
                    run(line, env, argv, name, out, args.timeline)
    if args.json_out:
        with open(args.json_out, "w") as fh:
            json.dump(out, fh, indent=2)


if __name__ == "__main__":
    main()
