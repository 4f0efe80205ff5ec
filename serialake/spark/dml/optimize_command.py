"""OPTIMIZE: bin-packing compaction and Z-ordering, with delta-spark's builder API.

``optimize().where("p = 1").executeCompaction()`` packs, per partition, the files smaller
than the target size into bins of at most that size and rewrites each bin as one file;
``executeZOrderBy("x", "y")`` rewrites every file of the selected partitions sorted by an
interleaved z-value of the columns' ranks. Both commit with ``dataChange=false`` (rows
are rearranged, not changed) and record no reads: concurrent appends never conflict, and
a concurrent change of an input file fails the OPTIMIZE (or, with deletion vectors, is
carried over by the core's conflict checker, ``core.txn.compaction_rebase``; a concurrent
compaction of the same files makes it drop its work on them, and commit nothing if none is
left).

Row mapping: each compaction output holds the live rows of its inputs in input order
(inputs in the order recorded, rows in physical order, deleted rows skipped) and carries
the tag ``serialake.compactedFrom`` = JSON ``[[input path, input DV unique id or null,
live row count], ...]``. The core uses it to move a concurrent DELETE's row marks from an
input to the same rows of the output. Z-ordered and clustered files reorder rows and get no
tag: the core finds an input's rows in them by their values (``core.txn.row_matching``).
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql import types as T

from serialake.core.log.snapshot import Snapshot
from serialake.core.model import clustering
from serialake.core.model import properties as props
from serialake.core.model.actions import Action, AddFile, FileAction, RemoveFile, now_ms
from serialake.core.model.paths import absolute_path, parquet_metadata
from serialake.core.model.schema import StructType
from serialake.core.model.stats import stats_columns
from serialake.core.predicates import expressions as P
from serialake.core.predicates import skipping
from serialake.core.txn.post_commit import after_commit
from serialake.core.txn.row_level import COMPACTED_FROM_TAG
from serialake.core.txn.written import BeforeCommit, commit_or_clean_up
from serialake.exceptions import DeltaAnalysisException, DeltaIllegalArgumentException
from serialake.spark import data_read
from serialake.spark.backend import backend
from serialake.spark.columns import data_fields, quote_name
from serialake.spark.dml import engine
from serialake.spark.dml.engine import Engine
from serialake.spark.dml.kernel import (
    DmlResult,
    elapsed_ms,
    file_bytes,
    json_list,
    live_rows,
    open_transaction,
    write_rows,
)
from serialake.spark.dml.kernel import result_df as kernel_result_df
from serialake.spark.errors import pyspark_errors

__all__ = [
    "DeltaOptimizeBuilder",
    "MAX_FILE_SIZE_CONF",
    "MAX_THREADS_CONF",
    "ZORDER_BITS",
    "optimize",
    "write_compacted",
]

MAX_FILE_SIZE_CONF = "spark.databricks.delta.optimize.maxFileSize"
MAX_FILE_SIZE_DEFAULT = 1024 * 1024 * 1024
MAX_THREADS_CONF = "spark.databricks.delta.optimize.maxThreads"
MAX_THREADS_DEFAULT = 4
DELETED_RATIO_CONF = "spark.databricks.delta.optimize.maxDeletedRowsRatio"
DELETED_RATIO_DEFAULT = 0.05
ZORDER_BITS = 16  # rank bits per column in the z-value (fewer when many columns share 62 bits)

_Z = "__serialake_z"
_ALIAS = "__serialake_optimize"

_FILE_STATS = T.StructType(
    [
        T.StructField("min", T.LongType()),
        T.StructField("max", T.LongType()),
        T.StructField("avg", T.DoubleType()),
        T.StructField("totalFiles", T.LongType()),
        T.StructField("totalSize", T.LongType()),
    ]
)
def _struct(*fields: tuple[str, T.DataType]) -> T.StructType:
    return T.StructType([T.StructField(name, t) for name, t in fields])


_LONG = T.LongType()
_ZORDER_FILES = _struct(("num", _LONG), ("size", _LONG))
_CLUSTERING_FILES = _struct(("numFiles", _LONG), ("size", _LONG))
# delta-spark's OptimizeMetrics, field for field (its Scala case class, in order).
_RESULT_SCHEMA = _struct(
    ("path", T.StringType()),
    ("metrics", _struct(
        ("numFilesAdded", _LONG),
        ("numFilesRemoved", _LONG),
        ("filesAdded", _FILE_STATS),
        ("filesRemoved", _FILE_STATS),
        ("partitionsOptimized", _LONG),
        ("zOrderStats", _struct(
            ("strategyName", T.StringType()), ("inputCubeFiles", _ZORDER_FILES), ("inputOtherFiles", _ZORDER_FILES),
            ("inputNumCubes", _LONG), ("mergedFiles", _ZORDER_FILES), ("numOutputCubes", _LONG),
            ("mergedNumCubes", _LONG),
        )),
        ("clusteringStats", _struct(
            ("inputZCubeFiles", _CLUSTERING_FILES), ("inputOtherFiles", _CLUSTERING_FILES),
            ("inputNumZCubes", _LONG), ("mergedFiles", _CLUSTERING_FILES), ("numOutputZCubes", _LONG),
        )),
        ("numBins", _LONG),
        ("numBatches", _LONG),
        ("totalConsideredFiles", _LONG),
        ("totalFilesSkipped", _LONG),
        ("preserveInsertionOrder", T.BooleanType()),
        ("numFilesSkippedToReduceWriteAmplification", _LONG),
        ("numBytesSkippedToReduceWriteAmplification", _LONG),
        ("startTimeMs", _LONG),
        ("endTimeMs", _LONG),
        ("totalClusterParallelism", _LONG),
        ("totalScheduledTasks", _LONG),
        ("autoCompactParallelismStats", _struct(
            ("maxClusterActiveParallelism", _LONG), ("minClusterActiveParallelism", _LONG),
            ("maxSessionActiveParallelism", _LONG), ("minSessionActiveParallelism", _LONG),
        )),
        ("deletionVectorStats", _struct(("numDeletionVectorsRemoved", _LONG), ("numDeletionVectorRowsRemoved", _LONG))),
        ("numTableColumns", _LONG),
        ("numTableColumnsWithStats", _LONG),
    )),
)  # fmt: skip


@pyspark_errors
class DeltaOptimizeBuilder:
    """Builder returned by ``DeltaTable.optimize()``."""

    def __init__(self, spark: SparkSession, table_path: str, *, target_file_size: int | None = None) -> None:
        if target_file_size is not None and target_file_size <= 0:
            raise DeltaIllegalArgumentException(f"target_file_size must be positive, got {target_file_size}")
        self._spark = spark
        self._path = table_path
        self._where: list[str] = []
        self._target = target_file_size

    def where(self, partitionFilter: str) -> DeltaOptimizeBuilder:  # noqa: N803
        """Optimize only the partitions matching this SQL predicate on partition columns."""
        if not isinstance(partitionFilter, str):
            raise DeltaIllegalArgumentException("OPTIMIZE where() takes a SQL string on partition columns")
        self._where.append(partitionFilter)
        return self

    def executeCompaction(self) -> DataFrame | None:  # noqa: N802
        """Bin-pack small files; one row ``(path, metrics)`` as delta-spark returns (``committed_df``)."""
        return self.committed_df(self.run_compaction())

    def executeZOrderBy(self, *cols: str | Sequence[str]) -> DataFrame | None:  # noqa: N802
        """Rewrite the selected partitions clustered by a z-order of ``cols`` (result: ``committed_df``)."""
        names = [c for group in cols for c in ([group] if isinstance(group, str) else list(group))]
        return self.committed_df(self.run_zorder(names))

    def committed_df(self, result: DmlResult) -> DataFrame | None:
        """``result_df(result)``, built after the commit: None, with a warning, when building it fails."""
        return kernel_result_df(self._spark, self._path, "OPTIMIZE", result, lambda _, r: self.result_df(r))

    # -- runs ---------------------------------------------------------------------
    def run_compaction(self, *, full: bool = False, before_commit: BeforeCommit = None) -> DmlResult:
        """Compaction as a ``DmlResult`` (``before_commit`` runs just before committing).

        On a clustered table this clusters: the files no OPTIMIZE clustered yet (``full``:
        every file) are rewritten ordered by the z-value of the clustering columns, and the
        new files say ``clusteringProvider: liquid``.
        """
        start = time.monotonic()
        txn, snap = open_transaction(self._path, "OPTIMIZE")
        cluster_by = clustering.clustering_columns(snap.domain_metadata, snap.schema, snap.table_path)
        if cluster_by:
            return self._cluster(txn, snap, cluster_by, full, start, before_commit)
        target = self._target_size(snap)
        files = self._selected_files(snap)
        bins = _bins(snap, files, target, self._max_deleted_ratio())
        adds = write_compacted(self._spark, snap, bins)
        inputs = [f for b in bins for f in b]
        return self._commit(txn, snap, inputs, adds, files, len(bins), [], start, before_commit)

    def run_zorder(self, columns: Sequence[str], *, before_commit: BeforeCommit = None) -> DmlResult:
        """Z-order as a ``DmlResult``."""
        start = time.monotonic()
        txn, snap = open_transaction(self._path, "OPTIMIZE")
        cluster_by = clustering.clustering_columns(snap.domain_metadata, snap.schema, snap.table_path)
        if cluster_by:
            raise DeltaAnalysisException(
                f"OPTIMIZE ZORDER BY on table {snap.table_path}: the table is clustered by {', '.join(cluster_by)}; "
                "OPTIMIZE clusters it by those columns (executeCompaction / OPTIMIZE without ZORDER BY)."
            )
        names = self._zorder_columns(snap, columns)
        files = self._selected_files(snap)
        adds = self._write_zordered(snap, files, [F.col(quote_name(n)) for n in names])
        cubes = len({_partition_key(f) for f in files})  # one z-ordered cube per partition
        return self._commit(txn, snap, files, adds, files, cubes, names, start, before_commit)

    def _as_catalyst(self, text: str) -> str:
        """A ``where`` predicate as delta-spark records it: Catalyst's unresolved expression, ``('key = a)``."""
        try:
            return backend(self._spark).parsed_expression(text)
        except Exception:  # noqa: BLE001 - a parse Spark refuses was refused earlier; the text is still right
            return text

    def _cluster(
        self, txn: Any, snap: Snapshot, cluster_by: list[str], full: bool, start: float, before_commit: BeforeCommit
    ) -> DmlResult:
        if self._where:
            raise DeltaAnalysisException(
                f"OPTIMIZE on table {snap.table_path}: a clustered table takes no WHERE predicate "
                f"(it has no partitions; it is clustered by {', '.join(cluster_by)})."
            )
        files = [f for f in snap.all_files if full or f.clustering_provider != clustering.PROVIDER]
        written = self._write_zordered(snap, files, [F.col(c) for c in cluster_by])
        adds = [replace(a, clustering_provider=clustering.PROVIDER) for a in written]
        return self._commit(txn, snap, files, adds, files, 1 if files else 0, [], start, before_commit,
                            cluster_by=cluster_by, full=full)

    def _write_zordered(self, snap: Snapshot, files: list[AddFile], keys: list[Column]) -> list[AddFile]:
        """The rows of ``files`` rewritten in the z-order of ``keys`` (within each partition), in
        files of about the target size (OPTIMIZE ZORDER BY and the clustering of a clustered table)."""
        if not files:
            return []
        n_files = max(1, math.ceil(file_bytes(files) / self._target_size(snap)))
        df = data_read.read_files_df(self._spark, snap, files)
        return write_rows(snap, _zordered(df, list(snap.partition_columns), keys, n_files), data_change=False)

    # -- planning -----------------------------------------------------------------
    def _target_size(self, snap: Snapshot) -> int:
        """The bin size: the builder's, else ``delta.targetFileSize`` if set, else Spark's maxFileSize conf."""
        if self._target is not None:
            return self._target
        if any(k.lower() == props.TARGET_FILE_SIZE.lower() for k in snap.configuration):
            return int(props.get(snap.configuration, props.TARGET_FILE_SIZE))
        conf = self._spark.conf.get(MAX_FILE_SIZE_CONF, None)
        return engine.parse_size(conf) if conf else MAX_FILE_SIZE_DEFAULT

    def _max_deleted_ratio(self) -> float:
        conf = self._spark.conf.get(DELETED_RATIO_CONF, None)
        return float(conf) if conf else DELETED_RATIO_DEFAULT

    def _selected_files(self, snap: Snapshot) -> list[AddFile]:
        """Files of the partitions matching ``where`` (no read is recorded: OPTIMIZE reads no data)."""
        if not self._where:
            return snap.all_files
        parts = {c.lower() for c in snap.partition_columns}
        exprs = []
        for text in self._where:
            try:
                expr = P.parse_predicate(text)
            except P.PredicateError as e:
                raise DeltaAnalysisException(f"OPTIMIZE on table {snap.table_path}: {e}") from None
            bad = sorted({n for _, n in P.column_refs(expr) if n.lower() not in parts})
            if bad:
                bad_list = "', '".join(bad)
                raise DeltaAnalysisException(
                    f"OPTIMIZE on table {snap.table_path}: Predicate references non-partition column "
                    f"'{bad_list}'. Only the partition columns may be referenced: "
                    f"[{', '.join(snap.partition_columns)}] (predicate: {text})"
                )
            exprs.append(expr)
        match = skipping.compile_predicate(P.conjunction(exprs), snap.schema, snap.partition_columns)
        return [f for f in snap.all_files if match(f.partition_values or {}, None)]

    def _zorder_columns(self, snap: Snapshot, columns: Sequence[str]) -> list[str]:
        if not columns:
            raise DeltaIllegalArgumentException(f"OPTIMIZE ZORDER BY on table {snap.table_path} needs columns")
        parts = {c.lower() for c in snap.partition_columns}
        out = []
        for name in columns:
            f = snap.schema.field(name)
            if f is None:
                raise DeltaAnalysisException(
                    f"OPTIMIZE ZORDER BY on table {snap.table_path}: column '{name}' does not exist "
                    f"(columns: {', '.join(snap.schema.field_names)})"
                )
            if f.name.lower() in parts:
                raise DeltaAnalysisException(
                    f"OPTIMIZE ZORDER BY on table {snap.table_path}: {f.name} is a partition column. "
                    "Z-Ordering can only be performed on data columns."
                )
            out.append(f.name)
        return out

    # -- committing ---------------------------------------------------------------
    def _commit(
        self,
        txn: Any,
        snap: Snapshot,
        inputs: list[AddFile],
        adds: list[AddFile],
        considered: list[AddFile],
        bins: int,
        zorder: list[str],
        start: float,
        before_commit: BeforeCommit,
        *,
        cluster_by: list[str] | None = None,
        full: bool = False,
    ) -> DmlResult:
        """Commit the compaction; metrics describe what the final commit holds.

        Rebasing over a concurrent compaction can drop outputs (their files are deleted) or
        every output: then nothing is committed, ``version`` is None and
        ``work_already_done_in`` names the version that already holds the work.
        """
        if not inputs:
            return DmlResult(None, _metrics(snap, inputs, adds, considered, bins, zorder, start, cluster_by))
        stamp = now_ms()
        actions: list[Action] = [f.remove(data_change=False, timestamp=stamp) for f in inputs] + list(adds)
        params = {
            "predicate": json_list([self._as_catalyst(w) for w in self._where]),
            "zOrderBy": json_list(zorder),
            "auto": "false",
            "clusterBy": json_list(cluster_by or []),  # delta-spark records it on every table
        }
        if cluster_by:
            params["isFull"] = json.dumps(full)
        metrics = _metrics(snap, inputs, adds, considered, bins, zorder, start, cluster_by)
        commit_metrics = {k: v for k, v in metrics.items() if k not in _DETAIL_KEYS}
        version = commit_or_clean_up(
            txn, actions, "OPTIMIZE", params, commit_metrics, new_files=adds, before_commit=before_commit
        )
        metrics = after_commit(
            "compute the metrics of the actions committed", txn.table_path, version, _final_metrics, txn, snap,
            considered, bins, zorder, start, cluster_by, operation="OPTIMIZE", fallback=metrics,
            instead="with the metrics computed before the commit",
        )  # fmt: skip
        if txn.committed is not None and txn.committed.work_already_done:
            return DmlResult(None, metrics, work_already_done_in=version)
        return DmlResult(version, metrics)

    def result_df(self, result: DmlResult) -> DataFrame:
        """delta-spark's result row: ``(path, metrics)`` with every field of its ``OptimizeMetrics``."""
        m = result.metrics
        merged = (m["numRemovedFiles"], m["numRemovedBytes"])
        zorder = None
        if m["zOrderBy"]:
            # Each selected partition is rewritten whole into one z-ordered cube ("all"); no input file
            # is counted as part of an earlier cube (serialake writes no ZCUBE tags).
            zorder = ("all", (0, 0), merged, 0, merged, m["partitionsOptimized"], None)
        stats = None
        if m["clusterBy"]:
            cubed = m["clusteredInputs"]
            other = (merged[0] - cubed[0], merged[1] - cubed[1])
            stats = (cubed, other, 1 if cubed[0] else 0, merged, 1 if m["numAddedFiles"] else 0)
        metrics = {
            "numFilesAdded": m["numAddedFiles"], "numFilesRemoved": m["numRemovedFiles"],
            "filesAdded": m["filesAdded"], "filesRemoved": m["filesRemoved"],
            "partitionsOptimized": m["partitionsOptimized"], "zOrderStats": zorder, "clusteringStats": stats,
            "numBins": m["numBins"], "numBatches": m["numBatches"],
            "totalConsideredFiles": m["totalConsideredFiles"], "totalFilesSkipped": m["totalFilesSkipped"],
            "preserveInsertionOrder": True, "numFilesSkippedToReduceWriteAmplification": 0,
            "numBytesSkippedToReduceWriteAmplification": 0, "startTimeMs": m["startTimeMs"],
            "endTimeMs": m["endTimeMs"], "totalClusterParallelism": backend(self._spark).default_parallelism(),
            "totalScheduledTasks": m["numBins"], "autoCompactParallelismStats": None,
            "deletionVectorStats": (m["numDeletionVectorsRemoved"], m["numDeletionVectorRowsRemoved"]),
            "numTableColumns": m["numTableColumns"], "numTableColumnsWithStats": m["numTableColumnsWithStats"],
        }  # fmt: skip
        fields = _RESULT_SCHEMA["metrics"].dataType.fieldNames()  # type: ignore[attr-defined]
        row = (m["path"], tuple(metrics[f] for f in fields))
        return self._spark.createDataFrame([row], _RESULT_SCHEMA)


# ---------------------------------------------------------------------------------------------
# Writing compacted files (OPTIMIZE and REORG ... APPLY (PURGE))
# ---------------------------------------------------------------------------------------------


def write_compacted(spark: SparkSession, snap: Snapshot, bins: Sequence[Sequence[AddFile]]) -> list[AddFile]:
    """One output file per bin: the live rows of its inputs in order, tagged with the row mapping.

    Outputs have ``dataChange=false``; bins run in parallel (``MAX_THREADS_CONF``), each on
    the driver when small (``compact_locally``), else as a Spark job. A bin whose rows did
    not land in exactly one file of the expected row count gets no tag.
    """
    if not bins:
        return []
    budget = engine.for_compaction(spark)
    conf = spark.conf.get(MAX_THREADS_CONF, None)
    threads = max(1, min(len(bins), int(conf) if conf else MAX_THREADS_DEFAULT))
    if threads == 1:
        results = [_write_bin(spark, snap, b, budget) for b in bins]
    else:
        with ThreadPoolExecutor(threads, thread_name_prefix="serialake-optimize") as pool:
            results = list(pool.map(lambda b: _write_bin(spark, snap, b, budget), bins))
    return [a for r in results for a in r]


def _write_bin(spark: SparkSession, snap: Snapshot, inputs: Sequence[AddFile], budget: Engine) -> list[AddFile]:
    """The live rows of ``inputs`` in input order, as one file tagged with the row mapping."""
    # Inputs in path order, so the file column itself orders them (no per-file literal map).
    inputs = sorted(inputs, key=lambda f: f.path)

    adds = budget.compact(snap, inputs)
    sources = [(f.path, f.deletion_vector.unique_id if f.deletion_vector else None, _live(snap, f)) for f in inputs]
    expected = sum(n for _, _, n in sources)
    if len(adds) != 1 or adds[0].num_records != expected:
        return adds  # no exact mapping (e.g. no live rows): the outputs carry no tag
    tags = {**(adds[0].tags or {}), COMPACTED_FROM_TAG: json.dumps(sources, separators=(",", ":"))}
    return [replace(adds[0], tags=tags)]


def _final_metrics(
    txn: Any,
    snap: Snapshot,
    considered: Sequence[AddFile],
    bins: int,
    zorder: Sequence[str],
    start: float,
    cluster_by: Sequence[str] | None,
) -> dict[str, Any]:
    """``_metrics`` of the files the commit removed and added (rebasing may have dropped some)."""
    final = txn.committed_actions or []
    removed = [a for a in final if isinstance(a, RemoveFile)]
    added = [a for a in final if isinstance(a, AddFile)]
    return _metrics(snap, removed, added, considered, bins, zorder, start, cluster_by)


_DETAIL_KEYS = frozenset(
    {"path", "filesAdded", "filesRemoved", "partitionsOptimized", "numBins", "numBatches", "totalConsideredFiles",
     "totalFilesSkipped", "executionTimeMs", "zOrderBy", "clusterBy", "clusteredInputs", "startTimeMs", "endTimeMs",
     "numDeletionVectorRowsRemoved",
     "numTableColumns", "numTableColumnsWithStats"}
)


def _metrics(
    snap: Snapshot,
    removed: Sequence[FileAction],
    added: Sequence[FileAction],
    considered: Sequence[AddFile],
    bins: int,
    zorder: Sequence[str],
    start: float,
    cluster_by: Sequence[str] | None = None,
) -> dict[str, Any]:
    """delta-spark's OPTIMIZE metrics (commitInfo) and result details for files removed and added."""
    sizes = sorted(a.size or 0 for a in added)
    # Inputs an earlier OPTIMIZE clustered (removes do not say: their adds among the considered files do).
    providers = {f.path: f.clustering_provider for f in considered}
    clustered = [f for f in removed if providers.get(f.path)]
    stored = StructType(tuple(data_fields(snap.schema, snap.partition_columns)))
    columns = stats_columns(stored, snap.configuration)
    end_ms = now_ms()
    return {
        "numAddedFiles": len(added),
        "numRemovedFiles": len(removed),
        "numAddedBytes": sum(f.size or 0 for f in added),
        "numRemovedBytes": sum(f.size or 0 for f in removed),
        "minFileSize": sizes[0] if sizes else 0,
        "p25FileSize": _percentile(sizes, 0.25),
        "p50FileSize": _percentile(sizes, 0.5),
        "p75FileSize": _percentile(sizes, 0.75),
        "maxFileSize": sizes[-1] if sizes else 0,
        "numDeletionVectorsRemoved": sum(1 for f in removed if f.deletion_vector),
        "path": snap.table_path,
        "filesAdded": _file_stats(added),
        "filesRemoved": _file_stats(removed),
        "partitionsOptimized": len({_partition_key(f) for f in removed}),
        "numBins": bins,
        "numBatches": 1 if bins else 0,
        "totalConsideredFiles": len(considered),
        "totalFilesSkipped": len(considered) - len(removed),
        "executionTimeMs": elapsed_ms(start),
        "startTimeMs": end_ms - elapsed_ms(start),
        "endTimeMs": end_ms,
        "zOrderBy": list(zorder),
        "clusterBy": list(cluster_by or []),
        "clusteredInputs": (len(clustered), sum(f.size or 0 for f in clustered)),
        "numDeletionVectorRowsRemoved": sum(f.deletion_vector.cardinality for f in removed if f.deletion_vector),
        "numTableColumns": len(snap.schema.fields),
        "numTableColumnsWithStats": len(columns),
    }


# ---------------------------------------------------------------------------------------------
# Bin packing
# ---------------------------------------------------------------------------------------------


def _partition_key(f: FileAction) -> tuple[tuple[str, str | None], ...]:
    return tuple(sorted((f.partition_values or {}).items()))


def _bins(snap: Snapshot, files: Sequence[AddFile], target: int, max_deleted_ratio: float) -> list[list[AddFile]]:
    """Per partition, files below ``target`` (or with many deleted rows) packed greedily by size.

    A bin of one file is kept only when rewriting it drops deleted rows.
    """
    by_partition: dict[tuple[tuple[str, str | None], ...], list[AddFile]] = {}
    for f in files:
        if (f.size or 0) < target or _deleted_ratio(f) > max_deleted_ratio:
            by_partition.setdefault(_partition_key(f), []).append(f)
    bins: list[list[AddFile]] = []
    for key in sorted(by_partition, key=repr):
        current: list[AddFile] = []
        size = 0
        for f in sorted(by_partition[key], key=lambda a: (a.size or 0, a.path)):
            if current and size + (f.size or 0) > target:
                bins.append(current)
                current, size = [], 0
            current.append(f)
            size += f.size or 0
        if current:
            bins.append(current)
    return [b for b in bins if len(b) > 1 or b[0].deletion_vector is not None]


def _deleted_ratio(f: AddFile) -> float:
    if f.deletion_vector is None or not f.num_records:
        return 0.0
    return f.deletion_vector.cardinality / f.num_records


def _live(snap: Snapshot, f: AddFile) -> int:
    """Live rows of an input (numRecords from stats, else the Parquet footer)."""
    n = live_rows(snap.table_path, f)
    if n is not None:
        return n
    total = parquet_metadata(absolute_path(snap.table_path, f.path), f.size).num_rows
    return total - (f.deletion_vector.cardinality if f.deletion_vector else 0)


# ---------------------------------------------------------------------------------------------
# Z-order
# ---------------------------------------------------------------------------------------------


def _zordered(df: DataFrame, partition_columns: list[str], columns: list[Column], n_files: int) -> DataFrame:
    """``df`` clustered by the z-value of ``columns`` within each partition (``n_files`` ranges)."""
    parts = [F.col(quote_name(c)) for c in partition_columns]
    bits = max(1, min(ZORDER_BITS, 62 // len(columns)))
    scale = float((1 << bits) - 1)
    ranks: list[Column] = []
    for key in columns:
        window = Window.partitionBy(*parts).orderBy(key.asc_nulls_first())
        ranks.append(F.floor(F.percent_rank().over(window) * scale).cast("long"))
    z: Column | None = None
    n = len(columns)
    for b in range(bits):
        for i, r in enumerate(ranks):
            term = F.shiftleft(F.shiftright(r, b).bitwiseAND(F.lit(1)), b * n + i)
            z = term if z is None else z + term
    assert z is not None
    out = df.withColumn(_Z, z)
    if n_files <= 1:
        out = out.repartition(1)
    else:
        out = out.repartitionByRange(n_files, *parts, F.col(_Z))
    out = out.sortWithinPartitions(*parts, F.col(_Z))
    return out.select(*[F.col(quote_name(c)) for c in df.columns])


# ---------------------------------------------------------------------------------------------
# Helpers
# ---------------------------------------------------------------------------------------------


def _percentile(sorted_values: list[int], q: float) -> int:
    if not sorted_values:
        return 0
    return sorted_values[min(len(sorted_values) - 1, int(q * len(sorted_values)))]


def _file_stats(files: Sequence[FileAction]) -> tuple[int | None, int | None, float, int, int]:
    sizes = [f.size or 0 for f in files]
    if not sizes:
        return (None, None, 0.0, 0, 0)
    return (min(sizes), max(sizes), sum(sizes) / len(sizes), len(sizes), sum(sizes))


def optimize(spark: SparkSession, table_path: str, *, target_file_size: int | None = None) -> DeltaOptimizeBuilder:
    """``OPTIMIZE table``: a ``DeltaOptimizeBuilder``."""
    return DeltaOptimizeBuilder(spark, table_path, target_file_size=target_file_size)
