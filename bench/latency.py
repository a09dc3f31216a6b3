"""Object stores at the speed of their round trips: our CLI and delta-rs behind a delay line (bench/delay_line.py)
in front of moto (S3) and Azurite (Azure Blob), at a configurable round trip.

On loopback a request costs well under a millisecond, so the other benches measure CPU; a real bucket costs
10-50 ms per request. Here every byte waits half the round trip in each direction, and the proxy records every
request (kind, start, end). The table: ``--partitions`` x ``--files`` files of about 1 KB, written by deltalake
appends (one file per partition each), with a checkpoint at 80% of the appends. Each operation runs in a fresh
process on its own server-side copy of the table, through the proxy:

- ``optimize``: ``dbt-delta-optimize optimize T --json`` against delta-rs ``DeltaTable(T).optimize.compact()``;
- ``vacuum``: ``dbt-delta-optimize vacuum T --retain 0h --json`` against delta-rs ``vacuum(full=True)``, both on
  copies of the table our optimize left (every input file tombstoned);
- ``hook``: ``dbt-delta-optimize auto-compact T --enable --json`` on an 8-commit table with nothing to compact
  (the post-hook's decision; delta-rs has none);
- ``posthook``: the dbt hooks' pair in one fresh process, as the bridge runs them (``ops.table.pin_version``, a
  model's append, ``ops.table.open_pinned`` and the decision), on a copy of that table: the requests and round
  trips of the post-hook alone, after its pre-hook (issue 44: at most 3 round trips).

Each run reports its wall time (the whole process), requests by kind, round trips on the critical path, and the
same split by phase: ours by the phase start times its ``--json`` metrics give (``requests.phases``: startup is
the process before the operation opened the table), delta-rs as one phase. Requests are split into the log's
and the data's too, and for ours the proxy's count is set beside our own metrics' count (which leaves out
deltalake's log reads).

    .venv/bin/python bench/latency.py [--rtt-ms 0,20,50] [--stores s3,azure] [--partitions 4] [--files 50]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from bench.delay_line import DelayLine, Request, critical_path  # noqa: E402
from tests.servers import azurite, moto_s3  # noqa: E402

#: time.time() - time.monotonic(): the proxy stamps requests on the monotonic clock, our metrics on the wall clock
WALL = time.time() - time.monotonic()
CLI = [sys.executable, "-m", "dbt_delta_optimize.cli.main"]
DELTA_RS = {
    "optimize": "from deltalake import DeltaTable;import sys;DeltaTable(sys.argv[1]).optimize.compact()",
    "vacuum": (
        "from deltalake import DeltaTable;import sys;DeltaTable(sys.argv[1]).vacuum(retention_hours=0,"
        "enforce_retention_duration=False,dry_run=False,full=True)"
    ),
}


#: The hooks' pair in one process (the bridge's calls without dbt): the post-hook's window is printed.
POSTHOOK = """
import json, sys, time
import pyarrow as pa
from deltalake import write_deltalake
from dbt_delta_optimize.ops.auto_compact import auto_compact
from dbt_delta_optimize.ops.table import PinnedSnapshots, open_pinned, pin_version
url = sys.argv[1]
pinned = PinnedSnapshots()
since = pin_version(url, pinned)
ids = list(range(10**6, 10**6 + 8))
write_deltalake(url, pa.table({"id": ids, "v": [f"value-{i}" for i in ids], "part": [i % 4 for i in ids]}),
                partition_by=["part"], mode="append")
t0 = time.time()
r = auto_compact(None, open_pinned(url, pinned, since), since, enabled=True, decide_only=True)
t1 = time.time()
print(json.dumps({"start": t0, "end": t1, "status": r.status, "requests": r.requests}))
"""


@dataclass
class Store:
    """One server (moto or Azurite), a bucket or container on it, and how to reach it directly or via a proxy."""

    cloud: str  #: s3 or azure
    server: Any
    bucket: str

    @property
    def direct(self) -> str:
        return str(self.server.endpoint if self.cloud == "s3" else self.server.url)

    @property
    def port(self) -> int:
        return int(self.direct.rsplit(":", 1)[1])

    def url(self, name: str) -> str:
        return f"{'s3' if self.cloud == 's3' else 'az'}://{self.bucket}/{name}"

    def env(self, endpoint: str | None = None) -> dict[str, str]:
        """The environment that reaches the store at ``endpoint`` (default: directly)."""
        env = {**os.environ, **self.server.env(), "PYTHONPATH": ROOT}
        key = "AWS_ENDPOINT_URL" if self.cloud == "s3" else "AZURITE_BLOB_STORAGE_URL"
        env[key] = endpoint or self.direct
        return env

    def obstore(self) -> Any:
        from obstore.store import AzureStore, S3Store

        env = self.server.env()
        if self.cloud == "s3":
            return S3Store(self.bucket, endpoint=self.direct, access_key_id=env["AWS_ACCESS_KEY_ID"],
                           secret_access_key=env["AWS_SECRET_ACCESS_KEY"], region="us-east-1",
                           client_options={"allow_http": True})  # fmt: skip
        account = env["AZURE_STORAGE_ACCOUNT_NAME"]
        return AzureStore(self.bucket, account_name=account, account_key=env["AZURE_STORAGE_ACCOUNT_KEY"],
                          endpoint=f"{self.direct}/{account}", client_options={"allow_http": True})  # fmt: skip

    def copy(self, src: str, dst: str) -> None:
        """A server-side copy of every object under ``src`` to ``dst`` (names and content kept)."""
        import obstore

        store = self.obstore()
        keys = [m["path"] for chunk in obstore.list(store, src + "/", chunk_size=1000) for m in chunk]
        with ThreadPoolExecutor(16) as pool:
            list(pool.map(lambda k: obstore.copy(store, k, dst + k[len(src) :]), keys))


@contextmanager
def store(cloud: str) -> Iterator[Store]:
    if cloud == "s3":
        with moto_s3() as server:
            yield Store(cloud, server, server.new_bucket())
    else:
        with azurite() as server:
            yield Store(cloud, server, server.new_container())


def build(st: Store, name: str, partitions: int, files: int, checkpoint: bool = True) -> None:
    """``files`` appends by deltalake, one ~1 KB file per partition each; a checkpoint at 80% of them."""
    from deltalake import DeltaTable, write_deltalake

    os.environ.update({k: v for k, v in st.env().items() if k != "PYTHONPATH"})
    url = st.url(name)
    for f in range(files):
        ids = list(range(f * partitions * 5, (f + 1) * partitions * 5))
        data = pa.table({"id": ids, "v": [f"value-{i:06d}" for i in ids], "part": [i % partitions for i in ids]})
        write_deltalake(url, data, partition_by=["part"], mode="append")
        if checkpoint and f == int(files * 0.8):
            DeltaTable(url).create_checkpoint()


def _children_cpu() -> float:
    import resource

    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


#: CPU seconds (user + sys) of the last fresh process: wall times mean little when other work shares the machine
LAST_CPU: list[float] = [0.0]


def run(line: DelayLine, st: Store, cmd: list[str]) -> tuple[float, float, list[Request], str]:
    """A fresh process through the proxy: (wall start, wall end, the requests the proxy saw, its stdout)."""
    line.reset()
    cpu, t0 = _children_cpu(), time.time()
    out = subprocess.run(cmd, env=st.env(line.endpoint), capture_output=True, text=True, timeout=1800)
    t1 = time.time()
    LAST_CPU[0] = _children_cpu() - cpu
    if out.returncode != 0:
        raise RuntimeError(f"{cmd[:5]} failed ({out.returncode}): {out.stderr[-2000:]}")
    return t0, t1, line.requests(), out.stdout


def summary(requests: list[Request], start: float, end: float) -> dict[str, Any]:
    """Wall time, requests by kind (the log's and the data's), round trips on the critical path."""
    log = Counter(r.kind for r in requests if "/_delta_log/" in r.path)
    data = Counter(r.kind for r in requests if "/_delta_log/" not in r.path)
    return {
        "wall_s": round(end - start, 3),
        "requests": len(requests),
        "by_kind": dict(Counter(r.kind for r in requests)),
        "log": dict(log),
        "data": dict(data),
        "critical_path": critical_path(requests),
    }


def phases(requests: list[Request], t0: float, t1: float, metrics: dict[str, Any]) -> list[dict[str, Any]]:
    """Our run split by the phase start times of its metrics (startup: the process before it opened the table)."""
    marks = [("startup", t0), *((p["phase"], p["startS"]) for p in metrics["phases"]), ("exit", metrics["endS"])]
    out = []
    for i, (name, start) in enumerate(marks):
        end = marks[i + 1][1] if i + 1 < len(marks) else t1
        inside = [r for r in requests if start <= r.start + WALL < end]
        out.append({"phase": name, **summary(inside, start, end)})
    return out


def ours(line: DelayLine, st: Store, args: list[str]) -> dict[str, Any]:
    t0, t1, seen, stdout = run(line, st, [*CLI, *args, "--json"])
    result = json.loads(stdout)
    reported = result.get("requests") or {}
    return {
        **summary(seen, t0, t1),
        "cpu_s": round(LAST_CPU[0], 3),
        "phases": phases(seen, t0, t1, reported),
        "reported": {"total": reported.get("total"), "by_kind": reported.get("byKind")},
        "result": {k: result.get(k) for k in ("numFilesRemoved", "numFilesAdded", "filesDeleted", "status")},
    }


def delta_rs(line: DelayLine, st: Store, op: str, url: str) -> dict[str, Any]:
    t0, t1, seen, _ = run(line, st, [sys.executable, "-c", DELTA_RS[op], url])
    return {**summary(seen, t0, t1), "cpu_s": round(LAST_CPU[0], 3)}


def case(st: Store, rtt_ms: float, template: str, hook_table: str, files: int, tag: str) -> list[dict[str, Any]]:
    """optimize, vacuum and the hook's decision at one round trip, ours and delta-rs, each on its own copy."""
    out = []
    with DelayLine(("127.0.0.1", st.port), one_way_s=rtt_ms / 2000) as line:
        for engine in ("delta-rs", "ours"):  # delta-rs first: its copy is made while nothing else runs
            st.copy(template, f"{tag}-opt-{engine}")
        rs = delta_rs(line, st, "optimize", st.url(f"{tag}-opt-delta-rs"))
        our = ours(line, st, ["optimize", st.url(f"{tag}-opt-ours")])
        out.append(_case(st, rtt_ms, "optimize", files, our, rs))
        for engine in ("delta-rs", "ours"):  # both vacuum what our optimize left
            st.copy(f"{tag}-opt-ours", f"{tag}-vac-{engine}")
        rs = delta_rs(line, st, "vacuum", st.url(f"{tag}-vac-delta-rs"))
        our = ours(line, st, ["vacuum", st.url(f"{tag}-vac-ours"), "--retain", "0h", "--allow-short-retention"])
        out.append(_case(st, rtt_ms, "vacuum", files, our, rs))
        hook = ours(line, st, ["auto-compact", st.url(hook_table), "--enable"])
        out.append(_case(st, rtt_ms, "hook", files, hook, None))
        st.copy(hook_table, f"{tag}-posthook")
        out.append(_case(st, rtt_ms, "posthook", files, posthook(line, st, st.url(f"{tag}-posthook")), None))
    return out


def posthook(line: DelayLine, st: Store, url: str) -> dict[str, Any]:
    """The post-hook after its pre-hook in the same process: the requests between the two marks it prints."""
    _, _, seen, stdout = run(line, st, [sys.executable, "-c", POSTHOOK, url])
    marks = json.loads(stdout.strip().splitlines()[-1])
    inside = [r for r in seen if marks["start"] <= r.start + WALL <= marks["end"]]
    reported = marks.get("requests") or {}
    return {
        **summary(inside, marks["start"], marks["end"]),
        "reported": {"total": reported.get("total"), "by_kind": reported.get("byKind")},
        "result": {"status": marks["status"]},
    }


def _case(
    st: Store, rtt_ms: float, op: str, files: int, our: dict[str, Any], rs: dict[str, Any] | None
) -> dict[str, Any]:
    row: dict[str, Any] = {"store": st.cloud, "rtt_ms": rtt_ms, "op": op, "ours": our, "delta-rs": rs}
    if rs is not None:
        row["ours_vs_delta_rs"] = our["wall_s"] / rs["wall_s"]
        row["requests_ours_vs_delta_rs"] = our["requests"] / max(1, rs["requests"])
    if op == "optimize":
        row["requests_per_input_file"] = our["requests"] / files
    line = f"{st.cloud:>5} {rtt_ms:>3.0f} ms {op:>8}: ours {our['wall_s']:6.2f}s {our['requests']:5d} req " \
           f"{our['critical_path']:4d} rt"  # fmt: skip
    if rs is not None:
        line += f" | delta-rs {rs['wall_s']:6.2f}s {rs['requests']:5d} req {rs['critical_path']:4d} rt"
        line += f" | {row['ours_vs_delta_rs']:.2f}x"
    print(line, flush=True)
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rtt-ms", default="0,20,50", help="round trips to add, comma separated (ms)")
    ap.add_argument("--stores", default="s3,azure")
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--files", type=int, default=50, help="files per partition (one append each)")
    ap.add_argument("--hook-commits", type=int, default=8)
    ap.add_argument("--json", dest="json_out", default=None)
    args = ap.parse_args()
    rtts = [float(x) for x in args.rtt_ms.split(",") if x]
    results: list[dict[str, Any]] = []
    for cloud in [s for s in args.stores.split(",") if s]:
        with store(cloud) as st:
            t = time.perf_counter()
            build(st, "template", args.partitions, args.files)
            build(st, "hook", args.partitions, args.hook_commits, checkpoint=False)
            print(
                f"{cloud}: {args.partitions} x {args.files} files built in {time.perf_counter() - t:.1f}s", flush=True
            )
            for i, rtt in enumerate(rtts):
                results.extend(case(st, rtt, "template", "hook", args.partitions * args.files, f"r{i}"))
    out = {
        "load_average": os.getloadavg(),
        "table": f"{args.partitions} partitions x {args.files} files of ~1 KB, deltalake appends, checkpoint at 80%",
        "hook_table": f"{args.partitions} partitions, {args.hook_commits} commits, nothing to compact",
        "cases": results,
    }
    if args.json_out:
        with open(args.json_out, "w") as fh:
            json.dump(out, fh, indent=2)


if __name__ == "__main__":
    main()
