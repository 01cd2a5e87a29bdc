"""Keys: which Arrow types can be keys, and the values the native code takes for them.

One table (``KEY_TYPES``) answers every "can this column be a key?" question: an index
key (btree, bitmap), a primary key (merge-on-write upserts, the WAL memtable), a point
lookup. Each type maps to one of four key domains, the encodings of the native key module
(``native/src/keys.rs``, docs/FORMAT.md §10): ``int64``, ``uint64``, ``float64``, ``bytes``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import pyarrow as pa

from lamina.errors import InvalidArgument


def _is_temporal(t: pa.DataType) -> bool:
    return pa.types.is_timestamp(t) or pa.types.is_date(t) or pa.types.is_time(t) or pa.types.is_duration(t)


def _is_uint64(t: pa.DataType) -> bool:
    return pa.types.is_unsigned_integer(t) and t.bit_width == 64


def _is_text(t: pa.DataType) -> bool:
    return pa.types.is_string(t) or pa.types.is_large_string(t)


def _is_binary(t: pa.DataType) -> bool:
    return pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t)


class KeyType(NamedTuple):
    """A family of Arrow types that can be keys."""

    what: str  # shown in error messages
    matches: Callable[[pa.DataType], bool]
    domain: str  # int64 | uint64 | float64 | bytes
    primary_key: bool  # may be a table's primary key


#: Every Arrow type that can be a key, first match wins. Dictionary types are keys of their value type.
KEY_TYPES: tuple[KeyType, ...] = (
    KeyType("64-bit unsigned integers", _is_uint64, "uint64", True),
    KeyType("integers", pa.types.is_integer, "int64", True),
    KeyType("booleans", pa.types.is_boolean, "int64", False),
    KeyType("dates/times/timestamps/durations", _is_temporal, "int64", False),
    KeyType("floats", pa.types.is_floating, "float64", False),
    KeyType("strings", _is_text, "bytes", True),
    KeyType("binary", _is_binary, "bytes", True),
)


def key_type(t: pa.DataType) -> KeyType | None:
    """The row of ``KEY_TYPES`` for ``t`` (dictionaries: their value type), or None."""
    if pa.types.is_dictionary(t):
        t = t.value_type
    return next((k for k in KEY_TYPES if k.matches(t)), None)


def key_domain(t: pa.DataType) -> str | None:
    """The key domain of a column type (int64, uint64, float64, bytes), or None if it cannot be a key."""
    k = key_type(t)
    return k.domain if k else None


def primary_key_domain(t: pa.DataType, what: str) -> str:
    """The key domain of a primary-key column; InvalidArgument naming ``what`` if the type cannot be one."""
    k = None if pa.types.is_dictionary(t) else key_type(t)
    if k is None or not k.primary_key:
        allowed = ", ".join(k.what for k in KEY_TYPES if k.primary_key)
        raise InvalidArgument(f"{what} has type {t}; primary keys must be one of: {allowed}")
    return k.domain


def supported() -> str:
    """The key types, for messages."""
    return ", ".join(k.what for k in KEY_TYPES)


def key_array(values: pa.Array | pa.ChunkedArray) -> pa.Array:
    """``values`` in the key domain the native code takes (int64, uint64, float64, binary, dictionary)."""
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks() if values.num_chunks != 1 else values.chunk(0)
    t = values.type
    if pa.types.is_dictionary(t):
        vt = t.value_type
        if pa.types.is_string(vt) or pa.types.is_large_string(vt) or pa.types.is_binary(vt) or pa.types.is_large_binary(vt):
            return values if t.index_type == pa.int32() else values.cast(pa.dictionary(pa.int32(), vt))
        return key_array(values.dictionary_decode())
    if _is_temporal(t):
        storage = pa.int32() if t.bit_width == 32 else pa.int64()
        return values.view(storage).cast(pa.int64())
    if pa.types.is_fixed_size_binary(t):
        return values.cast(pa.binary())
    if pa.types.is_floating(t):
        return values.cast(pa.float64())
    if _is_uint64(t):
        return values
    if pa.types.is_boolean(t) or pa.types.is_integer(t):
        return values.cast(pa.int64())
    return values


def key_value(scalar: pa.Scalar) -> Any:
    """A filter literal (already of the column's type) as a key: int, float or bytes; None for null."""
    if not scalar.is_valid:
        return None
    v = key_array(pa.array([scalar.as_py()], type=scalar.type))[0].as_py()
    return v.encode() if isinstance(v, str) else v
