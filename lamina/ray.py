"""Ray Data reads and writes of Lamina tables: a reader/writer adapter over lamina's own read path and commit.

    ds = lamina.ray.read_table("s3://bucket/t", columns=["id", "value"], filter="value > 0")
    lamina.ray.write_table(ds, "s3://bucket/t2", mode="append")

Reads: the version is pinned when ``read_table`` is called (its manifest travels with the
tasks), fragments are grouped into at most the requested number of read tasks, contiguous and
balanced by bytes, and each task streams its fragments through ``lamina.scan.Scanner`` (the code
``Table.to_arrow`` runs): projection, filter, indices and deletions as there.

Writes (``LaminaDatasink``)::

    driver: check uri/mode/schema, pick a write id ─► Ray write tasks: conform blocks ─► write_fragments ─► [Fragment]
                                       (files named data/<write id><random>.parquet; each task tells a
                                        _WrittenFiles actor it began, its files, and that it ended)
            ─► on_write_complete: one Append / Overwrite through lamina.commit (a Create first if no table;
                                  if another writer created it meanwhile, the mode decides: see write_table);
                                  files under data/<write id> it does not commit are removed
            ─► on failure: nothing committed; no task may begin; the running ones are waited for;
                           then every file under data/<write id> (and every file a task reported) is removed

How the write finds its files: by listing ``data/<write id>``. Every data file of one write is named
with its write id (16 hex digits, chosen when the datasink is made; the names stay the 32 hex digits
of any data file), so the list holds the files of tasks that reported them and also of tasks that did
not: one cancelled or killed inside ``write_fragments`` after its file was written, before it reported
it. The registry stays: its wait for the running tasks is what makes the list complete (a task still
writing would add files after it), and the files tasks reported to it are removed along with the list.

This is the one module besides ``workers/runtime.py`` that imports Ray (tests/test_layout.py):
a Ray Data Datasource/Datasink must subclass Ray's classes. ``import lamina`` does not import it.
"""

from __future__ import annotations

import itertools
import logging
import os
import secrets
import threading
import time
import uuid
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import ray
import ray.data
from ray.data.block import Block, BlockAccessor, BlockMetadata
from ray.data.datasource import Datasink, Datasource, ReadTask

from lamina.commit import commit
from lamina.datafile import WriteOptions, output_schema, write_fragments
from lamina.drop import free_after
from lamina.errors import CommitStateUnknown, InvalidArgument, LaminaError, SchemaMismatch, TableExists
from lamina.filter import Filter, parse_filter
from lamina.manifest import DATA_DIR, Fragment, Manifest, latest_version, load_manifest
from lamina.scan import Scanner
from lamina.schema import check_column_names, conform, validate_schema
from lamina.store import ObjectStore, open_store
from lamina.table import Table, open_table
from lamina.transaction import Append, Create, Overwrite

log = logging.getLogger("lamina.ray")

MODES = ("append", "overwrite")

#: A failed write waits this long at most for its tasks still running (they remove their own files; files
#: one still running after the wait writes later are left for ``table.cleanup()``).
TASK_WAIT_SECONDS = 600.0
#: While it waits, it looks this often for tasks whose process died (they will never say they ended).
LIVENESS_CHECK_SECONDS = 1.0


# -- reads ---------------------------------------------------------------------
def group_fragments(fragments: Sequence[Fragment], parallelism: int) -> list[list[Fragment]]:
    """At most ``parallelism`` contiguous groups of ``fragments`` (table order kept), balanced by
    bytes: the i-th cut falls where the running total first reaches i/n of the whole."""
    if not fragments:
        return []
    n = max(1, min(int(parallelism), len(fragments)))
    weights = [max(1, f.file_bytes) for f in fragments]
    total = sum(weights)
    groups: list[list[Fragment]] = [[]]
    running = 0
    for placed, (frag, w) in enumerate(zip(fragments, weights)):
        # Start a new group once this one holds its share, keeping one fragment for each group left.
        left = len(fragments) - placed
        if groups[-1] and len(groups) < n and (running >= total * len(groups) / n or left <= n - len(groups)):
            groups.append([])
        groups[-1].append(frag)
        running += w
    return groups


class _ReadGroup:
    """One read task's work: a group of fragments of one pinned version (plain values, so it pickles)."""

    def __init__(
        self, uri: str, storage_options: dict[str, Any] | None, manifest: Manifest, columns: list[str] | None, flt: Filter | None
    ):
        self.uri = uri
        self.storage_options = storage_options
        self.manifest = manifest  # only this group's fragments; the indices of the pinned version
        self.columns = columns
        self.flt = flt

    def __call__(self) -> Iterator[pa.Table]:
        """The group's rows, streamed by ``lamina.scan.Scanner`` (as ``Table.to_arrow`` reads): a block per
        batch, so a task holds what the scanner's memory bound says, not its whole group."""
        found = False
        try:
            store = open_store(self.uri, self.storage_options)
            for batch in Scanner(store, self.manifest, self.columns, self.flt).to_batches():
                found = True
                yield pa.Table.from_batches([batch])
        except LaminaError as e:
            raise _naming(e, self.uri, f"reading version {self.manifest.version} of") from None
        if not found:  # a task that found nothing still yields one (empty) block, so the blocks' schemas agree
            yield output_schema(self.manifest.schema, self.columns).empty_table()


def _naming(e: LaminaError, uri: str, doing: str) -> LaminaError:
    """``e`` (same class) saying which table it is about, unless its message names the table already."""
    if uri in str(e):
        return e
    try:
        return type(e)(f"{doing} table {uri} from Ray Data: {e}")
    except TypeError:
        return e


class LaminaDatasource(Datasource):
    """One pinned version of a Lamina table as a Ray Data source (``read_table`` makes it).

    The schema and row counts come from the manifest, so Ray knows them without reading data.
    Ray's projection pushdown (``select_columns`` after the read) narrows what is read.
    """

    def __init__(self, table: Table, columns: Sequence[str] | None = None, filter: str | pa.compute.Expression | None = None):
        super().__init__()
        self._uri = table.uri
        self._storage_options = table.storage_options
        self._pinned = table.manifest
        cols = check_column_names(table.schema, columns, table.uri)
        self._filter = parse_filter(filter, table.schema) if filter is not None else None
        self._projection_map = None if cols is None else {c: c for c in cols}

    def __repr__(self) -> str:
        return f"LaminaDatasource({self._uri!r}, version={self._pinned.version})"

    @property
    def version(self) -> int:
        return self._pinned.version

    def get_name(self) -> str:
        return "Lamina"

    def supports_projection_pushdown(self) -> bool:
        return True

    def _columns(self) -> list[str] | None:
        if self._projection_map is None:
            return None
        return list(self._projection_map)  # in the order asked (a projection never renames)

    def _fraction(self) -> float:
        """Share of a fragment's bytes the projection reads (by column count: the manifest has no column sizes)."""
        cols = self._columns()
        return 1.0 if cols is None else max(1, len(cols)) / max(1, len(self._pinned.schema))

    def estimate_inmemory_data_size(self) -> int | None:
        return int(sum(sum(g.bytes for g in f.row_groups) for f in self._pinned.fragments) * self._fraction())

    def read_schema(self) -> pa.Schema:
        """The schema of the rows read (projection applied)."""
        return output_schema(self._pinned.schema, self._columns())

    def get_read_tasks(self, parallelism: int, per_task_row_limit: int | None = None, data_context: Any = None) -> list[ReadTask]:
        cols = self._columns()
        out_schema = self.read_schema()
        fraction = self._fraction()
        tasks = []
        if not self._pinned.fragments:  # no rows, but a schema: one task yielding an empty block
            empty = _ReadGroup(self._uri, self._storage_options, self._pinned, cols, None)
            return [
                ReadTask(empty, BlockMetadata(num_rows=0, size_bytes=0, input_files=None, exec_stats=None), schema=out_schema)
            ]
        for group in group_fragments(self._pinned.fragments, parallelism):
            meta = BlockMetadata(
                num_rows=sum(f.live_rows for f in group) if self._filter is None else None,
                size_bytes=int(sum(sum(g.bytes for g in f.row_groups) for f in group) * fraction),
                input_files=None,
                exec_stats=None,
            )
            part = self._pinned.replace(fragments=tuple(group), indices=self._pinned.indices if self._filter else ())
            work = _ReadGroup(self._uri, self._storage_options, part, cols, self._filter)
            tasks.append(ReadTask(work, meta, schema=out_schema, per_task_row_limit=per_task_row_limit))
        return tasks


def from_table(
    table: Table, *, columns: Sequence[str] | None = None, filter: str | pa.compute.Expression | None = None, **read_args: Any
) -> ray.data.Dataset:
    """The rows of ``table`` (its version) as a Ray Dataset; ``read_args`` go to ``ray.data.read_datasource``
    (e.g. ``override_num_blocks``, ``concurrency``, ``ray_remote_args``)."""
    return ray.data.read_datasource(LaminaDatasource(table, columns, filter), **read_args)


def read_table(
    uri: str,
    *,
    columns: Sequence[str] | None = None,
    filter: str | pa.compute.Expression | None = None,
    version: int | None = None,
    storage_options: dict[str, Any] | None = None,
    **read_args: Any,
) -> ray.data.Dataset:
    """A Lamina table as a Ray Dataset: live rows (deletions applied) of ``version`` (default: the
    latest, fixed now: later commits do not show), ``columns`` only, matching ``filter`` (SQL-like
    text or a pyarrow Expression, answered through indices like ``Table.to_arrow``).

    One read task per fragment or per group of adjacent small fragments, at most the requested
    parallelism (``override_num_blocks``). The schema is known without reading data.

    >>> ds = lamina.ray.read_table("/tmp/t", columns=["id"], filter="id < 100")
    >>> ds.count()
    """
    table = open_table(uri, version=version, storage_options=storage_options)
    return from_table(table, columns=columns, filter=filter, **read_args)


# -- writes --------------------------------------------------------------------
class _WrittenFiles:
    """The write's tasks and the data files they reported, so a failed write can wait for its tasks before it removes its files.

    A task ``begin``s before writing (refused once the write is abandoned: it writes nothing),
    reports its files with ``add`` (accepted until ``close``: those may be committed) and ``end``s,
    whatever happened. ``wait_for_tasks`` returns once no task that began is still running (or the
    time asked has passed: it says which are). Every path ever reported is kept, accepted or not.
    Safe to call from several threads (the actor runs its calls concurrently, so a wait holds no one up).

    The reports are not the whole list: a task cancelled or killed after writing a file and before
    ``add`` never reports it. The datasink finds such files by listing its write id's prefix
    (``LaminaDatasink.written_files``) once ``wait_for_tasks`` says no task still writes.
    """

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._paths: list[str] = []  # every path reported
        self._accepted = 0  # the first ``_accepted`` of ``_paths`` were reported before ``close``
        self._running: dict[str, tuple[str, int]] = {}  # task id -> (node id, process id) of a running task
        self._ended: set[str] = set()  # an ``end`` may overtake its ``begin``: the actor runs calls concurrently
        self._closed = False

    def begin(self, task: str, node_id: str, pid: int) -> bool:
        """Whether ``task`` (a fresh id) may write: False once the write is abandoned."""
        with self._changed:
            if self._closed:
                return False
            if task not in self._ended:
                self._running[task] = (node_id, pid)
            return True

    def add(self, paths: list[str]) -> bool:
        """Records ``paths``; False if the write was abandoned first (the files are not to be committed)."""
        with self._changed:
            self._paths.extend(paths)
            if self._closed:
                return False
            self._accepted = len(self._paths)
            return True

    def end(self, task: str) -> None:
        with self._changed:
            self._ended.add(task)
            self._running.pop(task, None)
            self._changed.notify_all()

    def forget(self, tasks: list[str]) -> None:
        """Stops waiting for ``tasks`` (their processes are gone)."""
        for task in tasks:
            self.end(task)

    def close(self) -> list[str]:
        """Ends registration; the paths accepted until now."""
        with self._changed:
            self._closed = True
            return self._paths[: self._accepted]

    def wait_for_tasks(self, timeout: float) -> dict[str, tuple[str, int]]:
        """The tasks still running after waiting up to ``timeout`` seconds for them all to end."""
        with self._changed:
            self._changed.wait_for(lambda: not self._running, timeout)
            return dict(self._running)

    def paths(self) -> list[str]:
        """Every path reported, accepted or not."""
        with self._changed:
            return list(self._paths)


def _process_gone(node_id: str, pid: int, alive_nodes: set[str]) -> bool:
    """Whether the worker process ``pid`` on ``node_id`` is known to be dead (only checkable on this node)."""
    if node_id not in alive_nodes:
        return True
    if node_id != ray.get_runtime_context().get_node_id():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


def align_types(block: pa.Table, schema: pa.Schema) -> pa.Table:
    """``block`` with each column whose type differs from the table's cast to it, where that loses
    nothing (Ray's ``map_batches`` turns fixed-size lists into tensors and int32 into int64); what
    does not cast is left for ``conform`` to refuse, naming the column."""
    for field in schema:
        i = block.schema.get_field_index(field.name)
        if i < 0 or block.schema.field(i).type.equals(field.type):
            continue
        try:
            column = pc.cast(block.column(i), field.type, safe=True)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
            continue
        block = block.set_column(i, pa.field(field.name, field.type, block.schema.field(i).nullable), column)
    return block


class LaminaDatasink(Datasink):
    """Writes a Ray Dataset into a Lamina table: tasks write data files, the driver commits once.

    Made by ``write_table``, which checks the URI, mode and schema first. ``result`` is the
    table at the version the write committed (None until then).
    """

    def __init__(
        self,
        uri: str,
        mode: str,
        *,
        schema: pa.Schema | None = None,
        storage_options: dict[str, Any] | None = None,
        max_rows_per_file: int | None = None,
        min_rows_per_write: int | None = None,
    ):
        if mode not in MODES:
            raise InvalidArgument(f"mode={mode!r} for table {uri}: use one of {', '.join(MODES)}")
        self.uri = uri
        self.mode = mode
        self.storage_options = storage_options
        self._min_rows = min_rows_per_write
        store = open_store(uri, storage_options)
        self.uri = store.uri
        self._explicit_schema = validate_schema(schema) if schema is not None else None
        latest = latest_version(store)
        self._base: Manifest | None = load_manifest(store, latest) if latest is not None else None
        #: The table at the URI was dropped: this write creates a new one after its tombstone, before
        #: any task writes (``create_now``), so that a drop still running cannot remove what they write.
        self.after_drop = self._base is not None and self._base.dropped
        if self.after_drop:
            self._base = None
        if self._base is not None:
            if self._explicit_schema is not None and mode == "append" and not self._explicit_schema.equals(self._base.schema):
                raise InvalidArgument(
                    f"schema= differs from the schema of table {self.uri}; an append keeps the "
                    f"table's schema (mode='overwrite' with schema= replaces it)"
                )
            # an append writes in the table's schema itself, field ids and all (docs/FORMAT.md §2.4): schema=
            # names its columns and types, which a table whose schema changed numbers otherwise than by position
            append = mode == "append" or self._explicit_schema is None
            self.schema = self._base.schema if append else self._explicit_schema
            config = self._base.config
        else:
            self.schema = self._explicit_schema  # None: write_table takes the dataset's
            config = {}
        self.options = WriteOptions.from_config(config, max_rows_per_file=max_rows_per_file)
        #: Starts the name of every data file this write's tasks write (``written_files`` lists them).
        self.write_id = secrets.token_hex(8)
        # Threads, so that the driver's wait for the tasks does not hold up the tasks' own calls.
        # ray's typed remote(**options) omits the actor options, max_concurrency among them
        self._files: Any = ray.remote(num_cpus=0, max_concurrency=64)(_WrittenFiles).remote()  # type: ignore[call-overload]
        self._settled = False  # the files' fate is decided (committed, removed, or unknown)
        self.result: Table | None = None

    def __getstate__(self) -> dict[str, Any]:
        """What a write task needs (not the base manifest nor the result)."""
        return {**self.__dict__, "_base": None, "result": None}

    # -- Ray Datasink interface (driver) -----------------------------------------
    def get_name(self) -> str:
        return "Lamina"

    @property
    def min_rows_per_write(self) -> int | None:
        return self._min_rows

    def write(self, blocks: Iterable[Block], ctx: Any) -> list[Fragment]:
        """One task: the blocks conformed to the table's schema, written as data files; their fragments.

        The task tells the file registry when it begins and ends, so a failed write can wait for it."""
        store = open_store(self.uri, self.storage_options)
        schema = self.schema
        if schema is None:
            raise InvalidArgument(f"writing to the new table {self.uri}: no schema known; pass schema=")
        task = uuid.uuid4().hex
        try:
            if not ray.get(self._files.begin.remote(task, ray.get_runtime_context().get_node_id(), os.getpid())):
                raise LaminaError(
                    f"writing to table {self.uri}: the write was abandoned (another task failed) "
                    f"before this task began; it wrote nothing"
                )
            return self._write_files(store, schema, blocks)
        finally:
            try:
                ray.get(self._files.end.remote(task))
            except Exception:  # the registry is gone: nobody waits for this task any more
                pass

    def _write_files(self, store: ObjectStore, schema: pa.Schema, blocks: Iterable[Block]) -> list[Fragment]:
        batches = itertools.chain.from_iterable(
            conform(align_types(BlockAccessor.for_block(b).to_arrow(), schema), schema) for b in blocks
        )
        try:
            # Removes its files on error; named with the write id, so that the driver finds them all the same
            # if this task is cancelled or killed before it reports them (on_write_failed).
            fragments = write_fragments(store, schema, batches, self.options, name_prefix=self.write_id)
        except LaminaError as e:
            raise _naming(e, self.uri, "writing to") from None
        paths = [f.path for f in fragments]
        try:
            accepted = ray.get(self._files.add.remote(paths))
        except BaseException:
            store.delete(paths)
            raise
        if not accepted:  # the write already failed elsewhere
            store.delete(paths)
            raise LaminaError(
                f"writing to table {self.uri}: the write was abandoned (another task failed); this task's files were removed"
            )
        return fragments

    def written_files(self, store: ObjectStore) -> list[str]:
        """Every data file on storage that this write's tasks wrote (named with its ``write_id``),
        reported or not, committed or not."""
        return [o.path for o in store.list(f"{DATA_DIR}{self.write_id}")]

    def on_write_complete(self, write_result: Any) -> None:
        """The one commit: Append or Overwrite of every task's fragments (a Create first if there is no table).

        Files of this write that are not committed (a retried task's first attempt, a task killed
        before it reported its files) are removed first."""
        fragments = [f for ret in write_result.write_returns for f in (ret or [])]
        paths = {f.path for f in fragments}
        store = open_store(self.uri, self.storage_options)
        registered = ray.get(self._files.close.remote())
        # Listed after close: a task still running now has its later files refused and removes them itself.
        found = dict.fromkeys([*registered, *self.written_files(store)])
        orphans = [p for p in found if p not in paths]
        if orphans:
            store.delete(orphans)
        try:
            self.result = self._commit(store, fragments)
        except CommitStateUnknown:
            self._settled = True  # it may have been written: keep the files
            raise
        except BaseException:
            store.delete(sorted(paths))
            self._settled = True
            raise
        self._settled = True

    def _commit(self, store: ObjectStore, fragments: list[Fragment]) -> Table:
        base, created = self._base, False
        if base is None:
            base, created = self._create(store)
            if created and not fragments:
                return Table(store, base, self.storage_options)
            if not created and self.mode == "append" and not base.schema.equals(self.schema):
                raise SchemaMismatch(
                    f"table {self.uri} was created by another writer during this append, with schema ({base.schema}) "
                    f"where this write has ({self.schema}); nothing was committed and this write's files are "
                    f"removed: append again in the table's schema, or overwrite it (mode='overwrite')"
                )
        txn: Overwrite | Append
        if self.mode == "overwrite":
            # Over this write's own empty create or over what a racing creator committed: the table holds
            # exactly these rows (in this write's schema if it meant to create the table).
            txn = Overwrite(base.version, fragments, self.schema if self._base is None else self._explicit_schema)
        elif not fragments:
            return Table(store, base, self.storage_options)
        else:
            txn = Append(base.version, fragments)
        return Table(store, commit(store, txn, base), self.storage_options)

    def create_now(self) -> None:
        """Creates the table before any task writes (over a dropped table's tombstone: ``TableExists`` while
        that drop has objects left to remove); the write then commits on it like on any existing table."""
        self._base, _ = self._create(open_store(self.uri, self.storage_options))

    def _create(self, store: ObjectStore) -> tuple[Manifest, bool]:
        """The table this write creates (True), or the version found if another writer created it first (False)."""
        if self.schema is None:
            raise InvalidArgument(f"cannot create table {self.uri} from an empty dataset without schema=")
        try:
            txn = Create(self.schema, config=self.options.to_config(), after=free_after(store))
            return commit(store, txn, txn.base), True
        except TableExists:
            latest = latest_version(store)
            found = load_manifest(store, latest) if latest is not None else None
            if found is None or found.dropped:  # created and dropped again meanwhile, or a drop not finished
                raise
            return found, False

    def on_write_failed(self, error: Exception) -> None:
        """Nothing is committed. No task may begin any more; the tasks still running are waited for
        (each removes its files when it learns the write was abandoned); then every file named with
        this write's id is removed, whether its task reported it or was cancelled or killed first,
        and every file any task reported."""
        if self._settled:
            return
        self._settled = True
        try:
            ray.get(self._files.close.remote())
            self._wait_for_tasks()
            store = open_store(self.uri, self.storage_options)
            reported = ray.get(self._files.paths.remote())
            store.delete(list(dict.fromkeys([*self.written_files(store), *reported])))
        except Exception as e:  # best effort: the write's own error is what the caller sees
            log.warning(
                "writing to table %s failed and its data files could not all be removed (%s); table.cleanup() removes them later",
                self.uri,
                e,
            )

    def _wait_for_tasks(self) -> None:
        """Returns once no write task is running: each ended, or its process died (the files it wrote
        before dying are found by ``written_files``), or after ``TASK_WAIT_SECONDS`` (files a task
        still running writes later are left for ``table.cleanup()``)."""
        running = ray.get(self._files.wait_for_tasks.remote(0.0))
        if not running:
            return
        log.info(
            "writing to table %s failed: waiting for %d write task(s) still running to end and remove their files",
            self.uri,
            len(running),
        )
        deadline = time.monotonic() + TASK_WAIT_SECONDS
        while running:
            alive_nodes = {n["NodeID"] for n in ray.nodes() if n.get("Alive")}
            gone = [t for t, (node, pid) in running.items() if _process_gone(node, pid, alive_nodes)]
            if gone:
                ray.get(self._files.forget.remote(gone))
            if time.monotonic() > deadline:
                log.warning(
                    "writing to table %s failed and %d of its write tasks still run; files they write later "
                    "are left for table.cleanup()",
                    self.uri,
                    len(running),
                )
                return
            running = ray.get(self._files.wait_for_tasks.remote(LIVENESS_CHECK_SECONDS))

    def close(self) -> None:
        """Stops the file registry actor."""
        ray.kill(self._files)


def dataset_schema(dataset: ray.data.Dataset, uri: str) -> pa.Schema:
    """The Arrow schema of ``dataset`` as a table schema (Ray runs the plan up to a first block if it must)."""
    found = dataset.schema(fetch_if_missing=True)
    base = getattr(found, "base_schema", found)
    if not isinstance(base, pa.Schema):
        raise InvalidArgument(
            f"cannot create table {uri}: the dataset's schema is not known as Arrow types ({found!r}); pass schema="
        )
    return validate_schema(base.remove_metadata())


def write_table(
    dataset: ray.data.Dataset,
    uri: str,
    *,
    mode: str = "append",
    schema: pa.Schema | None = None,
    storage_options: dict[str, Any] | None = None,
    max_rows_per_file: int | None = None,
    min_rows_per_write: int | None = None,
    **write_args: Any,
) -> Table:
    """Writes ``dataset`` into the Lamina table at ``uri`` and returns the table at the new version.

    ``mode="append"`` adds the rows; ``"overwrite"`` replaces every row (and the schema, given
    ``schema=``). A missing table is created (schema from ``schema=`` or the dataset). Ray tasks
    write the data files; the driver commits once, after every task succeeded. If any fails,
    nothing is committed, and ``write_table`` raises only once every task it started has ended
    (or its process died) and the files written are removed. ``write_args`` go to
    ``Dataset.write_datasink`` (``concurrency``, ``ray_remote_args``).

    When the table was missing at the start and another writer creates it before this write
    commits (the commit happens after every task ended):

    * ``"append"``: the rows are appended to the version found, next to the other writer's; if
      that table's schema differs, ``SchemaMismatch`` and nothing of this write is left.
    * ``"overwrite"``: an ``Overwrite`` over the version found: the table holds exactly this
      write's rows, in its schema. Two overwrites of a new table at once: each commits, the later
      one's rows are the table's (never both).

    >>> t = lamina.ray.write_table(ray.data.from_arrow(tbl), "/tmp/t", mode="overwrite")
    """
    if not isinstance(dataset, ray.data.Dataset):
        raise InvalidArgument(f"write_table writes a ray.data.Dataset into {uri!r}, not {type(dataset).__name__}")
    sink = LaminaDatasink(
        uri,
        mode,
        schema=schema,
        storage_options=storage_options,
        max_rows_per_file=max_rows_per_file,
        min_rows_per_write=min_rows_per_write,
    )
    try:
        if sink.schema is None:
            sink.schema = dataset_schema(dataset, sink.uri)
        if sink.after_drop:
            sink.create_now()
        dataset.write_datasink(sink, **write_args)
    finally:
        sink.close()
    assert sink.result is not None
    return sink.result


__all__ = [
    "read_table",
    "write_table",
    "from_table",
    "group_fragments",
    "align_types",
    "LaminaDatasource",
    "LaminaDatasink",
    "MODES",
]
