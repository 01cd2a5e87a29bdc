"""Table.restore and tags (docs/FORMAT.md §6, §8, §9.2): a restore commits an earlier version again and keeps
the versions between; tags name versions that cleanup keeps, readable after their roots expired."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

import lamina
import lamina.cleanup
from lamina.commit import commit
from lamina.errors import (
    CommitConflict,
    CorruptFile,
    InvalidArgument,
    TableNotFound,
    TagExists,
    TagNotFound,
    VersionNotFound,
)
from lamina.ingest import ShardApplier
from lamina.manifest import LATEST_HINT, TAGS_DIR, list_versions, manifest_path
from lamina.rewrite import full_rewrite
from lamina.table import Table
from lamina.transaction import Configure, Rewrite
from lamina.wal import WalWriter
from tests.lamina.helpers import SCHEMA, HookedStore, ids_of, rows


def _objects(t, prefix=""):
    return {o.path for o in t.store.list(prefix)}


def _history(uri, opts):
    """Version 4 (the one restored): two files, a delete, an index; then versions 5-8 change everything."""
    t = lamina.create_table(uri, SCHEMA, storage_options=opts)  # 1
    t.append(rows(0, 200), max_rows_per_file=100)  # 2
    t.delete("id < 10 OR id = 150")  # 3
    t.create_index("id", "btree", name="id_ix")  # 4
    t.append(rows(1000, 50))  # 5
    t.delete("id >= 100 AND id < 120")  # 6
    t.overwrite(pa.table({"x": [1, 2, 3]}), schema=pa.schema([("x", pa.int64())]))  # 7: another schema, no index
    t.commit_transaction(Configure(t.version, {"zstd_level": 9}))  # 8
    return t


# -- restore -------------------------------------------------------------------------------------
def test_restore_commits_the_old_version_again_and_keeps_the_versions_between(table_location):
    uri, opts = table_location
    t = _history(uri, opts)
    old = t.checkout(4)
    between = {v: t.checkout(v).to_arrow() for v in range(5, 9)}
    next_id = t.manifest.next_fragment_id
    assert t.restore(4) == 9 and t.version == 9
    latest = lamina.open_table(uri, storage_options=opts)
    assert latest.version == 9 and latest.schema.equals(SCHEMA)
    assert latest.to_arrow().equals(old.to_arrow()), "every column, every row, in order"
    assert [f.id for f in latest.fragments()] == [f.id for f in old.fragments()], "the same fragments, the same ids"
    assert [(f.path, f.deletion_path) for f in latest.fragments()] == [(f.path, f.deletion_path) for f in old.fragments()]
    assert [i.name for i in latest.list_indices()] == ["id_ix"] and latest.list_indices()[0].uncovered_fragments == 0
    flt = "id IN (5, 11, 150, 151, 199, 1001)"
    assert latest.to_arrow(filter=flt).equals(latest.to_arrow(filter=flt, use_index=False))
    assert ids_of(latest.checkout(9)) == sorted(set(range(10, 200)) - {150})
    assert latest.manifest.config == old.manifest.config and latest.checkout(8).manifest.config["zstd_level"] == 9
    for v, table in between.items():  # time travel still reads every version in between
        assert latest.checkout(v).to_arrow().equals(table)
    record = latest.manifest.transaction
    assert record["operation"] == "restore" and record["version"] == 4 and record["read_version"] == 8 and "tag" not in record
    assert latest.manifest.next_fragment_id == next_id, "fragment ids never go back"
    latest.append(rows(2000, 5))
    assert latest.fragments()[-1].id == next_id, "the next fragment gets an id never used"
    assert [v.operation for v in latest.versions()][-2:] == ["restore", "append"]


def test_restore_of_a_version_cleanup_removed_fails_and_commits_nothing(table_location):
    uri, opts = table_location
    t = lamina.create_table(uri, SCHEMA, storage_options=opts)
    t.append(rows(0, 100))  # 2
    t.append(rows(100, 100))  # 3
    ids = [f.id for f in t.fragments()]
    commit(t.store, Rewrite(t.version, [full_rewrite(t.store, t.manifest, ids, t.write_options)]), t.manifest)  # 4
    t.reload().append(rows(200, 10))  # 5
    old_files = {f.path for f in t.checkout(2).fragments()}
    t.cleanup(older_than=0, enforce_retention=False)
    assert not old_files & _objects(t, "data/") and list_versions(t.store) == [5]
    with pytest.raises(
        VersionNotFound,
        match=rf"cannot restore table {t.uri} to version 2: it is not on storage .*removed by cleanup.*no tag names it\. "
        r"Nothing was committed; restore a tagged version",
    ):
        t.restore(2)
    assert list_versions(t.store) == [5] and t.version == 5
    assert ids_of(lamina.open_table(uri, storage_options=opts)) == list(range(210))


def test_restore_of_a_tag_whose_files_a_cleanup_unaware_of_tags_removed_names_what_is_missing(table_location, monkeypatch):
    """A cleanup by a Lamina that predates tags removes tagged versions' files; a restore says so and commits nothing."""
    uri, opts = table_location
    t = lamina.create_table(uri, SCHEMA, storage_options=opts)
    t.append(rows(0, 100))
    t.create_tag("first")
    t.overwrite(rows(500, 10))
    monkeypatch.setattr(lamina.cleanup, "list_tags", lambda store, table_uuid: [])
    t.cleanup(older_than=0, enforce_retention=False)
    with pytest.raises(
        VersionNotFound,
        match=rf"cannot restore table {t.uri} to version 2 \(tag 'first'\): 1 of the 1 objects it references are gone "
        r"\(e\.g\. data/.*\.parquet\), removed by cleanup.*Nothing was committed; restore a tagged version",
    ):
        t.restore("first")
    assert list_versions(t.store) == [3] and ids_of(t.reload()) == list(range(500, 510))


def test_a_tag_keeps_its_version_through_compaction_and_cleanup(table_location):
    uri, opts = table_location
    t = lamina.create_table(uri, SCHEMA, storage_options=opts)
    t.append(rows(0, 100))
    t.append(rows(100, 100))
    t.delete("id < 5")
    t.create_tag("nightly")  # version 4
    tagged = t.to_arrow()
    ids = [f.id for f in t.fragments()]
    commit(t.store, Rewrite(t.version, [full_rewrite(t.store, t.manifest, ids, t.write_options)]), t.manifest)  # 5
    t.reload().append(rows(300, 10))  # 6
    stats = t.cleanup(older_than=0, enforce_retention=False)
    assert stats.versions_removed == 5 and stats.tagged_versions == 1 and list_versions(t.store) == [6]
    assert t.checkout("nightly").to_arrow().equals(tagged)
    assert t.checkout(4).to_arrow().equals(tagged), "by its number too, through the tag"
    assert lamina.open_table(uri, version="nightly", storage_options=opts).to_arrow().equals(tagged)
    assert lamina.open_table(uri, version=4, storage_options=opts).to_arrow().equals(tagged)
    assert t.restore("nightly") == 7
    assert lamina.open_table(uri, storage_options=opts).to_arrow().equals(tagged)
    assert t.manifest.transaction["tag"] == "nightly" and t.manifest.transaction["version"] == 4
    assert t.restore(6) == 8 and ids_of(t) == list(range(5, 200)) + list(range(300, 310))


def test_a_tag_survives_cleanup_and_its_files_go_once_it_is_deleted(table_location):
    uri, opts = table_location
    t = lamina.create_table(uri, SCHEMA, storage_options=opts)
    t.append(rows(0, 100))
    t.delete("id < 3")
    t.create_tag("keep")
    tagged_files = t.manifest.referenced_paths()
    t.overwrite(rows(500, 10))
    t.cleanup(older_than=0, enforce_retention=False)
    assert tagged_files <= _objects(t) and list_versions(t.store) == [4]
    assert t.tags() == {"keep": 3} and ids_of(t.checkout("keep")) == list(range(3, 100))
    assert t.delete_tag("keep") == 3 and t.tags() == {}
    assert t.cleanup(older_than=0, enforce_retention=False).tagged_versions == 0
    assert not tagged_files & _objects(t) and _objects(t, TAGS_DIR) == set()
    with pytest.raises(VersionNotFound, match="has no version 3"):
        t.checkout(3)
    with pytest.raises(TagNotFound, match=rf"table {t.uri} has no tag 'keep' \(tags: none\)"):
        t.checkout("keep")


def test_restore_racing_an_append(table_location):
    """Restore states the whole table: it replays over an append; an append read before a restore conflicts."""
    uri, opts = table_location
    t = lamina.create_table(uri, SCHEMA, storage_options=opts)
    t.append(rows(0, 100))  # 2
    t.append(rows(100, 100))  # 3
    restoring = t.checkout(3)
    t.append(rows(1000, 10))  # 4: committed while the restore ran
    assert restoring.restore(2) == 5 and ids_of(lamina.open_table(uri, storage_options=opts)) == list(range(100))

    appending = lamina.open_table(uri, storage_options=opts)
    t.reload().restore(3)  # 6: committed while the append ran
    before = _objects(t, "data/")
    with pytest.raises(CommitConflict, match=r"append .*\(read at version 5\) conflicts with the restore committed as version 6"):
        appending.append(rows(2000, 10))
    assert list_versions(t.store)[-1] == 6 and _objects(t, "data/") == before, "nothing committed, its file removed"
    assert ids_of(lamina.open_table(uri, storage_options=opts)) == list(range(200))


def test_restore_keeps_the_wal_watermarks_so_flushed_transactions_are_not_applied_again(table_location):
    uri, opts = table_location
    schema = pa.schema([("id", pa.int64()), ("name", pa.string())])
    t = lamina.create_table(uri, schema, storage_options=opts)
    t.append([{"id": i, "name": "table"} for i in range(5)])  # 2
    applier = ShardApplier(uri, 0, opts)
    with WalWriter(uri, 0, storage_options=opts) as w:
        w.put_many([{"id": 100 + i, "name": "wal"} for i in range(3)])
        w.commit()
        assert applier.poll() == 3 and applier.flush() == 3
        w.put_many([{"id": 200 + i, "name": "wal"} for i in range(2)])
        w.commit()
        assert applier.poll() == 2  # in the memtable, not flushed yet
        t.reload().restore(2)  # 4: undoes the first WAL transaction
        restored = lamina.open_table(uri, storage_options=opts)
        assert ids_of(restored) == list(range(5))
        assert restored.manifest.wal_watermarks == {"0/0000000000": 1}, "the watermark stays where the flush put it"
        assert applier.flush() == 5  # on the restored version; a flush that read the version before conflicts (§8)
        w.put({"id": 300, "name": "wal"})
        w.commit()
    again = ShardApplier(uri, 0, opts)  # a restarted applier resumes from the watermarks
    assert again.poll() == 1 and again.flush() == 6
    final = lamina.open_table(uri, storage_options=opts)
    assert ids_of(final) == [0, 1, 2, 3, 4, 200, 201, 300], "the undone WAL transaction is never applied again"
    assert final.manifest.wal_watermarks == {"0/0000000000": 3}


def test_a_cleanup_that_removes_the_restored_version_while_restoring_is_caught(local_table_uri):
    t = lamina.create_table(local_table_uri, SCHEMA)
    t.append(rows(0, 100))  # 2
    t.overwrite(rows(500, 10))  # 3
    old_file = t.checkout(2).fragments()[0].path

    def cleanup_meanwhile():  # what a cleanup expiring version 2 does around the restore's put
        t.store.delete([manifest_path(2), manifest_path(1)])
        t.store.delete([old_file])

    racing = Table(HookedStore(t.store).on("put_if_absent", prefix="_versions/", times=1, before=cleanup_meanwhile), t.manifest)
    with pytest.raises(
        CorruptFile, match=rf"version 4, the restore of version 2, lost 1 of its files \(e\.g\. {old_file}\) to a cleanup"
    ):
        racing.restore(2)


# -- tags ----------------------------------------------------------------------------------------
def test_tags_are_created_listed_read_and_deleted(table_location):
    uri, opts = table_location
    t = lamina.create_table(uri, SCHEMA, storage_options=opts)
    t.append(rows(0, 10))
    assert t.create_tag("v-2.release_1") == 2
    t.append(rows(10, 10))
    assert t.create_tag("first", version=1) == 1 and t.create_tag("latest") == 3
    assert t.tags() == {"first": 1, "latest": 3, "v-2.release_1": 2}
    stored = json.loads(t.store.get(f"{TAGS_DIR}v-2.release_1.json"))
    assert set(stored) == {"format", "table_uuid", "version", "created_ms", "manifest"}
    assert stored["format"] == "lamina.tag" and stored["version"] == 2 and stored["table_uuid"] == t.manifest.table_uuid
    assert stored["manifest"] == json.loads(t.store.get(manifest_path(2))), "a copy of the version's root"
    assert t.checkout("v-2.release_1").count_rows() == 10 and t.checkout("first").count_rows() == 0
    assert lamina.open_table(uri, version="latest", storage_options=opts).version == 3
    assert t.delete_tag("first") == 1 and t.tags() == {"latest": 3, "v-2.release_1": 2}


def test_tag_errors(table_location):
    uri, opts = table_location
    t = lamina.create_table(uri, SCHEMA, storage_options=opts)
    t.append(rows(0, 10))
    t.create_tag("prod", version=1)
    with pytest.raises(TagExists, match=rf"table {t.uri} already has a tag 'prod', on version 1 .*tags never move"):
        t.create_tag("prod")
    with pytest.raises(VersionNotFound, match=rf"table {t.uri} has no version 7 .*and no tag on it"):
        t.create_tag("future", version=7)
    with pytest.raises(TagNotFound, match=r"has no tag 'nope' \(tags: 'prod'\)"):
        t.checkout("nope")
    with pytest.raises(TagNotFound, match="has no tag 'nope'"):
        t.restore("nope")
    with pytest.raises(TagNotFound, match="has no tag 'nope'"):
        t.delete_tag("nope")
    with pytest.raises(TagNotFound, match="has no tag 'nope'"):
        lamina.open_table(uri, version="nope", storage_options=opts)
    assert t.tags() == {"prod": 1} and _objects(t, TAGS_DIR) == {f"{TAGS_DIR}prod.json"}


@pytest.mark.parametrize("name", ["", ".hidden", "..", "a/b", "spa ce", "x" * 129, "é", "new\nline", 5, None])
def test_invalid_tag_names_are_refused_before_anything_is_written(local_table_uri, name):
    t = lamina.create_table(local_table_uri, SCHEMA)
    with pytest.raises(InvalidArgument, match=r"tag name .* is not valid: 1 to 128 characters"):
        t.create_tag(name)
    assert _objects(t, TAGS_DIR) == set()


def test_a_tag_of_a_table_dropped_here_before_is_ignored(tmp_path):
    other = lamina.create_table(str(tmp_path / "other"), SCHEMA)
    other.create_tag("t")
    t = lamina.create_table(str(tmp_path / "table"), SCHEMA)
    t.store.put(f"{TAGS_DIR}t.json", other.store.get(f"{TAGS_DIR}t.json"))  # as a drop racing a create_tag can leave
    assert t.tags() == {}
    with pytest.raises(TagNotFound, match=r"tag 't' at .* belongs to table [0-9a-f]{32}, not to this one"):
        t.checkout("t")
    with pytest.raises(TagNotFound, match="belongs to table"):
        lamina.open_table(t.uri, version="t")
    with pytest.raises(TagExists, match=r"tag 't' at .* belongs to table .*delete it with Table.delete_tag\('t'\) first"):
        t.create_tag("t")
    t.delete_tag("t")
    assert t.create_tag("t") == 1 and t.tags() == {"t": 1}


def test_drop_removes_tags(table_location):
    uri, opts = table_location
    t = lamina.create_table(uri, SCHEMA, storage_options=opts)
    t.append(rows(0, 10))
    t.create_tag("a")
    t.create_tag("b", version=1)
    lamina.drop_table(uri, storage_options=opts)
    assert _objects(t, TAGS_DIR) == set()
    with pytest.raises(TableNotFound):
        lamina.open_table(uri, version="a", storage_options=opts)
    again = lamina.create_table(uri, SCHEMA, storage_options=opts)
    assert again.tags() == {}


def test_a_tag_whose_version_cleanup_removes_while_it_is_created_is_not_created(local_table_uri):
    """The race with cleanup: the root is read, then removed before the tag's put; the tag is taken back."""
    t = lamina.create_table(local_table_uri, SCHEMA)
    t.append(rows(0, 10))
    t.append(rows(10, 10))
    racing = Table(
        HookedStore(t.store).on("put_if_absent", prefix=TAGS_DIR, before=lambda: t.store.delete([manifest_path(2)])),
        t.manifest,
    )
    with pytest.raises(VersionNotFound, match=r"version 2 of table .* was removed by a cleanup running while tag 'late'"):
        racing.create_tag("late", version=2)
    assert t.tags() == {} and _objects(t, TAGS_DIR) == set()


def test_restore_of_a_version_laid_out_in_segments_writes_nothing_but_its_root(local_table_uri, monkeypatch):
    """The old version's manifest segments are named again as they are; stable row ids come back with the rows."""
    monkeypatch.setenv("LAMINA_MANIFEST_INLINE_FRAGMENTS", "2")
    monkeypatch.setenv("LAMINA_MANIFEST_SEGMENT_FRAGMENTS", "4")
    monkeypatch.setenv("LAMINA_MANIFEST_INLINE_SEGMENTS", "2")
    t = lamina.create_table(local_table_uri, SCHEMA, stable_row_ids=True)
    for k in range(14):
        t.append(rows(10 * k, 10))
    t.delete("id IN (3, 14, 25, 36, 47, 58, 69, 70, 81, 92, 103, 114, 125, 136)")
    old = t.checkout(t.version)
    assert old.manifest.segments and old.manifest.segment_lists, "laid out in segments and segment lists"
    for k in range(14, 20):
        t.append(rows(10 * k, 10))
    t.overwrite(rows(900, 3))
    segments = _objects(t, "_segments/")
    hooked = HookedStore(t.store)
    restoring = Table(hooked, t.manifest)
    restoring.restore(old.version)
    assert [p for p in hooked.paths("put") if p != LATEST_HINT] == []
    assert hooked.paths("put_if_absent") == [manifest_path(restoring.version)]
    assert _objects(t, "_segments/") == segments
    latest = lamina.open_table(local_table_uri)
    assert latest.to_arrow(with_row_id=True).equals(old.to_arrow(with_row_id=True))
    assert latest.manifest.next_row_id == t.manifest.next_row_id > old.manifest.next_row_id
