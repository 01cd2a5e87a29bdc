"""Dropping a table: a tombstone version first (the same put-if-absent every writer uses), then every
other object of the table's layout; the tombstone stays. A writer racing the drop stops with TableDropped /
TableReplaced and commits nothing; the location ends holding the tombstone alone, and a new table can be
created there (its versions follow the tombstone)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import lamina
import lamina.catalog
from lamina.catalog import Catalog
from lamina.commit import commit
from lamina.errors import CommitConflict, TableDropped, TableExists, TableNotFound, TableReplaced
from lamina.manifest import SEGMENTS_DIR, TABLE_DIRS, latest_version, list_versions, load_manifest
from lamina.store import open_store
from lamina.transaction import Drop
from tests.lamina.helpers import SCHEMA, delete_every_object, ids_of, rows

REPO = Path(__file__).resolve().parents[2]


def _objects(uri, opts):
    """Every object under ``uri`` (what ``aws s3 ls --recursive`` / ``find -type f`` shows)."""
    return sorted(o.path for o in open_store(uri, opts).list(""))


def _tombstone(version):
    """What a finished drop leaves: its tombstone alone."""
    return [f"_versions/{version:020d}.manifest"]


def _appended(uri, opts, appends):
    t = lamina.create_table(uri, SCHEMA, storage_options=opts)
    for k in range(appends):
        t.append(rows(10 * k, 10))
    return t


# -- the report's scene: a process appends in a loop while another purges the table ---------------
WRITER = r"""
import json, os, sys
import lamina
from lamina.errors import TableReplaced
from tests.lamina.helpers import rows

root, opts, name, marker = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3], sys.argv[4]
table = lamina.connect(root, storage_options=opts).open_table(name)
start = 1000
while True:
    begun_after_purge = os.path.exists(marker)  # the purge had returned before this append began
    try:
        version = table.append(rows(start, 1))
    except Exception as e:
        print("error", json.dumps([type(e).__name__, isinstance(e, TableReplaced), str(e)]), flush=True)
        break
    start += 1
    print("late" if begun_after_purge else "ok", version, flush=True)
    if begun_after_purge:
        break
"""


@pytest.mark.timeout(300)
def test_purge_stops_a_writer_appending_in_another_process(table_location, tmp_path):
    root, opts = table_location
    cat = lamina.connect(root, storage_options=opts)
    t = cat.create_table("t", SCHEMA)
    t.append(rows(0, 5))
    location, old_uuid = t.uri, t.manifest.table_uuid
    marker = tmp_path / "purged"
    writer = subprocess.Popen(
        [sys.executable, "-c", WRITER, root, json.dumps(opts), "t", str(marker)],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        acks = 0
        while acks < 3:  # the writer's own acknowledgements: it is committing
            line = writer.stdout.readline()
            assert line.startswith("ok "), (line, writer.stderr.read() if not line else "")
            acks += 1
        cat.drop_table("t", purge=True)
        marker.touch()
        lines = []
        for line in writer.stdout:  # until the writer stops: its first failing commit, or a late success
            lines.append(line)
            if not line.startswith("ok "):
                break
        assert writer.wait(timeout=120) == 0, writer.stderr.read()
    finally:
        if writer.poll() is None:
            writer.kill()
    last = lines[-1] if lines else ""
    assert not last.startswith("late"), f"an append begun after the purge returned committed version {last.split()[1]}"
    assert last.startswith("error "), (lines, writer.stderr.read())
    name, is_replaced, message = json.loads(last[len("error ") :])
    assert is_replaced and name in ("TableDropped", "TableReplaced"), (name, message)
    assert location in message and "Nothing was committed" in message
    tomb = latest_version(open_store(location, opts))
    assert _objects(location, opts) == _tombstone(tomb), "the purge (and the stopped writer) left objects behind"
    assert load_manifest(open_store(location, opts), tomb).dropped
    again = lamina.create_table(location, SCHEMA, storage_options=opts)
    assert again.version == tomb + 1 and again.manifest.table_uuid != old_uuid
    again.append(rows(7, 2))
    assert ids_of(lamina.open_table(location, storage_options=opts)) == [7, 8]


# -- the window FORMAT §9.1 closes: a put that lands after the purge removed its version number --------
@pytest.mark.parametrize("others_commit_first", [False, True], ids=["its-number-is-the-tombstone", "below-the-tombstone"])
def test_a_put_landing_after_the_whole_purge_commits_nothing_and_cannot_be_extended(local_table_uri, others_commit_first):
    _appended(local_table_uri, None, 3)  # versions 1..4
    writer = lamina.open_table(local_table_uri)
    real_put, purged = writer.store.put_if_absent, []

    def put_after_the_purge(path, data):  # the writer's check of its base is done; its put is late
        if path.startswith("_versions/") and path.endswith(".manifest") and not purged:
            purged.append(True)
            if others_commit_first:
                lamina.open_table(local_table_uri).append(rows(50, 1))  # takes version 5, the writer's number
            purged.append(lamina.drop_table(local_table_uri))  # the whole purge, tombstone and all
        return real_put(path, data)

    writer.store.put_if_absent = put_after_the_purge
    try:
        with pytest.raises(
            TableDropped, match=rf"append on table {local_table_uri} .*dropped at version .*Nothing was committed"
        ):
            writer.append(rows(100, 1))
    finally:
        writer.store.put_if_absent = real_put
    tomb = purged[1].version
    assert tomb == (6 if others_commit_first else 5)
    assert _objects(local_table_uri, None) == _tombstone(tomb), "the late put's version or files were left"
    with pytest.raises(TableDropped):  # the writer's view can never extend anything
        writer.append(rows(200, 1))
    assert _objects(local_table_uri, None) == _tombstone(tomb)
    again = lamina.create_table(local_table_uri, SCHEMA)
    assert again.version == tomb + 1
    again.append(rows(7, 2))
    assert ids_of(lamina.open_table(local_table_uri)) == [7, 8]
    with pytest.raises(TableReplaced):
        writer.append(rows(300, 1))


def test_cleanup_and_history_of_a_table_created_over_a_tombstone(local_table_uri):
    _appended(local_table_uri, None, 2)
    tomb = lamina.drop_table(local_table_uri).version
    t = lamina.create_table(local_table_uri, SCHEMA)
    t.append(rows(0, 3))
    assert [v.version for v in t.versions()] == [tomb + 1, tomb + 2], "the dropped table's tombstone is not its history"
    with pytest.raises(TableReplaced, match="dropped and created again"):
        t.checkout(tomb)
    t.cleanup(older_than=0, enforce_retention=False)
    assert list_versions(t.store) == [tomb + 2]
    assert ids_of(lamina.open_table(local_table_uri)) == [0, 1, 2]


# -- every directory of the layout goes, manifest segments included ------------------------------
def test_catalog_purge_removes_every_object_segments_included(table_location):
    root, opts = table_location
    cat = lamina.connect(root, storage_options=opts)
    t = cat.create_table("t", SCHEMA)
    for k in range(12):
        t.append(rows(10 * k, 10))
    t.create_index("id", "btree")
    assert any(p.startswith(SEGMENTS_DIR) for p in _objects(t.uri, opts)), "the scene needs manifest segments"
    cat.drop_table("t", purge=True)
    assert _objects(t.uri, opts) == _tombstone(t.version + 1)
    assert lamina.create_table(t.uri, SCHEMA, storage_options=opts).version == t.version + 2


def test_drop_table_of_a_plain_table_leaves_its_tombstone_alone_and_the_uri_is_free(table_location):
    uri, opts = table_location
    t = _appended(uri, opts, 12)
    t.delete("id < 3")
    old_uuid = t.manifest.table_uuid
    dropped = lamina.drop_table(uri, storage_options=opts)
    assert dropped.version == t.version + 1 and dropped.objects_removed > 0
    assert _objects(uri, opts) == _tombstone(dropped.version)
    with pytest.raises(
        TableNotFound, match=f"no Lamina table at {uri}: the table there was dropped at version {dropped.version}"
    ):
        lamina.open_table(uri, storage_options=opts)
    with pytest.raises(TableNotFound, match=f"no Lamina table at {uri} to drop"):
        lamina.drop_table(uri, storage_options=opts)
    new = lamina.create_table(uri, SCHEMA, storage_options=opts)
    assert new.version == dropped.version + 1 and new.manifest.table_uuid != old_uuid
    with pytest.raises(TableReplaced):
        t.append(rows(500, 1))  # a view of the dropped table: its base is gone and nothing follows it
    assert lamina.open_table(uri, storage_options=opts).count_rows() == 0


def test_a_failed_catalog_create_removes_what_it_made_segments_included(local_table_uri, monkeypatch):
    cat = lamina.connect(local_table_uri)
    made = []

    def create_with_segments(uri, schema, **options):  # a create that got as far as writing manifest segments
        t = lamina.create_table(uri, schema, **options)
        for k in range(12):
            t.append(rows(10 * k, 10))
        made.append(t.uri)
        return t

    def failing_mutate(self, request, before_commit=None):
        before_commit()
        raise CommitConflict("the catalog's rewrite lost (injected)")

    monkeypatch.setattr(lamina.catalog.api, "create_table", create_with_segments)
    monkeypatch.setattr(Catalog, "_mutate", failing_mutate)
    with pytest.raises(CommitConflict, match="injected"):
        cat.create_table("t", SCHEMA)
    assert made and _objects(made[0], None) == [], "a location no entry ever named keeps no tombstone"


def test_table_dirs_are_every_directory_of_the_format():
    """docs/FORMAT.md §1 lists the layout; the one list purge and cleanup share must name every directory."""
    text = (REPO / "docs" / "FORMAT.md").read_text()
    layout = text.split("## 1. Layout", 1)[1].split("```", 2)[1]
    dirs = {line.split("/", 1)[0] + "/" for line in layout.strip().splitlines()}
    assert dirs == set(TABLE_DIRS)


# -- a commit over a drop -----------------------------------------------------------------------
def test_a_commit_replayed_over_a_drop_raises_table_dropped_and_removes_its_files(local_table_uri):
    t = _appended(local_table_uri, None, 2)
    stale = t.checkout(t.version)
    data_before = _objects(local_table_uri, None)
    tomb = commit(t.store, Drop(t.version), t.manifest)
    assert tomb.dropped and tomb.version == 4 and tomb.table_uuid == t.manifest.table_uuid
    assert tomb.record.operation == "drop" and len(tomb.fragments) == 0 and tomb.indices == ()
    with pytest.raises(
        TableDropped, match=rf"append on table {local_table_uri} .*dropped at version 4.*Nothing was committed"
    ) as e:
        stale.append(rows(100, 5))
    assert isinstance(e.value, TableReplaced) and isinstance(e.value, CommitConflict)
    after = _objects(local_table_uri, None)
    assert [p for p in after if p not in data_before] == ["_versions/00000000000000000004.manifest"], (
        "the refused append left its files"
    )
    with pytest.raises(TableDropped):
        commit(t.store, Drop(stale.version), stale.manifest)  # a drop over a drop: already dropped


def test_a_tombstone_that_still_holds_fragments_is_corrupt(local_table_uri):
    from lamina.cache import clear_caches
    from lamina.errors import CorruptFile
    from tests.lamina.helpers import put_next_version

    t = _appended(local_table_uri, None, 2)
    put_next_version(t, dropped=True)  # a "tombstone" that kept the table's fragments
    clear_caches()
    with pytest.raises(CorruptFile, match="dropped table's version still has fragments"):
        lamina.open_table(local_table_uri)


def test_open_and_create_on_a_dropped_table_whose_purge_did_not_finish(local_table_uri):
    t = _appended(local_table_uri, None, 3)
    commit(t.store, Drop(t.version), t.manifest)  # a purge that stopped right after its drop committed
    with pytest.raises(TableNotFound, match=rf"{local_table_uri}: the table there was dropped at version 5.*lamina.drop_table"):
        lamina.open_table(local_table_uri)
    with pytest.raises(TableNotFound, match="dropped at version 5"):
        t.reload()
    with pytest.raises(TableExists, match=rf"{local_table_uri} is being dropped.*lamina.drop_table"):
        lamina.create_table(local_table_uri, SCHEMA)
    assert list_versions(t.store) == [1, 2, 3, 4, 5], "create_table removed nothing"
    dropped = lamina.drop_table(local_table_uri)  # finishes the drop
    assert dropped.version == 5
    assert _objects(local_table_uri, None) == _tombstone(5)
    assert lamina.create_table(local_table_uri, SCHEMA).version == 6


def test_a_writer_whose_history_the_purge_already_removed_meets_the_tombstone(local_table_uri):
    t = _appended(local_table_uri, None, 3)
    stale = t.checkout(2)  # read at version 2; versions 3 and 4 follow
    tomb = commit(t.store, Drop(t.version), t.manifest)
    for v in range(1, tomb.version):  # the purge got as far as the versions before the tombstone
        t.store.delete([f"_versions/{v:020d}.manifest"])
    with pytest.raises(TableDropped, match=rf"{local_table_uri} .*dropped at version 5"):
        stale.append(rows(100, 1))


# -- the location's objects deleted behind Lamina's back --------------------------------------------


def test_a_writer_stops_once_its_tables_objects_were_deleted(table_location):
    uri, opts = table_location
    _appended(uri, opts, 3)
    writer = lamina.open_table(uri, storage_options=opts)  # another handle, as another process holds one
    writer.append(rows(100, 1))
    delete_every_object(uri, opts)
    with pytest.raises(TableReplaced, match=rf"{uri} .*Nothing was committed"):
        writer.append(rows(200, 1))
    assert _objects(uri, opts) == [], "the refused append left objects"
    new = lamina.create_table(uri, SCHEMA, storage_options=opts)
    assert new.version == 1
    assert latest_version(new.store) == 1 and load_manifest(new.store, 1).table_uuid == new.manifest.table_uuid
