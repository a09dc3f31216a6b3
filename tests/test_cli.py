"""The ``dbt-delta-optimize`` command line, in process (click's CliRunner; the CLI's get_spark()
picks up the test session) and, for what needs no Spark, as the installed console script."""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import subprocess
import sys

import pytest
from click.testing import CliRunner

from dbt_delta_optimize.cli.main import cli
from tests.helpers import assert_same_rows, data_files, log_snapshot, log_versions, rows_spark
from tests.test_optimize import counts, spark_write

SCRIPT = os.path.join(os.path.dirname(sys.executable), "dbt-delta-optimize")


@pytest.fixture(scope="module")
def cli_template(spark, tmp_path_factory):
    """3 partitions x 2 small files (delta-spark)."""
    p = str(tmp_path_factory.mktemp("cli") / "t")
    spark_write(spark, p, 12, 2, ["id", "id % 3 AS part", "concat('v', id) AS value"], ["part"])
    assert counts(p) == {(0,): 2, (1,): 2, (2,): 2}
    return p


@pytest.fixture
def table(cli_template, tmp_path):
    p = str(tmp_path / "t")
    shutil.copytree(cli_template, p)
    return p


def run(*args: str):
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def test_optimize_json_prints_metrics(spark, table):
    before = rows_spark(spark, table)
    versions = log_versions(table)
    r = run("optimize", table, "--json")
    assert r.exit_code == 0, r.stderr
    m = json.loads(r.stdout)
    assert (m["numFilesAdded"], m["numFilesRemoved"], m["numBins"], m["partitionsOptimized"]) == (3, 6, 3, 3)
    assert m["filesRemoved"]["totalFiles"] == 6 and m["committedVersions"] == [versions[-1] + 1]
    assert m["endTimeMs"] >= m["startTimeMs"] > 0
    assert_camel_case(m)
    assert log_versions(table) == [*versions, versions[-1] + 1]
    assert counts(table) == {(0,): 1, (1,): 1, (2,): 1}
    assert_same_rows(spark, table, before)


def test_optimize_human_output_and_where(spark, table):
    r = run("optimize", table, "--where", "part >= 1", "--where", "part < 2")
    assert r.exit_code == 0, r.stderr
    assert "2 file(s) -> 1" in r.stdout and "1 partition(s)" in r.stdout
    assert counts(table) == {(0,): 2, (1,): 1, (2,): 2}


def test_dry_run_prints_the_plan_and_writes_nothing(spark, table):
    log0, files0 = log_snapshot(table), data_files(table)
    r = run("optimize", table, "--dry-run")
    assert r.exit_code == 0, r.stderr
    assert "3 bin(s) in 3 partition(s)" in r.stdout and "6 of 6 file(s)" in r.stdout
    assert re.search(r"^part=0 +1 +2 +[0-9.]+ (B|KiB)$", r.stdout, re.M), r.stdout  # partition, bins, files, size
    assert log_snapshot(table) == log0 and data_files(table) == files0


def test_dry_run_json_prints_the_plan(spark, table):
    log0, files0 = log_snapshot(table), data_files(table)
    summary = json.loads(run("optimize", table, "--dry-run", "--json", "--where", "part = 2").stdout)
    assert "bins" not in summary, "file lists only with --files"
    assert summary["partitionsToRewrite"] == [
        {"partition": "part=2", "bins": 1, "files": 2, "bytes": summary["bytesToRewrite"]}
    ]
    r = run("optimize", table, "--dry-run", "--json", "--files", "--where", "part = 2")
    assert r.exit_code == 0, r.stderr
    plan = json.loads(r.stdout)
    assert (plan["numBins"], plan["filesToRewrite"], plan["consideredFiles"], plan["partitions"]) == (1, 2, 2, 1)
    assert plan["readVersion"] == log_versions(table)[-1]
    (b,) = plan["bins"]
    assert b["partitionValues"] == {"part": "2"} and len(b["paths"]) == 2
    assert all(os.path.exists(os.path.join(table, p)) for p in b["paths"])
    assert log_snapshot(table) == log0 and data_files(table) == files0


@pytest.mark.parametrize(
    "args,bins,batches",
    [
        (["--min-file-size", "1g"], 3, 1),
        (["--min-file-size", "128m", "--max-file-size", "1g"], 3, 1),
        (["--min-file-size", "1"], 0, 1),  # bytes: no file is smaller than 1 byte
        (["--batch-size", "1"], 3, 3),  # one commit per bin
        (["--batch-size", "1g", "--max-threads", "2"], 3, 1),
        (["--max-file-size", "1048576"], 3, 1),
    ],
)
def test_size_options_are_parsed(spark, table, args, bins, batches):
    r = run("optimize", table, "--dry-run", "--json", *args)
    assert r.exit_code == 0, r.stderr
    plan = json.loads(r.stdout)
    assert plan["numBins"] == bins and plan["numBatches"] == batches


def test_batch_size_option_commits_per_bin(spark, table):
    versions = log_versions(table)
    r = run("optimize", table, "--batch-size", "1", "--json")
    assert r.exit_code == 0, r.stderr
    m = json.loads(r.stdout)
    assert m["numBatches"] == 3 and len(m["committedVersions"]) == 3
    assert log_versions(table) == versions + [versions[-1] + i for i in (1, 2, 3)]
    assert m["settings"]["batch_size"] == {"value": 1, "source": "flag"}  # what was in force, and from where
    assert m["settings"]["max_threads"] == {"value": 15, "source": "default"}


def test_json_names_a_session_conf_as_the_source(spark, table):
    spark.conf.set("spark.databricks.delta.optimize.maxThreads", "3")
    try:
        plan = json.loads(run("optimize", table, "--dry-run", "--json", "--order", "partition").stdout)
        auto = json.loads(run("auto-compact", table, "--json", "--min-num-files", "1").stdout)
    finally:
        spark.conf.unset("spark.databricks.delta.optimize.maxThreads")
    assert plan["settings"]["max_threads"] == {"value": 3, "source": "conf"}
    assert plan["settings"]["order"] == {"value": "partition", "source": "flag"}
    assert auto["settings"]["min_num_files"] == {"value": 1, "source": "flag"}
    assert auto["settings"]["max_threads"] == {"value": 3, "source": "conf"}


@pytest.mark.parametrize(
    "args,needle",
    [
        (["optimize", "{missing}"], "does not exist"),
        (["optimize", "{plain}"], "not a Delta table"),
        (["optimize", "{table}", "--where", "value = 'v1'"], "non-partition column 'value'"),
        (["optimize", "{table}", "--where", "part = = 1"], "Cannot parse"),
        (["optimize", "{table}", "--where", "part IN (SELECT 1)"], "subquery"),
        (["optimize", "{table}", "--max-threads", "0"], "max-threads"),
        (["optimize", "{table}", "--where", "reflect('java.lang.Thread','sleep',120000L) IS NULL"], "reflect"),
        (["optimize", "{table}", "--max-file-size", "1.5g"], "fractions are refused"),
        (["health", "{table}", "--compare-version", "999"], "does not exist"),
        (["optimize", "{table}", "--min-file-size", "-1"], "min-file-size"),
        (["optimize", "{table}", "--batch-size", "lots"], "batch-size"),
        (["optimize", "ddo_cli_no_such_table"], "not found"),
    ],
)
def test_bad_input_exits_2_with_error_on_stderr(spark, table, tmp_path, args, needle):
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "x.parquet").write_bytes(b"PAR1")
    args = [a.format(missing=str(tmp_path / "missing"), plain=str(plain), table=table) for a in args]
    log0, files0 = log_snapshot(table), data_files(table)
    r = CliRunner().invoke(cli, args)
    assert r.exit_code == 2, (r.stdout, r.stderr)
    assert "error:" in r.stderr.lower() and needle in r.stderr
    assert r.stdout == ""
    assert log_snapshot(table) == log0 and data_files(table) == files0


@pytest.mark.parametrize(
    "args",
    [
        ["maintain", "{table}", "--state", "{tmp}/no/dir/state.json"],
        ["maintain", "{table}", "--state", "/proc/state.json"],
        ["maintain", "{table}", "--state", "{tmp}"],
        ["maintain", "{table}", "--html", "/proc/x.html"],
        ["maintain", "{table}", "--dry-run", "--html", "{tmp}/no/dir/x.html"],
        ["maintain", "{table}", "--html", "{table}/_delta_log"],
        ["health", "{table}", "--html", "/proc/x.html"],
        ["health", "{table}", "--html", "{tmp}/no/dir/x.html"],
        ["health", "{table}", "--html", "{tmp}"],
    ],
)
def test_unwritable_outputs_are_refused_before_any_table_is_opened(table, tmp_path, monkeypatch, args):
    """Every file a command writes is checked first: exit 2, one line naming the option and the path, nothing
    written, and the table not even opened (its log unchanged: maintain would have compacted it)."""
    from dbt_delta_optimize.delta import snapshot

    def never(*a, **k):
        raise AssertionError("the table was opened before the output paths were checked")

    monkeypatch.setattr(snapshot, "load_snapshot", never)
    monkeypatch.setattr(snapshot, "load_log_snapshot", never)
    args = [a.format(table=table, tmp=str(tmp_path)) for a in args]
    option = next(a for a in args if a.startswith("--") and a != "--dry-run")
    path = args[args.index(option) + 1]
    log0, files0 = log_snapshot(table), data_files(table)
    r = CliRunner().invoke(cli, args)
    assert r.exit_code == 2, (r.stdout, r.stderr)
    assert r.stderr.startswith("error: ") and r.stderr.count("\n") == 1, r.stderr
    assert option in r.stderr and path in r.stderr, r.stderr
    assert r.stdout == ""
    assert not os.path.isfile(path) and not os.path.exists(str(tmp_path / "no"))
    assert log_snapshot(table) == log0 and data_files(table) == files0


def test_info_json(spark, table):
    r = run("info", table, "--json")
    assert r.exit_code == 0, r.stderr
    info = json.loads(r.stdout)
    assert info["numFiles"] == 6 and info["partitionColumns"] == ["part"] and info["version"] == log_versions(table)[-1]


def test_console_script_help_and_config_error_without_spark(tmp_path):
    """The installed entry point; bad settings fail before any Spark session is started."""
    r = subprocess.run([SCRIPT, "--help"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "optimize" in r.stdout
    r = subprocess.run(
        [SCRIPT, "optimize", str(tmp_path), "--max-threads", "0"], capture_output=True, text=True, timeout=60
    )
    assert r.returncode == 2
    assert r.stderr.startswith("error:") and "--max-threads" in r.stderr and r.stderr.count("\n") == 1


DRY_RUN_WITHOUT_SPARK = """
import sys, time
t0 = time.perf_counter()
from dbt_delta_optimize.cli.main import cli
try:
    cli.main(["optimize", sys.argv[1], "--dry-run", "--json"], standalone_mode=False)
finally:
    print("ELAPSED", time.perf_counter() - t0, file=sys.stderr)
    print("JVM", "pyspark" in sys.modules or "py4j" in sys.modules, file=sys.stderr)
"""


def test_dry_run_on_a_path_starts_no_jvm(table):
    r = subprocess.run(
        [sys.executable, "-c", DRY_RUN_WITHOUT_SPARK, table], capture_output=True, text=True, timeout=120
    )
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["numBins"] == 3
    assert "JVM False" in r.stderr, r.stderr  # (its time is measured by bench/plan_scale.py, not asserted)


def test_errors_are_one_line_unless_debug(tmp_path):
    missing = str(tmp_path / "missing")
    for args in (["optimize", missing, "--dry-run"], ["info", missing], ["history", missing], ["health", missing]):
        r = CliRunner().invoke(cli, args)
        assert r.exit_code == 2, (args, r.stderr)
        assert r.stderr.startswith("error: Table path") and r.stderr.count("\n") == 1, r.stderr
        assert "Traceback" not in r.stderr and r.stdout == ""
    r = CliRunner().invoke(cli, ["--debug", "optimize", missing, "--dry-run"])
    assert r.exit_code == 2 and "Traceback" in r.stderr and "TableNotFoundError" in r.stderr
    assert r.stderr.rstrip().splitlines()[-1].startswith("error: Table path")


def test_debug_prints_the_cause_chain(tmp_path):
    """A log deltalake cannot read: our error names the table; --debug adds deltalake's own error below it."""
    path = write_table(tmp_path / "t", 2)
    with open(os.path.join(path, "_delta_log", f"{1:020d}.json"), "w") as fh:
        fh.write("{not json\n")
    r = CliRunner().invoke(cli, ["info", path])
    assert r.exit_code == 2 and r.stderr.count("\n") == 1, r.stderr
    assert "Kernel error" not in r.stderr and "Traceback" not in r.stderr
    r = CliRunner().invoke(cli, ["--debug", "info", path])
    assert r.exit_code == 2
    assert "The above exception was the direct cause of the following exception" in r.stderr, r.stderr
    assert "CorruptLogError" in r.stderr


def test_unexpected_errors_name_the_type_and_first_line_only(tmp_path, monkeypatch):
    from dbt_delta_optimize.cli import inspect as cli_inspect

    def boom(_table):
        raise RuntimeError("Kernel error: it broke\n\tat org.apache.spark.SomeClass.method(SomeClass.scala:42)")

    monkeypatch.setattr(cli_inspect, "_summary", boom)
    r = CliRunner().invoke(cli, ["info", str(tmp_path)])
    assert r.exit_code == 1
    assert r.stderr == "error: RuntimeError: it broke (run with --debug for details)\n"
    r = CliRunner().invoke(cli, ["--debug", "info", str(tmp_path)])
    assert r.exit_code == 1 and "Traceback" in r.stderr and "SomeClass.scala:42" in r.stderr


@pytest.mark.parametrize(
    "args,needle",
    [
        (["optimize", "t", "--max-threads", "0"], "'--max-threads': 0 is not in the range"),
        (["optimize", "t", "--min-file-size", "lots"], "--min-file-size"),
        (["optimize", "t", "--files"], "--files lists the files of a plan"),
        (["optimize"], "Missing argument 'TABLE'"),
        (["no-such-command"], "No such command"),
    ],
)
def test_usage_errors_are_one_line_too(args, needle):
    r = CliRunner().invoke(cli, args)
    assert r.exit_code == 2 and r.stdout == ""
    assert r.stderr.startswith("error: ") and r.stderr.count("\n") == 1 and needle in r.stderr, r.stderr


def test_corrupt_log_is_a_clear_error_with_exit_2(table):
    log = os.path.join(table, "_delta_log")
    last = sorted(n for n in os.listdir(log) if n.endswith(".json"))[-1]
    with open(os.path.join(log, last), "a") as fh:
        fh.write("{not json\n")
    r = CliRunner().invoke(cli, ["optimize", table, "--dry-run"])
    assert r.exit_code == 2 and "is corrupt" in r.stderr and "Kernel error" not in r.stderr


# ----------------------------------------------------------------------------- without Spark
def write_table(path, partitions: int, files: int = 2) -> str:
    """``files`` appends by deltalake, each one small file in each of ``partitions`` partitions."""
    import pyarrow as pa
    from deltalake import write_deltalake

    for i in range(files):
        data = pa.table({"id": list(range(partitions)), "part": list(range(partitions)), "v": [f"v{i}"] * partitions})
        write_deltalake(str(path), data, partition_by=["part"], mode="append")
    return str(path)


#: Keys whose values are data (column names, table properties), not keys of our JSON shapes.
#: maps keyed by data (partition values, table properties) or by setting names (the declared options' names)
DATA_MAPS = {"partitionValues", "configuration", "partitionTypes", "partition", "settings"}
CAMEL = re.compile(r"^[a-z][a-zA-Z0-9]*$")


def assert_camel_case(value, where="$"):
    if isinstance(value, dict):
        for k, v in value.items():
            assert CAMEL.match(k), f"{where}.{k} is not camelCase"
            if k not in DATA_MAPS:
                assert_camel_case(v, f"{where}.{k}")
    elif isinstance(value, list):
        for i, v in enumerate(value):
            assert_camel_case(v, f"{where}[{i}]")


def test_json_of_every_command_is_camel_case(tmp_path):
    from deltalake import DeltaTable

    path = write_table(tmp_path / "t", 3)
    DeltaTable(path).optimize.compact()  # an OPTIMIZE commit (delta-rs) for validate
    write_table(path, 3)
    outputs = {}
    for args in (
        ["info", path],
        ["optimize", path, "--dry-run"],
        ["optimize", path, "--dry-run", "--files"],
        ["history", path],
        ["health", path],
        ["validate", path],
        ["auto-compact", path, "--respect-config"],
        ["jars"],
    ):
        r = CliRunner().invoke(cli, [*args, "--json"])
        assert r.exit_code == 0, (args, r.stderr)
        outputs[" ".join(args[:1] + [a for a in args[2:] if a.startswith("--")])] = out = json.loads(r.stdout)
        assert_camel_case(out)
    assert outputs["optimize --dry-run"]["numBins"] == 3 and "bins" not in outputs["optimize --dry-run"]
    assert [len(b["paths"]) for b in outputs["optimize --dry-run --files"]["bins"]] == [3, 3, 3]
    assert outputs["validate"]["ok"] is True and outputs["validate"]["operation"] == "OPTIMIZE"
    assert [e["operation"] for e in outputs["history"]] == ["WRITE", "WRITE", "OPTIMIZE", "WRITE", "WRITE"]
    assert outputs["auto-compact --respect-config"]["status"] == "disabled"
    assert outputs["info"]["numFiles"] == 9 and outputs["jars"]["jars"]
    with pytest.raises(AssertionError, match="not camelCase"):
        assert_camel_case({"ok": [{"files_before": 1}]})


def test_info_prints_a_readable_summary(tmp_path):
    path = write_table(tmp_path / "t", 53, files=1)
    r = CliRunner().invoke(cli, ["info", path])
    assert r.exit_code == 0, r.stderr
    out = r.stdout
    assert "Snapshot(" not in out and "{" not in out
    assert re.search(r"^version +0$", out, re.M)
    assert re.search(r"^protocol +reader 1, writer 2; no table features$", out, re.M), out
    assert re.search(r"^partitioned by +part$", out, re.M)
    assert re.search(r"^files +53 \([0-9.]+ KiB\)$", out, re.M)
    assert re.search(r"^part=0 +1 +[0-9.]+ (B|KiB)$", out, re.M)
    shown = re.findall(r"^part=\d+ ", out, re.M)
    assert len(shown) == 50 and re.search(r"^\+3 more partition\(s\)$", out, re.M), out
    assert not any(line != line.rstrip() for line in out.splitlines()), "no trailing padding in plain output"


def test_dry_run_text_lists_files_only_with_files_flag(tmp_path):
    path = write_table(tmp_path / "t", 2)
    plain = CliRunner().invoke(cli, ["optimize", path, "--dry-run"]).stdout
    with_files = CliRunner().invoke(cli, ["optimize", path, "--dry-run", "--files"]).stdout
    assert ".parquet" not in plain and "2 bin(s) in 2 partition(s), 4 of 4 file(s)" in plain
    assert len(re.findall(r"^part=\d +part=\d/\S+\.parquet$", with_files, re.M)) == 4, with_files


def test_progress_bar_labels_bins_as_bins_and_bytes_as_sizes():
    from rich.console import Console

    from dbt_delta_optimize.cli.progress import OptimizeProgress

    buf = io.StringIO()
    with OptimizeProgress(Console(file=buf, force_terminal=True, width=120, color_system=None)) as progress:
        progress(1, 3, 1024, 3 * 1024 * 1024)
        progress(3, 3, 3 * 1024 * 1024, 3 * 1024 * 1024)
    screens = [s for s in re.split(r"[\r\n]", re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", buf.getvalue())) if "bins" in s]
    assert "1/3 bins" in screens[0] and "1.0 KiB of 3.0 MiB" in screens[0], screens
    assert "3/3 bins" in screens[-1] and "3.0 MiB of 3.0 MiB" in screens[-1], screens
    assert "bytes" not in buf.getvalue()
    silent = OptimizeProgress(None)
    with silent:
        silent(1, 1, 1, 1)  # no console: nothing to draw, no error


def test_sizes_use_binary_units():
    from dbt_delta_optimize.cli.format import human_size

    assert [human_size(n) for n in (None, 0, 1023, 1024, 1536, 128 * 2**20, 2**30, 5 * 2**40)] == [
        "-",
        "0 B",
        "1023 B",
        "1.0 KiB",
        "1.5 KiB",
        "128.0 MiB",
        "1.0 GiB",
        "5.0 TiB",
    ]


def test_logging_is_configured_by_global_options_and_restored(tmp_path):
    import logging

    ours = logging.getLogger("dbt_delta_optimize")
    before = (ours.level, ours.propagate, list(ours.handlers))
    seen = {}

    def spy(_table):
        seen["level"] = ours.getEffectiveLevel()
        seen["handlers"] = [type(h).__name__ for h in ours.handlers]
        logging.getLogger("dbt_delta_optimize.api").info("visible with -v")
        return {}

    from dbt_delta_optimize.cli import inspect as cli_inspect

    real = cli_inspect._summary
    cli_inspect._summary = spy
    try:
        r = CliRunner().invoke(cli, ["-v", "info", str(tmp_path), "--json"])
        assert r.exit_code == 0 and seen == {"level": logging.INFO, "handlers": ["_LazyRichHandler"]}
        assert "visible with -v" in r.stderr
        CliRunner().invoke(cli, ["--debug", "info", str(tmp_path), "--json"])
        assert seen["level"] == logging.DEBUG
        CliRunner().invoke(cli, ["info", str(tmp_path), "--json"])
        assert seen["level"] == logging.WARNING
    finally:
        cli_inspect._summary = real
    assert (ours.level, ours.propagate, list(ours.handlers)) == before


# ----------------------------------------------------------------------------- the embedded JVM on demand
COMPACT_IN_PROCESS = """
import sys
from dbt_delta_optimize.cli.main import cli
try:
    cli.main(["optimize", *sys.argv[1:], "--json"], standalone_mode=False)
finally:
    print("JVM", "pyspark" in sys.modules or "py4j" in sys.modules, file=sys.stderr)
"""


def _without_java(tmp_path) -> dict[str, str]:
    """An environment whose JAVA_HOME has no Java (spark-class and our check both take JAVA_HOME first)."""
    return {**os.environ, "JAVA_HOME": str(tmp_path / "no-java"), "COLUMNS": "300"}


def test_compaction_runs_without_java_and_clustering_without_it_is_one_clear_line(tmp_path):
    """Bins in the driver's threads need no JVM: the embedded session is started only for work that needs
    Spark. So a machine without Java compacts, and a Z-order there is refused in one line, nothing written."""
    from tests.helpers import rows_deltars

    path = write_table(tmp_path / "t", partitions=3, files=3)
    before, versions = rows_deltars(path), log_versions(path)
    r = subprocess.run(
        [sys.executable, "-c", COMPACT_IN_PROCESS, path], env=_without_java(tmp_path), capture_output=True, text=True
    )
    assert r.returncode == 0, r.stderr
    metrics = json.loads(r.stdout)
    assert (metrics["numFilesRemoved"], metrics["numFilesAdded"], metrics["totalClusterParallelism"]) == (9, 3, 2)
    assert (
        "JVM False" in r.stderr and rows_deltars(path) == before and log_versions(path) == [*versions, versions[-1] + 1]
    )

    z = str(tmp_path / "z")
    write_table(z, partitions=2)
    files, zversions = data_files(z), log_versions(z)
    r = subprocess.run(
        [SCRIPT, "optimize", z, "--zorder-by", "id"], env=_without_java(tmp_path), capture_output=True, text=True
    )
    assert r.returncode == 2, r.stderr
    assert r.stderr.startswith("error: the embedded Spark session needs Java 17") and "JAVA_HOME=" in r.stderr
    assert r.stderr.count("\n") == 1, r.stderr
    assert data_files(z) == files and log_versions(z) == zversions


@pytest.mark.parametrize(
    ("script", "said"),
    [
        ('echo "Error: could not find libjvm.so" >&2; exit 1', "exits with 1 (Error: could not find libjvm.so)"),
        ("echo 'openjdk version \"11.0.22\" 2024-01-16' >&2", "is Java 11"),
        ("echo 'java version \"1.8.0_402\"' >&2", "is Java 8"),
    ],
    ids=["broken", "java11", "java8"],
)
def test_a_java_that_does_not_run_or_is_too_old_is_one_line_before_spark_starts(tmp_path, script, said):
    """spark-class would print its own lines and exit: our check runs ``java -version`` first."""
    java = tmp_path / "jdk" / "bin" / "java"
    java.parent.mkdir(parents=True)
    java.write_text(f"#!/bin/sh\n{script}\n")
    java.chmod(0o755)
    z = str(tmp_path / "z")
    write_table(z, partitions=2)
    files, versions = data_files(z), log_versions(z)
    env = {**os.environ, "JAVA_HOME": str(tmp_path / "jdk"), "COLUMNS": "300"}
    r = subprocess.run([SCRIPT, "optimize", z, "--zorder-by", "id"], env=env, capture_output=True, text=True)
    assert r.returncode == 2, r.stderr
    assert r.stderr == (
        f"error: the embedded Spark session needs Java 17 or later, and {java} {said}. "
        "Set JAVA_HOME to a Java 17 installation.\n"
    )
    assert data_files(z) == files and log_versions(z) == versions


@pytest.mark.slow
def test_a_bin_that_falls_back_to_spark_starts_the_embedded_session_then(tmp_path):
    """A file in Spark's legacy hybrid calendar is found only by the task reading it: the deferred session
    starts from that bin's thread, the bin is rewritten by Spark, and both readers see the same rows."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from deltalake import convert_to_deltalake

    from tests.helpers import rows_deltars

    path = tmp_path / "legacy"
    path.mkdir()
    legacy = {b"org.apache.spark.legacyDateTime": b"", b"org.apache.spark.version": b"3.0.0"}
    for i in range(4):
        data = pa.table({"id": pa.array(range(i * 10, i * 10 + 10), pa.int64()), "v": [f"v{i}"] * 10})
        pq.write_table(data.replace_schema_metadata(legacy if i == 0 else None), str(path / f"part-{i}.parquet"))
    convert_to_deltalake(str(path))
    before = rows_deltars(str(path))
    r = subprocess.run(
        [sys.executable, "-c", COMPACT_IN_PROCESS, str(path)], capture_output=True, text=True, timeout=600
    )
    assert r.returncode == 0, r.stderr[-3000:]
    metrics = json.loads(r.stdout)
    assert (metrics["numFilesRemoved"], metrics["numFilesAdded"]) == (4, 1), metrics
    assert len(metrics["sparkFallbacks"]) == 1 and "legacy hybrid calendar" in json.dumps(metrics["sparkFallbacks"])
    assert "JVM True" in r.stderr
    assert rows_deltars(str(path)) == before
