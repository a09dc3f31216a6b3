"""The commit validator against real OPTIMIZE commits of the three engines, and against crafted bad
commits: each a clean OPTIMIZE commit of ours with one thing broken, written back into the log by
hand. Every problem must be reported by its code, by ``validate_commit`` (after landing), by
``validate_actions`` (before committing) and by the CLI (exit status 1, code in the output)."""

from __future__ import annotations

import copy
import json
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import click
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from deltalake import DeltaTable, write_deltalake

from dbt_delta_optimize.cli.inspect import health, history, validate
from dbt_delta_optimize.delta.actions import AddFile, RemoveFile
from dbt_delta_optimize.delta.snapshot import load_snapshot
from dbt_delta_optimize.errors import InvalidArgumentError, TableNotFoundError, ValidationError
from dbt_delta_optimize.inspect.validate import (
    CODES,
    CheckedActions,
    Finding,
    ValidationReport,
    validate_actions,
    validate_commit,
)
from dbt_delta_optimize.inspect.validate_analyze import STATS_CODES
from dbt_delta_optimize.inspect.validate_row_tracking import ROW_TRACKING_CODES

CLI = click.Group(commands=[validate, health, history])

EXPRS = [
    "id",
    "CAST(id % 2 AS STRING) AS part",
    "named_struct('a', id, 'b', concat('b', id)) AS s",
    "timestamp_seconds(id * 3600) AS ts",
    "CASE WHEN id % 3 = 0 THEN NULL ELSE concat('name', id) END AS name",
]
N = 24


def run_cli(*args: str):
    return CliRunner().invoke(CLI, list(args), catch_exceptions=False)


def log_file(path: str, version: int) -> str:
    return os.path.join(path, "_delta_log", f"{version:020d}.json")


def read_actions(path: str, version: int) -> list[dict[str, Any]]:
    with open(log_file(path, version)) as fh:
        return [json.loads(line) for line in fh if line.strip()]


def write_actions(path: str, version: int, actions: list[dict[str, Any]]) -> None:
    for name in os.listdir(os.path.join(path, "_delta_log")):  # a stale checksum must not describe the new commit
        if name.startswith(f"{version:020d}.") and name.endswith(".crc"):
            os.unlink(os.path.join(path, "_delta_log", name))
    with open(log_file(path, version), "w") as fh:
        fh.write("\n".join(json.dumps(a, separators=(",", ":")) for a in actions) + "\n")


def adds_of(actions):
    return [a["add"] for a in actions if "add" in a]


def removes_of(actions):
    return [a["remove"] for a in actions if "remove" in a]


def recompute_metrics(actions: list[dict[str, Any]]) -> None:
    """Make commitInfo's metrics agree with the (mutated) actions, so only the intended finding fires."""
    info = next((a["commitInfo"] for a in actions if "commitInfo" in a), None)
    if info is None:
        return
    adds, removes = adds_of(actions), removes_of(actions)
    sizes = sorted(a["size"] for a in adds)
    m = info["operationMetrics"]
    m.update(
        numAddedFiles=str(len(adds)),
        numRemovedFiles=str(len(removes)),
        numAddedBytes=str(sum(sizes)),
        numRemovedBytes=str(sum(r.get("size", 0) for r in removes)),
    )
    if sizes:
        m.update(minFileSize=str(sizes[0]), maxFileSize=str(sizes[-1]))
    if "numDeletionVectorsRemoved" in m:
        m["numDeletionVectorsRemoved"] = str(sum(1 for r in removes if r.get("deletionVector")))


# --------------------------------------------------------------------------- fixtures
@pytest.fixture(scope="module")
def ours_template(spark, tmp_path_factory):
    """delta-spark table, 2 partitions x 3 small files; version 1 is our OPTIMIZE (3 files -> 1 per partition)."""
    from dbt_delta_optimize.api import optimize

    p = str(tmp_path_factory.mktemp("validate") / "ours")
    spark.range(0, N, 1, 3).selectExpr(*EXPRS).write.format("delta").partitionBy("part").save(p)
    m = optimize(spark, p)
    assert m.committed_versions == (1,) and m.num_files_removed == 6 and m.num_files_added == 2
    return p


@pytest.fixture
def ours(ours_template, tmp_path):
    p = str(tmp_path / "t")
    shutil.copytree(ours_template, p)
    return p


def rs_table(path: str, appends: int = 3) -> None:
    t = pa.table(
        {"id": list(range(10)), "part": [i % 2 for i in range(10)], "s": [{"a": i, "b": f"v{i}"} for i in range(10)]}
    )
    for _ in range(appends):
        write_deltalake(path, t, partition_by=["part"], mode="append")


# --------------------------------------------------------------------------- clean commits
def test_our_optimize_commit_is_clean(ours):
    r = validate_commit(ours)
    assert r.ok, r.describe()
    assert (r.version, r.operation, r.engine, r.read_version) == (1, "OPTIMIZE", "dbt-delta-optimize", 0)
    assert (r.adds, r.removes, r.rows_added, r.rows_removed) == (2, 6, N, N)
    assert r.findings == () and r.codes == ()
    d = r.to_dict()
    assert d["ok"] is True and d["findings"] == [] and d["rowsAdded"] == N
    json.dumps(d)
    res = run_cli("validate", ours)
    assert res.exit_code == 0, res.output
    assert "OK" in res.stdout
    res = run_cli("validate", ours, "--version", "1", "--json")
    assert res.exit_code == 0 and json.loads(res.stdout)["ok"] is True


@pytest.mark.slow
def test_delta_spark_optimize_and_zorder_commits_are_clean(spark, tmp_path):
    p = str(tmp_path / "ds")
    spark.range(0, N, 1, 3).selectExpr(*EXPRS).write.format("delta").partitionBy("part").save(p)
    spark.sql(f"OPTIMIZE delta.`{p}`")
    spark.range(0, N, 1, 2).selectExpr(*EXPRS).write.format("delta").mode("append").save(p)
    spark.sql(f"OPTIMIZE delta.`{p}` WHERE part = '1' ZORDER BY (id)")
    for v, rows in ((1, N), (3, N)):
        r = validate_commit(p, v)
        assert r.ok, r.describe()
        assert (r.engine, r.operation, r.rows_added, r.rows_removed) == ("delta-spark", "OPTIMIZE", rows, rows)
    assert validate_commit(p, 3).removes == 3  # part=1: the compacted file + 2 appended


def test_deltars_compact_and_zorder_commits_are_clean(tmp_path):
    p = str(tmp_path / "rs")
    rs_table(p)
    DeltaTable(p).optimize.compact()
    rs_table(p, 2)
    DeltaTable(p).optimize.z_order(["id"])
    r = validate_commit(p, 3)
    assert r.ok, r.describe()
    assert (r.engine, r.adds, r.removes, r.rows_added, r.rows_removed) == ("delta-rs", 2, 6, 30, 30)
    r = validate_commit(p)
    assert r.ok, r.describe()
    assert (r.version, r.rows_added, r.rows_removed) == (6, 50, 50)
    res = run_cli("validate", p, "--json")
    assert res.exit_code == 0 and json.loads(res.stdout)["engine"] == "delta-rs"


def test_rows_from_parquet_footers_when_stats_are_missing(ours):
    for v in (0, 1):
        actions = read_actions(ours, v)
        for a in actions:
            for kind in ("add", "remove"):
                if kind in a:
                    a[kind].pop("stats", None)
        write_actions(ours, v, actions)
    assert load_snapshot(ours, 0).files[0].num_records is None
    r = validate_commit(ours, 1)
    assert r.ok, r.describe()
    assert (r.rows_added, r.rows_removed) == (N, N)


def _checked_before_commit(path: str) -> tuple[Any, CheckedActions]:
    """What the writer checked before committing version 1: its actions against version 0."""
    before = load_snapshot(path, 0)
    actions = read_actions(path, 1)
    adds = [AddFile.from_json(a) for a in adds_of(actions)]
    removes = [RemoveFile.from_json(r) for r in removes_of(actions)]
    report = validate_actions(before, adds, removes)
    assert report.ok, report.describe()
    return before, CheckedActions(before, tuple(adds), tuple(removes), report)


def test_a_landed_commit_equal_to_the_checked_actions_is_not_checked_twice(ours, monkeypatch):
    import dbt_delta_optimize.inspect.validate as validate_module

    before, checked = _checked_before_commit(ours)
    calls = []
    real = validate_module.check_actions
    monkeypatch.setattr(validate_module, "check_actions", lambda *a, **k: calls.append(1) or real(*a, **k))
    r = validate_commit(ours, 1, before=before, checked=checked)
    assert r.ok, r.describe()
    assert (r.rows_added, r.rows_removed, calls) == (N, N, [])  # the writer's own check stands
    assert validate_commit(ours, 1, before=before).ok and calls == [1]  # without it: the full check
    other = load_snapshot(ours, 0)  # checked against another snapshot object: not taken on trust
    assert validate_commit(ours, 1, before=other, checked=checked).ok and calls == [1, 1]


def test_a_landed_commit_that_differs_from_the_checked_actions_is_checked_in_full(ours):
    before, checked = _checked_before_commit(ours)
    actions = read_actions(ours, 1)
    adds_of(actions)[0]["size"] += 1  # not what the writer checked (and wrong)
    recompute_metrics(actions)
    write_actions(ours, 1, actions)
    r = validate_commit(ours, 1, before=before, checked=checked)
    assert not r.ok and "add_size_mismatch" in r.codes, r.describe()


def test_a_write_commit_is_bad_input(ours):
    with pytest.raises(InvalidArgumentError, match="WRITE"):
        validate_commit(ours, 0)
    res = run_cli("validate", ours, "--version", "0")
    assert res.exit_code == 2 and res.stderr.startswith("error:")
    res = run_cli("validate", ours, "--version", "7")
    assert res.exit_code == 2 and "does not exist" in res.stderr


def test_missing_table_is_bad_input(tmp_path):
    with pytest.raises(TableNotFoundError):
        validate_commit(str(tmp_path / "nope"))
    res = run_cli("validate", str(tmp_path / "nope"))
    assert res.exit_code == 2 and "error:" in res.stderr and "does not exist" in res.stderr


# --------------------------------------------------------------------------- crafted bad commits
Mutation = Callable[[list[dict[str, Any]], str], None]


def _first(actions, kind):
    return next(a[kind] for a in actions if kind in a)


def _stats(add: dict[str, Any]) -> dict[str, Any]:
    return json.loads(add["stats"])


def _set_stats(add: dict[str, Any], st: dict[str, Any]) -> None:
    add["stats"] = json.dumps(st)


def m_remove_not_live(actions, path):
    actions.append(
        {
            "remove": {
                "path": "part=0/part-00009-ghost.c000.snappy.parquet",
                "deletionTimestamp": 1,
                "dataChange": False,
                "extendedFileMetadata": True,
                "partitionValues": {"part": "0"},
                "size": 1234,
            }
        }
    )


def m_add_missing(actions, path):
    _first(actions, "add")["path"] = "part=0/part-00000-does-not-exist.c000.snappy.parquet"


def m_add_size(actions, path):
    _first(actions, "add")["size"] += 1


def m_drop_remove(actions, path):
    actions.remove(next(a for a in actions if "remove" in a))


def m_add_data_change(actions, path):
    _first(actions, "add")["dataChange"] = True


def m_remove_data_change(actions, path):
    _first(actions, "remove")["dataChange"] = True


def m_added_and_removed(actions, path):
    rm = _first(actions, "remove")
    live = next(f for f in load_snapshot(path, 0).files if f.path == rm["path"])
    actions.append({"add": {**live.to_json(), "dataChange": False}})


def m_stats_unparsable(actions, path):
    _first(actions, "add")["stats"] = '{"numRecords": 12, "minValues": {'


def m_stats_records_not_a_number(actions, path):
    add = _first(actions, "add")
    _set_stats(add, {**_stats(add), "numRecords": "twelve"})


def _swap(add, *keys):
    st = _stats(add)
    lo, hi = st["minValues"], st["maxValues"]
    for k in keys[:-1]:
        lo, hi = lo[k], hi[k]
    lo[keys[-1]], hi[keys[-1]] = hi[keys[-1]], lo[keys[-1]]
    _set_stats(add, st)


def m_min_gt_max(actions, path):
    _swap(_first(actions, "add"), "id")


def m_min_gt_max_nested(actions, path):
    _swap(_first(actions, "add"), "s", "a")


def m_min_gt_max_timestamp(actions, path):
    _swap(_first(actions, "add"), "ts")


def m_min_gt_max_string(actions, path):
    _swap(_first(actions, "add"), "s", "b")


def m_null_count(actions, path):
    add = _first(actions, "add")
    st = _stats(add)
    st["nullCount"]["name"] = st["numRecords"] + 1
    _set_stats(add, st)


def m_null_count_nested(actions, path):
    add = _first(actions, "add")
    st = _stats(add)
    st["nullCount"]["s"]["b"] = st["numRecords"] + 5
    _set_stats(add, st)


def m_records_mismatch(actions, path):
    add = _first(actions, "add")
    st = _stats(add)
    st["numRecords"] += 1
    _set_stats(add, st)


def m_partition_moved(actions, path):
    add = next(a["add"] for a in actions if "add" in a and a["add"]["partitionValues"]["part"] == "0")
    add["partitionValues"] = {"part": "1"}


def m_partition_unknown(actions, path):
    _first(actions, "add")["partitionValues"] = {"part": "7"}


def m_remove_size(actions, path):
    _first(actions, "remove")["size"] += 1


def m_remove_dv(actions, path):
    _first(actions, "remove")["deletionVector"] = {
        "storageType": "u",
        "pathOrInlineDv": "ab^-aqEH.-t@S}K{vb[*k^",
        "offset": 1,
        "sizeInBytes": 36,
        "cardinality": 2,
    }


def m_remove_twice(actions, path):
    actions.append(copy.deepcopy(next(a for a in actions if "remove" in a)))


def m_add_twice(actions, path):
    actions.append(copy.deepcopy(next(a for a in actions if "add" in a)))


def m_add_malformed(actions, path):
    del _first(actions, "add")["size"]


def m_metrics_not_strings(actions, path):
    _first(actions, "commitInfo")["operationMetrics"]["numAddedFiles"] = "two"


def m_no_zorder_param(actions, path):
    del _first(actions, "commitInfo")["operationParameters"]["zOrderBy"]


def m_blind_append(actions, path):
    _first(actions, "commitInfo")["isBlindAppend"] = True


def m_dv_count(actions, path):
    """numDeletionVectorsRemoved must count the removes that carry a DV (each removed DV belongs to a removed file)."""
    info = next(a["commitInfo"] for a in actions if "commitInfo" in a)
    info["operationMetrics"]["numDeletionVectorsRemoved"] = "3"


def m_metrics_mismatch(actions, path):
    m = _first(actions, "commitInfo")["operationMetrics"]
    m["numRemovedFiles"] = str(int(m["numRemovedFiles"]) + 1)


def m_protocol_action(actions, path):
    actions.append({"protocol": {"minReaderVersion": 1, "minWriterVersion": 2}})


def m_no_commit_info(actions, path):
    actions.remove(next(a for a in actions if "commitInfo" in a))


@dataclass(frozen=True)
class Case:
    mutate: Mutation
    codes: frozenset[str]
    exact: bool = True  # the findings are exactly these codes (no collateral findings)
    fix_metrics: bool = True
    commit_only: bool = False  # a commitInfo/log-level problem: validate_actions has no commitInfo

    @property
    def id(self) -> str:
        return self.mutate.__name__[2:]


CASES = [
    Case(m_remove_not_live, frozenset({"remove_not_live"})),
    Case(m_add_missing, frozenset({"add_missing_file"})),
    Case(m_add_size, frozenset({"add_size_mismatch"})),
    Case(m_drop_remove, frozenset({"row_count_mismatch"})),
    Case(m_add_data_change, frozenset({"data_change_true"})),
    Case(m_remove_data_change, frozenset({"data_change_true"})),
    Case(m_added_and_removed, frozenset({"path_added_and_removed", "add_already_live"}), exact=False),
    Case(m_stats_unparsable, frozenset({"stats_unparsable"})),
    Case(m_stats_records_not_a_number, frozenset({"stats_unparsable"})),
    Case(m_min_gt_max, frozenset({"stats_min_gt_max"})),
    Case(m_min_gt_max_nested, frozenset({"stats_min_gt_max"})),
    Case(m_min_gt_max_timestamp, frozenset({"stats_min_gt_max"})),
    Case(m_min_gt_max_string, frozenset({"stats_min_gt_max"})),
    Case(m_null_count, frozenset({"stats_null_count_gt_records"})),
    Case(m_null_count_nested, frozenset({"stats_null_count_gt_records"})),
    Case(m_records_mismatch, frozenset({"stats_num_records_mismatch"})),
    Case(m_partition_moved, frozenset({"partition_values_mismatch"})),
    Case(m_partition_unknown, frozenset({"partition_values_mismatch"})),
    Case(m_remove_size, frozenset({"remove_size_mismatch"})),
    Case(m_remove_dv, frozenset({"remove_dv_mismatch"})),
    Case(m_remove_twice, frozenset({"remove_duplicate"})),
    Case(m_add_twice, frozenset({"add_duplicate"})),
    Case(m_add_malformed, frozenset({"action_malformed"}), exact=False, fix_metrics=False, commit_only=True),
    Case(m_metrics_not_strings, frozenset({"commit_info_malformed"}), fix_metrics=False, commit_only=True),
    Case(m_no_zorder_param, frozenset({"commit_info_malformed"}), commit_only=True),
    Case(m_blind_append, frozenset({"commit_info_malformed"}), commit_only=True),
    Case(m_metrics_mismatch, frozenset({"metrics_mismatch"}), fix_metrics=False, commit_only=True),
    Case(m_dv_count, frozenset({"metrics_mismatch"}), fix_metrics=False, commit_only=True),
    Case(m_protocol_action, frozenset({"unexpected_action"}), commit_only=True),
    Case(m_no_commit_info, frozenset({"commit_info_missing"}), commit_only=True),
]


def mutated(path: str, case: Case) -> list[dict[str, Any]]:
    actions = read_actions(path, 1)
    case.mutate(actions, path)
    if case.fix_metrics:
        recompute_metrics(actions)
    return actions


def test_every_code_is_covered():
    covered = {c for case in CASES for c in case.codes}
    assert covered <= set(CODES)
    # row_count_unknown: test_row_count_unknown_without_stats_or_file; row tracking: tests/test_row_tracking.py;
    # COMPUTE STATS commits: tests/test_analyze_validate.py
    assert set(CODES) - covered == {"row_count_unknown", *ROW_TRACKING_CODES, *STATS_CODES}


def test_row_count_unknown_without_stats_or_file(ours):
    for v in (0, 1):
        actions = read_actions(ours, v)
        for a in actions:
            for kind in ("add", "remove"):
                if kind in a:
                    a[kind].pop("stats", None)
        write_actions(ours, v, actions)
    gone = _first(read_actions(ours, 1), "remove")["path"]
    os.unlink(os.path.join(ours, gone))
    r = validate_commit(ours, 1)
    assert r.codes == ("row_count_unknown",) and r.findings[0].path == gone
    assert r.rows_removed is None and r.rows_added == N


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_bad_commit_is_reported_by_code(ours, case):
    write_actions(ours, 1, mutated(ours, case))
    r = validate_commit(ours, 1)
    assert not r.ok
    codes = set(r.codes)
    if case.exact:
        assert codes == case.codes, r.describe()
    else:
        assert case.codes <= codes, r.describe()
    assert all(isinstance(f, Finding) and f.message for f in r.findings)

    res = run_cli("validate", ours)
    assert res.exit_code == 1, res.output
    assert "FAILED" in res.stdout
    for code in case.codes:
        assert f"[{code}]" in res.stdout
    res = run_cli("validate", ours, "--version", "1", "--json")
    assert res.exit_code == 1
    d = json.loads(res.stdout)
    assert d["ok"] is False and case.codes <= {f["code"] for f in d["findings"]}


def test_finding_paths_and_messages(ours):
    clean = read_actions(ours, 1)
    write_actions(ours, 1, mutated(ours, Case(m_min_gt_max_nested, frozenset())))
    (f,) = validate_commit(ours, 1).findings
    assert (
        f.code == "stats_min_gt_max" and "s.a" in f.message and f.path == _first(read_actions(ours, 1), "add")["path"]
    )
    write_actions(ours, 1, clean)
    write_actions(ours, 1, mutated(ours, Case(m_drop_remove, frozenset())))
    r = validate_commit(ours, 1)
    (f,) = r.findings
    assert f.path is None and "part=" in f.message
    assert r.rows_removed < r.rows_added == N
    with pytest.raises(ValidationError, match="row_count_mismatch"):
        r.raise_if_invalid()


# --------------------------------------------------------------------------- before committing
def parsed_actions(actions: list[dict[str, Any]]) -> tuple[list[AddFile], list[RemoveFile]]:
    return [AddFile.from_json(a) for a in adds_of(actions)], [RemoveFile.from_json(r) for r in removes_of(actions)]


def test_validate_actions_clean(ours):
    snap = load_snapshot(ours, 0)
    adds, removes = parsed_actions(read_actions(ours, 1))
    r = validate_actions(snap, adds, removes)
    assert isinstance(r, ValidationReport) and r.ok, r.describe()
    assert (r.version, r.read_version, r.rows_added, r.rows_removed, r.adds, r.removes) == (None, 0, N, N, 2, 6)
    assert r.raise_if_invalid() is r
    # The same plan's removes made by AddFile.remove() (as the executor does) are clean too.
    live = {f.path: f for f in snap.files}
    r = validate_actions(snap, adds, [live[x.path].remove(123) for x in removes], check_footers=False)
    assert r.ok, r.describe()


@pytest.mark.parametrize("case", [c for c in CASES if not c.commit_only], ids=lambda c: c.id)
def test_validate_actions_catches_it_before_commit(ours, case):
    adds, removes = parsed_actions(mutated(ours, case))
    r = validate_actions(load_snapshot(ours, 0), adds, removes)
    assert not r.ok
    if case.exact:
        assert set(r.codes) == case.codes, r.describe()
    else:
        assert case.codes <= set(r.codes), r.describe()
    with pytest.raises(ValidationError):
        r.raise_if_invalid()


@pytest.mark.parametrize("case", [c for c in CASES if not c.commit_only], ids=lambda c: c.id)
def test_removes_checked_bin_by_bin_give_the_same_report(ours, case):
    """``RemovesCheck``, fed the removes in two bins as OPTIMIZE's bins finish, gives the report of checking them
    all at once (findings in order, rows), a path two bins remove included; for other removes it is not used."""
    from dbt_delta_optimize.inspect.validate_actions import RemovesCheck

    snap = load_snapshot(ours, 0)
    adds, removes = parsed_actions(mutated(ours, case))
    whole = validate_actions(snap, adds, removes)
    check = RemovesCheck(snap)
    half = len(removes) // 2
    check.add([], removes[:half])
    check.add([], removes[half:])
    binned = validate_actions(snap, adds, removes, checked_removes=check)
    assert binned.findings == whole.findings and not binned.ok
    assert (binned.rows_added, binned.rows_removed) == (whole.rows_added, whole.rows_removed)
    assert not check.covers(snap, removes[1:]) and not check.covers(load_snapshot(ours, 0), removes)
    assert check.covers(snap, removes)


def test_optimize_checks_its_removes_as_the_bins_finish(tmp_path, monkeypatch):
    """A real OPTIMIZE: each bin's removes are checked as it finishes, the commit checks none again, and the
    commit it lands is clean."""
    from dbt_delta_optimize.api import optimize
    from dbt_delta_optimize.inspect import validate_actions as va

    path = str(tmp_path / "t")
    rs_table(path, appends=4)
    calls: list[int] = []
    real = va._ActionCheck.removes
    monkeypatch.setattr(
        va._ActionCheck, "removes", lambda self, removes: calls.append(len(removes)) or real(self, removes)
    )
    m = optimize(None, path, task_runner="driver")
    assert m.num_files_removed == 8 and m.num_files_added == 2
    assert sorted(calls) == [4, 4]  # one call per bin (two partitions), none for the commit's 8 removes
    assert validate_commit(path).ok


def test_empty_string_and_null_partition_values_are_equal(tmp_path):
    """delta-spark folds "" into null: a compacted null partition may be written either way."""
    p = str(tmp_path / "nulls")
    t = pa.table({"id": [1, 2, 3, 4], "part": pa.array([None, None, "a", "a"], pa.string())})
    write_deltalake(p, t.slice(0, 2), partition_by=["part"], mode="append")
    write_deltalake(p, t.slice(0, 2), partition_by=["part"], mode="append")
    snap = load_snapshot(p)
    nulls = [f for f in snap.files if f.partition_values.get("part") is None]
    assert len(nulls) == 2
    os.makedirs(os.path.join(p, "part=__HIVE_DEFAULT_PARTITION__"), exist_ok=True)
    rel = "part=__HIVE_DEFAULT_PARTITION__/compacted.parquet"
    pq.write_table(pa.table({"id": [1, 2, 1, 2]}), os.path.join(p, rel))
    size = os.path.getsize(os.path.join(p, rel))

    def add(value):
        return AddFile(rel, {"part": value}, size, 0, data_change=False, stats=json.dumps({"numRecords": 4}))

    removes = [f.remove(1) for f in nulls]
    for value in ("", None):
        r = validate_actions(snap, [add(value)], removes)
        assert r.ok, r.describe()
    r = validate_actions(snap, [add("a")], removes)
    assert r.codes == ("partition_values_mismatch",)


def test_no_version_validates_the_latest_optimize_even_after_a_later_write(tmp_path):
    import pyarrow as pa
    from deltalake import DeltaTable, write_deltalake

    p = str(tmp_path / "t")
    for i in range(3):
        write_deltalake(p, pa.table({"id": [i], "part": ["a"]}), partition_by=["part"], mode="append")
    DeltaTable(p).optimize.compact()  # version 3: delta-rs's OPTIMIZE
    write_deltalake(p, pa.table({"id": [9], "part": ["a"]}), partition_by=["part"], mode="append")  # version 4
    report = validate_commit(p)
    assert report.version == 3 and report.operation == "OPTIMIZE" and report.ok, report.describe()
    with pytest.raises(InvalidArgumentError, match="WRITE commit"):
        validate_commit(p, 4)
