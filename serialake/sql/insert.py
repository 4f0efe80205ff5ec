"""INSERT INTO / INSERT OVERWRITE [PARTITION] [REPLACE WHERE] ... VALUES | SELECT.

Rows are matched to the table's columns by position (as Spark does), by a column list,
or BY NAME, and cast to the table's types. An INSERT whose query reads its own target is
not a blind append: its transaction starts first, the query reads that transaction's
snapshot, and the read is recorded (the query's WHERE for a plain ``SELECT ... FROM
target WHERE ...``, else the whole table), so it has MERGE's concurrency behaviour.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from sqlglot import exp

from serialake.core import DeltaLog
from serialake.core.model.actions import AddFile
from serialake.core.model.schema import StructType
from serialake.core.predicates import expressions as P
from serialake.core.txn.post_commit import after_commit
from serialake.core.txn.transaction import OptimisticTransaction
from serialake.exceptions import DeltaAnalysisException, DeltaTableNotFoundError
from serialake.spark import dml, isolation
from serialake.spark.schemas import to_spark_schema
from serialake.spark.write import write
from serialake.sql.parser import DIALECT
from serialake.sql.results import metric, rows
from serialake.sql.statements import Insert
from serialake.sql.tables import delta_tables_in, resolve, run_query, try_resolve

__all__ = ["run_insert"]


def run_insert(spark: SparkSession, st: Insert) -> DataFrame | None:
    """Run an INSERT; one row ``num_affected_rows``, ``num_inserted_rows`` (None when building it failed
    after the commit; a count NULL when reading it back did)."""
    path = try_resolve(st.table)
    if path is None:
        if st.table.name and spark.catalog.tableExists(st.table.name):
            return spark.sql(st.text)  # a Spark (non-Delta) table
        path = resolve(st.table)
    log = DeltaLog.for_table(path)
    if not log.table_exists():
        raise DeltaTableNotFoundError(f"Cannot INSERT INTO {st.table.text}: {log.table_path} is not a Delta table.")
    if st.replace_on_using:
        raise DeltaAnalysisException(
            f"[UNSUPPORTED_FEATURE.TABLE_OPERATION] The feature is not supported: Table {st.table.text} does not "
            "support INSERT INTO ... REPLACE ON/USING. delta-spark 4.4 runs neither: use the DataFrame options "
            "(df.write.option('replaceUsing', ...) / option('replaceOn', ...)) instead."
        )
    self_read = any(p == log.table_path for _, _, p in delta_tables_in(st.query))
    replace_where = st.replace_where
    if st.static_partition and st.overwrite and replace_where is None:
        replace_where = " AND ".join(f"`{c}` <=> {v.sql(DIALECT)}" for c, v in st.static_partition.items())
    mode = "overwrite" if st.overwrite or replace_where else "append"
    if self_read:
        version = _insert_reading_target(spark, st, log, mode, replace_where)
    else:
        snap = log.update()
        df = _shape_insert(spark, run_query(spark, st.query), snap.schema, st)
        version = write(df, log.table_path, mode=mode, replaceWhere=replace_where)
    # Steps after the commit (core.txn.post_commit): each warns instead of raising.
    table = log.table_path
    isolation.note_committed(spark, table, version, "WRITE")
    inserted = after_commit(
        "read the inserted row count from the commit", table, version, metric, log, version, "numOutputRows",
        operation="WRITE", instead="(the row count is NULL)",
    )  # fmt: skip
    return after_commit(
        "build the result DataFrame", table, version, rows, spark,
        [("num_affected_rows", inserted), ("num_inserted_rows", inserted)], operation="WRITE",
        instead="(None instead of the result DataFrame)",
    )  # fmt: skip


def _insert_reading_target(
    spark: SparkSession, st: Insert, log: DeltaLog, mode: str, replace_where: str | None
) -> int | None:
    """INSERT whose query reads its own target: not a blind append (``dml.run_insert``).

    The query reads the transaction's snapshot (pinned) and the read is recorded: by the
    query's WHERE when it is a plain ``SELECT ... FROM target WHERE ...``, else the whole table.
    """
    snap = log.update()
    read_filter = _simple_target_filter(st.query, log.table_path, snap)

    def query(txn: OptimisticTransaction, files: Sequence[AddFile]) -> DataFrame:
        assert txn.snapshot is not None
        df = run_query(spark, st.query, pinned={log.table_path: (txn, list(files))})
        return _shape_insert(spark, df, txn.snapshot.schema, st)

    result = dml.run_insert(
        spark, log.table_path, query, read_predicate=read_filter, overwrite=mode == "overwrite",
        replace_where=replace_where,
    )  # fmt: skip
    return result.version


def _simple_target_filter(query: exp.Expr, path: str, snap: Any) -> str | None:
    """The WHERE of ``SELECT ... FROM target [alias] WHERE cond`` (target columns only), else None."""
    if not isinstance(query, exp.Select) or query.args.get("joins") or query.args.get("with_"):
        return None
    tables = list(query.find_all(exp.Table))
    refs = delta_tables_in(query)
    if len(tables) != 1 or len(refs) != 1 or refs[0][2] != path or refs[0][0].args.get("version"):
        return None
    where = query.args.get("where")
    if where is None or where.find(exp.Subquery, exp.Select) is not None:
        return None
    node, ref, _ = refs[0]
    qualifiers = {ref.short_name.lower(), (node.alias or "").lower()} - {""}

    def strip(n: exp.Expr) -> exp.Expr:
        if isinstance(n, exp.Column) and n.table and n.table.lower() in qualifiers:
            return exp.column(n.this.copy())
        return n

    cond = where.this.copy().transform(strip).sql(DIALECT)
    try:
        expr = P.parse_predicate(cond)
    except Exception:  # noqa: BLE001 - not a predicate we understand: read the whole table
        return None
    if any(q is not None or snap.schema.field(n) is None for q, n in P.column_refs(expr)):
        return None
    return cond


def _shape_insert(spark: SparkSession, df: DataFrame, schema: StructType, st: Insert) -> DataFrame:
    """The query's rows as table columns: by position (or by the column list / BY NAME), cast."""
    spark_schema = to_spark_schema(schema)
    types = {f.name.lower(): f for f in spark_schema.fields}
    static = {k.lower(): v for k, v in st.static_partition.items()}
    for col in static:
        if col not in types:
            raise DeltaAnalysisException(f"PARTITION column '{col}' is not a column of table {st.table.text}.")
    if st.by_name:
        unknown = [c for c in df.columns if c.lower() not in types]
        if unknown:
            raise DeltaAnalysisException(
                f"INSERT INTO {st.table.text} BY NAME: the query has column(s) {', '.join(unknown)} that the "
                f"table does not (columns: {', '.join(f.name for f in spark_schema.fields)})."
            )
        out = df.select(*[F.col(f"`{c}`").cast(types[c.lower()].dataType).alias(types[c.lower()].name)
                          for c in df.columns])  # fmt: skip
    else:
        if st.columns is not None:
            targets = [c.lower() for c in st.columns]
            unknown = [c for c in st.columns if c.lower() not in types]
            if unknown:
                raise DeltaAnalysisException(
                    f"INSERT INTO {st.table.text}: unknown column(s) {', '.join(unknown)} "
                    f"(columns: {', '.join(f.name for f in spark_schema.fields)})."
                )
        else:
            targets = [f.name.lower() for f in spark_schema.fields if f.name.lower() not in static]
        if len(df.columns) != len(targets):
            raise DeltaAnalysisException(
                f"INSERT INTO {st.table.text}: the query produces {len(df.columns)} column(s) but "
                f"{len(targets)} are expected ({', '.join(types[t].name for t in targets)})."
            )
        out = df.select(
            *[F.col(f"`{src}`").cast(types[t].dataType).alias(types[t].name) for src, t in zip(df.columns, targets)]
        )
    for col, value in static.items():
        out = out.withColumn(types[col].name, F.expr(value.sql(DIALECT)).cast(types[col].dataType))
    return out

