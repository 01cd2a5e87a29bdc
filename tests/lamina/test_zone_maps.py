"""Zone maps: per fragment and column bounds in the manifest that prune fragments without opening
their files (lamina.prune). Pruning never changes a result: random filters against brute force on
a table of many small fragments with NaN, nulls, ±inf, -0.0, long strings and timestamps, before
and after compaction merges the zones."""

from __future__ import annotations

import json
import math
import re

import numpy as np
import pyarrow as pa
import pytest

import lamina
from lamina import datafile, prune, zones
from lamina.compaction import CompactionSummary, commit_results
from lamina.filter import parse_filter
from lamina.planner import CompactionOptions, plan_compaction
from lamina.workers.compaction import GroupCompactor, tasks_for
from lamina.zones import Zone
from tests.lamina.test_filter_property import _seeds
from tests.lamina.test_prune import WIDE, _canon, _lamina_rows, assert_random_filters_equal_brute_force

FRAGMENTS = 24
ROWS = 20


def _rows(rng: np.random.Generator, start: int) -> pa.Table:
    """test_prune's rows (NaN, ±inf, -0.0, nulls, long strings), ``id`` clustered by insertion order as
    users' keys are (the random filters' small literals then hit the first fragments only)."""
    t = _lamina_rows(rng, ROWS, start)
    ids = [None if rng.random() < 0.05 else start + i for i in range(ROWS)]
    return t.set_column(0, "id", pa.array(ids, pa.int64()))


def _make(path: str, seed: int) -> lamina.Table:
    rng = np.random.default_rng(seed)
    t = lamina.create_table(path, WIDE)
    for f in range(FRAGMENTS):
        t.append(_rows(rng, f * ROWS))
    t.delete("k = 4 AND id < 20")
    t.delete("cat = 'bb' AND x > 1")
    return t


@pytest.fixture(scope="module")
def zoned(tmp_path_factory) -> lamina.Table:
    return _make(str(tmp_path_factory.mktemp("zones") / "t"), 7)


def _opens(monkeypatch) -> dict[str, int]:
    seen = {"opens": 0}
    real = datafile.open_parquet

    def counted(store, fragment, whole=False, *args, **kwargs):
        seen["opens"] += 1
        return real(store, fragment, whole, *args, **kwargs)

    monkeypatch.setattr(datafile, "open_parquet", counted)
    return seen


def test_every_written_fragment_has_zones_of_its_rows(zoned):
    for frag in zoned.manifest.fragments:
        assert frag.zones is not None and [z.column for z in frag.zones] == ["id", "x", "cat", "k", "ts"]
    first = zoned.manifest.fragments[0]
    ids = next(z for z in first.zones if z.column == "id")
    assert ids.kind == "int" and ids.hi_inclusive and ids.nans == 0
    # long strings keep a 64-byte prefix and an exclusive upper bound
    for frag in zoned.manifest.fragments:
        cat = next(z for z in frag.zones if z.column == "cat")
        assert cat.lo is None or len(cat.lo) <= zones.ZONE_BYTES
        assert cat.hi is None or len(cat.hi) <= zones.ZONE_BYTES


def test_zones_bound_nan_inf_and_nulls_exactly_as_written():
    schema = pa.schema([("x", pa.float64()), ("s", pa.string()), ("b", pa.bool_())])
    batch = pa.record_batch(
        [
            pa.array([1.5, float("nan"), None, float("-inf"), -0.0]),
            pa.array(["b", None, "a", "c", None]),
            pa.array([None, None, None, None, None], pa.bool_()),
        ],
        schema=schema,
    )
    x, s, b = zones.zones_of([batch], schema)
    assert (x.lo, x.hi, x.nulls, x.nans) == (-math.inf, 1.5, 1, 1)
    assert (s.lo, s.hi, s.nulls, s.nans) == (b"a", b"c", 2, 0)
    assert (b.lo, b.hi, b.nulls) == (None, None, 5)
    only_nan = zones.zones_of([pa.record_batch([pa.array([float("nan")])], names=["x"])], pa.schema([("x", pa.float64())]))
    assert only_nan[0].lo is None and only_nan[0].nans == 1


def test_merged_zones_bound_every_source():
    a = Zone("v", "bytes", b"b", b"d", False, 0, 0)
    b = Zone("v", "bytes", b"a", b"d", True, 3, 0)
    c = Zone("v", "bytes", None, None, True, 5, 0)  # all null
    frag = lambda z: lamina.manifest.Fragment(0, "data/x.parquet", 5, 1, (), "2.6", zones=(z,))  # noqa: E731
    (m,) = zones.merge_zones([frag(a), frag(b), frag(c)])
    assert (m.lo, m.hi, m.hi_inclusive, m.nulls) == (b"a", b"d", True, 8)
    assert zones.merge_zones([frag(a), lamina.manifest.Fragment(1, "data/y.parquet", 5, 1, (), "2.6")]) is None
    other_kind = Zone("v", "int", 1, 2, True, 0, 0)
    assert zones.merge_zones([frag(a), frag(other_kind)]) == ()


def test_a_selective_filter_opens_only_the_fragments_that_can_match(zoned, monkeypatch):
    opens = _opens(monkeypatch)
    lo = 5 * ROWS + 3
    got = zoned.to_arrow(filter=f"id >= {lo} AND id < {lo + 4}")
    assert set(got.column("id").to_pylist()) <= set(range(lo, lo + 4)) and got.num_rows >= 2
    assert opens["opens"] == 1, f"{opens['opens']} of {FRAGMENTS} files opened for a range inside one fragment"
    text = zoned.explain(f"id = {lo}")
    assert re.search(rf"zone maps: {FRAGMENTS - 1} of the {FRAGMENTS} fragment\(s\) to scan pruned", text), text


def test_a_delete_of_one_key_opens_one_file(tmp_path, monkeypatch):
    t = _make(str(tmp_path / "t"), 3)
    before = t.count_rows()
    key = 10 * ROWS + 5
    present = t.count_rows(f"id = {key}")
    opens = _opens(monkeypatch)
    assert t.delete(f"id = {key}") == present
    assert opens["opens"] <= 1
    assert t.count_rows() == before - present and t.count_rows(f"id = {key}") == 0


@pytest.mark.parametrize("seed", _seeds())
def test_random_filters_equal_brute_force(zoned, seed):
    texts = assert_random_filters_equal_brute_force(zoned, 7000 + seed, 60)
    fragments = list(zoned.manifest.fragments)
    pruned = sum(prune.prune_fragments(fragments, WIDE, parse_filter(text, WIDE))[1] for text in texts)
    assert pruned > 0, "no random filter pruned a single fragment: the test would not notice a broken zone map"


FIXED = [
    "x > 1e308",
    "x < -1e308",
    "x = 'inf'",
    "x = '-inf'",
    "x >= 'inf'",
    "x = 'NaN'",
    "x != 'NaN'",
    "x = -0.0",
    "x = 0",
    "x IS NULL",
    "x IS NOT NULL",
    "NOT (x < 5)",
    "id > 5.5 AND id < 9.0",
    "id = 10.0",
    "id = 10.5",
    "id < 1e30",
    "k > 2.5",
    "k IN (1, 2.0, NULL)",
    "cat >= 'e'",
    "cat = ''",
    "cat IS NULL",
    "ts < '2024-01-01T00:00:20'",
    "ts >= TIMESTAMP '2024-01-01T00:07:50'",
    "FALSE",
    "NOT (id >= 3 AND id <= 400)",
]


@pytest.mark.parametrize("text", FIXED)
def test_fixed_filters_with_nan_inf_nulls_and_mixed_literals(zoned, text):
    everything = zoned.to_arrow(with_row_address=True)
    want = everything.filter(parse_filter(text, WIDE).expression)
    got = zoned.to_arrow(filter=text, with_row_address=True)
    assert _canon(got) == _canon(want), f"{text!r}: {got.num_rows} rows read, pyarrow compute {want.num_rows}"


def test_compaction_merges_zones_and_pruning_stays_exact(tmp_path):
    t = _make(str(tmp_path / "t"), 11)
    before = t.to_arrow()
    options = CompactionOptions(target_rows_per_fragment=4 * ROWS)
    plan = plan_compaction(t.manifest, options, t.uri)
    assert plan.groups
    tasks = tasks_for(plan, t.manifest, t.uri, None, t.write_options, options.read_batch_bytes)
    results = [GroupCompactor().run(task) for task in tasks]
    summary = CompactionSummary.for_plan(plan)
    for r in results:
        assert r.ok, r.error
        summary.record(r)
    commit_results(t, t.manifest, results, summary)
    after = lamina.open_table(t.uri)
    assert len(after.manifest.fragments) < FRAGMENTS
    assert all(f.zones is not None for f in after.manifest.fragments)
    assert _canon(after.to_arrow()) == _canon(before)
    assert_random_filters_equal_brute_force(after, 9100, 60)
    key = 15 * ROWS + 2
    kept, ruled_out = prune.prune_fragments(list(after.manifest.fragments), WIDE, parse_filter(f"id = {key}", WIDE))
    assert ruled_out >= 1 and len(kept) >= 1


def test_zones_survive_the_manifest_round_trip_and_segments(zoned):
    from lamina.cache import clear_caches

    expected = [f.zones for f in zoned.manifest.fragments]
    clear_caches()
    again = lamina.open_table(zoned.uri)
    assert [f.zones for f in again.manifest.fragments] == expected
    assert again.manifest.segments, "the suite's tiny segments hold these fragments"


def test_a_zone_of_another_type_prunes_nothing():
    schema = pa.schema([("v", pa.int64())])
    frag = lamina.manifest.Fragment(0, "data/x.parquet", 5, 1, (), "2.6", zones=(Zone("v", "bytes", b"a", b"b", True, 0, 0),))
    kept, ruled_out = prune.prune_fragments([frag], schema, parse_filter("v = 99", schema))
    assert kept == [frag] and ruled_out == 0


NARROW = [[1.0, 2.0, float("nan")], [1.0, 2.0], [None, None], [float("inf")], [-0.0, 0.0], [float("nan"), None]]


@pytest.mark.parametrize(
    "text",
    [
        "NOT (x < 5)",
        "NOT (x <= 2.0)",
        "x != 1.0",
        "x = 'NaN'",
        "x != 'NaN'",
        "x IS NULL",
        "x IS NOT NULL",
        "x > 1e308",
        "x = 0",
        "x = -0.0",
        "x IN (2.0, 'NaN')",
        "NOT (x IN (1.0, 2.0))",
        "NOT (x IS NULL OR x < 3)",
    ],
)
def test_fragments_of_narrow_values_with_nan_keep_what_nan_matches(tmp_path, text):
    schema = pa.schema([("x", pa.float64())])
    t = lamina.create_table(str(tmp_path / "t"), schema)
    for values in NARROW:
        t.append(pa.table({"x": pa.array(values, pa.float64())}))
    everything = t.to_arrow()
    want = everything.filter(parse_filter(text, schema).expression)
    got = t.to_arrow(filter=text)
    assert [repr(v) for v in got.column("x").to_pylist()] == [repr(v) for v in want.column("x").to_pylist()], text
    assert t.count_rows(text) == want.num_rows


def test_narrow_fragments_are_pruned_where_nothing_can_match(tmp_path):
    schema = pa.schema([("x", pa.float64())])
    t = lamina.create_table(str(tmp_path / "t"), schema)
    for values in NARROW:
        t.append(pa.table({"x": pa.array(values, pa.float64())}))
    _, ruled_out = prune.prune_fragments(list(t.manifest.fragments), schema, parse_filter("x > 1e308", schema))
    assert ruled_out == 4  # kept: +inf, and the fragment of only NaN and null (its bounds are unknown)
    _, ruled_out = prune.prune_fragments(list(t.manifest.fragments), schema, parse_filter("NOT (x < 5)", schema))
    assert ruled_out == 3  # kept: the two with NaN (NOT (NaN < 5) is TRUE) and +inf


@pytest.mark.parametrize("stored", ["zones_json", "zones"])  # as written now, and as written before zones_json
@pytest.mark.parametrize(
    "bad",
    [
        [["v", "int", {"x": 1}, 2, True, 0, 0]],
        [["v", "int", 1, 2, True, 0]],
        [["v", "int", 1, 2, "yes", 0, 0]],
        [["v", "float", float("nan"), 2.0, True, 0, 0]],
        "zones",
        {"v": 1},
    ],
)
def test_a_malformed_zone_map_is_corrupt_file_naming_the_manifest(tmp_path, bad, stored):
    import hashlib
    import json

    from lamina.cache import clear_caches
    from lamina.errors import CorruptFile
    from lamina.manifest import manifest_path
    from lamina.manifest.codec import _canonical

    schema = pa.schema([("v", pa.int64())])
    t = lamina.create_table(str(tmp_path / "t"), schema)
    t.append(pa.table({"v": [1, 2]}, schema=schema))
    body = json.loads(t.store.get(manifest_path(t.version)))
    body.pop("checksum")
    assert json.loads(body["fragments"][-1].pop("zones_json"))
    body["fragments"][-1][stored] = json.dumps(bad) if stored == "zones_json" and bad != "zones" else bad
    body["checksum"] = "sha256:" + hashlib.sha256(_canonical(body)).hexdigest()
    t.store.put(manifest_path(t.version), json.dumps(body).encode())
    clear_caches()
    # Listed zones are checked when the manifest is read; a zones_json text when a filter first needs it.
    with pytest.raises(CorruptFile, match=rf"manifest .*{manifest_path(t.version)}"):
        lamina.open_table(t.uri).to_arrow(filter="v > 1")


def test_a_malformed_zone_bound_is_corrupt_naming_the_manifest():
    from lamina.errors import CorruptFile
    from lamina.manifest import Fragment, RowGroup, Zone
    from lamina.manifest.codec import _fragment_from_json, fragment_to_json

    good = fragment_to_json(
        Fragment(
            3,
            "data/" + "a" * 32 + ".parquet",
            10,
            100,
            (RowGroup(10, 100),),
            "2.6",
            zones=(Zone("s", "bytes", b"ab", b"cd", True, 0, 0),),
        )
    )
    assert _fragment_from_json(good, "v1", {}).zones[0].lo == b"ab"
    listed = {k: v for k, v in good.items() if k != "zones_json"}  # as written before zones_json
    relisted = _fragment_from_json(dict(listed, zones=json.loads(good["zones_json"])), "v1", {})
    assert relisted.zones == _fragment_from_json(good, "v1", {}).zones
    for bad in ({"b": "zz"}, {"b": 3}, {"x": "00"}, {"b": "00", "f": "inf"}, {"f": "nan"}, "text", [1]):
        zones = [["s", "bytes", bad, {"b": "cd"}, True, 0, 0]]
        with pytest.raises(CorruptFile, match=r"manifest v1 fragment 3: malformed zone bound"):
            _fragment_from_json(dict(listed, zones=zones), "v1", {})
        lazy = _fragment_from_json(dict(good, zones_json=json.dumps(zones)), "v1", {})  # read when first needed
        with pytest.raises(CorruptFile, match=r"manifest v1 fragment 3: malformed zone bound"):
            _ = lazy.zones


def test_a_long_in_list_is_parsed_once_and_still_prunes_and_finds_its_rows(tmp_path, monkeypatch):
    """A filter's text is read once: pruning and the index terms come from the tree the parser built, so
    fragments the list cannot match are still ruled out, the rows found are exact and the index terms intact."""
    from lamina import filter as lf

    schema = pa.schema([("id", pa.int64())])
    t = lamina.create_table(str(tmp_path / "t"), schema)
    for lo in (0, 100, 200):
        t.append(pa.table({"id": list(range(lo, lo + 100))}, schema=schema))
    wanted = list(range(100, 200, 7)) + list(range(10_000, 11_500))  # the second fragment, and ids nowhere
    text = "id IN (" + ", ".join(map(str, wanted)) + ")"
    tokenized = []
    monkeypatch.setattr(lf, "_tokenize", lambda s, real=lf._tokenize: tokenized.append(s) or real(s))
    flt = parse_filter(text, schema)
    assert len(flt.conjuncts[0].points) == len(wanted)
    kept, ruled_out = prune.prune_fragments(list(t.manifest.fragments), schema, flt)
    assert ruled_out == 2 and [f.id for f in kept] == [t.manifest.fragments[1].id]
    assert sorted(t.to_arrow(filter=text).column("id").to_pylist()) == list(range(100, 200, 7))
    assert tokenized == [text]
