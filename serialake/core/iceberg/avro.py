"""Avro object container files, written and read in pure Python (the Iceberg manifests' format).

Supported: the primitives (null, boolean, int, long, float, double, bytes, string), records,
enums, arrays, maps (string keys), fixed, unions, and named types referred to by name.
Logical types are left to the caller: a ``date`` is written as its ``int``, a decimal as its
``fixed`` bytes. Schemas are JSON-able values (dicts, lists, strings) and are written into the
file exactly as given, so attributes such as Iceberg's ``field-id`` are kept.

Values: records and maps are dicts (a record field absent from the dict takes the field's
``default``), arrays are lists, bytes and fixed are ``bytes``, enums are their symbol. A union
value takes the first branch whose kind fits it (None for ``null``).

A file is ``Obj\\x01``, a metadata map (``avro.schema``, ``avro.codec`` and the caller's keys),
a 16-byte sync marker, then blocks: a record count, a byte count, the (compressed) records and
the sync marker again. Codecs: ``null`` and ``deflate`` (raw deflate, RFC 1951).
"""

from __future__ import annotations

import json
import os
import struct
import zlib
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["AvroError", "AvroFile", "read_file", "write_file"]

MAGIC = b"Obj\x01"
SYNC_SIZE = 16
CODECS = ("null", "deflate")
_BLOCK_BYTES = 64 << 10  # records are flushed as a block once this many bytes are buffered
_INT_MIN, _INT_MAX = -(1 << 31), (1 << 31) - 1
_LONG_MIN, _LONG_MAX = -(1 << 63), (1 << 63) - 1
_PRIMITIVES = frozenset({"null", "boolean", "int", "long", "float", "double", "bytes", "string"})
_FLOAT = struct.Struct("<f")
_DOUBLE = struct.Struct("<d")

Writer = Callable[[bytearray, Any], None]
Reader = Callable[["_Decoder"], Any]


class AvroError(ValueError):
    """A schema, value or file that is not valid Avro (the message says what and where)."""


@dataclass(frozen=True)
class AvroFile:
    """A decoded container file: its schema (as parsed JSON), metadata and records."""

    schema: Any
    metadata: dict[str, bytes]
    records: list[Any]

    def meta(self, key: str) -> str | None:
        """A metadata value as text, or None."""
        value = self.metadata.get(key)
        return value.decode("utf-8") if value is not None else None


# -- encoding -------------------------------------------------------------------------------


def _put_long(buf: bytearray, n: int) -> None:
    """Zig-zag varint of a long (already range-checked)."""
    if 0 <= n < 64:  # one byte: most counts, ids and flags
        buf.append(n << 1)
        return
    n = (n << 1) ^ (n >> 63)
    while n > 0x7F:
        buf.append((n & 0x7F) | 0x80)
        n >>= 7
    buf.append(n)


def _put_bytes(buf: bytearray, data: bytes) -> None:
    _put_long(buf, len(data))
    buf += data


def write_file(
    schema: Any,
    records: Iterable[Any],
    *,
    metadata: Mapping[str, str | bytes] | None = None,
    codec: str = "deflate",
    sync: bytes | None = None,
) -> bytes:
    """The bytes of a container file holding ``records`` written with ``schema``.

    ``metadata`` adds file metadata (``avro.*`` keys are reserved). ``AvroError`` names the
    field of a value that does not fit the schema.
    """
    if codec not in CODECS:
        raise AvroError(f"unsupported Avro codec {codec!r} (supported: {', '.join(CODECS)})")
    sync = sync if sync is not None else os.urandom(SYNC_SIZE)
    if len(sync) != SYNC_SIZE:
        raise AvroError(f"the sync marker must be {SYNC_SIZE} bytes")
    write = _Compiler().writer(schema, "")
    meta: dict[str, bytes] = {
        "avro.schema": json.dumps(schema, separators=(",", ":")).encode(),
        "avro.codec": codec.encode(),
    }
    for key, value in (metadata or {}).items():
        if key.startswith("avro."):
            raise AvroError(f"metadata key {key!r} is reserved by Avro")
        meta[key] = value.encode("utf-8") if isinstance(value, str) else bytes(value)
    out = bytearray(MAGIC)
    _put_long(out, len(meta))
    for key, value in meta.items():
        _put_bytes(out, key.encode("utf-8"))
        _put_bytes(out, value)
    _put_long(out, 0)
    out += sync
    block = bytearray()
    count = 0

    def flush() -> None:
        data = bytes(block)
        if codec == "deflate":
            packer = zlib.compressobj(6, zlib.DEFLATED, -15)
            data = packer.compress(data) + packer.flush()
        _put_long(out, count)
        _put_bytes(out, data)
        out.extend(sync)

    for record in records:
        write(block, record)
        count += 1
        if len(block) >= _BLOCK_BYTES:
            flush()
            block.clear()
            count = 0
    if count:
        flush()
    return bytes(out)


# -- decoding -------------------------------------------------------------------------------


class _Decoder:
    """A cursor over bytes."""

    __slots__ = ("data", "pos")

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def read_long(self) -> int:
        data = self.data
        pos = self.pos
        b = data[pos]
        pos += 1
        n = b & 0x7F
        shift = 7
        while b & 0x80:
            b = data[pos]
            pos += 1
            n |= (b & 0x7F) << shift
            shift += 7
        self.pos = pos
        return (n >> 1) ^ -(n & 1)

    def read(self, size: int) -> bytes:
        if size < 0:
            raise AvroError(f"negative length {size} at byte {self.pos}")
        end = self.pos + size
        if end > len(self.data):
            raise AvroError(f"truncated data: {size} bytes wanted at byte {self.pos} of {len(self.data)}")
        out = self.data[self.pos : end]
        self.pos = end
        return out

    def read_bytes(self) -> bytes:
        return self.read(self.read_long())


def read_file(data: bytes) -> AvroFile:
    """Decode a container file (``AvroError`` when it is not one, or is damaged)."""
    data = bytes(data)
    if data[:4] != MAGIC:
        raise AvroError("not an Avro container file (no 'Obj\\x01' magic)")
    dec = _Decoder(data)
    dec.pos = 4
    try:
        meta = _read_map(dec, lambda d: d.read_bytes())
        sync = dec.read(SYNC_SIZE)
        try:
            schema = json.loads(meta["avro.schema"])
        except KeyError:
            raise AvroError("the file has no avro.schema") from None
        codec = meta.get("avro.codec", b"null").decode()
        if codec not in CODECS:
            raise AvroError(f"unsupported Avro codec {codec!r} (supported: {', '.join(CODECS)})")
        read = _Compiler().reader(schema, "")
        records: list[Any] = []
        while dec.pos < len(data):
            count = dec.read_long()
            block = dec.read_bytes()
            if codec == "deflate":
                try:
                    block = zlib.decompress(block, -15)
                except zlib.error as e:
                    raise AvroError(f"a deflate block does not decompress: {e}") from None
            inner = _Decoder(block)
            for _ in range(count):
                records.append(read(inner))
            if inner.pos != len(block):
                raise AvroError(f"a block holds {len(block) - inner.pos} bytes after its {count} records")
            if dec.read(SYNC_SIZE) != sync:
                raise AvroError(f"sync marker mismatch at byte {dec.pos - SYNC_SIZE}")
    except (IndexError, UnicodeDecodeError, struct.error, ValueError) as e:
        if isinstance(e, AvroError):
            raise
        raise AvroError(f"damaged Avro data: {e}") from None
    return AvroFile(schema, meta, records)


def _block_items(dec: _Decoder) -> Iterator[None]:
    """Once per item of an array or map: items come in blocks, each a count (negative: followed by
    the block's size in bytes), until a count of 0."""
    while True:
        count = dec.read_long()
        if count == 0:
            return
        if count < 0:
            count = -count
            dec.read_long()  # the block's size in bytes
        for _ in range(count):
            yield None


def _read_map(dec: _Decoder, read_value: Reader) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for _ in _block_items(dec):
        key = dec.read_bytes().decode("utf-8")
        out[key] = read_value(dec)
    return out


def _read_array(dec: _Decoder, read_item: Reader) -> list[Any]:
    return [read_item(dec) for _ in _block_items(dec)]


# -- schemas --------------------------------------------------------------------------------


def _fullname(schema: Mapping[str, Any], namespace: str) -> tuple[str, str]:
    """(full name, namespace for nested names) of a named schema."""
    name = schema.get("name")
    if not isinstance(name, str) or not name:
        raise AvroError(f"a {schema.get('type')} schema needs a name: {json.dumps(schema)[:200]}")
    if "." in name:
        return name, name.rpartition(".")[0]
    ns = schema.get("namespace", namespace) or ""
    return (f"{ns}.{name}" if ns else name), ns


class _Compiler:
    """Turns a schema into one writer or reader function (named types resolved, recursion allowed)."""

    def __init__(self) -> None:
        self.writers: dict[str, list[Writer]] = {}
        self.readers: dict[str, list[Reader]] = {}
        self.kinds: dict[str, str] = {}  # full name -> its type (record, enum, fixed)
        self.sizes: dict[str, int] = {}
        self.symbols: dict[str, list[str]] = {}

    # The matching kind of value for a union branch.
    def _fits(self, schema: Any, namespace: str) -> Callable[[Any], bool]:
        kind = schema
        if isinstance(schema, Mapping):
            kind = schema.get("type")
            if isinstance(kind, (Mapping, list)):
                return self._fits(kind, namespace)
        if isinstance(schema, list):
            raise AvroError("a union may not hold a union directly")
        if kind not in _PRIMITIVES and kind not in ("record", "enum", "fixed", "array", "map"):
            full = kind if "." in str(kind) or not namespace else f"{namespace}.{kind}"
            kind = self.kinds.get(full, self.kinds.get(str(kind)))
            if kind == "fixed":
                return lambda v: isinstance(v, (bytes, bytearray, memoryview))
        if kind == "null":
            return lambda v: v is None
        if kind == "boolean":
            return lambda v: isinstance(v, bool)
        if kind in ("int", "long"):
            return lambda v: isinstance(v, int) and not isinstance(v, bool)
        if kind in ("float", "double"):
            return lambda v: isinstance(v, (int, float)) and not isinstance(v, bool)
        if kind in ("bytes", "fixed"):
            return lambda v: isinstance(v, (bytes, bytearray, memoryview))
        if kind in ("string", "enum"):
            return lambda v: isinstance(v, str)
        if kind == "array":
            return lambda v: isinstance(v, (list, tuple))
        if kind in ("map", "record"):
            return lambda v: isinstance(v, Mapping)
        raise AvroError(f"unknown Avro type {kind!r}")

    def writer(self, schema: Any, namespace: str, where: str = "") -> Writer:
        if isinstance(schema, list):
            return self._union_writer(schema, namespace, where)
        if isinstance(schema, str):
            if schema in _PRIMITIVES:
                return _PRIMITIVE_WRITERS[schema](where)
            return self._named_writer(schema, namespace)
        if not isinstance(schema, Mapping):
            raise AvroError(f"invalid Avro schema {schema!r}{_at(where)}")
        kind = schema.get("type")
        if isinstance(kind, (list, Mapping)) or (isinstance(kind, str) and kind in _PRIMITIVES):
            return self.writer(kind, namespace, where)
        if kind == "record":
            return self._record_writer(schema, namespace, where)
        if kind == "array":
            item = self.writer(schema.get("items"), namespace, f"{where}[]")

            def write_array(buf: bytearray, value: Any) -> None:
                if not isinstance(value, (list, tuple)):
                    raise AvroError(f"array expected, got {type(value).__name__}{_at(where)}")
                if value:
                    _put_long(buf, len(value))
                    for v in value:
                        item(buf, v)
                buf.append(0)

            return write_array
        if kind == "map":
            val = self.writer(schema.get("values"), namespace, f"{where}{{}}")

            def write_map(buf: bytearray, value: Mapping[str, Any]) -> None:
                if not isinstance(value, Mapping):
                    raise AvroError(f"map expected, got {type(value).__name__}{_at(where)}")
                if value:
                    _put_long(buf, len(value))
                    for k, v in value.items():
                        _put_bytes(buf, k.encode("utf-8"))
                        val(buf, v)
                buf.append(0)

            return write_map
        if kind == "fixed":
            full, _ = self._register(schema, namespace)
            size = self.sizes[full]

            def write_fixed(buf: bytearray, value: bytes) -> None:
                if len(value) != size:
                    raise AvroError(f"fixed value of {len(value)} bytes, {size} expected{_at(where)}")
                buf += value

            self.writers[full] = [write_fixed]
            return write_fixed
        if kind == "enum":
            full, _ = self._register(schema, namespace)
            index = {s: i for i, s in enumerate(self.symbols[full])}

            def write_enum(buf: bytearray, value: str) -> None:
                try:
                    _put_long(buf, index[value])
                except KeyError:
                    raise AvroError(f"{value!r} is not a symbol of enum {full}{_at(where)}") from None

            self.writers[full] = [write_enum]
            return write_enum
        raise AvroError(f"unknown Avro type {kind!r}{_at(where)}")

    def _register(self, schema: Mapping[str, Any], namespace: str) -> tuple[str, str]:
        full, ns = _fullname(schema, namespace)
        if full in self.kinds:
            raise AvroError(f"Avro type {full} is defined twice")
        kind = schema["type"]
        self.kinds[full] = kind
        if kind == "fixed":
            size = schema.get("size")
            if not isinstance(size, int) or size < 0:
                raise AvroError(f"fixed {full} needs a non-negative size")
            self.sizes[full] = size
        elif kind == "enum":
            symbols = schema.get("symbols")
            if not isinstance(symbols, list) or not all(isinstance(s, str) for s in symbols):
                raise AvroError(f"enum {full} needs a list of symbols")
            self.symbols[full] = symbols
        return full, ns

    def _named_writer(self, name: str, namespace: str) -> Writer:
        slot = self.writers.get(f"{namespace}.{name}" if namespace and "." not in name else name)
        if slot is None:
            slot = self.writers.get(name)
        if slot is None:
            raise AvroError(f"unknown Avro type {name!r}")
        cell = slot
        return lambda buf, value: cell[0](buf, value)

    def _record_writer(self, schema: Mapping[str, Any], namespace: str, where: str) -> Writer:
        full, ns = self._register(schema, namespace)
        cell: list[Writer] = []
        self.writers[full] = cell  # before the fields: they may refer to the record itself
        fields = schema.get("fields")
        if not isinstance(fields, list):
            raise AvroError(f"record {full} needs a list of fields")
        plan: list[tuple[str, Writer, bool, Any]] = []
        for f in fields:
            name = f.get("name") if isinstance(f, Mapping) else None
            if not isinstance(name, str):
                raise AvroError(f"record {full}: every field needs a name")
            path = f"{where}.{name}" if where else name
            plan.append((name, self.writer(f.get("type"), ns, path), "default" in f, f.get("default")))

        def write_record(buf: bytearray, value: Mapping[str, Any]) -> None:
            get = value.get
            for name, write, has_default, default in plan:
                v = get(name, _MISSING)
                if v is _MISSING:
                    if not has_default:
                        raise AvroError(f"record {full} has no value for field {name!r}{_at(where)}")
                    v = default
                write(buf, v)

        cell.append(write_record)
        return write_record

    def _union_writer(self, branches: list[Any], namespace: str, where: str) -> Writer:
        if not branches:
            raise AvroError(f"empty union{_at(where)}")
        if len(branches) == 2 and branches[0] == "null":
            write_value = self.writer(branches[1], namespace, where)

            def write_optional(buf: bytearray, value: Any) -> None:
                if value is None:
                    buf.append(0)
                else:
                    buf.append(2)  # zig-zag 1
                    write_value(buf, value)

            return write_optional
        options = [(i, self._fits(b, namespace), self.writer(b, namespace, where)) for i, b in enumerate(branches)]

        def write_union(buf: bytearray, value: Any) -> None:
            for i, fits, write in options:
                if fits(value):
                    _put_long(buf, i)
                    write(buf, value)
                    return
            raise AvroError(f"{type(value).__name__} value fits no branch of union {branches}{_at(where)}")

        return write_union

    def reader(self, schema: Any, namespace: str) -> Reader:
        if isinstance(schema, list):
            branches = [self.reader(b, namespace) for b in schema]

            def read_union(dec: _Decoder) -> Any:
                index = dec.read_long()
                if not 0 <= index < len(branches):
                    raise AvroError(f"union branch {index} out of range at byte {dec.pos}")
                return branches[index](dec)

            return read_union
        if isinstance(schema, str):
            if schema in _PRIMITIVES:
                return _PRIMITIVE_READERS[schema]
            full = f"{namespace}.{schema}" if namespace and "." not in schema else schema
            cell = self.readers.get(full) or self.readers.get(schema)
            if cell is None:
                raise AvroError(f"unknown Avro type {schema!r}")
            slot = cell
            return lambda dec: slot[0](dec)
        if not isinstance(schema, Mapping):
            raise AvroError(f"invalid Avro schema {schema!r}")
        kind = schema.get("type")
        if isinstance(kind, (list, Mapping)) or (isinstance(kind, str) and kind in _PRIMITIVES):
            return self.reader(kind, namespace)
        if kind == "record":
            full, ns = self._register(schema, namespace)
            cell2: list[Reader] = []
            self.readers[full] = cell2
            fields = [(f["name"], self.reader(f["type"], ns)) for f in schema.get("fields", [])]

            def read_record(dec: _Decoder) -> dict[str, Any]:
                return {name: read(dec) for name, read in fields}

            if len(fields) == 2:  # Iceberg's id-keyed map entries: many, and small
                (n0, r0), (n1, r1) = fields

                def read_record(dec: _Decoder) -> dict[str, Any]:
                    return {n0: r0(dec), n1: r1(dec)}

            cell2.append(read_record)
            return read_record
        if kind == "array":
            item = self.reader(schema.get("items"), namespace)
            return lambda dec: _read_array(dec, item)
        if kind == "map":
            val = self.reader(schema.get("values"), namespace)
            return lambda dec: _read_map(dec, val)
        if kind == "fixed":
            full, _ = self._register(schema, namespace)
            size = self.sizes[full]
            fixed_cell: list[Reader] = [lambda dec: dec.read(size)]
            self.readers[full] = fixed_cell
            return fixed_cell[0]
        if kind == "enum":
            full, _ = self._register(schema, namespace)
            symbols = self.symbols[full]

            def read_enum(dec: _Decoder) -> str:
                i = dec.read_long()
                if not 0 <= i < len(symbols):
                    raise AvroError(f"enum {full}: index {i} out of range")
                return symbols[i]

            self.readers[full] = [read_enum]
            return read_enum
        raise AvroError(f"unknown Avro type {kind!r}")


_MISSING = object()


def _at(where: str) -> str:
    return f" (field {where})" if where else ""


def _write_null(where: str) -> Writer:
    def write(buf: bytearray, value: Any) -> None:
        if value is not None:
            raise AvroError(f"null expected, got {type(value).__name__}{_at(where)}")

    return write


def _write_boolean(where: str) -> Writer:
    def write(buf: bytearray, value: Any) -> None:
        if not isinstance(value, bool):
            raise AvroError(f"boolean expected, got {type(value).__name__}{_at(where)}")
        buf.append(1 if value else 0)

    return write


def _integer_writer(low: int, high: int, name: str) -> Callable[[str], Writer]:
    def make(where: str) -> Writer:
        def write(buf: bytearray, value: Any) -> None:
            if type(value) is not int and (not isinstance(value, int) or isinstance(value, bool)):
                raise AvroError(f"{name} expected, got {type(value).__name__}{_at(where)}")
            if 0 <= value < 64:
                buf.append(value << 1)
            elif low <= value <= high:
                _put_long(buf, value)
            else:
                raise AvroError(f"{value} is out of the range of an Avro {name}{_at(where)}")

        return write

    return make


def _float_writer(packer: struct.Struct, name: str) -> Callable[[str], Writer]:
    def make(where: str) -> Writer:
        def write(buf: bytearray, value: Any) -> None:
            if not isinstance(value, (int, float)) or isinstance(value, bool):
                raise AvroError(f"{name} expected, got {type(value).__name__}{_at(where)}")
            buf += packer.pack(value)

        return write

    return make


def _write_bytes(where: str) -> Writer:
    def write(buf: bytearray, value: Any) -> None:
        if not isinstance(value, (bytes, bytearray, memoryview)):
            raise AvroError(f"bytes expected, got {type(value).__name__}{_at(where)}")
        _put_bytes(buf, bytes(value))

    return write


def _write_string(where: str) -> Writer:
    def write(buf: bytearray, value: Any) -> None:
        if not isinstance(value, str):
            raise AvroError(f"string expected, got {type(value).__name__}{_at(where)}")
        _put_bytes(buf, value.encode("utf-8"))

    return write


_PRIMITIVE_WRITERS: dict[str, Callable[[str], Writer]] = {
    "null": _write_null,
    "boolean": _write_boolean,
    "int": _integer_writer(_INT_MIN, _INT_MAX, "int"),
    "long": _integer_writer(_LONG_MIN, _LONG_MAX, "long"),
    "float": _float_writer(_FLOAT, "float"),
    "double": _float_writer(_DOUBLE, "double"),
    "bytes": _write_bytes,
    "string": _write_string,
}


def _read_boolean(dec: _Decoder) -> bool:
    b = dec.data[dec.pos]
    dec.pos += 1
    if b > 1:
        raise AvroError(f"invalid boolean byte {b} at byte {dec.pos - 1}")
    return b == 1


def _read_float(dec: _Decoder) -> float:
    value: float = _FLOAT.unpack(dec.read(4))[0]
    return value


def _read_double(dec: _Decoder) -> float:
    value: float = _DOUBLE.unpack(dec.read(8))[0]
    return value


_PRIMITIVE_READERS: dict[str, Reader] = {
    "null": lambda dec: None,
    "boolean": _read_boolean,
    "int": _Decoder.read_long,
    "long": _Decoder.read_long,
    "float": _read_float,
    "double": _read_double,
    "bytes": _Decoder.read_bytes,
    "string": lambda dec: dec.read_bytes().decode("utf-8"),
}
