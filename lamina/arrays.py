"""Numbers between numpy and Arrow without ``pa.array`` or ``Array.to_numpy``: the first call of either in a
process imports pandas when it is installed (~150 ms, measured with pyarrow 26), which every cold lookup or
catalog read paid on its read path. Arrays here have no nulls."""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

_NUMPY_TYPES = {pa.uint32(): np.uint32, pa.uint64(): np.uint64, pa.int32(): np.int32, pa.int64(): np.int64,
                pa.float64(): np.float64}


def from_numpy(values: Any, type: pa.DataType) -> pa.Array:
    """Numbers (or booleans) from numpy as an Arrow array of ``type``; numbers without a copy."""
    if type == pa.bool_():
        values = np.asarray(values, dtype=np.bool_)
        return pa.Array.from_buffers(type, len(values), [None, pa.py_buffer(np.packbits(values, bitorder="little"))])
    values = np.ascontiguousarray(values, dtype=_NUMPY_TYPES[type])
    return pa.Array.from_buffers(type, len(values), [None, pa.py_buffer(values)])


def to_numpy(array: pa.Array) -> np.ndarray:
    """A numeric Arrow array without nulls as a numpy array viewing its buffer (read-only)."""
    if array.null_count:
        raise ValueError("to_numpy: the array has nulls")
    dtype = np.dtype(_NUMPY_TYPES[array.type])
    return np.frombuffer(array.buffers()[1], dtype=dtype, count=len(array), offset=array.offset * dtype.itemsize)
