"""Row-level operations on Delta tables with Spark: one module per operation, one shared kernel.

- ``kernel``: what every operation shares (transaction, condition, target rows, metrics);
- ``engine``: the one place that decides whether a step runs on the driver (pyarrow) or on
  Spark, from the settings, and catches the one "not exact here" signal (``NotExact``);
- operations: ``delete``, ``update``, ``merge``, ``optimize``, ``restore``, ``insert`` (a
  non-blind append), ``reorg`` (REORG ... APPLY (PURGE)), ``drop_feature``, ``alter``
  (ADD COLUMNS, UNSET TBLPROPERTIES);
- driver paths (pyarrow, exact subset only): ``driver_files`` (reading and writing data
  files), ``driver_rewrite`` (finding rows, DELETE/UPDATE rewrites and the one rewrite
  loop), ``driver_merge``, ``driver_compaction``.

Deletion-vector policy (``core.dv_policy``) and commit-and-clean-up (``core.written``) are
engine-neutral and live in the core. Functions take ``(spark, table_path, ...)``;
``DeltaTable`` methods map onto them. The ``run_*`` variants return a ``DmlResult`` and
accept ``before_commit``, a callback run just before the commit (tests use it to
interleave concurrent operations deterministically).
"""

from __future__ import annotations

from serialake.spark.dml.alter import add_columns, unset_properties
from serialake.spark.dml.delete import delete, run_delete
from serialake.spark.dml.drop_feature import DROPPABLE_FEATURES, drop_feature
from serialake.spark.dml.engine import COMPACTION_MAX_BYTES_CONF, DML_MAX_BYTES_CONF
from serialake.spark.dml.insert import run_insert
from serialake.spark.dml.kernel import FILE_COL, ROW_COL, TARGET_ALIAS, DmlResult, affected_rows_df
from serialake.spark.dml.merge import DeltaMergeBuilder, merge, merge_result_df
from serialake.spark.dml.optimize import DeltaOptimizeBuilder, optimize
from serialake.spark.dml.reorg import purge_deletion_vectors
from serialake.spark.dml.restore import restore, restoreToTimestamp, restoreToVersion, run_restore
from serialake.spark.dml.update import run_update, update

__all__ = [
    "COMPACTION_MAX_BYTES_CONF",
    "DML_MAX_BYTES_CONF",
    "DROPPABLE_FEATURES",
    "FILE_COL",
    "ROW_COL",
    "TARGET_ALIAS",
    "DeltaMergeBuilder",
    "DeltaOptimizeBuilder",
    "DmlResult",
    "add_columns",
    "affected_rows_df",
    "delete",
    "drop_feature",
    "merge",
    "merge_result_df",
    "optimize",
    "purge_deletion_vectors",
    "restore",
    "restoreToTimestamp",
    "restoreToVersion",
    "run_delete",
    "run_insert",
    "run_restore",
    "run_update",
    "unset_properties",
    "update",
]
