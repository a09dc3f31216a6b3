"""The dbt bridge's maintain body without dbt: its argument checks, the report file, and the engine choice."""

from __future__ import annotations

import json

from dbt_delta_optimize.dbt.maintain_bridge import REPORT_FILE, run_maintain


def test_bad_arguments_come_back_as_an_error_and_keep_the_previous_report(tmp_path):
    (tmp_path / REPORT_FILE).write_text('{"tables": [], "kept": true}')
    for bad in ("ddo_it.a", [{"model": "a"}], [42]):
        out = run_maintain(bad, target_path=str(tmp_path))
        assert out["error"].startswith("InvalidArgumentError") and out["tables"] == []
    out = run_maintain([], dry_run="yes", target_path=str(tmp_path))
    assert "dry_run must be true or false" in out["error"]
    assert json.loads((tmp_path / REPORT_FILE).read_text())["kept"] is True


def test_a_server_method_without_a_connection_skips_every_table_and_says_why(tmp_path):
    nodes = [{"table": "ddo_it.a", "model": "a", "file_format": "delta"}]
    out = run_maintain(nodes, spark_target={"method": "thrift"}, target_path=str(tmp_path))
    assert out["error"] is None and out["tables"] == []
    (skipped,) = out["skipped"]
    assert skipped["table"] == "ddo_it.a" and "SPARK_REMOTE" in skipped["reason"]
    assert out["lines"] == [f"delta_maintain ddo_it.a: skipped: {skipped['reason']}"]
    written = json.loads((tmp_path / REPORT_FILE).read_text())
    assert written["skipped"] == out["skipped"] and "lines" not in written
