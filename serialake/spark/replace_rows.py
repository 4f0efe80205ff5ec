"""``replaceUsing`` / ``replaceOn``: an overwrite that replaces the table's rows matching the written ones.

As delta-spark 4.4's ``DeltaInsertReplaceOnOrUsingCommand`` (its ``WriteIntoDelta`` with a
DELETE of ``EXISTS (SELECT 1 FROM data WHERE <match>)``): in one commit, the table's rows
for which some written row matches are deleted and every written row is added; the other
rows stay. ``replaceUsing`` "a, b" matches on equal columns (``t.a = s.a AND t.b = s.b``:
NULL matches nothing); ``replaceOn`` matches on a condition over the table (its columns,
or qualified by the ``targetAlias`` option) and the data (its columns, or qualified by the
DataFrame's alias, ``df.alias("s")``). An empty DataFrame replaces nothing.

The data's rows are matched as given (before they are aligned to the table), so a
``replaceOn`` condition may read columns the table lacks (``mergeSchema``). Matched rows are
marked in deletion vectors when the table uses them; otherwise the files holding them are
rewritten with their other rows, in the same job as the new rows, and on a table recording
change data the deleted and inserted rows are written as change data. The whole table is
read (as delta-spark's DELETE with a subquery does): a concurrent write into it conflicts.

Only in mode ``overwrite``; in ``append`` the options are checked and the rows appended.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from serialake.core.dv.deletion_vectors import RowIndexSet
from serialake.core.dv.dv_policy import mark_deleted, uses_deletion_vectors
from serialake.core.log import cdf as core_cdf
from serialake.core.log.snapshot import Snapshot
from serialake.core.model.actions import Action, AddCDCFile, AddFile, now_ms
from serialake.core.txn.transaction import OptimisticTransaction
from serialake.exceptions import DeltaAnalysisException, DeltaIllegalArgumentException
from serialake.spark import cdf, data_read
from serialake.spark.backend import backend
from serialake.spark.columns import quote_name
from serialake.spark.schemas import to_spark_schema

__all__ = [
    "Matched",
    "ReplaceRows",
    "check_combination",
    "incompatible",
    "match_rows",
    "metrics",
    "resolve_replace",
    "sql_id",
    "write_changes",
]

#: The table's alias when the options give none (delta-spark's internal alias for replaceUsing).
_TABLE_ALIAS = "__replace_using_table_alias__"


@dataclass(frozen=True)
class ReplaceRows:
    """What a ``replaceUsing`` / ``replaceOn`` write replaces, as the options give it.

    ``option``: ``replaceUsing`` or ``replaceOn``; ``text``: its value as given (the
    history's ``replaceUsingCols`` / ``replaceOnCond``). ``source``: the rows matched (the
    DataFrame as the caller gave it; None: the written one). ``by_position``: the data's
    columns go to the table's by position (``insertInto``): replaceUsing columns must then
    stand at the same position in both.
    """

    option: str
    text: str
    columns: tuple[str, ...] = ()
    target_alias: str | None = None
    source: DataFrame | None = None
    by_position: bool = False

    @staticmethod
    def of(
        replace_using: str | None,
        replace_on: str | None,
        target_alias: str | None = None,
        *,
        source: DataFrame | None = None,
        by_position: bool = False,
    ) -> ReplaceRows | None:
        """The criteria of the options (None when neither is given); refuses both, and empty column names."""
        if replace_using is None and replace_on is None:
            return None
        if replace_using is not None and replace_on is not None:
            raise incompatible("replaceOn", "replaceUsing")
        if replace_on is not None:
            return ReplaceRows("replaceOn", replace_on, (), target_alias, source, by_position)
        assert replace_using is not None
        names = [c.strip() for c in replace_using.split(",")]
        if any(not n for n in names):
            raise DeltaIllegalArgumentException(
                f"[DELTA_ILLEGAL_OPTION] Invalid value '{replace_using}' for option 'replaceUsing', "
                "must not contain empty column names"
            )
        # replaceUsing takes column names, not expressions: a targetAlias does not apply to them.
        return ReplaceRows("replaceUsing", replace_using, tuple(dict.fromkeys(names)), None, source, by_position)

    @property
    def parameters(self) -> dict[str, str]:
        """The WRITE commit's operationParameters for these options, as delta-spark records them."""
        if self.option == "replaceOn":
            return {"replaceOnCond": self.text}
        return {"replaceUsingCols": f"({self.text})"}

    @property
    def alias(self) -> str:
        """The table's alias in the matching condition."""
        return self.target_alias or _TABLE_ALIAS


def incompatible(first: str, second: str) -> DeltaIllegalArgumentException:
    return DeltaIllegalArgumentException(
        f"[DELTA_INCOMPATIBLE_DATAFRAME_OPTIONS] The `{first}` option cannot be used with the `{second}` option "
        "for Delta tables."
    )


def check_combination(
    replace: ReplaceRows,
    *,
    overwrite: bool,
    replace_where: str | None,
    partition_overwrite_mode: str | None,
    overwrite_schema: bool,
) -> None:
    """Refuse options delta-spark refuses with ``replaceOn`` / ``replaceUsing``, with its errors
    (in any save mode: delta-spark checks them before it looks at the mode)."""
    if replace_where is not None:
        raise DeltaIllegalArgumentException(
            "[DELTA_OVERWRITE_BY_FILTER_INCOMPATIBLE_REPLACE_ON_OR_USING] Overwrite by filter is incompatible with "
            "the `replaceOn`/`replaceUsing` option."
        )
    if partition_overwrite_mode is not None:
        raise DeltaIllegalArgumentException(
            "[DELTA_DYNAMIC_PARTITION_OVERWRITE_INCOMPATIBLE_REPLACE_ON_OR_USING] Dynamic partition overwrite is "
            "incompatible with the `replaceOn`/`replaceUsing` option."
        )
    if overwrite_schema and overwrite:
        raise incompatible("overwriteSchema", replace.option)


def sql_id(parts: Sequence[str]) -> str:
    """A (multi-part) name as Spark shows it in errors: each part backquoted."""
    return ".".join("`" + p.replace("`", "``") + "`" for p in parts)


def resolve_replace(spark: SparkSession, replace: ReplaceRows, snap: Snapshot, source: DataFrame) -> Column:
    """The matching condition (table aliased ``replace.alias``, ``source`` as given), after delta-spark's checks.

    replaceUsing: each column must be a column of the table and of ``source`` (by position
    too for ``insertInto``). replaceOn: each column the condition names must resolve in
    exactly one of them (``DELTA_INSERT_REPLACE_ON_AMBIGUOUS_COLUMNS_IN_CONDITION`` /
    ``..._UNRESOLVED_COLUMNS_IN_CONDITION``).
    """
    target = _table_probe(spark, snap, replace.alias)
    if replace.option == "replaceOn":
        return _resolve_on(spark, replace.text, target, source)
    return _resolve_using(spark, replace, snap, source)


def _table_probe(spark: SparkSession, snap: Snapshot, alias: str) -> DataFrame:
    """An empty DataFrame of the table's columns under ``alias``: names resolve as on the table."""
    return spark.createDataFrame([], to_spark_schema(snap.schema)).alias(alias)


def _case_sensitive(spark: SparkSession) -> bool:
    return str(spark.conf.get("spark.sql.caseSensitive", "false")).lower() == "true"


def _resolve_using(spark: SparkSession, replace: ReplaceRows, snap: Snapshot, source: DataFrame) -> Column:
    sensitive = _case_sensitive(spark)

    def index(names: Sequence[str], wanted: str) -> int:
        for i, n in enumerate(names):
            if n == wanted or (not sensitive and n.lower() == wanted.lower()):
                return i
        return -1

    table_names = snap.schema.field_names
    source_names = source.columns
    terms: list[Column] = []
    misaligned = []
    for col in replace.columns:
        t, s = index(table_names, col), index(source_names, col)
        for at, relation, names in ((t, "table", table_names), (s, "query", source_names)):
            if at < 0:
                raise DeltaAnalysisException(
                    f"[UNRESOLVED_INSERT_REPLACE_USING_COLUMN] Column {sql_id(col.split('.'))} cannot be resolved in "
                    f"{relation}. Did you mean one of the following? [{', '.join(sql_id([n]) for n in sorted(names))}]."
                )
        if replace.by_position and t != s:
            misaligned.append(col)
        table_column = F.col(f"{quote_name(replace.alias)}.{quote_name(table_names[t])}")
        terms.append(table_column == source[source_names[s]])
    if misaligned:
        raise DeltaAnalysisException(
            "[INSERT_REPLACE_USING_DISALLOW_MISALIGNED_COLUMNS] INSERT REPLACE USING has misaligned columns: "
            f"{', '.join(sql_id([c]) for c in misaligned)}. The replaceUsing columns must be at the same ordinal "
            "position in both the table and the source query."
        )
    cond = terms[0]
    for term in terms[1:]:
        cond = cond & term
    return cond


def _resolve_on(spark: SparkSession, text: str, target: DataFrame, source: DataFrame) -> Column:
    refs = _condition_columns(spark, text)
    ambiguous: list[str] = []
    unresolved: list[str] = []
    for parts in refs:
        shown = sql_id(parts)
        in_table, in_source = _resolves(target, parts), _resolves(source, parts)
        if in_table and in_source and shown not in ambiguous:
            ambiguous.append(shown)
        if not in_table and not in_source and shown not in unresolved:
            unresolved.append(shown)
    if ambiguous:
        raise DeltaAnalysisException(
            f"[DELTA_INSERT_REPLACE_ON_AMBIGUOUS_COLUMNS_IN_CONDITION] Column(s) {', '.join(ambiguous)} are ambiguous "
            "in the condition of INSERT REPLACE ON. Consider specifying an alias for these columns."
        )
    if unresolved:
        raise DeltaAnalysisException(
            f"[DELTA_INSERT_REPLACE_ON_UNRESOLVED_COLUMNS_IN_CONDITION] Column(s) {', '.join(unresolved)} cannot be "
            "resolved in the condition of INSERT REPLACE ON."
        )
    return F.expr(text)


def _condition_columns(spark: SparkSession, text: str) -> list[list[str]]:
    """The column references of a SQL condition (each as its name parts), in order, by Spark's parser."""
    try:
        return backend(spark).expression_references(text)
    except Exception as e:  # noqa: BLE001 - Spark's ParseException, through py4j
        first = str(e).strip().split("\n", 1)[0]
        raise DeltaAnalysisException(f"Cannot parse the replaceOn condition '{text}': {first}") from None


def _resolves(df: DataFrame, parts: Sequence[str]) -> bool:
    """Whether the column named by ``parts`` resolves on ``df``'s output (its plan's ``resolve``, as
    delta-spark asks; no job, no query)."""
    return backend(df.sparkSession).resolves(df, parts)


@dataclass
class Matched:
    """The table's rows a replaceUsing / replaceOn write replaces, and how they leave the table.

    ``actions``: removes (and, with deletion vectors, the files re-added with their new
    vectors); ``written_dvs``: those re-adds (their vectors are new files); ``kept``: rows
    of removed files to write again (copy-on-write), None when none; ``deleted``: the
    matched rows, as a DataFrame of the table's columns (for change data; None with vectors).
    ``record_changes``: the commit must carry change data (``write_changes``): copy-on-write
    removed files of a table recording it, whose kept rows are no changes.
    """

    actions: list[Action] = field(default_factory=list)
    written_dvs: list[AddFile] = field(default_factory=list)
    kept: DataFrame | None = None
    deleted: DataFrame | None = None
    metrics: dict[str, int] = field(default_factory=dict)
    record_changes: bool = False


_FILE = "__serialake_replace_file"
_ROW = "__serialake_replace_row"


def match_rows(
    spark: SparkSession,
    txn: OptimisticTransaction,
    snap: Snapshot,
    replace: ReplaceRows,
    source: DataFrame,
    cond: Column,
) -> Matched:
    """Find the rows of the table some row of ``source`` matches (``cond``) and retire them.

    Reads the whole table (``txn.read_whole_table``); one Spark aggregate finds the files
    holding matched rows (and which rows, with deletion vectors).
    """
    files = txn.read_whole_table()
    dvs = uses_deletion_vectors(snap)
    alias = replace.alias

    def target(of: Sequence[AddFile], with_rows: bool) -> DataFrame:
        df = data_read.read_files_df(spark, snap, of, with_file_path=with_rows)
        if with_rows:
            df = df.withColumnRenamed(data_read.FILE_COLUMN, _FILE).withColumnRenamed(data_read.ROW_INDEX_COLUMN, _ROW)
        return df.alias(alias)

    # The table's columns of a row read under ``alias`` (beside the source's, after a join).
    columns = [F.col(f"{quote_name(alias)}.{quote_name(f.name)}").alias(f.name) for f in snap.schema.fields]

    out = Matched()
    if not files:
        out.metrics = {"numDeletedRows": 0, "numRemovedFiles": 0, "numRemovedBytes": 0, "numCopiedRows": 0}
        return out
    matched = target(files, True).join(source, cond, "left_semi")
    aggs = [F.count(F.lit(1)).alias("n")]
    if dvs:
        aggs.append(F.collect_list(_ROW).alias("rows"))
    by_path = {f.path: f for f in files}
    touched: list[tuple[AddFile, int, RowIndexSet | None]] = []
    for r in matched.groupBy(_FILE).agg(*aggs).collect():
        rows = RowIndexSet.from_iter(sorted(int(i) for i in r["rows"])) if dvs else None
        touched.append((by_path[r[_FILE]], int(r["n"]), rows))
    deleted = sum(n for _, n, _ in touched)
    stamp = now_ms()
    if dvs:
        changes = mark_deleted(snap.table_path, [(f, rows) for f, _, rows in touched if rows is not None], stamp)
        out.actions, out.written_dvs = list(changes.actions), list(changes.written)
        copied = sum(_live_rows(a) for a in changes.written)
        out.metrics = {"numDeletedRows": deleted, "numRemovedFiles": changes.files_removed,
                       "numRemovedBytes": changes.bytes_removed, "numCopiedRows": copied}  # fmt: skip
        return out
    removed = [f for f, _, _ in touched]
    out.actions = [f.remove(timestamp=stamp) for f in removed]
    copied = sum(_live_rows(f) for f in removed) - deleted
    if removed:
        rewritten = target(removed, False)
        if copied > 0 or any(f.num_records is None for f in removed):  # (without stats: look)
            out.kept = rewritten.join(source, cond, "left_anti").select(*columns)
        if core_cdf.enabled(snap.metadata):
            out.deleted = rewritten.join(source, cond, "left_semi").select(*columns)
            out.record_changes = True
    out.metrics = {"numDeletedRows": deleted, "numRemovedFiles": len(removed),
                   "numRemovedBytes": sum(f.size or 0 for f in removed), "numCopiedRows": max(copied, 0)}  # fmt: skip
    return out


def _live_rows(add: AddFile) -> int:
    """Rows of ``add`` its deletion vector leaves (0 when its stats lack numRecords)."""
    n = add.num_records or 0
    return n - (add.deletion_vector.cardinality if add.deletion_vector else 0)


def write_changes(snap: Snapshot, deleted: DataFrame | None, inserted: DataFrame) -> list[AddCDCFile]:
    """Change data of a copy-on-write replace on a table recording it: the deleted rows, then the new ones."""
    kind = core_cdf.CHANGE_TYPE
    rows = inserted.withColumn(kind, F.lit(core_cdf.INSERT))
    if deleted is not None:
        rows = deleted.withColumn(kind, F.lit(core_cdf.DELETE)).unionByName(rows)
    return cdf.write_change_files(rows, snap)


def metrics(adds: Sequence[AddFile], matched: Matched, changes: Sequence[AddCDCFile]) -> dict[str, Any]:
    """delta-spark's WRITE metrics of a replaceOn / replaceUsing commit (its replaceWhere set)."""
    written = [*adds, *matched.written_dvs]
    return {
        "numFiles": len(written),
        "numOutputBytes": sum(a.size or 0 for a in written),
        "numOutputRows": sum(a.num_records or 0 for a in adds) + sum(_live_rows(a) for a in matched.written_dvs),
        "numCopiedRows": matched.metrics.get("numCopiedRows", 0),
        "numDeletedRows": matched.metrics.get("numDeletedRows", 0),
        "numRemovedFiles": matched.metrics.get("numRemovedFiles", 0),
        "numRemovedBytes": matched.metrics.get("numRemovedBytes", 0),
        "numAddedChangeFiles": len(changes),
    }
