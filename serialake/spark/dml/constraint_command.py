"""ALTER TABLE ... ADD CONSTRAINT name CHECK (expr) / DROP CONSTRAINT: CHECK constraints.

ADD CONSTRAINT reads every row of the table in its transaction and commits the constraint
(``delta.constraints.<name>``, writer feature ``checkConstraints``) only if none violates
it. The transaction read the whole table and changes the metadata, so a concurrent write
that committed first (even a blind append) fails it with ``ConcurrentAppendException``,
and one that commits after fails with ``MetadataChangedException``: no row that violates
the constraint can slip in between. From then on every write checks it
(``serialake.spark.invariants``).
"""

from __future__ import annotations

import re
from dataclasses import replace

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from serialake.core.model import constraints, features
from serialake.core.txn.written import BeforeCommit, commit_or_clean_up
from serialake.exceptions import DeltaAnalysisException
from serialake.spark import data_read, invariants
from serialake.spark.dml.kernel import open_transaction

__all__ = ["add_constraint", "drop_constraint"]

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def add_constraint(
    spark: SparkSession, table_path: str, name: str, expression: str, *, before_commit: BeforeCommit = None
) -> int:
    """Add CHECK constraint ``name``; fails, committing nothing, if a row of the table violates it."""
    txn, snap = open_transaction(table_path, "ADD CONSTRAINT")
    table = snap.table_path
    if not _NAME.match(name):
        raise DeltaAnalysisException(
            f"Invalid constraint name {name!r} for table {table}: use letters, digits and underscores."
        )
    key = constraints.CONSTRAINT_PREFIX + name.lower()
    existing = next(
        (c for c in constraints.check_constraints(snap.configuration) if c.name.lower() == name.lower()), None
    )
    if existing is not None:
        raise DeltaAnalysisException(
            f"Constraint '{name}' already exists on table {table} as CHECK ({existing.expression}). "
            "Drop it first (ALTER TABLE ... DROP CONSTRAINT)."
        )
    conf = {**snap.configuration, key: expression}
    invariants.check_definitions(spark, snap.schema, {key: expression}, table)
    files = txn.read_whole_table()
    if files:
        rows = data_read.read_files_df(spark, snap, files)
        violating = rows.filter(~F.coalesce(F.expr(expression), F.lit(False))).count()
        if violating:
            raise DeltaAnalysisException(
                f"{violating} row(s) of table {table} (version {snap.version}) violate the new CHECK constraint "
                f"{name} ({expression}); the constraint is not added.\n"
                "Help: fix or delete those rows first, e.g. DELETE ... WHERE NOT (<expression>)."
            )
    txn.update_metadata(replace(snap.metadata, configuration=conf))
    protocol = features.required_protocol(conf, base=snap.protocol)  # checkConstraints, unless it has it
    if protocol != snap.protocol:
        txn.update_protocol(protocol)
    params = {"name": name, "expr": expression}
    return commit_or_clean_up(txn, [], "ADD CONSTRAINT", params, {}, before_commit=before_commit)


def drop_constraint(table_path: str, name: str, *, if_exists: bool = False) -> int | None:
    """Drop CHECK constraint ``name`` (a metadata commit); None when it is absent and ``if_exists``."""
    txn, snap = open_transaction(table_path, "DROP CONSTRAINT")
    found = [k for k in snap.configuration if k.lower() == (constraints.CONSTRAINT_PREFIX + name).lower()]
    if not found:
        if if_exists:
            return None
        present = [c.name for c in constraints.check_constraints(snap.configuration)]
        raise DeltaAnalysisException(
            f"Cannot drop nonexistent constraint '{name}' from table {snap.table_path} "
            f"(its constraints: {', '.join(present) or 'none'}). Use DROP CONSTRAINT IF EXISTS to ignore this."
        )
    expression = snap.configuration[found[0]]
    conf = {k: v for k, v in snap.configuration.items() if k != found[0]}
    txn.update_metadata(replace(snap.metadata, configuration=conf))
    params = {"name": name, "expr": expression, "existed": "true"}  # delta-spark's DropConstraint
    return txn.commit([], "DROP CONSTRAINT", params)
