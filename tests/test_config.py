"""Configuration parsing under delta-spark's keys: pure, no Spark."""

from __future__ import annotations

import pytest

from dbt_delta_optimize.errors import InvalidConfigError
from dbt_delta_optimize.plan.config import GiB, MiB, OptimizeConfig, parse_bool, parse_size


@pytest.mark.parametrize(
    "text,expected", [("128m", 128 * MiB), ("1g", GiB), ("1024", 1024), (5, 5), ("2kb", 2048), (" 1G ", GiB), ("0", 0)]
)
def test_parse_size(text, expected):
    assert parse_size(text) == expected


@pytest.mark.parametrize("bad", ["-1", "abc", "1x", "", True, -5, None, 1.0, "1.5g", "0.5m", 2**70, "9000000p"])
def test_parse_size_rejects(bad):
    with pytest.raises(InvalidConfigError, match="128m"):
        parse_size(bad)


def test_parse_size_bounds_are_a_long():
    assert parse_size(str(2**63 - 1)) == 2**63 - 1
    assert parse_size("8191p") == 8191 * 1024**5
    with pytest.raises(InvalidConfigError, match="a long"):
        parse_size(2**63)
    with pytest.raises(InvalidConfigError, match="fractions are refused"):
        parse_size("1.5g", key="max_file_size")


def test_defaults_are_delta_sparks():
    c = OptimizeConfig.resolve()
    assert (
        c.min_file_size,
        c.max_file_size,
        c.max_threads,
        c.batch_size,
        c.max_deleted_rows_ratio,
        c.repartition_enabled,
    ) == (
        GiB,
        GiB,
        15,
        None,
        0.05,
        False,
    )
    assert c.rewrite_engine == "arrow"


def test_session_conf_then_overrides():
    conf = {
        "spark.databricks.delta.optimize.minFileSize": "64m",
        "spark.databricks.delta.optimize.maxFileSize": "256m",
        "spark.databricks.delta.optimize.maxThreads": "4",
        "spark.databricks.delta.optimize.batchSize": "1g",
        "spark.databricks.delta.optimize.repartition.enabled": "TRUE",
        "spark.dbt_delta_optimize.rewriteEngine": "spark",
    }
    c = OptimizeConfig.resolve(conf.get)
    assert (c.min_file_size, c.max_file_size, c.max_threads, c.batch_size, c.repartition_enabled, c.rewrite_engine) == (
        64 * MiB,
        256 * MiB,
        4,
        GiB,
        True,
        "spark",
    )
    c2 = OptimizeConfig.resolve(conf.get, {"max_threads": 2, "min_file_size": "1m"})
    assert c2.max_threads == 2 and c2.min_file_size == MiB and c2.max_file_size == 256 * MiB


@pytest.mark.parametrize(
    "overrides,needle",
    [
        ({"max_threads": 0}, "max_threads"),
        ({"min_file_size": "-1"}, "min_file_size"),
        ({"max_file_size": 0}, "max_file_size"),
        ({"max_deleted_rows_ratio": 1.5}, "max_deleted_rows_ratio"),
        ({"batch_size": "0"}, "batch_size"),
        ({"rewrite_engine": "pandas"}, "rewrite_engine"),
        ({"max_file": 1}, "Unknown optimize setting"),
    ],
)
def test_invalid_values_name_the_setting(overrides, needle):
    with pytest.raises(InvalidConfigError, match=needle):
        OptimizeConfig.resolve(None, overrides)


def test_invalid_session_conf_names_the_key():
    with pytest.raises(InvalidConfigError, match=r"spark\.databricks\.delta\.optimize\.maxThreads"):
        OptimizeConfig.resolve({"spark.databricks.delta.optimize.maxThreads": "zero"}.get)


def test_parse_bool_accepts_quoted_and_any_case():
    assert parse_bool("'TRUE'", key="k") is True and parse_bool("fAlse", key="k") is False
    with pytest.raises(InvalidConfigError):
        parse_bool("yes", key="k")
