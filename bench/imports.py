"""The fixed cost of a process: what each CLI command imports before and while it works, in fresh processes.

Every case is a fresh ``python -X importtime`` process running the console script's ``main`` (or an import) on a
small local table, the work itself negligible: its imports are the sum of the interpreter's ``importtime`` self
times (the interpreter's own start included), its wall and CPU time the whole process. The reference is delta-rs's
fixed cost, a fresh ``import deltalake``, measured in the same rounds (alternating order, medians). Bytecode is
cached in a temporary ``PYTHONPYCACHEPREFIX`` and warmed once, as after ``pip install``: the figures do not
depend on ``PYTHONDONTWRITEBYTECODE`` or on a stale ``__pycache__``.

Two tables: ``json`` (a JSON-only log: a plain VACUUM needs no Arrow) and ``checkpoint`` (a Parquet checkpoint:
the log replay reads it with pyarrow). Each case also lists the heavy libraries the process loaded.

    PYTHONPATH=$PWD .venv/bin/python bench/imports.py [--repeats 5] [--json out.json]
    PYTHONPATH=$PWD .venv/bin/python bench/imports.py --base ../older-checkout   # the vacuum cases, before/after
    PYTHONPATH=$PWD .venv/bin/python bench/suite.py --only imports
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

#: Libraries whose presence says what a process paid for (listed per case).
HEAVY = ("numpy", "pyarrow", "pyarrow.parquet", "pyarrow.compute", "pyarrow.fs", "pandas", "deltalake", "obstore",
         "click", "rich", "jinja2", "sqlglot", "pyspark")  # fmt: skip

_RUN = "_m.main({argv!r})"
#: Before the process ends (``exit_process``), the heavy libraries it loaded are written to a file.
_SHOW = (
    "import os, sys; import dbt_delta_optimize.cli.main as _m; _e = _m.exit_process\n"
    "def _x(code):\n"
    "    open(os.environ['DDO_IMPORTS_HEAVY'], 'w').write(' '.join(m for m in {heavy!r} if m in sys.modules))\n"
    "    _e(code)\n"
    "_m.exit_process = _x\n"
)


def cases(json_table: str, cp_table: str) -> dict[str, str]:
    """Each case's ``python -c`` code: the package import, the group's help, and every command on a table."""
    t = cp_table
    commands: dict[str, list[str]] = {
        "help": ["--help"],
        "vacuum": ["vacuum", t, "--retain", "0h", "--allow-short-retention", "--dry-run", "--json"],
        "vacuum_json_log": ["vacuum", json_table, "--retain", "0h", "--allow-short-retention", "--dry-run", "--json"],
        "vacuum_lite": ["vacuum", t, "--mode", "lite", "--retain", "0h", "--allow-short-retention", "--dry-run"],
        "optimize": ["optimize", t, "--dry-run", "--json"],
        "purge": ["purge", t, "--dry-run", "--json"],
        "analyze": ["analyze", t, "--dry-run", "--json"],
        "info": ["info", t, "--json"],
        "history": ["history", t, "--json"],
        "health": ["health", t, "--json"],
        "validate": ["validate", t, "--json"],
        "maintain": ["maintain", t, "--dry-run", "--json"],
        "auto_compact_help": ["auto-compact", "--help"],
        "jars_help": ["jars", "--help"],
    }
    out = {"package": "import dbt_delta_optimize", "deltalake": "import deltalake", "python": "pass"}
    for name, argv in commands.items():
        out[name] = _SHOW.format(heavy=HEAVY) + _RUN.format(argv=argv)
    return out


def build_tables(work: str) -> tuple[str, str]:
    """(a table with a JSON-only log, one with a Parquet checkpoint), both partitioned, with tombstones."""
    import pyarrow as pa
    from deltalake import DeltaTable, write_deltalake

    paths = []
    for name, checkpoint in (("json", False), ("checkpoint", True)):
        path = os.path.join(work, name)
        for i in range(4):
            data = pa.table(
                {"id": pa.array(range(i * 40, (i + 1) * 40), pa.int64()), "p": [f"p{j % 4}" for j in range(40)]}
            )
            write_deltalake(path, data, partition_by=["p"], mode="append")
        if checkpoint:
            DeltaTable(path).create_checkpoint()
        DeltaTable(path).optimize.compact()  # the files of 4 appends tombstoned
        paths.append(path)
    return paths[0], paths[1]


def _env(pycache: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPYCACHEPREFIX"] = pycache
    env.setdefault("PYTHONPATH", ROOT)
    return env


def _children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def measure(code: str, env: dict[str, str]) -> tuple[float, float, float, list[str]]:
    """(ms of imports, ms of the whole process, its CPU ms, heavy libraries loaded) of one fresh process, run outside the
    checkout (``-c`` puts the working directory first on sys.path: PYTHONPATH decides which code runs)."""
    with tempfile.NamedTemporaryFile("r", suffix=".txt") as heavy:
        t, cpu = time.perf_counter(), _children_cpu()
        proc = subprocess.run(
            [sys.executable, "-X", "importtime", "-c", code],
            capture_output=True,
            text=True,
            env={**env, "DDO_IMPORTS_HEAVY": heavy.name},
            cwd=env["PYTHONPYCACHEPREFIX"],
        )
        wall = (time.perf_counter() - t) * 1000
        cpu = (_children_cpu() - cpu) * 1000
        loaded = heavy.read().split()
    if proc.returncode != 0:
        raise SystemExit(f"failed ({proc.returncode}): {code}\n{proc.stderr[-2000:]}")
    total = 0
    for line in proc.stderr.splitlines():
        if line.startswith("import time:") and "self [us]" not in line:
            total += int(line.split("|")[0].split(":")[1])
    return total / 1000, wall, cpu, loaded


def package_ms(env: dict[str, str]) -> float:
    """``import dbt_delta_optimize``: the package's own cumulative import time (what its line says), ms."""
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", "import dbt_delta_optimize"],
        capture_output=True,
        text=True,
        env=env,
        cwd=env["PYTHONPYCACHEPREFIX"],
        check=True,
    )
    line = next(x for x in proc.stderr.splitlines() if x.rstrip().endswith("| dbt_delta_optimize"))
    return int(line.split("|")[1]) / 1000


def run(repeats: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="ddo-imports-") as work:
        json_table, cp_table = build_tables(work)
        env = _env(os.path.join(work, "pycache"))
        os.makedirs(env["PYTHONPYCACHEPREFIX"])
        codes = cases(json_table, cp_table)
        names = list(codes)
        for name in names:  # warm the bytecode cache (and the page cache)
            measure(codes[name], env)
        imports: dict[str, list[float]] = {n: [] for n in names}
        walls: dict[str, list[float]] = {n: [] for n in names}
        cpus: dict[str, list[float]] = {n: [] for n in names}
        heavy: dict[str, list[str]] = {}
        own: list[float] = []
        for r in range(repeats):
            for name in names if r % 2 == 0 else names[::-1]:
                ms, wall, cpu, loaded = measure(codes[name], env)
                imports[name].append(ms)
                walls[name].append(wall)
                cpus[name].append(cpu)
                heavy[name] = loaded
            own.append(package_ms(env))
    ref = imports["deltalake"]
    out: dict[str, Any] = {
        "repeats": repeats,
        "load_average": os.getloadavg(),
        "package_own_ms": statistics.median(own),
        "package_own_ms_samples": own,
        "cases": {},
    }
    for name in names:
        out["cases"][name] = {
            "imports_ms": statistics.median(imports[name]),
            "wall_ms": statistics.median(walls[name]),
            "cpu_ms": statistics.median(cpus[name]),
            "imports_ms_samples": imports[name],
            "wall_ms_samples": walls[name],
            "cpu_ms_samples": cpus[name],
            "vs_deltalake": statistics.median(a / b for a, b in zip(imports[name], ref)),
            "vs_deltalake_samples": [a / b for a, b in zip(imports[name], ref)],
            "heavy": heavy.get(name, []),
        }
    return out


#: The cases ``--base`` compares between two trees (the issue's "imports of the vacuum command").
COMPARED = ("vacuum", "vacuum_lite", "vacuum_json_log", "package", "deltalake")


def compare(base: str, repeats: int) -> dict[str, Any]:
    """Each of ``COMPARED`` in the base tree and in this one, alternating in every round: medians and the
    per-round ratios this / base (``import deltalake``, the same code in both, shows the noise)."""
    with tempfile.TemporaryDirectory(prefix="ddo-imports-") as work:
        json_table, cp_table = build_tables(work)
        codes = {n: c for n, c in cases(json_table, cp_table).items() if n in COMPARED}
        envs = {}
        for name, tree in (("base", os.path.abspath(base)), ("test", ROOT)):
            envs[name] = {**_env(os.path.join(work, f"pycache-{name}")), "PYTHONPATH": tree}
            os.makedirs(envs[name]["PYTHONPYCACHEPREFIX"])
            for code in codes.values():  # warm each tree's bytecode cache
                measure(code, envs[name])
        ms: dict[str, dict[str, list[float]]] = {n: {"base": [], "test": []} for n in codes}
        for r in range(repeats):
            for n in codes:
                for tree in ("base", "test") if r % 2 == 0 else ("test", "base"):
                    ms[n][tree].append(measure(codes[n], envs[tree])[0])
    out: dict[str, Any] = {"repeats": repeats, "load_average": os.getloadavg(), "base": base, "cases": {}}
    for n, by in ms.items():
        ratios = [t / b for t, b in zip(by["test"], by["base"])]
        out["cases"][n] = {
            "base_ms": statistics.median(by["base"]),
            "test_ms": statistics.median(by["test"]),
            "ratio": statistics.median(ratios),
            "ratios": ratios,
        }
        print(f"{n:18} base {statistics.median(by['base']):7.1f} ms  this {statistics.median(by['test']):7.1f} ms  "
              f"this/base {statistics.median(ratios):.2f} [{min(ratios):.2f}-{max(ratios):.2f}]")  # fmt: skip
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--base", default=None, help="compare the vacuum cases with this source tree (an older checkout)")
    ap.add_argument("--json", dest="json_out", default=None)
    args = ap.parse_args()
    if args.base:
        compared = compare(args.base, args.repeats)
        if args.json_out:
            with open(args.json_out, "w") as fh:
                json.dump(compared, fh, indent=2)
        return
    results = run(args.repeats)
    print(f"load average {results['load_average']}; import dbt_delta_optimize: {results['package_own_ms']:.1f} ms")
    print(f"{'case':20} {'imports ms':>10} {'wall ms':>8} {'/deltalake':>10}  heavy libraries loaded")
    for name, c in results["cases"].items():
        print(
            f"{name:20} {c['imports_ms']:10.1f} {c['wall_ms']:8.1f} {c['vs_deltalake']:10.2f}  {' '.join(c['heavy'])}"
        )
    if args.json_out:
        with open(args.json_out, "w") as fh:
            json.dump(results, fh, indent=2)


if __name__ == "__main__":
    main()
