"""Lamina's exception tree: every error a user can meet, named after what went wrong.

Messages name the table, version, fragment or object involved and say what to do
next. "Retry the work" (``CommitConflict``) is kept apart from "we do not know
whether it was written" (``CommitStateUnknown``).
"""

from __future__ import annotations


class LaminaError(Exception):
    """Base class of every error raised by Lamina."""


class InvalidArgument(LaminaError, ValueError):
    """A call got an argument it cannot use (wrong type, out of range)."""


class InvalidConfig(InvalidArgument):
    """A configuration or storage option is unknown, missing or out of bounds."""


class UnsupportedURI(InvalidConfig):
    """A table URI has a scheme Lamina cannot store tables on."""


class InvalidFilter(InvalidArgument):
    """A filter does not parse, or names a column the table does not have."""


class SchemaMismatch(InvalidArgument):
    """Data does not match the table's schema."""


class DuplicateKey(InvalidArgument):
    """A merge's source holds a key more than once: which of its rows a matched target row takes is undefined."""


class ShardStopped(SchemaMismatch):
    """A WAL applier stopped its shard: the table's schema changed in a way the shard's
    unflushed WAL rows cannot follow. Nothing is lost: they stay in the WAL."""


class TableNotFound(LaminaError, FileNotFoundError):
    """No Lamina table exists at the URI."""


class TableExists(LaminaError, FileExistsError):
    """``create_table`` found a table already at the URI."""


class NamespaceNotFound(LaminaError, LookupError):
    """A catalog has no namespace of that name."""


class NamespaceExists(LaminaError, FileExistsError):
    """A catalog already has a namespace (or a table) of that name."""


class NamespaceNotEmpty(LaminaError):
    """A namespace still holds tables or namespaces; drop them first, or pass cascade=True."""


class VersionNotFound(LaminaError, LookupError):
    """The requested table version does not exist (never committed, or cleaned up)."""


class TagNotFound(VersionNotFound):
    """The table has no tag of that name (never created, deleted, or another table's)."""


class TagExists(LaminaError, FileExistsError):
    """A tag of that name already exists; tags are never moved: delete it first."""


class RowNotFound(LaminaError, KeyError):
    """A row address is out of range or names a deleted row."""

    def __str__(self) -> str:  # KeyError quotes its message; keep it readable
        return str(self.args[0]) if self.args else ""


class IndexNotFound(LaminaError, LookupError):
    """The table has no index of that name (or none that can serve the request)."""


class Unsupported(LaminaError, NotImplementedError):
    """An operation Lamina does not offer on that object; the message says what to use instead."""


class CorruptFile(LaminaError):
    """Stored bytes are truncated, undecodable or inconsistent with the manifest."""


class StorageError(LaminaError, OSError):
    """An object store operation failed after its retries."""


class MissingCredentials(StorageError):
    """No credentials were found for an object store."""


class BucketNotFound(StorageError):
    """The bucket named in the URI does not exist."""


class ObjectNotFound(StorageError, FileNotFoundError):
    """An object the table needs is missing from the store."""


class WalError(LaminaError):
    """A WAL segment cannot be written or read as the format promises."""


class CommitConflict(LaminaError):
    """A concurrent commit made this operation invalid; re-run it on the latest version."""


class TableReplaced(CommitConflict):
    """The table at a URI was dropped and created again: what was read belongs to the old one."""


class TableDropped(TableReplaced):
    """The table was dropped (a tombstone version, docs/FORMAT.md §2) after this operation read it:
    nothing was committed; create the table again, or open the one created at the URI since."""


class CommitStateUnknown(LaminaError):
    """The commit may or may not have been written; reload the table before retrying."""
