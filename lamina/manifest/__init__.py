"""The manifest: one small immutable root object per table version, plus shared segments.

``_versions/{version:020d}.manifest`` (the root) holds the schema, indices, WAL
watermarks, the transaction that produced the version (typed by ``lamina.records``:
``Manifest.record``), the newest few fragments inline, and the list of *manifest
segments* holding the others: immutable objects under ``_segments/`` of up to
``SEGMENT_FRAGMENTS`` fragments each, shared by every version that did not change
them. A commit writes only the segments it changes, then the root (``lay_out``), so
the bytes written per commit do not grow with the table. The root carries a sha256
of its own canonical body and each segment's CRC32C, so a truncated or altered
object is refused instead of half-read. Field by field in docs/FORMAT.md §2;
version-1 manifests (every fragment in the root) are still read.

One module per concept, lowest first; this package re-exports their public names (and the zone
model fragments hold, from ``lamina.zones``):

- ``paths``     where a table's objects live, and the check of every path read from a manifest
- ``segments``  manifest segments and ``FragmentList``: a version's fragments streamed, edited part by part
- ``model``     the values: ``Fragment``, ``IndexEntry``, ``Manifest`` …
- ``codec``     bytes ↔ values: the root and its checksum, segment objects, validation on reading
- ``layout``    ``lay_out``: which segments hold a version's fragments; ``encode_manifest``
- ``versions``  listing versions, the latest one and its hint, loading through the caches
"""

from __future__ import annotations

from lamina.manifest.codec import (
    CHECKSUM_PREFIX,
    FORMAT,
    FORMAT_VERSION,
    READABLE_FORMAT_VERSIONS,
    SEGMENT_FORMAT,
    SEGMENT_LIST_FORMAT,
    decode_manifest,
    decode_segment,
)
from lamina.manifest.layout import (
    INLINE_FRAGMENTS,
    INLINE_SEGMENTS,
    LIST_SEGMENTS,
    SEGMENT_FRAGMENTS,
    encode_manifest,
    lay_out,
)
from lamina.manifest.model import (
    ADDRESS_SHIFT,
    ClusterRange,
    DeletionFile,
    Fragment,
    IndexEntry,
    IndexSegment,
    Manifest,
    RowGroup,
    now_ms,
)
from lamina.manifest.paths import (
    DATA_DIR,
    DELETIONS_DIR,
    INDICES_DIR,
    MANIFEST_SUFFIX,
    SEGMENTS_DIR,
    TABLE_DIRS,
    TAGS_DIR,
    TRANSACTIONS_DIR,
    VERSIONS_DIR,
    WAL_DIR,
    manifest_path,
)
from lamina.manifest.segments import FragmentList, ManifestSegment, appended, edited, find_fragments
from lamina.manifest.versions import (
    HINT_EVERY,
    LATEST_HINT,
    belongs_to,
    forget_manifest,
    forget_superseded,
    forget_table,
    latest_version,
    list_versions,
    load_latest_from,
    load_manifest,
    remember_manifest,
    stored_format_version,
    try_load_manifest,
    versions_from,
    write_latest_hint,
    write_segments,
)
from lamina.zones import Zone, ZoneText, merge_zones

__all__ = [
    "ADDRESS_SHIFT",
    "CHECKSUM_PREFIX",
    "DATA_DIR",
    "DELETIONS_DIR",
    "FORMAT",
    "FORMAT_VERSION",
    "HINT_EVERY",
    "INDICES_DIR",
    "INLINE_FRAGMENTS",
    "INLINE_SEGMENTS",
    "LATEST_HINT",
    "LIST_SEGMENTS",
    "MANIFEST_SUFFIX",
    "READABLE_FORMAT_VERSIONS",
    "SEGMENTS_DIR",
    "SEGMENT_FORMAT",
    "SEGMENT_FRAGMENTS",
    "SEGMENT_LIST_FORMAT",
    "TABLE_DIRS",
    "TAGS_DIR",
    "TRANSACTIONS_DIR",
    "VERSIONS_DIR",
    "WAL_DIR",
    "ClusterRange",
    "DeletionFile",
    "Fragment",
    "FragmentList",
    "IndexEntry",
    "IndexSegment",
    "Manifest",
    "ManifestSegment",
    "RowGroup",
    "Zone",
    "ZoneText",
    "appended",
    "belongs_to",
    "decode_manifest",
    "decode_segment",
    "edited",
    "encode_manifest",
    "find_fragments",
    "forget_manifest",
    "forget_superseded",
    "forget_table",
    "latest_version",
    "lay_out",
    "list_versions",
    "load_latest_from",
    "load_manifest",
    "manifest_path",
    "merge_zones",
    "now_ms",
    "remember_manifest",
    "stored_format_version",
    "try_load_manifest",
    "versions_from",
    "write_latest_hint",
    "write_segments",
]
