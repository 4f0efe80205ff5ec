"""UPDATE table SET col = expr, ... [WHERE condition].

The matched rows of the candidate files are found (on the driver when the condition is
exact, else one Spark aggregate); the touched files are rewritten with the new values, or,
with deletion vectors, only the new versions of the matched rows are written and the old
ones marked deleted. When the condition and every SET value are exact and the files fit
the driver's budget, the whole UPDATE runs on the driver (no Spark job at all).

On a table recording change data (``delta.enableChangeDataFeed``) the same write also
records each updated row twice, as ``update_preimage`` (old values) and
``update_postimage`` (new values, as stored), in change data files of the same commit.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

from pyspark.errors import AnalysisException
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from serialake.core.dv.deletion_vectors import RowIndexSet
from serialake.core.dv.dv_policy import uses_deletion_vectors
from serialake.core.log import cdf as core_cdf
from serialake.core.log.snapshot import Snapshot
from serialake.core.model.actions import Action, AddCDCFile, AddFile, now_ms
from serialake.core.predicates import values as V
from serialake.core.predicates.values import NotExact
from serialake.core.txn.transaction import OptimisticTransaction
from serialake.core.txn.written import BeforeCommit, commit_or_clean_up
from serialake.spark.dml import engine
from serialake.spark.dml.driver_files import (
    DriverTable,
    check_not_null,
    isin_rows,
    matching_rows,
    rewrite_files,
    rewrite_files_with_changes,
)
from serialake.spark.dml.kernel import (
    TARGET_ALIAS,
    ConditionLike,
    DmlResult,
    PlannedCondition,
    Touched,
    affected_rows_df,
    analysis_error,
    assignment_values,
    change_type,
    declare_matched_rows,
    elapsed_ms,
    explicit_flags,
    file_bytes,
    find_touched,
    is_true,
    json_list,
    open_transaction,
    plan_condition,
    read_target,
    records_changes,
    result_df,
    retire_touched,
    rewrite_metrics,
    rows_of,
    table_columns,
    to_column,
    updated_columns,
    write_rows,
    write_rows_and_changes,
)
from serialake.spark.invariants import EXPLICIT_PREFIX

__all__ = ["run_update", "update"]


def update(
    spark: SparkSession,
    table_path: str,
    condition: ConditionLike = None,
    set: Mapping[str, str | Column] | None = None,  # noqa: A002 - delta-spark's parameter name
    *,
    alias: str | None = None,
) -> DataFrame | None:
    """``UPDATE table SET col = expr, ... [WHERE condition]``; returns one row ``num_affected_rows``
    (None, with a warning, when building it fails after the commit: ``kernel.result_df``).

    ``set`` maps column names to SQL expression strings or Columns (delta-spark's
    ``update(condition, set)``, which also covers Scala's ``updateExpr``).
    """
    result = run_update(spark, table_path, condition, set, alias=alias)
    return result_df(spark, table_path, "UPDATE", result, affected_rows_df)


def run_update(
    spark: SparkSession,
    table_path: str,
    condition: ConditionLike = None,
    set: Mapping[str, str | Column] | None = None,  # noqa: A002
    *,
    alias: str | None = None,
    before_commit: BeforeCommit = None,
) -> DmlResult:
    """UPDATE (see module docstring); ``DmlResult.metrics`` are delta-spark's UPDATE metrics."""
    start = time.monotonic()
    txn, snap = open_transaction(table_path, "UPDATE")
    name = alias or TARGET_ALIAS
    raw = assignment_values(snap, set, name, "UPDATE")
    assignments = {k: to_column(v, f"The value for column '{k}'") for k, v in raw.items()}
    plan = plan_condition(spark, txn, snap, condition, name, "UPDATE")
    dvs = uses_deletion_vectors(snap)
    budget = engine.for_dml(spark)
    touched: dict[str, Touched] | None = None
    driver_looked_for_rows = False

    def on_driver() -> DmlResult:
        # Condition and values exact, files small enough: no Spark job at all.
        nonlocal touched, driver_looked_for_rows
        if plan.exact is None:
            raise NotExact("the condition")
        compiled = _driver_compile_assignments(snap, raw)
        table = DriverTable.open(snap)
        driver_looked_for_rows = True
        found = matching_rows(snap, plan.files, plan.exact)
        touched = {f.path: Touched(f, len(rows), rows) for f, rows in found}
        rewrite_start = time.monotonic()
        adds, cdc = _driver_update_rows(table, found, compiled, only_changed=dvs, record=records_changes(snap))
        return _commit_update(txn, snap, touched, adds, cdc, dvs, start, rewrite_start, plan, before_commit)

    def on_spark() -> DmlResult:
        nonlocal touched
        hit = is_true(plan.cond)
        target = read_target(spark, snap, plan.files, name)
        new_values = updated_columns(snap, name, [(hit, assignments)]) + explicit_flags(snap, [(hit, assignments)])
        try:
            target.select(*new_values)
        except AnalysisException as e:
            raise analysis_error(snap.table_path, "UPDATE SET expressions", e) from None
        if touched is None:
            matching = target.filter(hit)
            # When the driver already looked for the rows (and could not), go straight to Spark.
            touched = find_touched(
                spark, snap, plan, lambda: matching, with_rows=dvs, engine=None if driver_looked_for_rows else budget
            )
        rewrite_start = time.monotonic()
        rewritten = [t.add for t in touched.values()]
        adds: list[AddFile] = []
        cdc: list[AddCDCFile] = []
        if touched:
            source = read_target(spark, snap, rewritten, name, with_rows=False)
            # With deletion vectors only the new versions of the changed rows are written.
            stored = source.filter(hit) if dvs else source
            if records_changes(snap):
                post = stored.select(
                    *new_values, F.when(hit, F.lit(core_cdf.UPDATE_POSTIMAGE)).alias(core_cdf.CHANGE_TYPE)
                )
                flags = [c for c in post.columns if c.startswith(EXPLICIT_PREFIX)]
                pre = source.filter(hit).select(
                    *table_columns(snap, source, name), *[F.lit(False).alias(f) for f in flags],
                    change_type(core_cdf.UPDATE_PREIMAGE),
                )  # fmt: skip
                adds, cdc = write_rows_and_changes(snap, post.unionByName(pre), new_values=True)
            else:
                adds = write_rows(snap, stored.select(*new_values), new_values=True)
        return _commit_update(txn, snap, touched, adds, cdc, dvs, start, rewrite_start, plan, before_commit)

    return budget.run(plan.files, driver=on_driver, spark=on_spark)


def _commit_update(
    txn: OptimisticTransaction,
    snap: Snapshot,
    touched: Mapping[str, Touched],
    adds: list[AddFile],
    cdc: list[AddCDCFile],
    dvs: bool,
    start: float,
    rewrite_start: float,
    plan: PlannedCondition,
    before_commit: BeforeCommit,
) -> DmlResult:
    """Commit an UPDATE's new files: remove the rewritten files, or mark the old rows in DVs."""
    scan_ms = int((rewrite_start - start) * 1000)
    updated = sum(t.count for t in touched.values())
    if not touched:
        return DmlResult(None, {**_update_metrics(updated=0, start=start, scan_ms=scan_ms), "num_affected_rows": 0})
    # With deletion vectors the old versions of the changed rows get marked deleted.
    changes = retire_touched(snap.table_path, touched.values(), now_ms(), dvs=dvs)
    if dvs and not plan.by_files:
        declare_matched_rows(txn, plan.files, touched)
    metrics = _update_metrics(
        updated=updated, files_added=len(adds), bytes_added=file_bytes(adds), start=start, scan_ms=scan_ms,
        rewrite_ms=elapsed_ms(rewrite_start), files_removed=changes.files_removed,
        bytes_removed=changes.bytes_removed, copied=0 if dvs else rows_of(adds) - updated,
        dvs_added=changes.dvs_added, dvs_updated=changes.dvs_updated, dvs_removed=changes.dvs_removed,
        change_files=len(cdc),
    )  # fmt: skip
    params = {"predicate": json_list([plan.text] if plan.text else [])}
    actions: list[Action] = [*changes.actions, *adds, *cdc]
    version = commit_or_clean_up(
        txn, actions, "UPDATE", params, metrics, new_files=[*adds, *cdc], new_dvs=changes.written,
        before_commit=before_commit,
    )  # fmt: skip
    return DmlResult(version, {**metrics, "num_affected_rows": updated})


def _update_metrics(*, updated: int, **kw: Any) -> dict[str, int]:
    return {"numUpdatedRows": updated, **rewrite_metrics(**kw)}


def _driver_compile_assignments(snap: Snapshot, texts: Mapping[str, Any]) -> dict[str, V.Compiled]:
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


def _driver_update_rows(
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
            new = compiled.evaluate(lambda ref: _reference(table, hit, add, ref), n)
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


def _reference(table: DriverTable, rows: Any, add: AddFile, ref: V.Ref) -> Any:
    """A referenced column over ``rows``: a data column, or the file's partition value."""
    f = table.snap.schema.field(ref.name)
    assert f is not None
    value = table.partition_scalar(add, f.name)
    return rows.column(f.name) if value is None else value
