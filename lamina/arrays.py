"""Arrays and scalars without ``pa.array``, ``pa.scalar`` or ``Array.to_numpy``: the first call of any of them
in a process imports pandas when it is installed, a start-up cost larger than the whole of a cold
lookup, catalog read or filtered read, which each of them paid on its read path. ``from_numpy`` and ``to_numpy`` take arrays
without nulls; ``array`` and ``scalar`` take Python values as a filter's literals are (nulls allowed) and
leave any other kind of value to pyarrow."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa

_NUMPY_TYPES = {
    pa.uint32(): np.uint32,
    pa.uint64(): np.uint64,
    pa.int32(): np.int32,
    pa.int64(): np.int64,
    pa.float64(): np.float64,
}
_INT_TYPES: dict[pa.DataType, type[np.integer[Any]]] = {
    pa.int8(): np.int8,
    pa.int16(): np.int16,
    pa.int32(): np.int32,
    pa.int64(): np.int64,
    pa.uint8(): np.uint8,
    pa.uint16(): np.uint16,
    pa.uint32(): np.uint32,
    pa.uint64(): np.uint64,
}
_TEXT_TYPES: dict[pa.DataType, tuple[type, type[np.integer[Any]]]] = {
    pa.string(): (str, np.int32),
    pa.large_string(): (str, np.int64),
    pa.binary(): (bytes, np.int32),
    pa.large_binary(): (bytes, np.int64),
}


def from_numpy(values: Any, type: pa.DataType) -> pa.Array:
    """Numbers (or booleans) from numpy as an Arrow array of ``type``; numbers without a copy."""
    if type == pa.bool_():
        values = np.asarray(values, dtype=np.bool_)
        return pa.Array.from_buffers(type, len(values), [None, pa.py_buffer(np.packbits(values, bitorder="little"))])
    values = np.ascontiguousarray(values, dtype=_NUMPY_TYPES[type])
    return pa.Array.from_buffers(type, len(values), [None, pa.py_buffer(values)])


def sorted_distinct(values: np.ndarray) -> np.ndarray:
    """``np.unique(values)``, skipping its hashing and sorting when ``values`` are sorted and distinct already,
    as row offsets and addresses mostly come (in table order). ``values`` itself is returned then."""
    if len(values) < 2 or bool(np.all(values[1:] > values[:-1])):
        return values
    return np.unique(values)


def to_numpy(array: pa.Array) -> np.ndarray:
    """A numeric Arrow array without nulls as a numpy array viewing its buffer (read-only)."""
    if array.null_count:
        raise ValueError("to_numpy: the array has nulls")
    dtype = np.dtype(_NUMPY_TYPES[array.type])
    return np.frombuffer(array.buffers()[1], dtype=dtype, count=len(array), offset=array.offset * dtype.itemsize)


def array(values: list[Any], type: pa.DataType) -> pa.Array:
    """``pa.array(values, type=type)`` for Python ints into an integer type (in range), floats into
    float64, bools into bool, str into string and bytes into binary (large or not), None anywhere;
    built from buffers. Any other value or type, or an int out of range, goes to ``pa.array`` (which
    raises what it raises)."""
    built = _built(values, type)
    return pa.array(values, type=type) if built is None else built


def scalar(value: Any, type: pa.DataType) -> pa.Scalar:
    """``pa.scalar(value, type)`` for the values ``array`` builds itself; the others through pyarrow."""
    built = _built([value], type)
    return pa.scalar(value, type) if built is None else built[0]


def _built(values: list[Any], type: pa.DataType) -> pa.Array | None:
    """``values`` as an array of ``type`` from buffers, or None when ``array`` leaves them to pyarrow."""
    n = len(values)
    valid = [v is not None for v in values]
    nulls = n - sum(valid)
    present = [v for v in values if v is not None] if nulls else values
    data = _buffers(present, type)
    if data is None:
        return None
    if nulls:
        data = _spread(data, valid, type)
        bitmap = pa.py_buffer(np.packbits(np.asarray(valid, dtype=np.bool_), bitorder="little"))
        return pa.Array.from_buffers(type, n, [bitmap, *data], null_count=nulls)
    return pa.Array.from_buffers(type, n, [None, *data], null_count=0)


def array_of_scalars(scalars: Sequence[pa.Scalar], type: pa.DataType) -> pa.Array:
    """``pa.array(scalars, type=type)``: through ``array`` for the types it builds (their ``as_py`` values are
    exact); any other type (a timestamp in ns, a decimal, ...) from the scalars themselves by pyarrow."""
    if type in _INT_TYPES or type in _TEXT_TYPES or type == pa.float64() or type == pa.bool_():
        return array([s.as_py() for s in scalars], type)
    return pa.array(scalars, type=type)


def _buffers(values: list[Any], type: pa.DataType) -> list[pa.Buffer] | None:
    """The data buffers of non-null ``values`` as ``type``, or None when ``array`` leaves them to pyarrow."""
    if type in _INT_TYPES:
        if not all(v.__class__ is int for v in values):
            return None
        dtype = _INT_TYPES[type]
        info = np.iinfo(dtype)
        if values and not (info.min <= min(values) and max(values) <= info.max):
            return None
        return [pa.py_buffer(np.array(values, dtype=dtype))]
    if type == pa.float64():
        return [pa.py_buffer(np.array(values, dtype=np.float64))] if all(v.__class__ is float for v in values) else None
    if type == pa.bool_():
        if not all(v.__class__ is bool for v in values):
            return None
        return [pa.py_buffer(np.packbits(np.array(values, dtype=np.bool_), bitorder="little"))]
    if type in _TEXT_TYPES:
        kind, offset_type = _TEXT_TYPES[type]
        if not all(v.__class__ is kind for v in values):
            return None
        try:
            encoded = [v.encode("utf-8") for v in values] if kind is str else values
        except UnicodeEncodeError:  # a lone surrogate: pyarrow says what is wrong
            return None
        offsets = np.zeros(len(encoded) + 1, dtype=np.int64)
        np.cumsum([len(b) for b in encoded], out=offsets[1:])
        if offsets[-1] > np.iinfo(offset_type).max:
            return None
        return [pa.py_buffer(offsets.astype(offset_type)), pa.py_buffer(b"".join(encoded))]
    return None


def _spread(data: list[pa.Buffer], valid: list[bool], type: pa.DataType) -> list[pa.Buffer]:
    """Buffers of the present values laid out over every slot (a null slot: zero, or an empty string)."""
    mask = np.asarray(valid, dtype=np.bool_)
    if type in _TEXT_TYPES:
        offset_type = _TEXT_TYPES[type][1]
        present = np.frombuffer(data[0], dtype=offset_type)
        lengths = np.zeros(len(valid), dtype=np.int64)
        lengths[mask] = np.diff(present)
        offsets = np.zeros(len(valid) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        return [pa.py_buffer(offsets.astype(offset_type)), data[1]]
    if type == pa.bool_():
        bits = np.unpackbits(np.frombuffer(data[0], dtype=np.uint8), bitorder="little")[: int(mask.sum())]
        full = np.zeros(len(valid), dtype=np.bool_)
        full[mask] = bits
        return [pa.py_buffer(np.packbits(full, bitorder="little"))]
    dtype = _INT_TYPES.get(type, np.float64)
    full = np.zeros(len(valid), dtype=dtype)
    full[mask] = np.frombuffer(data[0], dtype=dtype)
    return [pa.py_buffer(full)]
