"""maintain on a 50-table fixture: how close the ranking is to the order by measured benefit, how well the
budget is kept, and the error between predicted and actual cost (default model, then calibrated).

Tables (seeded, written in one commit each by tests/maintenance_tables.py): 50 unpartitioned tables
with 2..120 files of 1k..20k rows. The measured benefit of a table is the full-scan time it saves
(read every live file with pyarrow before and after the compaction, best of 3); its measured cost is
the compaction's wall time. Ranking quality is Spearman's rho between the predicted score and the
measured benefit per second of cost, and between predicted and measured scan-seconds saved.

    PYTHONPATH=. .venv/bin/python bench/maintain_rank.py [--tables 50] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sys
import tempfile
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tests.maintenance_tables import make_table


def _fixture(base: str, n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        files = rng.choice([2, 4, 8, 16, 32, 64, 120])
        rows = rng.choice([1000, 5000, 20000])
        out.append(make_table(os.path.join(base, f"t{i:02d}"), files, rows_per_file=rows))
    return out


def _scan_seconds(path: str) -> float:
    """Best of 3 full reads of the live files (deltalake decides which are live)."""
    import pyarrow.parquet as pq
    from deltalake import DeltaTable

    files = DeltaTable(path).file_uris()
    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        for f in files:
            pq.ParquetFile(f.removeprefix("file://")).read()
        best = min(best, time.perf_counter() - t0)
    return best


def _rank(values: list[float]) -> list[float]:
    order = sorted(range(len(values)), key=lambda i: values[i])
    ranks = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            ranks[order[k]] = (i + j) / 2
        i = j + 1
    return ranks


def spearman(a: list[float], b: list[float]) -> float:
    ra, rb = _rank(a), _rank(b)
    n = len(a)
    ma, mb = sum(ra) / n, sum(rb) / n
    cov = sum((x - ma) * (y - mb) for x, y in zip(ra, rb))
    va = sum((x - ma) ** 2 for x in ra) ** 0.5
    vb = sum((y - mb) ** 2 for y in rb) ** 0.5
    return cov / (va * vb) if va and vb else 0.0


def _errors(report: dict[str, Any]) -> dict[str, float]:
    pairs = [(a["predictedSeconds"], a["seconds"]) for t in report["tables"] for a in t["ran"] if a["status"] == "done"]
    if not pairs:
        return {}
    ape = sorted(abs(p - a) / a for p, a in pairs if a > 0)
    ratios = sorted(p / a for p, a in pairs if a > 0)
    return {
        "actions": len(pairs),
        "medianAbsPctError": round(100 * ape[len(ape) // 2], 1),
        "meanAbsPctError": round(100 * sum(ape) / len(ape), 1),
        "medianPredictedOverActual": round(ratios[len(ratios) // 2], 3),
        "totalPredicted": round(sum(p for p, _ in pairs), 2),
        "totalActual": round(sum(a for _, a in pairs), 2),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tables", type=int, default=50)
    ap.add_argument("--seed", type=int, default=35)
    ap.add_argument("--json", dest="out")
    args = ap.parse_args()
    from dbt_delta_optimize.ops.maintain import maintain

    work = tempfile.mkdtemp(prefix="maintain-bench-")
    try:
        tables = _fixture(os.path.join(work, "a"), args.tables, args.seed)
        dry = maintain(None, tables, dry_run=True).to_dict()
        predicted = {t["table"]: t for t in dry["tables"]}
        before = {p: _scan_seconds(p) for p in tables}
        run1 = maintain(None, tables, workers=1).to_dict()
        after = {p: _scan_seconds(p) for p in tables}
        saved = {p: max(0.0, before[p] - after[p]) for p in tables}
        cost = {t["table"]: sum(a["seconds"] for a in t["ran"]) for t in run1["tables"]}
        with_work = [p for p in tables if predicted[p]["actions"]]
        rho_score = spearman(
            [predicted[p]["score"] for p in with_work], [saved[p] / max(cost[p], 1e-6) for p in with_work]
        )
        rho_benefit = spearman(
            [predicted[p]["benefit"]["scanSecondsSaved"] for p in with_work], [saved[p] for p in with_work]
        )
        # the same fixture again, calibrated by run 1's actual seconds; then a budget of a third of the work
        tables2 = _fixture(os.path.join(work, "b"), args.tables, args.seed)
        run2 = maintain(None, tables2, workers=1, previous=run1).to_dict()
        tables3 = _fixture(os.path.join(work, "c"), args.tables, args.seed)
        budget = max(1.0, round(_errors(run2).get("totalActual", 3.0) / 3, 1))
        run3 = maintain(None, tables3, workers=1, budget=budget, previous=run1).to_dict()
        started = [t for t in run3["tables"] if t["ran"]]
        queue_seconds = sum(a["seconds"] for t in started for a in t["ran"])
        result = {
            "tables": args.tables,
            "withWork": len(with_work),
            "spearmanScoreVsMeasuredBenefitPerCost": round(rho_score, 3),
            "spearmanPredictedVsMeasuredScanSecondsSaved": round(rho_benefit, 3),
            "costErrorDefault": _errors(run1),
            "costErrorCalibrated": _errors(run2),
            "budget": {
                "budgetSeconds": budget,
                "queueSecondsOfStartedTables": round(queue_seconds, 2),
                "wallSecondsIncludingScoring": run3["wallSeconds"],
                "tablesDone": run3["summary"]["done"],
                "tablesDeferred": run3["summary"]["deferred"],
                "overshootSeconds": round(queue_seconds - budget, 2),
            },
            "scoringWallSecondsDryRun": dry["wallSeconds"],
        }
        print(json.dumps(result, indent=2))
        if args.out:
            with open(args.out, "w") as fh:
                json.dump(result, fh, indent=2)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
