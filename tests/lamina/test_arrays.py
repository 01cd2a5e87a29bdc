"""lamina.arrays builds what pa.array / pa.scalar build, without their first-call pandas import."""

from __future__ import annotations

import math

import numpy as np
import pyarrow as pa
import pytest

from lamina import arrays

CASES = [
    ([1, 2, None, -5], pa.int64()),
    ([0, 255, None], pa.uint8()),
    ([2**64 - 1, 0], pa.uint64()),
    ([-128, 127], pa.int8()),
    ([-(2**15), 2**15 - 1, None], pa.int16()),
    ([2**31 - 1], pa.int32()),
    ([0, 2**32 - 1], pa.uint32()),
    ([1.5, math.nan, -0.0, None, math.inf, -math.inf], pa.float64()),
    ([True, None, False, True] * 5, pa.bool_()),
    (["a", "", None, "héllo", "日本", "e\x00f"], pa.string()),
    (["x", None, ""], pa.large_string()),
    ([b"\x00\x01", None, b""], pa.binary()),
    ([b"ab", None], pa.large_binary()),
    ([], pa.int32()),
    ([None, None], pa.int16()),
    ([None], pa.string()),
    ([], pa.string()),
    ([None] * 9, pa.bool_()),
]


def _same(a: pa.Array, b: pa.Array) -> bool:
    return a.type == b.type and a.null_count == b.null_count and repr(a.to_pylist()) == repr(b.to_pylist())


@pytest.mark.parametrize("values,type", CASES)
def test_array_and_scalar_are_what_pyarrow_builds(values, type):
    got = arrays.array(values, type)
    got.validate(full=True)
    assert _same(got, pa.array(values, type=type))
    scalars = [pa.scalar(v, type) for v in values]
    assert _same(arrays.array_of_scalars(scalars, type), pa.array(scalars, type=type))
    for v in values:
        ours, theirs = arrays.scalar(v, type), pa.scalar(v, type)
        assert (ours.type, ours.is_valid, repr(ours.as_py())) == (theirs.type, theirs.is_valid, repr(theirs.as_py()))


@pytest.mark.parametrize(
    "values,t",
    [
        ([1, 300], pa.uint8()),
        ([-1], pa.uint64()),
        ([2**64], pa.uint64()),
        ([1.5], pa.int64()),
        (["1"], pa.int64()),
        ([True], pa.int64()),
        ([1], pa.float64()),
        ([1.5], pa.float32()),
        (["\ud800"], pa.string()),
        (["a"], pa.binary()),
        ([b"a"], pa.string()),
        ([1], pa.timestamp("ns")),
        ([1], pa.decimal128(5, 2)),
    ],
)
def test_what_it_does_not_build_is_left_to_pyarrow_which_converts_or_raises_alike(values, t):
    try:
        want = pa.array(values, type=t)
    except Exception as e:
        with pytest.raises(type(e)):
            arrays.array(values, t)
        with pytest.raises(type(e)):
            arrays.scalar(values[-1], t)
        return
    assert _same(arrays.array(values, t), want)
    assert arrays.scalar(values[-1], t).equals(pa.scalar(values[-1], t))


def test_scalars_of_types_it_does_not_build_keep_their_precision():
    ns = [pa.scalar(1_000_000_001, pa.timestamp("ns")), pa.scalar(None, pa.timestamp("ns"))]  # as_py would lose the ns
    assert arrays.array_of_scalars(ns, pa.timestamp("ns")).equals(pa.array(ns, type=pa.timestamp("ns")))


@pytest.mark.parametrize(
    "values",
    [[], [7], [1, 2, 5, 9], [1, 1, 2], [5, 3, 9, 3], [0, 2**32 - 1]],
    ids=["empty", "one", "sorted", "repeat", "unsorted", "extremes"],
)
def test_sorted_distinct_equals_numpy_unique(values):
    a = np.asarray(values, dtype=np.uint32)
    got = arrays.sorted_distinct(a)
    assert got.dtype == np.uint32 and got.tolist() == np.unique(a).tolist()
