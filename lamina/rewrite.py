"""Rewriting a group of fragments into new ones, deletions materialized.

This is the reference (decode and re-encode) path: the compaction job's
binary-copy and hybrid modes must produce the same rows, order and mapping.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pyarrow as pa

from lamina.datafile import WriteOptions, read_fragment, write_fragment
from lamina.deletion import read_deleted
from lamina.errors import InvalidArgument
from lamina.manifest import Fragment, Manifest, find_fragments
from lamina.records import AddressMapping
from lamina.store import ObjectStore
from lamina.transaction import RewriteGroup


def id_ranges(ids: np.ndarray) -> tuple[tuple[int, int], ...]:
    """Sorted-or-not ids → ``[start, end)`` runs of consecutive values, in order."""
    if len(ids) == 0:
        return ()
    ids = np.asarray(ids, dtype=np.int64)
    breaks = np.nonzero(np.diff(ids) != 1)[0] + 1
    starts = np.concatenate([[0], breaks])
    ends = np.concatenate([breaks, [len(ids)]])
    return tuple((int(ids[s]), int(ids[e - 1]) + 1) for s, e in zip(starts, ends))


def live_offsets(store: ObjectStore, fragment: Fragment) -> np.ndarray:
    """Offsets of the fragment's live rows, ascending."""
    deleted = read_deleted(store, fragment)
    if len(deleted) == 0:
        return np.arange(fragment.rows, dtype=np.int64)
    mask = np.ones(fragment.rows, dtype=bool)
    mask[deleted] = False
    return np.flatnonzero(mask)


def mapping_runs(
    fragment_id: int, offsets: np.ndarray, first_new: int, rows_per_output: int
) -> list[tuple[int, int, int, int, int]]:
    """Runs mapping live ``offsets`` (in order) to consecutive new positions from ``first_new``."""
    if len(offsets) == 0:
        return []
    n = len(offsets)
    if offsets[-1] - offsets[0] == n - 1 and first_new // rows_per_output == (first_new + n - 1) // rows_per_output:
        # contiguous rows into one output: a single shift
        return [(fragment_id, int(offsets[0]), first_new // rows_per_output, first_new % rows_per_output, n)]
    new = first_new + np.arange(len(offsets), dtype=np.int64)
    out, pos = new // rows_per_output, new % rows_per_output
    brk = np.nonzero((np.diff(offsets) != 1) | (np.diff(out) != 0))[0] + 1
    starts = np.concatenate([[0], brk])
    ends = np.concatenate([brk, [len(offsets)]])
    return [(fragment_id, int(offsets[s]), int(out[s]), int(pos[s]), int(e - s)) for s, e in zip(starts, ends)]


def full_rewrite(store: ObjectStore, manifest: Manifest, fragment_ids: list[int], options: WriteOptions) -> RewriteGroup:
    """Reads the live rows of ``fragment_ids`` (in order) and writes them as new fragments."""
    frags = find_fragments(manifest.fragments, fragment_ids)
    missing = [i for i in fragment_ids if i not in frags]
    if missing:
        raise InvalidArgument(f"fragments {missing} are not in version {manifest.version} of {store.uri}")
    per_out = options.max_rows_per_file
    tables, runs, row_ids, sources = [], [], [], {}
    position = 0
    for fid in fragment_ids:
        frag = frags[fid]
        sources[fid] = frag.deletion.path if frag.deletion else None
        table = read_fragment(store, frag, manifest.schema, with_row_id=manifest.stable_row_ids)
        offsets = live_offsets(store, frag)
        runs.extend(mapping_runs(fid, offsets, position, per_out))
        position += len(offsets)
        if manifest.stable_row_ids:
            row_ids.append(table.column("_rowid").to_numpy())
            table = table.drop_columns(["_rowid"])
        tables.append(table)
    combined = pa.concat_tables(tables) if tables else manifest.schema.empty_table()
    all_ids = np.concatenate(row_ids) if row_ids else None
    outputs: list[Fragment] = []
    written: list[str] = []
    try:
        for start in range(0, combined.num_rows, per_out):
            chunk = combined.slice(start, per_out)
            frag = write_fragment(store, manifest.schema, chunk.to_batches(), options)
            written.append(frag.path)
            if all_ids is not None:
                frag = dataclasses.replace(frag, row_ids=id_ranges(all_ids[start : start + chunk.num_rows]))
            outputs.append(frag)
    except BaseException:
        store.delete(written)
        raise
    return RewriteGroup(tuple(fragment_ids), outputs, AddressMapping.from_runs(runs), source_deletions=sources)
