"""The dbt bridge relies on dbt internals (plugin discovery, get_context_modules): fail loudly if they move."""

from __future__ import annotations

import json
import os
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest


def test_dbt_discovers_our_plugin_and_it_subclasses_dbtplugin():
    from dbt.plugins.manager import PluginManager, dbtPlugin

    modules = PluginManager.get_prefixed_modules()
    assert "dbt_delta_optimize" in modules, "dbt no longer discovers top-level dbt_* modules (or the install hides us)"
    plugins = getattr(modules["dbt_delta_optimize"], PluginManager.PLUGIN_ATTR_NAME)
    assert plugins and all(issubclass(p, dbtPlugin) for p in plugins)
    manager = PluginManager.from_modules("some_project")
    assert any(type(p).__name__ == "DeltaOptimizePlugin" for p in manager._plugins)


def test_install_adds_the_namespace_once_and_keeps_dbts_modules():
    import dbt.context.base as base

    from dbt_delta_optimize.dbt.bridge import NAMESPACE, install

    install()
    first = base.get_context_modules
    install()  # idempotent: no double wrapping
    assert base.get_context_modules is first
    modules = base.get_context_modules()
    assert {"pytz", "datetime", "re", "itertools"} <= set(modules)
    assert set(modules[NAMESPACE]) == {
        "describe_engine",
        "record_version",
        "run_model",
        "run_operation",
        "run_purge",
        "run_maintain",
        "run_analyze",
        "run_vacuum",
    }


def test_modules_context_property_reads_the_wrapped_function():
    """dbt's `modules` context property must look get_context_modules up at call time."""
    import inspect

    import dbt.context.base as base

    src = inspect.getsource(
        base.BaseContext.modules.fget if hasattr(base.BaseContext.modules, "fget") else base.BaseContext
    )
    assert "get_context_modules()" in src


@pytest.mark.parametrize(
    "settings,needle",
    [
        ({"mode": "sometimes"}, "mode must be one of auto, optimize, never"),
        ({"on_error": "explode"}, "on_error must be one of warn, fail"),
        ({"zorder_by": 3}, "zorder_by must be a string or a list"),
        ({"where": 5}, "where must be a string or a list of strings"),
        ({"where": ["a = 1", 2]}, "where must be a string or a list of strings"),
        ({"curve": "peano"}, "curve must be one of zorder, hilbert"),
        ({"min_file_size": True}, "min_file_size must be a size"),
        ({"max_file_size": "lots"}, "meta.delta_optimize.max_file_size"),
        ({"min_num_files": -1}, "min_num_files must be a whole number >= 0"),
        ({"min_num_files": "3.5"}, "min_num_files must be a whole number >= 0"),
        ({"skip": "yes"}, "skip must be true or false"),
        ({"min_files": 3}, "Unknown meta.delta_optimize setting"),
        (["mode", "auto"], "meta.delta_optimize must be a mapping"),
    ],
)
def test_invalid_model_settings_fail_softly_with_a_clear_message(tmp_path, monkeypatch, settings, needle):
    from dbt_delta_optimize.dbt.bridge import Bridge

    monkeypatch.setenv("DBT_TARGET_PATH", str(tmp_path))
    result = Bridge().run_model("s.t", settings, model="m", invocation_id="inv")
    assert result["status"] == "failed" and needle in result["error"], result["error"]
    assert result["error"].startswith("InvalidArgumentError") or result["error"].startswith("InvalidConfigError")
    assert json.loads((tmp_path / "delta_optimize_results.json").read_text())[-1]["error"] == result["error"]


def test_valid_settings_are_normalised():
    from dbt_delta_optimize.dbt.settings import ModelSettings, parse_operation_args, parse_settings
    from dbt_delta_optimize.options import OptimizeOptions

    s = parse_settings(
        {"mode": "optimize", "where": "d > 1", "zorder_by": "a, b", "min_file_size": "1m", "min_num_files": "3"}
    )
    assert s == ModelSettings(
        mode="optimize",
        where=("d > 1",),
        zorder_by=("a", "b"),
        options=OptimizeOptions(min_file_size=2**20),
        min_num_files=3,
    )
    assert parse_settings(None) == parse_settings({}) == ModelSettings()
    assert parse_operation_args(["a = 1"], None, True).where == ("a = 1",)
    with pytest.raises(ValueError, match="dry_run must be true or false"):
        parse_operation_args(None, None, "yes")


def test_skip_and_non_delta_are_skipped_without_touching_spark(tmp_path, monkeypatch):
    from dbt_delta_optimize.dbt import bridge as dbt_bridge
    from dbt_delta_optimize.dbt.connection import SparkTarget

    monkeypatch.setenv("DBT_TARGET_PATH", str(tmp_path))
    monkeypatch.setattr(SparkTarget, "session", lambda self: pytest.fail("Spark must not be needed to skip"))
    b = dbt_bridge.Bridge()
    assert b.run_model("s.t", {"skip": True})["status"] == "skipped"
    assert b.run_model("s.t", {"mode": "never"})["status"] == "skipped"
    r = b.run_model("s.t", {}, file_format="parquet")
    assert r["status"] == "skipped" and "parquet" in r["line"]
    r = b.run_operation("s.t", dry_run="yes")
    assert r["status"] == "failed" and "dry_run must be true or false" in r["error"]


def test_concurrent_results_keep_every_entry(tmp_path):
    """dbt --threads: 200 hook calls from 16 threads at once; every record lands, no temp file is left."""
    from dbt_delta_optimize.dbt.bridge import Bridge

    bridge = Bridge()
    start = threading.Barrier(16)

    def call(i: int) -> dict:
        if i < 16:
            start.wait()
        return bridge.run_model(f"s.t{i}", {"skip": True}, invocation_id="inv-1", target_path=str(tmp_path))

    with ThreadPoolExecutor(max_workers=16) as pool:
        returned = list(pool.map(call, range(200)))
    saved = json.loads((tmp_path / "delta_optimize_results.json").read_text())
    assert len(returned) == len(saved) == 200
    assert sorted(r["table"] for r in saved) == sorted(f"s.t{i}" for i in range(200))
    assert {r["invocation_id"] for r in saved} == {"inv-1"}
    assert os.listdir(tmp_path) == ["delta_optimize_results.json"]


def test_the_writability_check_never_creates_or_removes_the_file_itself(tmp_path, monkeypatch):
    """The results file's probe raced a concurrent writer: it created the missing file, a second thread's
    ``os.replace`` put its record there, and the probe's removal deleted it (CI lost 1 record of 200)."""
    from dbt_delta_optimize.ops import outputs

    target = tmp_path / "delta_optimize_results.json"
    touched: list[str] = []
    real_remove, real_open = os.remove, os.open
    monkeypatch.setattr(outputs.os, "remove", lambda p: (touched.append(str(p)), real_remove(p))[1])
    monkeypatch.setattr(outputs.os, "open", lambda p, *a: (touched.append(str(p)), real_open(p, *a))[1])
    assert outputs.check_output(str(target), option="--x") == str(target)
    assert touched and str(target) not in touched and not target.exists()
    assert os.listdir(tmp_path) == []
    target.write_text("[1]")  # an existing file is opened for appending, left as it was
    outputs.check_output(str(target), option="--x")
    assert target.read_text() == "[1]" and os.listdir(tmp_path) == [target.name]


def test_results_file_holds_the_current_invocation_only(tmp_path):
    from dbt_delta_optimize.dbt.bridge import Bridge

    bridge = Bridge()
    for inv, n in (("first", 3), ("second", 2)):
        for i in range(n):
            bridge.run_model(f"s.{inv}{i}", {"skip": True}, invocation_id=inv, target_path=str(tmp_path))
    saved = json.loads((tmp_path / "delta_optimize_results.json").read_text())
    assert [r["table"] for r in saved] == ["s.second0", "s.second1"]


def test_target_path_follows_dbt_flags_then_env(tmp_path, monkeypatch):
    import argparse

    import dbt.flags

    from dbt_delta_optimize.dbt import target_files

    monkeypatch.setenv("DBT_TARGET_PATH", str(tmp_path / "env"))
    assert target_files.target_path(str(tmp_path / "explicit")) == str(tmp_path / "explicit")
    monkeypatch.setattr(
        dbt.flags, "get_flags", lambda: argparse.Namespace(TARGET_PATH="custom", PROJECT_DIR=str(tmp_path))
    )
    assert target_files.target_path(None) == str(tmp_path / "custom")  # --target-path, under the project
    monkeypatch.setattr(dbt.flags, "get_flags", lambda: argparse.Namespace(TARGET_PATH=None, PROJECT_DIR=str(tmp_path)))
    assert target_files.target_path(None) == str(tmp_path / "env")
    monkeypatch.delenv("DBT_TARGET_PATH")
    assert target_files.target_path(None) == str(tmp_path / "target")


@pytest.mark.spark
def test_pre_hook_version_reaches_the_post_hook_of_the_same_invocation_only(spark, tmp_path):
    """The pre-hook's version goes through a file under the target path, keyed by the invocation id.

    Real auto compaction decides from it: the commits after the saved version are the trigger.
    """
    from dbt_delta_optimize.dbt import bridge as dbt_bridge

    table = str(tmp_path / "t")
    _write(table, 2)
    b = dbt_bridge.Bridge()
    files = b.files("inv-a", str(tmp_path / "target"))
    b.record_version(table, invocation_id="inv-a", target_path=files.target_path)
    with open(files.versions_path) as fh:
        assert json.load(fh) == {"invocation_id": "inv-a", "versions": {table: 1}}
    assert b.files("inv-b", files.target_path).pop_version(table) is None  # another invocation sees nothing
    _write(table, 1)  # the model's write
    r = b.run_model(table, {"min_num_files": 5}, invocation_id="inv-a", target_path=files.target_path)
    assert r["status"] == "skipInsufficientFiles" and r["auto_compact"]["sinceVersion"] == 1, r
    assert r["auto_compact"]["triggeringVersions"] == [2] and (r["files_before"], r["files_after"]) == (3, 3)
    r = b.run_model(table, {"min_num_files": 3}, invocation_id="inv-a", target_path=files.target_path)
    assert r["auto_compact"]["sinceVersion"] is None  # read once: without a pre-hook the latest commit triggers
    assert r["status"] == "runOnModifiedPartitions" and (r["files_before"], r["files_after"]) == (3, 1), r
    b.record_version(str(tmp_path / "new"), invocation_id="inv-a", target_path=files.target_path)
    assert files.pop_version(str(tmp_path / "new")) == -1  # no table before the first build
    # a catalog name the run has not created yet (dbt's models): -1 too, not "unknown" (the catalog lookup
    # itself says there is no table; the real dbt runs in test_dbt_integration hold the same)
    b.record_version("default.ddo_not_created_yet", invocation_id="inv-a", target_path=files.target_path)
    assert files.pop_version("default.ddo_not_created_yet") == -1


@pytest.mark.spark
def test_without_a_pre_hook_the_runs_start_finds_every_commit_it_made(spark, tmp_path):
    """No pre-hook version: the commits stamped since dbt's run_started_at are the run's, all of them (a
    microbatch run's batches), and the results entry says which and why; a version that cannot be read is
    not saved (unknown is not "no table")."""
    import datetime as dt

    from deltalake import DeltaTable

    from dbt_delta_optimize.dbt import bridge as dbt_bridge

    table = str(tmp_path / "t")
    _write(table, 2)  # an earlier run
    last = DeltaTable(table).history(1)[0]["timestamp"]
    started = dt.datetime.fromtimestamp((last + 1) / 1000, dt.timezone.utc)
    _write(table, 3)  # this run: three commits
    b = dbt_bridge.Bridge()
    target = str(tmp_path / "target")
    r = b.run_model(table, {"min_num_files": 3}, invocation_id="inv", target_path=target, run_started_at=started)
    run = r["auto_compact"]["runCommits"]
    assert run["basis"] == "started" and run["versions"] == [2, 3, 4] and "run's start" in run["reason"], r
    assert r["batches"] == 3 and r["run_versions"] == [2, 3, 4] and r["partitions_compacted"] == [{}], r
    assert r["status"] == "runOnModifiedPartitions" and (r["files_before"], r["files_after"]) == (5, 1)
    b.record_version(table, invocation_id="inv", target_path=target, spark_target={"method": "thrift"})  # no way in
    assert b.files("inv", target).pop_version(table) is None


def _write(path: str, commits: int) -> None:
    import pyarrow as pa
    from deltalake import write_deltalake

    for i in range(commits):
        write_deltalake(path, pa.table({"id": [i]}), mode="append")


def test_max_duration_setting_is_a_validated_duration():
    from dbt_delta_optimize.dbt.settings import parse_settings
    from dbt_delta_optimize.errors import InvalidArgumentError

    assert parse_settings({"max_duration": "10m"}).options.max_duration == 600
    assert parse_settings({}).options.max_duration is None
    with pytest.raises(InvalidArgumentError, match=r"meta\.delta_optimize\.max_duration"):
        parse_settings({"max_duration": "forever"})


@pytest.mark.spark
def test_an_unwritable_target_path_is_refused_before_the_table_is_touched(spark, tmp_path):
    """Every hook and run-operation checks the results file under dbt's target path first: a failed record
    naming it (the macro logs it, or fails with on_error: fail), and the table neither opened nor changed."""
    from dbt_delta_optimize.dbt import bridge as dbt_bridge
    from dbt_delta_optimize.dbt.maintain_bridge import run_maintain
    from tests.helpers import data_files, log_snapshot

    table = str(tmp_path / "t")
    _write(table, 4)
    blocker = tmp_path / "blocker"
    blocker.write_text("a file where the target folder would be")
    bad = str(blocker / "target")
    log0, files0 = log_snapshot(table), data_files(table)
    b = dbt_bridge.Bridge()
    common = {"invocation_id": "inv-x", "target_path": bad}
    for record in (
        b.run_model(table, {"min_num_files": 2}, **common),
        b.run_operation(table, **common),
        b.run_purge(table, **common),
        b.run_analyze(table, all=True, **common),
        b.run_vacuum(table, retain="0h", allow_short_retention=True, **common),
    ):
        assert record["status"] == "failed", record
        assert record["error"].startswith("OutputPathError: dbt's target path") and bad in record["error"], record
        assert "\n" not in record["error"]
    out = run_maintain([{"table": table, "model": "t", "file_format": "delta"}], target_path=bad)
    assert out["error"].startswith("OutputPathError: dbt's target path") and out["tables"] == []
    assert log_snapshot(table) == log0 and data_files(table) == files0
    assert blocker.read_text() == "a file where the target folder would be"
