"""DELETE and UPDATE on the driver (pyarrow), and the one loop that rewrites files there.

``engine`` runs these when the files are small enough; each raises ``NotExact`` (after
removing whatever it wrote) when the result would not be exactly Spark's, and the step
then runs on Spark:

- ``matching_rows``: the rows a condition in the exact subset (``row_eval.inexact_reason``)
  matches, reading only the condition's columns: no Spark job;
- ``compile_assignments``: SET values in the exact subset of ``core.values``;
- ``delete_rows``: copy-on-write DELETE, each touched file again without its matched rows;
- ``update_rows``: UPDATE, each touched file again with the matched rows' new values, or
  (deletion vectors) only the new versions of the matched rows;
- ``rewrite_files``: the loop all driver rewrites share (MERGE's too): read each touched
  file's live rows with their positions, compute its replacement, write it beside the
  input with the input's partition values (staged, renamed, fsynced), several files at a
  time; on any failure every file written is deleted.

A value that would break a NOT NULL column, an integral overflow, an assignment to a
partition column or an unreadable file is ``NotExact``: Spark then reports errors in its
own words.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from serialake.core import row_eval
from serialake.core import values as V
from serialake.core.actions import AddFile
from serialake.core.deletion_vectors import RowIndexSet
from serialake.core.expressions import Expr
from serialake.core.snapshot import Snapshot
from serialake.core.values import NotExact
from serialake.spark import io
from serialake.spark.dml.driver_files import DriverTable, io_threads

__all__ = [
    "check_not_null",
    "compile_assignments",
    "delete_rows",
    "matching_rows",
    "rewrite_files",
    "update_rows",
]

_Job = TypeVar("_Job")
# (live rows of the file, their physical positions, the file, the job) -> the file's replacement
Rewrite = Callable[[Any, Any, AddFile, _Job], Any]
# (staging directory, write(table, rel_dir, partition values)) -> extra files (e.g. MERGE's inserts)
Extra = Callable[[Callable[[Any, str, Mapping[str, str | None]], AddFile | None]], None]


def matching_rows(snap: Snapshot, files: Sequence[AddFile], exact: Expr) -> list[tuple[AddFile, RowIndexSet]]:
    """The live rows of each of ``files`` that ``exact`` matches (physical positions); NotExact if not here."""
    reader = row_eval.RowReader(snap.table_path, snap)
    return list(row_eval.scan_matching_rows(reader, files, exact, threads=io_threads()))


def compile_assignments(snap: Snapshot, texts: Mapping[str, Any]) -> dict[str, V.Compiled]:
    """``{column: compiled value}`` when every value is a SQL string in the exact subset, else NotExact.

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
            raise NotExact(f"the value of column {name}")
        out[f.name] = V.compile_value(V.parse_value(text), column_type, V.kind_of_type(f.data_type) or "")
    return out


def check_not_null(table: DriverTable, column: str, new: Any) -> None:
    """NULLs for a NOT NULL column: Spark refuses them in its own words."""
    f = table.snap.schema.field(column)
    if f is not None and not f.nullable and new.null_count:
        raise NotExact(f"NULL for NOT NULL column {column}")


def delete_rows(table: DriverTable, touched: Sequence[tuple[AddFile, RowIndexSet]]) -> list[AddFile]:
    """Copy-on-write DELETE: each file of ``touched`` rewritten without its matched (physical) rows."""
    import pyarrow as pa

    def rewrite(rows: Any, positions: Any, add: AddFile, matched: RowIndexSet) -> Any:
        return rows.filter(pa.array(~_isin(positions, matched)))

    return rewrite_files(table, touched, rewrite)


def update_rows(
    table: DriverTable,
    touched: Sequence[tuple[AddFile, RowIndexSet]],
    assignments: Mapping[str, V.Compiled],
    *,
    only_changed: bool,
) -> list[AddFile]:
    """UPDATE: each touched file with new values in its matched rows (``only_changed``: just those rows)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    def rewrite(rows: Any, positions: Any, add: AddFile, matched: RowIndexSet) -> Any:
        mask = pa.array(_isin(positions, matched))
        hit = rows.filter(mask)
        n = hit.num_rows
        columns = []
        for field in table.schema:
            old = rows.column(field.name)
            compiled = assignments.get(field.name)
            if compiled is None:
                columns.append(hit.column(field.name) if only_changed else old)
                continue
            new = compiled.evaluate(lambda ref: _reference(table, hit, add, ref), n)
            check_not_null(table, field.name, new)
            if new.type != field.type:
                raise NotExact(f"{field.name}: computed {new.type}, column is {field.type}")
            columns.append(new if only_changed else pc.replace_with_mask(old, mask, new))
        return pa.Table.from_arrays(columns, schema=table.schema)

    return rewrite_files(table, touched, rewrite)


def rewrite_files(
    table: DriverTable,
    jobs: Sequence[tuple[AddFile, _Job]],
    rewrite: Rewrite[_Job],
    *,
    extra: Extra | None = None,
) -> list[AddFile]:
    """Each job's file replaced by ``rewrite(live rows, positions, add, job)``, written beside it.

    ``extra(write)`` may write more files in the same staging area (``write(rows, rel_dir,
    partition values)``). Returns the new files, sorted by path (an empty result writes no
    file); nothing is committed. On any failure every file written is deleted; ``NotExact``
    keeps its reason.
    """
    if not jobs and extra is None:
        return []
    dirs = {add.path: table.rel_dir(add) for add, _ in jobs}  # NotExact for files outside the table
    indexed = table.stats_columns()
    written: list[AddFile] = []
    with io.staging_area(table.path) as staging:

        def write(rows: Any, rel_dir: str, partition_values: Mapping[str, str | None]) -> AddFile | None:
            new = table.write(staging, rows, rel_dir, partition_values, data_change=True, indexed=indexed)
            if new is not None:
                written.append(new)
            return new

        def one(job: tuple[AddFile, _Job]) -> None:
            add, data = job
            rows, positions = table.read(add, positions=True)
            write(rewrite(rows, positions, add, data), dirs[add.path], add.partition_values or {})

        try:
            if jobs:
                with ThreadPoolExecutor(min(io_threads(), len(jobs))) as pool:
                    list(pool.map(one, jobs))
            if extra is not None:
                extra(write)
        except BaseException:
            table.discard(written)
            raise
    table.finish(written)
    return sorted(written, key=lambda a: a.path)


def _isin(positions: Any, rows: RowIndexSet) -> Any:
    import numpy as np

    return np.isin(positions, rows.to_numpy().astype(np.int64), assume_unique=True)


def _reference(table: DriverTable, rows: Any, add: AddFile, ref: V.Ref) -> Any:
    """A referenced column over ``rows``: a data column, or the file's partition value."""
    f = table.snap.schema.field(ref.name)
    assert f is not None
    value = table.partition_scalar(add, f.name)
    return rows.column(f.name) if value is None else value
