"""The Avro container files of serialake.core.iceberg.avro: round trips, the wire format, and pyiceberg's reader."""

from __future__ import annotations

import io
from typing import Any

import pytest

from serialake.core.iceberg import avro

ALL_TYPES: dict[str, Any] = {
    "type": "record",
    "name": "everything",
    "namespace": "t",
    "fields": [
        {"name": "n", "type": "null", "field-id": 1},
        {"name": "b", "type": "boolean", "field-id": 2},
        {"name": "i", "type": "int", "field-id": 3},
        {"name": "l", "type": "long", "field-id": 4},
        {"name": "f", "type": "float", "field-id": 5},
        {"name": "d", "type": "double", "field-id": 6},
        {"name": "by", "type": "bytes", "field-id": 7},
        {"name": "s", "type": "string", "field-id": 8},
        {"name": "fx", "type": {"type": "fixed", "name": "f4", "size": 4}, "field-id": 9},
        {"name": "e", "type": {"type": "enum", "name": "color", "symbols": ["RED", "GREEN"]}, "field-id": 10},
        {"name": "arr", "type": {"type": "array", "items": "long", "element-id": 12}, "field-id": 11},
        {"name": "m", "type": {"type": "map", "values": ["null", "string"], "key-id": 14, "value-id": 15},
         "field-id": 13},
        {"name": "opt", "type": ["null", "long"], "default": None, "field-id": 16},
        {"name": "u", "type": ["null", "string", "long", "f4"], "field-id": 17},
        {"name": "inner", "type": {"type": "record", "name": "inner", "fields": [
            {"name": "x", "type": "int", "field-id": 19}]}, "field-id": 18},
        {"name": "again", "type": "inner", "field-id": 20},
        {"name": "fx2", "type": ["null", "t.f4"], "field-id": 21},
    ],
}  # fmt: skip


def _record(i: int) -> dict[str, Any]:
    return {
        "n": None,
        "b": i % 2 == 0,
        "i": -(2**31) if i == 0 else 2**31 - 1 if i == 1 else i,
        "l": -(2**63) if i == 0 else 2**63 - 1 if i == 1 else -i * 1_000_000_007,
        "f": 1.5,
        "d": -2.25e300,
        "by": bytes(range(i % 7)),
        "s": "héllo \U0001f600" * (i % 3),
        "fx": b"\x00\xff\x10" + bytes([i % 256]),
        "e": "GREEN" if i % 3 else "RED",
        "arr": list(range(i % 5)),
        "m": {f"k{j}": (None if j == 1 else "v" * j) for j in range(i % 4)},
        # "opt" left out: its default (null) applies
        "u": [None, "text", 42, b"abcd"][i % 4],
        "inner": {"x": i},
        "again": {"x": -i},
        "fx2": None if i % 2 else b"wxyz",
    }


@pytest.mark.parametrize("codec", ["null", "deflate"])
def test_round_trip_of_every_type(codec: str) -> None:
    records = [_record(i) for i in range(3000)]  # several blocks
    data = avro.write_file(ALL_TYPES, records, metadata={"k": "v", "raw": b"\x00\x01"}, codec=codec)
    assert data[:4] == b"Obj\x01"
    back = avro.read_file(data)
    assert back.schema == ALL_TYPES  # written as given: field-id attributes kept
    assert back.meta("k") == "v" and back.metadata["raw"] == b"\x00\x01"
    assert back.meta("avro.codec") == codec
    expected = [{**r, "opt": None} for r in records]
    assert back.records == expected


def test_zigzag_varint_bytes() -> None:
    schema = {"type": "record", "name": "r", "fields": [{"name": "v", "type": "long"}]}
    cases = {
        0: b"\x00", -1: b"\x01", 1: b"\x02", -64: b"\x7f", 64: b"\x80\x01",
        2**63 - 1: b"\xfe" + b"\xff" * 8 + b"\x01", -(2**63): b"\xff" * 9 + b"\x01",
    }  # fmt: skip
    for value, encoded in cases.items():
        data = avro.write_file(schema, [{"v": value}], codec="null", sync=b"S" * 16)
        # header ... sync, then: count 1 (0x02), byte size, the value, the sync again
        body = data[data.index(b"S" * 16) + 16 :]
        assert body == b"\x02" + bytes([len(encoded) * 2]) + encoded + b"S" * 16, value
        assert avro.read_file(data).records == [{"v": value}]


def test_values_that_do_not_fit_are_refused() -> None:
    schema = {"type": "record", "name": "r", "fields": [{"name": "i", "type": "int"}, {"name": "s", "type": "string"}]}
    with pytest.raises(avro.AvroError, match="out of the range"):
        avro.write_file(schema, [{"i": 2**31, "s": ""}])
    with pytest.raises(avro.AvroError, match="no value for field 's'"):
        avro.write_file(schema, [{"i": 1}])
    with pytest.raises(avro.AvroError, match=r"string expected.*field s"):
        avro.write_file(schema, [{"i": 1, "s": 5}])
    with pytest.raises(avro.AvroError, match="unsupported Avro codec"):
        avro.write_file(schema, [], codec="snappy")


def test_damaged_files_are_refused() -> None:
    schema = {"type": "record", "name": "r", "fields": [{"name": "s", "type": "string"}]}
    data = avro.write_file(schema, [{"s": "x" * 100}] * 10, codec="null")
    with pytest.raises(avro.AvroError, match="sync marker"):
        avro.read_file(data[:-1] + bytes([data[-1] ^ 1]))
    with pytest.raises(avro.AvroError):
        avro.read_file(data[:-30])
    with pytest.raises(avro.AvroError, match="magic"):
        avro.read_file(b"PAR1" + data[4:])


def test_pyiceberg_reads_our_files_and_we_read_pyiceberg_files() -> None:
    """Interop both ways with pyiceberg's Avro implementation (its compiled decoder, its writer)."""
    from pyiceberg.avro.file import AvroFile, AvroOutputFile
    from pyiceberg.io.pyarrow import PyArrowFileIO
    from pyiceberg.manifest import MANIFEST_LIST_FILE_SCHEMAS, ManifestFile, PartitionFieldSummary

    from serialake.core.iceberg.manifests import MANIFEST_FILE_SCHEMA

    record = {
        "manifest_path": "/t/metadata/m0.avro", "manifest_length": 1234, "partition_spec_id": 0, "content": 0,
        "sequence_number": 3, "min_sequence_number": 1, "added_snapshot_id": 2**62 + 5, "added_files_count": 7,
        "existing_files_count": 1, "deleted_files_count": 0, "added_rows_count": 700, "existing_rows_count": 3,
        "deleted_rows_count": 0, "key_metadata": None,
        "partitions": [{"contains_null": True, "contains_nan": False, "lower_bound": b"\x01\x00\x00\x00",
                        "upper_bound": None}],
    }  # fmt: skip
    data = avro.write_file(MANIFEST_FILE_SCHEMA, [record])

    class _Input:
        location = "mem"

        def __len__(self) -> int:
            return len(data)

        def exists(self) -> bool:
            return True

        def open(self, seekable: bool = True) -> Any:
            return io.BytesIO(data)

    with AvroFile[ManifestFile](
        _Input(),  # type: ignore[arg-type]
        MANIFEST_LIST_FILE_SCHEMAS[2],
        read_types={-1: ManifestFile, 508: PartitionFieldSummary},
    ) as reader:
        got = list(reader)
    assert len(got) == 1
    m = got[0]
    assert (m.manifest_path, m.added_snapshot_id, m.added_rows_count, m.sequence_number) == (
        "/t/metadata/m0.avro", 2**62 + 5, 700, 3)
    assert m.partitions[0].contains_null is True and m.partitions[0].lower_bound == b"\x01\x00\x00\x00"

    # pyiceberg writes; we read.
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        path = f"{d}/written.avro"
        out = PyArrowFileIO().new_output(path)
        schema = MANIFEST_LIST_FILE_SCHEMAS[2]
        with AvroOutputFile[ManifestFile](out, schema, "manifest_file", metadata={"x": "y"}) as writer:
            writer.write_block([m])
        with open(path, "rb") as f:
            back = avro.read_file(f.read())
    assert back.meta("x") == "y"
    assert back.records[0]["manifest_path"] == "/t/metadata/m0.avro"
    assert back.records[0]["added_snapshot_id"] == 2**62 + 5
    assert back.records[0]["partitions"][0]["lower_bound"] == b"\x01\x00\x00\x00"
