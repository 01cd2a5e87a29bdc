"""Manifest v2: a small root per version naming shared, immutable segments (docs/FORMAT.md §2).

The suite runs with 2 inline fragments and 4 per segment (tests/conftest.py), so every table
here has many segments.
"""

from __future__ import annotations

import json
import random

import pyarrow as pa
import pytest

import lamina
from lamina.cache import clear_caches
from lamina.commit import commit
from lamina.errors import CorruptFile
from lamina.manifest import (
    SEGMENTS_DIR,
    DeletionFile,
    Fragment,
    FragmentList,
    Manifest,
    ManifestSegment,
    RowGroup,
    decode_segment,
    lay_out,
    load_manifest,
    manifest_path,
)
from lamina.transaction import Append
from tests.lamina.helpers import BeatenOnce, as_format_1

SCHEMA = pa.schema([("id", pa.int64()), ("s", pa.string())])


def _rows(lo: int, hi: int) -> pa.Table:
    return pa.table({"id": pa.array(range(lo, hi), pa.int64()), "s": [f"v{i}" for i in range(lo, hi)]}, schema=SCHEMA)


def _grow(t, appends: int, start: int = 0) -> int:
    for k in range(appends):
        t.append(_rows(start + 3 * k, start + 3 * k + 3))
    return start + 3 * appends


def _segment_puts(t, before: set[str]) -> list[str]:
    return sorted({o.path for o in t.store.list(SEGMENTS_DIR)} - before)


def _named(m) -> set[str]:
    """The segments and segment lists a version names."""
    return {seg.path for seg in m.segments} | {lst.path for lst in m.segment_lists}


def _all_rows(t) -> list[tuple[int, str]]:
    got = t.to_arrow()
    return sorted(zip(got.column("id").to_pylist(), got.column("s").to_pylist()))


def test_appends_write_a_bounded_number_of_fragments_and_share_the_rest(local_table_uri):
    t = lamina.create_table(local_table_uri, SCHEMA)
    _grow(t, 60)
    written_per_commit = []
    for k in range(40):
        prev = t.manifest
        before = {o.path for o in t.store.list(SEGMENTS_DIR)}
        t.append(_rows(1000 + k, 1001 + k))
        new = t.manifest
        written = _segment_puts(t, before)
        assert _named(new) >= set(written)
        written_per_commit.append(sum(seg.count for seg in new.segments if seg.path in written))
        assert sum(1 for lst in new.segment_lists if lst.path in written) <= 1
        # every segment of the previous version not rewritten is shared as it is
        kept = {seg.path for seg in prev.segments} & {seg.path for seg in new.segments}
        assert sum(seg.count for seg in prev.segments if seg.path not in kept) <= 4
        assert all(seg.count <= 4 for seg in new.segments)
    assert max(written_per_commit) <= 4, "a commit rewrote more than one segment's worth of fragments"
    assert written_per_commit.count(0) >= 10, "most one-fragment appends should write nothing but the root"
    assert len(t.manifest.segments) <= len(t.manifest.fragments) // 2
    assert len(_all_rows(t)) == 60 * 3 + 40


def test_a_delete_rewrites_only_the_segment_of_the_fragment_it_changes(local_table_uri):
    t = lamina.create_table(local_table_uri, SCHEMA)
    _grow(t, 40)
    before_segments = {seg.path for seg in t.manifest.segments}
    before = {o.path for o in t.store.list(SEGMENTS_DIR)}
    t.delete("id = 4")  # in the second fragment
    written = _segment_puts(t, before)
    assert len(written) == 2, "its segment, and the segment list naming that"
    assert len({seg.path for seg in t.manifest.segments} - before_segments) == 1
    assert 4 not in [r[0] for r in _all_rows(lamina.open_table(local_table_uri))]


def test_roots_stay_small_while_the_table_grows(local_table_uri, monkeypatch):
    monkeypatch.setenv("LAMINA_MANIFEST_LIST_SEGMENTS", "64")  # the suite's 4 would need a third level at 120 fragments
    t = lamina.create_table(local_table_uri, SCHEMA)
    sizes = []
    for k in range(6):
        _grow(t, 20, start=1000 * k)
        sizes.append(len(t.store.get(manifest_path(t.version))))
    assert max(sizes) < 1.5 * min(sizes), f"root sizes grew with the table: {sizes}"


def test_a_segment_round_trips_and_a_reader_with_cold_caches_reads_every_version(local_table_uri):
    t = lamina.create_table(local_table_uri, SCHEMA)
    _grow(t, 25)
    t.delete("id < 7")
    expected = {v: _all_rows(t.checkout(v)) for v in range(1, t.version + 1)}
    clear_caches()
    for v, rows in expected.items():
        assert _all_rows(lamina.open_table(local_table_uri, version=v)) == rows


def test_a_version_1_table_is_read_converted_by_its_next_commit_and_time_travels_across(local_table_uri):
    t = lamina.create_table(local_table_uri, SCHEMA)
    _grow(t, 12)
    v1 = t.version
    rows_v1 = _all_rows(t)
    t.store.put(manifest_path(v1), as_format_1(t.manifest))  # as an older Lamina left it
    for o in t.store.list(SEGMENTS_DIR):
        t.store.delete([o.path])  # and no segments at all
    clear_caches()
    old = lamina.open_table(local_table_uri)
    assert old.version == v1 and not old.manifest.segments and _all_rows(old) == rows_v1
    old.append(_rows(500, 503))  # the first commit converts
    clear_caches()
    new = lamina.open_table(local_table_uri)
    assert json.loads(new.store.get(manifest_path(new.version)))["format_version"] == 2
    assert new.manifest.segments and _all_rows(new) == sorted(rows_v1 + [(i, f"v{i}") for i in range(500, 503)])
    assert _all_rows(new.checkout(v1)) == rows_v1  # back across the boundary
    assert json.loads(new.store.get(manifest_path(v1)))["format_version"] == 1


def test_a_missing_or_altered_segment_is_corrupt_file_naming_it(local_table_uri):
    t = lamina.create_table(local_table_uri, SCHEMA)
    _grow(t, 12)
    seg = t.manifest.segments[1].path
    key = next(z.lo for z in t.manifest.segments[1].fragments[0].zones if z.column == "id")  # a row it holds
    data = t.store.get(seg)
    t.store.put(seg, data.replace(b'"rows":3', b'"rows":4', 1))
    clear_caches()
    opened = lamina.open_table(local_table_uri)  # the root is fine: segments are read on first use
    assert len(opened.manifest.fragments) == 12 and opened.count_rows() == 36
    with pytest.raises(CorruptFile, match=rf"manifest segment .*{seg}.* is corrupt: its checksum"):
        opened.to_arrow()
    t.store.delete([seg])
    clear_caches()
    with pytest.raises(CorruptFile, match=rf"manifest segment .*{seg} is missing"):
        lamina.open_table(local_table_uri).to_arrow()
    # An append does not read the segments it leaves as they are (it costs what it changes), so it
    # commits; the versions naming the missing segment still refuse to be read, naming it.
    appended = lamina.open_table(local_table_uri)
    appended.append(_rows(100, 101))
    clear_caches()
    with pytest.raises(CorruptFile, match=rf"manifest segment .*{seg} is missing"):
        lamina.open_table(local_table_uri).to_arrow()
    with pytest.raises(CorruptFile, match=rf"manifest segment .*{seg} is missing"):
        lamina.open_table(local_table_uri).delete(f"id = {key}")


def test_a_segment_of_another_table_is_refused():
    data = b'{"format":"lamina.manifest_segment","fragments":[],"table_uuid":"aaaa"}'
    from lamina.checksum import of_bytes

    entry = ManifestSegment("_segments/x.json", 0, len(data), of_bytes(data))
    with pytest.raises(CorruptFile, match="belongs to table 'aaaa'"):
        decode_segment(data, entry, "bbbb", "x")


def test_cleanup_keeps_every_segment_a_retained_version_names_and_removes_the_rest(local_table_uri):
    t = lamina.create_table(local_table_uri, SCHEMA)
    _grow(t, 30)
    t.delete("id < 30")
    _grow(t, 10, start=5000)
    stats = t.cleanup(0, enforce_retention=False)
    assert stats.versions_removed > 0
    on_storage = {o.path for o in t.store.list(SEGMENTS_DIR)}
    clear_caches()
    latest = lamina.open_table(local_table_uri)
    assert _named(latest.manifest) == on_storage, "cleanup left or removed segments wrongly"
    assert len(_all_rows(latest)) == 30 * 3 - 30 + 10 * 3


def test_cleanup_with_retention_keeps_older_versions_readable(local_table_uri):
    t = lamina.create_table(local_table_uri, SCHEMA)
    _grow(t, 20)
    t.delete("id < 9")
    expected = {v: _all_rows(t.checkout(v)) for v in range(1, t.version + 1)}
    stats = t.cleanup(3600, enforce_retention=False)  # nothing is old enough: every version stays
    assert stats.versions_removed == 0
    clear_caches()
    for v, rows in expected.items():
        assert _all_rows(lamina.open_table(local_table_uri, version=v)) == rows


def test_a_lost_race_removes_the_segments_it_wrote_and_commits_on_top(local_table_uri):
    t = lamina.create_table(local_table_uri, SCHEMA)
    _grow(t, 12)
    stale = lamina.open_table(local_table_uri)
    other = lamina.open_table(local_table_uri)

    from lamina.datafile import WriteOptions, write_fragments

    frags = write_fragments(stale.store, SCHEMA, _rows(900, 912).to_batches(max_chunksize=3), WriteOptions(max_rows_per_file=3))
    racing = BeatenOnce(stale.store, lambda: other.append(_rows(800, 812), max_rows_per_file=3))
    txn = Append(stale.version, frags)
    before = {o.path for o in t.store.list(SEGMENTS_DIR)}
    new = commit(racing, txn, stale.manifest)
    assert txn.attempts == 2 and new.version == stale.version + 2
    left = {o.path for o in t.store.list(SEGMENTS_DIR)} - before
    named = _named(new) | _named(lamina.open_table(local_table_uri, version=new.version - 1).manifest)
    assert left <= named, f"a lost attempt left segments nobody names: {sorted(left - named)}"
    ids = [r[0] for r in _all_rows(lamina.open_table(local_table_uri))]
    assert sorted(ids) == list(range(36)) + list(range(800, 812)) + list(range(900, 912))


def _frag(i: int, deleted: int = 0) -> Fragment:
    return Fragment(
        id=i,
        path=f"data/{i:08x}.parquet",
        rows=10,
        file_bytes=100,
        row_groups=(RowGroup(10, 100),),
        file_version="2.6",
        deletion=DeletionFile(f"_deletions/{i}-{deleted}.bin", deleted) if deleted else None,
    )


@pytest.mark.parametrize("seed", range(6))
def test_layouts_hold_exactly_the_fragments_and_rewrite_only_what_changed(seed):
    rnd = random.Random(seed)
    stored: dict[str, bytes] = {}
    m = Manifest(version=1, timestamp_ms=0, schema=SCHEMA, fragments=(), next_fragment_id=0, next_row_id=0, table_uuid="u")
    for step in range(300):
        frags = list(m.fragments)
        op = rnd.random()
        changed = 0
        if op < 0.6 or not frags:  # append 1-9
            k = rnd.randint(1, 9)
            frags += [_frag(m.next_fragment_id + j) for j in range(k)]
            nxt = m.next_fragment_id + k
            changed = k
        elif op < 0.85:  # delete rows of one fragment
            at = rnd.randrange(len(frags))
            frags[at] = _frag(frags[at].id, frags[at].deleted_rows + 1)
            nxt = m.next_fragment_id
            changed = 1
        else:  # compaction: a few fragments replaced by one at the end
            gone = set(rnd.sample(range(len(frags)), min(len(frags), rnd.randint(1, 6))))
            frags = [f for i, f in enumerate(frags) if i not in gone] + [_frag(m.next_fragment_id)]
            nxt = m.next_fragment_id + 1
            changed = len(gone) + 1
        m, writes = lay_out(m.replace(version=m.version + 1, fragments=tuple(frags), next_fragment_id=nxt))
        for path, data in writes:
            assert path not in stored
            stored[path] = data
        held = [f for seg in m.segments for f in seg.fragments]
        assert tuple(held) == m.fragments[: len(held)] and len(m.fragments) - len(held) <= 2
        listed = [seg for lst in m.segment_lists for seg in lst.items]
        assert tuple(listed) == m.segments[: len(listed)] and len(m.segments) - len(listed) <= 2
        assert all(1 <= seg.count <= 4 for seg in m.segments + m.segment_lists)
        rewritten = sum(len(json.loads(d).get("fragments", ())) for _, d in writes)
        lists_rewritten = sum(1 for _, d in writes if "segments" in json.loads(d))
        assert rewritten <= 4 * (changed + 2), f"step {step}: {rewritten} fragments rewritten for {changed} changed"
        assert lists_rewritten <= 2 * (changed + 2), f"step {step}: {lists_rewritten} segment lists rewritten"
        # a laid-out manifest lays out to itself, and decodes from what was written
        again, more = lay_out(m)
        assert not more and again is m
        decoded = [f for seg in m.segments for f in decode_segment(stored[seg.path], seg, "u", seg.path).fragments]
        assert decoded == held
        relisted = [
            e for lst in m.segment_lists for e in decode_segment(stored[lst.path], lst, "u", lst.path, is_list=True).items
        ]
        assert relisted == listed
    assert len(m.segments) <= len(m.fragments)  # and never empty segments


def test_opening_reads_no_segment_until_a_fragment_is_looked_at(local_table_uri, monkeypatch):
    t = lamina.create_table(local_table_uri, SCHEMA)
    _grow(t, 30)
    t.delete("id = 7")
    expected = _all_rows(t)
    clear_caches()
    gets: list[str] = []
    real_get = type(t.store).get
    monkeypatch.setattr(type(t.store), "get", lambda self, path, *a, **k: gets.append(path) or real_get(self, path, *a, **k))
    opened = lamina.open_table(local_table_uri)
    assert opened.count_rows() == len(expected) and len(opened.manifest.fragments) == 30
    assert not [p for p in gets if p.startswith(SEGMENTS_DIR) and p not in {lst.path for lst in opened.manifest.segment_lists}], (
        "opening and counting read segments"
    )
    assert _all_rows(opened) == expected  # the first read reads them all
    assert {seg.path for seg in opened.manifest.segments} <= set(gets)


def test_a_manifest_pickles_with_its_fragments(local_table_uri):
    import pickle

    t = lamina.create_table(local_table_uri, SCHEMA)
    _grow(t, 12)
    clear_caches()
    m = lamina.open_table(local_table_uri).manifest
    back = pickle.loads(pickle.dumps(m))
    assert back == m and isinstance(back.fragments, tuple) and back.rows == 36
    assert all(seg.read for seg in back.segments)


def test_segments_survive_a_moto_s3_table(s3_table_uri, s3_options):
    t = lamina.create_table(s3_table_uri, SCHEMA, storage_options=s3_options)
    _grow(t, 15)
    t.delete("id = 10")
    expected = _all_rows(t)
    clear_caches()
    again = lamina.open_table(s3_table_uri, storage_options=s3_options)
    assert again.manifest.segments and _all_rows(again) == expected
    assert load_manifest(again.store, again.version).segments == again.manifest.segments


def _live_fragments() -> int:
    import gc

    from lamina.manifest import Fragment

    return sum(1 for o in gc.get_objects() if isinstance(o, Fragment))


def test_iterating_fragments_streams_segments_without_keeping_them(local_table_uri, monkeypatch):
    from lamina import manifest as manifest_mod
    from lamina.manifest import versions

    t = lamina.create_table(local_table_uri, SCHEMA)
    _grow(t, 80)
    t.delete("id = 7")
    clear_caches()
    monkeypatch.setattr(versions._SEGMENTS, "budget", 0)  # nothing stays in the segment cache
    monkeypatch.setattr(manifest_mod.FragmentList, "WINDOW", 2)
    opened = lamina.open_table(local_table_uri)
    frags = opened.manifest.fragments
    assert isinstance(frags, manifest_mod.FragmentList) and len(opened.manifest.segments) >= 15
    baseline = _live_fragments()
    seen, peak = [], 0
    for k, f in enumerate(frags):
        seen.append((f.id, f.path, f.live_rows))
        if k % 8 == 0:
            peak = max(peak, _live_fragments() - baseline)
    per_segment = max(seg.count for seg in opened.manifest.segments)
    # two windows of segments at most (the one being yielded, the next read), plus the inline tail
    assert 0 < peak <= 2 * 2 * per_segment + len(frags.inline) + 1, peak
    assert frags._all is None and not any(seg.read for seg in opened.manifest.segments)
    # the same fragments, in the same order, as the list read whole
    assert seen == [(f.id, f.path, f.live_rows) for f in frags._get()]
    assert sum(x[2] for x in seen) == opened.count_rows() == 3 * 80 - 1


def test_a_duplicated_fragment_is_refused_while_streaming(local_table_uri, manifest_layout):
    t = lamina.create_table(local_table_uri, SCHEMA)
    _grow(t, 20)
    frags = tuple(t.manifest.fragments)
    from tests.lamina.helpers import put_next_version

    # The first fragment twice: in two segments (small layout), or twice in the root (the default).
    put_next_version(t, fragments=frags + frags[:1])
    clear_caches()
    with pytest.raises(CorruptFile, match="fragment ids are duplicated"):
        opened = lamina.open_table(local_table_uri)  # fragments held in the root: refused by the open
        for _ in opened.manifest.fragments:  # in segments: refused while they stream by
            pass
    with pytest.raises(CorruptFile, match="fragment ids are duplicated"):
        lamina.open_table(local_table_uri).to_arrow()


def test_an_append_reads_only_the_segments_its_tail_merges_with(local_table_uri, monkeypatch):
    t = lamina.create_table(local_table_uri, SCHEMA)
    end = _grow(t, 60)
    clear_caches()
    gets: list[str] = []
    real_get = type(t.store).get
    monkeypatch.setattr(type(t.store), "get", lambda self, path, *a, **k: gets.append(path) or real_get(self, path, *a, **k))
    writer = lamina.open_table(local_table_uri)
    assert len(writer.manifest.segments) >= 12
    for k in range(12):
        lists = {lst.path for lst in writer.manifest.segment_lists}
        gets.clear()
        writer.append(_rows(end + k, end + k + 1))
        read = [p for p in gets if p.startswith(SEGMENTS_DIR) and p not in lists]
        assert len(read) <= 2, f"append {k} read {len(read)} of {len(writer.manifest.segments)} segments"
    assert isinstance(writer.manifest.fragments, FragmentList)  # never made a tuple of every fragment
    clear_caches()
    assert _all_rows(lamina.open_table(local_table_uri)) == sorted(
        [(i, f"v{i}") for i in range(end)] + [(i, f"v{i}") for i in range(end, end + 12)]
    )


def test_lamina_upgrade_converts_a_version_1_table_once(local_table_uri, capsys):
    from lamina.jobs.cli import main as lamina_cli

    t = lamina.create_table(local_table_uri, SCHEMA)
    _grow(t, 12)
    v1, rows_v1 = t.version, _all_rows(t)
    t.store.put(manifest_path(v1), as_format_1(t.manifest))
    for o in t.store.list(SEGMENTS_DIR):
        t.store.delete([o.path])
    clear_caches()
    assert lamina_cli(["upgrade", local_table_uri, "--dry-run"]) == 0
    assert "manifest format 1" in capsys.readouterr().out and lamina.open_table(local_table_uri).version == v1
    assert lamina_cli(["upgrade", local_table_uri, "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["upgraded"] and report["from_format"] == 1 and report["version"] == v1 + 1
    clear_caches()
    new = lamina.open_table(local_table_uri)
    assert json.loads(new.store.get(manifest_path(new.version)))["format_version"] == 2
    assert new.manifest.segments and _all_rows(new) == rows_v1 and new.manifest.record.operation == "append"
    assert lamina_cli(["upgrade", local_table_uri]) == 0
    assert "already in manifest format 2" in capsys.readouterr().out and lamina.open_table(local_table_uri).version == v1 + 1
    assert lamina_cli(["upgrade", local_table_uri + "/missing"]) == 1


def _segment_gets(monkeypatch, store) -> list[str]:
    gets: list[str] = []
    real_get = type(store).get
    monkeypatch.setattr(type(store), "get", lambda self, path, *a, **k: gets.append(path) or real_get(self, path, *a, **k))
    return gets


def test_segment_entries_bound_their_fragments_ids_and_zones(local_table_uri):
    t = lamina.create_table(local_table_uri, SCHEMA)
    _grow(t, 40)
    t.delete("id = 4")
    clear_caches()
    m = lamina.open_table(local_table_uri).manifest
    assert len(m.segments) >= 8 and m.segment_lists
    assert all(lst.ids is None and lst.zones is None for lst in m.segment_lists)  # lists are read at open anyway
    for seg in m.segments:
        frags = seg.fragments
        assert seg.ids == (min(f.id for f in frags), max(f.id for f in frags))
        (zone,) = [z for z in seg.zones if z.column == "id"]
        id_zones = [z for f in frags for z in f.zones if z.column == "id"]
        ids = [z.lo for z in id_zones] + [z.hi for z in id_zones]
        assert (zone.lo, zone.hi) == (min(ids), max(ids))


def test_a_selective_delete_reads_only_the_segments_that_can_hold_the_key(local_table_uri, monkeypatch):
    t = lamina.create_table(local_table_uri, SCHEMA)
    end = _grow(t, 60)
    expected = {(i, f"v{i}") for i in range(end)} - {(100, "v100")}
    clear_caches()
    writer = lamina.open_table(local_table_uri)
    lists = {lst.path for lst in writer.manifest.segment_lists}
    assert len(writer.manifest.segments) >= 12
    gets = _segment_gets(monkeypatch, writer.store)
    assert writer.to_arrow(filter="id = 100").num_rows == 1
    assert writer.count_rows("id >= 100 AND id <= 102") == 3
    assert writer.delete("id = 100") == 1
    read = {p for p in gets if p.startswith(SEGMENTS_DIR) and p not in lists}
    assert 1 <= len(read) <= 2, f"{len(read)} of {len(writer.manifest.segments)} segments read"
    assert sum(seg.read for seg in writer.manifest.segments) <= 2  # the new version holds only what it changed
    clear_caches()
    assert set(_all_rows(lamina.open_table(local_table_uri))) == expected


def test_a_segment_holding_ids_outside_its_entry_is_corrupt():
    from lamina.manifest import FragmentList

    frags = tuple(Fragment(i, f"data/{i:032x}.parquet", 1, 10, (RowGroup(1, 10),), "2.6") for i in range(4))
    ok = ManifestSegment("_segments/a.json", 2, 1, "crc32c:0", 2, ids=(0, 1), held=frags[:2])
    lying = ManifestSegment("_segments/b.json", 2, 1, "crc32c:0", 2, ids=(2, 2), held=frags[2:])
    assert [
        f.id
        for f in FragmentList(
            (ok, ManifestSegment("_segments/c.json", 2, 1, "crc32c:0", 2, ids=(2, 3), held=frags[2:])), "v", 4, 0
        )
    ] == [0, 1, 2, 3]
    with pytest.raises(CorruptFile, match="outside the range"):
        list(FragmentList((ok, lying), "v", 4, 0))


def test_laying_out_from_the_first_changed_part_equals_laying_out_every_part():
    from lamina.manifest.layout import _lay_parts, _lay_units, _Unit

    rng = random.Random(7)
    frags = [Fragment(i, f"data/{i:032x}.parquet", 1, 10, (RowGroup(1, 10),), "2.6") for i in range(4000)]
    for trial in range(120):
        parts, at = [], 0
        while at < 1200:
            n = rng.choice([1, 2, 3, 4, 4, 4, 8, 16])
            run = tuple(frags[at : at + n])
            at += n
            if rng.random() < 0.8:
                parts.append(ManifestSegment(f"_segments/{at}.json", len(run), 1, "crc32c:0", len(run), held=run))
            else:
                parts.append(run)
        if rng.random() < 0.5:  # mostly segments, changed near the end (appends) or anywhere (edits)
            parts = [
                p
                if isinstance(p, ManifestSegment)
                else ManifestSegment(f"_segments/k{i}.json", len(p), 1, "crc32c:0", len(p), held=p)
                for i, p in enumerate(parts)
            ]
            parts.append(tuple(frags[at : at + rng.randint(1, 40)]))
        limits = (rng.choice([2, 4, 8]), rng.choice([4, 8, 16]))
        encode = lambda held: b"x" * len(held)  # noqa: E731
        got_writes, want_writes = [], []
        got = _lay_parts(tuple(parts), limits, encode, got_writes)
        units = [_Unit([], p) if isinstance(p, ManifestSegment) else _Unit(list(p)) for p in parts]
        want = _lay_units(units, limits, lambda f: f.live_rows, encode, want_writes)
        assert [s.items if s.path.startswith("_segments/") and s not in parts else s for s in got[0]] == [
            s.items if s.path.startswith("_segments/") and s not in parts else s for s in want[0]
        ], trial
        assert all((a is b) == (b in parts) for a, b in zip(got[0], want[0])) and got[1] == want[1]
        assert len(got_writes) == len(want_writes)
