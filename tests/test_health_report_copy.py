"""``HealthReport.to_dict`` copies its JSON-shaped data without deepcopy's memo: the same value, nothing shared."""

from __future__ import annotations

import datetime
import decimal
import enum
import json
import random

from dbt_delta_optimize.inspect.health_report import _fresh


class Color(enum.IntEnum):
    RED = 1


class Text(str):
    pass


class Ratio(float):
    pass


_SCALARS = [
    0, -1, 2**70, 1.5, -0.0, 1e300, float("nan"), float("inf"), -float("inf"), True, False, None,
    "", "plain", 'quo"te\\ and \n\t\x00 control', "é ü 😀 漢字", Color.RED, Text("sub"), Ratio(2.5),
    datetime.date(2026, 11, 26), decimal.Decimal("1.10"),
]  # fmt: skip
_KEYS = ["a", "", "é", 'k"ey', 1, -2, 2.5, True, False, None, Color.RED]


def _value(rng: random.Random, depth: int) -> object:
    kind = rng.random()
    if depth >= 4 or kind < 0.5:
        return rng.choice(_SCALARS)
    n = rng.choice([0, 1, 2, 5])
    if kind < 0.7:
        return [_value(rng, depth + 1) for _ in range(n)]
    if kind < 0.8:
        return tuple(_value(rng, depth + 1) for _ in range(n))
    return {rng.choice(_KEYS): _value(rng, depth + 1) for _ in range(n)}


def test_fresh_copy_equals_deepcopy_and_shares_nothing():
    rng = random.Random(7)
    value = {"bins": [_value(rng, 1) for _ in range(200)], "nested": {"a": [{"b": [1, {"c": 2}]}]}}
    copied = _fresh(value)
    assert json.dumps(copied, default=str) == json.dumps(value, default=str)
    copied["nested"]["a"][0]["b"][1]["c"] = 3
    assert value["nested"]["a"][0]["b"][1]["c"] == 2
