"""The bytes of a manifest's objects: the root (JSON with the sha256 of its canonical body), segments
and segment lists (checked against the CRC32C their entry records), and the fragments, entries and
index entries in them, each validated as it is read so a truncated, altered or hostile object is
refused with ``CorruptFile`` instead of half-read (docs/FORMAT.md §2)."""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import json
import re
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from lamina import checksum, evolution
from lamina.errors import CorruptFile, LaminaError
from lamina.manifest.model import ClusterRange, DeletionFile, Fragment, IndexEntry, IndexSegment, Manifest, RowGroup
from lamina.manifest.paths import DATA_DIR, DELETIONS_DIR, INDICES_DIR, SEGMENTS_DIR, stored_path
from lamina.manifest.segments import FragmentList, ManifestSegment, check_fragments
from lamina.zones import ZoneText, zones_field, zones_from_json, zones_to_json

if TYPE_CHECKING:
    from lamina.manifest.versions import SegmentReader

FORMAT = "lamina.manifest"
FORMAT_VERSION = 2
#: The format version of a table whose schema changed (field ids, earlier schemas: docs/FORMAT.md
#: §2.4): a reader that does not know them must not read its files by name.
EVOLVED_FORMAT_VERSION = 3
#: Manifest format versions this Lamina reads (1: every fragment in the root; 2: segments; 3: evolved schemas).
READABLE_FORMAT_VERSIONS = (1, 2, 3)
SEGMENT_FORMAT = "lamina.manifest_segment"
SEGMENT_LIST_FORMAT = "lamina.manifest_segment_list"
#: Files are checksummed with CRC32C (docs/FORMAT.md, "Checksums").
CHECKSUM_PREFIX = "crc32c:"


def _schema_to_json(schema: pa.Schema) -> dict[str, Any]:
    return {
        "ipc": base64.b64encode(schema.serialize().to_pybytes()).decode("ascii"),
        "fields": [f"{f.name}: {f.type}{'' if f.nullable else ' not null'}" for f in schema],
    }


def fragment_to_json(f: Fragment) -> dict[str, Any]:
    return {
        "id": f.id,
        "path": f.path,
        "rows": f.rows,
        "file_bytes": f.file_bytes,
        "file_version": f.file_version,
        "row_groups": [[g.rows, g.bytes] for g in f.row_groups],
        "deletion": None
        if f.deletion is None
        else {"path": f.deletion.path, "deleted_rows": f.deletion.deleted_rows, "checksum": f.deletion.checksum},
        "row_ids": None if f.row_ids is None else [list(r) for r in f.row_ids],
        "checksum": f.checksum,
        **zones_field(f),
        **({} if f.cluster is None else {"cluster": [f.cluster.key, f.cluster.run, f.cluster.lo, f.cluster.hi]}),
        **({"schema_id": f.schema_id} if f.schema_id else {}),
    }


def entry_json(seg: ManifestSegment) -> dict[str, Any]:
    return {
        "path": seg.path,
        "count": seg.count,
        "bytes": seg.bytes,
        "checksum": seg.checksum,
        "rows": seg.rows,
        **({} if seg.ids is None else {"ids": list(seg.ids)}),
        **({} if seg.zones is None else {"zones": zones_to_json(seg.zones)}),
    }


def _evolved(m: Manifest) -> dict[str, Any]:
    """The root's fields of a table whose schema changed (none for one whose never did)."""
    if not m.schema_id and not m.schemas and m.next_field_id is None:
        return {}
    return {
        "schema_id": m.schema_id,
        "schemas": [{"id": k, **_schema_to_json(s)} for k, s in sorted(m.schemas.items())],
        "next_field_id": m.next_field_id,
    }


def _body(m: Manifest, inline_segments: tuple[ManifestSegment, ...], inline: tuple[Fragment, ...]) -> dict[str, Any]:
    evolved = _evolved(m)
    return {
        "format": FORMAT,
        "format_version": EVOLVED_FORMAT_VERSION if evolved else FORMAT_VERSION,
        **evolved,
        "version": m.version,
        "table_uuid": m.table_uuid,
        "timestamp_ms": m.timestamp_ms,
        "schema": _schema_to_json(m.schema),
        "primary_key": list(m.primary_key),
        "stable_row_ids": m.stable_row_ids,
        "config": m.config,
        "next_fragment_id": m.next_fragment_id,
        "next_row_id": m.next_row_id,
        "fragment_count": len(m.fragments),
        "segment_count": len(m.segments),
        "segment_lists": [entry_json(lst) for lst in m.segment_lists],
        "segments": [entry_json(seg) for seg in inline_segments],
        "fragments": [fragment_to_json(f) for f in inline],
        "indices": [
            {
                "name": i.name,
                "column": i.column,
                "kind": i.kind,
                "uuid": i.uuid,
                "details": i.details,
                "segments": [
                    {
                        "uuid": s.uuid,
                        "path": s.path,
                        "bytes": s.bytes,
                        "rows": s.rows,
                        "fragment_ids": list(s.fragment_ids),
                        "checksum": s.checksum,
                    }
                    for s in i.segments
                ],
            }
            for i in m.indices
        ],
        "wal_watermarks": m.wal_watermarks,
        "transaction": m.transaction,
        **({"dropped": True} if m.dropped else {}),  # only in tombstones: other roots keep their bytes
    }


def _canonical(body: dict[str, Any]) -> bytes:
    return json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode()


def encode_object(kind: str, table_uuid: str, field_name: str, items: list[Any]) -> bytes:
    body = {"format": kind, "table_uuid": table_uuid, field_name: items}
    return json.dumps(body, sort_keys=True, separators=(",", ":")).encode()


def encode_root(m: Manifest, inline_segments: tuple[ManifestSegment, ...], inline: tuple[Fragment, ...]) -> bytes:
    """The root object of ``m``, naming ``inline_segments`` itself and holding the ``inline`` fragments
    (``lamina.manifest.layout.encode_manifest`` says which), with the sha256 of its canonical body."""
    body = _body(m, inline_segments, inline)
    body["checksum"] = "sha256:" + hashlib.sha256(_canonical(body)).hexdigest()
    # One line, with ": " after keys as version 1 wrote them (``belongs_to`` looks for the table uuid).
    return json.dumps(body, sort_keys=True, separators=(",", ": ")).encode()


def _entries(raw: Any, what: str) -> list[ManifestSegment]:
    out = []
    for e in raw:
        path = stored_path(e["path"], what)
        if not path.startswith(SEGMENTS_DIR):
            raise CorruptFile(f"{what}: manifest segment {path!r} is not under {SEGMENTS_DIR}")
        count, size, rows = int(e["count"]), int(e["bytes"]), int(e["rows"])
        crc = _checksum(e["checksum"], f"{what} segment {path}")
        if crc is None or count < 1 or size < 0 or rows < 0:
            raise CorruptFile(f"{what}: manifest segment {path!r} has no checksum or a bad count")
        ids = e.get("ids")
        if ids is not None:
            lo, hi = ids
            if type(lo) is not int or type(hi) is not int or not 0 <= lo <= hi:
                raise CorruptFile(f"{what}: manifest segment {path!r} has a malformed id range {str(ids)[:80]}")
            ids = (lo, hi)
        zones = e.get("zones")
        if zones is not None:

            def where(path: str = path) -> str:  # built only for an error
                return f"{what} segment {path}"

            zones = zones_from_json(zones, where)
        out.append(ManifestSegment(path, count, size, crc, rows, ids=ids, zones=zones))
    return out


def decode_manifest(data: bytes, where: str, reader: SegmentReader | None = None) -> Manifest:
    """Parses and validates a manifest root; ``where`` names it in errors. A root with segments needs
    a ``reader`` of the table's store (``load_manifest`` passes one): its segment lists are read at
    once, its segments when a fragment is first looked at (``FragmentList``)."""

    def corrupt(reason: str) -> CorruptFile:
        return CorruptFile(
            f"manifest {where} is corrupt: {reason}. Open an earlier version with open_table(uri, version=N), "
            f"or restore this object"
        )

    try:
        body = json.loads(data)
    except (ValueError, UnicodeDecodeError, RecursionError) as e:  # RecursionError: hostile nesting
        raise corrupt(f"not valid JSON, probably truncated ({type(e).__name__}: {str(e)[:200]})") from None
    if not isinstance(body, dict) or body.get("format") != FORMAT:
        raise corrupt("not a Lamina manifest")
    if body.get("format_version") not in READABLE_FORMAT_VERSIONS:
        raise LaminaError(
            f"manifest {where} has format version {body.get('format_version')}; this Lamina reads versions "
            f"{', '.join(map(str, READABLE_FORMAT_VERSIONS))}: upgrade Lamina"
        )
    stored_checksum = body.pop("checksum", None)
    if stored_checksum != "sha256:" + hashlib.sha256(_canonical(body)).hexdigest():
        raise corrupt("checksum mismatch")
    try:
        schema = _schema_from_json(body["schema"])
        schema_id = body.get("schema_id", 0)
        listed = list(body.get("schemas", ()))
        ids = [schema_id, *(s["id"] for s in listed)]
        if any(type(i) is not int or i < 0 for i in ids) or len(set(ids)) != len(ids):
            raise corrupt(f"schema ids {str(ids)[:80]} are not distinct non-negative integers")
        older = {s["id"]: _schema_from_json(s) for s in listed}
        next_field_id = body.get("next_field_id")
        # an id below a column's in use would be given again to a column added next: it would read the other's values
        if next_field_id is not None and (
            type(next_field_id) is not int
            or any(
                (evolution.field_id(f) or 0) >= next_field_id for s in (schema, *older.values()) for f in evolution.with_ids(s)
            )
        ):
            raise corrupt(f"next_field_id {str(next_field_id)[:20]} is malformed or not above every column's field id")
        schemas = {**older, schema_id: schema}
        table_uuid = str(body.get("table_uuid", ""))
        list_entries = _entries(body.get("segment_lists", ()), f"manifest {where}")
        inline_entries = _entries(body.get("segments", ()), f"manifest {where}")
        if (list_entries or inline_entries) and reader is None:
            raise LaminaError(f"manifest {where} keeps its fragments in manifest segments: read it with load_manifest")
        lists = tuple(reader.read_now(list_entries, table_uuid)) if list_entries and reader else ()
        entries = [e for lst in lists for e in lst.items] + inline_entries
        segments = tuple(reader.unread(e, table_uuid, schemas) for e in entries) if reader else ()
        inline = tuple(_fragment_from_json(f, where, schemas) for f in body["fragments"])
        next_fragment_id, next_row_id = int(body["next_fragment_id"]), int(body["next_row_id"])
        fragments: tuple[Fragment, ...] | FragmentList = (
            FragmentList(segments + (inline,), where, next_fragment_id, next_row_id) if segments else inline
        )
        if int(body.get("fragment_count", len(fragments))) != len(fragments) or int(
            body.get("segment_count", len(segments))
        ) != len(segments):
            raise corrupt(
                f"it counts {body.get('fragment_count')} fragments in {body.get('segment_count')} segments, "
                f"its segments and root hold {len(fragments)} in {len(segments)}"
            )
        indices = tuple(_index_from_json(i, where) for i in body["indices"])
        dropped = body.get("dropped", False)
        if not isinstance(dropped, bool) or dropped and (fragments or indices):
            raise corrupt(f"dropped is {dropped!r}, or a dropped table's version still has fragments or indices")
        m = Manifest(
            version=int(body["version"]),
            timestamp_ms=int(body["timestamp_ms"]),
            schema=schema,
            fragments=fragments,
            next_fragment_id=next_fragment_id,
            next_row_id=next_row_id,
            primary_key=tuple(body["primary_key"]),
            stable_row_ids=bool(body["stable_row_ids"]),
            config=dict(body["config"]),
            indices=indices,
            wal_watermarks={str(k): int(v) for k, v in body["wal_watermarks"].items()},
            transaction=dict(body["transaction"]),
            table_uuid=table_uuid,
            dropped=dropped,
            schema_id=schema_id,
            schemas=older,
            next_field_id=next_field_id,
            segments=segments,
            segment_lists=lists,
        )
    except (CorruptFile, LaminaError):
        raise
    except (KeyError, TypeError, ValueError, AttributeError, OverflowError, OSError, pa.ArrowException) as e:
        # AttributeError: a list where an object belongs; OverflowError: Infinity where an int
        # belongs; OSError: pyarrow's error for an undecodable schema message.
        raise corrupt(f"missing or malformed field ({type(e).__name__}: {str(e)[:200]})") from None
    if not isinstance(m.fragments, FragmentList):  # else checked when its segments are read
        check_fragments(m.fragments, where, m.next_fragment_id, m.next_row_id)
    return m


def decode_segment(
    data: bytes,
    entry: ManifestSegment,
    table_uuid: str,
    where: str,
    *,
    is_list: bool = False,
    schemas: dict[int, pa.Schema] | None = None,
) -> ManifestSegment:
    """One manifest segment (or segment list), checked against its entry in the root or list.
    ``schemas``: the schemas its fragments' data files may be written in, by id (``Manifest.schema_registry``)."""
    kind = "manifest segment list" if is_list else "manifest segment"
    what = f"{kind} {where} (of table {table_uuid or '(unnamed)'})"
    try:
        checksum.check(entry.checksum, checksum.of_bytes(data), what)
        body = json.loads(data)
        if not isinstance(body, dict) or body.get("format") != (SEGMENT_LIST_FORMAT if is_list else SEGMENT_FORMAT):
            raise CorruptFile(f"{what} is not a Lamina {kind}")
        if body.get("table_uuid") != table_uuid:
            raise CorruptFile(f"{what} belongs to table {body.get('table_uuid')!r}")
        items: tuple[Any, ...] = (
            tuple(_entries(body["segments"], what))
            if is_list
            else tuple(_fragment_from_json(f, where, schemas or {}) for f in body["fragments"])
        )
    except CorruptFile:
        raise
    except (KeyError, TypeError, ValueError, AttributeError, OverflowError, RecursionError, UnicodeDecodeError) as e:
        raise CorruptFile(f"{what} is corrupt: missing or malformed field ({type(e).__name__}: {str(e)[:200]})") from None
    if len(items) != entry.count:
        raise CorruptFile(f"{what} holds {len(items)} entries, the manifest naming it says {entry.count}")
    return dataclasses.replace(entry, bytes=len(data), held=items)


#: The data file names Lamina writes: such a path needs no further checking.
_DATA_PATH = re.compile(r"data/[0-9a-f]{32}\.parquet")


def _schema_from_json(raw: dict[str, Any]) -> pa.Schema:
    return pa.ipc.read_schema(pa.py_buffer(base64.b64decode(raw["ipc"])))


def _fragment_from_json(f: dict[str, Any], where: str, schemas: dict[int, pa.Schema]) -> Fragment:
    def what() -> str:  # built only for an error: decoding runs once per fragment of every segment read
        return f"manifest {where} fragment {f.get('id')}"

    path = f["path"]
    if not isinstance(path, str) or not _DATA_PATH.fullmatch(path):
        path = stored_path(path, what())
        if not path.startswith(DATA_DIR):
            raise CorruptFile(f"{what()}: data file {path!r} is not under {DATA_DIR}")
    deletion = None
    if f["deletion"] is not None:
        dpath = stored_path(f["deletion"]["path"], what())
        if not dpath.startswith(DELETIONS_DIR):
            raise CorruptFile(f"{what()}: deletion file {dpath!r} is not under {DELETIONS_DIR}")
        deletion = DeletionFile(dpath, int(f["deletion"]["deleted_rows"]), _checksum(f["deletion"].get("checksum"), what()))
    crc = f.get("checksum")
    zones = f.get("zones_json")
    if zones is not None:
        if type(zones) is not str or not zones.startswith("["):
            raise CorruptFile(f"{what()}: malformed zone maps {str(zones)[:80]}")
        zones = ZoneText(zones, where, f.get("id"))
    elif (listed := f.get("zones")) is not None:  # written before zones_json: decoded now
        zones = zones_from_json(listed, what)
    cluster = f.get("cluster")
    if cluster is not None:
        if (
            not isinstance(cluster, list)
            or len(cluster) != 4
            or not all(type(x) is str for x in cluster[:2])
            or not all(type(x) is int and x >= 0 for x in cluster[2:])
            or cluster[2] > cluster[3]
        ):
            raise CorruptFile(f"{what()}: malformed cluster range {str(cluster)[:80]}")
        cluster = ClusterRange(*cluster)
    schema_id = f.get("schema_id", 0)
    schema = schemas.get(schema_id) if type(schema_id) is int else None
    if schema is None and schemas:
        raise CorruptFile(f"{what()}: schema id {str(schema_id)[:20]} is not one of the table's schemas ({sorted(schemas)})")
    frag = Fragment(
        id=int(f["id"]),
        path=path,
        rows=int(f["rows"]),
        file_bytes=int(f["file_bytes"]),
        row_groups=tuple([RowGroup(int(r), int(b)) for r, b in f["row_groups"]]),
        file_version=str(f["file_version"]),
        deletion=deletion,
        row_ids=None if f["row_ids"] is None else tuple([(int(s), int(e)) for s, e in f["row_ids"]]),
        checksum=None
        if crc is None
        else (
            crc if type(crc) is str and len(crc) == _CHECKSUM_LEN and crc.startswith(CHECKSUM_PREFIX) else _checksum(crc, what())
        ),
        zones=zones,
        cluster=cluster,
        schema_id=schema_id,
        schema=schema,
    )
    if not 0 <= frag.deleted_rows <= frag.rows or sum(g.rows for g in frag.row_groups) != frag.rows:
        raise CorruptFile(f"{what()}: row counts are inconsistent (rows={frag.rows}, deleted={frag.deleted_rows})")
    if frag.row_ids is not None and (
        any(not 0 <= s <= e for s, e in frag.row_ids) or sum(e - s for s, e in frag.row_ids) != frag.rows
    ):
        raise CorruptFile(f"{what()}: stable row ids {list(frag.row_ids)[:4]}... do not cover its {frag.rows} rows")
    return frag


_CHECKSUM_LEN = len(CHECKSUM_PREFIX) + 8


def _checksum(value: Any, what: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not value.startswith(CHECKSUM_PREFIX) or len(value) != len(CHECKSUM_PREFIX) + 8:
        raise CorruptFile(f"{what}: malformed checksum {value!r}")
    return value


def _index_from_json(i: dict[str, Any], where: str) -> IndexEntry:
    what = f"manifest {where} index {i.get('name')!r}"
    segments = []
    for s in i["segments"]:
        path = stored_path(s["path"], what)
        if not path.startswith(INDICES_DIR):
            raise CorruptFile(f"{what}: segment {path!r} is not under {INDICES_DIR}")
        segments.append(
            IndexSegment(
                str(s["uuid"]),
                path,
                int(s["bytes"]),
                int(s["rows"]),
                tuple(int(f) for f in s["fragment_ids"]),
                _checksum(s.get("checksum"), what),
            )
        )
    return IndexEntry(str(i["name"]), str(i["column"]), str(i["kind"]), str(i["uuid"]), tuple(segments), dict(i["details"]))
