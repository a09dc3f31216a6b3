"""The ``dbt-delta-optimize`` command line, in process (click's CliRunner; the CLI's get_spark()
picks up the test session) and, for what needs no Spark, as the installed console script."""

from __future__ import annotations

import json
import os
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
    assert "part=0: 1 bin(s), 2 files" in r.stdout
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
    assert r.stderr.startswith("error:") and "max_threads" in r.stderr


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
    r = CliRunner().invoke(cli, ["optimize", missing, "--dry-run"])
    assert r.exit_code == 2 and r.stderr.count("\n") == 1 and "Traceback" not in r.stderr
    r = CliRunner().invoke(cli, ["--debug", "optimize", missing, "--dry-run"])
    assert r.exit_code == 2 and "Traceback" in r.stderr and "TableNotFoundError" in r.stderr


def test_corrupt_log_is_a_clear_error_with_exit_2(table):
    log = os.path.join(table, "_delta_log")
    last = sorted(n for n in os.listdir(log) if n.endswith(".json"))[-1]
    with open(os.path.join(log, last), "a") as fh:
        fh.write("{not json\n")
    r = CliRunner().invoke(cli, ["optimize", table, "--dry-run"])
    assert r.exit_code == 2 and "is corrupt" in r.stderr and "Kernel error" not in r.stderr
