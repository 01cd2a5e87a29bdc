"""Finding the latest version without listing the whole history (the latest-version hint, FORMAT §2)."""

from __future__ import annotations

import pyarrow as pa
import pytest

import lamina
from lamina.manifest import HINT_EVERY, LATEST_HINT, latest_version, list_versions, manifest_path
from lamina.store.scheduler import io_stats, stats_delta

SCHEMA = pa.schema([("id", pa.int64())])


def grow(t: lamina.Table, commits: int) -> None:
    for i in range(commits):
        t.append(pa.table({"id": [i]}, schema=SCHEMA))


def test_opening_lists_from_the_hint_not_the_whole_history(table_location):
    uri, options = table_location
    t = lamina.create_table(uri, SCHEMA, storage_options=options)
    grow(t, 3 * HINT_EVERY + 5)  # versions 1..54
    assert t.store.get(LATEST_HINT) == str(3 * HINT_EVERY).encode()
    listed = []
    real_list = type(t.store).list

    def spy(self, prefix, start_after=None):
        out = list(real_list(self, prefix, start_after))
        listed.extend(o.path for o in out)
        return iter(out)

    pytest.MonkeyPatch().setattr(type(t.store), "list", spy)
    try:
        assert lamina.open_table(uri, storage_options=options).version == t.version == 3 * HINT_EVERY + 6
    finally:
        pytest.MonkeyPatch().undo()
    versions = [p for p in listed if p.endswith(".manifest")]
    assert len(versions) <= HINT_EVERY + 1, versions  # only from the hint on (local lists filter, S3 starts after)


def test_a_local_open_looks_up_the_versions_after_the_hint_without_listing(local_table_uri):
    """Locally the versions after the hint are looked up one by one (a stat each), never by reading the
    `_versions/` directory, whose listing grows with the history."""
    t = lamina.create_table(local_table_uri, SCHEMA)
    grow(t, 4 * HINT_EVERY + 3)
    t.store.delete([manifest_path(v) for v in range(1, HINT_EVERY)])  # cleaned up: a suffix stays
    before = io_stats()
    assert latest_version(t.store) == t.version == 4 * HINT_EVERY + 4
    used = stats_delta(before).get("local", {})
    assert used.get("LIST", 0) == 0 and used.get("HEAD", 0) <= HINT_EVERY + 1, used


def test_a_stale_or_missing_hint_still_finds_the_latest(table_location):
    uri, options = table_location
    t = lamina.create_table(uri, SCHEMA, storage_options=options)
    grow(t, HINT_EVERY + 3)
    t.store.put(LATEST_HINT, b"1")  # far behind
    assert latest_version(t.store) == t.version
    t.store.delete([LATEST_HINT])
    assert latest_version(t.store) == t.version
    t.store.put(LATEST_HINT, b"not a number")
    assert latest_version(t.store) == t.version
    t.store.put(LATEST_HINT, b"9999")  # ahead: a dropped table's hint
    assert latest_version(t.store) == t.version == list_versions(t.store)[-1]


def test_a_hint_of_a_dropped_table_does_not_hide_the_new_one(tmp_path):
    uri = str(tmp_path / "t")
    t = lamina.create_table(uri, SCHEMA)
    grow(t, 2 * HINT_EVERY)
    t.store.delete([o.path for o in t.store.list("_versions/") if o.path != LATEST_HINT])  # dropped, hint left
    assert latest_version(t.store) is None
    again = lamina.create_table(uri, SCHEMA)
    again.append(pa.table({"id": [7]}, schema=SCHEMA))
    reopened = lamina.open_table(uri)
    assert reopened.version == 2 and reopened.to_arrow().column("id").to_pylist() == [7]


def test_cleanup_keeps_the_hint_and_the_hint_costs_one_put_in_sixteen_commits(s3_table_uri, s3_options, monkeypatch):
    monkeypatch.setenv("LAMINA_MANIFEST_INLINE_FRAGMENTS", "64")  # every fragment in the root: no segment puts
    t = lamina.create_table(s3_table_uri, SCHEMA, storage_options=s3_options)
    before = io_stats()
    grow(t, HINT_EVERY)
    puts = stats_delta(before)[t.store.io_domain]["PUT"]
    assert puts == 2 * HINT_EVERY + 1  # a data file and a manifest per commit, and one hint
    t.cleanup(0, enforce_retention=False)
    assert t.store.get(LATEST_HINT) == str(HINT_EVERY).encode()
    assert lamina.open_table(s3_table_uri, storage_options=s3_options).version == t.version
