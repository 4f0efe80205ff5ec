"""``serialake.sql(spark, statement)``: Delta Lake SQL on serialake tables, returning DataFrames.

Tables are named by path (``delta.`/path```) or by a name registered with
``serialake.register(name, path)`` or created with ``CREATE TABLE name ... LOCATION``.
Statements other than Delta's pass through to ``spark.sql`` with table names resolved.

This package is also callable (``serialake.sql(spark, "...")``) because importing it
binds the name ``serialake.sql`` to the module, shadowing the lazily exported function;
a callable module keeps ``serialake.sql(...)`` and ``serialake.sql.SqlError`` both working.
"""

from __future__ import annotations

import sys
import types
from typing import TYPE_CHECKING

from serialake.core.tables.catalog import list_tables, lookup, register, unregister
from serialake.sql.errors import SqlError, UnsupportedStatementError
from serialake.sql.parser import parse_statement, split_statements

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = [
    "SqlError",
    "UnsupportedStatementError",
    "list_tables",
    "lookup",
    "parse_statement",
    "register",
    "split_statements",
    "sql",
    "unregister",
]


def sql(spark: SparkSession, statement: str) -> DataFrame | None:
    """Run one SQL statement; returns a DataFrame (empty for DDL), as ``spark.sql`` would.

    A statement that committed returns None instead when building its result failed after the
    commit (an ``AfterCommitWarning`` says why, ``serialake.core.txn.post_commit``): the commit stands.

    Raises ``SqlError`` (with line, column and the offending text) when the statement
    cannot be parsed, ``UnsupportedStatementError`` for statements serialake does not
    run, and the concurrency exceptions (``ConcurrentAppendException``, ...) on conflicts.
    """
    parsed = parse_statement(statement)
    from serialake.sql.execute import execute

    return execute(spark, parsed)


class _CallableModule(types.ModuleType):
    def __call__(self, spark: SparkSession, statement: str) -> DataFrame | None:
        return sql(spark, statement)


sys.modules[__name__].__class__ = _CallableModule
