"""``make bench`` flags a regression only beyond the run-to-run noise it measured (bench/noise.py, bench/suite.py)."""

from __future__ import annotations

import pytest

from bench import suite
from bench.noise import FLOOR, K, ratios, regressed, relative_spread, tolerance


def test_the_spread_is_the_range_of_the_per_repeat_ratios_over_their_median():
    assert ratios([1.0, 2.0, 3.0], [2.0, 2.0, 0.0]) == [0.5, 1.0]  # a reference that took no time is left out
    assert relative_spread([0.60, 0.70, 0.65]) == pytest.approx(0.10 / 0.65)
    assert relative_spread([0.61]) == 0.0 and relative_spread([]) == 0.0


def test_the_tolerance_is_ten_percent_or_k_times_the_larger_spread():
    assert tolerance(0.0) == FLOOR == 0.10
    assert tolerance(0.05) == 0.10  # quiet run: the floor
    assert tolerance(0.15) == pytest.approx(K * 0.15) == pytest.approx(0.225)
    assert tolerance(0.02, recorded_spread=0.20) == pytest.approx(0.30)  # a noisy baseline is as uncertain


def test_the_issues_case_is_noise_and_a_real_slowdown_is_not():
    # Re-run on a quiet machine: 0.70 against the recorded 0.61 (+15%) inside a spread of about 15%.
    assert not regressed(0.70, 0.61, spread=0.15)
    assert regressed(0.70, 0.61, spread=0.0)  # with no noise measured the old 10% rule holds
    assert regressed(0.80, 0.61, spread=0.15)  # +31% is beyond 1.5 x 15%
    assert not regressed(0.66, 0.61, spread=0.0)  # +8%: under the floor
    assert not regressed(5.0, None, spread=0.0) and not regressed(5.0, 0.0, spread=0.0)  # nothing recorded


def test_the_suite_takes_the_spread_from_each_benchmarks_repeats():
    small = {
        "case": "small",
        "ours_vs_delta_rs": 0.70,
        "ours_vs_delta_spark": 0.1,
        "times_s": {"ours": [0.7, 0.63, 0.77], "delta-rs": [1.0, 1.0, 1.0], "delta-spark": [7.0, 7.0, 7.0]},
    }
    values, spreads = suite.collect({"local": [small]})
    assert values["local_small_vs_delta_rs"] == 0.70
    assert spreads["local_small_vs_delta_rs"] == pytest.approx(0.14 / 0.70)  # (0.77 - 0.63) / 0.70
    assert spreads["local_small_vs_delta_spark"] == pytest.approx(0.02 / 0.10)  # ratios 0.10, 0.09, 0.11
    recorded = {"metrics": {"local_small_vs_delta_rs": 0.61, "local_small_vs_delta_spark": 0.05}}
    assert not suite.is_regressed("local_small_vs_delta_rs", values, spreads, recorded)
    assert suite.is_regressed("local_small_vs_delta_spark", values, spreads, recorded)  # 2x, spread 20%
    lines = suite.table(values, spreads, recorded)
    assert any("+15% (+30%)" in line and "REGRESSED" not in line for line in lines), lines
    assert any("+100% (+30%) REGRESSED" in line for line in lines), lines
    # A benchmark from before the per-repeat times: its noise is 0 (the 10% floor), not an error.
    old = {k: v for k, v in small.items() if k != "times_s"}
    assert suite.collect({"local": [old]})[1]["local_small_vs_delta_rs"] == 0.0


def test_each_commands_imports_are_a_metric_flagged_beyond_their_noise():
    """bench/imports.py's JSON: every CLI case is a metric (its imports / a fresh ``import deltalake``'s)."""
    cases = {case: {"vs_deltalake": 2.0, "vs_deltalake_samples": [1.9, 2.0, 2.1]} for case, _, _ in suite.IMPORT_CASES}
    cases["vacuum"] = {"vs_deltalake": 3.0, "vs_deltalake_samples": [3.0, 3.0, 3.0]}
    values, spreads = suite.collect(
        {"imports": {"package_own_ms": 0.5, "package_own_ms_samples": [0.5], "cases": cases}}
    )
    assert values["imports_package_ms"] == 0.5
    assert {f"imports_{case}_vs_deltalake" for case, _, _ in suite.IMPORT_CASES} <= set(values)
    assert spreads["imports_optimize_vs_deltalake"] == pytest.approx(0.1)
    recorded = {"metrics": {"imports_vacuum_vs_deltalake": 2.0, "imports_optimize_vs_deltalake": 1.9}}
    assert suite.is_regressed("imports_vacuum_vs_deltalake", values, spreads, recorded)  # +50%, no noise
    assert not suite.is_regressed("imports_optimize_vs_deltalake", values, spreads, recorded)  # +5%


def test_compaction_in_fresh_processes_is_timed_end_to_end_and_held_to_the_issues_bars(tmp_path):
    """bench/fresh_compact.py runs our console script and delta-rs's compact() as processes of their own on
    copies of one table, checks they leave the same files and rows, and the suite reads issue 45's bars off it."""
    import pyarrow as pa
    from deltalake import write_deltalake

    from bench import fresh_compact

    src = str(tmp_path / "src")
    for i in range(3):  # three appends: three small files in each of two partitions
        rows = pa.table({"id": list(range(i * 10, i * 10 + 10)), "part": [0, 1] * 5})
        write_deltalake(src, rows, mode="append", partition_by=["part"])
    work = tmp_path / "work"
    work.mkdir()
    result = fresh_compact.bench_case(src, str(work), "tiny", repeats=2)
    assert result["files_rows_after"] == (2, 30)  # one file a partition, every row kept, by both engines
    assert all(len(v) == 2 and min(v) > 0 for v in result["times_s"].values())
    assert result["ours_vs_delta_rs"] == pytest.approx(result["median_s"]["ours"] / result["median_s"]["delta-rs"])
    assert list(work.iterdir()) == []  # each copy removed after its run
    values, _ = suite.collect({"fresh": [result]})
    assert values["fresh_tiny_vs_delta_rs"] == result["ours_vs_delta_rs"]
    assert "fresh_small_vs_delta_rs" not in values  # a case not run is no metric
    line = next(x for x in suite.table(values, {}, {}) if "5,000 files of 5.5 KB" in x)
    assert "fresh processes" in line and "≤ 0.90" in line


def test_the_docs_block_keeps_the_rows_a_run_did_not_measure(tmp_path):
    """``--docs`` after ``--only fresh``: the fresh rows are this run's; the VACUUM and warm rows, and where they
    came from, stay as they were (they used to be dropped, and every row dated today)."""
    fresh_tiny = next(m for m in suite.METRICS if m.key == "fresh_tiny_vs_delta_rs")
    vacuum = next(m for m in suite.METRICS if m.key == "vacuum_cli_vs_delta_rs")
    warm_tiny = next(m for m in suite.METRICS if m.key == "local_tiny_vs_delta_rs")
    doc = tmp_path / "perf.md"
    doc.write_text(
        "intro\n\n"
        f"{suite.START}\nMeasured by `make bench` on 2026-11-25 (medians of 3).\n\n"
        "| measure | ratio | target |\n|---|---|---|\n"
        f"| {warm_tiny.label} | 1.48 | ≤ 0.50 NOT MET |\n"
        f"| {fresh_tiny.label} | 1.30 | ≤ 0.90 NOT MET |\n"
        "| a measure no longer in the suite | 2.00 |  |\n"
        f"| {vacuum.label} | 0.78 | ≤ 1.00 met |\n"
        f"{suite.END}\n\nafter\n"
    )
    for day in ("2026-11-28", "2026-11-29"):  # twice: the second run's note does not repeat the first's
        suite.write_docs(str(doc), suite.docs_table({"fresh_tiny_vs_delta_rs": 1.03}), day, ["fresh"])
    text = doc.read_text()
    block = text.split(suite.START)[1].split(suite.END)[0].strip().splitlines()
    assert block[0] == (
        "The fresh lines measured by `make bench` on 2026-11-29 (2 cores, alternating order). "
        "Measured by `make bench` on 2026-11-25 (medians of 3)."
    )
    assert block[2:4] == ["| measure | ratio | target |", "|---|---|---|"]
    assert block[4:] == [  # METRICS order, this run's fresh row, the others as they were, an unknown row last
        f"| {vacuum.label} | 0.78 | ≤ 1.00 met |",
        f"| {warm_tiny.label} | 1.48 | ≤ 0.50 NOT MET |",
        f"| {fresh_tiny.label} | 1.03 | ≤ 0.90 NOT MET |",
        "| a measure no longer in the suite | 2.00 |  |",
    ]
    assert text.startswith("intro\n\n") and text.endswith(f"{suite.END}\n\nafter\n")
    # a run that measured every row of the block keeps no older note
    suite.write_docs(str(doc), suite.docs_table({"fresh_tiny_vs_delta_rs": 0.9}), "2026-11-30", ["fresh"])
    only = tmp_path / "only.md"
    only.write_text(f"{suite.START}\nold note\n\n| measure | ratio | target |\n|---|---|---|\n{suite.END}\n")
    suite.write_docs(str(only), suite.docs_table({"fresh_tiny_vs_delta_rs": 0.9}), "2026-11-30", ["fresh"])
    assert only.read_text().splitlines()[1] == (
        "The fresh lines measured by `make bench` on 2026-11-30 (2 cores, alternating order)."
    )
