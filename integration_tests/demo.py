"""`make demo`: the integration dbt project built on an embedded local Spark with Delta.

A script of the source tree (``python integration_tests/demo.py``), not of the package: it runs the dbt
project next to it, which a pip-installed wheel does not have.

Runs ``dbt deps``, ``dbt seed``, three ``dbt run``s (the incremental model appends small files
until auto compaction kicks in) and ``dbt run-operation optimize``, then prints per table the
files before and after and the decision taken, from target/delta_optimize_results.json (which
holds one invocation's records: it is read after each dbt command).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from typing import Any

PROJECT = os.path.dirname(os.path.abspath(__file__))


def demo_env(work: str) -> dict[str, str]:
    """Environment for dbt-spark `method: session` with Delta's jars and state under ``work``."""
    from dbt_delta_optimize.engine.session import default_jars_dir, delta_jars

    jars = delta_jars()
    if not jars:
        raise SystemExit(f"Delta's jars are missing in {default_jars_dir()}: run `make setup`.")
    env = dict(os.environ)
    env.update(
        DBT_PROFILES_DIR=PROJECT,
        DBT_DELTA_OPTIMIZE_JARS=",".join(jars),
        DBT_DELTA_OPTIMIZE_WAREHOUSE=os.path.join(work, "warehouse"),
        DBT_DELTA_OPTIMIZE_METASTORE=os.path.join(work, "metastore_db"),
        DBT_TARGET_PATH=os.path.join(work, "target"),
        DBT_LOG_PATH=os.path.join(work, "logs"),
        DBT_SEND_ANONYMOUS_USAGE_STATS="false",
        PYSPARK_PYTHON=sys.executable,
        PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""),
    )
    return env


def _results(env: dict[str, str]) -> list[dict[str, Any]]:
    """The records the last dbt command wrote (none if it wrote no file: the previous one stays)."""
    try:
        with open(os.path.join(env["DBT_TARGET_PATH"], "delta_optimize_results.json")) as fh:
            records: list[dict[str, Any]] = json.load(fh)
    except OSError:
        return []
    return records


def _dbt(env: dict[str, str], *args: str) -> None:
    t0 = time.time()
    proc = subprocess.run(
        [os.path.join(os.path.dirname(sys.executable), "dbt"), *args],
        cwd=PROJECT,
        env=env,
        capture_output=True,
        text=True,
    )
    for line in (proc.stdout + proc.stderr).splitlines():
        if "delta_optimize " in line:
            print("   " + line.split("delta_optimize ", 1)[1])
    print(f"$ dbt {' '.join(args)}  ({time.time() - t0:.0f}s, exit {proc.returncode})")
    if proc.returncode != 0:
        print((proc.stdout + proc.stderr)[-4000:])
        raise SystemExit(proc.returncode)


def main(argv: list[str] | None = None) -> int:
    from dbt_delta_optimize._version import __version__

    work = os.path.abspath(os.environ.get("DEMO_DIR", ".delta_optimize/demo"))
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    env = demo_env(work)
    print(f"dbt-delta-optimize {__version__} demo: dbt project {PROJECT}, state in {work}\n")
    _dbt(env, "deps")
    _dbt(env, "seed")
    results: list[dict[str, Any]] = []
    seen: set[str] = set()
    for args in (
        *(("run", "--vars", f"{{batch: {batch}}}") for batch in range(3)),
        ("run-operation", "optimize", "--args", "{select: '*'}"),
    ):
        _dbt(env, *args)
        new = [r for r in _results(env) if r.get("invocation_id") not in seen]
        seen.update(str(r.get("invocation_id")) for r in new)
        results.extend(new)
    print(f"\n{'step':<5} {'table':<28} {'decision':<26} {'files':>12} {'seconds':>8}")
    for i, r in enumerate(results, 1):
        files = f"{r.get('files_before', '-')} -> {r.get('files_after', '-')}"
        print(f"{i:<5} {r['table']:<28} {r.get('decision', r.get('status')):<26} {files:>12} {r.get('seconds', 0):>8}")
    from deltalake import DeltaTable

    table = os.path.join(work, "warehouse", "ddo_it.db", "events_incremental")
    dt = DeltaTable(table)
    ops = [
        h["operation"] + (" (auto)" if str(h.get("operationParameters", {}).get("auto")).lower() == "true" else "")
        for h in dt.history()
    ]
    # deltalake's own (DataFusion) scan: to_pyarrow_table() reads through a Python filesystem on Arrow's I/O
    # threads, which abort the process at exit now and then (delta-io/delta-rs#2184, apache/arrow#34314).
    import pyarrow as pa

    rows = pa.RecordBatchReader.from_stream(dt.scan(columns=["batch"])).read_all().num_rows
    print(f"\nevents_incremental: {rows} rows (3 runs x 60), {len(dt.file_uris())} files, history newest first: {ops}")
    ok = rows == 180
    print("demo OK" if ok else "demo FAILED: unexpected row count")
    return 0 if ok else 1


if __name__ == "__main__":
    from dbt_delta_optimize.process_exit import exit_process, status_of

    try:
        code = main()
    except SystemExit as exc:  # a failed dbt step
        code = status_of(exc)
    exit_process(code)
