"""``core.txn.row_matching``: locating an input's rows in a reordering compaction's outputs by content.

Small Parquet files written with pyarrow (no Spark); the table is only a directory and a schema.
Each test checks the positions returned against the values of the output rows themselves.
"""

from __future__ import annotations

import json
import math
import os
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from serialake.core.dv.deletion_vectors import RowIndexSet, write_deletion_vector
from serialake.core.model.actions import AddFile, FileAction, Protocol, RemoveFile
from serialake.core.model.schema import StructType
from serialake.core.predicates.row_eval import RowReader
from serialake.core.txn import row_matching
from serialake.core.txn.row_level import COMPACTED_FROM_TAG
from serialake.core.txn.row_matching import candidate_outputs, locate_rows

FIELDS = [("id", "long"), ("s", "string"), ("x", "double")]
ARROW = pa.schema([("id", pa.int64()), ("s", pa.string()), ("x", pa.float64())])
Row = tuple[Any, ...]


def _schema(fields: Sequence[tuple[str, Any]], physical: Mapping[str, str] | None = None) -> StructType:
    return StructType.from_json(json.dumps({"type": "struct", "fields": [
        {"name": n, "type": t, "nullable": True,
         "metadata": {"delta.columnMapping.physicalName": physical[n]} if physical and n in physical else {}}
        for n, t in fields
    ]}))  # fmt: skip


def _reader(table: Path, fields: Sequence[tuple[str, Any]] = FIELDS, parts: Sequence[str] = (),
            physical: Mapping[str, str] | None = None) -> RowReader:  # fmt: skip
    return RowReader(str(table), SimpleNamespace(schema=_schema(fields, physical), partition_columns=tuple(parts)))


def _file(table: Path, rows: Sequence[Row], schema: pa.Schema = ARROW, *, pv: dict[str, str | None] | None = None,
          stats: dict[str, Any] | None = None, tags: dict[str, str] | None = None,
          name: str = "part", **write: Any) -> AddFile:  # fmt: skip
    """A data file of ``rows``; ``name`` starts its path (outputs are searched in path order); ``write``
    goes to ``pq.write_table`` (``row_group_size``, ``write_statistics``, ``coerce_timestamps``)."""
    rel = f"{name}-{uuid.uuid4().hex}.parquet"
    cols = list(zip(*rows)) if rows else [[] for _ in schema]
    data = pa.table([pa.array(list(c), f.type) for c, f in zip(cols, schema)], schema=schema)
    pq.write_table(data, table / rel, **write)
    return AddFile(path=rel, partition_values=pv or {}, size=os.path.getsize(table / rel), modification_time=0,
                   data_change=False, stats=json.dumps(stats) if stats is not None else None, tags=tags)


def _source(table: Path, rows: Sequence[Row], deleted: Sequence[int] = (), **kw: Any) -> RemoveFile:
    add = _file(table, rows, **kw)
    dv = write_deletion_vector(str(table), RowIndexSet.from_iter(deleted)) if deleted else None
    return AddFile(**{**add.__dict__, "deletion_vector": dv}).remove(data_change=False)


def _rows(table: Path, f: AddFile) -> list[Row]:
    return [tuple(r.values()) for r in pq.read_table(table / f.path).to_pylist()]


def _same(a: Row, b: Row) -> bool:
    """Equal in the matcher's sense: floats bit for bit, every NaN equal to every NaN."""
    return all(
        (isinstance(x, float) and isinstance(y, float) and math.copysign(1, x) == math.copysign(1, y) and x == y)
        or (isinstance(x, float) and isinstance(y, float) and math.isnan(x) and math.isnan(y))
        or (not isinstance(x, float) and x == y)
        for x, y in zip(a, b)
    )


def _locate(reader: RowReader, src: RemoveFile, rows: Sequence[int] | None, outputs: Sequence[AddFile],
            taken: Mapping[str, Sequence[int]] | None = None, protocol: Protocol | None = None,
            **kw: Any) -> dict[str, list[int]] | None:  # fmt: skip
    sets = {p: RowIndexSet.from_iter(r) for p, r in (taken or {}).items()}
    wanted = RowIndexSet.from_iter(rows) if rows is not None else None
    return locate_rows(reader, protocol, src, wanted, outputs, sets, **kw)


def _check_placed(table: Path, src: RemoveFile, rows: Sequence[int], outputs: Sequence[AddFile],
                  placed: Mapping[str, list[int]]) -> None:  # fmt: skip
    """Each located input row has one distinct output row equal to it (as multisets)."""
    source_rows = _rows(table, AddFile(path=src.path))
    want = sorted((source_rows[i] for i in rows), key=repr)
    by_path = {o.path: _rows(table, o) for o in outputs}
    got = sorted((by_path[p][i] for p, idx in placed.items() for i in idx), key=repr)
    assert all(len(set(idx)) == len(idx) for idx in placed.values())
    assert len(got) == len(want) and all(_same(a, b) for a, b in zip(want, got)), (want, got)


# -- equality ----------------------------------------------------------------------------------------


def test_rows_found_by_every_column_nulls_equal_to_nulls(tmp_path: Path) -> None:
    reader = _reader(tmp_path)
    src = _source(tmp_path, [(1, "a", 1.5), (2, None, None), (3, "c", 0.0), (4, "d", 4.0)])
    # Near misses first (another column differs, null vs a value, -0.0 vs 0.0), then the real copies.
    g1 = _file(tmp_path, [(2, "", None), (1, "a", 1.25), (3, "c", -0.0), (2, None, 0.0)], name="a")
    g2 = _file(tmp_path, [(4, "d", 4.0), (3, "c", 0.0), (2, None, None), (1, "a", 1.5)], name="b")
    placed = _locate(reader, src, [0, 1, 2], [g1, g2])
    assert placed == {g2.path: [1, 2, 3]}
    _check_placed(tmp_path, src, [0, 1, 2], [g1, g2], placed)


def test_a_row_without_an_equal_output_row_is_not_located(tmp_path: Path) -> None:
    reader = _reader(tmp_path)
    src = _source(tmp_path, [(1, "a", 1.5), (2, "b", 2.5)])
    g = _file(tmp_path, [(1, "a", 1.5), (2, "B", 2.5)])
    assert _locate(reader, src, [0], [g]) == {g.path: [0]}
    assert _locate(reader, src, [0, 1], [g]) is None


def test_every_nan_equals_every_nan(tmp_path: Path) -> None:
    """Spark's ``=`` holds for NaN and no SQL function shows a NaN's payload: any NaN matches any NaN,
    and only a NaN (never a number, never null)."""
    import numpy as np

    quiet, other = float("nan"), float(np.frombuffer(np.uint64(0x7FF8_0000_0000_0BAD).tobytes(), dtype=np.float64)[0])
    assert other != other and np.float64(other).tobytes() != np.float64(quiet).tobytes()
    reader = _reader(tmp_path)
    src = _source(tmp_path, [(1, "a", quiet), (2, "b", 2.0)])
    g = _file(tmp_path, [(1, "a", 0.0), (1, "a", None), (2, "b", 2.0), (1, "a", other)])
    assert _locate(reader, src, [0], [g]) == {g.path: [3]}
    assert _locate(reader, src, [0, 1], [g]) == {g.path: [2, 3]}
    none = _file(tmp_path, [(1, "a", 0.0), (1, "a", None), (2, "b", 2.0)])
    assert _locate(reader, src, [0], [none]) is None  # no NaN there: not located


def test_columns_absent_from_an_older_file_are_null(tmp_path: Path) -> None:
    """An input written before column x was added: its rows hold null there."""
    reader = _reader(tmp_path)
    src = _source(tmp_path, [(1, "a"), (2, "b")], schema=pa.schema([("id", pa.int64()), ("s", pa.string())]))
    g = _file(tmp_path, [(2, "b", 0.0), (1, "a", None), (2, "b", None)])
    assert _locate(reader, src, [0, 1], [g]) == {g.path: [1, 2]}


def test_a_narrower_integer_type_compares_by_value(tmp_path: Path) -> None:
    """Type widening: an input of int, the table (and the output) long."""
    reader = _reader(tmp_path, [("id", "long")])
    src = _source(tmp_path, [(7,), (8,)], schema=pa.schema([("id", pa.int32())]))
    g = _file(tmp_path, [(8,), (7,)], schema=pa.schema([("id", pa.int64())]))
    assert _locate(reader, src, [0, 1], [g]) == {g.path: [0, 1]}


def test_types_that_cannot_be_compared_exactly_refuse(tmp_path: Path) -> None:
    reader = _reader(tmp_path, [("id", "long")])
    src = _source(tmp_path, [("7",)], schema=pa.schema([("id", pa.string())]))
    g = _file(tmp_path, [(7,)], schema=pa.schema([("id", pa.int64())]))
    assert _locate(reader, src, [0], [g]) is None


def test_nested_columns_compared_whole(tmp_path: Path) -> None:
    point = pa.struct([("a", pa.int64()), ("b", pa.float64())])
    arrow = pa.schema([("id", pa.int64()), ("pt", point), ("tags", pa.list_(pa.string()))])
    nested = {"type": "struct", "fields": [{"name": "a", "type": "long", "nullable": True, "metadata": {}},
                                           {"name": "b", "type": "double", "nullable": True, "metadata": {}}]}
    reader = _reader(tmp_path, [("id", "long"), ("pt", nested),
                                ("tags", {"type": "array", "elementType": "string", "containsNull": True})])
    src = _source(tmp_path, [(1, {"a": 1, "b": 0.0}, ["x"]), (2, {"a": 2, "b": float("nan")}, [])], schema=arrow)
    g = _file(tmp_path, [(1, {"a": 1, "b": -0.0}, ["x"]), (1, {"a": 1, "b": 0.0}, ["y"]),
                         (1, {"a": 1, "b": 0.0}, ["x"]), (2, {"a": 2, "b": float("nan")}, [])], schema=arrow)
    assert _locate(reader, src, [0], [g]) == {g.path: [2]}
    assert _locate(reader, src, [1], [g]) == {g.path: [3]}  # NaN inside a struct equals NaN


def test_only_nested_data_columns_refuse(tmp_path: Path) -> None:
    """Nothing to filter the outputs with before turning their rows into Python values."""
    arrow = pa.schema([("tags", pa.list_(pa.int64()))])
    reader = _reader(tmp_path, [("tags", {"type": "array", "elementType": "long", "containsNull": True})])
    src = _source(tmp_path, [([1],)], schema=arrow)
    assert _locate(reader, src, [0], [_file(tmp_path, [([1],)], schema=arrow)]) is None


def test_column_mapping_physical_names(tmp_path: Path) -> None:
    physical = {"id": "col-1a2b", "s": "col-3c4d", "x": "col-5e6f"}
    arrow = pa.schema([(physical[n], t) for n, t in zip(("id", "s", "x"), ARROW.types)])
    reader = _reader(tmp_path, physical=physical)
    src = _source(tmp_path, [(1, "a", 1.0), (2, "b", 2.0)], schema=arrow)
    stats = {"numRecords": 2, "minValues": {"col-1a2b": 1}, "maxValues": {"col-1a2b": 2}}
    g = _file(tmp_path, [(2, "b", 2.0), (1, "a", 1.0)], schema=arrow, stats=stats)
    assert _locate(reader, src, [1], [g]) == {g.path: [0]}


def test_partition_columns_are_not_read_and_other_partitions_not_searched(tmp_path: Path) -> None:
    reader = _reader(tmp_path, [*FIELDS, ("p", "integer")], parts=["p"])
    src = _source(tmp_path, [(1, "a", 1.0)], pv={"p": "0"})
    other = _file(tmp_path, [(1, "a", 1.0)], pv={"p": "1"})
    same = _file(tmp_path, [(1, "a", 1.0)], pv={"p": "0"})
    assert _locate(reader, src, [0], [other, same]) == {same.path: [0]}
    assert _locate(reader, src, [0], [other]) is None


# -- a one-to-one, deterministic assignment -------------------------------------------------------------


def test_duplicates_get_distinct_output_rows(tmp_path: Path) -> None:
    reader = _reader(tmp_path)
    dup = (5, "same", 1.0)
    src = _source(tmp_path, [dup, (6, "u", 2.0), dup, dup])
    g1 = _file(tmp_path, [dup, (6, "u", 2.0)], name="a")
    g2 = _file(tmp_path, [(9, "v", 0.0), dup, dup], name="b")
    placed = _locate(reader, src, [0, 2, 3], [g2, g1])
    assert placed is not None
    _check_placed(tmp_path, src, [0, 2, 3], [g1, g2], placed)
    # Deterministic: outputs in path order (g1 first, whatever order they are given in), lowest row first.
    assert placed == {g1.path: [0], g2.path: [1, 2]}
    assert _locate(reader, src, [0, 2], [g1, g2]) == {g1.path: [0], g2.path: [1]}
    assert _locate(reader, src, [0, 2, 3], [g1]) is None  # three copies wanted, one there


def test_taken_rows_are_skipped(tmp_path: Path) -> None:
    reader = _reader(tmp_path)
    dup = (5, "same", 1.0)
    src = _source(tmp_path, [dup, dup])
    g = _file(tmp_path, [dup, (1, "x", 0.0), dup, dup])
    assert _locate(reader, src, [0], [g]) == {g.path: [0]}
    assert _locate(reader, src, [0], [g], taken={g.path: [0]}) == {g.path: [2]}
    assert _locate(reader, src, [0, 1], [g], taken={g.path: [0, 3]}) is None  # only row 2 is free


def test_every_live_row_of_an_input_with_a_vector(tmp_path: Path) -> None:
    reader = _reader(tmp_path)
    src = _source(tmp_path, [(1, "a", 1.0), (2, "b", 2.0), (3, "c", 3.0)], deleted=[1])
    g = _file(tmp_path, [(3, "c", 3.0), (1, "a", 1.0)])
    assert _locate(reader, src, None, [g]) == {g.path: [0, 1]}
    assert _locate(reader, src, [1], [g]) is None  # a row the input's vector deleted is no row to locate


# -- pruning, bounds and refusals ------------------------------------------------------------------------


def _stats(lo: int, hi: int, n: int, s_nulls: int = 0) -> dict[str, Any]:
    return {"numRecords": n, "minValues": {"id": lo}, "maxValues": {"id": hi}, "nullCount": {"id": 0, "s": s_nulls}}


def test_stats_prune_outputs_that_cannot_hold_the_rows(tmp_path: Path) -> None:
    """Pruned outputs are not read: here the pruned file is gone, so reading it would refuse."""
    reader = _reader(tmp_path)
    src = _source(tmp_path, [(1, "a", 1.0), (50, None, 5.0)])
    # Outputs are searched in path order: the pruned ones come first.
    far = _file(tmp_path, [(100, "a", 1.0)], stats=_stats(100, 200, 1), name="a")
    no_nulls = _file(tmp_path, [(50, "z", 5.0)], stats=_stats(50, 50, 1), name="b")  # s has no null: not row 1
    real = _file(tmp_path, [(50, None, 5.0), (1, "a", 1.0)], stats=_stats(1, 50, 2, s_nulls=1), name="c")
    for pruned in (far, no_nulls):
        os.remove(tmp_path / pruned.path)
    assert _locate(reader, src, [0, 1], [far, no_nulls, real]) == {real.path: [0, 1]}
    # Without stats an output is read: unreadable here, so nothing is decided.
    assert _locate(reader, src, [0, 1], [AddFile(**{**far.__dict__, "stats": None}), real]) is None


def test_null_counts_are_not_trusted_on_a_file_with_a_vector(tmp_path: Path) -> None:
    reader = _reader(tmp_path)
    src = _source(tmp_path, [(50, None, 5.0)])
    g = _file(tmp_path, [(50, None, 5.0)], stats=_stats(50, 50, 1, s_nulls=0))  # a wrong count, as if stale
    dv = write_deletion_vector(str(tmp_path), RowIndexSet.from_iter([7]))
    with_dv = AddFile(**{**g.__dict__, "deletion_vector": dv})
    assert _locate(reader, src, [0], [g]) is None  # pruned by its (wrong) null count
    assert _locate(reader, src, [0], [with_dv]) == {g.path: [0]}


def test_size_bound(tmp_path: Path) -> None:
    """The bound is on the compressed bytes of the column chunks read, the input's and the outputs'."""
    reader = _reader(tmp_path)
    src = _source(tmp_path, [(1, "a", 1.0)])
    g = _file(tmp_path, [(1, "a", 1.0)])
    need = _chunk_bytes(tmp_path, src, [0]) + _chunk_bytes(tmp_path, g, [0])
    assert row_matching.MAX_MATCH_BYTES == 512 * 1024 * 1024
    assert need < (src.size or 0) + (g.size or 0)  # footers and headers are not counted
    assert _locate(reader, src, [0], [g]) == {g.path: [0]}
    assert _locate(reader, src, [0], [g], max_bytes=need - 1) is None
    assert _locate(reader, src, [0], [g], max_bytes=need) == {g.path: [0]}
    assert _locate(reader, src, [0], [g], max_bytes=0) is None


def test_row_tracking_refuses(tmp_path: Path) -> None:
    reader = _reader(tmp_path)
    src = _source(tmp_path, [(1, "a", 1.0)])
    g = _file(tmp_path, [(1, "a", 1.0)])
    tracked = Protocol(3, 7, ("deletionVectors",), ("deletionVectors", "rowTracking", "domainMetadata"))
    plain = Protocol(3, 7, ("deletionVectors",), ("deletionVectors",))
    assert _locate(reader, src, [0], [g], protocol=plain) == {g.path: [0]}
    assert _locate(reader, src, [0], [g], protocol=tracked) is None


def test_unreadable_input_refuses(tmp_path: Path) -> None:
    reader = _reader(tmp_path)
    src = _source(tmp_path, [(1, "a", 1.0)])
    g = _file(tmp_path, [(1, "a", 1.0)])
    os.remove(tmp_path / src.path)
    assert _locate(reader, src, [0], [g]) is None


def test_candidate_outputs(tmp_path: Path) -> None:
    src = _source(tmp_path, [(1, "a", 1.0)], pv={"p": "0"})
    plain = _file(tmp_path, [(1, "a", 1.0)], pv={"p": "0"})
    tagged = _file(tmp_path, [(1, "a", 1.0)], pv={"p": "0"}, tags={COMPACTED_FROM_TAG: json.dumps([["x", None, 1]])})
    other = _file(tmp_path, [(1, "a", 1.0)], pv={"p": "1"})
    assert candidate_outputs([plain, tagged, other], src) == [plain]


def test_every_primitive_type(tmp_path: Path) -> None:
    """Each Delta primitive type compares exactly; a row differing in one column only is not used."""
    from datetime import UTC, date, datetime
    from decimal import Decimal

    from serialake.core.model.types import arrow_type

    kinds = ["byte", "short", "integer", "long", "float", "double", "decimal(10,2)", "string", "binary", "boolean",
             "date", "timestamp", "timestamp_ntz"]  # fmt: skip
    fields = [(f"c{i}", k) for i, k in enumerate(kinds)]
    arrow = pa.schema([(n, arrow_type(k)) for n, k in fields])
    row = (1, 2, 3, 4, 0.5, 0.25, Decimal("1.10"), "s", b"b", True, date(2024, 1, 2),
           datetime(2024, 1, 2, 3, 4, 5, 6, tzinfo=UTC), datetime(2024, 1, 2, 3, 4, 5, 6))  # fmt: skip
    reader = _reader(tmp_path, fields)
    src = _source(tmp_path, [row], schema=arrow)
    variants = []
    for i, v in enumerate(row):  # the row with column i changed
        other = list(row)
        other[i] = (not v if isinstance(v, bool) else v + (Decimal("0.01") if isinstance(v, Decimal) else 1)
                    if isinstance(v, (int, float, Decimal)) else v + "x" if isinstance(v, str)
                    else v + b"x" if isinstance(v, bytes) else v.replace(year=2023))  # fmt: skip
        variants.append(tuple(other))
    g = _file(tmp_path, [*variants, row], schema=arrow)
    assert _locate(reader, src, [0], [g]) == {g.path: [len(row)]}


# -- row groups: only those needed are read --------------------------------------------------------------


@dataclass
class _CountingReader(RowReader):
    """A RowReader that records each read of row groups: ``(file path, row groups)``."""

    reads: list[tuple[str, tuple[int, ...]]] = field(default_factory=list)

    def parquet_file(self, add: Any) -> Any:
        pf = super().parquet_file(add)
        reads = self.reads

        class Recorded:
            metadata = pf.metadata
            schema_arrow = pf.schema_arrow

            def read_row_groups(self, groups: Sequence[int], columns: Sequence[str] | None = None) -> pa.Table:
                reads.append((add.path, tuple(groups)))
                return pf.read_row_groups(groups, columns=columns)

        return Recorded()


def _counting(table: Path, fields: Sequence[tuple[str, Any]] = FIELDS) -> _CountingReader:
    return _CountingReader(str(table), SimpleNamespace(schema=_schema(fields), partition_columns=()))


def _chunk_bytes(table: Path, f: FileAction, groups: Sequence[int]) -> int:
    """The compressed size of every column chunk of row groups ``groups`` of ``f``."""
    meta = pq.ParquetFile(table / f.path).metadata
    return sum(meta.row_group(r).column(j).total_compressed_size for r in groups for j in range(meta.num_columns))


def _groups_read(reader: _CountingReader, f: FileAction) -> list[int]:
    return [r for path, groups in reader.reads if path == f.path for r in groups]


def _sorted_rows(n: int) -> list[Row]:
    return [(i, f"s{i % 7}", i / 4) for i in range(n)]


def test_only_the_output_row_groups_that_may_hold_the_rows_are_read(tmp_path: Path) -> None:
    """An output of 20 row groups sorted by id: the rows sought sit in two of them, and only those are
    read (one at a time), under a bound the whole file exceeds. Positions are the file's row indexes."""
    reader = _counting(tmp_path)
    out_rows = _sorted_rows(200)
    src = _source(tmp_path, [out_rows[57], out_rows[3], out_rows[151]])
    g = _file(tmp_path, out_rows, row_group_size=10)
    assert pq.ParquetFile(tmp_path / g.path).metadata.num_row_groups == 20
    need = _chunk_bytes(tmp_path, src, [0]) + _chunk_bytes(tmp_path, g, [0, 5, 15])
    whole = _chunk_bytes(tmp_path, src, [0]) + _chunk_bytes(tmp_path, g, range(20))
    assert need < whole // 4 and (g.size or 0) > need  # the former bound on file sizes would refuse
    placed = _locate(reader, src, [0, 1, 2], [g], max_bytes=need)
    assert placed == {g.path: [3, 57, 151]}
    _check_placed(tmp_path, src, [0, 1, 2], [g], placed)
    assert reader.reads == [(src.path, (0,)), (g.path, (0,)), (g.path, (5,)), (g.path, (15,))]
    assert _locate(reader, src, [0, 1, 2], [g], max_bytes=need - 1) is None


def test_reading_stops_once_every_row_is_placed(tmp_path: Path) -> None:
    """Without footer statistics every row group may hold the rows: they are read in order, and the
    search stops at the row group that places the last row (path order across outputs)."""
    reader = _counting(tmp_path)
    out_rows = _sorted_rows(100)
    src = _source(tmp_path, [out_rows[42], out_rows[12]])
    a = _file(tmp_path, out_rows, row_group_size=10, write_statistics=False, name="a")
    b = _file(tmp_path, out_rows, row_group_size=10, write_statistics=False, name="b")
    assert pq.ParquetFile(tmp_path / a.path).metadata.row_group(0).column(0).statistics is None
    assert _locate(reader, src, [0, 1], [b, a]) == {a.path: [12, 42]}
    assert _groups_read(reader, a) == [0, 1, 2, 3, 4] and _groups_read(reader, b) == []
    # The copies in a are taken: b is read, again only up to the row group of the last row.
    reader.reads.clear()
    assert _locate(reader, src, [0, 1], [a, b], taken={a.path: [12, 42]}) == {b.path: [12, 42]}
    assert _groups_read(reader, a) == [0, 1, 2, 3, 4, 5, 6, 7, 8, 9] and _groups_read(reader, b) == [0, 1, 2, 3, 4]


def test_row_groups_without_a_free_row_are_not_read(tmp_path: Path) -> None:
    reader = _counting(tmp_path)
    dup = (5, "same", 1.0)
    src = _source(tmp_path, [dup])
    g = _file(tmp_path, [dup, dup, (6, "x", 0.0), dup], row_group_size=2)
    assert _locate(reader, src, [0], [g], taken={g.path: [0, 1]}) == {g.path: [3]}
    assert _groups_read(reader, g) == [1]


def test_only_the_input_row_groups_holding_the_rows_are_read(tmp_path: Path) -> None:
    reader = _counting(tmp_path)
    rows = _sorted_rows(100)
    src = _source(tmp_path, rows, deleted=range(0, 30), row_group_size=10)
    g = _file(tmp_path, list(reversed(rows)))
    assert _locate(reader, src, [93, 97], [g]) == {g.path: [2, 6]}
    assert _groups_read(reader, src) == [9]
    assert _locate(reader, src, [5 + 30, 77, 78], [g]) == {g.path: [21, 22, 64]}  # re-based across groups
    assert _groups_read(reader, src) == [9, 3, 7]
    # Every live row: the row groups its vector deleted whole are not read.
    placed = _locate(reader, src, None, [g])
    assert placed == {g.path: list(range(70))}
    assert _groups_read(reader, src)[3:] == [3, 4, 5, 6, 7, 8, 9]
    _check_placed(tmp_path, src, range(30, 100), [g], placed)


def test_footer_statistics_are_checked_row_by_row(tmp_path: Path) -> None:
    """A row group is read when one target row lies within its bounds in every column; targets that
    only together cover the bounds of each column do not make it read."""
    from datetime import date

    fields = [("id", "long"), ("d", "date"), ("b", "boolean")]
    arrow = pa.schema([("id", pa.int64()), ("d", pa.date32()), ("b", pa.bool_())])
    reader = _counting(tmp_path, fields)
    d1, d2 = date(2024, 1, 1), date(2024, 6, 1)
    src = _source(tmp_path, [(1, d2, True), (2, d1, False)], schema=arrow)
    # Row group 0: ids 1..2 and dates d1..d1 (each column admits some target, no target row fits both);
    # row group 1: booleans only true; row group 2 holds both rows.
    g = _file(tmp_path, [(1, d1, True), (2, d1, True), (2, d2, True), (2, d1, True), (2, d1, False), (1, d2, True)],
              schema=arrow, row_group_size=2)  # fmt: skip
    assert _locate(reader, src, [0, 1], [g]) == {g.path: [4, 5]}
    assert _groups_read(reader, g) == [2]


def test_footer_null_counts_prune_exactly(tmp_path: Path) -> None:
    """A null target value keeps the row groups with nulls (null_count > 0) and only those; a
    non-null one skips row groups that are all null; a column the file lacks is null throughout."""
    fields = [("id", "long"), ("k", "long")]
    arrow = pa.schema([("id", pa.int64()), ("k", pa.int64())])
    reader = _counting(tmp_path, fields)
    src = _source(tmp_path, [(5, None), (5, 7)], schema=arrow)
    g = _file(tmp_path, [(5, 1), (5, 2), (None, None), (None, None), (5, None), (5, 3), (5, 7), (5, 7)],
              schema=arrow, row_group_size=2)  # fmt: skip
    assert _locate(reader, src, [0], [g]) == {g.path: [4]}
    assert _groups_read(reader, g) == [2]  # row groups 0 and 3 have no null k; 1 has only null ids
    reader.reads.clear()
    assert _locate(reader, src, [1], [g]) == {g.path: [6]}
    assert _groups_read(reader, g) == [3]  # k is 1..2 in row group 0, null in 1, 3 or null in 2
    older = _file(tmp_path, [(6,), (5,), (5,)], schema=pa.schema([("id", pa.int64())]), row_group_size=1)
    reader.reads.clear()
    assert _locate(reader, src, [0], [older]) == {older.path: [1]}  # no k in the file: null there
    assert _groups_read(reader, older) == [1]
    reader.reads.clear()
    assert _locate(reader, src, [1], [older]) is None
    assert _groups_read(reader, older) == []  # k = 7 cannot be null


@pytest.mark.parametrize("unit", ["ms", "us", "ns"])
def test_timestamp_footer_bounds_at_the_stored_unit(tmp_path: Path, unit: str) -> None:
    """Parquet timestamp bounds are exact at the stored unit: a target at a row group's last value is
    found there, and row groups whose range holds no target microsecond are skipped."""
    from datetime import datetime

    fields = [("t", "timestamp_ntz")]
    reader = _counting(tmp_path, fields)
    stamps = [datetime(2024, 1, 1, 0, 0, s) for s in range(8)]
    src = _source(tmp_path, [(stamps[3],), (stamps[6],)], schema=pa.schema([("t", pa.timestamp("us"))]))
    g = _file(tmp_path, [(t,) for t in stamps], schema=pa.schema([("t", pa.timestamp(unit))]), row_group_size=2,
              coerce_timestamps=None if unit == "ns" else unit)  # fmt: skip
    meta = pq.ParquetFile(tmp_path / g.path).metadata.row_group(1).column(0).statistics
    assert meta.physical_type == "INT64" and meta.logical_type.type == "TIMESTAMP"
    assert _locate(reader, src, [0, 1], [g]) == {g.path: [3, 6]}
    assert _groups_read(reader, g) == [1, 3]


def test_footer_statistics_of_a_column_after_nested_ones(tmp_path: Path) -> None:
    """A column's statistics are its own column chunk's, counted past the leaves of nested columns
    before it (here pt.a holds -id: its bounds would prune every row group)."""
    point = pa.struct([("a", pa.int64()), ("b", pa.float64())])
    arrow = pa.schema([("pt", point), ("tags", pa.list_(pa.string())), ("id", pa.int64())])
    nested = {"type": "struct", "fields": [{"name": "a", "type": "long", "nullable": True, "metadata": {}},
                                           {"name": "b", "type": "double", "nullable": True, "metadata": {}}]}
    fields = [("pt", nested), ("tags", {"type": "array", "elementType": "string", "containsNull": True}),
              ("id", "long")]  # fmt: skip
    reader = _counting(tmp_path, fields)
    rows = [({"a": -i, "b": i / 2}, [f"t{i}"], i) for i in range(1, 7)]
    src = _source(tmp_path, [rows[4]], schema=arrow)
    g = _file(tmp_path, rows, schema=arrow, row_group_size=2)
    assert _locate(reader, src, [0], [g]) == {g.path: [4]}
    assert _groups_read(reader, g) == [2]
