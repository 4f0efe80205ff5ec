"""DELETE and UPDATE rewrites on the driver (pyarrow), when the rows and values are computed exactly.

``dml`` finds the matched rows of each file on the driver when the condition is in the
exact subset (``row_level.inexact_reason``). When in addition every SET value is in the
exact subset of ``core.values`` and the table qualifies (``arrow_files.LocalTable``), the
files are rewritten here too, several at a time:

- DELETE, copy-on-write: each touched file again without its matched rows;
- UPDATE, copy-on-write: each touched file again with the matched rows' new values;
- UPDATE with deletion vectors: the new versions of the matched rows only (the old ones
  are then marked deleted by the caller).

Each output file stays in its input's directory with its partition values. A value that
would break a NOT NULL column, an integral overflow, an assignment to a partition column
or an unreadable file raises ``NotLocal`` after removing whatever was written: the caller
then runs the same operation on Spark, which reports errors in its own words.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Mapping, Sequence

from serialake.core import values as V
from serialake.core.actions import AddFile
from serialake.core.deletion_vectors import RowIndexSet
from serialake.core.snapshot import Snapshot
from serialake.spark import io
from serialake.spark.arrow_files import LocalTable, NotLocal, io_threads

__all__ = ["compile_assignments", "delete_rows", "update_rows"]

Job = tuple[AddFile, RowIndexSet]


def compile_assignments(snap: Snapshot, texts: Mapping[str, Any]) -> dict[str, V.Compiled] | None:
    """``{column: compiled value}`` when every value is a SQL string in the exact subset, else None.

    Keys are table column names (already resolved); partition columns cannot be assigned here
    (their rows would move to other directories).
    """
    parts = {c.lower() for c in snap.partition_columns}
    out: dict[str, V.Compiled] = {}

    def column_type(ref: V.Ref) -> str | None:
        if ref.qualifier is not None:
            return None
        f = snap.schema.field(ref.name)
        return V.kind_of_type(f.data_type) if f is not None else None

    for name, text in texts.items():
        f = snap.schema.field(name)
        if not isinstance(text, str) or f is None or name.lower() in parts:
            return None
        try:
            out[f.name] = V.compile_value(V.parse_value(text), column_type, V.kind_of_type(f.data_type) or "")
        except V.NotExact:
            return None
    return out


def delete_rows(local: LocalTable, touched: Sequence[Job]) -> list[AddFile]:
    """Copy-on-write DELETE: each file of ``touched`` rewritten without its matched (physical) rows."""
    import pyarrow as pa

    def rewrite(table: Any, matched: Any, add: AddFile) -> Any:
        return table.filter(pa.array(~matched))

    return _rewrite_each(local, touched, rewrite)


def update_rows(
    local: LocalTable, touched: Sequence[Job], assignments: Mapping[str, V.Compiled], *, only_changed: bool
) -> list[AddFile]:
    """UPDATE: each touched file with new values in its matched rows (``only_changed``: just those rows)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    snap = local.snap
    not_null = {f.name for f in snap.schema.fields if not f.nullable}

    def rewrite(table: Any, matched: Any, add: AddFile) -> Any:
        mask = pa.array(matched)
        hit = table.filter(mask)
        n = hit.num_rows
        columns = []
        for field in local.schema:
            old = table.column(field.name)
            compiled = assignments.get(field.name)
            if compiled is None:
                columns.append(hit.column(field.name) if only_changed else old)
                continue
            new = compiled.evaluate(lambda ref: _reference(local, hit, add, ref), n)
            if field.name in not_null and new.null_count:
                raise NotLocal(f"NULL for NOT NULL column {field.name}")
            if new.type != field.type:
                raise NotLocal(f"{field.name}: computed {new.type}, column is {field.type}")
            columns.append(new if only_changed else pc.replace_with_mask(old, mask, new))
        return pa.Table.from_arrays(columns, schema=local.schema)

    return _rewrite_each(local, touched, rewrite)


def _reference(local: LocalTable, rows: Any, add: AddFile, ref: V.Ref) -> Any:
    """A referenced column over ``rows``: a data column, or the file's partition value."""
    f = local.snap.schema.field(ref.name)
    assert f is not None
    value = local.partition_scalar(add, f.name)
    return rows.column(f.name) if value is None else value


def _rewrite_each(
    local: LocalTable, touched: Sequence[Job], rewrite: Callable[[Any, Any, AddFile], Any]
) -> list[AddFile]:
    """Read each touched file, ``rewrite(live rows, matched mask, add)``, write the result beside it."""
    import numpy as np

    if not touched:
        return []
    dirs = {add.path: local.rel_dir(add) for add, _ in touched}
    indexed = local.stats_columns()
    written: list[AddFile] = []
    with io.staging_area(local.path) as staging:

        def one(job: Job) -> AddFile | None:
            add, rows = job
            table, positions = local.read(add, positions=True)
            matched = np.isin(positions, rows.to_numpy().astype(np.int64), assume_unique=True)
            out = rewrite(table, matched, add)
            new = local.write(staging, out, dirs[add.path], add.partition_values or {}, data_change=True,
                              indexed=indexed)  # fmt: skip
            if new is not None:
                written.append(new)
            return new

        try:
            with ThreadPoolExecutor(min(io_threads(), len(touched))) as pool:
                list(pool.map(one, touched))
        except (NotLocal, V.NotExact) as e:
            local.discard(written)
            raise NotLocal(str(e)) from None
        except BaseException:
            local.discard(written)
            raise
    local.finish(written)
    return sorted(written, key=lambda a: a.path)

