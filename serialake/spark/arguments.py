"""delta-spark's checks of Python arguments: the same exception classes (``TypeError``,
``ValueError``) and messages, raised before anything runs, as code written against
delta-spark expects (``DeltaTable``, its builders, the MERGE builder)."""

from __future__ import annotations

from typing import Any

from pyspark.sql import Column

__all__ = ["check_assignments", "check_condition", "check_type"]


def check_type(value: Any, kinds: type | tuple[type, ...], name: str, what: str) -> None:
    """delta-spark's argument check: ``ValueError`` naming the argument and the type found."""
    if not isinstance(value, kinds) or (isinstance(value, bool) and kinds is int):
        raise ValueError(f"{name} needs to be {what} but got '{type(value)}'.")


def check_condition(condition: Any, argname: str = "'condition'") -> None:
    if condition is not None and not isinstance(condition, (str, Column)):
        raise TypeError(
            f"{argname} must be a Spark SQL Column or a string (expression in SQL syntax), "
            f"found to be of type {type(condition)}"
        )


def check_assignments(values: Any, argname: str) -> None:
    """delta-spark's check of a ``set`` / ``values`` dict: column name keys, SQL text or Column values."""
    if values is None:
        raise ValueError(f"{argname} cannot be None")
    if type(values) is not dict:
        raise TypeError(f"{argname} must be a dict, found to be {type(values)}")
    for key, value in values.items():
        if type(key) is not str:
            raise TypeError(
                f"Keys of dict in {argname} must contain only strings with column names, "
                f"found '{key}' of type '{type(key)}'"
            )
        if not isinstance(value, (str, Column)):
            raise TypeError(
                f"Values of dict in {argname} must contain only Spark SQL Columns or strings (expressions in SQL "
                f"syntax) as values, found '{value}' of type '{type(value)}'"
            )
