"""``analyze`` planning, pure: which files lack stats for the stats columns (milliseconds, no Spark)."""

from __future__ import annotations

import json

import pytest

from dbt_delta_optimize.delta.actions import AddFile, Metadata, Protocol
from dbt_delta_optimize.delta.snapshot import Snapshot
from dbt_delta_optimize.errors import InvalidArgumentError
from dbt_delta_optimize.plan.analyze import analyze_parameters, coverage, plan_analyze, required_leaves
from dbt_delta_optimize.plan.predicate import select_partitions

SCHEMA = {
    "type": "struct",
    "fields": [
        {"name": "id", "type": "long", "nullable": True, "metadata": {}},
        {"name": "flag", "type": "boolean", "nullable": True, "metadata": {}},
        {
            "name": "st",
            "type": {"type": "struct", "fields": [{"name": "a", "type": "string", "nullable": True, "metadata": {}}]},
            "nullable": True,
            "metadata": {},
        },
        {"name": "p", "type": "integer", "nullable": True, "metadata": {}},
    ],
}

FULL = {
    "numRecords": 5,
    "minValues": {"id": 1, "st": {"a": "a"}},
    "maxValues": {"id": 9, "st": {"a": "z"}},
    "nullCount": {"id": 0, "flag": 0, "st": {"a": 0}},
}


def _add(path: str, stats: dict | None, p: str = "1") -> AddFile:
    return AddFile(path, {"p": p}, 100, 1, stats=json.dumps(stats) if stats is not None else None)


def _snapshot(files, config=None, schema=SCHEMA) -> Snapshot:
    md = Metadata("id", json.dumps(schema), ("p",), config or {})
    return Snapshot("/t", 7, Protocol(1, 2), md, tuple(files))


def test_missing_incomplete_and_covered_stats():
    snap = _snapshot(
        [
            _add("a", None),
            _add("b", {"numRecords": 5}),  # written with dataSkippingNumIndexedCols = 0
            _add("c", FULL),
            _add("d", {**FULL, "minValues": {"id": 1}, "maxValues": {"id": 9}}),  # st.a lacks bounds
            # every st.a is null: delta-spark writes no bounds, and the stats still cover it
            _add(
                "e",
                {
                    **FULL,
                    "minValues": {"id": 1},
                    "maxValues": {"id": 9},
                    "nullCount": {**FULL["nullCount"], "st": {"a": 5}},
                },
            ),
        ]
    )
    plan = plan_analyze(snap)
    assert plan.reasons == {"a": "missing", "b": "incomplete", "d": "incomplete"}
    assert [f.path for f in plan.files] == ["a", "b", "d"] and plan.files_considered == 5
    assert plan.stats_columns == ("id", "flag", "st.a")  # partition columns never; boolean: nullCount only
    assert plan_analyze(snap, all_files=True).reasons == dict.fromkeys("abcde", "all")


def test_columns_narrow_the_check_and_must_be_stats_columns():
    snap = _snapshot([_add("d", {**FULL, "minValues": {"id": 1}, "maxValues": {"id": 9}})])
    assert plan_analyze(snap, columns=["id"]).files == ()
    assert [f.path for f in plan_analyze(snap, columns=["ST.a"]).files] == ["d"]
    assert [f.path for f in plan_analyze(snap, columns=["st"]).files] == ["d"]
    with pytest.raises(InvalidArgumentError, match="dataSkippingStatsColumns"):
        plan_analyze(snap, columns=["p"])  # a partition column gets no stats


def test_num_indexed_cols_and_stats_columns_decide_what_must_be_covered():
    only_id = {"numRecords": 5, "minValues": {"id": 1}, "maxValues": {"id": 9}, "nullCount": {"id": 0}}
    assert plan_analyze(_snapshot([_add("a", only_id)], {"delta.dataSkippingNumIndexedCols": "1"})).files == ()
    assert plan_analyze(_snapshot([_add("a", only_id)], {"delta.dataSkippingStatsColumns": "id"})).files == ()
    changed = _snapshot([_add("a", only_id)], {"delta.dataSkippingStatsColumns": "id,st.a"})
    assert plan_analyze(changed).reasons == {"a": "incomplete"}
    assert (
        plan_analyze(_snapshot([_add("a", {"numRecords": 5})], {"delta.dataSkippingNumIndexedCols": "0"})).files == ()
    )


def test_column_mapping_checks_physical_names():
    schema = {
        "type": "struct",
        "fields": [
            {"name": "id", "type": "long", "nullable": True, "metadata": {"delta.columnMapping.physicalName": "col-1"}},
            {
                "name": "p",
                "type": "integer",
                "nullable": True,
                "metadata": {"delta.columnMapping.physicalName": "col-2"},
            },
        ],
    }
    config = {"delta.columnMapping.mode": "name"}
    logical = {"numRecords": 1, "minValues": {"id": 1}, "maxValues": {"id": 1}, "nullCount": {"id": 0}}
    physical = {"numRecords": 1, "minValues": {"col-1": 1}, "maxValues": {"col-1": 1}, "nullCount": {"col-1": 0}}
    files = [
        AddFile("a", {"col-2": "1"}, 1, 1, stats=json.dumps(logical)),
        AddFile("b", {"col-2": "1"}, 1, 1, stats=json.dumps(physical)),
    ]
    snap = _snapshot(files, config, schema)
    assert plan_analyze(snap).reasons == {"a": "incomplete"}
    assert [p for p, _ in required_leaves(snap, ["id"])] == [("col-1",)]


def test_where_selects_partitions_and_is_recorded():
    snap = _snapshot([_add("a", None, "1"), _add("b", None, "2"), _add("c", None, "2")])
    selection = select_partitions(snap, ["p = 2"])
    plan = plan_analyze(snap, selection=selection)
    assert [f.path for f in plan.files] == ["b", "c"] and plan.files_considered == 2
    params = analyze_parameters(plan.predicates)
    assert json.loads(params["predicate"]) == list(selection.predicate_strings) and "p" in params["predicate"]
    assert analyze_parameters(()) == {"predicate": '["true"]'}  # recompute's default Literal(true)


def test_batches_split_files_per_commit():
    snap = _snapshot([_add(f"f{i:02d}", None) for i in range(25)])
    plan = plan_analyze(snap, files_per_commit=10)
    assert [len(b) for b in plan.batches] == [10, 10, 5]
    assert plan.to_dict()["commits"] == 3 and plan.to_dict()["reasons"] == {"missing": 25}
    with pytest.raises(InvalidArgumentError):
        plan_analyze(snap, files_per_commit=0)


def test_coverage_of_unparsable_or_countless_stats_is_missing():
    assert coverage("{not json", ()) == "missing"
    assert coverage('{"minValues":{}}', ()) == "missing"
    assert coverage('{"numRecords":3}', ()) is None
