"""A table dropped and created again at the same URI is a new table: nothing read from the old
one (cached manifests, open Table objects) is ever served as, or committed into, the new one."""

from __future__ import annotations

import pytest

import lamina
from lamina.errors import CommitConflict, TableReplaced
from tests.lamina.helpers import SCHEMA, delete_every_object, ids_of, rows


def test_recreated_table_is_never_read_through_the_old_tables_cache(table_location):
    uri, opts = table_location
    old = lamina.create_table(uri, SCHEMA, storage_options=opts)
    old.append(rows(0, 10))
    old.append(rows(10, 10))  # versions 1..3 of the old table are now cached in this process
    assert ids_of(lamina.open_table(uri, storage_options=opts)) == list(range(20))
    delete_every_object(uri, opts)
    new = lamina.create_table(uri, SCHEMA, storage_options=opts)
    new.append(rows(1000, 5))
    new.append(rows(2000, 5))  # the same version numbers as the old table's
    reopened = lamina.open_table(uri, storage_options=opts)
    assert reopened.version == 3
    assert ids_of(reopened) == list(range(1000, 1005)) + list(range(2000, 2005))
    assert ids_of(reopened.checkout(2)) == list(range(1000, 1005))
    assert ids_of(lamina.open_table(uri, version=2, storage_options=opts)) == list(range(1000, 1005))
    reopened.append(rows(3000, 1))  # a commit rebases onto the new table only
    assert ids_of(lamina.open_table(uri, storage_options=opts)) == list(range(1000, 1005)) + list(range(2000, 2005)) + [3000]


def test_open_view_of_a_dropped_table_cannot_commit_into_its_successor(table_location):
    uri, opts = table_location
    old = lamina.create_table(uri, SCHEMA, storage_options=opts)
    old.append(rows(0, 10))
    old.append(rows(10, 10))  # the old view sits at version 3
    delete_every_object(uri, opts)
    new = lamina.create_table(uri, SCHEMA, storage_options=opts)
    for start in (100, 200, 300):
        new.append(rows(start, 3))  # the new table reaches version 4
    with pytest.raises(CommitConflict, match="dropped and created again"):
        old.append(rows(50, 1))
    with pytest.raises(TableReplaced):
        old.reload()
    assert ids_of(lamina.open_table(uri, storage_options=opts)) == [100, 101, 102, 200, 201, 202, 300, 301, 302]


def test_open_view_of_a_dropped_table_cannot_extend_a_shorter_successor(local_table_uri):
    old = lamina.create_table(local_table_uri, SCHEMA)
    for start in (0, 10, 20):
        old.append(rows(start, 10))  # version 4
    delete_every_object(local_table_uri, None)
    new = lamina.create_table(local_table_uri, SCHEMA)
    new.append(rows(500, 2))  # version 2: the old view's next version (5) is free
    with pytest.raises(TableReplaced, match="dropped"):
        old.append(rows(40, 1))
    t = lamina.open_table(local_table_uri)
    assert t.version == 2 and ids_of(t) == [500, 501]


def test_pickled_view_reopens_only_its_own_table_in_another_process(local_table_uri, tmp_path):
    """A view shipped to a worker (Ray pickles it) after its table was replaced must not open the new table."""
    import pickle
    import subprocess
    import sys

    old = lamina.create_table(local_table_uri, SCHEMA)
    old.append(rows(0, 3))
    (tmp_path / "view.pickle").write_bytes(pickle.dumps(old))
    delete_every_object(local_table_uri, None)
    new = lamina.create_table(local_table_uri, SCHEMA)
    new.append(rows(7, 1))
    code = (
        "import pickle, sys\n"
        "from lamina.errors import TableReplaced\n"
        "try:\n"
        f"    pickle.loads(open({str(tmp_path / 'view.pickle')!r}, 'rb').read())\n"
        "except TableReplaced:\n"
        "    sys.exit(0)\n"
        "sys.exit(3)\n"
    )
    assert subprocess.run([sys.executable, "-c", code], cwd=str(__import__("pathlib").Path(__file__).parents[2])).returncode == 0


def test_open_view_of_a_dropped_table_cannot_commit_onto_a_successor_at_the_same_version(table_location):
    uri, opts = table_location
    old = lamina.create_table(uri, SCHEMA, storage_options=opts)
    old.append(rows(0, 10))  # the old view sits at version 2
    delete_every_object(uri, opts)
    new = lamina.create_table(uri, SCHEMA, storage_options=opts)
    new.append(rows(0, 10))  # the same operations: version 2 again, a manifest of the same shape
    with pytest.raises(TableReplaced):
        old.append(rows(10, 1))
    with pytest.raises(TableReplaced):
        old.reload()
    latest = lamina.open_table(uri, storage_options=opts)
    assert latest.version == 2 and ids_of(latest) == list(range(10))


def test_a_view_moves_only_to_newer_versions_of_its_own_table(local_table_uri, tmp_path):
    t = lamina.create_table(local_table_uri, SCHEMA)
    t.append(rows(0, 3))
    v1, v2 = t.checkout(1), t.checkout(2)
    v1._move_to(v2.manifest)
    assert v1.version == 2 and ids_of(v1) == [0, 1, 2]
    with pytest.raises(
        TableReplaced, match=rf"cannot move the view of {t.uri} .* at version 2\) to version 1 .*not a newer version"
    ):
        v1._move_to(t.checkout(1).manifest)
    other = lamina.create_table(str(tmp_path / "other"), SCHEMA)
    other.append(rows(10, 1))
    other.append(rows(20, 1))
    with pytest.raises(TableReplaced, match="not a newer version of the same table"):
        v1._move_to(other.manifest)
    assert v1.version == 2 and ids_of(v1) == [0, 1, 2], "a refused move changed the view"
