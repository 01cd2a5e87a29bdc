"""The one byte-bounded LRU every cache uses."""

from __future__ import annotations

import threading

import pytest

from lamina.cache import ByteLRU, cache, caches, clear_caches
from lamina.errors import InvalidConfig


def test_evicts_least_recently_used_past_the_budget():
    c = ByteLRU("t", 100)
    c.put("a", "A", 40)
    c.put("b", "B", 40)
    assert c.get("a") == "A"  # a is now the most recent
    c.put("c", "C", 40)
    assert c.get("b") is None and c.get("a") == "A" and c.get("c") == "C"
    assert c.bytes == 80 and len(c) == 2


def test_a_value_larger_than_the_budget_is_not_kept():
    c = ByteLRU("t", 10)
    c.put("big", "x", 11)
    assert c.get("big") is None and c.bytes == 0


def test_replacing_a_key_counts_its_bytes_once():
    c = ByteLRU("t", 100)
    c.put("a", 1, 60)
    c.put("a", 2, 30)
    assert c.get("a") == 2 and c.bytes == 30


def test_get_or_load_loads_once_and_discard_drops_matching_keys():
    c = ByteLRU("t", 100)
    calls = []
    assert c.get_or_load(("u", 1), lambda: calls.append(1) or "v1", len) == "v1"
    assert c.get_or_load(("u", 1), lambda: calls.append(1) or "other", len) == "v1"
    assert calls == [1]
    c.put(("u", 2), "v2", 2)
    c.put(("w", 1), "w1", 2)
    c.discard(lambda k: k[0] == "u")
    assert c.get(("u", 1)) is None and c.get(("u", 2)) is None and c.get(("w", 1)) == "w1"
    assert c.bytes == 2


def test_concurrent_puts_keep_the_byte_count_exact():
    c = ByteLRU("t", 1000)

    def work(base):
        for i in range(2000):
            c.put((base, i % 50), i, 7)
            c.get((base, (i * 7) % 50))

    threads = [threading.Thread(target=work, args=(b,)) for b in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert c.bytes == 7 * len(c) <= 1000


def test_named_caches_take_their_budget_from_the_environment(monkeypatch):
    monkeypatch.setenv("LAMINA_TEST_CACHE_BYTES", "12345")
    c = cache("test-env-budget", "LAMINA_TEST_CACHE_BYTES", 1)
    assert c.budget == 12345 and caches()["test-env-budget"] is c
    assert cache("test-env-budget", "LAMINA_TEST_CACHE_BYTES", 1) is c, "one cache per name and process"
    c.put("k", "v", 1)
    clear_caches()
    assert c.get("k") is None
    monkeypatch.setenv("LAMINA_TEST_BAD_CACHE_BYTES", "lots")
    with pytest.raises(InvalidConfig, match="LAMINA_TEST_BAD_CACHE_BYTES"):
        cache("test-bad-budget", "LAMINA_TEST_BAD_CACHE_BYTES", 1)


def test_every_cache_of_the_library_is_a_named_byte_lru():
    import lamina.deletion
    import lamina.index.segments
    import lamina.manifest.versions

    registry = caches()
    assert registry["manifest"] is lamina.manifest.versions._CACHE
    assert registry["deletion"] is lamina.deletion._CACHE
    assert registry["index"] is lamina.index.segments.CACHE
    assert [c.budget for c in (registry["manifest"], registry["deletion"], registry["index"])] == [64 << 20, 64 << 20, 256 << 20]


def test_reading_a_table_fills_the_caches_within_their_budgets(local_table_uri):
    import lamina
    from tests.lamina.helpers import SCHEMA, rows

    t = lamina.create_table(local_table_uri, SCHEMA)
    t.append(rows(0, 100))
    t.delete("id < 10")
    clear_caches()
    t.checkout(t.version).to_arrow()
    lamina.open_table(local_table_uri).checkout(2).to_arrow()
    registry = caches()
    assert len(registry["manifest"]) >= 1 and len(registry["deletion"]) == 1
    assert all(c.bytes <= c.budget for c in registry.values())


def test_every_cache_budget_is_documented():
    """Memory is bounded by configuration: every cache's budget variable, Python's (``cache(name, env, ...)``) and the
    native reader's (``budget("LAMINA_...")``), is named in docs/OPERATIONS.md and the README."""
    import re
    from pathlib import Path

    repo = Path(__file__).resolve().parents[2]
    found = set()
    for path in (repo / "lamina").rglob("*.py"):
        found |= set(re.findall(r'cache\(\s*"[^"]+",\s*"(LAMINA_\w+)"', path.read_text()))
    for path in (repo / "native" / "src").rglob("*.rs"):
        found |= set(re.findall(r'budget\(\s*"(LAMINA_\w+)"', path.read_text()))
    assert {"LAMINA_CATALOG_CACHE_BYTES", "LAMINA_CHUNK_CACHE_BYTES", "LAMINA_MANIFEST_CACHE_BYTES"} <= found, found
    for doc in ("docs/OPERATIONS.md", "README.md"):
        text = (repo / doc).read_text()
        assert not [v for v in sorted(found) if v not in text], f"{doc} does not name every cache budget"
