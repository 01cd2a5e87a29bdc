"""File checksums: the CRC32C of every data, deletion and index file, recorded in the manifest.

Writers compute them while writing (native, no second pass); readers check them wherever a
whole object passes through their hands (deletion files, full-fragment reads, compaction
sources, staged S3 objects), and ``Table.verify()`` checks every file of a version.
"""

from __future__ import annotations

from lamina import _native
from lamina.errors import CorruptFile


def of_bytes(data: bytes) -> str:
    """``"crc32c:%08x"`` of ``data`` (GIL released)."""
    return _native.checksum(data)


def of_file(path: str) -> str:
    """``"crc32c:%08x"`` of a local file, streamed (GIL released)."""
    return _native.file_checksum(path)


def check(expected: str | None, actual: str, what: str) -> None:
    """Raises ``CorruptFile`` naming ``what`` if ``actual`` is not the recorded checksum
    (``None``: a file written before checksums were recorded; nothing to compare)."""
    if expected is not None and actual != expected:
        raise CorruptFile(
            f"{what} is corrupt: its checksum is {actual}, the manifest recorded {expected} (the file was altered "
            f"or damaged on storage). Restore it from a backup or replica, or check out a version that does not use it"
        )
