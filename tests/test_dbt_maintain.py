"""``dbt run-operation maintain`` on integration_tests/ through real dbt-spark (method: session) with Delta.

The project is built without the hooks (so its tables keep their small files); a dry run lists every
Delta model and the snapshot, skips the view and the Parquet model and changes no log; a run with a
budget too small for all of it does the worst table first and defers the rest; a second run continues.
"""

from __future__ import annotations

import json
import os

import pytest
from deltalake import DeltaTable

from dbt_delta_optimize.api import vacuum
from tests.dbt_project import DbtProject, session_project
from tests.helpers import data_files

pytestmark = [pytest.mark.slow, pytest.mark.spark]


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    project = session_project(tmp_path_factory.mktemp("dbt-maintain"))
    yield project
    project.close()


def _report(project: DbtProject) -> dict:
    return json.loads((project.work / "target" / "delta_maintenance.json").read_text())


def _path(project: DbtProject, table: str) -> str:
    return str(project.work / "wh" / "ddo_it.db" / table.split(".")[1])


def _versions(project: DbtProject, tables) -> dict[str, int]:
    return {t: DeltaTable(_path(project, t)).version() for t in tables}


@pytest.mark.timeout(1800)
def test_run_operation_maintain_worst_first_within_a_budget_then_continues(project):
    project("seed")
    project("build", "--vars", "{use_post_hooks: false}")

    out = project("run-operation", "maintain", "--args", "{select: '*', dry_run: true}")
    dry = _report(project)
    listed = [t["table"] for t in dry["tables"]]
    assert len(listed) == len(set(listed))
    assert "ddo_it.events_snapshot" in listed  # snapshots are included
    assert "ddo_it.events_view" not in listed and "ddo_it.events_view" not in json.dumps(
        dry["skipped"]
    )  # views: left out
    assert "ddo_it.skipped_model" not in listed  # meta.delta_optimize.skip
    assert {s["table"] for s in dry["skipped"]} == {"ddo_it.parquet_model"}
    assert [t["rank"] for t in dry["tables"]] == list(range(1, len(listed) + 1))
    assert all(t["status"] in ("planned", "nothing to do") for t in dry["tables"])
    assert all(t["model"] for t in dry["tables"])
    with_work = [t["table"] for t in dry["tables"] if t["actions"]]
    assert len(with_work) >= 3, dry
    assert "delta_maintain #1 " in out
    before = _versions(project, listed)

    project("run-operation", "maintain", "--args", "{select: '*', budget: 0.1, workers: 1}")
    first = _report(project)
    by = {t["table"]: t for t in first["tables"]}
    worst = with_work[0]
    assert by[worst]["status"] == "done" and by[worst]["rank"] == 1
    ran_first = [t for t in with_work if by[t]["status"] == "done"]
    assert ran_first == with_work[: len(ran_first)]  # worst first, in rank order
    deferred = [t for t in first["tables"] if t["status"] == "deferred"]
    assert deferred and all(t["score"] > 0 for t in deferred)
    assert all(
        t["deferredReason"] == "budget spent" or t["deferredReason"].startswith("would not fit") for t in deferred
    )
    after = _versions(project, listed)
    assert {t for t in listed if after[t] != before[t]} == set(ran_first)  # nothing else was written
    assert all(a["predictedSeconds"] > 0 and a["seconds"] > 0 for a in by[worst]["ran"])

    project("run-operation", "maintain", "--args", "{select: '*', budget: 0.1, workers: 1}")
    second = _report(project)
    done = [t["table"] for t in second["tables"] if t["status"] == "done"]
    assert done and set(done) <= {t["table"] for t in deferred}  # it continues with what was deferred
    assert {t["table"]: t for t in second["tables"]}[worst]["rank"] > 1  # the compacted table moved down
    # the first run's actual seconds calibrate the second run's predictions
    optimize_costs = [e["cost"] for t in second["tables"] for e in t["estimates"] if e["action"] == "optimize"]
    assert optimize_costs and {c["calibration"] for c in optimize_costs} == {"previous run"}

    # run-operation vacuum on the compacted table: its fresh tombstones are inside the 7-day retention
    path = _path(project, worst)
    rows = DeltaTable(path).to_pyarrow_table().num_rows
    listed_by_us = {c.path for c in vacuum(None, path, retain=0, allow_short_retention=True, dry_run=True).files}
    assert listed_by_us and not vacuum(None, path, dry_run=True).files
    project("run-operation", "vacuum", "--args", f"{{table: {worst}, retain: 0}}")
    assert "shorter than" in project.by_table()[worst]["error"]  # refused without the opt-in
    project(
        "run-operation",
        "vacuum",
        "--args",
        f"{{table: {worst}, retain: 0, allow_short_retention: true, dry_run: true}}",
    )
    planned = project.by_table()[worst]
    assert planned["status"] == "planned" and {f["path"] for f in planned["plan"]["files"]} == listed_by_us
    on_disk = data_files(path)
    project("run-operation", "vacuum", "--args", f"{{table: {worst}, retain: 0, allow_short_retention: true}}")
    done = project.by_table()[worst]
    assert done["status"] == "vacuumed" and done["vacuum"]["filesDeleted"] == len(listed_by_us), done
    gone = on_disk - data_files(path)
    sidecars = {f for f in gone if f.endswith(".crc")}  # Hadoop's checksums go with their files, as in delta-spark
    assert gone - sidecars == listed_by_us  # exactly what the dry runs listed
    assert sidecars <= {os.path.join(os.path.dirname(f), f".{os.path.basename(f)}.crc") for f in listed_by_us}
    assert DeltaTable(path).to_pyarrow_table().num_rows == rows

    assert "must be" in project.fails("run-operation", "maintain", "--args", "{select: '*', budget: soon}")

    # the on-run-end form: the Delta models this run built (here one model, and a view that is left out)
    project(
        "run", "-s", "events_merge", "events_view", "--vars", "{use_post_hooks: false, use_maintain_on_run_end: true}"
    )
    hook = _report(project)
    assert [t["table"] for t in hook["tables"]] == ["ddo_it.events_merge"] and not hook["skipped"]
    assert hook["tables"][0]["status"] in ("done", "nothing to do")
