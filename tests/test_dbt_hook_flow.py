"""The post-hook and run-operation flow on a Spark session, in process: every meta key reaches the work in
every mode (iterated from the declaration in ``options.py``), the result names the settings in force and
where each came from, and one post-hook reads the table's snapshot once before its write and once after.

Real Spark, real tables, real compactions: the bridge's functions are called as dbt's macros call them.
"""

from __future__ import annotations

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from dbt_delta_optimize.options import AUTO_COMPACT_OPTIONS, OPTIMIZE_OPTIONS, PURGE_FIXED, GiB, MiB, Option

pytestmark = pytest.mark.spark

_AUTO_NAMES = {o.name for o in AUTO_COMPACT_OPTIONS}


def _other(option: Option) -> object:
    """A valid value of ``option`` that is not its default (so a dropped key shows as the default)."""
    d = option.default
    if option.kind == "flag":
        return not d
    if option.kind == "choice":
        return next(c for c in option.choices if c != d)
    if option.kind == "count":
        # above the minimum: one commit attempt would refuse commit_every's second commit (our own first one
        # is a conflict to retry past)
        return option.minimum + 1 if option.minimum + 1 != d else option.minimum + 2
    if option.kind == "size":
        return "64m" if d != 64 * MiB else "32m"
    if option.kind == "ratio":
        return 0.5
    if option.kind == "duration":
        return "1h"
    return 1  # bins_or_duration: one commit per bin


def _meta_options(options: tuple[Option, ...]) -> dict[str, Option]:
    return {o.name: o for o in options if o.meta_key is not None}


#: Every meta key a model may give, from the declaration (auto compaction's own and every OPTIMIZE one).
META = {**_meta_options(OPTIMIZE_OPTIONS), **_meta_options(AUTO_COMPACT_OPTIONS)}


def _expected(option: Option) -> dict[str, object]:
    """The config field(s) a meta value resolves to, as the plan's config holds them."""
    value = option.parse(_other(option))
    return dict(zip(option.targets, value)) if option.targets else {option.name: value}


def _two_partitions(path: str, writes: int) -> None:
    """``writes`` appends, each adding one small file to each of 2 partitions."""
    for i in range(writes):
        data = pa.table({"p": ["a", "b"], "id": [i, i + 100]})
        write_deltalake(path, data, mode="append", partition_by=["p"])


@pytest.fixture
def resolved(monkeypatch):
    """Every OptimizeConfig the planners resolve (the config the plan, and so the executor, runs with)."""
    from dbt_delta_optimize.plan.config import OptimizeConfig

    seen: list[OptimizeConfig] = []
    original = OptimizeConfig.resolve.__func__  # type: ignore[attr-defined]

    def resolve(cls, get_conf=None, overrides=None):
        config = original(cls, get_conf, overrides)
        seen.append(config)
        return config

    monkeypatch.setattr(OptimizeConfig, "resolve", classmethod(resolve))
    return seen


def _check_reached(mode: str, config, record: dict, names: set[str], source: str) -> None:
    """Each of ``names`` is in ``config`` with the value given, and the record names it with its source."""
    missing = []
    for name in sorted(names):
        option = META[name]
        for field, value in _expected(option).items():
            if getattr(config, field) != value:
                missing.append(f"{name} ({field}={getattr(config, field)!r}, given {value!r})")
        shown = record["settings"].get(name)
        if shown is None or shown["source"] != source:
            missing.append(f"{name} not reported as {source}: {shown}")
    assert not missing, f"mode {mode}: these meta keys did not reach the work: {missing}"


def test_every_meta_key_reaches_auto_compaction(spark, tmp_path, resolved):
    """The default mode: auto compaction's keys decide, every OPTIMIZE key runs the compaction."""
    from dbt_delta_optimize.dbt.bridge import Bridge

    path = str(tmp_path / "auto")
    _two_partitions(path, 2)
    settings = {name: _other(o) for name, o in META.items()}
    settings["min_file_size"], settings["max_file_size"] = "64m", "128m"  # tiny files: both partitions qualify
    b = Bridge()
    r = b.run_model(path, settings, invocation_id="auto", target_path=str(tmp_path / "target"))
    assert r["status"] == "runOnModifiedPartitions", (r.get("error"), r.get("reason"))
    assert r["auto_compact"]["minNumFiles"] == META["min_num_files"].parse(settings["min_num_files"])
    (config,) = resolved
    assert (config.min_file_size, config.max_file_size) == (64 * MiB, 128 * MiB)  # auto compaction's sizes
    optimize_only = {n for n in META if n not in _AUTO_NAMES}
    _check_reached("auto", config, r, optimize_only, "meta")
    assert r["settings"]["min_num_files"] == {"value": 1, "source": "meta"}
    assert r["settings"]["max_num_modified_partitions"]["source"] == "default"  # no meta key: conf or default


@pytest.mark.parametrize("mode", ["optimize", "run-operation optimize", "run-operation purge"])
def test_every_optimize_meta_key_reaches_optimize_and_purge(spark, tmp_path, resolved, mode):
    from dbt_delta_optimize.dbt.bridge import Bridge

    path = str(tmp_path / "t")
    _two_partitions(path, 2)
    names = {n for n in _meta_options(OPTIMIZE_OPTIONS)}
    if mode.endswith("purge"):
        names -= set(PURGE_FIXED)
    given = {n: _other(META[n]) for n in names}
    b, target = Bridge(), {"invocation_id": mode, "target_path": str(tmp_path / "target")}
    if mode == "optimize":
        r, source = b.run_model(path, {"mode": "optimize", **given}, **target), "meta"
    elif mode == "run-operation optimize":  # half from the model's meta, half from the settings argument
        half = dict(list(given.items())[::2])
        rest = {k: v for k, v in given.items() if k not in half}
        r = b.run_operation(path, settings=rest, meta=half, **target)
        assert {r["settings"][k]["source"] for k in half} == {"meta"}
        source = "args"
        names = set(rest)
    else:
        r, source = b.run_purge(path, settings=given, **target), "args"
        assert {r["settings"][k]["source"] for k in PURGE_FIXED} == {"fixed"}
    assert r["status"] != "failed", r
    assert resolved, "no plan was made"
    _check_reached(mode, resolved[-1], r, names, source)


def test_run_operation_settings_refuse_a_key_that_is_not_an_optimize_setting(tmp_path):
    from dbt_delta_optimize.dbt.bridge import Bridge

    r = Bridge().run_operation(str(tmp_path / "x"), settings={"mode": "never"}, target_path=str(tmp_path / "target"))
    assert r["status"] == "failed" and "Unknown run-operation setting(s): mode" in r["error"]


def test_commit_every_in_the_default_mode_commits_each_bin(spark, tmp_path):
    """The issue's case in process: 2 partitions, min_num_files 2, commit_every 1: one commit per bin."""
    from dbt_delta_optimize.dbt.bridge import Bridge

    path = str(tmp_path / "inc")
    _two_partitions(path, 2)
    b, target = Bridge(), {"invocation_id": "inv", "target_path": str(tmp_path / "target")}
    b.record_version(path, **target)
    _two_partitions(path, 1)  # the model's write: 3 small files in each partition
    r = b.run_model(path, {"min_num_files": 2, "commit_every": 1}, **target)
    assert r["status"] == "runOnModifiedPartitions" and r["auto_compact"]["sinceVersion"] == 1, r
    ops = [h for h in DeltaTable(path).history() if h["operation"] == "OPTIMIZE"]
    assert len(ops) == 2 and {str(h["operationParameters"]["auto"]).lower() for h in ops} == {"true"}
    assert r["auto_compact"]["metrics"]["committedVersions"] == [3, 4]
    assert r["settings"]["commit_every"] == {"value": [1, None], "source": "meta"}
    assert r["settings"]["max_threads"] == {"value": 15, "source": "default"}
    assert (r["files_before"], r["files_after"]) == (6, 2)


def test_session_conf_is_named_as_the_source(spark, tmp_path):
    from dbt_delta_optimize.dbt.bridge import Bridge

    path = str(tmp_path / "conf")
    _two_partitions(path, 1)
    spark.conf.set("spark.dbt_delta_optimize.order", "partition")
    try:
        r = Bridge().run_model(path, {"mode": "optimize"}, target_path=str(tmp_path / "target"))
    finally:
        spark.conf.unset("spark.dbt_delta_optimize.order")
    assert r["settings"]["order"] == {"value": "partition", "source": "conf"}
    assert r["settings"]["max_file_size"] == {"value": GiB, "source": "default"}


@pytest.mark.parametrize("mode,expected", [("auto", (1, 1)), ("optimize", (1, 1)), ("never", (0, 0))])
def test_one_post_hook_reads_the_snapshot_once_before_and_once_after(spark, tmp_path, monkeypatch, mode, expected):
    """Loads of the table's snapshot by one post-hook: before its write, and after it (only if it wrote)."""
    from dbt_delta_optimize.dbt.bridge import Bridge
    from dbt_delta_optimize.delta import snapshot as snapshot_module

    path = str(tmp_path / "loads")
    _two_partitions(path, 3)
    b, target = Bridge(), {"invocation_id": "loads", "target_path": str(tmp_path / "target")}
    loads: list[int] = []
    original = snapshot_module.load_snapshot

    def counting(*args, **kwargs):
        snap = original(*args, **kwargs)
        loads.append(snap.version)
        return snap

    monkeypatch.setattr(snapshot_module, "load_snapshot", counting)
    r = b.run_model(path, {"mode": mode, "min_num_files": 2}, **target)
    wrote = r["status"] in ("optimized", "runOnModifiedPartitions")
    before = [v for v in loads if v == 2]
    after = [v for v in loads if v > 2]
    assert (len(before), len(after)) == expected, (r["status"], loads)
    assert wrote == (expected[1] == 1)
