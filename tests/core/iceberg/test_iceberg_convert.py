"""Iceberg metadata for Delta tables (serialake.core.iceberg), read back by pyiceberg.

The tables are column-mapped Delta tables built with the core API over real Parquet files
(written by pyarrow with field ids and physical column names, partition columns materialized
as IcebergCompatV2 requires) and AddFiles carrying Delta-style statistics. The oracle is the
rows the test wrote into the files live at each version; pyiceberg scans (with and without
filters, which exercise the bounds) must return exactly those.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import multiprocessing
import os
import shutil
import uuid
from collections.abc import Callable, Sequence
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from serialake.core import DeltaLog
from serialake.core.iceberg import (
    IcebergConversionError,
    IcebergConverter,
    after_commit,
    cleanup,
    clear_manifest_cache,
    convert,
    convert_now,
    metadata_path,
    read_version_hint,
    snapshot_id_for,
    table_uuid,
)
from serialake.core.iceberg import avro as iceberg_avro
from serialake.core.model.actions import AddFile, DeletionVectorDescriptor, Metadata, RemoveFile
from serialake.core.model.properties import UNIVERSAL_FORMATS
from serialake.core.model.schema import DecimalType, StructType

UTC = dt.UTC
#: IcebergCompatV2's table properties. Tables here leave out ``enabledFormats = iceberg`` (which
#: makes commits schedule background conversions) unless a test is about that: they convert explicitly.
COMPAT = {"delta.columnMapping.mode": "name", "delta.enableIcebergCompatV2": "true"}
#: The tag IcebergCompatV2 writers put on each file they write (as Delta does).
COMPAT_TAGS = {"ICEBERG_COMPAT_VERSION": "2"}


# -- a column-mapped table with real Parquet files ---------------------------------------------------------------


def col(name: str, type_: Any, fid: int, *, nullable: bool = True, nested: dict[str, int] | None = None) -> dict:
    meta: dict[str, Any] = {"delta.columnMapping.id": fid, "delta.columnMapping.physicalName": f"col-{fid}-{name}"}
    if nested:
        meta["delta.columnMapping.nested.ids"] = {f"col-{fid}-{name}.{k}": v for k, v in nested.items()}
    return {"name": name, "type": type_, "nullable": nullable, "metadata": meta}


def _arrow_type(t: Any, meta: dict[str, Any], prefix: str) -> pa.DataType:
    """The Parquet (physical) Arrow type of a Delta type, with field ids on nested elements."""
    simple = {"byte": pa.int8(), "short": pa.int16(), "integer": pa.int32(), "long": pa.int64(),
              "float": pa.float32(), "double": pa.float64(), "boolean": pa.bool_(), "string": pa.string(),
              "binary": pa.binary(), "date": pa.date32(), "timestamp": pa.timestamp("us", tz="UTC"),
              "timestamp_ntz": pa.timestamp("us")}  # fmt: skip
    if isinstance(t, str):
        if t.startswith("decimal("):
            p, s = t[8:-1].split(",")
            return pa.decimal128(int(p), int(s))
        return simple[t]
    nested = meta.get("delta.columnMapping.nested.ids", {})

    def fid(key: str) -> dict[bytes, bytes]:
        return {b"PARQUET:field_id": str(nested[key]).encode()}

    if t["type"] == "struct":
        return pa.struct([_arrow_field(f) for f in t["fields"]])
    if t["type"] == "array":
        element = pa.field("element", _arrow_type(t["elementType"], meta, f"{prefix}.element"), t["containsNull"],
                           metadata=fid(f"{prefix}.element"))  # fmt: skip
        return pa.list_(element)
    key = pa.field("key", _arrow_type(t["keyType"], meta, f"{prefix}.key"), False, metadata=fid(f"{prefix}.key"))
    value = pa.field("value", _arrow_type(t["valueType"], meta, f"{prefix}.value"), t["valueContainsNull"],
                     metadata=fid(f"{prefix}.value"))  # fmt: skip
    return pa.map_(key, value)


def _arrow_field(f: dict[str, Any]) -> pa.Field:
    meta = f["metadata"]
    phys = meta["delta.columnMapping.physicalName"]
    return pa.field(phys, _arrow_type(f["type"], meta, phys), f["nullable"],
                    metadata={b"PARQUET:field_id": str(meta["delta.columnMapping.id"]).encode()})  # fmt: skip


def _physical_row(fields: list[dict[str, Any]], row: dict[str, Any]) -> dict[str, Any]:
    out = {}
    for f in fields:
        value = row.get(f["name"])
        if isinstance(f["type"], dict) and f["type"]["type"] == "struct" and value is not None:
            value = _physical_row(f["type"]["fields"], value)
        elif isinstance(f["type"], dict) and f["type"]["type"] == "array" and value is not None:
            et = f["type"]["elementType"]
            if isinstance(et, dict) and et["type"] == "struct":
                value = [None if v is None else _physical_row(et["fields"], v) for v in value]
        out[f["metadata"]["delta.columnMapping.physicalName"]] = value
    return out


def _stat(t: str, value: Any, upper: bool) -> Any:
    """A min/max as Delta writes it in stats JSON (strings cut to 32, timestamps floored to the ms)."""
    if t == "string":
        if len(value) <= 32:
            return value
        return value[:32] + "\U0010ffff" if upper else value[:32]
    if t in ("timestamp", "timestamp_ntz"):
        floored = value.replace(microsecond=value.microsecond - value.microsecond % 1000)
        text = floored.astimezone(UTC).replace(tzinfo=None).isoformat(timespec="milliseconds") if floored.tzinfo \
            else floored.isoformat(timespec="milliseconds")
        return text + "Z" if t == "timestamp" else text
    if t == "date":
        return value.isoformat()
    return value


def _stats(fields: list[dict[str, Any]], rows: list[dict[str, Any]], skip: set[str]) -> tuple[dict, dict, dict]:
    mins: dict[str, Any] = {}
    maxs: dict[str, Any] = {}
    nulls: dict[str, Any] = {}
    for f in fields:
        if f["name"] in skip:
            continue
        phys = f["metadata"]["delta.columnMapping.physicalName"]
        values = [r.get(f["name"]) if r is not None else None for r in rows]
        t = f["type"]
        if isinstance(t, dict) and t["type"] == "struct":
            mins[phys], maxs[phys], nulls[phys] = _stats(t["fields"], values, set())
            continue
        nulls[phys] = sum(v is None for v in values)
        present = [v for v in values if v is not None]
        if isinstance(t, dict) or not present or t in ("binary", "boolean"):
            continue  # Delta keeps no min/max for these
        if t in ("float", "double"):
            present = [v for v in present if not math.isnan(v)]  # as Parquet footers do
            if not present:
                continue
        mins[phys] = _stat(t, min(present), upper=False)
        maxs[phys] = _stat(t, max(present), upper=True)
    return mins, maxs, nulls


def _json(value: Any) -> str:
    """JSON with decimals as exact numbers (as Delta writes them)."""
    if isinstance(value, dict):
        return "{" + ",".join(f"{json.dumps(k)}:{_json(v)}" for k, v in value.items()) + "}"
    if isinstance(value, Decimal):
        return format(value, "f")
    return json.dumps(value)


def _partition_text(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, dt.datetime):
        return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S.%f")
    if isinstance(value, dt.date):
        return value.isoformat()
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


class Table:
    """A column-mapped Delta table written through the core API, and the rows of each of its files."""

    def __init__(self, path: Path, fields: list[dict[str, Any]], partition_by: Sequence[str] = (),
                 props: dict[str, str] | None = None) -> None:  # fmt: skip
        self.path = str(path)
        self.fields = fields
        self.partition_by = tuple(partition_by)
        self.log = DeltaLog(self.path)
        self.rows: dict[str, list[dict[str, Any]]] = {}
        self.live_at: dict[int, set[str]] = {}
        max_id = _max_id(fields)
        conf = {**COMPAT, "delta.columnMapping.maxColumnId": str(max_id), **(props or {})}
        txn = self.log.start_transaction()
        txn.update_metadata(Metadata(schema_string=self.schema_json(), partition_columns=self.partition_by,
                                     configuration=conf))  # fmt: skip
        self.version = txn.commit([], operation="CREATE TABLE")
        self.live_at[self.version] = set()

    def schema_json(self) -> str:
        return json.dumps({"type": "struct", "fields": self.fields})

    def file(self, rows: list[dict[str, Any]], *, stats: bool = True, name: str | None = None) -> AddFile:
        """A Parquet file holding ``rows`` (all in one partition) and its AddFile."""
        first = rows[0]
        pv = {self.physical(c): _partition_text(first.get(c)) for c in self.partition_by}
        assert all(r.get(c) == first.get(c) for r in rows for c in self.partition_by), "one partition per file"
        directory = "/".join(f"{k}={v if v is not None else '__HIVE_DEFAULT_PARTITION__'}" for k, v in pv.items())
        rel = f"{directory}/" if directory else ""
        rel += name or f"part {uuid.uuid4().hex[:8]} %x.parquet"  # a space and a '%': the log URI-encodes them
        full = os.path.join(self.path, rel)
        os.makedirs(os.path.dirname(full), exist_ok=True)
        schema = pa.schema([_arrow_field(f) for f in self.fields])
        table = pa.Table.from_pylist([_physical_row(self.fields, r) for r in rows], schema=schema)
        pq.write_table(table, full)
        mins, maxs, nulls = _stats(self.fields, rows, set(self.partition_by))
        st = _json({"numRecords": len(rows), "minValues": mins, "maxValues": maxs, "nullCount": nulls}) \
            if stats else None
        from urllib.parse import quote

        add = AddFile(path=quote(rel, safe="/="), partition_values=pv, size=os.path.getsize(full),
                      modification_time=0, stats=st, tags=dict(COMPAT_TAGS))  # fmt: skip
        self.rows[os.path.normpath(full)] = rows
        return add

    def physical(self, name: str) -> str:
        return next(f["metadata"]["delta.columnMapping.physicalName"] for f in self.fields if f["name"] == name)

    def commit(self, actions: list[Any], operation: str = "WRITE") -> int:
        txn = self.log.start_transaction()
        self.version = txn.commit(actions, operation=operation)
        snap = self.log.snapshot(self.version)
        self.live_at[self.version] = {os.path.normpath(os.path.join(self.path, _unquote(a.path)))
                                      for a in snap.all_files}  # fmt: skip
        return self.version

    def add(self, *groups: list[dict[str, Any]]) -> int:
        return self.commit([self.file(g) for g in groups])

    def expected(self, version: int | None = None) -> list[dict[str, Any]]:
        live = self.live_at[self.version if version is None else version]
        rows = [r for path in live for r in self.rows[path]]
        return _normalize(rows, self.fields)

    def convert(self, version: int | None = None) -> str:
        return convert(self.log, self.log.snapshot(self.version if version is None else version))


def _unquote(path: str) -> str:
    from urllib.parse import unquote

    return unquote(path)


def _max_id(fields: list[dict[str, Any]]) -> int:
    out = 0
    for f in fields:
        out = max(out, f["metadata"]["delta.columnMapping.id"], *f["metadata"].get(
            "delta.columnMapping.nested.ids", {0: 0}).values())
        t = f["type"]
        while isinstance(t, dict):
            if t["type"] == "struct":
                out = max(out, _max_id(t["fields"]))
                break
            t = t.get("elementType") or t.get("valueType")
    return out


def _logical_arrow(fields: list[dict[str, Any]]) -> pa.Schema:
    def logical(t: Any) -> pa.DataType:
        if isinstance(t, str):
            return _arrow_type(t, {}, "")
        if t["type"] == "struct":
            return pa.struct([pa.field(f["name"], logical(f["type"])) for f in t["fields"]])
        if t["type"] == "array":
            return pa.list_(logical(t["elementType"]))
        return pa.map_(logical(t["keyType"]), logical(t["valueType"]))

    return pa.schema([pa.field(f["name"], logical(f["type"])) for f in fields])


def _normalize(rows: list[dict[str, Any]], fields: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = pa.Table.from_pylist(rows, schema=_logical_arrow(fields)).to_pylist()
    return sorted(out, key=lambda r: r["id"])


def scan(metadata: str, row_filter: str | None = None, snapshot_id: int | None = None) -> list[dict[str, Any]]:
    from pyiceberg.table import StaticTable

    table = StaticTable.from_metadata(metadata)
    kwargs: dict[str, Any] = {"snapshot_id": snapshot_id} if snapshot_id is not None else {}
    if row_filter is not None:
        kwargs["row_filter"] = row_filter
    return sorted(table.scan(**kwargs).to_arrow().to_pylist(), key=lambda r: r["id"])


def planned(metadata: str, row_filter: str = "True") -> set[str]:
    """The data files pyiceberg plans to read for ``row_filter`` (after manifest, partition and metrics pruning)."""
    from pyiceberg.table import StaticTable

    return {os.path.normpath(t.file.file_path) for t in StaticTable.from_metadata(metadata).scan(
        row_filter=row_filter).plan_files()}  # fmt: skip


def same(a: list[dict[str, Any]], b: list[dict[str, Any]]) -> bool:
    """Rows equal, with NaN equal to NaN."""

    def norm(v: Any) -> Any:
        if isinstance(v, float) and math.isnan(v):
            return "NaN"
        if isinstance(v, dict):
            return {k: norm(x) for k, x in v.items()}
        if isinstance(v, list):
            return [norm(x) for x in v]
        return v

    return norm(a) == norm(b)


# -- schemas ------------------------------------------------------------------------------------------------------

WIDE = [
    col("id", "long", 1, nullable=False),
    col("b", "byte", 2), col("s", "short", 3), col("i", "integer", 4), col("f", "float", 5), col("d", "double", 6),
    col("dec", "decimal(10,2)", 7), col("big", "decimal(30,6)", 8), col("str", "string", 9), col("bin", "binary", 10),
    col("flag", "boolean", 11), col("day", "date", 12), col("ts", "timestamp", 13), col("ntz", "timestamp_ntz", 14),
    col("st", {"type": "struct", "fields": [col("a", "integer", 16), col("z", "string", 17)]}, 15),
    col("arr", {"type": "array", "elementType": "long", "containsNull": True}, 18, nested={"element": 19}),
    col("m", {"type": "map", "keyType": "string", "valueType": "integer", "valueContainsNull": True}, 20,
        nested={"key": 21, "value": 22}),
    col("arrs", {"type": "array", "elementType": {"type": "struct", "fields": [col("x", "integer", 24)]},
                 "containsNull": True}, 23, nested={"element": 25}),
]  # fmt: skip

T0 = dt.datetime(2024, 5, 1, 12, 0, 0, 123456, tzinfo=UTC)


def wide_row(i: int) -> dict[str, Any]:
    return {
        "id": i, "b": (i % 100) - 50, "s": i * 3 - 1000, "i": i * 10, "f": float("nan") if i == 3 else i / 4,
        "d": -i * 1.5, "dec": Decimal(i * 7) / 100, "big": Decimal(f"-{i}123456789012345678.654321"),
        "str": ("s" * 40 + str(i)) if i % 2 else f"v{i:03d}", "bin": bytes([i % 256, 0, 255]),
        "flag": i % 3 == 0 if i != 4 else None, "day": dt.date(2024, 1, 1) + dt.timedelta(days=i),
        "ts": T0 + dt.timedelta(microseconds=i * 1001), "ntz": dt.datetime(2000, 1, 1, 0, 0, 0, i * 7),
        "st": None if i == 5 else {"a": i, "z": f"z{i}"}, "arr": None if i == 6 else [i, None, -i],
        "m": {"k": i, "n": None} if i != 7 else None, "arrs": [{"x": i}, None],
    }  # fmt: skip


# -- tests ----------------------------------------------------------------------------------------------------------


def test_every_type_reads_back_through_pyiceberg(tmp_path: Path) -> None:
    from pyiceberg.table import StaticTable
    from pyiceberg.table.metadata import TableMetadataV2

    t = Table(tmp_path / "wide", WIDE)
    t.add([wide_row(i) for i in range(0, 5)], [wide_row(i) for i in range(5, 12)])
    path = t.convert()
    assert path == metadata_path(t.path, t.version) and path.endswith(f"/metadata/v{t.version}.metadata.json")
    assert same(scan(path), t.expected())
    # The metadata JSON round-trips through pyiceberg's model.
    with open(path) as fh:
        text = fh.read()
    model = TableMetadataV2.model_validate_json(text)
    assert model.format_version == 2 and str(model.table_uuid) == table_uuid(t.log.snapshot().metadata.id)
    assert model.current_snapshot_id == snapshot_id_for(str(model.table_uuid), t.version)
    assert model.schema().find_field("st.z").field_id == 17 and model.last_column_id == 25
    assert TableMetadataV2.model_validate_json(model.model_dump_json()) == model
    table = StaticTable.from_metadata(path)
    assert table.metadata.properties["delta-version"] == str(t.version)
    assert table.metadata.name_mapping() is not None
    # The manifest carries the file metadata Iceberg readers expect; data files are absolute and decoded.
    snapshot = table.current_snapshot()
    assert snapshot is not None and snapshot.summary is not None
    assert snapshot.summary["total-records"] == "12" and snapshot.summary.operation.value == "append"
    manifest = snapshot.manifests(table.io)[0]
    with open(manifest.manifest_path, "rb") as fh:
        header = iceberg_avro.read_file(fh.read())
    assert header.meta("format-version") == "2" and header.meta("content") == "data"
    assert header.meta("partition-spec-id") == "0" and json.loads(header.meta("schema") or "")["schema-id"] == 0
    files = {os.path.basename(f.file.file_path) for f in table.scan().plan_files()}
    assert all(" " in name and "%x" in name for name in files)


def test_bounds_are_true_bounds_and_prune(tmp_path: Path) -> None:
    """Filters on every kind of column return exactly the matching rows; selective ones skip files."""
    t = Table(tmp_path / "bounds", WIDE)
    groups = [[wide_row(i) for i in range(k * 4, k * 4 + 4)] for k in range(4)]  # 4 files of 4 rows
    # A row whose timestamp's microseconds exceed its file's millisecond-precision max.
    groups[1][3]["ts"] = dt.datetime(2024, 6, 1, 0, 0, 0, 999_999, tzinfo=UTC)
    groups[2][0]["str"] = "m" * 45  # longer than the 32 characters Delta keeps: truncated stats
    groups[3][1]["str"] = "x" * 50  # the file's max, truncated by Delta to 32 'x' + U+10FFFF
    t.add(*groups)
    path = t.convert()
    rows = t.expected()
    filters: dict[str, Callable[[dict[str, Any]], bool]] = {
        "i > 85": lambda r: r["i"] > 85,
        "i >= 40 and i < 80": lambda r: 40 <= r["i"] < 80,
        "id = 9": lambda r: r["id"] == 9,
        "s < -990": lambda r: r["s"] < -990,
        "b = -40": lambda r: r["b"] == -40,
        "day >= '2024-01-12'": lambda r: r["day"] >= dt.date(2024, 1, 12),
        "ts > '2024-06-01T00:00:00.999500+00:00'": lambda r: r["ts"] > dt.datetime(2024, 6, 1, 0, 0, 0, 999_500,
                                                                                     tzinfo=UTC),
        "ts <= '2024-05-01T12:00:00.127460+00:00'": lambda r: r["ts"] <= T0.replace(microsecond=127460),
        "ntz > '2000-01-01T00:00:00.000080'": lambda r: r["ntz"] > dt.datetime(2000, 1, 1, 0, 0, 0, 80),
        "dec > 0.70": lambda r: r["dec"] > Decimal("0.70"),
        "dec = 0.21": lambda r: r["dec"] == Decimal("0.21"),
        "big < -14123456789012345678.654321": lambda r: r["big"] < Decimal("-14123456789012345678.654321"),
        f"str = '{'m' * 45}'": lambda r: r["str"] == "m" * 45,
        f"str >= '{'s' * 40}'": lambda r: r["str"] >= "s" * 40,
        f"str = '{'x' * 50}'": lambda r: r["str"] == "x" * 50,
        f"str > '{'x' * 40}'": lambda r: r["str"] > "x" * 40,
        "str = 'v010'": lambda r: r["str"] == "v010",
        "str < 'v004'": lambda r: r["str"] < "v004",
        "f > 2.0": lambda r: not math.isnan(r["f"]) and r["f"] > 2.0,
        "d < -20": lambda r: r["d"] < -20,
        "flag = true": lambda r: r["flag"] is True,
        "flag is null": lambda r: r["flag"] is None,
        "st.a > 12": lambda r: r["st"] is not None and r["st"]["a"] > 12,
        "st is null": lambda r: r["st"] is None,
        "st.z = 'z3'": lambda r: r["st"] is not None and r["st"]["z"] == "z3",
    }
    for expr, keep in filters.items():
        assert same(scan(path, expr), [r for r in rows if keep(r)]), expr
    total = len(planned(path))
    assert total == 4
    # Exact bounds let pyiceberg skip files: ints, dates, decimals, short strings, nested fields.
    for expr in ("i > 125", "id = 9", "day >= '2024-01-14'", "dec = 0.21", "str > 'v011'", "st.a > 13"):
        assert len(planned(path, expr)) == 1, expr
    # The sub-millisecond row is found although its file's Delta max is at .999 ms; the truncated string too.
    assert len(planned(path, "ts > '2024-06-01T00:00:00.999500+00:00'")) == 1
    assert len(planned(path, f"str = '{'m' * 45}'")) >= 1


def test_bounds_written_follow_the_policy(tmp_path: Path) -> None:
    """Floats and truncated maxima get no bound, timestamps are widened, truncated minima kept as prefixes."""
    from pyiceberg.table import StaticTable

    t = Table(tmp_path / "policy", WIDE)
    rows = [wide_row(1), wide_row(2)]
    rows[0]["str"], rows[1]["str"] = "a" * 40, "b" * 40
    t.add(rows)
    table = StaticTable.from_metadata(t.convert())
    (task,) = table.scan().plan_files()
    lower, upper = task.file.lower_bounds, task.file.upper_bounds
    assert 5 not in lower and 5 not in upper and 6 not in lower and 6 not in upper  # float, double
    assert 10 not in lower and 11 not in lower  # binary, boolean: no Delta min/max
    assert lower[9] == b"a" * 32 and 9 not in upper  # a truncated max is not exact: left out
    ts = [T0 + dt.timedelta(microseconds=1001), T0 + dt.timedelta(microseconds=2002)]
    micros = [int((x - dt.datetime(1970, 1, 1, tzinfo=UTC)) / dt.timedelta(microseconds=1)) for x in ts]
    assert int.from_bytes(lower[13], "little") == micros[0] - micros[0] % 1000
    assert int.from_bytes(upper[13], "little") == micros[1] - micros[1] % 1000 + 999
    assert task.file.record_count == 2 and task.file.null_value_counts[16] == 0 and task.file.value_counts[16] == 2
    assert 19 not in task.file.null_value_counts  # array elements: Delta keeps no statistics for them
    assert int.from_bytes(lower[7], "big", signed=True) == 7 and int.from_bytes(upper[7], "big", signed=True) == 14


PART = [col("id", "long", 1), col("ps", "string", 2), col("pd", "date", 3), col("v", "integer", 4),
        col("pt", "timestamp", 5), col("pdec", "decimal(5,2)", 6), col("pb", "boolean", 7), col("pbin", "binary", 8),
        col("pn", "timestamp_ntz", 9)]  # fmt: skip


def prow(i: int, ps: str | None, pd: dt.date | None) -> dict[str, Any]:
    return {"id": i, "ps": ps, "pd": pd, "v": i * 2, "pt": dt.datetime(2024, 1, 1, 1, 2, 3, 456789, tzinfo=UTC),
            "pdec": Decimal("-1.50"), "pb": ps == "a", "pbin": b"xy", "pn": dt.datetime(2001, 2, 3, 4, 5, 6, 7)}


def test_partitioned_table_with_null_and_date_partitions(tmp_path: Path) -> None:
    from pyiceberg.table import StaticTable

    t = Table(tmp_path / "part", PART, partition_by=("ps", "pd", "pt", "pdec", "pb", "pbin", "pn"))
    d1, d2 = dt.date(2024, 1, 1), dt.date(2024, 1, 2)
    t.add([prow(1, "a", d1), prow(2, "a", d1)], [prow(3, "b", d2)], [prow(4, None, d2)], [prow(5, "a", None)])
    path = t.convert()
    rows = t.expected()
    assert same(scan(path), rows)
    filters: dict[str, Callable[[dict[str, Any]], bool]] = {
        "ps is null": lambda r: r["ps"] is None,
        "ps = 'a'": lambda r: r["ps"] == "a",
        "pd = '2024-01-02'": lambda r: r["pd"] == d2,
        "pd is null": lambda r: r["pd"] is None,
        "ps = 'b' or pd is null": lambda r: r["ps"] == "b" or r["pd"] is None,
        "v > 6": lambda r: r["v"] > 6,
        "pdec = -1.50": lambda r: True,
        "pt > '2024-01-01T01:02:03.456788+00:00'": lambda r: True,
        "pt > '2024-01-01T01:02:03.456789+00:00'": lambda r: False,
        "pb = true": lambda r: r["pb"] is True,
        "pn = '2001-02-03T04:05:06.000007'": lambda r: True,
    }
    for expr, keep in filters.items():
        assert same(scan(path, expr), [r for r in rows if keep(r)]), expr
    assert len(planned(path, "ps is null")) == 1 and len(planned(path, "pd = '2024-01-02'")) == 2
    table = StaticTable.from_metadata(path)
    spec = table.spec()
    assert [(f.name, f.field_id, f.source_id, str(f.transform)) for f in spec.fields] == [
        ("ps", 1000, 2, "identity"), ("pd", 1001, 3, "identity"), ("pt", 1002, 5, "identity"),
        ("pdec", 1003, 6, "identity"), ("pb", 1004, 7, "identity"), ("pbin", 1005, 8, "identity"),
        ("pn", 1006, 9, "identity")]  # fmt: skip
    (manifest,) = table.current_snapshot().manifests(table.io)  # type: ignore[union-attr]
    summaries = manifest.partitions or []
    assert summaries[0].contains_null and summaries[1].contains_null and not summaries[2].contains_null
    assert summaries[0].lower_bound == b"a" and summaries[0].upper_bound == b"b"


def test_history_converts_incrementally_and_travels_in_time(tmp_path: Path) -> None:
    from pyiceberg.table import StaticTable

    t = Table(tmp_path / "hist", PART[:4], partition_by=("ps",))
    d = dt.date(2024, 3, 1)
    paths: dict[int, str] = {t.version: t.convert()}
    expected: dict[int, list[dict[str, Any]]] = {t.version: t.expected()}
    ops: dict[int, str] = {}

    def step(op: str, actions: list[Any], operation: str = "WRITE") -> None:
        v = t.commit(actions, operation)
        paths[v] = t.convert()
        expected[v] = t.expected()
        ops[v] = op

    first = [t.file([prow(1, "a", d), prow(2, "a", d)]), t.file([prow(3, "b", d)])]
    step("append", first)
    second = [t.file([prow(4, "c", d)]), t.file([prow(5, "c", d), prow(6, "c", d)]), t.file([prow(8, None, d)])]
    step("append", second)
    step("delete", [second[0].remove()])
    step("overwrite", [first[0].remove(), t.file([prow(7, "a", d)])])
    # Properties only: no new snapshot.
    meta = t.log.snapshot().metadata
    v = t.commit([meta.with_configuration(**{"user.note": "x"})], "SET TBLPROPERTIES")
    paths[v], expected[v] = t.convert(), t.expected()
    # Compaction: the same rows in one file (dataChange false): a replace.
    snap = t.log.snapshot()
    rows_c = [r for a in snap.all_files if "ps=c" in a.path for r in t.rows[os.path.normpath(os.path.join(
        t.path, _unquote(a.path)))]]  # fmt: skip
    compacted = t.file(rows_c)
    compacted = AddFile(**{**compacted.__dict__, "data_change": False})
    step("replace", [*(a.remove(data_change=False) for a in snap.all_files if "ps=c" in a.path), compacted],
         "OPTIMIZE")  # fmt: skip

    latest = StaticTable.from_metadata(paths[t.version])
    uid = str(latest.metadata.table_uuid)
    for version, path in paths.items():
        assert same(scan(path), expected[version]), version
        if version in ops:  # time travel from the newest metadata to each snapshot
            sid = snapshot_id_for(uid, version)
            assert same(scan(paths[t.version], snapshot_id=sid), expected[version]), version
            snap_meta = latest.metadata.snapshot_by_id(sid)
            assert snap_meta is not None and snap_meta.summary is not None
            assert snap_meta.summary.operation.value == ops[version], version
            assert snap_meta.sequence_number == version + 1
    props_version = max(v for v in paths if v not in ops and v > 0)
    with open(paths[props_version]) as fh:
        doc = json.loads(fh.read())
    assert doc["current-snapshot-id"] == snapshot_id_for(uid, props_version - 1)
    assert doc["properties"]["delta-version"] == str(props_version)
    # Incremental: the append kept every earlier manifest; the delete rewrote only the manifest holding the file.
    io = latest.io

    def manifests(version: int) -> set[str]:
        snap = StaticTable.from_metadata(paths[version]).current_snapshot()
        return {m.manifest_path for m in snap.manifests(io)} if snap else set()  # type: ignore[union-attr]

    assert manifests(1) < manifests(2)
    assert len(manifests(3) & manifests(2)) == 1 and len(manifests(3)) == 2
    with open(paths[3]) as fh:
        summary = json.loads(fh.read())["snapshots"][-1]["summary"]
    assert summary["deleted-data-files"] == "1" and summary["total-data-files"] == "4"
    # The metadata log names the earlier files; the hint the newest version.
    assert [e.metadata_file for e in latest.metadata.metadata_log][-1] == paths[t.version - 1]
    assert read_version_hint(t.log) == t.version
    assert StaticTable.from_metadata(t.path).metadata_location == paths[t.version]


def test_incremental_and_full_conversions_describe_the_same_files(tmp_path: Path) -> None:
    from pyiceberg.table import StaticTable

    t = Table(tmp_path / "inc", PART[:4], partition_by=("ps",))
    d = dt.date(2024, 3, 1)
    a = [t.file([prow(i, "ab"[i % 2], d)]) for i in range(6)]
    t.commit(a[:3])
    t.convert()
    t.commit(a[3:])
    t.convert()
    t.commit([a[1].remove(), a[4].remove(), t.file([prow(10, None, d)])])
    t.convert()
    t.commit([a[0].remove()])
    incremental = t.convert()
    # The same Delta table copied without its Iceberg metadata, converted in one go.
    copy = tmp_path / "copy"
    shutil.copytree(t.path, copy, ignore=shutil.ignore_patterns("metadata"))
    full = convert(DeltaLog(str(copy)), DeltaLog(str(copy)).snapshot())

    def described(metadata: str, root: str) -> set[tuple[Any, ...]]:
        out = set()
        for task in StaticTable.from_metadata(metadata).scan().plan_files():
            f = task.file
            out.add((os.path.relpath(f.file_path, root), f.record_count, f.file_size_in_bytes, tuple(f.partition),
                     tuple(sorted(f.lower_bounds.items())), tuple(sorted(f.upper_bounds.items())),
                     tuple(sorted(f.null_value_counts.items())), tuple(sorted(f.value_counts.items()))))  # fmt: skip
        return out

    assert described(incremental, t.path) == described(full, str(copy))
    assert len(described(full, str(copy))) == 4
    assert same(scan(incremental), t.expected())


def test_a_cold_converter_reads_only_manifests_whose_partitions_match(tmp_path: Path) -> None:
    """Without the in-process path cache, partition summaries tell which manifests a removal may touch."""
    from serialake.storage import LocalLogStore

    class CountingStore(LocalLogStore):
        def __init__(self) -> None:
            super().__init__()
            self.reads: list[str] = []

        def read(self, path: str) -> bytes:
            self.reads.append(path)
            return super().read(path)

    t = Table(tmp_path / "cold", PART[:4], partition_by=("ps",))
    d = dt.date(2024, 3, 1)
    files = {ps: t.file([prow(i, ps, d)]) for i, ps in enumerate(["a", "b", "c", None])}
    for f in files.values():
        t.commit([f])
        t.convert()
    t.commit([files["b"].remove()])
    clear_manifest_cache()
    store = CountingStore()
    log = DeltaLog(t.path, store=store)
    path = convert(log, log.snapshot())
    read_manifests = [p for p in store.reads if p.endswith(".avro") and "/snap-" not in p]
    assert len(read_manifests) == 1, "\n".join(read_manifests)  # only the manifest of partition b, once
    assert same(scan(path), t.expected())
    t.commit([files[None].remove()])
    clear_manifest_cache()
    store.reads.clear()
    path = convert(log, log.snapshot())
    assert len([p for p in store.reads if p.endswith(".avro") and "/snap-" not in p]) == 1  # the null partition's
    assert same(scan(path), t.expected())


def test_schema_change_and_repartitioning(tmp_path: Path) -> None:
    from pyiceberg.table import StaticTable

    fields = [col("id", "long", 1), col("v", "integer", 2), col("p", "string", 3)]
    t = Table(tmp_path / "evolve", fields, partition_by=("p",))
    t.add([{"id": 1, "v": 1, "p": "x"}])
    first = t.convert()
    # Add a column (ids continue): incremental, old files read the new column as nulls.
    t.fields = [*fields, col("w", "string", 4)]
    meta = t.log.snapshot().metadata
    t.commit([Metadata(**{**meta.__dict__, "schema_string": t.schema_json()})], "ADD COLUMNS")
    t.add([{"id": 2, "v": 2, "p": "y", "w": "new"}])
    second = t.convert()
    table = StaticTable.from_metadata(second)
    assert [s.schema_id for s in table.metadata.schemas] == [0, 1] and table.metadata.current_schema_id == 1
    assert same(scan(second), t.expected()) and scan(second)[0]["w"] is None
    assert same(scan(second, snapshot_id=StaticTable.from_metadata(first).metadata.current_snapshot_id),
                [{"id": 1, "v": 1, "p": "x"}])  # fmt: skip
    # Widen v (integer -> long): earlier bounds were 4-byte ints, so the conversion is full.
    t.fields = [col("id", "long", 1), col("v", "long", 2), col("p", "string", 3), col("w", "string", 4)]
    meta = t.log.snapshot().metadata
    t.commit([Metadata(**{**meta.__dict__, "schema_string": t.schema_json()})], "CHANGE COLUMN")
    t.rows = {k: [{**r} for r in v] for k, v in t.rows.items()}
    third = t.convert()
    table = StaticTable.from_metadata(third)
    old = {m.manifest_path for m in StaticTable.from_metadata(second).current_snapshot().manifests(table.io)}  # type: ignore[union-attr]
    new = {m.manifest_path for m in table.current_snapshot().manifests(table.io)}  # type: ignore[union-attr]
    assert not old & new and table.current_snapshot().summary.operation.value == "replace"  # type: ignore[union-attr]
    # Repartition by v: a new spec, a full conversion.
    meta = t.log.snapshot().metadata
    v = t.commit([Metadata(**{**meta.__dict__, "partition_columns": ("v",)}),
                  *(a.remove() for a in t.log.snapshot().all_files)], "REPLACE")  # fmt: skip
    t.partition_by = ("v",)
    t.add([{"id": 3, "v": 5, "p": "z", "w": None}])
    assert v > 0
    fourth = t.convert()
    table = StaticTable.from_metadata(fourth)
    assert [s.spec_id for s in table.metadata.partition_specs] == [0, 1] and table.metadata.default_spec_id == 1
    assert table.spec().fields[0].field_id == 1001 and table.spec().fields[0].source_id == 2
    assert same(scan(fourth), t.expected()) and same(scan(fourth, "v = 5"), t.expected())


def test_errors_name_table_version_and_file(tmp_path: Path) -> None:
    t = Table(tmp_path / "err", PART[:4], partition_by=("ps",))
    d = dt.date(2024, 3, 1)
    bare = t.file([prow(1, "a", d)], stats=False)
    t.commit([bare])
    with pytest.raises(IcebergConversionError, match="no record count") as info:
        t.convert()
    assert info.value.file == bare.path and info.value.version == t.version and info.value.table == t.path
    # A deletion vector (an IcebergCompatV2 table refuses one at commit; a column-mapped table may hold one).
    m = Table(tmp_path / "dv", PART[:4], partition_by=("ps",), props={"delta.enableIcebergCompatV2": "false"})
    dv = DeletionVectorDescriptor("i", "wi5b=000010000siXQKl0rr91000f55c8Xg0@@D72lkbi5=-{L", 40, 1)
    with_dv = m.file([prow(2, "a", d)])
    m.commit([AddFile(**{**with_dv.__dict__, "deletion_vector": dv})])
    with pytest.raises(IcebergConversionError, match="deletion vector") as info:
        m.convert()
    assert info.value.file == with_dv.path and "Help:" in str(info.value)
    # No column mapping: the column is named.
    plain = DeltaLog(str(tmp_path / "plain"))
    txn = plain.start_transaction()
    txn.update_metadata(Metadata(schema_string=StructType.from_ddl("id BIGINT, name STRING").to_json()))
    txn.commit([], operation="CREATE TABLE")
    with pytest.raises(IcebergConversionError, match="column 'id' has no column-mapping id") as info:
        convert(plain, plain.snapshot())
    assert info.value.column == "id" and "delta.columnMapping.mode" in str(info.value)
    assert DecimalType(5, 2).precision == 5


def test_existing_version_hint_and_foreign_metadata(tmp_path: Path) -> None:
    t = Table(tmp_path / "hint", PART[:4], partition_by=("ps",))
    d = dt.date(2024, 3, 1)
    t.add([prow(1, "a", d)])
    t.add([prow(2, "b", d)])
    newest = t.convert()
    before = os.stat(newest).st_mtime_ns
    assert t.convert() == newest and os.stat(newest).st_mtime_ns == before  # converted already: kept as is
    older = t.convert(1)  # an older version: written, the hint stays at the newest
    assert older.endswith("v1.metadata.json") and read_version_hint(t.log) == 2
    assert same(scan(older), t.expected(1))
    hint = os.path.join(t.path, "metadata", "version-hint.text")
    with open(hint) as fh:
        assert fh.read() == "2"  # no newline: pyiceberg reads the number as is
    # Metadata left over from another table at this path is refused, not mistaken for ours.
    with open(newest) as fh:
        doc = json.loads(fh.read())
    doc["table-uuid"] = str(uuid.uuid4())
    os.remove(newest)
    with open(newest, "w") as fh:
        json.dump(doc, fh)
    with pytest.raises(IcebergConversionError, match="belongs to another table") as info:
        t.convert()
    assert info.value.file == newest
    # A new table created at the path of a deleted one whose Iceberg metadata stayed: refused, not mixed up.
    shutil.rmtree(os.path.join(t.path, "_delta_log"))
    again = Table(Path(t.path), PART[:4], partition_by=("ps",))
    with pytest.raises(IcebergConversionError, match="belongs to another table") as info:
        again.convert()
    assert "remove" in info.value.help and info.value.version == 0


def test_background_converter_coalesces_and_never_raises(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import threading

    from serialake.core.iceberg import converter as conv

    t = Table(tmp_path / "bg", PART[:4], partition_by=("ps",))
    d = dt.date(2024, 3, 1)
    for i in range(4):
        t.add([prow(i, "a", d)])
    calls: list[int] = []
    gate = threading.Event()
    real = conv.convert

    def slow(log: DeltaLog, snapshot: Any) -> str:
        calls.append(snapshot.version)
        gate.wait(5)
        return real(log, snapshot)

    monkeypatch.setattr(conv, "convert", slow)
    converter = IcebergConverter.for_table(t.log)
    assert IcebergConverter.for_table(t.log) is converter
    for v in range(1, t.version + 1):
        after_commit(t.log, v, {**t.log.snapshot().configuration, UNIVERSAL_FORMATS: "iceberg"})  # the commit hook
    gate.set()
    assert converter.wait(10)
    assert calls[-1] == t.version and len(calls) <= 2  # versions queued behind the running one were skipped
    assert converter.last_error is None and converter.converted_version == t.version
    assert same(scan(converter.metadata_path or ""), t.expected())
    # A table without UniForm: nothing scheduled. A failing conversion: kept, logged, not raised.
    after_commit(t.log, t.version, {})
    plain = DeltaLog(str(tmp_path / "plain"))
    txn = plain.start_transaction()
    txn.update_metadata(Metadata(schema_string=StructType.from_ddl("id BIGINT").to_json()))
    version = txn.commit([], operation="CREATE TABLE")
    after_commit(plain, version, {UNIVERSAL_FORMATS: "iceberg"})
    failing = IcebergConverter.for_table(plain)
    assert failing.wait(10)
    assert isinstance(failing.last_error, IcebergConversionError) and failing.last_error_version == version
    assert convert_now(t.log).endswith(f"v{t.version}.metadata.json")


def test_cleanup_removes_only_unreferenced_files(tmp_path: Path) -> None:
    t = Table(tmp_path / "clean", PART[:4], partition_by=("ps",),
              props={"delta.logRetentionDuration": "interval 1 hour"})  # fmt: skip
    d = dt.date(2024, 3, 1)
    a = t.file([prow(1, "a", d)])
    t.commit([a])
    t.convert()
    t.add([prow(2, "b", d)])
    t.convert()
    t.commit([a.remove()])
    newest = t.convert()
    directory = os.path.join(t.path, "metadata")
    orphan = os.path.join(directory, f"{uuid.uuid4().hex}-m0.avro")  # as a converter that lost a race leaves
    with open(orphan, "wb") as fh:
        fh.write(b"Obj\x01")
    nothing = cleanup(t.log, keep_after_ms=0)  # everything is newer than the epoch: all kept
    assert nothing == [] and os.path.exists(orphan)
    future = int(dt.datetime.now(UTC).timestamp() * 1000) + 60_000
    removed = cleanup(t.log, keep_after_ms=future, dry_run=True)
    assert orphan in removed and os.path.exists(orphan)
    removed = cleanup(t.log, keep_after_ms=future)
    assert orphan in removed and not os.path.exists(orphan)
    names = set(os.listdir(directory))
    assert f"v{t.version}.metadata.json" in names and not any(
        n.endswith(".metadata.json") and n != f"v{t.version}.metadata.json" for n in names)  # fmt: skip
    # Every snapshot the newest metadata keeps still reads (time travel intact).
    from pyiceberg.table import StaticTable

    table = StaticTable.from_metadata(newest)
    for s in table.metadata.snapshots:
        scan(newest, snapshot_id=s.snapshot_id)
    assert same(scan(newest), t.expected())


def test_snapshots_older_than_the_log_retention_are_dropped(tmp_path: Path) -> None:
    from pyiceberg.table import StaticTable

    t = Table(tmp_path / "ret", PART[:4], partition_by=("ps",), props={"delta.logRetentionDuration": "interval 1 hour"})
    d = dt.date(2024, 3, 1)
    t.add([prow(1, "a", d)])
    t.convert()
    path = os.path.join(t.path, "metadata", f"v{t.version}.metadata.json")
    with open(path) as fh:
        doc = json.loads(fh.read())
    for s in doc["snapshots"]:  # make the converted snapshot two hours old
        s["timestamp-ms"] -= 2 * 3_600_000
    for e in doc["snapshot-log"]:
        e["timestamp-ms"] -= 2 * 3_600_000
    doc["last-updated-ms"] -= 2 * 3_600_000
    with open(path, "w") as fh:
        json.dump(doc, fh)
    old_id = doc["current-snapshot-id"]
    t.add([prow(2, "b", d)])
    table = StaticTable.from_metadata(t.convert())
    assert [s.snapshot_id for s in table.metadata.snapshots] == [table.metadata.current_snapshot_id]
    assert old_id not in {e.snapshot_id for e in table.metadata.snapshot_log}
    assert same(scan(table.metadata_location), t.expected())


def test_history_gone_means_a_full_conversion(tmp_path: Path) -> None:
    t = Table(tmp_path / "gone", PART[:4], partition_by=("ps",))
    d = dt.date(2024, 3, 1)
    t.add([prow(1, "a", d)])
    first = t.convert()
    t.add([prow(2, "b", d)])
    t.add([prow(3, "c", d)])
    t.log.checkpoint(t.version)
    for v in range(1, t.version):  # the commits after the converted version are cleaned up
        os.remove(t.log.commit_path(v))
    from pyiceberg.table import StaticTable

    fresh = DeltaLog(t.path)  # (t.log still holds the commits it wrote in memory)
    table = StaticTable.from_metadata(convert(fresh, fresh.snapshot()))
    assert same(scan(table.metadata_location), t.expected())
    snap = table.current_snapshot()
    assert snap is not None and snap.summary is not None and snap.summary.operation.value == "overwrite"
    before = StaticTable.from_metadata(first).current_snapshot()
    assert snap.parent_snapshot_id == before.snapshot_id  # type: ignore[union-attr]
    assert not {m.manifest_path for m in snap.manifests(table.io)} & {
        m.manifest_path for m in before.manifests(table.io)}  # type: ignore[union-attr]


def test_many_appends_keep_few_manifests(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from pyiceberg.table import StaticTable

    from serialake.core.iceberg import conversion, incremental

    monkeypatch.setattr(incremental, "MANIFEST_MERGE_MIN_COUNT", 3)
    monkeypatch.setattr(incremental, "MANIFEST_TARGET_ENTRIES", 4)
    monkeypatch.setattr(conversion, "SNAPSHOTS_MAX", 3)
    t = Table(tmp_path / "many", PART[:4], partition_by=("ps",))
    d = dt.date(2024, 3, 1)
    for i in range(9):
        t.add([prow(i, "abc"[i % 3], d)])
        path = t.convert()
        table = StaticTable.from_metadata(path)
        manifests = table.current_snapshot().manifests(table.io)  # type: ignore[union-attr]
        assert len(manifests) <= 4 and sum(m.added_files_count + m.existing_files_count for m in manifests) == i + 1
        assert same(scan(path), t.expected())
        assert len(table.metadata.snapshots) == min(i + 1, 3)
    assert len(planned(path, "ps = 'a'")) == 3


# -- concurrency ----------------------------------------------------------------------------------------------------


def _convert_versions(path: str, versions: list[int]) -> list[str]:
    """Run in a child process: convert these versions of the table at ``path``."""
    log = DeltaLog(path)
    return [convert(log, log.snapshot(v)) for v in versions]


@pytest.mark.concurrency
def test_two_processes_converting_at_once_stay_valid(tmp_path: Path) -> None:
    from pyiceberg.table import StaticTable

    t = Table(tmp_path / "conc", PART[:4], partition_by=("ps",))
    d = dt.date(2024, 3, 1)
    files = []
    for i in range(8):
        files.append(t.file([prow(i, "abcd"[i % 4], d)]))
        t.commit([files[-1]] + ([files[i - 3].remove()] if i >= 3 and i % 3 == 0 else []))
    versions = list(range(1, t.version + 1))
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(2) as pool:
        # One converts every version in order, the other every version too, and both the newest twice.
        a = pool.apply_async(_convert_versions, (t.path, [*versions, t.version]))
        b = pool.apply_async(_convert_versions, (t.path, [*versions[::2], *versions, t.version]))
        results = a.get(60) + b.get(60)
    assert all(os.path.exists(p) for p in results)
    assert read_version_hint(t.log) == t.version
    uid = table_uuid(t.log.snapshot().metadata.id)
    for v in versions:
        path = metadata_path(t.path, v)
        table = StaticTable.from_metadata(path)
        assert table.metadata.current_snapshot_id == snapshot_id_for(uid, v)
        assert same(scan(path), t.expected(v)), v
    assert same(scan(t.path), t.expected())  # the table location, through the version hint


# -- S3 -------------------------------------------------------------------------------------------------------------


@pytest.mark.s3
def test_s3_table(tmp_path: Path) -> None:
    pytest.importorskip("moto")
    from tests.s3server import s3_environment

    with s3_environment() as server:
        import boto3

        env = server.environment()
        client = boto3.client("s3", endpoint_url=env.get("AWS_ENDPOINT_URL") or env.get("AWS_ENDPOINT_URL_S3"))
        client.create_bucket(Bucket="lake")
        local = Table(tmp_path / "src", PART[:4], partition_by=("ps",))
        d = dt.date(2024, 3, 1)
        local.add([prow(1, "a", d), prow(2, "a", d)], [prow(3, None, d)])
        root = "s3://lake/uni"
        for dirpath, _, names in os.walk(local.path):
            for name in names:
                full = os.path.join(dirpath, name)
                key = "uni/" + os.path.relpath(full, local.path)
                with open(full, "rb") as fh:
                    client.put_object(Bucket="lake", Key=key, Body=fh.read())
        log = DeltaLog(root)
        path = convert(log, log.snapshot())
        assert path == f"{root}/metadata/v{local.version}.metadata.json"
        assert read_version_hint(log) == local.version
        from pyiceberg.table import StaticTable

        props = {"s3.endpoint": env.get("AWS_ENDPOINT_URL") or env.get("AWS_ENDPOINT_URL_S3"),
                 "s3.access-key-id": env["AWS_ACCESS_KEY_ID"], "s3.secret-access-key": env["AWS_SECRET_ACCESS_KEY"],
                 "s3.region": env.get("AWS_DEFAULT_REGION", "us-east-1")}  # fmt: skip
        table = StaticTable.from_metadata(path, properties=props)
        rows = sorted(table.scan().to_arrow().to_pylist(), key=lambda r: r["id"])
        assert same(rows, local.expected())
        assert {f.file.file_path.split("/uni/")[0] for f in table.scan().plan_files()} == {"s3://lake"}
        assert RemoveFile  # (imported for the tables above)
