"""VACUUM of a table with many tombstoned files: ours vs delta-rs (each in a fresh process) and delta-spark.

A template table is written once by hand, issue 45's shape: ``--files`` tiny Parquet files in ``--partitions``
partition folders added in version 0, all of them removed in version 1 by a compaction that adds one file per
partition (``--partitions 0``: an unpartitioned table whose compaction leaves one file). Each run vacuums a
fresh copy (mtimes kept) with ``RETAIN 0 HOURS``, each engine in a fresh process, in alternating order (its
wall time, the time it measured inside and its CPU time): ours in full and lite mode, delta-rs's
``DeltaTable.vacuum`` with ``full=True`` (it lists, as our full mode does) and by default (it reads the log,
as our lite mode does), our CLI in both modes, and delta-spark's ``VACUUM`` in a warm session (``--spark``).
Every engine must leave exactly the compacted files. Each of our modes is compared with both delta-rs modes.
``--s3-files`` adds the same on a moto S3 server (ours vs delta-rs, in-process times of fresh processes).

    .venv/bin/python bench/vacuum.py --files 10000 --partitions 100 --s3-files 0 --repeats 5   # issue 45's case
"""

from __future__ import annotations

import argparse
import compileall
import io
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

SCHEMA = json.dumps(
    {
        "type": "struct",
        "fields": [
            {"name": "id", "type": "long", "nullable": True, "metadata": {}},
            {"name": "p", "type": "integer", "nullable": True, "metadata": {}},
        ],
    }
)


def _ours(mode: str) -> str:
    return (
        "import sys,time;t=time.perf_counter();from dbt_delta_optimize import vacuum;"
        f"m=vacuum(None,sys.argv[1],retain='0h',mode='{mode}',allow_short_retention=True);"
        "print(time.perf_counter()-t, m.files_deleted)"
    )


def _delta_rs(full: bool) -> str:
    return (
        "import sys,time;t=time.perf_counter();from deltalake import DeltaTable;"
        "d=DeltaTable(sys.argv[1]).vacuum(retention_hours=0,enforce_retention_duration=False,dry_run=False,"
        f"full={full});print(time.perf_counter()-t, len(d))"
    )


def _cli(mode: str) -> list[str]:
    exe = os.path.join(os.path.dirname(sys.executable), "dbt-delta-optimize")
    return [exe, "vacuum", "--retain", "0h", "--allow-short-retention", "--mode", mode, "--json"]


#: Each engine in a fresh process (its command; the table's path is appended). delta-rs's default vacuum
#: reads the log (like lite mode); full=True lists.
ENGINES = {
    "ours_full": [sys.executable, "-c", _ours("full")],
    "delta_rs_full": [sys.executable, "-c", _delta_rs(True)],
    "ours_lite": [sys.executable, "-c", _ours("lite")],
    "delta_rs_default": [sys.executable, "-c", _delta_rs(False)],
    "ours_cli": _cli("full"),
    "ours_cli_lite": _cli("lite"),
}
#: Engines of the object-store case (no CLI there).
API_ENGINES = ("ours_full", "delta_rs_full", "ours_lite", "delta_rs_default")


def _parquet() -> bytes:
    buf = io.BytesIO()
    pq.write_table(pa.table({"id": pa.array([1], pa.int64())}), buf)
    return buf.getvalue()


def _folder(i: int, partitions: int) -> str:
    return f"p={i % partitions}/" if partitions else ""


def log_and_files(n: int, partitions: int = 0) -> tuple[dict[str, bytes], list[str]]:
    """The two commits of a table with ``n`` files (``partitions`` folders) compacted into one file per
    partition, and the data file names (the live ones last)."""
    now = int(time.time() * 1000)
    names = [f"{_folder(i, partitions)}part-{i:05d}-{uuid.uuid4()}.parquet" for i in range(n)]
    live = [f"{_folder(i, partitions)}part-{n + i:05d}-{uuid.uuid4()}.parquet" for i in range(max(1, partitions))]
    size = len(_parquet())

    def values(name: str) -> dict[str, str]:
        return {"p": name.split("/", 1)[0][2:]} if partitions else {}

    def add(name: str) -> str:
        a = {"path": name, "size": size, "partitionValues": values(name), "modificationTime": now,
             "dataChange": True}  # fmt: skip
        return json.dumps({"add": a})

    def remove(name: str) -> str:
        r = {"path": name, "deletionTimestamp": now, "dataChange": False, "extendedFileMetadata": True,
             "partitionValues": values(name), "size": size}  # fmt: skip
        return json.dumps({"remove": r})

    info = {"timestamp": now, "operation": "OPTIMIZE", "operationParameters": {}, "isBlindAppend": False}
    v0 = [
        json.dumps({"protocol": {"minReaderVersion": 1, "minWriterVersion": 2}}),
        json.dumps(
            {
                "metaData": {
                    "id": str(uuid.uuid4()),
                    "format": {"provider": "parquet", "options": {}},
                    "schemaString": SCHEMA,
                    "partitionColumns": ["p"] if partitions else [],
                    "configuration": {},
                    "createdTime": now,
                }
            }
        ),
        *(add(x) for x in names),
    ]
    v1 = [json.dumps({"commitInfo": info}), *(remove(x) for x in names), *(add(x) for x in live)]
    log = {
        "_delta_log/00000000000000000000.json": ("\n".join(v0) + "\n").encode(),
        "_delta_log/00000000000000000001.json": ("\n".join(v1) + "\n").encode(),
    }
    return log, [*names, *live]


def build_local(path: str, n: int, partitions: int = 0) -> set[str]:
    """The template table; returns the files a VACUUM must leave (the compacted ones)."""
    log, names = log_and_files(n, partitions)
    os.makedirs(os.path.join(path, "_delta_log"))
    data = _parquet()
    for rel, payload in log.items():
        with open(os.path.join(path, rel), "wb") as fh:
            fh.write(payload)
    for i in range(partitions):
        os.makedirs(os.path.join(path, f"p={i}"))
    for name in names:
        with open(os.path.join(path, name), "wb") as fh:
            fh.write(data)
    return set(names[n:])


def left(path: str) -> set[str]:
    """The data files left (partition folders entered)."""
    out = set()
    for name in os.listdir(path):
        if name.startswith(("_", ".")):
            continue
        if os.path.isdir(os.path.join(path, name)):
            out.update(f"{name}/{f}" for f in os.listdir(os.path.join(path, name)) if not f.startswith((".", "_")))
        else:
            out.add(name)
    return out


#: CPU seconds (user + sys) of each fresh process: a second view when other work shares the machine
CPU: dict[str, list[float]] = {}


def _children_cpu() -> float:
    import resource

    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def fresh(command: list[str], path: str, env: dict[str, str] | None = None, name: str = "") -> tuple[float, float]:
    """(wall seconds of a fresh process, seconds it measured inside: the CLI's ``durationS``)."""
    t, c = time.perf_counter(), _children_cpu()
    out = subprocess.run([*command, path], check=True, capture_output=True, text=True, env=env)
    wall = time.perf_counter() - t
    CPU.setdefault(name, []).append(_children_cpu() - c)
    if out.stdout.lstrip().startswith("{"):
        return wall, float(json.loads(out.stdout)["durationS"])
    return wall, float(out.stdout.split()[0])


#: (ours, delta-rs) pairs compared: each of our modes against both of delta-rs's
PAIRS = [
    (ours, theirs)
    for ours in ("ours_full", "ours_lite", "ours_cli", "ours_cli_lite")
    for theirs in ("delta_rs_full", "delta_rs_default")
]


def _cpu_ratios() -> dict[str, float]:
    med = {k: statistics.median(v) for k, v in CPU.items() if v}
    out = {f"cpu_{k}_s": v for k, v in med.items()}
    for ours, theirs in PAIRS:
        if ours in med and theirs in med:
            out[f"cpu_{ours}_vs_{theirs}"] = med[ours] / med[theirs]
    CPU.clear()
    return out


def _ratios(med: dict[str, float]) -> dict[str, float]:
    out = {
        "inside_vs_delta_rs": med["ours_full_inside"] / med["delta_rs_full_inside"],
        "fresh_vs_delta_rs": med["ours_full_fresh"] / med["delta_rs_full_fresh"],
        "lite_inside_vs_delta_rs_default": med["ours_lite_inside"] / med["delta_rs_default_inside"],
        "lite_fresh_vs_delta_rs_default": med["ours_lite_fresh"] / med["delta_rs_default_fresh"],
    }
    for ours, theirs in PAIRS:  # every mode of ours against both of delta-rs's, fresh processes' wall time
        if f"{ours}_fresh" in med and f"{theirs}_fresh" in med:
            out[f"fresh_{ours}_vs_{theirs}"] = med[f"{ours}_fresh"] / med[f"{theirs}_fresh"]
    return out


def _run_engines(
    r: int, env: dict[str, str], fresh_copy: Any, times: dict[str, list[float]], engines: tuple[str, ...]
) -> dict[str, int]:
    """Every engine once on its own copy (order alternating by repeat); the data files each one left."""
    left_by: dict[str, int] = {}
    names = list(engines) if r % 2 == 0 else list(reversed(engines))
    for name in names:
        target, count = fresh_copy(f"{name}-{r}")
        wall, inside = fresh(ENGINES[name], target, env, name)
        times.setdefault(f"{name}_fresh", []).append(wall)
        times.setdefault(f"{name}_inside", []).append(inside)
        left_by[name] = count()
    return left_by


def local_case(n: int, partitions: int, repeats: int, spark: bool, work: str) -> dict[str, object]:
    template = os.path.join(work, "template")
    kept = build_local(template, n, partitions)
    times: dict[str, list[float]] = {}
    env = {**os.environ, "PYTHONPATH": ROOT}

    def copy(name: str) -> tuple[str, Any]:
        path = os.path.join(work, name)
        shutil.copytree(template, path)
        return path, lambda: left(path)

    for r in range(repeats):
        left_by = _run_engines(r, env, copy, times, tuple(ENGINES))
        assert all(v == kept for v in left_by.values()), {k: len(v) for k, v in left_by.items()}
        print(f"repeat {r}: " + ", ".join(f"{k} {v[-1]:.2f}s" for k, v in times.items()), flush=True)
    med = {k: statistics.median(v) for k, v in times.items()}
    out: dict[str, object] = {
        "case": "local", "files": n, "partitions": partitions, "median_s": med, "times_s": times, **_ratios(med),
    }  # fmt: skip
    out["cli_vs_delta_rs"] = med["ours_cli_fresh"] / med["delta_rs_full_fresh"]
    out["cli_vs_delta_rs_default"] = med["ours_cli_fresh"] / med["delta_rs_default_fresh"]
    out.update(_cpu_ratios())
    out["load_average"] = os.getloadavg()
    if spark:
        out.update(spark_case(template, work, repeats, med["ours_full_inside"], kept))
    return out


def spark_case(template: str, work: str, repeats: int, ours_inside: float, kept: set[str]) -> dict[str, object]:
    from dbt_delta_optimize.engine.session import get_spark

    session = get_spark()
    session.sparkContext.setLogLevel("FATAL")
    session.conf.set("spark.databricks.delta.retentionDurationCheck.enabled", "false")
    times = []
    for r in range(repeats):
        path = os.path.join(work, f"spark-{r}")
        shutil.copytree(template, path)
        t = time.perf_counter()
        session.sql(f"VACUUM '{path}' RETAIN 0 HOURS").collect()
        times.append(time.perf_counter() - t)
        assert left(path) == kept
        print(f"repeat {r}: delta-spark (warm) {times[-1]:.2f}s", flush=True)
    med = statistics.median(times)
    return {"delta_spark_warm_s": med, "inside_vs_delta_spark": ours_inside / med}


def s3_case(n: int, repeats: int) -> dict[str, object]:
    import obstore
    from obstore.store import S3Store

    from tests.servers import moto_s3

    with moto_s3() as server:
        env = {**os.environ, **server.env(), "PYTHONPATH": ROOT}
        os.environ.update(server.env())
        bucket = server.new_bucket()
        log, names = log_and_files(n)
        data = _parquet()
        store = S3Store(bucket, endpoint=server.env()["AWS_ENDPOINT_URL"], client_options={"allow_http": True},
                        access_key_id="x", secret_access_key="x", region="us-east-1")  # fmt: skip
        times: dict[str, list[float]] = {}

        def upload(prefix: str) -> None:
            from concurrent.futures import ThreadPoolExecutor

            with ThreadPoolExecutor(16) as pool:
                list(pool.map(lambda kv: obstore.put(store, f"{prefix}/{kv[0]}", kv[1]),
                              [*log.items(), *((name, data) for name in names)]))  # fmt: skip

        def copy(prefix: str) -> tuple[str, object]:
            upload(prefix)

            def count() -> int:  # obstore's prefixes are whole path segments: list the folder
                listed = [m["path"] for c in obstore.list(store, prefix + "/", chunk_size=1000) for m in c]
                return sum(1 for p in listed if p.rsplit("/", 1)[-1].startswith("part-"))

            return f"s3://{bucket}/{prefix}", count

        for r in range(repeats):
            left_by = _run_engines(r, env, copy, times, API_ENGINES)
            assert set(left_by.values()) == {1}, left_by
            print(f"repeat {r}: " + ", ".join(f"{k} {v[-1]:.2f}s" for k, v in times.items()), flush=True)
    med = {k: statistics.median(v) for k, v in times.items()}
    return {"case": "s3", "files": n, "median_s": med, **_ratios(med), **_cpu_ratios(), "load_average": os.getloadavg()}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--files", type=int, default=10_000, help="0: no local case")
    ap.add_argument("--s3-files", type=int, default=5_000, help="0: no S3 case")
    ap.add_argument("--partitions", type=int, default=100, help="partition folders of the local case (0: none)")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--spark", action="store_true", help="also delta-spark's VACUUM (warm session)")
    ap.add_argument("--json", dest="json_out", default=None)
    args = ap.parse_args()
    # Our fresh processes load the package's bytecode as an install has it (``make``'s bytecode step): in a
    # checkout edited since, with PYTHONDONTWRITEBYTECODE set, each would compile its imports (60-80 ms).
    compileall.compile_dir(os.path.join(ROOT, "dbt_delta_optimize"), quiet=1)
    results = []
    if args.files:
        with tempfile.TemporaryDirectory(prefix="ddo-vacuum-bench-") as work:
            results.append(local_case(args.files, args.partitions, args.repeats, args.spark, work))
    if args.s3_files:
        results.append(s3_case(args.s3_files, args.repeats))
    print(json.dumps(results, indent=2))
    if args.json_out:
        with open(args.json_out, "w") as fh:
            json.dump(results, fh, indent=2)


if __name__ == "__main__":
    main()
