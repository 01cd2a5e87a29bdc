"""Hostile stored files read through Python (issue 13, item 3): manifests, WAL transaction indexes,
segments, seal markers and claims, and data files read with pyarrow always give ``CorruptFile``
naming the object (or, where the damage is harmless, a correct result), never another exception
and never a crash; manifests whose paths leave the table root are refused before anything they
name is read. Seeded loops (no Hypothesis); ``LAMINA_HOSTILE_CASES`` multiplies the cases
(default 1: a few seconds); ``LAMINA_FUZZ_SEED`` picks the seed. The native decoders' property
tests are ``cargo test hostile`` (native/src/hostile_tests.rs).
"""

from __future__ import annotations

import dataclasses
import json
import os
import random
import subprocess
import sys
import textwrap
from pathlib import Path

import pyarrow as pa
import pytest

import lamina
from lamina.errors import CorruptFile, LaminaError
from lamina.manifest import decode_manifest, encode_manifest, manifest_path
from tests.lamina.helpers import SCHEMA, put_next_version, rows

ROOT = Path(__file__).resolve().parents[2]
SCALE = max(1, int(os.environ.get("LAMINA_HOSTILE_CASES", "1")))
SEED = int(os.environ.get("LAMINA_FUZZ_SEED", "13"))


def _flip(data: bytes, rng: random.Random, flips: int) -> bytes:
    out = bytearray(data)
    for _ in range(flips):
        pos = rng.randrange(len(out))
        out[pos] ^= 1 << rng.randrange(8)
    return bytes(out)


def _huge(rng: random.Random):
    return rng.choice([2**31 - 1, 2**32 - 1, 2**63 - 1, 2**64, -1, -(2**63), 10**400, float("inf"), float("nan"), 1e308])


def _hostile_value(rng: random.Random, depth: int = 0):
    kind = rng.randrange(9)
    if kind == 0:
        return None
    if kind == 1:
        return _huge(rng)
    if kind == 2:
        return rng.choice(["", "x", "../../etc/passwd", "\x00", "💥" * 3, "data/x.parquet"])
    if kind == 3 and depth < 3:
        return [_hostile_value(rng, depth + 1) for _ in range(rng.randrange(3))]
    if kind == 4 and depth < 3:
        return {rng.choice(["path", "rows", "id", "x"]): _hostile_value(rng, depth + 1) for _ in range(rng.randrange(3))}
    if kind == 5:
        return rng.choice([True, False])
    if kind == 6:
        return rng.randrange(-5, 5)
    return rng.random()


def _paths(node, at=()):
    """Every (path, value) inside a JSON document."""
    yield at, node
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _paths(v, at + (k,))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _paths(v, at + (i,))


def _set(doc, at, value):
    if not at:
        return value
    node = doc
    for k in at[:-1]:
        node = node[k]
    node[at[-1]] = value
    return doc


def _seal(body: dict) -> bytes:
    """A manifest with a valid checksum over ``body`` (what a hostile writer can produce)."""
    import hashlib

    from lamina.manifest.codec import _canonical

    body = dict(body)
    body.pop("checksum", None)
    try:
        body["checksum"] = "sha256:" + hashlib.sha256(_canonical(body)).hexdigest()
        return json.dumps(body, sort_keys=True).encode()
    except (ValueError, TypeError):  # a value JSON cannot carry: keep it unsealed
        return json.dumps(body, sort_keys=True, default=str).encode()


@pytest.fixture
def table(local_table_uri):
    t = lamina.create_table(local_table_uri, SCHEMA)
    t.append(rows(0, 300), row_group_rows=100)
    t.delete("id < 20")
    t.create_index("id", "btree")
    return t


def _decode_or_corrupt(data: bytes, where: str, how: str) -> None:
    try:
        decode_manifest(data, where)
    except CorruptFile as e:
        assert where in str(e), (how, str(e))
    except LaminaError as e:  # only the format-version refusal is not CorruptFile
        assert "format version" in str(e), (how, repr(e))
    except BaseException as e:  # the point is that nothing else escapes
        pytest.fail(f"{how}: {type(e).__name__}: {e}")


def test_hostile_manifest_bytes_are_corrupt_file(table):
    valid = encode_manifest(table.manifest)
    where = "_versions/hostile.manifest"
    rng = random.Random(SEED)
    decode_manifest(valid, where)
    cases = [(f"truncated to {n}", valid[:n]) for n in range(0, len(valid), max(1, len(valid) // (60 * SCALE)))]
    cases += [(f"flips {i}", _flip(valid, rng, 1 + i % 4)) for i in range(150 * SCALE)]
    cases += [
        ("nested 100000 deep", b"[" * 100_000 + b"]" * 100_000),
        ("not utf-8", b"\xff\xfe" + valid),
        ("a number", b"1e999999"),
        ("huge int", b"9" * 100_000),
        ("empty", b""),
    ]
    for how, data in cases:
        _decode_or_corrupt(data, where, how)


def test_hostile_manifest_fields_with_valid_checksums_are_corrupt_file(table):
    """Every field replaced by a hostile value (wrong type, huge, negative, NaN, nested), resealed."""
    body = json.loads(encode_manifest(table.manifest))
    where = "_versions/hostile.manifest"
    slots = [at for at, _ in _paths(body) if at and at != ("checksum",)]
    rng = random.Random(SEED + 1)
    for i in range(400 * SCALE):
        doc = json.loads(json.dumps(body))
        changed = []
        for _ in range(1 + i % 3):
            at = rng.choice(slots)
            try:
                doc = _set(doc, at, _hostile_value(rng))
                changed.append(at)
            except (KeyError, IndexError, TypeError):
                pass  # an earlier change removed the slot
        _decode_or_corrupt(_seal(doc), where, f"case {i}: {changed}")


ESCAPES = [
    "s3://other-bucket/data/x.parquet",
    "s3://other-bucket/../data/x.parquet",
    "file:///etc/passwd",
    "/etc/passwd",
    "/data/x.parquet",
    "../other-table/data/x.parquet",
    "data/../../x.parquet",
    "data/../_versions/x",
    "data\\..\\..\\x.parquet",
    "..\\x",
    "data/%2e%2e/%2e%2e/x.parquet",
    "data/%2E%2E%2Fx.parquet",
    "%2e%2e/x",
    "data/x.parquet\x00.txt",
    "data/\nx.parquet",
    "data//x.parquet",
    "./data/x.parquet",
    "data/./x.parquet",
    "data/..",
    "",
    ".",
    "data/ x.parquet",
    "//other-bucket/data/x.parquet",
    "C:\\data\\x.parquet",
    "~/data/x.parquet",
]


@pytest.mark.parametrize("what", ["data", "deletion", "index"])
def test_manifests_pointing_outside_the_table_are_refused_before_any_read(table, what, monkeypatch):
    """Each hostile path, in a manifest with a valid checksum, is refused when the manifest is decoded,
    so no read of the object it names is ever attempted (the store's reads are watched)."""
    from lamina.store.local import LocalStore

    base = table.manifest
    uri = table.uri
    reads = []
    for method in ("get", "get_range", "open_input", "size", "exists", "point_sources", "staged_input"):
        real = getattr(LocalStore, method)

        def watch(self, path, *a, _real=real, **k):
            reads.append(path)
            return _real(self, path, *a, **k)

        monkeypatch.setattr(LocalStore, method, watch)
    for hostile in ESCAPES:
        if what == "data":
            frags = (dataclasses.replace(base.fragments[0], path=hostile),) + base.fragments[1:]
            changes = {"fragments": frags}
        elif what == "deletion":
            f = next(f for f in base.fragments if f.deletion is not None)
            frags = tuple(
                dataclasses.replace(x, deletion=dataclasses.replace(x.deletion, path=hostile)) if x is f else x
                for x in base.fragments
            )
            changes = {"fragments": frags}
        else:
            index = base.indices[0]
            segs = (dataclasses.replace(index.segments[0], path=hostile),) + index.segments[1:]
            changes = {"indices": (dataclasses.replace(index, segments=segs),) + base.indices[1:]}
        version = put_next_version(table, **changes)
        reads.clear()
        with pytest.raises(CorruptFile, match="outside the table root|is not under|path") as e:
            lamina.open_table(uri).to_arrow()
        assert manifest_path(version) in str(e.value) or "manifest" in str(e.value), (hostile, str(e.value))
        leaked = [p for p in reads if not p.startswith("_versions/") and p != "_versions/"]
        assert not leaked, f"{hostile!r}: read {leaked} before refusing the manifest"
        table.store.delete([manifest_path(version)])


# -- WAL ---------------------------------------------------------------------------------------------

WAL_SCHEMA = pa.schema([("k", pa.int64()), ("s", pa.string()), ("b", pa.binary())])


def _wal_read_all(store, shard: int, schema: pa.Schema) -> list:
    """What an applier does with a shard: read every segment, decode every committed transaction."""
    from lamina import wal

    out = []
    for segment in wal.list_segments(store, shard):
        wal.read_claim(store, shard, segment)
        txns, state = wal.read_segment(store, shard, segment, 0)
        for t in txns:
            batch, deletes = wal.decode_rows(t.data, schema, store.describe(f"{wal.segment_prefix(shard, segment)}{t.txn}"))
            out.append((batch.num_rows, int(deletes.sum())))
        out.append(state.torn)
    return out


def _check_wal(store, shard, how, names):
    try:
        _wal_read_all(store, shard, WAL_SCHEMA)
    except CorruptFile as e:
        assert any(n in str(e) for n in names), (how, str(e))
    except BaseException as e:
        pytest.fail(f"{how}: {type(e).__name__}: {e}")


def _write_wal(uri: str, shard: int = 0, transactions: int = 6) -> None:
    w = lamina.WalWriter(uri, shard) if hasattr(lamina, "WalWriter") else None
    if w is None:
        from lamina.wal import WalWriter

        w = WalWriter(uri, shard)
    for t in range(transactions):
        w.put_batch(
            pa.table(
                {
                    "k": list(range(t * 10, t * 10 + 10)),
                    "s": [f"v{i}" for i in range(10)],
                    "b": [bytes([i]) * i for i in range(10)],
                },
                schema=WAL_SCHEMA,
            )
        )
        if t % 2:
            w.delete(t)
        w.commit()
    w.close()


def test_hostile_wal_segments_and_transaction_indexes_are_torn_or_corrupt_file(local_table_uri):
    """Each file of a local WAL segment (rows, transaction index, seal marker, claim) truncated, flipped,
    or with huge values where the index keeps offsets, lengths and counts; read as an applier does."""
    from lamina import wal

    t = lamina.create_table(local_table_uri, WAL_SCHEMA, primary_key=["k"])
    _write_wal(local_table_uri)
    store = t.store
    prefix = wal.segment_prefix(0, wal.list_segments(store, 0)[0])
    files = {
        name: store.get(prefix + name)
        for name in (wal.DATA_FILE, wal.INDEX_FILE, wal.SEALED, wal.CLAIM)
        if store.exists(prefix + name)
    }
    assert wal.INDEX_FILE in files and wal.DATA_FILE in files, files.keys()
    rng = random.Random(SEED + 2)
    for i in range(120 * SCALE):
        name = rng.choice(sorted(files))
        valid = files[name]
        choice = rng.randrange(3)
        if choice == 0:
            data, how = valid[: rng.randrange(len(valid) + 1)], "truncated"
        elif choice == 1:
            data, how = _flip(valid, rng, 1 + rng.randrange(4)), "flipped"
        else:
            data = bytearray(valid)
            if name == wal.INDEX_FILE:  # entries of (start u64, end u64, rows u32, crc u32, txn u64)
                entry = rng.randrange(len(valid) // 32)
                field, width = rng.choice([(0, 8), (8, 8), (16, 4), (20, 4), (24, 8)])
                value = rng.choice([2**64 - 1, 2**63 - 1, 2**32 - 1, 2**31 - 1]) % (1 << (8 * width))
                data[entry * 32 + field : entry * 32 + field + width] = value.to_bytes(width, "little")
            elif name == wal.DATA_FILE:  # u32 lengths and i32 headers of the rows
                at = rng.randrange(max(1, len(valid) - 4))
                data[at : at + 4] = rng.choice([2**32 - 1, 2**31 - 1, 2**31]).to_bytes(4, "little")
            else:
                data = json.dumps(
                    {"transactions": _hostile_value(rng), "schema": _hostile_value(rng), "primary_key": _hostile_value(rng)}
                ).encode()
            data, how = bytes(data), "huge value"
        if name in (wal.DATA_FILE, wal.INDEX_FILE):
            _replace_local(store, prefix + name, data)
        else:
            store.put(prefix + name, data)
        _check_wal(store, 0, f"case {i}: {name} {how}", [prefix + name, prefix])
        _replace_local(store, prefix + name, valid)
    assert _wal_read_all(store, 0, WAL_SCHEMA)[-1] is None, "the restored segment reads whole"


def _replace_local(store, path: str, data: bytes) -> None:
    store.delete([path])
    store.put(path, data)


def test_hostile_wal_transaction_objects_are_torn_or_corrupt_file(s3_table_uri, lamina_s3):
    """The object-store layout: one object per transaction ending in its index entry."""
    from lamina import wal

    t = lamina.create_table(s3_table_uri, WAL_SCHEMA, primary_key=["k"], storage_options=lamina_s3.storage_options)
    w = wal.WalWriter(s3_table_uri, 0, storage_options=lamina_s3.storage_options)
    for n in range(4):
        w.put_batch(
            pa.table({"k": [n * 3, n * 3 + 1, n * 3 + 2], "s": ["a", None, "c"], "b": [b"", b"x", None]}, schema=WAL_SCHEMA)
        )
        w.commit()
    w.close()
    store = t.store
    prefix = wal.segment_prefix(0, wal.list_segments(store, 0)[0])
    objects = sorted(o.path for o in store.list(prefix) if o.path.endswith(".t"))
    assert len(objects) == 4
    rng = random.Random(SEED + 3)
    for i in range(40 * SCALE):
        name = rng.choice(objects)
        valid = store.get(name)
        data = valid[: rng.randrange(len(valid) + 1)] if i % 2 else _flip(valid, rng, 1 + rng.randrange(3))
        store.put(name, data)
        _check_wal(store, 0, f"case {i}: {name}", [name, prefix])
        store.put(name, valid)
    for stray in ("abc.t", "sub/0000000000.t", "0000000009x.t"):
        store.put(prefix + stray, b"stray")
        _check_wal(store, 0, f"stray {stray}", [prefix + stray, prefix])
        store.delete([prefix + stray])


# -- data files read with pyarrow, in a subprocess (an abort fails the test, not pytest) ---------------

_READ_FRAGMENTS = textwrap.dedent("""
    import dataclasses, json, random, sys, traceback
    import pyarrow as pa
    import lamina
    from lamina.datafile import read_fragment
    from lamina.errors import CorruptFile
    from lamina.filter import parse_filter

    uri, seed, cases = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    t = lamina.open_table(uri)
    frag = t.manifest.fragments[0]
    valid = t.store.get(frag.path)
    expected = read_fragment(t.store, frag, t.schema).sort_by("id")
    rng = random.Random(seed)
    reads = [dict(columns=None), dict(columns=["id", "category"]), dict(columns=["meta"]),
             dict(columns=["id"], flt=parse_filter("id > 250", t.schema)),
             dict(columns=None, flt=parse_filter("category = 'b' OR score < 0.5", t.schema))]
    bad = []
    for i in range(cases):
        kind = rng.randrange(3)
        if kind == 0:
            data = valid[:rng.randrange(len(valid))]
        else:
            data = bytearray(valid)
            for _ in range(1 + rng.randrange(4)):
                pos = len(data) - 1 - rng.randrange(min(len(data), 4000)) if rng.random() < 0.6 else rng.randrange(len(data))
                data[pos] ^= 1 << rng.randrange(8)
            if kind == 2:  # the footer length: huge
                data[-8:-4] = rng.choice([2**32 - 1, 2**31 - 1, len(data)]).to_bytes(4, "little")
            data = bytes(data)
        path = f"data/hostile-{i}.parquet"
        t.store.put(path, data)
        # No checksum: what the decoder does below it (point reads and partial reads are not checked).
        hostile = dataclasses.replace(frag, path=path, file_bytes=len(data), checksum=None)
        args = rng.choice(reads)
        print(json.dumps({"case": i, "kind": kind, "read": str(args)}), flush=True)
        try:
            got = read_fragment(t.store, hostile, t.schema, **args)
            if kind == 0:
                bad.append(f"case {i}: a truncated file read back {got.num_rows} rows")
        except CorruptFile as e:
            if path not in str(e):
                bad.append(f"case {i}: CorruptFile not naming {path}: {e}")
        except BaseException as e:
            bad.append(f"case {i} ({args}): {type(e).__name__}: {e}")
        t.store.delete([path])
    print(json.dumps({"done": cases, "bad": bad}), flush=True)
""")


def test_hostile_data_files_read_with_pyarrow_are_corrupt_file_in_a_subprocess(local_table_uri):
    t = lamina.create_table(local_table_uri, SCHEMA)
    t.append(rows(0, 300), row_group_rows=100)
    t.delete("id < 5")
    cases = 150 * SCALE
    proc = subprocess.run(
        [sys.executable, "-c", _READ_FRAGMENTS, local_table_uri, str(SEED), str(cases)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    lines = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    assert proc.returncode == 0 and lines and "done" in lines[-1], (
        f"the reader died (exit {proc.returncode}) at {lines[-1] if lines else 'start'}:\n{proc.stderr[-3000:]}"
    )
    assert lines[-1]["done"] == cases and not lines[-1]["bad"], "\n".join(lines[-1]["bad"][:20])


# -- point reads of a data file whose footer lies about a row group's rows, in a subprocess ------------

CORPUS = ROOT / "native" / "corpus"

_TAKE_DAMAGED = textwrap.dedent("""
    import json, sys
    import numpy as np
    import pyarrow as pa
    import lamina
    from lamina import _native
    from lamina.errors import CorruptFile

    uri, damaged = sys.argv[1], open(sys.argv[2], "rb").read()
    t = lamina.create_table(uri, pa.schema([("id", pa.int64()), ("s", pa.string())]), row_group_rows=1000)
    t.append(pa.table({"id": pa.array(range(5000), pa.int64()), "s": [f"v{i % 97}" for i in range(5000)]}))
    frag = t.manifest.fragments[0]
    path = t.store.local_path(frag.path)
    assert frag.file_bytes == len(damaged), (frag.file_bytes, len(damaged))
    with open(path, "wb") as f:
        f.write(damaged)
    offsets = np.asarray([0, 17, 2500, 4999], dtype="<u4").tobytes()
    reads = {
        "to_arrow": lambda: lamina.open_table(uri).to_arrow(),
        "take by path": lambda: lamina.open_table(uri).take([0, 17, 2500, 4999]),
        "take_rows_many from bytes": lambda: _native.take_rows_many(
            [("s3://bucket/t/" + frag.path, None, damaged, len(damaged), 4)], offsets, ["id", "s"], 1),
    }
    for name, read in reads.items():
        print(json.dumps({"read": name}), flush=True)
        try:
            read()
            out = "read back"
        except CorruptFile as e:
            out = "CorruptFile naming the file" if frag.path.split("/")[-1] in str(e) else f"CorruptFile: {e}"
        except BaseException as e:
            out = f"{type(e).__name__}: {e}"
        print(json.dumps({"read": name, "outcome": out}), flush=True)
""")


def test_take_of_a_file_whose_footer_lies_about_a_row_groups_rows_is_corrupt_file(tmp_path):
    """Five bytes changed near the footer give row group 1 billions of rows over 1,000 values: every
    read, by path and from the object's bytes, is CorruptFile naming the file (point reads decoded the
    whole chunk in one batch of that many rows and the process aborted on the allocation)."""
    damaged = CORPUS / "row-group-rows-past-its-values.parquet"
    proc = subprocess.run(
        [sys.executable, "-c", _TAKE_DAMAGED, str(tmp_path / "t"), str(damaged)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    lines = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    outcomes = {line["read"]: line["outcome"] for line in lines if "outcome" in line}
    assert proc.returncode == 0, (
        f"the reader died (exit {proc.returncode}) at {lines[-1] if lines else 'start'}:\n{proc.stderr[-2000:]}"
    )
    assert outcomes == dict.fromkeys(["to_arrow", "take by path", "take_rows_many from bytes"], "CorruptFile naming the file")
