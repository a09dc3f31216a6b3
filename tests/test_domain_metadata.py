"""Domain metadata (PROTOCOL.md "Domain Metadata"): the newest action per domain, through checkpoints."""

from __future__ import annotations

import json
import os

import pytest

from dbt_delta_optimize.delta.actions import DomainMetadata
from dbt_delta_optimize.delta.log import list_log, read_domains
from dbt_delta_optimize.delta.storage import LocalStorage


def _commit(root: str, version: int, *actions: dict) -> None:
    os.makedirs(os.path.join(root, "_delta_log"), exist_ok=True)
    with open(os.path.join(root, "_delta_log", f"{version:020d}.json"), "w") as fh:
        fh.write("\n".join(json.dumps(a) for a in actions) + "\n")


def _dm(domain: str, config: dict, removed: bool = False) -> dict:
    return {"domainMetadata": DomainMetadata(domain, json.dumps(config), removed).to_json()}


def test_newest_action_per_domain_wins_and_tombstones_drop(tmp_path):
    root = str(tmp_path)
    _commit(root, 0, _dm("delta.rowTracking", {"rowIdHighWaterMark": 4}), _dm("app.x", {"a": 1}))
    _commit(root, 1, _dm("delta.rowTracking", {"rowIdHighWaterMark": 9}))
    _commit(root, 2, _dm("app.x", {}, removed=True), _dm("delta.clustering", {"clusteringColumns": [["id"]]}))
    storage = LocalStorage()
    listing = list_log(storage, root)
    at = {v: read_domains(storage, root, v, listing) for v in range(3)}
    assert at[0]["delta.rowTracking"].config == {"rowIdHighWaterMark": 4}
    assert set(at[1]) == {"delta.rowTracking", "app.x"}
    assert at[1]["delta.rowTracking"].config == {"rowIdHighWaterMark": 9}
    assert set(at[2]) == {"delta.rowTracking", "delta.clustering"}, "a removed domain is not live"
    assert DomainMetadata("d", "not json").config == {}
    assert DomainMetadata.from_json(at[2]["delta.clustering"].to_json()) == at[2]["delta.clustering"]


@pytest.mark.spark
def test_domains_of_a_delta_spark_table_through_a_checkpoint(spark, tmp_path):
    from dbt_delta_optimize.delta.snapshot import load_snapshot

    path = str(tmp_path / "clustered")
    spark.sql(
        f"CREATE TABLE delta.`{path}` (id BIGINT, x STRING) USING delta CLUSTER BY (id) "
        "TBLPROPERTIES ('delta.enableRowTracking'='true', 'delta.checkpointInterval'='2')"
    )
    for i in range(3):
        spark.sql(f"INSERT INTO delta.`{path}` VALUES ({i}, 'a'), ({i + 10}, 'b')")
    assert any(".checkpoint." in n for n in os.listdir(os.path.join(path, "_delta_log")))
    domains = load_snapshot(path).domains
    assert domains["delta.clustering"].config["clusteringColumns"] == [["id"]]
    assert domains["delta.rowTracking"].config["rowIdHighWaterMark"] == 5, "6 rows: ids 0..5"
