"""``arrow_kernels`` answers as ``pyarrow.compute`` does, kernel by kernel, on the inputs the package gives them
(nulls included), and never loads ``pyarrow.compute``."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from dbt_delta_optimize import arrow_kernels as ak

STRINGS = pa.array(["a/b", None, "../x", "%2F", "/abs", "s3://b/k", "a/b"], pa.string())
INTS = pa.array([5, None, 3, 3, 9, 0], pa.int64())
BOOLS = pa.array([True, None, False, True], pa.bool_())
FLOATS = pa.chunked_array([[1.5, math.nan, None], [-0.0, 0.0, 2.0]], pa.float64())
TABLE = pa.table({"g": [2, 1, 2, 1], "s": [10, 30, 5, 30], "r": [0, 1, 2, 3]})
MAPS = pa.array([[("p", "a"), ("q", "x")], [("q", "y")], None], pa.map_(pa.string(), pa.string()))

CASES = [
    (lambda m: m.take(INTS, pa.array([4, 1, 0])), lambda: pc.take(INTS, pa.array([4, 1, 0]))),
    (lambda m: m.take(TABLE, pa.array([3, 0])), lambda: pc.take(TABLE, pa.array([3, 0]))),
    (lambda m: m.filter_(STRINGS, pc.is_valid(STRINGS)), lambda: pc.filter(STRINGS, pc.is_valid(STRINGS))),
    (lambda m: m.filter_(INTS.slice(0, 4), BOOLS), lambda: pc.filter(INTS.slice(0, 4), BOOLS)),
    (lambda m: m.cast(INTS, pa.int32()), lambda: pc.cast(INTS, pa.int32())),
    (lambda m: m.sort_indices(STRINGS), lambda: pc.sort_indices(STRINGS)),
    (
        lambda m: m.sort_indices(TABLE, [("g", "ascending"), ("s", "ascending"), ("r", "ascending")]),
        lambda: pc.sort_indices(TABLE, sort_keys=[("g", "ascending"), ("s", "ascending"), ("r", "ascending")]),
    ),
    (lambda m: m.is_in(STRINGS, pa.array(["a/b", None])), lambda: pc.is_in(STRINGS, value_set=pa.array(["a/b", None]))),
    (
        lambda m: m.index_in(STRINGS, pa.array(["/abs", "a/b"])),
        lambda: pc.index_in(STRINGS, value_set=pa.array(["/abs", "a/b"])),
    ),
    (lambda m: m.starts_with(STRINGS, "/"), lambda: pc.starts_with(STRINGS, "/")),
    (lambda m: m.match_substring(STRINGS, "%"), lambda: pc.match_substring(STRINGS, "%")),
    (lambda m: m.match_substring_regex(STRINGS, r"\.\.|[%:]"), lambda: pc.match_substring_regex(STRINGS, r"\.\.|[%:]")),
    (lambda m: m.count_distinct(STRINGS), lambda: pc.count_distinct(STRINGS)),
    (lambda m: m.min_max(INTS), lambda: pc.min_max(INTS)),
    (lambda m: m.min_(INTS), lambda: pc.min(INTS)),
    (lambda m: m.sum_(BOOLS), lambda: pc.sum(BOOLS)),
    (lambda m: m.any_(BOOLS), lambda: pc.any(BOOLS)),
    (lambda m: m.all_(BOOLS), lambda: pc.all(BOOLS)),
    (lambda m: m.any_(pa.array([None], pa.bool_())), lambda: pc.any(pa.array([None], pa.bool_()))),
    (lambda m: m.dictionary_encode(STRINGS), lambda: pc.dictionary_encode(STRINGS)),
    (lambda m: m.fill_null(STRINGS, "\x00"), lambda: pc.fill_null(STRINGS, "\x00")),
    (lambda m: m.fill_null(BOOLS, False), lambda: pc.fill_null(BOOLS, False)),
    (lambda m: m.coalesce(INTS, pa.scalar(7, pa.int64())), lambda: pc.coalesce(INTS, pa.scalar(7, pa.int64()))),
    (
        lambda m: m.binary_join_element_wise(STRINGS, STRINGS, "|"),
        lambda: pc.binary_join_element_wise(STRINGS, STRINGS, "|"),
    ),
    (lambda m: m.map_lookup(MAPS, pa.scalar("q"), "first"), lambda: pc.map_lookup(MAPS, pa.scalar("q"), "first")),
    (lambda m: m.index(FLOATS, 0.0), lambda: pc.index(FLOATS, 0.0)),
    (lambda m: m.is_nan(FLOATS), lambda: pc.is_nan(FLOATS)),
    (lambda m: m.is_valid(STRINGS), lambda: pc.is_valid(STRINGS)),
    (lambda m: m.indices_nonzero(BOOLS), lambda: pc.indices_nonzero(BOOLS)),
    (lambda m: m.invert(BOOLS), lambda: pc.invert(BOOLS)),
    (lambda m: m.if_else(BOOLS, 1, 2), lambda: pc.if_else(BOOLS, 1, 2)),
    (lambda m: m.cumulative_sum(INTS), lambda: pc.cumulative_sum(INTS)),
    (lambda m: m.add(INTS, 2), lambda: pc.add(INTS, 2)),
    (lambda m: m.subtract(INTS, 2), lambda: pc.subtract(INTS, 2)),
    (lambda m: m.and_(BOOLS, BOOLS), lambda: pc.and_(BOOLS, BOOLS)),
    (lambda m: m.or_(BOOLS, pc.invert(BOOLS)), lambda: pc.or_(BOOLS, pc.invert(BOOLS))),
    (lambda m: m.equal(STRINGS, ""), lambda: pc.equal(STRINGS, "")),
    (lambda m: m.not_equal(INTS, 3), lambda: pc.not_equal(INTS, 3)),
    (lambda m: m.less(INTS, 4), lambda: pc.less(INTS, 4)),
]


@pytest.mark.parametrize("ours, theirs", CASES)
def test_each_kernel_answers_as_pyarrow_compute(ours, theirs):
    got, want = ours(ak), theirs()
    assert type(got) is type(want)
    assert got.equals(want), (got, want)


def test_each_kernel_the_package_calls_is_tested_here():
    called = {name for name in ak.__all__}
    tested = {src for case in CASES for src in case[0].__code__.co_names if src in called}
    assert called == tested, called - tested


def test_a_lossy_cast_raises_as_a_safe_cast_does():
    with pytest.raises(pa.ArrowInvalid):
        ak.cast(pa.array([2**40], pa.int64()), pa.int32())


#: As the console script runs them: pandas refused (pyarrow's kernels look for it, and it loads pyarrow.compute).
PROBE = """
import json, sys
from dbt_delta_optimize import no_pandas
no_pandas.block()
import pyarrow as pa
from dbt_delta_optimize import arrow_kernels as ak
paths = pa.array(["b", "a", None])
out = [ak.take(paths, ak.sort_indices(paths)).to_pylist(), ak.any_(ak.starts_with(paths, "a")).as_py()]
print(json.dumps({"out": out, "loaded": "pyarrow.compute" in sys.modules}))
"""


def test_calling_kernels_never_loads_pyarrow_compute():
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    r = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 0, r.stderr
    probe = json.loads(r.stdout)
    assert probe == {"out": [["a", "b", None], True], "loaded": False}
