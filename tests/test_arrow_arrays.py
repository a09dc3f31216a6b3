"""Arrow arrays made and searched without numpy (``delta.arrow_arrays``), checked against numpy's own answers."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys

import numpy as np
import pyarrow as pa
import pytest

from dbt_delta_optimize.delta.arrow_arrays import all_false, bounds, mask_without, repeated_int64, runs


def test_repeated_and_false_arrays_hold_what_numpy_would():
    for n in (0, 1, 7, 8, 9, 1000):
        assert repeated_int64(42, n).to_pylist() == np.full(n, 42, np.int64).tolist()
        assert repeated_int64(-(2**62), n).type == pa.int64()
        falses = all_false(n)
        assert falses.to_pylist() == [False] * n and falses.null_count == 0


def test_mask_without_clears_exactly_the_positions_given():
    rng = random.Random(7)
    for n in (1, 8, 9, 17, 1000):
        drop = set(rng.sample(range(n), min(n, 5)))
        keep = np.ones(n, np.bool_)
        keep[sorted(drop)] = False
        assert mask_without(n, drop).to_pylist() == keep.tolist()
    with pytest.raises(IndexError):
        mask_without(4, {4})
    with pytest.raises(IndexError):
        mask_without(4, {-1})


def test_bounds_is_numpys_searchsorted():
    rng = random.Random(11)
    for _ in range(200):
        values = sorted(rng.randrange(0, 50) for _ in range(rng.randrange(0, 40)))
        lo = rng.randrange(-2, 52)
        hi = lo + rng.randrange(0, 20)
        expected = np.searchsorted(np.array(values, np.int64), [lo, hi]).tolist()
        assert list(bounds(pa.array(values, pa.int64()), lo, hi)) == expected


def test_runs_are_the_runs_of_equal_values():
    assert runs(pa.array([], pa.int32())) == []
    assert runs(pa.array([3], pa.int32())) == [(0, 1)]
    assert runs(pa.array([1, 1, 2, 5, 5, 5], pa.int32())) == [(0, 2), (2, 3), (3, 6)]


WITHOUT_NUMPY = """
import json, sys
from dbt_delta_optimize.no_pandas import block, load_pyarrow_without_numpy
block()  # as the console script does: pandas (which imports numpy) refused
assert load_pyarrow_without_numpy()
import pyarrow as pa
from dbt_delta_optimize.delta.arrow_arrays import all_false, bounds, mask_without, repeated_int64, runs
try:
    pa.array([1]).to_numpy()
    bridged = True
except ImportError:
    bridged = False
print(json.dumps({
    "bridged": bridged,
    "numpy": "numpy" in sys.modules,
    "repeated": repeated_int64(5, 3).to_pylist(),
    "false": all_false(3).to_pylist(),
    "mask": mask_without(3, {1}).to_pylist(),
    "bounds": list(bounds(pa.array([1, 2, 2, 4]), 2, 4)),
    "runs": runs(pa.array([1, 1, 2])),
}))
"""


def test_every_helper_works_where_pyarrow_has_no_numpy():
    """The helpers are for a process whose pyarrow was loaded without numpy (the CLI's OPTIMIZE): there they work,
    pyarrow's own numpy bridge raises, and numpy is not imported by them (nor pandas, refused as by the CLI)."""
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    r = subprocess.run([sys.executable, "-c", WITHOUT_NUMPY], capture_output=True, text=True, timeout=60, env=env)
    assert r.returncode == 0, r.stderr[-2000:]
    out = json.loads(r.stdout)
    assert out == {
        "bridged": False,
        "numpy": False,
        "repeated": [5, 5, 5],
        "false": [False, False, False],
        "mask": [True, False, True],
        "bounds": [1, 3],
        "runs": [[0, 2], [2, 3]],
    }
