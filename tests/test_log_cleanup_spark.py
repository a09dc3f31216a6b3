"""Expired log cleanup against delta-spark 4.4 on twin copies of one table.

delta-spark cleans one copy the way it does after a checkpoint (``MetadataCleanup.cleanUpExpiredLogs``,
cutoff from file modification times); our OPTIMIZE's commit writes a checkpoint on the other and
cleans up after it. The same ``_delta_log`` files must remain, and delta-spark must still time travel
to every version from the oldest kept checkpoint on, reading the same rows as before.
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pytest

from dbt_delta_optimize.ops.optimize import optimize
from dbt_delta_optimize.ops.vacuum import vacuum
from dbt_delta_optimize.plan.log_cleanup import parse_log_name

BASE = time.time() - 60 * 86400  # two months ago: older than the 30-day logRetentionDuration
OLD_UP_TO = 4  # versions 0..4 get old modification times; 5 stays young
LAST = 5  # the twins are cut here; version 9 (a checkpoint) triggers each side's cleanup
#: delta-spark refuses time travel to commits older than delta.deletedFileRetentionDuration (a data-vacuum guard)
ENFORCE = "spark.databricks.delta.vacuum.enforceTimeTravelWithinDeletedFileRetentionDuration"


def _log_names(path: str) -> set[str]:
    """The log's files up to version LAST (the triggering commit differs between the twins), checksums too."""
    out = set()
    for name in os.listdir(Path(path, "_delta_log")):
        parsed = parse_log_name(name.lstrip(".").removesuffix(".crc") if name.startswith(".") else name)
        if parsed is not None and parsed.version <= LAST:
            out.add(name)
    return out


def _age(path: str) -> None:
    """Old modification times for versions 0..OLD_UP_TO, increasing with the version (as a real log's)."""
    for name in os.listdir(Path(path, "_delta_log")):
        base = name.lstrip(".").removesuffix(".crc") if name.startswith(".") else name
        parsed = parse_log_name(base)
        if parsed is not None and parsed.version <= OLD_UP_TO:
            t = BASE + parsed.version
            os.utime(Path(path, "_delta_log", name), (t, t))


@pytest.fixture(scope="module")
def history(spark, tmp_path_factory):
    """A delta-spark table: version 0 created, 1..5 one row each (version v holds ids 1..v); checkpoints at 2, 4."""
    path = str(tmp_path_factory.mktemp("logclean") / "t")
    spark.sql(f"CREATE TABLE delta.`{path}` (id INT) USING delta TBLPROPERTIES ('delta.checkpointInterval'='2')")
    for i in range(1, LAST + 1):
        spark.sql(f"INSERT INTO delta.`{path}` VALUES ({i})")
    assert sorted(r.id for r in spark.read.format("delta").load(path).collect()) == list(range(1, LAST + 1))
    return path, {v: list(range(1, v + 1)) for v in range(LAST + 1)}


def test_same_log_files_left_as_delta_spark_and_time_travel_still_works(spark, history, tmp_path):
    path, rows = history
    a, b = str(tmp_path / "spark"), str(tmp_path / "ours")
    shutil.copytree(path, a)
    shutil.copytree(path, b)
    for twin in (a, b):
        _age(twin)
    before = _log_names(b)

    # our dry run lists what will go, deletes nothing
    listed = vacuum(spark, b, clean_logs=True, dry_run=True).log_cleanup
    assert listed is not None and listed.files and _log_names(b) == before

    spark.sql(f"INSERT INTO delta.`{a}` VALUES ({LAST + 1})")  # delta-spark: a commit, a checkpoint, its cleanup
    metrics = optimize(spark, b)  # ours: the next version compacts the files, writes a checkpoint, cleans up
    assert metrics.num_files_removed > 0
    assert metrics.log_files_deleted == len(listed.files) and metrics.log_bytes_deleted == listed.bytes
    assert metrics.to_dict()["logFilesDeleted"] == len(listed.files)
    assert Path(b, "_delta_log", f"{LAST + 1:020d}.checkpoint.parquet").exists()

    left_spark, left_ours = _log_names(a), _log_names(b)
    assert left_spark != before  # delta-spark did clean up (the test sees a cleanup, not a no-op)
    assert left_ours == left_spark
    assert before - left_ours == {n for n in listed.files}  # exactly what the dry run listed
    assert "_last_checkpoint" in os.listdir(Path(b, "_delta_log"))

    # delta-spark still time travels to every version from the oldest kept checkpoint on, with the same rows
    kept = sorted(p.version for n in left_ours if (p := parse_log_name(n)) and p.kind == "checkpoint")
    assert kept[0] == 4  # 0..3 went: two groups, each before a checkpoint; 4.. stays (5 is young)
    spark.conf.set(ENFORCE, "false")
    try:
        for v in range(kept[0], LAST + 1):
            got = sorted(r.id for r in spark.read.option("versionAsOf", v).format("delta").load(b).collect())
            assert got == rows[v], v
        with pytest.raises(Exception, match=r"VERSION_NOT_FOUND|Available versions"):
            spark.read.option("versionAsOf", kept[0] - 1).format("delta").load(b).collect()
    finally:
        spark.conf.unset(ENFORCE)
    assert sorted(r.id for r in spark.read.format("delta").load(b).collect()) == rows[LAST]
