"""A run killed (SIGKILL) after writing its files but before committing leaves debris; the next run removes it."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from dbt_delta_optimize.api import optimize
from dbt_delta_optimize.delta.debris import STAGING_DIR
from dbt_delta_optimize.engine.layout import new_file_location
from tests.helpers import rows_deltars, rows_spark

KILLED_RUN = """
import os, signal, sys
import dbt_delta_optimize.engine.executor as ex

def die(*args, **kwargs):  # every bin is written, nothing is committed yet
    os.kill(os.getpid(), signal.SIGKILL)

ex.commit_batch = die
from dbt_delta_optimize.api import optimize
optimize(None, sys.argv[1], max_threads=1)
"""


def _parquet_on_disk(root: str) -> set[str]:
    out = set()
    for folder, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if d != "_delta_log"]
        out.update(os.path.relpath(os.path.join(folder, f), root) for f in files if f.endswith(".parquet"))
    return out


def _referenced(root: str) -> set[str]:
    from urllib.parse import unquote

    refs = set()
    log = os.path.join(root, "_delta_log")
    for name in os.listdir(log):
        if name.endswith(".json"):
            with open(os.path.join(log, name)) as fh:
                for line in fh:
                    action = json.loads(line)
                    if "add" in action:
                        refs.add(unquote(action["add"]["path"]))
    return refs


@pytest.mark.spark
@pytest.mark.slow
def test_sigkill_before_commit_then_rerun_leaves_no_debris(spark, tmp_path):
    p = str(tmp_path / "t")
    for i in range(3):
        spark.range(i * 30, i * 30 + 30, 1, 3).selectExpr("id", "id % 3 AS part").write.format("delta").partitionBy(
            "part"
        ).mode("append").save(p)
    before = rows_spark(spark, p)
    env = {**os.environ, "DBT_DELTA_OPTIMIZE_HOME": str(tmp_path / "home")}
    killed = subprocess.run([sys.executable, "-c", KILLED_RUN, p], env=env, capture_output=True, timeout=600)
    assert killed.returncode == -9, killed.stderr.decode()[-2000:]
    stray = _parquet_on_disk(p) - _referenced(p)
    assert stray, "the killed run had written files it never committed"
    assert os.path.isdir(os.path.join(p, STAGING_DIR)), "its manifest is there"

    m = optimize(spark, p, max_threads=1)
    assert m.num_files_added == 3 and len(m.committed_versions) == 1
    assert _parquet_on_disk(p) - _referenced(p) == set(), "no stray data file"
    assert not os.path.exists(os.path.join(p, STAGING_DIR))
    assert not [n for n in os.listdir(os.path.join(p, "_delta_log")) if n.endswith(".tmp")]
    assert rows_spark(spark, p) == before and rows_deltars(p) == before


@pytest.mark.parametrize(
    "values",
    [{"p": "../../etc"}, {"p": "a/b"}, {"p": ".."}, {"p": None}, {"p": ""}, {"p": "x%2F..%2F.."}],
)
def test_new_files_always_land_under_the_root_in_the_partition_folder(values):
    dest, log_path, rel = new_file_location("/root/t", values, ["p"], "part-0.parquet")
    assert dest.startswith("/root/t/p=") and dest.endswith("/part-0.parquet")
    assert os.path.normpath(dest).startswith("/root/t/p=")
    assert log_path.startswith("p=") and log_path.endswith("/part-0.parquet")
    assert "/" not in rel  # one folder level for one partition column: escaping keeps '/' out
    with pytest.raises(ValueError):
        new_file_location("/root/t", values, ["p"], "../x.parquet")


def test_partition_folder_linked_out_of_the_table_is_refused_before_any_write(spark, tmp_path):
    """A symbolic link in the table (part=1 -> elsewhere) would carry new files out: exit 2, nothing written."""
    from click.testing import CliRunner

    from dbt_delta_optimize.cli.main import cli
    from tests.helpers import log_snapshot

    p, outside = tmp_path / "t", tmp_path / "outside"
    for i in range(2):
        spark.range(i * 10, i * 10 + 10, 1, 2).selectExpr("id", "id % 2 AS part").write.format("delta").partitionBy(
            "part"
        ).mode("append").save(str(p))
    (p / "part=1").rename(outside)
    (p / "part=1").symlink_to(outside, target_is_directory=True)
    before_log, before_outside, before_inside = log_snapshot(str(p)), os.listdir(outside), os.listdir(p / "part=0")
    res = CliRunner().invoke(cli, ["optimize", str(p)])
    assert res.exit_code == 2, res.output
    assert "part=1" in res.stderr and "outside the table" in res.stderr and "Traceback" not in res.stderr
    assert log_snapshot(str(p)) == before_log
    assert sorted(os.listdir(outside)) == sorted(before_outside)
    assert sorted(os.listdir(p / "part=0")) == sorted(before_inside)
    assert not os.path.exists(os.path.join(p, STAGING_DIR))
