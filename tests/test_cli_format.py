"""The CLI's JSON printer: orjson's text, equal to the standard library's indented JSON for our reports."""

from __future__ import annotations

import datetime as dt
import json
import math
from dataclasses import dataclass
from typing import Any

import click
from click.testing import CliRunner

from dbt_delta_optimize.cli.format import echo_json


@dataclass(frozen=True)
class _Point:
    x: int


def _printed(value: Any) -> str:
    @click.command()
    def show() -> None:
        echo_json(value)

    result = CliRunner().invoke(show)
    assert result.exit_code == 0, result.output
    return result.output


def test_same_text_as_the_standard_library_for_a_report() -> None:
    report = {
        "table": "s3://bucket/marts/orders",
        "version": 12,
        "partitionColumns": ["day", "region"],
        "avgFileSize": 104829801.84347874,
        "ratios": [0.1, 1e16, 2.0, -0.0, 1.2345678901234568e17],
        "empty": {"list": [], "dict": {}},
        "flags": [True, False, None],
        "bins": [{"partition": {"day": "2026-11-26"}, "files": 3, "bytes": 9_000}],
        "label": 'quote " backslash \\ tab \t line\n',
    }
    assert _printed(report) == json.dumps(report, indent=2, default=str) + "\n"


def test_small_floats_differ_only_in_their_exponent_text() -> None:
    value = {"tiny": [1e-07, 2.5e-300]}
    assert _printed(value) == '{\n  "tiny": [\n    1e-7,\n    2.5e-300\n  ]\n}\n'  # json writes 1e-07
    assert json.loads(_printed(value)) == value


def test_values_json_cannot_hold_are_printed_as_their_text() -> None:
    when = dt.datetime(2026, 11, 26, 7, 46, tzinfo=dt.timezone.utc)
    value = {"at": when, "point": _Point(3), 5: "int key"}
    assert json.loads(_printed(value)) == {"at": str(when), "point": str(_Point(3)), "5": "int key"}


def test_nan_is_null_and_huge_integers_still_print() -> None:
    assert json.loads(_printed({"ratio": math.nan})) == {"ratio": None}
    assert json.loads(_printed({"n": 2**70})) == {"n": 2**70}  # beyond orjson: the standard library's text


def test_non_ascii_is_utf8() -> None:
    assert json.loads(_printed({"name": "caf\u00e9 \U0001f600"})) == {"name": "caf\u00e9 \U0001f600"}
