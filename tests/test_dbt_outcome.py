"""The hook's outcome: one frozen record, from which the results file's entry and the log line are made."""

from __future__ import annotations

import dataclasses

import pytest

from dbt_delta_optimize.dbt.outcome import Outcome


def test_the_entry_keeps_exactly_the_reported_keys_in_order_and_the_line_comes_from_the_record():
    report = {
        "table": "s.t",
        "model": None,
        "mode": "auto",
        "engine": "sql",
        "method": "thrift",
        "decision": "runOnModifiedPartitions",
        "status": "runOnModifiedPartitions",
        "reason": None,
        "files_before": 4,
        "bytes_before": 400,
        "clustered_by": ["a"],
        "validation": [{"version": 3, "ok": True, "codes": []}],
        "files_after": 2,
        "bytes_after": 380,
        "vacuum": {"files": 1},  # an operation's own payload is kept, not dropped
    }
    o = Outcome.of(report, 1.234)
    assert o.seconds == 1.23 and o.clustered_by == ("a",) and o.extra == {"vacuum": {"files": 1}}
    entry = o.to_dict()
    assert list(entry) == [*report, "seconds", "line"]
    assert {k: entry[k] for k in report} == report  # lists come back as lists, None stays a present null
    assert "on_error" not in entry and "error" not in entry  # absent stays absent
    assert entry["line"] == (
        "delta_optimize s.t: runOnModifiedPartitions via sql (thrift), files 4 -> 2, bytes 400 -> 380, 1.23s"
    )
    with pytest.raises(dataclasses.FrozenInstanceError):
        o.status = "failed"  # type: ignore[misc]


def test_an_error_makes_the_outcome_failed_and_a_skip_names_its_reason():
    o = Outcome.of({"table": "t", "decision": "optimize", "status": "optimized", "error": "boom"}, 0.0)
    assert o.status == "failed" and o.to_dict()["status"] == "failed"
    assert o.line() == "delta_optimize t: optimize, files -, 0.0s ERROR boom"
    no_status = Outcome.of({"table": "t", "error": "x"}, 0.0).to_dict()
    assert no_status["status"] == "failed" and no_status["line"].startswith("delta_optimize t: failed,")
    skip = Outcome.of({"table": "t", "engine": "spark", "decision": "skipped", "status": "skipped", "reason": "r"}, 0)
    assert skip.line() == "delta_optimize t: skipped, files -, 0.0s (r)"
