"""Curve math and column validation for Z-order / Hilbert (pure, plus one Spark equivalence check)."""

from __future__ import annotations

import itertools
import json
import random

import pytest

from dbt_delta_optimize.delta.actions import AddFile
from dbt_delta_optimize.engine.clustering import (
    COLUMNS_TAG,
    CURVE_TAG,
    ClusteringSpec,
    add_curve_keys,
    already_clustered,
    hilbert_index,
    interleave_bits,
    parse_column,
    range_bounds,
    resolve_columns,
)
from dbt_delta_optimize.errors import InvalidArgumentError

SCHEMA = {
    "type": "struct",
    "fields": [
        {"name": "id", "type": "long", "nullable": True, "metadata": {}},
        {"name": "p", "type": "integer", "nullable": True, "metadata": {}},
        {"name": "flat.a", "type": "string", "nullable": True, "metadata": {}},
        {
            "name": "b",
            "type": {"type": "struct", "fields": [{"name": "c", "type": "double", "nullable": True, "metadata": {}}]},
            "nullable": True,
            "metadata": {},
        },
        {"name": "flag", "type": "boolean", "nullable": True, "metadata": {}},
        {"name": "late", "type": "long", "nullable": True, "metadata": {}},
    ],
}


def test_interleave_bits_msb_first_round_robin():
    assert interleave_bits([1], 32) == 1  # one input is the value itself
    assert interleave_bits([0b10, 0b01], 2) == 0b1001  # a1 b1 a0 b0 = 1 0 0 1
    assert interleave_bits([(1 << 10) - 1] * 3, 10) == (1 << 30) - 1  # all ones
    assert interleave_bits([1, 1, 1], 10) == 0b111  # last bits are (1 << n) - 1
    assert interleave_bits([0, 0], 10) == 0


@pytest.mark.parametrize("dims,bits", [(2, 2), (2, 4), (3, 3), (4, 2)])
def test_hilbert_visits_every_cell_once_with_unit_steps(dims, bits):
    side = 1 << bits
    cells = {hilbert_index(list(p), bits): p for p in itertools.product(range(side), repeat=dims)}
    assert sorted(cells) == list(range(side**dims))
    path = [cells[i] for i in range(side**dims)]
    assert all(sum(abs(a - b) for a, b in zip(p, q)) == 1 for p, q in itertools.pairwise(path))


def test_range_bounds_dense_ids_and_quantiles():
    assert range_bounds(list(range(20)), 4) == [4, 9, 14]
    assert range_bounds([1, 1, 2, 3], 10) == [1, 2]  # fewer distinct values than ranges: dense ids
    assert range_bounds([], 10) == []
    with pytest.raises(InvalidArgumentError, match=r"rangeId\.max"):
        range_bounds([1], 1)


def test_parse_column_names():
    assert parse_column("a.b") == ("a", "b")
    assert parse_column("`flat.a`") == ("flat.a",)
    assert parse_column("`a``b`.c") == ("a`b", "c")
    with pytest.raises(InvalidArgumentError):
        parse_column("`open")


def test_resolve_columns_resolves_nested_and_quoted_case_insensitively():
    assert resolve_columns(["ID", "b.C", "`flat.a`"], SCHEMA, ["p"], {}) == (("id",), ("b", "c"), ("flat.a",))


def test_resolve_columns_lists_every_problem_in_one_error():
    with pytest.raises(InvalidArgumentError) as err:
        resolve_columns(["nope", "p", "flag", "b.zz"], SCHEMA, ["p"], {})
    msg = str(err.value)
    assert "nope, b.zz do not exist in data schema" in msg
    assert "p is a partition column" in msg
    assert "flag (boolean)" in msg


def test_resolve_columns_without_stats_lists_all_offenders():
    cfg = {"delta.dataSkippingNumIndexedCols": "1"}  # only `id` has stats
    with pytest.raises(InvalidArgumentError, match=r"late, b\.c without collected statistics"):
        resolve_columns(["late", "b.c", "id"], SCHEMA, ["p"], cfg)
    assert resolve_columns(["late"], SCHEMA, ["p"], cfg, check_stats=False) == (("late",),)


def test_already_clustered_needs_every_file_tagged_the_same_way():
    spec = ClusteringSpec((("id",), ("b", "c")), "zorder")
    tags = spec.tags()
    assert json.loads(tags[COLUMNS_TAG]) == ["id", "b.c"] and tags[CURVE_TAG] == "zorder"
    tagged = AddFile("a", {}, 1, 0, tags=tags)
    assert already_clustered([tagged, tagged], spec)
    assert not already_clustered([tagged, AddFile("b", {}, 1, 0)], spec)
    assert not already_clustered([tagged], ClusteringSpec((("id",), ("b", "c")), "hilbert"))
    assert not already_clustered([], spec)
    # Hilbert over one column is Z-order, as in delta-spark
    assert ClusteringSpec((("id",),), "hilbert").tags()[CURVE_TAG] == "zorder"


@pytest.mark.spark
@pytest.mark.parametrize("curve,dims", [("zorder", 2), ("zorder", 7), ("hilbert", 3)])
def test_spark_curve_keys_equal_the_reference_implementation(spark, curve, dims):
    """The Spark-expression keys order rows exactly as the pure-Python curve does."""
    rnd = random.Random(dims)
    spec = ClusteringSpec(tuple((f"c{i}",) for i in range(dims)), curve, num_ranges=1000)
    rows = [tuple(rnd.randrange(1000) for _ in range(dims)) for _ in range(300)]
    names = [f"c{i}" for i in range(dims)]
    df = spark.createDataFrame(rows, names)
    keyed, key_names = add_curve_keys(df, names, spec)
    got = [(tuple(r[n] for n in names), tuple(r[k] for k in key_names)) for r in keyed.collect()]
    ref = hilbert_index if curve == "hilbert" else interleave_bits
    by_spark = [ids for ids, _ in sorted(got, key=lambda t: t[1])]
    by_python = sorted(rows, key=lambda ids: ref(list(ids), spec.bits))
    assert [ref(list(i), spec.bits) for i in by_spark] == [ref(list(i), spec.bits) for i in by_python]
    if dims * spec.bits > 62:
        assert len(key_names) > 1  # 7 columns x 10 bits needs two 62-bit chunks


# --------------------------------------------------------------- file split points (pure)
def test_key_chunks_compare_like_the_whole_index():
    from dbt_delta_optimize.engine.clustering import _key_chunks

    rnd = random.Random(4)
    for total in (10, 62, 63, 90, 124, 130):
        idx = sorted(rnd.randrange(1 << total) for _ in range(300))
        chunks = [_key_chunks(i, total) for i in idx]
        assert chunks == sorted(chunks) and len(chunks[0]) == -(-total // 62)
        assert all(c < (1 << 62) for ch in chunks for c in ch)
    assert _key_chunks((1 << 70) - 1, 70) == ((1 << 62) - 1, (1 << 8) - 1)


def test_split_points_cut_distinct_keys_exactly_and_split_heavy_keys_by_noise():
    from dbt_delta_optimize.engine.clustering import split_points

    spec = ClusteringSpec((("a",), ("b",)), "zorder", num_ranges=16)
    bounds = [list(range(15)), list(range(15))]  # ids = the values themselves
    rows = [(a, b) for a in range(16) for b in range(16)]  # 256 distinct cells
    splits = split_points(rows, bounds, spec, 4)
    assert len(splits) == 3 and all(s[-1] == 127 for s in splits), "a distinct key never straddles two files"
    zs = sorted(interleave_bits([a, b], spec.bits) for a, b in rows)
    assert [s[0] for s in splits] == [zs[63], zs[127], zs[191]]  # quarters of the sorted curve keys

    heavy = [(3, 3)] * 400 + rows
    splits = split_points(heavy, bounds, spec, 4)
    z33 = interleave_bits([3, 3], spec.bits)
    inside = [s for s in splits if s[0] == z33]
    assert len(inside) >= 2 and any(s[-1] != 127 for s in inside), "a heavy key is spread over files by its noise byte"
    assert splits == sorted(splits)

    quiet = ClusteringSpec((("a",), ("b",)), "hilbert", num_ranges=16, add_noise=False)
    splits = split_points(rows, bounds, quiet, 4)
    hs = sorted(hilbert_index([a, b], quiet.bits) for a, b in rows)
    assert splits == [(hs[63],), (hs[127],), (hs[191],)]
    assert split_points(rows, bounds, spec, 1) == [] and split_points([], bounds, spec, 4) == []


def test_aligned_boundary_picks_the_most_aligned_index_in_the_window():
    from dbt_delta_optimize.engine.clustering import _aligned_boundary

    assert _aligned_boundary(57, 69) == 64
    assert _aligned_boundary(64, 69) == 68  # in (64, 69], 68 has two trailing zero bits, 66 one
    assert _aligned_boundary(1000, 1030) == 1024
    assert _aligned_boundary(5, 6) == 6 and _aligned_boundary(6, 6) is None and _aligned_boundary(7, 6) is None
    rnd = random.Random(8)
    for _ in range(2000):
        lo = rnd.randrange(1 << 20)
        hi = lo + rnd.randrange(1, 5000)
        m = _aligned_boundary(lo, hi)
        tz = (m & -m).bit_length()
        assert lo < m <= hi and all(((v & -v).bit_length() <= tz) for v in range(lo + 1, hi + 1))
