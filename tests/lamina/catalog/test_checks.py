"""What the catalog checks before it writes: names (exact, bounded), table locations (never the catalog's
own nor overlapping another table's), and a create whose catalog commit has an unknown outcome (resolved
by reading the catalog back before any file is removed)."""

from __future__ import annotations

import os
import threading
import time

import pyarrow as pa
import pytest

import lamina
import lamina.catalog
import lamina.table
from lamina.catalog import CATALOG_DIR, MAX_DEPTH, MAX_LEVEL_CHARS, MAX_NAME_CHARS
from lamina.errors import CommitStateUnknown, InvalidArgument, LaminaError, TableNotFound
from lamina.store import open_store
from tests.lamina.helpers import catalog_queue_files, hold_catalog_turn

SCHEMA_T = pa.schema([("id", pa.int64()), ("name", pa.string())])


# -- names ---------------------------------------------------------------------------------------

BAD_NAMES = [
    "u.t\n",
    "sales\n",
    "\nsales",
    "a\tb",
    "a\x00",
    "a\x7f",
    "a\rb",
    "a b",
    "a/b",
    "a\\b",
    "..",
    ".",
    "a..b",
    ".a",
    "a.",
    "",
    "_hidden",
    "-dash",
    "é",
    "x" * (MAX_LEVEL_CHARS + 1),
    ".".join(["n"] * (MAX_DEPTH + 1)),
]

CALLS = {
    "create_namespace": lambda c, n: c.create_namespace(n),
    "create_table": lambda c, n: c.create_table(n, SCHEMA_T),
    "register_table": lambda c, n: c.register_table(n, c.describe_table("u.t").location),
    "rename_table_from": lambda c, n: c.rename_table(n, "u.other"),
    "rename_table_to": lambda c, n: c.rename_table("u.t", n),
    "drop_table": lambda c, n: c.drop_table(n),
    "drop_namespace": lambda c, n: c.drop_namespace(n),
    "describe_table": lambda c, n: c.describe_table(n),
    "describe_namespace": lambda c, n: c.describe_namespace(n),
    "open_table": lambda c, n: c.open_table(n),
    "list_tables": lambda c, n: c.list_tables(n),
    "list_namespaces": lambda c, n: c.list_namespaces(n),
}


@pytest.fixture
def local_catalog(local_table_uri):
    cat = lamina.connect(local_table_uri)
    cat.create_namespace("u")
    cat.create_table("u.t", SCHEMA_T)
    return cat


@pytest.mark.parametrize("call", list(CALLS))
def test_every_call_refuses_every_malformed_name_and_changes_nothing(local_catalog, call):
    cat = local_catalog
    before = cat.table.version
    for bad in BAD_NAMES:
        with pytest.raises(InvalidArgument) as e:
            CALLS[call](cat, bad)
        assert repr(bad) in str(e.value), f"{call}({bad!r}): the message names the name: {e.value}"
    assert cat.table.version == before, "a refused call commits nothing"
    assert cat.list_namespaces() == ["u"] and cat.list_tables("u") == ["u.t"]
    assert sorted(os.listdir(os.path.join(cat.root, "u"))) == [os.path.basename(cat.describe_table("u.t").location)]


def test_names_at_the_limits_are_accepted_and_the_limits_are_stated(local_table_uri):
    cat = lamina.connect(local_table_uri)
    deepest = ".".join(f"{i}" + "x" * (MAX_LEVEL_CHARS - 1) for i in range(MAX_DEPTH))
    assert len(deepest) == MAX_NAME_CHARS == MAX_DEPTH * MAX_LEVEL_CHARS + MAX_DEPTH - 1
    levels = deepest.split(".")
    for i in range(1, MAX_DEPTH):
        cat.create_namespace(".".join(levels[:i]))
    t = cat.create_table(deepest, SCHEMA_T)
    assert cat.describe_table(deepest).location == t.uri
    with pytest.raises(InvalidArgument, match=rf"at most {MAX_DEPTH} levels of 1-{MAX_LEVEL_CHARS} characters"):
        cat.create_namespace(levels[0] + "." + "y" * (MAX_LEVEL_CHARS + 1))
    with pytest.raises(InvalidArgument, match="control character"):
        cat.create_namespace("sales\n")


def test_the_format_states_the_name_limits():
    spec = open(os.path.join(os.path.dirname(__file__), "..", "..", "..", "docs", "FORMAT.md")).read()
    section = spec[spec.index("## 12. Catalog") : spec.index("## 13.")]
    assert f"at most {MAX_NAME_CHARS} characters" in section


# -- locations -----------------------------------------------------------------------------------


def _table_at(uri, opts=None):
    t = lamina.create_table(uri, SCHEMA_T, storage_options=opts)
    t.append(pa.table({"id": [1], "name": ["x"]}))
    return t.uri


def _objects(root, opts=None):
    return sorted(o.path for o in open_store(root, opts).list(""))


@pytest.mark.parametrize(
    "spelling",
    [
        "{root}/_catalog",
        "{root}/_catalog/",
        "{root}//_catalog",
        "{root}/_catalog/.",
        "{root}/u/../_catalog",
        "file://{root}/_catalog",
        "{root}",
        "{root}/",
        "{root}/..",
    ],
)
def test_the_catalogs_own_location_or_one_holding_it_cannot_be_registered(local_table_uri, spelling):
    cat = lamina.connect(local_table_uri)
    cat.create_namespace("p")
    cat.create_namespace("u")
    location = spelling.format(root=cat.root)
    if CATALOG_DIR not in spelling:
        _table_at(location)  # a table holding the catalog root
    before, objects = cat.table.version, _objects(cat.root)
    with pytest.raises(InvalidArgument, match="catalog") as e:
        cat.register_table("p.x", location)
    assert f"{cat.root}/{CATALOG_DIR}" in str(e.value), "names the catalog's location"
    assert cat.table.version == before and _objects(cat.root) == objects
    with pytest.raises(TableNotFound):
        cat.drop_table("p.x", purge=True)
    assert cat.list_namespaces() == ["p", "u"], "the catalog keeps every entry"


def test_s3_the_catalogs_own_prefix_cannot_be_registered_however_spelled(lamina_s3):
    root, opts = lamina_s3.uri("warehouse/cat"), lamina_s3.storage_options
    cat = lamina.connect(root, storage_options=opts)
    cat.create_namespace("p")
    for location in (f"{root}/_catalog", f"{root}/_catalog/", root + "/"):
        with pytest.raises(InvalidArgument, match="catalog"):
            cat.register_table("p.x", location)
    ext = _table_at(lamina_s3.uri("elsewhere/ext"), opts)
    cat.register_table("p.ext", ext + "/")
    for location in (ext, ext + "/", lamina_s3.uri("elsewhere")):
        with pytest.raises(InvalidArgument, match="p.ext"):
            cat.register_table("p.again", location)
    assert cat.list_tables("p") == ["p.ext"] and cat.list_namespaces() == ["p"]


def test_a_location_that_is_holds_or_lies_in_another_tables_is_refused(tmp_path):
    root = str(tmp_path / "root")
    cat = lamina.connect(root)
    cat.create_namespace("u")
    created = cat.create_table("u.t", SCHEMA_T).uri
    ext = _table_at(str(tmp_path / "outer" / "ext"))
    cat.register_table("u.ext", ext)
    refused = {
        "the same registered location": ext + "/",
        "inside a registered table": _table_at(ext + "/inner"),
        "holding a registered table": _table_at(str(tmp_path / "outer")),
        "a created table's location": created,
        "inside a created table": _table_at(created + "/inner"),
        "holding a created table": _table_at(os.path.dirname(created)),  # the namespace directory
        "a link to a created table": str(tmp_path / "link"),
    }
    os.symlink(created, refused["a link to a created table"])
    before = cat.table.version
    for why, location in refused.items():
        with pytest.raises(InvalidArgument) as e:
            cat.register_table("u.bad", location)
        assert "u.bad" in str(e.value) and ("u.ext" in str(e.value) or "u.t" in str(e.value)), why
    assert cat.table.version == before and cat.list_tables("u") == ["u.ext", "u.t"]
    beside = _table_at(str(tmp_path / "outer" / "ext-beside"))  # a sibling sharing a name prefix is not inside
    cat.register_table("u.beside", beside)
    assert cat.describe_table("u.beside").location == beside


def test_a_created_table_cannot_land_inside_a_registered_one(tmp_path):
    root = str(tmp_path / "root")
    cat = lamina.connect(root)
    cat.create_namespace("p")
    registered = _table_at(os.path.join(root, "a"))  # where namespace "a"'s tables would be created
    cat.register_table("p.x", registered)
    cat.create_namespace("a")
    objects = _objects(registered)
    with pytest.raises(InvalidArgument, match="p.x"):
        cat.create_table("a.t", SCHEMA_T)
    assert _objects(registered) == objects, "nothing was written under the registered table"
    assert cat.list_tables("a") == []
    cat.drop_table("p.x")
    assert cat.create_table("a.t", SCHEMA_T).uri.startswith(registered + "/")


def test_a_rename_keeps_the_location_so_the_checks_still_hold(tmp_path):
    cat = lamina.connect(str(tmp_path / "root"))
    cat.create_namespace("u")
    cat.create_namespace("v")
    t = cat.create_table("u.t", SCHEMA_T)
    ext = _table_at(str(tmp_path / "ext"))
    cat.register_table("u.ext", ext)
    cat.rename_table("u.t", "v.t")
    cat.rename_table("u.ext", "v.ext")
    assert cat.describe_table("v.t").location == t.uri and cat.describe_table("v.ext").location == ext
    for location in (t.uri, _table_at(t.uri + "/inner"), ext, _table_at(ext + "/inner")):
        with pytest.raises(InvalidArgument, match=r"v\.(t|ext)"):
            cat.register_table("u.bad", location)


def test_a_registration_racing_past_the_first_check_is_refused_by_the_rewrite(tmp_path, monkeypatch):
    """The check before any write reads a version that may be stale; the rewrite checks again on the latest."""
    cat = lamina.connect(str(tmp_path / "root"))
    cat.create_namespace("u")
    ext = _table_at(str(tmp_path / "ext"))
    cat.register_table("u.first", ext)
    before = cat.table.version
    monkeypatch.setattr(lamina.catalog.Catalog, "_check_location_before", lambda *args: None, raising=False)
    with pytest.raises(InvalidArgument, match="u.first"):
        cat.register_table("u.second", ext)
    with pytest.raises(InvalidArgument, match="catalog"):
        cat.register_table("u.second", os.path.join(cat.root, CATALOG_DIR))
    assert cat.table.version == before and cat.list_tables("u") == ["u.first"]


# -- a create whose catalog commit has an unknown outcome ----------------------------------------


@pytest.fixture
def s3_catalogs(proxy, lamina_s3):
    """(direct handle, handle through the proxy making one attempt per request, the proxied version regex)."""
    root, opts = lamina_s3.uri("warehouse/cat"), lamina_s3.storage_options
    direct = lamina.connect(root, storage_options=opts)
    direct.create_namespace("u")
    proxied = lamina.connect(root, storage_options={**opts, "endpoint_url": proxy.url, "max_attempts": "1"})
    version = rf"/{CATALOG_DIR}/_versions/0*{proxied.table.version + 1}\.manifest$"
    return direct, proxied, version


def _unreadable_after_the_put(proxy, version, times=1):
    """The GETs of the catalog version being committed fail ``times`` times, once it was put: the commit's
    catch-up reads it first (absent, answered as moto would), the put's read-back comes after."""
    proxy.answer("GET", version, 404, "NoSuchKey")
    return proxy.answer("GET", version, 500, "InternalError", times=times)


def _table_dirs(direct):
    return sorted({o.path.split("/")[1] for o in open_store(direct.root, direct.storage_options).list("u/")})


def test_create_whose_commit_landed_unanswered_returns_the_table(proxy, s3_catalogs):
    direct, cat, version = s3_catalogs
    lost = proxy.drop_response("PUT", version)  # lands, the answer is lost
    unread = _unreadable_after_the_put(proxy, version)  # and the commit's read-back fails
    t = cat.create_table("u.t", SCHEMA_T)
    assert lost.hits == 1 and unread.hits == 1
    assert direct.describe_table("u.t").location == t.uri
    assert direct.open_table("u.t").count_rows() == 0
    t.append(pa.table({"id": [1], "name": ["x"]}))
    assert direct.open_table("u.t").count_rows() == 1


def test_create_whose_commit_never_landed_removes_its_files_and_says_so(proxy, s3_catalogs):
    direct, cat, version = s3_catalogs
    proxy.answer("PUT", version, 500, "InternalError")  # not forwarded: nothing lands
    _unreadable_after_the_put(proxy, version)
    with pytest.raises(LaminaError, match=r"'u\.t'.*nothing was committed") as e:
        cat.create_table("u.t", SCHEMA_T)
    assert not isinstance(e.value, CommitStateUnknown), "read back, the outcome is known"
    assert direct.list_tables("u") == [] and _table_dirs(direct) == [], "no entry, and no files left behind"
    assert cat.create_table("u.t", SCHEMA_T).count_rows() == 0, "a retry succeeds"


def test_create_whose_outcome_cannot_be_read_back_keeps_the_files_and_says_what_to_do(proxy, s3_catalogs):
    direct, cat, version = s3_catalogs
    proxy.drop_response("PUT", version)
    unread = _unreadable_after_the_put(proxy, version, times=10_000)
    with pytest.raises(CommitStateUnknown) as e:
        cat.create_table("u.t", SCHEMA_T)
    unread.times = unread.hits  # reads work again
    [location] = [direct.describe_table("u.t").location]
    message = str(e.value)
    assert "'u.t'" in message and location in message and "describe_table" in message and "drop_table" in message
    assert direct.open_table("u.t").count_rows() == 0, "the entry names files that are still there"


def test_a_queued_create_whose_commit_outcome_is_unknown_is_withdrawn_not_applied_later(local_table_uri, monkeypatch):
    """Locally a create waits in the queue for its writer's turn; its rewrite claims it, and a claim whose commit
    has an unknown outcome would be applied by the next writer. The create settles it first: nothing is applied
    after its files are removed."""
    cat = lamina.connect(local_table_uri)
    cat.create_namespace("u")
    real = lamina.table.commit  # every table's commits, the catalog's rewrites among them (Table.commit_transaction)
    unknown = []

    def unknown_once(store, txn, base, **kwargs):
        if unknown or CATALOG_DIR not in store.uri:
            return real(store, txn, base, **kwargs)
        unknown.append(txn.uuid)  # nothing lands, and the read-back fails
        raise CommitStateUnknown(
            f"overwrite on table {store.uri}: writing version {base.version + 1} failed and it cannot be read back"
        )

    monkeypatch.setattr(lamina.table, "commit", unknown_once)
    outcome = {}

    def create():
        try:
            outcome["table"] = lamina.connect(local_table_uri).create_table("u.t", SCHEMA_T)
        except Exception as e:  # asserted below
            outcome["error"] = e

    fd = hold_catalog_turn(cat)  # another writer at work: the create queues its request
    writer = threading.Thread(target=create)
    try:
        writer.start()
        deadline = time.monotonic() + 60
        while not any(n.endswith(".req") for n in catalog_queue_files(cat)) and time.monotonic() < deadline:
            time.sleep(0.005)
        assert any(n.endswith(".req") for n in catalog_queue_files(cat)), "the create queued its request"
    finally:
        os.close(fd)
    writer.join(120)
    assert len(unknown) == 1, "the create's own rewrite claimed its request and met the unknown outcome"
    cat.create_namespace("later")  # the next writer with the turn settles whatever was left
    assert cat.list_tables("u") == [], "a create whose files were removed was applied after all"
    assert catalog_queue_files(cat) == [] and _objects(os.path.join(cat.root, "u")) == [], "no files left behind"
    assert "error" in outcome and not isinstance(outcome["error"], CommitStateUnknown), outcome
    assert "nothing was committed" in str(outcome["error"])
