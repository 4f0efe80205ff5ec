"""The statements ``serialake.sql`` runs, as typed values produced by the parser (no Spark here)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from sqlglot import exp

from serialake.core.predicates.expressions import ParsedCondition

__all__ = [
    "AddColumns",
    "Atomic",
    "BeginTransaction",
    "CommitTransaction",
    "RollbackTransaction",
    "ColumnSpec",
    "CreateTable",
    "CreateTempView",
    "Delete",
    "DescribeDetail",
    "DescribeHistory",
    "DescribeTable",
    "DropFeature",
    "DropTable",
    "Insert",
    "Merge",
    "MergeClause",
    "Optimize",
    "Passthrough",
    "Query",
    "Reorg",
    "Restore",
    "SetIsolation",
    "SetProperties",
    "ShowIsolation",
    "Statement",
    "TableRef",
    "UnsetProperties",
    "Update",
    "Vacuum",
]


@dataclass(frozen=True)
class TableRef:
    """A table as written: a path (``delta.`/p```, ``'/p'``) or a name to look up in the registry."""

    text: str
    path: str | None = None
    name: str | None = None

    @property
    def short_name(self) -> str:
        """The last part of the name (or of the path): the default alias in conditions."""
        if self.name is not None:
            return self.name.split(".")[-1].strip("`")
        return (self.path or self.text).rstrip("/").rsplit("/", 1)[-1]


@dataclass(frozen=True)
class Statement:
    """Base of every parsed statement; ``text`` is the statement as given."""

    text: str = field(default="", kw_only=True)


@dataclass(frozen=True)
class ColumnSpec:
    """A column in CREATE TABLE / ADD COLUMNS: name, Spark SQL type, nullability, comment.

    ``generated``: the expression of ``GENERATED ALWAYS AS (expr)`` (a generated column).
    ``identity``: ``(start, step, always)`` of ``GENERATED {ALWAYS | BY DEFAULT} AS IDENTITY``.
    """

    name: str
    type: str
    nullable: bool = True
    comment: str | None = None
    generated: str | None = None
    identity: tuple[int, int, bool] | None = None


@dataclass(frozen=True)
class CreateTable(Statement):
    """CREATE [OR REPLACE] TABLE [IF NOT EXISTS] ... USING DELTA [AS SELECT]."""

    table: TableRef
    columns: tuple[ColumnSpec, ...] = ()
    partition_by: tuple[str, ...] = ()
    properties: dict[str, str] = field(default_factory=dict)
    location: str | None = None
    comment: str | None = None
    if_not_exists: bool = False
    mode: Literal["create", "replace", "createOrReplace"] = "create"
    query: exp.Query | None = None
    cluster_by: tuple[str, ...] = ()


@dataclass(frozen=True)
class CreateTempView(Statement):
    """CREATE [OR REPLACE] TEMP VIEW name AS query (a query that may read Delta tables)."""

    name: str
    query: exp.Query
    replace: bool = False


@dataclass(frozen=True)
class Insert(Statement):
    """INSERT INTO / INSERT OVERWRITE [PARTITION (...)] [REPLACE WHERE] VALUES | SELECT."""

    table: TableRef
    query: exp.Expr
    columns: tuple[str, ...] | None = None
    overwrite: bool = False
    replace_where: str | None = None
    static_partition: dict[str, exp.Expr] = field(default_factory=dict)
    by_name: bool = False
    replace_on_using: bool = False  # INSERT INTO t REPLACE ON / USING: refused, as delta-spark does


@dataclass(frozen=True)
class Delete(Statement):
    """DELETE FROM table [WHERE condition] (also TRUNCATE TABLE)."""

    table: TableRef
    condition: str | None = None
    operation: str = "DELETE"
    where: ParsedCondition | None = field(default=None, compare=False, repr=False)  # ``condition``, parsed
    alias: str | None = None  # the target's alias (``DELETE FROM t AS x``), for correlated subqueries


@dataclass(frozen=True)
class Update(Statement):
    """UPDATE table SET col = expr, ... [WHERE condition]."""

    table: TableRef
    assignments: tuple[tuple[str, str], ...]
    condition: str | None = None
    where: ParsedCondition | None = field(default=None, compare=False, repr=False)  # ``condition``, parsed
    alias: str | None = None  # the target's alias (``UPDATE t AS x``), for correlated subqueries


@dataclass(frozen=True)
class MergeClause:
    """One WHEN clause of a MERGE."""

    match: Literal["matched", "not_matched", "not_matched_by_source"]
    action: Literal["update", "update_all", "delete", "insert", "insert_all"]
    condition: str | None = None
    assignments: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class Merge(Statement):
    """MERGE [WITH SCHEMA EVOLUTION] INTO target [alias] USING source [alias] ON condition WHEN ..."""

    target: TableRef
    target_alias: str
    source: exp.Expr
    source_alias: str
    condition: str
    clauses: tuple[MergeClause, ...]
    schema_evolution: bool = False


@dataclass(frozen=True)
class SetProperties(Statement):
    """ALTER TABLE ... SET TBLPROPERTIES (...)."""

    table: TableRef
    properties: dict[str, str]


@dataclass(frozen=True)
class UnsetProperties(Statement):
    """ALTER TABLE ... UNSET TBLPROPERTIES [IF EXISTS] (...)."""

    table: TableRef
    keys: tuple[str, ...]
    if_exists: bool = False


@dataclass(frozen=True)
class AddColumns(Statement):
    """ALTER TABLE ... ADD COLUMN[S] (...)."""

    table: TableRef
    columns: tuple[ColumnSpec, ...]


@dataclass(frozen=True)
class DropFeature(Statement):
    """ALTER TABLE ... DROP FEATURE name [TRUNCATE HISTORY]."""

    table: TableRef
    feature: str
    truncate_history: bool = False


@dataclass(frozen=True)
class Optimize(Statement):
    """OPTIMIZE table [WHERE partition predicate] [ZORDER BY (cols)] [FULL]."""

    table: TableRef
    where: str | None = None
    zorder_by: tuple[str, ...] = ()
    full: bool = False


@dataclass(frozen=True)
class Reorg(Statement):
    """REORG TABLE table [WHERE partition predicate] APPLY (PURGE)."""

    table: TableRef
    where: str | None = None


@dataclass(frozen=True)
class SyncMetadata(Statement):
    """MSCK REPAIR TABLE table SYNC METADATA (UniForm: convert the latest version to Iceberg now)."""

    table: TableRef


@dataclass(frozen=True)
class UpgradeUniform(Statement):
    """REORG TABLE table APPLY (UPGRADE UNIFORM(ICEBERG_COMPAT_VERSION=n))."""

    table: TableRef
    compat_version: int = 2


@dataclass(frozen=True)
class DescribeHistory(Statement):
    """DESCRIBE HISTORY table [LIMIT n]."""

    table: TableRef
    limit: int | None = None


@dataclass(frozen=True)
class ChangeColumn(Statement):
    """ALTER TABLE ... {ALTER|CHANGE} [COLUMN] col [new_name type] [TYPE t] [COMMENT 'c']
    [FIRST | AFTER c] [{SET|DROP} NOT NULL]."""

    table: TableRef
    column: tuple[str, ...]
    new_name: str | None = None
    data_type: str | None = None
    comment: str | None = None
    nullable: bool | None = None
    first: bool = False
    after: str | None = None


@dataclass(frozen=True)
class RenameColumn(Statement):
    """ALTER TABLE ... RENAME COLUMN a[.b] TO c (column mapping tables)."""

    table: TableRef
    column: tuple[str, ...]
    new_name: str


@dataclass(frozen=True)
class DropColumns(Statement):
    """ALTER TABLE ... DROP COLUMN[S] [IF EXISTS] a[, b.c] (column mapping tables)."""

    table: TableRef
    columns: tuple[tuple[str, ...], ...]
    if_exists: bool = False


@dataclass(frozen=True)
class Clone(Statement):
    """CREATE [OR REPLACE] TABLE [IF NOT EXISTS] t [SHALLOW | DEEP] CLONE source
    [VERSION AS OF n | TIMESTAMP AS OF ts] [TBLPROPERTIES (...)] [LOCATION 'path']."""

    table: TableRef
    source: TableRef
    shallow: bool = False
    mode: Literal["create", "replace", "createOrReplace"] = "create"
    if_not_exists: bool = False
    version: int | None = None
    timestamp: str | None = None
    properties: dict[str, str] = field(default_factory=dict)
    location: str | None = None


@dataclass(frozen=True)
class ClusterBy(Statement):
    """ALTER TABLE ... CLUSTER BY (cols) | CLUSTER BY NONE (liquid clustering columns)."""

    table: TableRef
    columns: tuple[str, ...]


@dataclass(frozen=True)
class RenameTable(Statement):
    """ALTER TABLE name RENAME TO new_name (the catalog's name; the files stay)."""

    table: TableRef
    new_name: str


@dataclass(frozen=True)
class SetLocation(Statement):
    """ALTER TABLE name SET LOCATION 'path': the name now refers to the Delta table at ``path``."""

    table: TableRef
    location: str


@dataclass(frozen=True)
class AddConstraint(Statement):
    """ALTER TABLE ... ADD CONSTRAINT name CHECK (expression)."""

    table: TableRef
    name: str
    expression: str


@dataclass(frozen=True)
class DropConstraint(Statement):
    """ALTER TABLE ... DROP CONSTRAINT [IF EXISTS] name."""

    table: TableRef
    name: str
    if_exists: bool = False


@dataclass(frozen=True)
class ConvertToDelta(Statement):
    """CONVERT TO DELTA parquet.`path` [NO STATISTICS] [PARTITIONED BY (col type, ...)]."""

    identifier: str
    partition_schema: str | None = None


@dataclass(frozen=True)
class Generate(Statement):
    """GENERATE symlink_format_manifest FOR TABLE table."""

    table: TableRef
    mode: str


@dataclass(frozen=True)
class ShowProperties(Statement):
    """SHOW TBLPROPERTIES table [(key)]: ours for a Delta table, else Spark's answer."""

    table: TableRef
    key: str | None = None


@dataclass(frozen=True)
class DescribeDetail(Statement):
    """DESCRIBE DETAIL table."""

    table: TableRef


@dataclass(frozen=True)
class DescribeTable(Statement):
    """DESCRIBE [TABLE] [EXTENDED] table: our columns for a Delta table, else Spark's answer."""

    table: TableRef
    extended: bool = False


@dataclass(frozen=True)
class Vacuum(Statement):
    """VACUUM table [RETAIN n HOURS] [DRY RUN]."""

    table: TableRef
    retain_hours: float | None = None
    dry_run: bool = False


@dataclass(frozen=True)
class Restore(Statement):
    """RESTORE [TABLE] table [TO] VERSION AS OF n | TIMESTAMP AS OF expr."""

    table: TableRef
    version: int | None = None
    timestamp: str | None = None


@dataclass(frozen=True)
class DropTable(Statement):
    """DROP TABLE [IF EXISTS] name: forget the name (the data stays)."""

    table: TableRef
    if_exists: bool = False


@dataclass(frozen=True)
class SetIsolation(Statement):
    """SET TRANSACTION_ISOLATION TO 'level' (session read isolation)."""

    level: str
    requested: str


@dataclass(frozen=True)
class ShowIsolation(Statement):
    """SHOW TRANSACTION_ISOLATION."""


@dataclass(frozen=True)
class BeginTransaction(Statement):
    """BEGIN [TRANSACTION | WORK] / START TRANSACTION: open the session's transaction across tables."""


@dataclass(frozen=True)
class CommitTransaction(Statement):
    """COMMIT [TRANSACTION | WORK]: commit the session's transaction."""


@dataclass(frozen=True)
class RollbackTransaction(Statement):
    """ROLLBACK [TRANSACTION | WORK]: abort the session's transaction."""


@dataclass(frozen=True)
class Atomic(Statement):
    """BEGIN ATOMIC <statement>; ... END: the statements run as one transaction across tables."""

    statements: tuple[Statement, ...]


@dataclass(frozen=True)
class Query(Statement):
    """A query (SELECT, VALUES, set operations, WITH ...) whose Delta tables are read by us."""

    expression: exp.Expr


@dataclass(frozen=True)
class Passthrough(Statement):
    """Any other statement: given to ``spark.sql`` with Delta table names resolved (when parsed)."""

    expression: exp.Expr | None = None
    kind: str = ""
