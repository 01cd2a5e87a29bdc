"""Where tables live: locations compared normalized, and the rule that no table's location is, holds or
lies inside the catalog's own or another table's (so a purge removes only its own table's files)."""

from __future__ import annotations

import functools
import os

import pyarrow as pa

from lamina.catalog.schema import CATALOG_DIR
from lamina.errors import InvalidArgument


def location_key(uri: str) -> str:
    """A table location as compared for overlap: a local path made absolute, its ``.``/``..`` segments,
    symbolic links, doubled and trailing slashes resolved; an ``s3://`` URI without empty segments (doubled or
    trailing slashes; other segments are literal key text)."""
    if uri.startswith("s3://"):
        return "s3://" + "/".join(part for part in uri[len("s3://") :].split("/") if part)
    path = uri[len("file://") :] if uri.startswith("file://") else uri
    return os.path.realpath(os.path.expanduser(path))


@functools.lru_cache(maxsize=4096)
def _listed_key(uri: str) -> str:
    """``location_key`` of the root, the catalog's location or a registered table's location as the catalog
    lists it, remembered: every create's rewrite compares its location with each of them (a link changed after
    its table was registered is seen by the next process)."""
    return location_key(uri)


def overlap(a: str, b: str) -> str | None:
    """How location key ``a`` relates to ``b``: "is", "lies inside", "holds", or None (disjoint)."""
    if a == b:
        return "is"
    if a.startswith(b.rstrip("/") + "/"):
        return "lies inside"
    if b.startswith(a.rstrip("/") + "/"):
        return "holds"
    return None


def check_location(root: str, rows: pa.Table, ids: list[str], name: str, location: str) -> None:
    """Refuses (InvalidArgument) table ``name`` at ``location`` (a full URI) when it is, holds or lies inside the
    catalog's own location or the location of another table in ``rows`` (object ids ``ids``), created or
    registered: tables never share files, so a purge removes only its own table's. Runs in every create's
    rewrite: created tables' locations (relative to the root, as the catalog wrote them) are compared as
    text, without a call per row."""
    key = location_key(location)
    catalog = f"{root.rstrip('/')}/{CATALOG_DIR}"
    how = overlap(key, _listed_key(catalog))
    if how is not None:
        raise InvalidArgument(
            f"catalog {root}: table {name!r} cannot live at {location}: it {how} the catalog's own "
            f"location {catalog}; choose a location outside the catalog and every table it lists"
        )
    base = _listed_key(root).rstrip("/") + "/"
    locations, registered = rows.column("location").to_pylist(), rows.column("registered").to_pylist()
    hits = (
        [
            i
            for i, r in enumerate(registered)
            if r and locations[i] is not None and overlap(key, _listed_key(locations[i])) is not None
        ]
        if True in registered
        else []
    )
    if key.startswith(base):  # (one holding the root holds the catalog: refused above)
        relative = key[len(base) :]
        parts = relative.split("/")
        it_or_parents = {"/".join(parts[:n]) for n in range(1, len(parts) + 1)}
        below = relative + "/"
        # One substring search per candidate over every location, then a scan only when one may match.
        text = "\n" + "\n".join(filter(None, locations)) + "\n"
        if f"\n{below}" in text or any(f"\n{p}\n" in text for p in it_or_parents):
            hits += [
                i
                for i, (loc, r) in enumerate(zip(locations, registered))
                if not r and loc is not None and (loc in it_or_parents or loc.startswith(below))
            ]
    if hits:
        i = min(hits)
        where = locations[i] if registered[i] else f"{root.rstrip('/')}/{locations[i]}"
        how = overlap(key, _listed_key(where) if registered[i] else base + locations[i])
        raise InvalidArgument(
            f"catalog {root}: table {name!r} cannot live at {location}: it {how} the location "
            f"{where} of table {ids[i]!r}; tables never share files (a purge of one would remove "
            f"the other's): choose a location outside every table the catalog lists"
        )
