"""What a table requires of every row it stores: generated columns and CHECK constraints.

Both live in the table metadata, as the Delta protocol defines them:

- a **generated column** carries its SQL expression in the field metadata
  (``delta.generationExpression``); writers compute the column when the data lacks it and
  reject rows whose value differs from the expression (writer feature ``generatedColumns``);
- a **CHECK constraint** is a table property ``delta.constraints.<name> = <SQL boolean>``;
  writers reject every row for which it is not true (writer feature ``checkConstraints``).

This module only reads and validates the definitions; the Spark layer evaluates them on
the rows (``serialake.spark.invariants``). Expressions are Spark SQL, parsed with sqlglot
only to find the columns they read.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from serialake.core.model.properties import CONSTRAINT_PREFIX
from serialake.core.model.schema import StructType
from serialake.exceptions import DeltaAnalysisException

__all__ = [
    "CONSTRAINT_PREFIX",
    "GENERATION_EXPRESSION",
    "CheckConstraint",
    "GeneratedColumn",
    "check_constraints",
    "refuse_constraint_properties",
    "generated_columns",
    "referenced_columns",
    "validate_generated_columns",
]

GENERATION_EXPRESSION = "delta.generationExpression"


@dataclass(frozen=True)
class GeneratedColumn:
    """A top-level column whose value is ``expression`` over the row's other columns."""

    name: str
    expression: str


@dataclass(frozen=True)
class CheckConstraint:
    """``delta.constraints.<name>``: every stored row satisfies ``expression``."""

    name: str
    expression: str


def generated_columns(schema: StructType) -> list[GeneratedColumn]:
    """The schema's generated columns, in schema order."""
    out = []
    for f in schema.fields:
        expression = f.metadata.get(GENERATION_EXPRESSION)
        if isinstance(expression, str) and expression.strip():
            out.append(GeneratedColumn(f.name, expression))
    return out


def check_constraints(configuration: Mapping[str, str]) -> list[CheckConstraint]:
    """The table's CHECK constraints, by name."""
    out = []
    for key, value in sorted(configuration.items()):
        if key.lower().startswith(CONSTRAINT_PREFIX):
            out.append(CheckConstraint(key[len(CONSTRAINT_PREFIX):], value))
    return out


def referenced_columns(expression: str, *, what: str) -> set[str]:
    """Lower-cased names of the top-level columns a Spark SQL expression reads."""
    import sqlglot
    from sqlglot import exp

    try:
        tree = sqlglot.parse_one(expression, read="spark")
    except sqlglot.errors.ParseError as e:
        raise DeltaAnalysisException(f"{what}: cannot parse the expression {expression!r}: {e}") from None
    if tree.find(exp.Subquery, exp.Select) is not None:
        raise DeltaAnalysisException(f"{what}: the expression {expression!r} cannot contain a subquery")
    names = set()
    for col in tree.find_all(exp.Column):
        parts = [p.name for p in col.parts]
        names.add(parts[0].lower())
    return names


def validate_generated_columns(schema: StructType, table: str) -> None:
    """Delta's rules on generation expressions: known columns, no generated or self references.

    Spark checks the rest (types, determinism) when the table is created
    (``serialake.spark.invariants.check_definitions``).
    """
    generated = generated_columns(schema)
    gen_names = {g.name.lower() for g in generated}
    known = {f.name.lower() for f in schema.fields}
    for g in generated:
        what = f"Generated column '{g.name}' of table {table}"
        refs = referenced_columns(g.expression, what=what)
        unknown = sorted(refs - known)
        if unknown:
            raise DeltaAnalysisException(
                f"{what}: its expression {g.expression!r} references unknown column(s) {', '.join(unknown)} "
                f"(columns: {', '.join(schema.field_names)})"
            )
        if refs & gen_names:
            raise DeltaAnalysisException(
                f"{what}: its expression {g.expression!r} references generated column(s) "
                f"{', '.join(sorted(refs & gen_names))}; a generation expression may only read other columns"
            )


def refuse_constraint_properties(changed: Mapping[str, str], table: str) -> None:
    """Refuse setting ``delta.constraints.*`` as plain properties: existing rows would go unchecked.

    Constraints are added by ``ALTER TABLE ... ADD CONSTRAINT``, which checks every row first.
    """
    keys = sorted(k for k in changed if k.lower().startswith(CONSTRAINT_PREFIX))
    if keys:
        raise DeltaAnalysisException(
            f"Cannot set {', '.join(keys)} on table {table} as table properties: the table's existing rows would "
            "not be checked.\nHelp: use ALTER TABLE ... ADD CONSTRAINT <name> CHECK (<condition>), which checks "
            "them, and DROP CONSTRAINT to remove one."
        )
