"""Rewrite mappings: old row address → new row address, checked against brute force."""

from __future__ import annotations

import numpy as np
import pytest

from lamina.rewrite import id_ranges, mapping_runs
from lamina.transaction import AddressMapping


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("per_output", [7, 50, 2**31])
def test_mapping_runs_match_brute_force(seed, per_output):
    rng = np.random.default_rng(seed)
    runs, expected, position = [], {}, 0
    for fid in (3, 9):
        rows = int(rng.integers(1, 120))
        live = np.flatnonzero(rng.random(rows) > 0.3) if seed % 2 else np.arange(rows)
        runs += mapping_runs(fid, live, position, per_output)
        for k, off in enumerate(live.tolist()):
            expected[(fid, off)] = divmod(position + k, per_output)
        position += len(live)
    mapping = AddressMapping.from_runs(runs)
    for fid in (3, 9):
        offsets = np.arange(130)
        outs, news = mapping.map(fid, offsets)
        got = dict(
            zip(
                ((fid, int(o)) for o in offsets[np.isin(offsets, [o for f, o in expected if f == fid])]),
                zip(outs.tolist(), news.tolist()),
            )
        )
        assert got == {k: v for k, v in expected.items() if k[0] == fid}
    assert sum(r[4] for r in runs) == position


def test_shift_is_one_run():
    assert mapping_runs(4, np.arange(1000), 500, 2**31) == [(4, 0, 0, 500, 1000)]


def test_id_ranges():
    assert id_ranges(np.array([5, 6, 7, 10, 11, 3])) == ((5, 8), (10, 12), (3, 4))
    assert id_ranges(np.array([], dtype=np.int64)) == ()
