"""Reading and writing a table's data files on the driver with pyarrow (no Spark job).

Small operations spend most of a Spark job's time in scheduling, planning and task start
up: OPTIMIZE of a few small files, DELETE / UPDATE / MERGE touching a few hundred MB. For
those, the driver reads the touched files with pyarrow (several at a time: pyarrow
releases the GIL), computes the new rows, and writes Parquet files that are published
exactly like Spark's (staged under ``_staging``, renamed into the table, fsynced, stats
from the footer). On an ``s3://`` table (``storage.datafiles``) files are read as objects
and each new file is written once, straight to its final unique name (S3 has no rename, and
an object is visible whole or not at all): no staging area.

- ``DriverTable``: a snapshot's data files as Arrow tables (live rows, partition values,
  new files published);
- ``matching_rows``: the rows a condition in the exact subset (``row_eval.inexact_reason``)
  matches, reading only the condition's columns;
- ``rewrite_files``: the one loop every driver rewrite goes through (DELETE, UPDATE,
  MERGE): read each touched file's live rows with their positions, compute its
  replacement, write it beside the input with the input's partition values, several files
  at a time; on any failure every file written is deleted. On a table recording change
  data (``rewrite_files_with_changes``) each rewrite also gives its change rows, written
  under ``_change_data/`` with the same partition values.

``DriverTable.open`` says whether a table qualifies: only columns whose Arrow type reads
back in Spark as the table type (no nested, interval, variant or
timestamp columns whose time zone handling differs), no generated or identity columns,
no CHECK constraints, data files inside the table directory. Anything else raises
``NotExact`` (``core.predicates.values``); the engine then runs the step on Spark, which handles
everything.
"""

from __future__ import annotations

import dataclasses
import os
import posixpath
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

from serialake.core.dv.deletion_vectors import RowIndexSet, read_deletion_vector
from serialake.core.log import cdf as core_cdf
from serialake.core.log.snapshot import Snapshot
from serialake.core.model import column_mapping as cm
from serialake.core.model import constraints, uniform
from serialake.core.model.actions import AddCDCFile, AddFile, decode_path, encode_path
from serialake.core.model.paths import absolute_path
from serialake.core.model.schema import StructField, StructType, physical_name
from serialake.core.model.stats import stats_columns
from serialake.core.model.types import arrow_type
from serialake.core.predicates import row_eval
from serialake.core.predicates.expressions import Expr
from serialake.core.predicates.values import NotExact
from serialake.spark.columns import WRITE_SIDE_METADATA, column_mapping_mode, data_fields
from serialake.spark.footer_stats import file_stats
from serialake.spark.partition_values import typed_partition_value
from serialake.spark.staging import data_write_error, fsync_dirs, publish_staged, staging_area
from serialake.storage.datafiles import Access, is_remote

__all__ = [
    "DriverTable",
    "check_not_null",
    "io_threads",
    "isin_rows",
    "matching_rows",
    "rewrite_files",
    "rewrite_files_with_changes",
]


def io_threads() -> int:
    """Files read or written at once on the driver (pyarrow releases the GIL while it works)."""
    return max(2, min(8, os.cpu_count() or 2))


@dataclass(frozen=True)
class DriverTable:
    """A snapshot's data files as Arrow tables: read live rows, write new files."""

    snap: Snapshot
    stored: tuple[StructField, ...]  # the columns data files hold (not the partition columns)
    schema: Any  # pyarrow schema of ``stored``, in table types
    # Column mapping: table name -> name in the files (physical), for the stored and partition columns.
    physical: Mapping[str, str] = dataclasses.field(default_factory=dict)
    compat: bool = False  # IcebergCompatV2: files hold the partition columns too, and are tagged

    @staticmethod
    def open(snap: Snapshot) -> DriverTable:
        """The table, when its files can be read and written here exactly (see module docstring).

        ``NotExact`` otherwise.
        """
        import pyarrow as pa

        if constraints.check_constraints(snap.configuration):
            raise NotExact("CHECK constraints")
        for f in snap.schema.fields:
            if any(k.startswith(WRITE_SIDE_METADATA) for k in f.metadata):
                raise NotExact(f"generated or identity column {f.name}")
        stored = tuple(data_fields(snap.schema, snap.partition_columns))
        fields = []
        for f in stored:
            t = arrow_type(f.data_type)
            if t is None:
                raise NotExact(f"column {f.name} of type {f.data_type}")
            fields.append(pa.field(f.name, t, nullable=True))
        physical: dict[str, str] = {}
        if column_mapping_mode(snap) != "none":
            physical = {f.name: physical_name(f) for f in snap.schema.fields}
        compat = uniform.compat_v2(snap.configuration)
        return DriverTable(snap, stored, pa.schema(fields), physical, compat)

    @property
    def path(self) -> str:
        return self.snap.table_path

    @property
    def remote(self) -> bool:
        """Whether the table's files are S3 objects (else local files)."""
        return is_remote(self.path)

    @contextmanager
    def staging(self) -> Iterator[str | None]:
        """Where ``write`` stages files: ``staging_area`` locally; None on S3 (nothing is staged)."""
        if self.remote:
            yield None
            return
        with staging_area(self.path) as staging:
            yield staging

    def rel_dir(self, add: AddFile) -> str:
        """The directory of ``add`` inside the table; NotExact for files elsewhere."""
        if "://" in add.path or add.path.startswith(("file:", "/")):
            raise NotExact(f"{add.path}: not a relative path")
        rel = posixpath.dirname(decode_path(add.path))
        if rel.startswith("..") or "/../" in f"/{rel}/":
            raise NotExact(f"{add.path}: outside the table")
        return rel

    def read(
        self, add: AddFile, *, positions: bool = False, columns: Sequence[str] | None = None
    ) -> tuple[Any, Any]:
        """The live rows of ``add`` in table types, and (if ``positions``) their physical row numbers.

        ``columns`` (stored column names, table spelling) reads only those; by default all of
        ``schema``. Columns the file lacks (added later) are NULL; a column stored under another
        type is cast when the cast is exact, else NotExact.
        """
        import numpy as np
        import pyarrow as pa
        import pyarrow.parquet as pq

        path = absolute_path(self.path, add.path)
        schema = self.schema if columns is None else pa.schema([self.schema.field(c) for c in columns])
        if self.physical:  # column mapping: read by physical names, shown under the table's names
            shown = schema
            schema = pa.schema([f.with_name(self.physical.get(f.name, f.name)) for f in shown])
        try:
            if is_remote(path):
                # In memory when small (one GET), else read by ranges (``Access.open_parquet``).
                source = Access().open_parquet(path)
                small = isinstance(source, pa.Buffer)
                parquet = pq.ParquetFile(source)
                stored = set(parquet.schema_arrow.names)
                data = parquet.read(columns=[c for c in schema.names if c in stored], use_threads=not small)
                n = parquet.metadata.num_rows
            else:
                with pa.OSFile(path) as f:
                    small = f.size() <= (8 << 20)
                    # A small file: one read into memory, decoded in this thread. ``pq.read_table``
                    # (the dataset layer, pre-buffering on Arrow's I/O threads) costs ~0.5 ms more a
                    # file: most of the time when compacting or scanning many small files.
                    parquet = pq.ParquetFile(f.read_buffer() if small else path)
                    stored = set(parquet.schema_arrow.names)
                    data = parquet.read(columns=[c for c in schema.names if c in stored], use_threads=not small)
                    n = parquet.metadata.num_rows
        except (OSError, pa.ArrowException) as e:
            raise NotExact(f"{add.path}: {e}") from None
        arrays = []
        for field in schema:
            if field.name in data.column_names:
                col = data.column(field.name)
                if col.type != field.type:
                    try:
                        col = col.cast(field.type, safe=True)
                    except (pa.ArrowException, ValueError):
                        raise NotExact(f"{add.path}: column {field.name} is {col.type}") from None
            elif any(name.lower() == field.name.lower() for name in stored):
                raise NotExact(f"{add.path}: column {field.name} stored under another case")
            else:
                col = pa.nulls(n, field.type)  # added after this file was written
            arrays.append(col)
        table = pa.Table.from_arrays(arrays, schema=schema) if arrays else data.select([])
        if self.physical:
            table = table.rename_columns(shown.names)
        rows = np.arange(n, dtype=np.int64) if positions else None
        if add.deletion_vector is not None:
            deleted = read_deletion_vector(self.path, add.deletion_vector).to_numpy().astype(np.int64)
            keep = np.ones(n, dtype=bool)
            keep[deleted[deleted < n]] = False
            table = table.filter(pa.array(keep))
            if rows is not None:
                rows = rows[keep]
        return table, rows

    def changes(self, rows: Any, kind: str) -> Any:
        """``rows`` (exactly ``schema``) as change rows: ``_change_type`` = ``kind`` added."""
        import pyarrow as pa

        return rows.append_column(
            pa.field(core_cdf.CHANGE_TYPE, pa.string()), pa.repeat(pa.scalar(kind, pa.string()), rows.num_rows)
        )

    def partition_scalar(self, add: AddFile, column: str) -> Any:
        """The value of partition ``column`` in ``add`` as a typed Arrow scalar; None if not a partition column."""
        import pyarrow as pa

        part = next((p for p in self.snap.partition_columns if p.lower() == column.lower()), None)
        if part is None:
            return None
        f = self.snap.schema.field(part)
        t = arrow_type(f.data_type) if f is not None else None
        if f is None or t is None:
            raise NotExact(f"partition column {part}")
        raw = next((v for k, v in (add.partition_values or {}).items() if k.lower() == part.lower()), None)
        return pa.scalar(typed_partition_value(raw, f.data_type, table=self.path, column=part), t)

    def stats_columns(self) -> list[tuple[tuple[str, ...], Any]]:
        stored = StructType(self.stored)
        return stats_columns(cm.physical_schema(stored) if self.physical else stored, self.snap.configuration)

    def _as_stored(self, table: Any, partition_values: Mapping[str, str | None]) -> Any:
        """``table`` (table names) as written to a column-mapped table's files: physical names, field
        ids, and (IcebergCompatV2) the partition columns, from ``partition_values``."""
        import pyarrow as pa

        fields = {f.name: f for f in self.snap.schema.fields}
        if self.compat:
            for name in self.snap.partition_columns:
                f = fields[name]
                t = arrow_type(f.data_type)
                if t is None:
                    raise NotExact(f"partition column {name}")
                raw = partition_values.get(self.physical[name])
                value = typed_partition_value(raw, f.data_type, table=self.path, column=name)
                table = table.append_column(pa.field(name, t), pa.repeat(pa.scalar(value, t), table.num_rows))
        by_column = [fields.get(c) for c in table.column_names]  # None: not a table column (_change_type)
        table = table.rename_columns([self.physical.get(c, c) for c in table.column_names])
        return table.cast(cm.arrow_with_field_ids(table.schema, by_column))

    def write(
        self,
        staging: str | None,
        table: Any,
        rel_dir: str,
        partition_values: Mapping[str, str | None],
        *,
        data_change: bool,
        indexed: list[tuple[tuple[str, ...], Any]] | None = None,
    ) -> AddFile | None:
        """Write ``table`` (exactly ``self.schema``) as one data file in ``rel_dir``; None if empty.

        Locally the file is staged in ``staging`` (from ``staging()``), renamed into the table
        and fsynced; its directory is fsynced by ``finish``. On S3 (``staging`` None) it is
        written once as a new object under its final unique name.
        """
        import pyarrow.parquet as pq

        if table.num_rows == 0:
            return None
        indexed = indexed or self.stats_columns()
        if self.physical:
            table = self._as_stored(table, partition_values)
        if staging is None:
            if not self.remote:
                raise ValueError(f"Table {self.path}: a local write needs a staging area")
            add: AddFile | None = self._put_object(table, rel_dir, partition_values, indexed, data_change)
        else:
            name = f"{uuid.uuid4().hex}.snappy.parquet"
            target = os.path.join(staging, rel_dir, name)
            try:
                os.makedirs(os.path.join(staging, rel_dir), exist_ok=True)
                pq.write_table(table, target, compression="snappy")
                add = publish_staged(self.path, staging, rel_dir, name, dict(partition_values), indexed, data_change)
            except OSError as e:
                try:
                    os.remove(target)
                except OSError:
                    pass
                raise data_write_error(self.path, target, e) from e
        if add is not None and self.compat:  # written for IcebergCompatV2: tagged, as Delta's writers do
            add = dataclasses.replace(add, tags={**(add.tags or {}), uniform.COMPAT_TAG: uniform.COMPAT_VERSION})
        return add

    def _put_object(
        self,
        table: Any,
        rel_dir: str,
        partition_values: Mapping[str, str | None],
        indexed: list[tuple[tuple[str, ...], Any]],
        data_change: bool,
    ) -> AddFile:
        """``table`` as a new S3 object ``<table>/<rel_dir>/part-<uuid>.c000.snappy.parquet``: one
        upload, visible only once complete; stats from the footer written, size and time from S3."""
        import pyarrow.parquet as pq

        name = f"part-{uuid.uuid4()}.c000.snappy.parquet"
        rel_path = posixpath.join(rel_dir, name) if rel_dir else name
        target = f"{self.path}/{rel_path}"
        files = Access()
        try:
            with files.create(target) as sink:
                writer = pq.ParquetWriter(sink, table.schema, compression="snappy")
                try:
                    writer.write_table(table)
                finally:
                    writer.close()
            metadata = writer.writer.metadata
            try:
                size, mtime = files.status(target)
            except OSError:
                files.delete(target)
                raise
        except OSError as e:
            raise data_write_error(self.path, target, e) from e
        return AddFile(
            path=encode_path(rel_path),
            partition_values=dict(partition_values),
            size=size,
            modification_time=mtime,
            data_change=data_change,
            stats=file_stats(metadata, indexed),
        )

    def discard(self, adds: Sequence[AddFile]) -> None:
        """Delete files written for an operation that will not commit them."""
        if self.remote:
            files = Access()
            for add in adds:
                try:
                    files.delete(absolute_path(self.path, add.path))
                except OSError:
                    pass
            return
        for add in adds:
            try:
                os.remove(absolute_path(self.path, add.path))
            except OSError:
                pass

    def finish(self, adds: Sequence[AddFile]) -> None:
        """fsync the directories that received ``adds`` (on failure they are deleted: nothing commits them).

        Nothing to do on S3: an object is durable once its upload returns."""
        if self.remote:
            return
        try:
            fsync_dirs(self.path, {posixpath.dirname(decode_path(a.path)) for a in adds})
        except OSError as e:
            self.discard(adds)
            raise data_write_error(self.path, e.filename or self.path, e) from e


_Job = TypeVar("_Job")
# (live rows of the file, their physical positions, the file, the job) -> the file's replacement
Rewrite = Callable[[Any, Any, AddFile, _Job], Any]
# the same -> (the file's replacement, its change rows or None)
RewriteWithChanges = Callable[[Any, Any, AddFile, _Job], tuple[Any, Any]]
# write(rows, rel_dir, partition values) -> extra files written beside the rewrites (e.g. MERGE's inserts)
Extra = Callable[[Callable[[Any, str, Mapping[str, str | None]], AddFile | None]], None]


def matching_rows(snap: Snapshot, files: Sequence[AddFile], exact: Expr) -> list[tuple[AddFile, RowIndexSet]]:
    """The live rows of each of ``files`` that ``exact`` matches (physical positions); NotExact if not here."""
    reader = row_eval.RowReader(snap.table_path, snap)
    return list(row_eval.scan_matching_rows(reader, files, exact, threads=io_threads()))


def check_not_null(table: DriverTable, column: str, new: Any) -> None:
    """NULLs for a NOT NULL column: Spark refuses them in its own words."""
    f = table.snap.schema.field(column)
    if f is not None and not f.nullable and new.null_count:
        raise NotExact(f"NULL for NOT NULL column {column}")


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
    adds, _ = _rewrite(table, jobs, lambda rows, positions, add, job: (rewrite(rows, positions, add, job), None), extra)
    return adds


def rewrite_files_with_changes(
    table: DriverTable,
    jobs: Sequence[tuple[AddFile, _Job]],
    rewrite: RewriteWithChanges[_Job],
    *,
    extra: Extra | None = None,
) -> tuple[list[AddFile], list[AddCDCFile]]:
    """``rewrite_files`` where ``rewrite`` returns ``(replacement, change rows)``: the change rows
    (``DriverTable.changes``) are written as change data files, under ``_change_data/`` in
    the input's partition directory, with its partition values. Returns both kinds of files.
    """
    return _rewrite(table, jobs, rewrite, extra)


def _rewrite(
    table: DriverTable,
    jobs: Sequence[tuple[AddFile, _Job]],
    rewrite: RewriteWithChanges[_Job],
    extra: Extra | None,
) -> tuple[list[AddFile], list[AddCDCFile]]:
    if not jobs and extra is None:
        return [], []
    dirs = {add.path: table.rel_dir(add) for add, _ in jobs}  # NotExact for files outside the table
    indexed = table.stats_columns()
    written: list[AddFile] = []
    changed: list[AddFile] = []
    with table.staging() as staging:

        def write(rows: Any, rel_dir: str, partition_values: Mapping[str, str | None]) -> AddFile | None:
            new = table.write(staging, rows, rel_dir, partition_values, data_change=True, indexed=indexed)
            if new is not None:
                written.append(new)
            return new

        def one(job: tuple[AddFile, _Job]) -> None:
            add, data = job
            rows, positions = table.read(add, positions=True)
            replacement, changes = rewrite(rows, positions, add, data)
            write(replacement, dirs[add.path], add.partition_values or {})
            if changes is not None and changes.num_rows:
                rel = posixpath.join(core_cdf.CHANGE_DATA_DIR, dirs[add.path]).rstrip("/")
                new = table.write(staging, changes, rel, add.partition_values or {}, data_change=False, indexed=indexed)
                if new is not None:
                    changed.append(new)

        try:
            if jobs:
                with ThreadPoolExecutor(min(io_threads(), len(jobs))) as pool:
                    list(pool.map(one, jobs))
            if extra is not None:
                extra(write)
        except BaseException:
            table.discard([*written, *changed])
            raise
    table.finish([*written, *changed])
    cdc = [
        AddCDCFile(path=a.path, partition_values=dict(a.partition_values or {}), size=a.size or 0, data_change=False)
        for a in sorted(changed, key=lambda a: a.path)
    ]
    return sorted(written, key=lambda a: a.path), cdc


def isin_rows(positions: Any, rows: RowIndexSet) -> Any:
    """A numpy mask: which of ``positions`` (physical row numbers) are in ``rows``."""
    import numpy as np

    return np.isin(positions, rows.to_numpy().astype(np.int64), assume_unique=True)
