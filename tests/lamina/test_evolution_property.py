"""Random sequences of appends, deletes, merges, updates, compactions and schema changes (add, drop,
rename, widen, nested rename; names dropped and added again) give, at every version, exactly what a
pure-Python model gives: every column, through ``to_arrow``, filters with and without indices, ``take``,
and time travel to every earlier version.

The model keeps rows by key, columns by a field id of its own, so a renamed column keeps its values, a
dropped one loses them and a name added again starts empty (or at its default). A failure prints the seed
and the step; ``LAMINA_EVOLUTION_SEEDS=a-b`` runs other seeds.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

import lamina
from lamina.compaction import CompactionSummary, commit_results
from lamina.planner import CompactionOptions, plan_compaction
from lamina.workers.compaction import GroupCompactor, tasks_for

NAMES = ["a", "b", "c", "d", "e"]  # a small pool: names are dropped and added again
TYPES = {"int32": pa.int32(), "int64": pa.int64(), "float32": pa.float32(), "float64": pa.float64(), "string": pa.string()}
WIDER = {"int32": "int64", "float32": "float64", "string": "large_string"}
STEPS = 36


@dataclass
class Column:
    uid: int  # the model's own id: survives renames, never reused
    name: str
    kind: str  # a key of TYPES, or "large_string", or "struct"


@dataclass
class Model:
    columns: list[Column]
    rows: dict[int, dict[int, Any]] = field(default_factory=dict)  # key -> column uid -> value
    next_uid: int = 0

    def names(self) -> list[str]:
        return ["key"] + [c.name for c in self.columns]

    def table(self) -> list[dict[str, Any]]:
        out = []
        for key in sorted(self.rows):
            row = {"key": key}
            for c in self.columns:
                row[c.name] = self.rows[key].get(c.uid)
            out.append(row)
        return out

    def copy(self) -> Model:
        return Model(
            [Column(c.uid, c.name, c.kind) for c in self.columns], {k: dict(v) for k, v in self.rows.items()}, self.next_uid
        )


def _arrow_type(kind: str) -> pa.DataType:
    if kind == "large_string":
        return pa.large_string()
    if kind == "struct":
        return pa.struct([("x", pa.int16()), ("y", pa.string())])
    return TYPES[kind]


def _value(rng: np.random.Generator, kind: str) -> Any:
    if rng.random() < 0.2:
        return None
    if kind in ("int32", "int64"):
        return int(rng.integers(-50, 50))
    if kind in ("float32", "float64"):
        return float(rng.integers(-40, 40)) / 2  # exact in float32
    if kind == "struct":
        return {"x": int(rng.integers(-9, 9)), "y": str(rng.integers(0, 5))}
    return f"s{int(rng.integers(0, 8))}"


class Scene:
    def __init__(self, uri: str, seed: int):
        self.rng = np.random.default_rng(seed)
        self.seed = seed
        schema = pa.schema([("key", pa.int64()), ("a", pa.int32()), ("b", pa.string()), ("s", _arrow_type("struct"))])
        self.t = lamina.create_table(uri, schema)
        self.model = Model([Column(0, "a", "int32"), Column(1, "b", "string"), Column(2, "s", "struct")], next_uid=3)
        self.struct_field = "x"  # the struct's first field's current name
        self.next_key = 0
        self.history: list[tuple[int, Model, str]] = [(self.t.version, self.model.copy(), self.struct_field)]
        self.t.create_index("key", "btree")

    # -- data ------------------------------------------------------------------------------------
    def _rows(self, keys: list[int]) -> pa.Table:
        schema = self.t.schema
        cols: dict[str, list[Any]] = {"key": keys}
        for c in self.model.columns:
            values = [_value(self.rng, c.kind) for _ in keys]
            if c.kind == "struct":
                values = [None if v is None else {self.struct_field: v["x"], "y": v["y"]} for v in values]
            cols[c.name] = values
        return pa.table({n: pa.array(cols[n], type=schema.field(n).type) for n in schema.names}, schema=schema)

    def _remember(self, table: pa.Table) -> None:
        for row in table.to_pylist():
            stored = {}
            for c in self.model.columns:
                v = row[c.name]
                if c.kind == "struct" and v is not None:
                    v = {"x": v[self.struct_field], "y": v["y"]}
                stored[c.uid] = v
            self.model.rows[row["key"]] = stored

    def append(self) -> str:
        n = int(self.rng.integers(1, 40))
        keys = list(range(self.next_key, self.next_key + n))
        self.next_key += n
        data = self._rows(keys)
        self.t.append(data)
        self._remember(data)
        return f"append {n}"

    def delete(self) -> str:
        lo = int(self.rng.integers(0, max(1, self.next_key)))
        hi = lo + int(self.rng.integers(1, 15))
        self.t.delete(f"key >= {lo} AND key < {hi}")
        self.model.rows = {k: v for k, v in self.model.rows.items() if not lo <= k < hi}
        return f"delete [{lo}, {hi})"

    def merge(self) -> str:
        live = sorted(self.model.rows)
        matched = list(self.rng.choice(live, size=min(len(live), 5), replace=False)) if live else []
        new = list(range(self.next_key, self.next_key + 5))
        self.next_key += 5
        keys = sorted(int(k) for k in matched) + new
        data = self._rows(keys)
        got = self.t.merge(data, on="key").when_matched_update().when_not_matched_insert().execute()
        assert (got.updated, got.inserted) == (len(matched), len(new)), got
        self._remember(data)
        return f"merge {len(matched)} matched, {len(new)} new"

    def update(self) -> str:
        plain = [c for c in self.model.columns if c.kind != "struct"]
        if not plain or not self.model.rows:
            return self.append()
        c = plain[int(self.rng.integers(0, len(plain)))]
        lo = int(self.rng.integers(0, max(1, self.next_key)))
        hi = lo + int(self.rng.integers(1, 20))
        hit = [k for k in self.model.rows if lo <= k < hi]
        if c.kind in ("int32", "int64") and self.rng.random() < 0.5:
            n = self.t.update(f"key >= {lo} AND key < {hi}", expressions={c.name: f"{c.name} + 1"})
            for k in hit:
                v = self.model.rows[k].get(c.uid)
                self.model.rows[k][c.uid] = None if v is None else v + 1
        else:
            v = _value(self.rng, c.kind)
            n = self.t.update(f"key >= {lo} AND key < {hi}", values={c.name: v})
            for k in hit:
                self.model.rows[k][c.uid] = v
        assert n == len(hit), (n, len(hit))
        return f"update {c.name} on [{lo}, {hi}): {n} rows"

    def compact(self) -> str:
        """A compaction pass; every other one converges (re-encodes every fragment of an earlier schema)."""
        converge = bool(self.rng.random() < 0.5)
        options = CompactionOptions(target_rows_per_fragment=64, converge_schemas=converge)
        plan = plan_compaction(self.t.manifest, options, self.t.uri)
        tasks = tasks_for(plan, self.t.manifest, self.t.uri, None, self.t.write_options, options.read_batch_bytes)
        results = [GroupCompactor().run(task) for task in tasks]
        assert all(r.ok for r in results), [r.error for r in results]
        commit_results(self.t, self.t.manifest, results, CompactionSummary.for_plan(plan))
        self.t.reload()
        if converge and all(r.ok for r in results) and self.t.version == plan.read_version + 1:
            assert {f.schema_id for f in self.t.manifest.fragments} <= {self.t.manifest.schema_id}, "converged"
        return f"compact {len(plan.groups)} groups{' (converge)' if converge else ''}"

    # -- schema ----------------------------------------------------------------------------------
    def _free_names(self) -> list[str]:
        used = set(self.model.names())
        return [n for n in NAMES if n not in used]

    def add(self) -> str:
        free = self._free_names()
        if not free:
            return self.drop()
        name = free[int(self.rng.integers(0, len(free)))]
        kind = list(TYPES)[int(self.rng.integers(0, len(TYPES)))]
        default = _value(self.rng, kind) if self.rng.random() < 0.5 else None
        self.t.add_columns(pa.field(name, TYPES[kind]), defaults={name: default} if default is not None else None)
        c = Column(self.model.next_uid, name, kind)
        self.model.next_uid += 1
        self.model.columns.append(c)
        for row in self.model.rows.values():
            row[c.uid] = default
        return f"add {name}: {kind} default {default!r}"

    def drop(self) -> str:
        if len(self.model.columns) < 2:
            return self.add()
        c = self.model.columns[int(self.rng.integers(0, len(self.model.columns)))]
        self.t.drop_columns([c.name])
        self.model.columns.remove(c)
        for row in self.model.rows.values():
            row.pop(c.uid, None)
        return f"drop {c.name}"

    def rename(self) -> str:
        free = self._free_names()
        if not free or not self.model.columns:
            return self.drop()
        c = self.model.columns[int(self.rng.integers(0, len(self.model.columns)))]
        new = free[int(self.rng.integers(0, len(free)))]
        self.t.rename_column(c.name, new)
        old, c.name = c.name, new
        return f"rename {old} -> {new}"

    def alter(self) -> str:
        widenable = [c for c in self.model.columns if c.kind in WIDER]
        struct = next((c for c in self.model.columns if c.kind == "struct"), None)
        if struct is not None and self.rng.random() < 0.3:
            new = "x2" if self.struct_field == "x" else "x"
            self.t.rename_column(f"{struct.name}.{self.struct_field}", new)
            self.struct_field = new
            return f"rename {struct.name}.x -> {new}"
        if not widenable:
            return self.add()
        c = widenable[int(self.rng.integers(0, len(widenable)))]
        self.t.alter_column(c.name, _arrow_type(WIDER[c.kind]))
        c.kind = WIDER[c.kind]
        return f"alter {c.name} to {c.kind}"

    # -- checks ----------------------------------------------------------------------------------
    def expected(self, model: Model, struct_field: str) -> list[dict[str, Any]]:
        out = []
        for row in model.table():
            for c in model.columns:
                if c.kind == "struct" and row[c.name] is not None:
                    row[c.name] = {struct_field: row[c.name]["x"], "y": row[c.name]["y"]}
            out.append(row)
        return out

    def check(self, where: str) -> None:
        t = self.t
        want = self.expected(self.model, self.struct_field)
        got = t.to_arrow()
        assert got.schema.names == self.model.names(), where
        assert got.sort_by("key").to_pylist() == want, where
        for c in self.model.columns:
            typ = pa.struct([(self.struct_field, pa.int16()), ("y", pa.string())]) if c.kind == "struct" else _arrow_type(c.kind)
            assert t.schema.field(c.name).type == typ, (where, c)
        lo = int(self.rng.integers(0, max(1, self.next_key)))
        flt = f"key >= {lo} AND key < {lo + 25}"
        subset = [r for r in want if lo <= r["key"] < lo + 25]
        for use_index in (True, False):
            assert t.to_arrow(filter=flt, use_index=use_index).sort_by("key").to_pylist() == subset, (where, flt)
        plain = [c for c in self.model.columns if c.kind != "struct"]
        if plain:
            c = plain[int(self.rng.integers(0, len(plain)))]
            values = [r[c.name] for r in want if r[c.name] is not None]
            probes = [(f"{c.name} IS NULL", lambda v: v is None)]
            if values:
                v = values[int(self.rng.integers(0, len(values)))]
                lit = f"'{v}'" if isinstance(v, str) else repr(v)
                probes.append((f"{c.name} = {lit}", lambda x, v=v: x == v))
            for text, test in probes:
                expect = [r for r in want if test(r[c.name])]
                for use_index in (True, False):
                    rows = t.to_arrow(filter=text, use_index=use_index).sort_by("key").to_pylist()
                    assert rows == expect, (where, text, use_index)
        if want:
            addressed = t.to_arrow(columns=["key"], with_row_address=True)
            pick = self.rng.choice(addressed.num_rows, size=min(5, addressed.num_rows), replace=False)
            addrs = [addressed.column("_rowaddr")[int(i)].as_py() for i in pick]
            keys = [addressed.column("key")[int(i)].as_py() for i in pick]
            taken = t.take(addrs).to_pylist()
            by_key = {r["key"]: r for r in want}
            assert taken == [by_key[k] for k in keys], where

    def check_history(self) -> None:
        """Every version read again (time travel): its schema's names and every column of every row."""
        for version, model, struct_field in self.history:
            old = self.t.checkout(version)
            got = old.to_arrow()
            assert got.schema.names == model.names(), version
            assert got.sort_by("key").to_pylist() == self.expected(model, struct_field), version


def _seeds() -> list[int]:
    raw = os.environ.get("LAMINA_EVOLUTION_SEEDS")
    if raw:
        a, b = raw.split("-")
        return list(range(int(a), int(b) + 1))
    return [1, 2, 3]


@pytest.mark.parametrize("seed", _seeds())
def test_random_changes_match_the_model(tmp_path, seed):
    s = Scene(str(tmp_path / "t"), seed)
    ops = [s.append] * 4 + [s.delete, s.merge, s.update, s.compact, s.add, s.drop, s.rename, s.alter, s.add]
    s.append()
    for step in range(STEPS):
        op = ops[int(s.rng.integers(0, len(ops)))]
        what = op()
        s.history.append((s.t.version, s.model.copy(), s.struct_field))
        if step == STEPS // 3:
            plain = [c.name for c in s.model.columns if c.kind != "struct"]
            if plain:
                s.t.create_index(plain[0], "bitmap" if s.rng.random() < 0.5 else "btree", name="other")
        s.check(f"seed {seed} step {step}: {what}")
    s.check_history()
