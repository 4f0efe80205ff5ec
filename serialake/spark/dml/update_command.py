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
from collections.abc import Mapping
from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession

from serialake.core.dv.dv_policy import uses_deletion_vectors
from serialake.core.log.snapshot import Snapshot
from serialake.core.model.actions import Action, AddCDCFile, AddFile, now_ms
from serialake.core.txn.transaction import OptimisticTransaction
from serialake.core.txn.written import BeforeCommit, commit_or_clean_up
from serialake.spark.dml import engine
from serialake.spark.dml.kernel import (
    TARGET_ALIAS,
    ConditionLike,
    DmlResult,
    PlannedCondition,
    Touched,
    affected_rows_df,
    assignment_values,
    declare_matched_rows,
    elapsed_ms,
    file_bytes,
    json_list,
    open_transaction,
    plan_condition,
    result_df,
    retire_touched,
    rewrite_metrics,
    rows_of,
    to_column,
)

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
    eng = engine.for_dml(spark)
    plan = plan_condition(spark, txn, snap, condition, name, "UPDATE", eng.evaluate)
    dvs = uses_deletion_vectors(snap)
    job = engine.UpdateJob(txn, snap, plan, name, raw, assignments, dvs)
    adds, cdc = eng.update(job)
    assert job.touched is not None
    return _commit_update(txn, snap, job.touched, adds, cdc, dvs, start, job.rewrite_start, plan, before_commit)


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
