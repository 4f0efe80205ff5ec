"""INSERT whose rows were computed from the table itself: an append (or overwrite) that read.

``serialake.spark.write`` appends blindly (no read: never conflicts under WriteSerializable).
When the rows come from the table itself (``INSERT INTO t SELECT ... FROM t``), the write
is not blind and gets MERGE's concurrency: its transaction records the read, so a
concurrent change of what it read makes it fail instead of writing rows computed from a
state that no longer exists.

The read is ``read_predicate`` (a SQL condition on the table; its partition conjuncts
decide which concurrent appends conflict), else what the DataFrame's own plan reads of the
table (``scans.record_scans``), else the whole table. ``df`` may also be a function of the
open transaction and the files it read, for a query that must read exactly that snapshot
(SQL's ``INSERT ... SELECT`` pins its target this way).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from serialake.core import DeltaLog
from serialake.core.model.actions import Action, AddFile
from serialake.core.predicates import expressions as P
from serialake.core.txn.transaction import OptimisticTransaction
from serialake.core.txn.written import BeforeCommit, commit_or_clean_up
from serialake.exceptions import DeltaTableNotFoundError, UnsupportedFeatureError
from serialake.spark import invariants, scans, transaction
from serialake.spark.dml.kernel import DmlResult, file_bytes, json_list, parse_or_true, rows_of
from serialake.spark.write import align_to_schema, write_checked_files

__all__ = ["PinnedQuery", "run_insert"]

# (the open transaction, the files of the table it read) -> the rows to write
PinnedQuery = Callable[[OptimisticTransaction, Sequence[AddFile]], DataFrame]


def run_insert(
    spark: SparkSession,
    table_path: str,
    df: DataFrame | PinnedQuery,
    *,
    read_predicate: str | None = None,
    read_version: int | None = None,
    overwrite: bool = False,
    replace_where: str | None = None,
    before_commit: BeforeCommit = None,
) -> DmlResult:
    """Append ``df`` (or, ``overwrite``, replace the table or the rows matching ``replace_where``).

    ``df`` was computed from this table; the read is recorded (see module docstring) as of
    ``read_version`` (the version ``df`` was read at; latest when None). ``replace_where``
    may only name partition columns (the rows it replaces are whole files). Columns are
    aligned to the table's by name and cast; NOT NULL columns are checked while writing.
    """
    log = DeltaLog.for_table(table_path)
    if transaction.active(spark) is not None:
        txn = transaction.start(log, "INSERT", spark)  # the transaction's state of the table
    else:
        snap0 = log.snapshot(version=read_version) if read_version is not None else None
        txn = log.start_transaction(snap0)
    snap = txn.snapshot
    if snap is None:
        raise DeltaTableNotFoundError(f"Cannot INSERT: {log.table_path} is not a Delta table.")
    if isinstance(df, DataFrame):
        found = scans.record_scans(txn, df)
        if read_predicate is not None:
            txn.filter_files([parse_or_true(read_predicate)])
        elif not any(s.table == snap.table_path and not s.time_travel for s in found):
            txn.read_whole_table()
        rows = df
    else:
        read = txn.filter_files([parse_or_true(read_predicate)]) if read_predicate else txn.read_whole_table()
        rows = df(txn, read)
    identity_values = invariants.IdentityValues(snap.schema, snap.table_path, given=rows.columns, from_user=True)
    data, _ = align_to_schema(
        rows, snap.schema, table=snap.table_path, configuration=snap.configuration, identity_values=identity_values
    )
    removes: list[Action] = []
    if overwrite:
        if replace_where is None:
            replaced = txn.read_whole_table()
        else:
            expr = P.parse_predicate(replace_where)
            parts = {c.lower() for c in snap.partition_columns}
            if any(n.lower() not in parts for _, n in P.column_refs(expr)):
                raise UnsupportedFeatureError(
                    f"INSERT ... REPLACE WHERE {replace_where} into {snap.table_path} with rows read from the same "
                    "table: the condition may only use partition columns here. Use MERGE for data columns."
                )
            replaced = txn.filter_files([expr])
            data = data.filter(F.expr(replace_where))
        removes = [f.remove() for f in replaced]
    adds = write_checked_files(
        data, snap.table_path, list(snap.partition_columns), configuration=snap.configuration, schema=snap.schema
    )
    identity_values.record(txn)
    metrics = {"numFiles": len(adds), "numOutputRows": rows_of(adds), "numOutputBytes": file_bytes(adds)}
    params = {"mode": "Overwrite" if overwrite else "Append", "partitionBy": json_list(list(snap.partition_columns))}
    if replace_where:
        params["predicate"] = json_list([replace_where])
    if read_predicate is not None:
        params["readPredicate"] = read_predicate
    version = commit_or_clean_up(
        txn, [*removes, *adds], "WRITE", params, metrics, new_files=adds, before_commit=before_commit
    )
    return DmlResult(version, {**metrics, "num_affected_rows": rows_of(adds)})
