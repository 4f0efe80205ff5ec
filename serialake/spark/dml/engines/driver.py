"""The driver engine: an operation's data work with pyarrow, when it is exactly Spark's.

Each method raises ``NotExact`` (after removing whatever it wrote) on anything it does not
reproduce exactly; ``dml.engine`` then runs the step on Spark. Reading, writing and the one
rewrite loop are ``driver_files``; MERGE's join is ``driver_merge``, compaction
``driver_compaction``. What qualifies is described in docs/architecture.md (DML).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pyspark.sql import Column

from serialake.core.dv.deletion_vectors import RowIndexSet
from serialake.core.dv.dv_policy import uses_deletion_vectors
from serialake.core.log import cdf as core_cdf
from serialake.core.log.snapshot import Snapshot
from serialake.core.model.actions import AddCDCFile, AddFile
from serialake.core.predicates import values as V
from serialake.core.predicates.values import NotExact
from serialake.spark.dml import driver_merge
from serialake.spark.dml.driver_compaction import driver_compact
from serialake.spark.dml.driver_files import (
    DriverTable,
    check_not_null,
    isin_rows,
    matching_rows,
    rewrite_files,
    rewrite_files_with_changes,
)
from serialake.spark.dml.engines.base import DML_MAX_BYTES_CONF, Rewritten, UpdateJob
from serialake.spark.dml.engines.spark_merge import INSERT, MATCHED_DELETE, MATCHED_UPDATE, NMBS_DELETE, NMBS_UPDATE
from serialake.spark.dml.kernel import DmlResult, PlannedCondition, Touched, elapsed_ms, records_changes
from serialake.spark.schemas import to_delta_schema

if TYPE_CHECKING:
    from serialake.spark.dml.merge_command import _MergeRun as MergeRun

__all__ = ["DriverEngine", "compile_assignments"]


@dataclass(frozen=True)
class DriverEngine:
    """pyarrow on the driver, for input files of at most ``max_bytes`` bytes (0: never)."""

    max_bytes: int

    def fits(self, files: Iterable[AddFile]) -> bool:
        """Whether the driver may read ``files``."""
        return self.max_bytes > 0 and sum(f.size or 0 for f in files) <= self.max_bytes

    def find_rows(self, snap: Snapshot, plan: PlannedCondition, alias: str, *, with_rows: bool) -> dict[str, Touched]:
        """The core evaluates the condition on the condition's columns (rows always known)."""
        if plan.exact is None:
            raise NotExact("the condition")
        found = matching_rows(snap, plan.files, plan.exact)
        return {f.path: Touched(f, len(rows), rows) for f, rows in found}

    def delete_rows(
        self, snap: Snapshot, touched: Sequence[Touched], cond: Column, alias: str, *, record: bool
    ) -> Rewritten:
        """The matched rows dropped from each file (the rows found on the driver, or by Spark with rows)."""
        jobs = [(t.add, t.rows) for t in touched if t.rows is not None]
        if len(jobs) != len(touched):
            raise NotExact("rows not known")
        if record:
            return delete_rows_recorded(DriverTable.open(snap), jobs)
        return delete_rows_cow(DriverTable.open(snap), jobs), []

    def update(self, job: UpdateJob) -> Rewritten:
        """Condition and values exact, files small enough: no Spark job at all.

        The rows found here stay in ``job.touched`` when the values are not exact: Spark then
        rewrites them without looking for them again.
        """
        if job.plan.exact is None:
            raise NotExact("the condition")
        job.touched = self.find_rows(job.snap, job.plan, job.alias, with_rows=True)
        job.rewrite_start = time.monotonic()
        compiled = compile_assignments(job.snap, job.raw)
        table = DriverTable.open(job.snap)
        found = [(t.add, t.rows) for t in job.touched.values() if t.rows is not None]
        return update_rows(table, found, compiled, only_changed=job.dvs, record=records_changes(job.snap))

    def merge(self, run: MergeRun) -> DmlResult:
        """The whole MERGE with pyarrow (``driver_merge``): source collected, candidate files within the budget."""
        if run.evolved:
            raise NotExact("schema evolution")  # the driver reads the files with their own schema
        if records_changes(run.snap) and (run.matched or run.by_source):
            raise NotExact("change data to record")  # the driver MERGE writes no change data files
        source_schema = to_delta_schema(run.source.schema)
        mp = driver_merge.plan(run.snap, run.on_parsed, run.alias, source_schema, run.b._clauses)
        run.local_source = driver_merge.source_table(run.source, source_schema, self.max_bytes)
        run.files = run._record_read(run.empty)
        if not self.fits(run.files):
            raise NotExact(f"candidate files over {DML_MAX_BYTES_CONF}")
        outcome = driver_merge.execute(
            mp, run.files, run.local_source, run._multiple_match_error, dvs=uses_deletion_vectors(run.snap)
        )
        run.scan_ms = elapsed_ms(run.start)
        touched = {p: Touched(add, len(rows), rows) for p, (add, rows) in outcome.touched.items()}
        run._declare_matched(touched, lambda: outcome.matched)
        c = outcome.counts
        counts = {MATCHED_UPDATE: c["matched_update"], MATCHED_DELETE: c["matched_delete"],
                  NMBS_UPDATE: c["by_source_update"], NMBS_DELETE: c["by_source_delete"], INSERT: c["insert"]}
        return run._finish(touched, counts, outcome.adds, time.monotonic())

    def merge_reads(self, run: MergeRun, add: AddFile, rows: RowIndexSet | None) -> RowIndexSet:
        """The core rules rows out on the driver itself (the read predicate); the rest is Spark's."""
        raise NotExact("a MERGE's read is a join with its source")

    def compact(self, snap: Snapshot, inputs: Sequence[AddFile]) -> list[AddFile]:
        """The bin concatenated by pyarrow (``driver_compaction``)."""
        add = driver_compact(snap, inputs)
        return [add] if add is not None else []

    def evaluate(
        self, snap: Snapshot, cond: Column, alias: str, add: AddFile, rows: RowIndexSet | None
    ) -> RowIndexSet:
        """The core evaluates what it can on the driver itself (``row_eval``) before asking."""
        raise NotExact("rows the core could not decide")


def delete_rows_cow(table: DriverTable, touched: Sequence[tuple[AddFile, RowIndexSet]]) -> list[AddFile]:
    """Copy-on-write DELETE: each file of ``touched`` rewritten without its matched (physical) rows."""
    import pyarrow as pa

    def rewrite(rows: Any, positions: Any, add: AddFile, matched: RowIndexSet) -> Any:
        return rows.filter(pa.array(~isin_rows(positions, matched)))

    return rewrite_files(table, touched, rewrite)


def delete_rows_recorded(
    table: DriverTable, touched: Sequence[tuple[AddFile, RowIndexSet]]
) -> tuple[list[AddFile], list[AddCDCFile]]:
    """``delete_rows_cow`` on a table recording change data: the deleted rows are recorded too."""
    import pyarrow as pa

    def rewrite(rows: Any, positions: Any, add: AddFile, matched: RowIndexSet) -> tuple[Any, Any]:
        hit = isin_rows(positions, matched)
        return rows.filter(pa.array(~hit)), table.changes(rows.filter(pa.array(hit)), core_cdf.DELETE)

    return rewrite_files_with_changes(table, touched, rewrite)


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


def update_rows(
    table: DriverTable,
    touched: Sequence[tuple[AddFile, RowIndexSet]],
    assignments: Mapping[str, V.Compiled],
    *,
    only_changed: bool,
    record: bool = False,
) -> tuple[list[AddFile], list[AddCDCFile]]:
    """UPDATE: each touched file with new values in its matched rows (``only_changed``: just those rows).

    ``record``: the matched rows' old and new values are also written as change data.
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    def rewrite(rows: Any, positions: Any, add: AddFile, matched: RowIndexSet) -> tuple[Any, Any]:
        mask = pa.array(isin_rows(positions, matched))
        hit = rows.filter(mask)
        n = hit.num_rows
        new_rows = []  # the matched rows' new values
        columns = []  # the whole file's
        for field in table.schema:
            old = rows.column(field.name)
            compiled = assignments.get(field.name)
            if compiled is None:
                new_rows.append(hit.column(field.name))
                columns.append(old)
                continue
            new = compiled.evaluate(lambda ref: reference(table, hit, add, ref), n)
            check_not_null(table, field.name, new)
            if new.type != field.type:
                raise NotExact(f"{field.name}: computed {new.type}, column is {field.type}")
            new_rows.append(new)
            if not only_changed:
                columns.append(pc.replace_with_mask(old, mask, new))
        post = pa.Table.from_arrays(new_rows, schema=table.schema)
        replacement = post if only_changed else pa.Table.from_arrays(columns, schema=table.schema)
        if not record:
            return replacement, None
        changes = pa.concat_tables(
            [table.changes(hit, core_cdf.UPDATE_PREIMAGE), table.changes(post, core_cdf.UPDATE_POSTIMAGE)]
        )
        return replacement, changes

    if record:
        return rewrite_files_with_changes(table, touched, rewrite)
    return rewrite_files(table, touched, lambda *args: rewrite(*args)[0]), []


def reference(table: DriverTable, rows: Any, add: AddFile, ref: V.Ref) -> Any:
    """A referenced column over ``rows``: a data column, or the file's partition value."""
    f = table.snap.schema.field(ref.name)
    assert f is not None
    value = table.partition_scalar(add, f.name)
    return rows.column(f.name) if value is None else value
