"""Row-level operations on Delta tables with Spark: one module per operation, one shared kernel.

- ``kernel``: what every operation shares (transaction, condition, target rows, metrics);
- ``engines``: the data work of an operation behind one protocol (``engines.base.DataEngine``:
  find rows, delete rows, update, merge, compact, evaluate rows for conflict checks), with a
  driver (pyarrow, ``engines.driver``) and a Spark (``engines.spark``, ``engines.spark_merge``)
  implementation;
- ``engine``: the one place that decides whether a step runs on the driver or on Spark, from
  the settings, and catches the one "not exact here" signal (``NotExact``);
- operations, one ``*_command`` module each (as Delta's ``DeleteCommand``...): ``delete``,
  ``update``, ``merge``, ``optimize``, ``restore``, ``insert`` (a non-blind append),
  ``reorg`` (REORG ... APPLY (PURGE)), ``drop_feature``, ``alter`` (ADD COLUMNS, ALTER
  COLUMN, UNSET TBLPROPERTIES), ``vacuum``; this package exposes their entry points (``dml.delete``,
  ``dml.run_delete``, ``dml.merge``...), each module loaded on first use;
- driver paths (pyarrow, exact subset only): ``driver_files`` (reading and writing data
  files, finding rows, the one rewrite loop), ``driver_merge``, ``driver_compaction``; the
  DELETE and UPDATE rewrites are in ``engines.driver``.

Deletion-vector policy (``core.dv.dv_policy``) and commit-and-clean-up (``core.txn.written``) are
engine-neutral and live in the core. Functions take ``(spark, table_path, ...)``;
``DeltaTable`` methods map onto them. The ``run_*`` variants return a ``DmlResult`` and
accept ``before_commit``, a callback run just before the commit (tests use it to
interleave concurrent operations deterministically).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from serialake.spark.dml.alter_command import (
        add_columns,
        change_column,
        cluster_by,
        drop_columns,
        rename_column,
        unset_properties,
    )
    from serialake.spark.dml.clone_command import run_clone
    from serialake.spark.dml.constraint_command import add_constraint, drop_constraint
    from serialake.spark.dml.convert_command import convert_to_delta, parquet_identifier_path
    from serialake.spark.dml.delete_command import delete, run_delete
    from serialake.spark.dml.drop_feature_command import DROPPABLE_FEATURES, drop_feature
    from serialake.spark.dml.engine import COMPACTION_MAX_BYTES_CONF, DML_MAX_BYTES_CONF
    from serialake.spark.dml.generate_command import generate
    from serialake.spark.dml.insert_command import run_insert
    from serialake.spark.dml.kernel import FILE_COL, ROW_COL, TARGET_ALIAS, DmlResult, affected_rows_df
    from serialake.spark.dml.merge_command import DeltaMergeBuilder, merge, merge_result_df
    from serialake.spark.dml.optimize_command import DeltaOptimizeBuilder, optimize
    from serialake.spark.dml.reorg_command import purge_deletion_vectors, upgrade_uniform
    from serialake.spark.dml.restore_command import (
        restore,
        restore_metrics_df,
        restoreToTimestamp,
        restoreToVersion,
        run_restore,
    )
    from serialake.spark.dml.update_command import run_update, update
    from serialake.spark.dml.vacuum_command import RETENTION_CHECK_CONF, vacuum

# Each name's module, imported on first use: an operation loads only the modules it runs.
_MODULE_OF = {
    "add_columns": "alter_command",
    "change_column": "alter_command",
    "cluster_by": "alter_command",
    "drop_columns": "alter_command",
    "rename_column": "alter_command",
    "unset_properties": "alter_command",
    "run_clone": "clone_command",
    "add_constraint": "constraint_command",
    "drop_constraint": "constraint_command",
    "convert_to_delta": "convert_command",
    "parquet_identifier_path": "convert_command",
    "generate": "generate_command",
    "delete": "delete_command",
    "run_delete": "delete_command",
    "DROPPABLE_FEATURES": "drop_feature_command",
    "drop_feature": "drop_feature_command",
    "COMPACTION_MAX_BYTES_CONF": "engine",
    "DML_MAX_BYTES_CONF": "engine",
    "run_insert": "insert_command",
    "FILE_COL": "kernel",
    "ROW_COL": "kernel",
    "TARGET_ALIAS": "kernel",
    "DmlResult": "kernel",
    "affected_rows_df": "kernel",
    "DeltaMergeBuilder": "merge_command",
    "merge": "merge_command",
    "merge_result_df": "merge_command",
    "DeltaOptimizeBuilder": "optimize_command",
    "optimize": "optimize_command",
    "purge_deletion_vectors": "reorg_command",
    "upgrade_uniform": "reorg_command",
    "restore": "restore_command",
    "restore_metrics_df": "restore_command",
    "restoreToTimestamp": "restore_command",
    "restoreToVersion": "restore_command",
    "run_restore": "restore_command",
    "run_update": "update_command",
    "update": "update_command",
    "RETENTION_CHECK_CONF": "vacuum_command",
    "vacuum": "vacuum_command",
}

__all__ = [
    "COMPACTION_MAX_BYTES_CONF",
    "DML_MAX_BYTES_CONF",
    "DROPPABLE_FEATURES",
    "DeltaMergeBuilder",
    "DeltaOptimizeBuilder",
    "DmlResult",
    "FILE_COL",
    "RETENTION_CHECK_CONF",
    "ROW_COL",
    "TARGET_ALIAS",
    "add_columns",
    "add_constraint",
    "affected_rows_df",
    "change_column",
    "cluster_by",
    "convert_to_delta",
    "delete",
    "drop_columns",
    "drop_constraint",
    "drop_feature",
    "generate",
    "merge",
    "merge_result_df",
    "optimize",
    "parquet_identifier_path",
    "purge_deletion_vectors",
    "rename_column",
    "restore",
    "restore_metrics_df",
    "restoreToTimestamp",
    "restoreToVersion",
    "run_clone",
    "run_delete",
    "run_insert",
    "run_restore",
    "run_update",
    "unset_properties",
    "update",
    "upgrade_uniform",
    "vacuum",
]


def __getattr__(name: str) -> Any:
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value
