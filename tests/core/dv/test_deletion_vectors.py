"""Deletion vectors: Z85, RoaringBitmapArray, DV files, golden tables and delta-rs interop."""

from __future__ import annotations

import glob
import json
import os
import shutil
import struct
import uuid
import zlib
from dataclasses import replace
from typing import Any
from urllib.parse import unquote, urlparse

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pyroaring import BitMap

from serialake.core import DeltaLog
from serialake.core.dv.deletion_vectors import (
    MAX_ROW_INDEX,
    NATIVE_MAGIC,
    PORTABLE_MAGIC,
    CorruptDeletionVectorError,
    RowIndexSet,
    dv_absolute_path,
    dv_referenced_files,
    read_deletion_vector,
    uuid_to_z85,
    write_deletion_vector,
    z85_decode,
    z85_encode,
    z85_to_uuid,
)
from serialake.core.model.actions import DeletionVectorDescriptor
from serialake.exceptions import CorruptLogError, DeltaIllegalArgumentException

GOLDEN = os.path.join(os.path.dirname(__file__), "..", "..", "..", "..", "shared", "golden")
GOLDEN = os.path.abspath(os.environ.get("SERIALAKE_GOLDEN", GOLDEN))
MANIFEST_PATH = os.path.join(GOLDEN, "MANIFEST.json")
MANIFEST: dict[str, Any] = json.load(open(MANIFEST_PATH)) if os.path.exists(MANIFEST_PATH) else {}


def _json_dvs(table: str) -> list[tuple[str, DeletionVectorDescriptor]]:
    """Every (commit file, DV descriptor) of an add/remove in the table's JSON commits."""
    out = []
    for commit in sorted(glob.glob(os.path.join(table, "_delta_log", "*.json"))):
        with open(commit) as f:
            for line in f:
                if not line.strip():
                    continue
                action = json.loads(line)
                for kind in ("add", "remove"):
                    body = action.get(kind)
                    if body and body.get("deletionVector"):
                        dv = DeletionVectorDescriptor.from_obj(body["deletionVector"])
                        assert dv is not None
                        out.append((commit, dv))
    return out


DV_TABLES = sorted(name for name in MANIFEST if _json_dvs(os.path.join(GOLDEN, name)))
needs_golden = pytest.mark.skipif(not MANIFEST, reason="golden tables not found beside the repo")


# -- Z85 ----------------------------------------------------------------------------------


def test_z85_reference_vector() -> None:
    # The ZeroMQ RFC 32 test vector.
    raw = bytes.fromhex("864FD26FB559F75B")
    assert z85_encode(raw) == "HelloWorld"
    assert z85_decode("HelloWorld") == raw


@given(st.binary(max_size=200))
def test_z85_round_trip(data: bytes) -> None:
    text = z85_encode(data)
    assert len(text) == (len(data) + 3) // 4 * 5
    assert z85_decode(text, len(data)) == data


@given(st.uuids())
def test_uuid_z85_round_trip(value: uuid.UUID) -> None:
    text = uuid_to_z85(value)
    assert len(text) == 20
    assert z85_to_uuid(text) == value


def test_z85_rejects_bad_input() -> None:
    with pytest.raises(ValueError, match="multiple of 5"):
        z85_decode("abcd")
    with pytest.raises(ValueError, match="invalid Z85 character"):
        z85_decode("abc,e")
    with pytest.raises(ValueError, match="overflows"):
        z85_decode("#####")
    with pytest.raises(ValueError, match="cannot hold exactly"):
        z85_decode("HelloWorld", 3)  # 8 bytes cannot be 3 bytes plus padding


def test_u_path_rules() -> None:
    # PROTOCOL.md "JSON Example 1": prefix 'ab' + Z85 UUID.
    dv = DeletionVectorDescriptor("u", "ab^-aqEH.-t@S}K{vb[*k^", 40, 6, 4)
    assert dv_absolute_path("/data/mytable", dv) == (
        "/data/mytable/ab/deletion_vector_d2c639aa-8816-431a-aaf6-d3fe2512ff61.bin"
    )
    golden = DeletionVectorDescriptor("u", "vBn[lx{q8@P<9BNH/isA", 36, 2, 1)
    assert dv_absolute_path("file:///t/x", golden) == (
        "/t/x/deletion_vector_61d16c75-6994-46b7-a15b-8b538852e50e.bin"
    )
    absolute = DeletionVectorDescriptor("p", "file:/tmp/a%20b/deletion_vector_x.bin", 40, 6, 4)
    assert dv_absolute_path("/elsewhere", absolute) == "/tmp/a b/deletion_vector_x.bin"
    s3 = DeletionVectorDescriptor("p", "s3://mytable/deletion_vector_x.bin", 40, 6, 4)
    assert dv_absolute_path("/elsewhere", s3) == "s3://mytable/deletion_vector_x.bin"
    assert dv_absolute_path("/t", DeletionVectorDescriptor("i", "HelloWorld", 8, 1)) is None
    with pytest.raises(CorruptLogError, match="storageType 'r'"):
        dv_absolute_path("/t", DeletionVectorDescriptor("r", "x", 1, 1))
    with pytest.raises(CorruptLogError, match="not absolute"):
        dv_absolute_path("/t", DeletionVectorDescriptor("p", "rel/x.bin", 1, 1, 1))
    with pytest.raises(CorruptLogError, match="shorter than"):
        dv_absolute_path("/t", DeletionVectorDescriptor("u", "short", 1, 1, 1))


def test_dv_referenced_files() -> None:
    a = DeletionVectorDescriptor("u", "vBn[lx{q8@P<9BNH/isA", 36, 2, 1)
    b = replace(a, offset=43)  # a second DV in the same file
    c = DeletionVectorDescriptor("u", "ab^-aqEH.-t@S}K{vb[*k^", 40, 6, 1)
    inline = DeletionVectorDescriptor("i", "HelloWorld", 8, 1)
    got = dv_referenced_files("/t", [a, b, c, inline, None])
    assert got == {
        "/t/deletion_vector_61d16c75-6994-46b7-a15b-8b538852e50e.bin",
        "/t/ab/deletion_vector_d2c639aa-8816-431a-aaf6-d3fe2512ff61.bin",
    }


# -- RowIndexSet ----------------------------------------------------------------------------

row_indexes = st.one_of(
    st.integers(0, 2**16),
    st.integers(0, 2**32 + 2**17),
    st.integers(2**32 - 100, 2**32 + 100),
    st.integers(0, MAX_ROW_INDEX),
)


@settings(max_examples=200)
@given(st.sets(row_indexes, max_size=300))
def test_row_index_set_round_trip(values: set[int]) -> None:
    rows = RowIndexSet.from_iter(values)
    assert len(rows) == len(values)
    assert list(rows) == sorted(values)
    data = rows.serialize()
    assert struct.unpack_from("<i", data)[0] == PORTABLE_MAGIC
    back = RowIndexSet.deserialize(data)
    assert back == rows
    assert list(back.to_numpy()) == sorted(values)
    assert back.to_numpy().dtype == np.uint64
    # numpy input gives the same set
    assert RowIndexSet.from_iter(np.array(sorted(values), dtype=np.uint64)) == rows


@given(st.sets(row_indexes, max_size=50), st.sets(row_indexes, max_size=50))
def test_row_index_set_algebra(a: set[int], b: set[int]) -> None:
    ra, rb = RowIndexSet.from_iter(a), RowIndexSet.from_iter(b)
    assert set(ra.union(rb)) == a | b
    assert set(ra.intersection(rb)) == a & b
    assert set(ra.difference(rb)) == a - b
    assert ra.isdisjoint(rb) == a.isdisjoint(b)
    assert set(ra | rb) == a | b and set(ra & rb) == a & b and set(ra - rb) == a - b
    for v in list(a)[:5]:
        assert v in ra
    assert -1 not in ra and "x" not in ra
    assert RowIndexSet.from_iter(np.uint64(v) for v in a) == ra  # numpy scalars are integers too
    assert all(np.int64(v) in ra for v in list(a)[:5] if v < 2**63)


def test_row_index_set_bounds_and_ranges() -> None:
    with pytest.raises(DeltaIllegalArgumentException, match="outside"):
        RowIndexSet.from_iter([-1])
    with pytest.raises(DeltaIllegalArgumentException, match="outside"):
        RowIndexSet.from_iter([2**63])
    with pytest.raises(DeltaIllegalArgumentException, match="outside"):
        RowIndexSet.from_iter(np.array([-5, 3], dtype=np.int64))
    big = RowIndexSet.from_iter(range(0, 3_000_000, 2))
    assert len(big) == 1_500_000
    assert RowIndexSet.deserialize(big.serialize()) == big
    assert RowIndexSet.from_iter(np.arange(0, 3_000_000, 2)) == big
    assert RowIndexSet() == RowIndexSet.deserialize(RowIndexSet().serialize())
    assert len(RowIndexSet()) == 0 and not RowIndexSet()
    assert hash(big) == hash(RowIndexSet.from_iter(range(0, 3_000_000, 2)))


def test_dense_buckets_and_legacy_native_format() -> None:
    # delta-spark writes every bucket up to the largest key, empty ones included.
    portable = (
        struct.pack("<iQ", PORTABLE_MAGIC, 2)
        + struct.pack("<I", 0) + BitMap().serialize()
        + struct.pack("<I", 1) + BitMap([5]).serialize()
    )
    assert list(RowIndexSet.deserialize(portable)) == [2**32 + 5]
    # Legacy native layout: int32 count, then (int32 length, bitmap) per key 0, 1, ...
    b0, b1 = BitMap([1, 70000]).serialize(), BitMap([9]).serialize()
    native = struct.pack("<ii", NATIVE_MAGIC, 2) + struct.pack("<i", len(b0)) + b0 + struct.pack("<i", len(b1)) + b1
    assert list(RowIndexSet.deserialize(native)) == [1, 70000, 2**32 + 9]


def test_malformed_bitmaps_are_refused() -> None:
    good = RowIndexSet.from_iter([1, 2, 3]).serialize()
    with pytest.raises(ValueError, match="trailing bytes"):
        RowIndexSet.deserialize(good + b"\x00")
    with pytest.raises(ValueError, match="truncated"):
        RowIndexSet.deserialize(good[:-1])
    with pytest.raises(ValueError, match="magic"):
        RowIndexSet.deserialize(b"\x00\x00\x00\x00" + good[4:])
    with pytest.raises(ValueError, match="top bit"):
        RowIndexSet.deserialize(struct.pack("<iQI", PORTABLE_MAGIC, 1, 2**31) + BitMap([1]).serialize())
    with pytest.raises(ValueError, match="ascending"):
        one = BitMap([1]).serialize()
        RowIndexSet.deserialize(struct.pack("<iQ", PORTABLE_MAGIC, 2) + struct.pack("<I", 1) + one
                                + struct.pack("<I", 0) + one)


def test_protocol_inline_example_is_refused_like_delta_spark() -> None:
    # PROTOCOL.md's inline example holds the legacy layout written big-endian; delta-spark's
    # little-endian reader refuses it, and so do we, with a message saying why.
    dv = DeletionVectorDescriptor("i", "wi5b=000010000siXQKl0rr91000f55c8Xg0@@D72lkbi5=-{L", 40, 6)
    with pytest.raises(CorruptDeletionVectorError, match="big-endian") as e:
        read_deletion_vector("/t", dv)
    assert "iwi5b=" in str(e.value)


# -- DV files -------------------------------------------------------------------------------


@pytest.mark.parametrize("prefix", ["", "ab"])
def test_write_then_read_file_dv(tmp_path: Any, prefix: str) -> None:
    rows = RowIndexSet.from_iter([0, 3, 7, 2**32 + 1, 10**12])
    dv = write_deletion_vector(str(tmp_path), rows, prefix=prefix)
    assert dv.storage_type == "u" and dv.offset == 1 and dv.cardinality == 5
    assert dv.path_or_inline_dv.startswith(prefix) and len(dv.path_or_inline_dv) == len(prefix) + 20
    path = dv_absolute_path(str(tmp_path), dv)
    assert path is not None and os.path.dirname(path) == os.path.join(str(tmp_path), prefix).rstrip("/")
    raw = open(path, "rb").read()
    bitmap = rows.serialize()
    assert dv.size_in_bytes == len(bitmap)
    assert raw == b"\x01" + struct.pack(">i", len(bitmap)) + bitmap + struct.pack(">I", zlib.crc32(bitmap))
    assert read_deletion_vector(str(tmp_path), dv) == rows
    assert dv_referenced_files(str(tmp_path), [dv]) == {path}


def test_write_then_read_inline_dv(tmp_path: Any) -> None:
    rows = RowIndexSet.from_iter([1, 5, 9])
    dv = write_deletion_vector(str(tmp_path), rows, inline_max_bytes=1000)
    assert dv.storage_type == "i" and dv.offset is None
    assert dv.size_in_bytes == len(rows.serialize()) and dv.cardinality == 3
    assert os.listdir(tmp_path) == []  # no file for an inline DV
    assert read_deletion_vector(str(tmp_path), dv) == rows
    assert dv_absolute_path(str(tmp_path), dv) is None
    # Just over the limit: a file.
    assert write_deletion_vector(str(tmp_path), rows, inline_max_bytes=dv.size_in_bytes - 1).storage_type == "u"


def test_write_refuses_empty_and_bad_prefix(tmp_path: Any) -> None:
    with pytest.raises(DeltaIllegalArgumentException, match="empty"):
        write_deletion_vector(str(tmp_path), RowIndexSet())
    with pytest.raises(DeltaIllegalArgumentException, match="prefix"):
        write_deletion_vector(str(tmp_path), RowIndexSet.from_iter([1]), prefix="../x")


def test_crc_corruption_names_the_file(tmp_path: Any) -> None:
    dv = write_deletion_vector(str(tmp_path), RowIndexSet.from_iter([2, 4, 6]))
    path = dv_absolute_path(str(tmp_path), dv)
    assert path is not None
    data = bytearray(open(path, "rb").read())
    data[1 + 4 + dv.size_in_bytes - 1] ^= 0x01  # flip a bit in the bitmap's last byte
    open(path, "wb").write(bytes(data))
    with pytest.raises(CorruptDeletionVectorError, match="checksum mismatch") as e:
        read_deletion_vector(str(tmp_path), dv)
    assert path in str(e.value) and str(tmp_path) in str(e.value) and dv.unique_id in str(e.value)
    assert e.value.file == path and isinstance(e.value, CorruptLogError)


def test_descriptor_mismatches_are_detected(tmp_path: Any) -> None:
    dv = write_deletion_vector(str(tmp_path), RowIndexSet.from_iter([2, 4, 6]))
    path = dv_absolute_path(str(tmp_path), dv)
    with pytest.raises(CorruptDeletionVectorError, match="cardinality 4") as e:
        read_deletion_vector(str(tmp_path), replace(dv, cardinality=4))
    assert path in str(e.value)
    with pytest.raises(CorruptDeletionVectorError, match="descriptor says"):
        read_deletion_vector(str(tmp_path), replace(dv, size_in_bytes=dv.size_in_bytes - 2))
    with pytest.raises(CorruptDeletionVectorError, match="truncated"):
        read_deletion_vector(str(tmp_path), replace(dv, offset=5))
    with pytest.raises(CorruptDeletionVectorError, match="version byte"):
        read_deletion_vector(str(tmp_path), replace(dv, offset=0))
    missing = DeletionVectorDescriptor("u", uuid_to_z85(uuid.uuid4()), 10, 1, 1)
    with pytest.raises(CorruptDeletionVectorError, match="missing"):
        read_deletion_vector(str(tmp_path), missing)
    data = bytearray(open(path, "rb").read())
    data[0] = 2
    open(path, "wb").write(bytes(data))
    with pytest.raises(CorruptDeletionVectorError, match="format version 2"):
        read_deletion_vector(str(tmp_path), dv)


# -- golden tables ----------------------------------------------------------------------


@needs_golden
def test_golden_dv_tables_found() -> None:
    for name in ("delta-rs/table-with-dv-small", "delta-spark/dv-partitioned-with-checkpoint",
                 "delta-spark/dv-with-columnmapping", "delta-spark/log-replay-dv-key-cases",
                 "delta-rs/table_with_deletion_logs", "delta-rs/cdf-table-with-cdc-and-dvs"):
        assert name in DV_TABLES


@needs_golden
@pytest.mark.parametrize("name", DV_TABLES)
def test_golden_every_logged_dv_reads(name: str) -> None:
    """Every DV named by an add/remove in the JSON commits parses with its cardinality."""
    table = os.path.join(GOLDEN, name)
    for commit, dv in _json_dvs(table):
        path = dv_absolute_path(table, dv)
        if path is not None and not os.path.exists(path):
            continue  # vacuumed away with the file it belonged to
        rows = read_deletion_vector(table, dv)
        assert len(rows) == dv.cardinality, (commit, dv)


def _delta_rs_deleted_rows(table: str) -> dict[str, list[int]]:
    """delta-rs's deleted row indexes per data file (absolute local path)."""
    import pyarrow as pa
    from deltalake import DeltaTable

    out: dict[str, list[int]] = {}
    for row in pa.table(DeltaTable(table).deletion_vectors()).to_pylist():
        path = os.path.realpath(unquote(urlparse(row["filepath"]).path))
        out[path] = [i for i, keep in enumerate(row["selection_vector"]) if not keep]
    return out


@needs_golden
@pytest.mark.interop
@pytest.mark.parametrize("name", DV_TABLES)
def test_golden_live_dvs_match_delta_rs(name: str) -> None:
    table = os.path.join(GOLDEN, name)
    expected = MANIFEST[name]
    snap = DeltaLog.for_table(table).update()
    ours: dict[str, list[int]] = {}
    live_rows = 0
    for add in snap.all_files:
        n = add.num_records
        if add.deletion_vector is None:
            live_rows += n or 0
            continue
        rows = read_deletion_vector(table, add.deletion_vector)
        assert len(rows) == add.deletion_vector.cardinality
        assert n is not None, f"{add.path}: a file with a DV must carry stats.numRecords"
        assert rows.max() is not None and rows.max() < n
        live_rows += n - len(rows)
        ours[os.path.realpath(os.path.join(table, unquote(add.path)))] = list(rows)
    if "read_error" in expected or "open_error" in expected or "rows" not in expected:
        return
    assert live_rows == expected["rows"]
    assert _delta_rs_deleted_rows(table) == ours


# -- end to end: delta-rs reads what we write --------------------------------------------


def _delta_rs_table(path: str, n: int) -> None:
    import pyarrow as pa
    from deltalake import write_deltalake

    write_deltalake(path, pa.table({"id": pa.array(range(n), pa.int64()),
                                    "s": pa.array([f"r{i}" for i in range(n)])}))


def _commit_dv(path: str, deleted: RowIndexSet, **kwargs: Any) -> DeletionVectorDescriptor:
    """Enable DVs through the core, then replace the table's one file with file + DV."""
    log = DeltaLog.for_table(path)
    snap = log.update()
    txn = log.start_transaction()
    txn.update_metadata(snap.metadata.with_configuration(**{"delta.enableDeletionVectors": "true"}))
    txn.commit([], operation="SET TBLPROPERTIES")
    snap = log.update()
    assert "deletionVectors" in (snap.protocol.reader_features or ())
    (add,) = snap.all_files
    assert add.num_records is not None
    dv = write_deletion_vector(path, deleted, **kwargs)
    txn = log.start_transaction()
    txn.commit([add.remove(), replace(add, deletion_vector=dv)], operation="DELETE")
    return dv


def _delta_rs_ids(path: str) -> list[int]:
    import pyarrow as pa
    from deltalake import DeltaTable

    return sorted(pa.table(DeltaTable(path).scan()).column("id").to_pylist())


@pytest.mark.interop
@pytest.mark.parametrize(
    "n, deleted, kwargs",
    [
        (10, [0, 3, 4, 5, 9], {}),
        (10, [2, 7], {"prefix": "q7"}),
        (10, [1, 8], {"inline_max_bytes": 1024}),
        # run containers (a range), a bitmap container (>4096 scattered) and an array one
        (200_000, list(range(1000, 60000)) + list(range(70000, 150000, 3)) + [199_999], {}),
    ],
    ids=["file", "prefixed-file", "inline", "large-mixed-containers"],
)
def test_delta_rs_reads_our_dv(tmp_path: Any, n: int, deleted: list[int], kwargs: dict[str, Any]) -> None:
    path = str(tmp_path / "t")
    _delta_rs_table(path, n)
    rows = RowIndexSet.from_iter(deleted)
    dv = _commit_dv(path, rows, **kwargs)
    assert dv.storage_type == ("i" if kwargs.get("inline_max_bytes") else "u")
    expected = sorted(set(range(n)) - set(deleted))
    assert _delta_rs_ids(path) == expected
    # delta-rs sees the same deleted rows, and our own replay reads them back.
    (only,) = _delta_rs_deleted_rows(path).values()
    assert only == sorted(deleted)
    (add,) = DeltaLog.for_table(path).update().all_files
    assert add.deletion_vector == dv
    assert read_deletion_vector(path, dv) == rows


@needs_golden
@pytest.mark.interop
def test_delta_rs_reads_our_dv_in_copied_golden_table(tmp_path: Any) -> None:
    """A DV of ours on a copied golden table: delta-rs drops exactly those row positions."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from deltalake import DeltaTable

    path = str(tmp_path / "t")
    shutil.copytree(os.path.join(GOLDEN, "delta-rs", "table-without-dv-small"), path)
    (add,) = DeltaLog.for_table(path).update().all_files
    physical = pq.read_table(os.path.join(path, unquote(add.path))).column("value").to_pylist()
    deleted = [0, 4, 9]
    _commit_dv(path, RowIndexSet.from_iter(deleted))
    got = pa.table(DeltaTable(path).scan()).column("value").to_pylist()
    assert sorted(got) == sorted(v for i, v in enumerate(physical) if i not in deleted)
