"""Schemas between Spark and Delta: conversion both ways (both sides speak Spark's JSON) and
``conform``, a column cast to an evolved type by field name."""

from __future__ import annotations

import json
from typing import Any

from pyspark.sql import Column
from pyspark.sql import functions as F
from pyspark.sql import types as T

from serialake.core.model.schema import StructType
from serialake.spark.columns import WRITE_SIDE_METADATA

__all__ = ["conform", "has_spark_struct", "to_delta_schema", "to_spark_schema"]


def to_delta_schema(spark_schema: T.StructType) -> StructType:
    """The Delta schema of a Spark ``StructType``."""
    return StructType.from_json(spark_schema.json())


def to_spark_schema(schema: StructType) -> T.StructType:
    """The Spark ``StructType`` of a Delta schema, without Delta's write-side column metadata.

    A generated column's expression (and an identity column's state) stays in the table
    metadata: DataFrames read from the table do not carry it, as with Delta.
    """
    value = json.loads(schema.to_json())
    _drop_write_side_metadata(value)
    result = T.StructType.fromJson(value)
    assert isinstance(result, T.StructType)
    return result


def _drop_write_side_metadata(value: Any) -> None:
    """Remove ``WRITE_SIDE_METADATA`` keys from the fields of a schema's JSON value, at any depth."""
    if isinstance(value, dict):
        meta = value.get("metadata")
        if isinstance(meta, dict) and any(k.startswith(WRITE_SIDE_METADATA) for k in meta):
            value["metadata"] = {k: v for k, v in meta.items() if not k.startswith(WRITE_SIDE_METADATA)}
        for key in ("fields", "type", "elementType", "keyType", "valueType"):
            inner = value.get(key)
            if isinstance(inner, list):
                for item in inner:
                    _drop_write_side_metadata(item)
            elif isinstance(inner, dict):
                _drop_write_side_metadata(inner)


def conform(col: Column, given: T.DataType, target: T.DataType) -> Column:
    """``col`` (of type ``given``) as ``target``: struct fields matched by name at any depth, fields
    ``given`` lacks NULL, other types cast. Spark's own struct cast is positional and needs as
    many fields on both sides, which an evolved schema (new nested fields) does not have."""
    if given.simpleString().lower() == target.simpleString().lower():
        return col.cast(target)
    if isinstance(given, T.StructType) and isinstance(target, T.StructType):
        have = {f.name.lower(): f for f in given.fields}
        parts = []
        for f in target.fields:
            g = have.get(f.name.lower())
            parts.append(
                F.lit(None).cast(f.dataType) if g is None else conform(col.getField(g.name), g.dataType, f.dataType)
            )
        return F.when(col.isNull(), F.lit(None).cast(target)).otherwise(
            F.struct(*[v.alias(f.name) for v, f in zip(parts, target.fields)])
        )
    if isinstance(given, T.ArrayType) and isinstance(target, T.ArrayType) and has_spark_struct(target):
        return F.transform(col, lambda x: conform(x, given.elementType, target.elementType))
    if isinstance(given, T.MapType) and isinstance(target, T.MapType) and has_spark_struct(target.valueType):
        return F.transform_values(col, lambda _, v: conform(v, given.valueType, target.valueType))
    return col.cast(target)


def has_spark_struct(t: T.DataType) -> bool:
    """Whether a Spark type holds a struct (itself, or as array element or map value)."""
    if isinstance(t, T.StructType):
        return True
    if isinstance(t, T.ArrayType):
        return has_spark_struct(t.elementType)
    if isinstance(t, T.MapType):
        return has_spark_struct(t.valueType)
    return False
