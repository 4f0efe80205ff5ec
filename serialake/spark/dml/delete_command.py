"""DELETE FROM table [WHERE condition].

No condition, or a condition on partition columns only: whole files are removed (no data
read). Otherwise the matched rows of the candidate files are found (on the driver when
exact, else one Spark aggregate), then marked in deletion vectors or the touched files are
rewritten without them (on the driver when exact, else one Spark write job).

On a table recording change data (``delta.enableChangeDataFeed``), a copy-on-write DELETE
also writes the deleted rows of every touched file as change data (``_change_type`` =
``delete``), in the same job; whole-file removes and deletion vectors need none (readers
infer those rows, as Delta writes them).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import types as T

from serialake.core.dv.dv_policy import uses_deletion_vectors
from serialake.core.log.snapshot import Snapshot
from serialake.core.model.actions import Action, AddCDCFile, AddFile, now_ms
from serialake.core.predicates import expressions as P
from serialake.core.txn.transaction import OptimisticTransaction
from serialake.core.txn.written import BeforeCommit, commit_or_clean_up
from serialake.spark import data_read
from serialake.spark.dml import engine
from serialake.spark.dml.kernel import (
    FILE_COL,
    TARGET_ALIAS,
    ConditionLike,
    DmlResult,
    PlannedCondition,
    affected_rows_df,
    declare_matched_rows,
    elapsed_ms,
    file_bytes,
    is_true,
    json_list,
    live_rows,
    open_transaction,
    plan_condition,
    records_changes,
    result_df,
    retire_touched,
    rewrite_metrics,
    rows_of,
    target_conjuncts,
)

__all__ = ["delete", "run_delete"]


def delete(
    spark: SparkSession, table_path: str, condition: ConditionLike = None, *, alias: str | None = None
) -> DataFrame | None:
    """``DELETE FROM table [WHERE condition]``; returns one row ``num_affected_rows`` (delta-spark SQL)
    (None, with a warning, when building it fails after the commit: ``kernel.result_df``)."""
    result = run_delete(spark, table_path, condition, alias=alias)
    return result_df(spark, table_path, "DELETE", result, affected_rows_df)


def run_delete(
    spark: SparkSession,
    table_path: str,
    condition: ConditionLike = None,
    *,
    alias: str | None = None,
    before_commit: BeforeCommit = None,
) -> DmlResult:
    """DELETE (see module docstring); ``DmlResult.metrics`` are delta-spark's DELETE metrics."""
    start = time.monotonic()
    txn, snap = open_transaction(table_path, "DELETE")
    name = alias or TARGET_ALIAS
    eng = engine.for_dml(spark)
    plan = plan_condition(spark, txn, snap, condition, name, "DELETE", eng.evaluate)
    if condition is None:
        return _delete_files(txn, snap, plan.files, None, start, before_commit)
    if not plan.by_files and _only_partition_columns(snap, plan.expr, name):
        matched = _partition_matches(spark, snap, plan.files, name, plan.cond)
        if all(live_rows(snap.table_path, f) is not None for f in matched):
            return _delete_files(txn, snap, matched, plan.text, start, before_commit)
    return _delete_rows(eng, txn, snap, plan, name, start, before_commit)


def _only_partition_columns(snap: Snapshot, expr: P.Expr, alias: str) -> bool:
    """Whether every conjunct of the condition reads partition columns only (no data needs reading)."""
    parts = {c.lower() for c in snap.partition_columns}
    conjuncts = P.split_conjuncts(expr)
    if not parts or not conjuncts:
        return False
    kept = target_conjuncts(expr, alias, lambda n: n.lower() in parts)
    return len(kept) == len(conjuncts) and all(n.lower() in parts for c in kept for _, n in P.column_refs(c))


def _partition_matches(
    spark: SparkSession, snap: Snapshot, files: Sequence[AddFile], alias: str, cond: Column
) -> list[AddFile]:
    """Files whose partition values satisfy ``cond`` (evaluated by Spark on one row per file, no data read)."""
    if not files:
        return []
    rows = [[f.path, *data_read.partition_row(snap, f)] for f in files]
    schema = T.StructType([T.StructField(FILE_COL, T.StringType(), False), *data_read.partition_schema(snap).fields])
    df = spark.createDataFrame(rows, schema).alias(alias)
    hit = {r[0] for r in df.filter(is_true(cond)).select(FILE_COL).collect()}
    return [f for f in files if f.path in hit]


def _delete_files(
    txn: OptimisticTransaction,
    snap: Snapshot,
    files: Sequence[AddFile],
    text: str | None,
    start: float,
    before_commit: BeforeCommit,
) -> DmlResult:
    """Remove whole files (no condition, or a condition on partition columns only)."""
    stamp = now_ms()
    removed_rows = sum(live_rows(snap.table_path, f) or 0 for f in files)
    metrics = _delete_metrics(
        deleted=removed_rows,
        files_removed=len(files),
        bytes_removed=file_bytes(files),
        dvs_removed=sum(1 for f in files if f.deletion_vector),
        start=start,
        scan_ms=elapsed_ms(start),
    )
    if not files:
        return DmlResult(None, {**metrics, "num_affected_rows": 0})
    version = commit_or_clean_up(
        txn,
        [f.remove(timestamp=stamp) for f in files],
        "DELETE",
        {"predicate": json_list([text] if text else [])},
        metrics,
        before_commit=before_commit,
    )
    return DmlResult(version, {**metrics, "num_affected_rows": removed_rows})


def _delete_rows(
    eng: engine.Engine,
    txn: OptimisticTransaction,
    snap: Snapshot,
    plan: PlannedCondition,
    alias: str,
    start: float,
    before_commit: BeforeCommit,
) -> DmlResult:
    """Delete the matching rows of the candidate files: deletion vectors or rewrite."""
    table = snap.table_path
    cond, text = plan.cond, plan.text
    dvs = uses_deletion_vectors(snap)
    touched = eng.find_rows(snap, plan, alias, with_rows=dvs)
    scan_ms = elapsed_ms(start)
    deleted = sum(t.count for t in touched.values())
    params = {"predicate": json_list([text] if text else [])}
    if not touched:
        metrics = _delete_metrics(deleted=0, start=start, scan_ms=scan_ms)
        return DmlResult(None, {**metrics, "num_affected_rows": 0})
    rewrite_start = time.monotonic()
    adds: list[AddFile] = []
    cdc: list[AddCDCFile] = []
    if not dvs and records_changes(snap):
        # Copy-on-write with change data: every touched file is read once, its other rows written
        # again and its deleted rows recorded (also those of files deleted whole).
        adds, cdc = eng.delete_rows(snap, list(touched.values()), cond, alias, record=True)
    elif not dvs:  # copy-on-write: the touched files' other rows are written again
        partial = [t for t in touched.values() if live_rows(table, t.add) != t.count]
        adds = eng.delete_rows(snap, partial, cond, alias, record=False)[0] if partial else []
    changes = retire_touched(table, touched.values(), now_ms(), dvs=dvs)
    if dvs and not plan.by_files:
        declare_matched_rows(txn, plan.files, touched)
    metrics = _delete_metrics(
        deleted=deleted,
        files_removed=changes.files_removed,
        bytes_removed=changes.bytes_removed,
        files_added=len(adds),
        bytes_added=file_bytes(adds),
        copied=rows_of(adds),
        dvs_added=changes.dvs_added,
        dvs_updated=changes.dvs_updated,
        dvs_removed=changes.dvs_removed,
        start=start,
        scan_ms=scan_ms,
        rewrite_ms=0 if dvs else elapsed_ms(rewrite_start),
        change_files=len(cdc),
    )
    actions: list[Action] = [*changes.actions, *adds, *cdc]
    version = commit_or_clean_up(
        txn, actions, "DELETE", params, metrics, new_files=[*adds, *cdc], new_dvs=changes.written,
        before_commit=before_commit,
    )  # fmt: skip
    return DmlResult(version, {**metrics, "num_affected_rows": deleted})


def _delete_metrics(*, deleted: int, **kw: Any) -> dict[str, int]:
    return {"numDeletedRows": deleted, **rewrite_metrics(**kw)}
