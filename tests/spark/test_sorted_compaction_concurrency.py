"""Sorting compactions concurrent with DML and with other compactions, with real Spark jobs (issue #41).

The clustering OPTIMIZE of a liquid-clustered table and ZORDER reorder rows, so their outputs
carry no in-order row mapping: a concurrent DELETE / UPDATE / MERGE of their inputs is carried
over by row content (``core.txn.row_matching``), in either commit order. Each pair is planned from one
version: the second committer plans, its ``before_commit`` hook runs the first to completion,
then it commits. Rows are checked exactly with serialake and with delta-rs (each row once, NaN
compared by its text), the rows marked in the compaction's outputs are the DML's rows, and no
data or deletion-vector file a dropped output or a rebase wrote is left behind.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow.parquet as pq
import pytest
from pyspark.sql import SparkSession

from serialake.core import DeltaLog
from serialake.core.dv.deletion_vectors import read_deletion_vector
from serialake.core.model import clustering
from serialake.core.model.actions import AddFile, RemoveFile, decode_path
from serialake.core.model.schema import physical_name
from serialake.exceptions import ConcurrentDeleteDeleteException, ConflictReason
from serialake.spark import dml, read, write
from serialake.spark.dml import DmlResult, purge_deletion_vectors
from tests.helpers import delta_rs_rows, unreferenced_files

pytestmark = pytest.mark.spark

SCHEMA = "id long, k int, p int, s string, x double"
COLUMNS = ["id", "k", "p", "s", "x"]
LEVELS = ["Serializable", "WriteSerializable"]
ORDERS = ["compaction_first", "dml_first"]  # which of the pair commits first (inside the other's hook)
Row = tuple[Any, ...]
Hook = Callable[[], Any] | None


def _row(i: int, s: str | None = None, x: float | None = None) -> Row:
    """Row i: clustering key k = 7i mod 5 (so clustering interleaves the inputs), p = i mod 2."""
    return (i, (i * 7) % 5, i % 2, s if s is not None else f"s{i}", x if x is not None else i * 1.5)


BASE = [[_row(i) for i in range(0, 6)], [_row(i) for i in range(6, 12)], [_row(i) for i in range(12, 18)]]


def _make(spark: SparkSession, path: str, groups: Sequence[Sequence[Row]] = BASE, *, level: str = "WriteSerializable",
          layout: str = "clustered", props: dict[str, str] | None = None) -> None:  # fmt: skip
    """One input file per group: a table created ``CLUSTER BY (k)`` (deletion vectors by default), or
    one partitioned by p with deletion vectors (each group then a file in each partition)."""
    conf = {"delta.isolationLevel": level, **(props or {})}
    if layout == "clustered":
        tbl = ", ".join(f"'{k}' = '{v}'" for k, v in conf.items())
        spark.sql(f"CREATE TABLE delta.`{path}` (id BIGINT, k INT, p INT, s STRING, x DOUBLE) USING delta "
                  f"CLUSTER BY (k) TBLPROPERTIES ({tbl})")  # fmt: skip
    for n, g in enumerate(groups):
        df = spark.createDataFrame(list(g), SCHEMA).coalesce(1)
        if layout == "clustered":
            write(df, path, mode="append")
        else:
            dvs = {"delta.enableDeletionVectors": "true", **conf} if n == 0 else None
            write(df, path, mode="append", partitionBy=["p"], properties=dvs)


def _norm(row: Row) -> Row:
    """A row comparable as a whole: the double as its text (NaN equals NaN here)."""
    return (*row[:-1], repr(float(row[-1])))


def _check(spark: SparkSession, path: str, want: Sequence[Row]) -> None:
    expected = sorted(map(_norm, want))
    assert sorted(_norm(tuple(r)) for r in read(spark, path).select(*COLUMNS).collect()) == expected
    assert sorted(_norm(tuple(r[c] for c in COLUMNS)) for r in delta_rs_rows(path, COLUMNS)) == expected
    assert unreferenced_files(path) == set()


def _version(path: str) -> int:
    return DeltaLog.for_table(path).update().version


def _adds(path: str, version: int | None) -> list[AddFile]:
    assert version is not None
    return [a for a in DeltaLog.for_table(path).read_commit(version).actions if isinstance(a, AddFile)]


def _marked_ids(path: str, paths: set[str]) -> list[int]:
    """The ids of the rows deletion vectors mark in the current files among ``paths``."""
    snap = DeltaLog.for_table(path).update()
    column = physical_name(snap.schema.field("id"))
    out: list[int] = []
    for f in snap.all_files:
        if f.path in paths and f.deletion_vector is not None:
            ids = pq.read_table(os.path.join(path, decode_path(f.path)), columns=[column]).column(0).to_pylist()
            out += [ids[i] for i in read_deletion_vector(path, f.deletion_vector)]
    return sorted(out)


def _cluster(spark: SparkSession, path: str, hook: Hook) -> DmlResult:
    """The clustering OPTIMIZE, with a target size that spreads the rows over about three files."""
    target = sum(f.size or 0 for f in DeltaLog.for_table(path).update().all_files) // 3 + 1
    return dml.optimize(spark, path, target_file_size=target).run_compaction(before_commit=hook)


def _pair(spark: SparkSession, path: str, a: Callable[..., Any], b: Callable[..., Any],
          a_first: bool) -> tuple[Any, Any]:  # fmt: skip
    """Plan the second committer, commit the first inside its hook: (a's result, b's)."""
    got: dict[str, Any] = {}
    if a_first:
        got["b"] = b(spark, path, lambda: got.setdefault("a", a(spark, path, None)))
    else:
        got["a"] = a(spark, path, lambda: got.setdefault("b", b(spark, path, None)))
    return got["a"], got["b"]


# -- the clustering OPTIMIZE and DELETE / UPDATE / MERGE ---------------------------------------------------


@dataclass(frozen=True)
class Change:
    """A DML on rows of several inputs: how to run it, the rows it changes (by id), the table after."""

    run: Callable[[SparkSession, str, Hook], DmlResult]
    ids: tuple[int, ...]
    after: Callable[[list[Row]], list[Row]]


def _merge(spark: SparkSession, path: str, hook: Hook) -> DmlResult:
    source = spark.createDataFrame([_row(3, "m3"), _row(10, "m10"), _row(17, "m17"), _row(100)], SCHEMA)
    return (
        dml.merge(spark, path, source.alias("s"), "t.id = s.id", alias="t")
        .whenMatchedUpdate(set={"s": "s.s"})
        .whenNotMatchedInsertAll()
        .run(before_commit=hook)
    )


CHANGES = {
    "delete": Change(lambda spark, path, hook: dml.run_delete(spark, path, "id IN (1, 8, 15)", before_commit=hook),
                     (1, 8, 15), lambda rows: [r for r in rows if r[0] not in (1, 8, 15)]),
    "update": Change(lambda spark, path, hook: dml.run_update(spark, path, "id IN (2, 9, 16)", {"s": "'u'"},
                                                              before_commit=hook),
                     (2, 9, 16), lambda rows: [_row(r[0], "u") if r[0] in (2, 9, 16) else r for r in rows]),
    "merge": Change(_merge, (3, 10, 17),
                    lambda rows: [_row(r[0], f"m{r[0]}") if r[0] in (3, 10, 17) else r for r in rows] + [_row(100)]),
    # Every row of the second input: the DELETE removes that file whole (no re-add).
    "delete_input": Change(lambda spark, path, hook: dml.run_delete(spark, path, "id BETWEEN 6 AND 11",
                                                                    before_commit=hook),
                           tuple(range(6, 12)), lambda rows: [r for r in rows if not 6 <= r[0] <= 11]),
}  # fmt: skip


@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("change", list(CHANGES))
def test_clustering_optimize_and_dml(spark: SparkSession, tmp_table: str, change: str, level: str, order: str) -> None:
    """Both commit; the DML's rows are marked in the clustered files that hold them (several files)."""
    c = CHANGES[change]
    _make(spark, tmp_table, level=level)
    v = _version(tmp_table)
    inputs = {f.path for f in DeltaLog.for_table(tmp_table).update().all_files}
    opt, done = _pair(spark, tmp_table, _cluster, c.run, order == "compaction_first")
    assert {opt.version, done.version} == {v + 1, v + 2}
    _check(spark, tmp_table, c.after([r for g in BASE for r in g]))
    outputs = {a.path for a in _adds(tmp_table, opt.version)}
    assert len(outputs) >= 2  # clustering spread the inputs over several files
    snap = DeltaLog.for_table(tmp_table).update()
    assert not inputs & {f.path for f in snap.all_files}
    assert all(f.clustering_provider == clustering.PROVIDER for f in snap.all_files if f.path in outputs)
    assert _marked_ids(tmp_table, outputs) == sorted(c.ids)


# -- two compactions -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("order", ["optimize_first", "reorg_first"])
def test_clustering_optimize_and_reorg(spark: SparkSession, tmp_table: str, order: str) -> None:
    """REORG PURGE (a bin-packing compaction, with a row mapping) of the first input, and the clustering
    OPTIMIZE of all three. OPTIMIZE second: the purged input's rows are in REORG's file, so they are
    marked deleted in OPTIMIZE's (found by content) and its remove of that input is dropped. REORG
    second: its one output holds only rows OPTIMIZE moved; it commits nothing."""
    _make(spark, tmp_table)
    dml.run_delete(spark, tmp_table, "id = 4")  # the first input gets a deletion vector: REORG purges it
    v = _version(tmp_table)
    purged = next(f for f in DeltaLog.for_table(tmp_table).update().all_files if f.deletion_vector is not None)

    def reorg(spark: SparkSession, path: str, hook: Hook) -> dict[str, Any]:
        return purge_deletion_vectors(spark, path, before_commit=hook)

    opt, m = _pair(spark, tmp_table, _cluster, reorg, order == "optimize_first")
    want = [r for g in BASE for r in g if r[0] != 4]
    _check(spark, tmp_table, want)
    if order == "optimize_first":  # REORG lost: its work is done
        assert opt.version == v + 1 and m["version"] is None and m["workAlreadyDoneIn"] == v + 1
        assert _marked_ids(tmp_table, {a.path for a in _adds(tmp_table, opt.version)}) == []
    else:
        assert m["version"] == v + 1 and opt.version == v + 2
        removed = [a for a in DeltaLog.for_table(tmp_table).read_commit(opt.version).actions
                   if isinstance(a, RemoveFile)]  # fmt: skip
        assert purged.path not in {r.path for r in removed} and len(removed) == 2
        assert opt.metrics["numRemovedFiles"] == 2
        assert _marked_ids(tmp_table, {a.path for a in _adds(tmp_table, opt.version)}) == [0, 1, 2, 3, 5]


@pytest.mark.parametrize("order", ["zorder_first", "optimize_first"])
def test_partitioned_zorder_and_optimize_of_one_partition(spark: SparkSession, tmp_table: str, order: str) -> None:
    """ZORDER of both partitions and a bin-packing OPTIMIZE WHERE p = 0. ZORDER second: every row of its
    partition-0 file is found in OPTIMIZE's output, so that file and its removes go; it commits
    partition 1. OPTIMIZE second: ZORDER moved all its inputs; it commits nothing."""
    _make(spark, tmp_table, layout="partitioned")
    v = _version(tmp_table)

    def zorder(spark: SparkSession, path: str, hook: Hook) -> DmlResult:
        return dml.optimize(spark, path).run_zorder(["k"], before_commit=hook)

    def optimize_p0(spark: SparkSession, path: str, hook: Hook) -> DmlResult:
        return dml.optimize(spark, path).where("p = 0").run_compaction(before_commit=hook)

    z, o = _pair(spark, tmp_table, zorder, optimize_p0, order == "zorder_first")
    _check(spark, tmp_table, [r for g in BASE for r in g])
    snap = DeltaLog.for_table(tmp_table).update()
    assert all(f.deletion_vector is None for f in snap.all_files)
    if order == "zorder_first":  # OPTIMIZE lost
        assert z.version == v + 1 and o.version is None and o.work_already_done_in == v + 1
    else:
        assert o.version == v + 1 and z.version == v + 2
        assert {(a.partition_values or {}).get("p") for a in _adds(tmp_table, z.version)} == {"1"}
        assert z.metrics["numRemovedFiles"] == 3 and z.metrics["numAddedFiles"] == 1
    assert snap.num_files == 2


@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("level", LEVELS)
def test_partitioned_zorder_and_delete(spark: SparkSession, tmp_table: str, level: str, order: str) -> None:
    """Rows of both partitions and of several inputs: each is found in its partition's z-ordered file."""
    _make(spark, tmp_table, level=level, layout="partitioned")
    v = _version(tmp_table)

    def zorder(spark: SparkSession, path: str, hook: Hook) -> DmlResult:
        return dml.optimize(spark, path).run_zorder(["k"], before_commit=hook)

    z, d = _pair(spark, tmp_table, zorder, CHANGES["delete"].run, order == "compaction_first")
    assert {z.version, d.version} == {v + 1, v + 2}
    _check(spark, tmp_table, [r for g in BASE for r in g if r[0] not in (1, 8, 15)])
    assert _marked_ids(tmp_table, {a.path for a in _adds(tmp_table, z.version)}) == [1, 8, 15]


# -- duplicate rows: a one-to-one assignment ---------------------------------------------------------------


DUPLICATES = {
    # Equal but for s, one in each input: only the row the DELETE names goes.
    "near": ([[*BASE[0], _row(50, "a")], [*BASE[1], _row(50, "b")], [*BASE[2], _row(50, "c")]], "s = 'b'"),
    # Four identical copies (two in the first input): the DELETE names them all, each goes once.
    "identical": ([[*BASE[0], _row(50, "d"), _row(50, "d")], [*BASE[1], _row(50, "d")], [*BASE[2], _row(50, "d")]],
                  "id = 50"),
}  # fmt: skip


@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("case", list(DUPLICATES))
def test_duplicate_rows(spark: SparkSession, tmp_table: str, case: str, order: str) -> None:
    groups, cond = DUPLICATES[case]
    _make(spark, tmp_table, groups)
    v = _version(tmp_table)

    def delete(spark: SparkSession, path: str, hook: Hook) -> DmlResult:
        return dml.run_delete(spark, path, cond, before_commit=hook)

    opt, d = _pair(spark, tmp_table, _cluster, delete, order == "compaction_first")
    assert {opt.version, d.version} == {v + 1, v + 2}
    gone = [_row(50, "b")] if case == "near" else [_row(50, "d")] * 4
    rows = [r for g in groups for r in g]
    for r in gone:
        rows.remove(r)
    _check(spark, tmp_table, rows)
    assert _marked_ids(tmp_table, {a.path for a in _adds(tmp_table, opt.version)}) == [50] * len(gone)


# -- what still conflicts ---------------------------------------------------------------------------------


@pytest.mark.parametrize("order", ORDERS)
def test_nan_rows_are_located(spark: SparkSession, tmp_table: str, order: str) -> None:
    """A NaN equals a NaN (Spark's ``=``; no SQL function shows its payload): rows holding one are located
    like any other, here two equal NaN rows in different inputs and a DELETE of one of them."""
    groups = [[*BASE[0], _row(60, "nan", math.nan)], [*BASE[1], _row(60, "nan", math.nan)], BASE[2]]
    _make(spark, tmp_table, groups)
    v = _version(tmp_table)

    def delete(spark: SparkSession, path: str, hook: Hook) -> DmlResult:
        return dml.run_delete(spark, path, "id = 60 AND isnan(x)", before_commit=hook)

    opt, d = _pair(spark, tmp_table, _cluster, delete, order == "compaction_first")
    assert {opt.version, d.version} == {v + 1, v + 2}
    _check(spark, tmp_table, [r for g in groups for r in g if r[0] != 60])
    assert _marked_ids(tmp_table, {a.path for a in _adds(tmp_table, opt.version)}) == [60, 60]


@pytest.mark.parametrize("order", ORDERS)
def test_a_search_past_its_bound_keeps_the_conflict(
    spark: SparkSession, tmp_table: str, order: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past ``MAX_MATCH_BYTES`` the rows are not searched (a bound of one byte: not even the input's row
    group is read): the second committer fails, as without a mapping (ConcurrentDeleteDeleteException,
    FILE_REMOVED), and the table is what the first one left."""
    from serialake.core.txn import row_matching

    monkeypatch.setattr(row_matching, "MAX_MATCH_BYTES", 1)
    _make(spark, tmp_table)
    v = _version(tmp_table)
    with pytest.raises(ConcurrentDeleteDeleteException) as err:
        _pair(spark, tmp_table, _cluster, CHANGES["delete"].run, order == "compaction_first")
    assert err.value.conflict_reason == ConflictReason.FILE_REMOVED
    assert _version(tmp_table) == v + 1
    rows = [r for g in BASE for r in g]
    deleted = order == "dml_first"
    _check(spark, tmp_table, CHANGES["delete"].after(rows) if deleted else rows)
    clustered = {f.clustering_provider == clustering.PROVIDER for f in DeltaLog.for_table(tmp_table).update().all_files}
    assert clustered == {not deleted}


@pytest.mark.parametrize("order", ORDERS)
def test_an_output_larger_than_the_bound_is_searched_by_row_group(
    spark: SparkSession, tmp_table: str, order: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The clustering OPTIMIZE writes one file of 30 row groups (``parquet.block.row.count.limit``),
    larger than ``MAX_MATCH_BYTES`` (patched down to half the inputs' column chunks), and the DELETE's
    rows (k = 4) are clustered into its last row groups: each search reads only the input's row group
    holding its row and the output's row groups its footer statistics admit, within the bound, so both
    commit, in either order, with exactly the DELETE's rows gone."""
    from serialake.core.txn import row_matching

    groups = [[_row(i) for i in range(n * 200, (n + 1) * 200)] for n in range(3)]
    ids = (2, 252, 597)  # one row of each input, with k = 4: clustered last
    spark.conf.set("parquet.block.row.count.limit", "20")
    try:
        _make(spark, tmp_table, groups)
        snap = DeltaLog.for_table(tmp_table).update()
        chunks = 0
        for f in snap.all_files:
            meta = pq.ParquetFile(os.path.join(tmp_table, decode_path(f.path))).metadata
            assert meta.num_row_groups == 10
            chunks += sum(meta.row_group(r).column(j).total_compressed_size
                          for r in range(meta.num_row_groups) for j in range(meta.num_columns))  # fmt: skip
        bound = chunks // 2
        monkeypatch.setattr(row_matching, "MAX_MATCH_BYTES", bound)

        def cluster(spark: SparkSession, path: str, hook: Hook) -> DmlResult:
            return dml.optimize(spark, path, target_file_size=1 << 30).run_compaction(before_commit=hook)

        def delete(spark: SparkSession, path: str, hook: Hook) -> DmlResult:
            return dml.run_delete(spark, path, f"id IN {ids}", before_commit=hook)

        opt, d = _pair(spark, tmp_table, cluster, delete, order == "compaction_first")
    finally:
        spark.conf.unset("parquet.block.row.count.limit")
    assert {opt.version, d.version} == {snap.version + 1, snap.version + 2}
    (out,) = _adds(tmp_table, opt.version)
    meta = pq.ParquetFile(os.path.join(tmp_table, decode_path(out.path))).metadata
    assert meta.num_row_groups == 30 and (out.size or 0) > bound  # the former bound on file sizes refused
    _check(spark, tmp_table, [r for g in groups for r in g if r[0] not in ids])
    assert _marked_ids(tmp_table, {out.path}) == sorted(ids)


@pytest.mark.parametrize("order", ORDERS)
def test_column_mapping(spark: SparkSession, tmp_table: str, order: str) -> None:
    """Files name columns by their physical names; rows are compared by the table's columns all the same."""
    _make(spark, tmp_table, props={"delta.columnMapping.mode": "name"})
    snap = DeltaLog.for_table(tmp_table).update()
    assert physical_name(snap.schema.field("id")) != "id"
    v = snap.version
    opt, d = _pair(spark, tmp_table, _cluster, CHANGES["delete"].run, order == "compaction_first")
    assert {opt.version, d.version} == {v + 1, v + 2}
    _check(spark, tmp_table, [r for g in BASE for r in g if r[0] not in (1, 8, 15)])
    assert _marked_ids(tmp_table, {a.path for a in _adds(tmp_table, opt.version)}) == [1, 8, 15]
