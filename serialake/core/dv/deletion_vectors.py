"""Deletion vectors: Z85, the RoaringBitmapArray format, DV files and inline DVs.

A deletion vector (DV) is the set of row indexes (0-based positions in one Parquet
file) that are logically deleted. It is stored as a ``RoaringBitmapArray`` (a magic
number followed by a portable 64-bit Roaring bitmap, little-endian) either inline in the
log (Z85 text, ``storageType='i'``) or in a ``deletion_vector_<uuid>.bin`` file
(``'u'``: relative to the table, ``'p'``: absolute path) framed as
``version byte | int32 dataSize | bitmap | int32 CRC-32`` (big-endian), the descriptor's
``offset`` pointing at ``dataSize``. See PROTOCOL.md "Deletion Vectors" and the appendix
"Deletion Vector Format".
"""

from __future__ import annotations

import array
import operator
import os
import re
import struct
import uuid
import zlib
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlparse

from pyroaring import BitMap, BitMap64, FrozenBitMap64

from serialake.core.model.actions import DeletionVectorDescriptor, FileAction
from serialake.exceptions import CorruptLogError, DeltaIllegalArgumentException
from serialake.storage import is_local_path, normalize_table_path
from serialake.storage.datafiles import Access, is_remote
from serialake.storage.local import fsync_dir

if TYPE_CHECKING:
    import numpy as np

__all__ = [
    "CorruptDeletionVectorError",
    "DV_FILE_FORMAT_VERSION",
    "MAX_ROW_INDEX",
    "NATIVE_MAGIC",
    "PORTABLE_MAGIC",
    "RowIndexSet",
    "dv_absolute_path",
    "dv_file_name",
    "dv_referenced_files",
    "read_deletion_vector",
    "uuid_to_z85",
    "write_deletion_vector",
    "z85_decode",
    "z85_encode",
    "z85_to_uuid",
]

PORTABLE_MAGIC = 1681511377
"""Magic of Delta's RoaringBitmapArray portable format (the only one written)."""
NATIVE_MAGIC = 1681511376
"""Magic of the legacy native format: read, never written."""
DV_FILE_FORMAT_VERSION = 1
MAX_ROW_INDEX = (1 << 63) - 1
"""Largest storable row index: bucket keys must have their top bit clear."""

_U_UUID_LEN = 20


class CorruptDeletionVectorError(CorruptLogError):
    """A deletion vector cannot be read, or its content disagrees with its descriptor."""

    def __init__(
        self,
        reason: str,
        *,
        table: str | None = None,
        file: str | None = None,
        dv: DeletionVectorDescriptor | None = None,
    ) -> None:
        self.reason = reason
        self.table = table
        self.file = file
        self.dv = dv
        parts = [reason]
        if table is not None:
            parts.append(f"table {table}")
        if file is not None:
            parts.append(f"file {file}")
        if dv is not None:
            parts.append(
                f"DV {dv.unique_id} (sizeInBytes={dv.size_in_bytes}, cardinality={dv.cardinality})"
            )
        super().__init__("; ".join(parts))


# -- Z85 ------------------------------------------------------------------------------

_Z85_CHARS = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#"
_Z85_INDEX = {c: i for i, c in enumerate(_Z85_CHARS)}
_POW85 = (85**4, 85**3, 85**2, 85, 1)


def z85_encode(data: bytes) -> str:
    """Z85 text of ``data``, zero-padded to a multiple of 4 bytes as Delta does.

    The padding is not recorded in the text: for inline DVs the true length is the
    descriptor's ``sizeInBytes``, passed back as ``size`` to :func:`z85_decode`.
    """
    pad = (-len(data)) % 4
    if pad:
        data = bytes(data) + b"\x00" * pad
    out: list[str] = []
    chars = _Z85_CHARS
    for (value,) in struct.iter_unpack(">I", data):
        out.append(
            chars[value // 52200625]
            + chars[value // 614125 % 85]
            + chars[value // 7225 % 85]
            + chars[value // 85 % 85]
            + chars[value % 85]
        )
    return "".join(out)


def z85_decode(text: str, size: int | None = None) -> bytes:
    """Bytes of Z85 ``text``; with ``size``, the first ``size`` bytes (padding dropped)."""
    if len(text) % 5:
        raise ValueError(f"Z85 text length {len(text)} is not a multiple of 5")
    index = _Z85_INDEX
    words: list[int] = []
    for i in range(0, len(text), 5):
        value = 0
        for pos, c in enumerate(text[i : i + 5]):
            digit = index.get(c)
            if digit is None:
                raise ValueError(f"invalid Z85 character {c!r} at position {i + pos}")
            value += digit * _POW85[pos]
        if value > 0xFFFFFFFF:
            raise ValueError(f"Z85 group {text[i:i + 5]!r} at position {i} overflows 32 bits")
        words.append(value)
    raw = struct.pack(f">{len(words)}I", *words)
    if size is None:
        return raw
    if size < 0 or size > len(raw) or len(raw) - size >= 4:
        raise ValueError(f"Z85 text of {len(raw)} bytes cannot hold exactly {size} bytes")
    return raw[:size]


def uuid_to_z85(value: uuid.UUID) -> str:
    """The 20-character Z85 form of a UUID (its 16 bytes, big-endian), as in 'u' DVs."""
    return z85_encode(value.bytes)


def z85_to_uuid(text: str) -> uuid.UUID:
    """The UUID encoded by 20 Z85 characters."""
    if len(text) != _U_UUID_LEN:
        raise ValueError(f"a Z85-encoded UUID has 20 characters, got {len(text)}: {text!r}")
    return uuid.UUID(bytes=z85_decode(text, 16))


# -- 32-bit Roaring portable format: length of one serialized bitmap --------------------

_SERIAL_COOKIE_NO_RUN = 12346
_SERIAL_COOKIE = 12347
_NO_OFFSET_THRESHOLD = 4
_MAX_ARRAY_CARD = 4096


def _roaring32_size(buf: memoryview, start: int) -> int:
    """Byte length of the standard 32-bit Roaring serialization at ``buf[start:]``.

    pyroaring's ``deserialize`` silently ignores trailing bytes, so bucket boundaries
    (and trailing garbage) must be found from the format's own header.
    """
    end = len(buf)

    def need(pos: int, n: int) -> None:
        if pos + n > end:
            raise ValueError(f"Roaring bitmap truncated at byte {pos} (needs {n} more, has {end - pos})")

    need(start, 4)
    (cookie,) = struct.unpack_from("<I", buf, start)
    pos = start + 4
    run_flags: bytes | None = None
    if cookie == _SERIAL_COOKIE_NO_RUN:
        need(pos, 4)
        (n,) = struct.unpack_from("<I", buf, pos)
        pos += 4
        has_offsets = True
    elif cookie & 0xFFFF == _SERIAL_COOKIE:
        n = (cookie >> 16) + 1
        nbytes = (n + 7) // 8
        need(pos, nbytes)
        run_flags = bytes(buf[pos : pos + nbytes])
        pos += nbytes
        has_offsets = n >= _NO_OFFSET_THRESHOLD
    else:
        raise ValueError(f"unknown Roaring cookie {cookie:#x} at byte {start}")
    if n > 65536:
        raise ValueError(f"Roaring bitmap at byte {start} claims {n} containers (max 65536)")
    need(pos, 4 * n)
    header = struct.unpack_from(f"<{2 * n}H", buf, pos)
    pos += 4 * n
    if has_offsets:
        need(pos, 4 * n)
        pos += 4 * n
    for i in range(n):
        card = header[2 * i + 1] + 1
        if run_flags is not None and run_flags[i // 8] & (1 << (i % 8)):
            need(pos, 2)
            (runs,) = struct.unpack_from("<H", buf, pos)
            size = 2 + 4 * runs
        elif card <= _MAX_ARRAY_CARD:
            size = 2 * card
        else:
            size = 8192
        need(pos, size)
        pos += size
    return pos - start


# -- RowIndexSet ------------------------------------------------------------------------


def _check_index(value: int) -> None:
    if value < 0 or value > MAX_ROW_INDEX:
        raise DeltaIllegalArgumentException(
            f"row index {value} is outside the range a deletion vector can hold [0, 2^63)"
        )


class RowIndexSet:
    """An immutable set of (deleted) 64-bit row indexes, backed by a Roaring bitmap.

    Built on pyroaring's ``FrozenBitMap64``; equality, hashing and the set operations
    work as for ``frozenset``. ``serialize``/``deserialize`` use Delta's
    RoaringBitmapArray format (magic + portable 64-bit Roaring).
    """

    __slots__ = ("_bm",)

    def __init__(self, bitmap: FrozenBitMap64 | BitMap64 | None = None) -> None:
        if bitmap is None:
            bitmap = FrozenBitMap64()
        elif not isinstance(bitmap, FrozenBitMap64):
            bitmap = FrozenBitMap64(bitmap)
        self._bm: FrozenBitMap64 = bitmap

    # -- construction ------------------------------------------------------------------
    @classmethod
    def from_iter(cls, values: Iterable[int] | Any) -> RowIndexSet:
        """A set of the given row indexes (any iterable of ints, a range or a numpy array)."""
        if isinstance(values, RowIndexSet):
            return values
        if isinstance(values, range):
            if len(values):
                _check_index(min(values))
                _check_index(max(values))
            return cls(FrozenBitMap64(values))
        if type(values).__module__ == "numpy":
            return cls._from_numpy(values)
        try:
            items = [operator.index(v) for v in values]
        except TypeError as e:
            raise DeltaIllegalArgumentException(f"row indexes must be integers ({e})") from None
        if items:
            _check_index(min(items))
            _check_index(max(items))
        return cls(FrozenBitMap64(items))

    @classmethod
    def _from_numpy(cls, values: Any) -> RowIndexSet:
        import numpy as np

        arr = np.asarray(values).ravel()
        if arr.size == 0:
            return cls()
        if arr.dtype.kind not in "iu":
            raise DeltaIllegalArgumentException(f"row indexes must be integers, got dtype {arr.dtype}")
        if arr.dtype.kind == "i" and int(arr.min()) < 0:
            _check_index(int(arr.min()))
        arr = arr.astype(np.uint64, copy=False)
        _check_index(int(arr.max()))
        # pyroaring ingests array('I') buffers an order of magnitude faster than numpy or
        # Python ints, so split into 32-bit buckets and assemble the portable form.
        highs = arr >> np.uint64(32)
        if int(highs.max()) == 0:
            return cls(FrozenBitMap64(_bucket_bitmap(arr)))
        order = np.argsort(highs, kind="stable")
        arr, highs = arr[order], highs[order]
        keys, starts = np.unique(highs, return_index=True)
        bounds = list(starts[1:]) + [arr.size]
        parts = [struct.pack("<Q", len(keys))]
        for key, lo, hi in zip(keys.tolist(), starts.tolist(), bounds):
            parts.append(struct.pack("<I", key))
            parts.append(_bucket_bitmap(arr[lo:hi]).serialize())
        return cls(FrozenBitMap64.deserialize(b"".join(parts)))

    @classmethod
    def deserialize(cls, data: bytes | bytearray | memoryview) -> RowIndexSet:
        """Parse a RoaringBitmapArray (portable, or legacy native) exactly; ValueError if malformed."""
        buf = memoryview(data).cast("B")
        if len(buf) < 4:
            raise ValueError(f"RoaringBitmapArray of {len(buf)} bytes is shorter than its magic number")
        (magic,) = struct.unpack_from("<i", buf, 0)
        buckets: list[tuple[int, memoryview]] = []
        if magic == PORTABLE_MAGIC:
            if len(buf) < 12:
                raise ValueError("RoaringBitmapArray truncated in its bucket count")
            (count,) = struct.unpack_from("<Q", buf, 4)
            pos = 12
            last = -1
            for i in range(count):
                if pos + 4 > len(buf):
                    raise ValueError(f"RoaringBitmapArray truncated at bucket {i} of {count}")
                (key,) = struct.unpack_from("<I", buf, pos)
                if key & 0x80000000:
                    raise ValueError(f"RoaringBitmapArray bucket key {key} has its top bit set")
                if key <= last:
                    raise ValueError(f"RoaringBitmapArray bucket keys not ascending ({last} then {key})")
                last = key
                size = _roaring32_size(buf, pos + 4)
                buckets.append((key, buf[pos + 4 : pos + 4 + size]))
                pos += 4 + size
        elif magic == NATIVE_MAGIC:
            # Legacy layout: int32 bitmap count, then per bitmap (its key is its index)
            # an int32 byte length and a standard 32-bit Roaring serialization.
            if len(buf) < 8:
                raise ValueError("native RoaringBitmapArray truncated in its bitmap count")
            (count,) = struct.unpack_from("<i", buf, 4)
            if count < 0:
                raise ValueError(f"native RoaringBitmapArray has a negative bitmap count {count}")
            pos = 8
            for key in range(count):
                if pos + 4 > len(buf):
                    raise ValueError(f"native RoaringBitmapArray truncated at bitmap {key} of {count}")
                (length,) = struct.unpack_from("<i", buf, pos)
                size = _roaring32_size(buf, pos + 4)
                if length != size:
                    raise ValueError(
                        f"native RoaringBitmapArray bitmap {key} declares {length} bytes, holds {size}"
                    )
                buckets.append((key, buf[pos + 4 : pos + 4 + size]))
                pos += 4 + size
        else:
            (big_endian,) = struct.unpack_from(">i", buf, 0)
            hint = (
                "; it is written big-endian, like PROTOCOL.md's inline example, "
                "which delta-spark refuses too"
                if big_endian in (PORTABLE_MAGIC, NATIVE_MAGIC)
                else ""
            )
            raise ValueError(
                f"unknown RoaringBitmapArray magic number {magic} "
                f"(expected {PORTABLE_MAGIC} portable or {NATIVE_MAGIC} native){hint}"
            )
        if pos != len(buf):
            raise ValueError(f"RoaringBitmapArray has {len(buf) - pos} trailing bytes after {pos}")
        parts: list[bytes] = []
        nonempty = 0
        for key, chunk in buckets:
            bm = BitMap.deserialize(bytes(chunk))  # validates the container content
            if bm:
                nonempty += 1
                parts.append(struct.pack("<I", key))
                parts.append(bytes(chunk))
        return cls(FrozenBitMap64.deserialize(struct.pack("<Q", nonempty) + b"".join(parts)))

    # -- encoding ----------------------------------------------------------------------
    def serialize(self) -> bytes:
        """Delta's RoaringBitmapArray portable format (run-length optimised)."""
        bm = BitMap64(self._bm)
        bm.run_optimize()
        return struct.pack("<i", PORTABLE_MAGIC) + bm.serialize()

    def to_numpy(self) -> np.ndarray:
        """The row indexes, sorted, as a ``uint64`` numpy array."""
        import numpy as np

        return np.frombuffer(self._bm.to_array(), dtype=np.uint64)

    @property
    def bitmap(self) -> FrozenBitMap64:
        """The underlying pyroaring bitmap (immutable)."""
        return self._bm

    # -- set protocol --------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self._bm)

    def __bool__(self) -> bool:
        return bool(self._bm)

    def __contains__(self, value: object) -> bool:
        try:
            index = operator.index(value)  # type: ignore[arg-type]
        except TypeError:
            return False
        return 0 <= index <= MAX_ROW_INDEX and index in self._bm

    def __iter__(self) -> Iterator[int]:
        return iter(self._bm)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, RowIndexSet):
            return self._bm == other._bm
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self._bm)

    def __repr__(self) -> str:
        n = len(self._bm)
        if n <= 10:
            return f"RowIndexSet({list(self._bm)})"
        return f"RowIndexSet(<{n} rows, {self._bm.min()}..{self._bm.max()}>)"

    def __or__(self, other: RowIndexSet) -> RowIndexSet:
        return self.union(other)

    def __and__(self, other: RowIndexSet) -> RowIndexSet:
        return self.intersection(other)

    def __sub__(self, other: RowIndexSet) -> RowIndexSet:
        return self.difference(other)

    def union(self, *others: RowIndexSet | Iterable[int]) -> RowIndexSet:
        """Rows in this set or any of ``others``."""
        return RowIndexSet(self._bm.union(*(_as_bitmap(o) for o in others)))

    def intersection(self, *others: RowIndexSet | Iterable[int]) -> RowIndexSet:
        """Rows in this set and all of ``others``."""
        return RowIndexSet(self._bm.intersection(*(_as_bitmap(o) for o in others)))

    def difference(self, *others: RowIndexSet | Iterable[int]) -> RowIndexSet:
        """Rows in this set and in none of ``others``."""
        return RowIndexSet(self._bm.difference(*(_as_bitmap(o) for o in others)))

    def isdisjoint(self, other: RowIndexSet | Iterable[int]) -> bool:
        """Whether no row is in both sets (e.g. two concurrent DELETEs touched different rows)."""
        return self._bm.isdisjoint(_as_bitmap(other))

    def issubset(self, other: RowIndexSet | Iterable[int]) -> bool:
        """Whether every row of this set is in ``other``."""
        return self._bm.issubset(_as_bitmap(other))

    def max(self) -> int | None:
        """The largest row index, or None when empty."""
        return self._bm.max() if self._bm else None


def _bucket_bitmap(values: Any) -> BitMap:
    """A 32-bit bitmap of the low 32 bits of a uint64 numpy array (one bucket)."""
    import numpy as np

    lows = (values & np.uint64(0xFFFFFFFF)).astype(np.uint32)
    return BitMap(array.array("I", lows.tobytes()))


def _as_bitmap(value: RowIndexSet | Iterable[int]) -> FrozenBitMap64:
    if isinstance(value, RowIndexSet):
        return value._bm
    return RowIndexSet.from_iter(value)._bm


# -- locations --------------------------------------------------------------------------

_PREFIX_RE = re.compile(r"[A-Za-z0-9]*")


def dv_file_name(dv_uuid: uuid.UUID) -> str:
    """``deletion_vector_<uuid>.bin``, the file name of a 'u' DV."""
    return f"deletion_vector_{dv_uuid}.bin"


def _uri_to_path(uri: str) -> str:
    """A local path for a 'p' DV location (URI-encoded like ``add.path``); other schemes as-is."""
    if uri.startswith("file:"):
        return os.path.normpath(unquote(urlparse(uri).path))
    if "://" in uri:
        return uri
    return os.path.normpath(unquote(uri))


def dv_absolute_path(table_path: str, dv: DeletionVectorDescriptor) -> str | None:
    """Where the DV's file is: a local path (or a non-file URI for 'p'); None for inline."""
    kind = dv.storage_type
    if kind == "i":
        return None
    if kind == "u":
        text = dv.path_or_inline_dv
        if len(text) < _U_UUID_LEN:
            raise CorruptDeletionVectorError(
                "'u' deletion vector path is shorter than a 20-character Z85 UUID",
                table=table_path,
                dv=dv,
            )
        prefix, encoded = text[:-_U_UUID_LEN], text[-_U_UUID_LEN:]
        try:
            dv_uuid = z85_to_uuid(encoded)
        except ValueError as e:
            raise CorruptDeletionVectorError(
                f"'u' deletion vector has an invalid Z85 UUID ({e})", table=table_path, dv=dv
            ) from None
        root = normalize_table_path(table_path)
        if "/" in prefix or "\\" in prefix or prefix in (".", ".."):
            raise CorruptDeletionVectorError(
                f"'u' deletion vector prefix {prefix!r} is not a plain directory name",
                table=table_path,
                dv=dv,
            )
        return os.path.join(root, prefix, dv_file_name(dv_uuid)) if prefix else os.path.join(
            root, dv_file_name(dv_uuid)
        )
    if kind == "p":
        path = _uri_to_path(dv.path_or_inline_dv)
        if "://" not in path and not os.path.isabs(path):
            raise CorruptDeletionVectorError(
                "'p' deletion vector path is not absolute", table=table_path, dv=dv
            )
        return path
    raise CorruptDeletionVectorError(
        f"unsupported deletion vector storageType {kind!r} (this library reads 'u', 'i' and 'p')",
        table=table_path,
        dv=dv,
    )


def dv_referenced_files(
    table_path: str,
    dvs: Iterable[DeletionVectorDescriptor | FileAction | None],
) -> set[str]:
    """Absolute paths of the DV files that ``dvs`` (descriptors or add/remove actions) use.

    Vacuum keeps these: several DVs may share one file, and inline DVs have none.
    """
    out: set[str] = set()
    for item in dvs:
        dv = item.deletion_vector if isinstance(item, FileAction) else item
        if dv is None:
            continue
        path = dv_absolute_path(table_path, dv)
        if path is not None:
            out.add(path)
    return out


# -- reading ----------------------------------------------------------------------------


def read_deletion_vector(table_path: str, dv: DeletionVectorDescriptor, access: Access | None = None) -> RowIndexSet:
    """The deleted rows of ``dv``, checked against its size, CRC-32 and cardinality.

    ``access`` reaches the file on object storage (an executor passes the driver's, shipped
    with its task); by default this process's own settings.
    """
    if dv.storage_type == "i":
        where = "inline"
        try:
            data = z85_decode(dv.path_or_inline_dv, dv.size_in_bytes)
        except ValueError as e:
            raise CorruptDeletionVectorError(
                f"inline deletion vector is not valid Z85 of {dv.size_in_bytes} bytes ({e})",
                table=table_path,
                dv=dv,
            ) from None
    else:
        path = dv_absolute_path(table_path, dv)
        assert path is not None
        where = path
        data = _read_dv_file(table_path, path, dv, access)
    try:
        rows = RowIndexSet.deserialize(data)
    except ValueError as e:
        raise CorruptDeletionVectorError(
            f"deletion vector bitmap is malformed ({e})",
            table=table_path,
            file=None if where == "inline" else where,
            dv=dv,
        ) from None
    if len(rows) != dv.cardinality:
        raise CorruptDeletionVectorError(
            f"deletion vector holds {len(rows)} rows but its descriptor says cardinality {dv.cardinality}",
            table=table_path,
            file=None if where == "inline" else where,
            dv=dv,
        )
    return rows


def _read_dv_file(table_path: str, path: str, dv: DeletionVectorDescriptor, access: Access | None = None) -> bytes:
    """The bitmap bytes of ``dv`` inside the DV file at ``path`` (framing checked)."""
    remote = is_remote(path)
    if "://" in path and not remote:
        raise CorruptDeletionVectorError(
            f"deletion vector lives on a file system this library cannot read ({path.split('://', 1)[0]})",
            table=table_path,
            file=path,
            dv=dv,
        )
    offset = 0 if dv.offset is None else dv.offset
    size = dv.size_in_bytes

    def fail(reason: str) -> CorruptDeletionVectorError:
        return CorruptDeletionVectorError(reason, table=table_path, file=path, dv=dv)

    if offset < 1:
        raise fail(f"deletion vector offset {offset} points into the file's version byte")
    if size < 0:
        raise fail(f"deletion vector sizeInBytes {size} is negative")
    try:
        if remote:
            reach = access if access is not None else Access.here(path)
            version = reach.read_range(path, 0, 1)
            frame = reach.read_range(path, offset, 4 + size + 4)
        else:
            with open(path, "rb") as f:
                version = f.read(1)
                f.seek(offset)
                frame = f.read(4 + size + 4)
    except FileNotFoundError:
        raise fail("deletion vector file is missing") from None
    except OSError as e:
        raise fail(f"deletion vector file cannot be read ({e})") from None
    if not version:
        raise fail("deletion vector file is empty")
    if version[0] != DV_FILE_FORMAT_VERSION:
        raise fail(f"deletion vector file has format version {version[0]}, expected {DV_FILE_FORMAT_VERSION}")
    if len(frame) < 4 + size + 4:
        raise fail(f"deletion vector file is truncated: {len(frame)} bytes at offset {offset}, expected {size + 8}")
    (data_size,) = struct.unpack_from(">i", frame, 0)
    if data_size != size:
        raise fail(f"deletion vector at offset {offset} stores {data_size} bytes, descriptor says {size}")
    data = frame[4 : 4 + size]
    (expected_crc,) = struct.unpack_from(">I", frame, 4 + size)
    actual_crc = zlib.crc32(data)
    if actual_crc != expected_crc:
        raise fail(
            f"deletion vector checksum mismatch at offset {offset}: "
            f"stored CRC-32 {expected_crc:#010x}, computed {actual_crc:#010x}"
        )
    return data


# -- writing ----------------------------------------------------------------------------


def write_deletion_vector(
    table_path: str,
    rows: RowIndexSet,
    *,
    inline_max_bytes: int = 0,
    prefix: str = "",
) -> DeletionVectorDescriptor:
    """Persist ``rows`` as a new DV and return its descriptor, ready for ``AddFile.deletion_vector``.

    Writes ``<table>/<prefix>/deletion_vector_<uuid>.bin`` holding this one DV at offset 1,
    durable (file and directory fsynced) before returning, so a commit referencing it never
    points at a lost file. If the bitmap is at most ``inline_max_bytes`` long, no file is
    written and an inline ('i') descriptor is returned instead.
    """
    if not isinstance(rows, RowIndexSet):
        rows = RowIndexSet.from_iter(rows)
    if not rows:
        raise DeltaIllegalArgumentException(
            f"refusing to write an empty deletion vector for table {table_path}: "
            "commit the file without a deletionVector instead"
        )
    if not _PREFIX_RE.fullmatch(prefix):
        raise DeltaIllegalArgumentException(
            f"deletion vector prefix {prefix!r} must be letters and digits only (table {table_path})"
        )
    data = rows.serialize()
    if len(data) <= inline_max_bytes:
        return DeletionVectorDescriptor(
            storage_type="i",
            path_or_inline_dv=z85_encode(data),
            size_in_bytes=len(data),
            cardinality=len(rows),
            offset=None,
        )
    root = normalize_table_path(table_path)
    dv_uuid = uuid.uuid4()
    payload = b"".join(
        (
            bytes([DV_FILE_FORMAT_VERSION]),
            struct.pack(">i", len(data)),
            data,
            struct.pack(">I", zlib.crc32(data)),
        )
    )
    descriptor = DeletionVectorDescriptor(
        storage_type="u",
        path_or_inline_dv=prefix + uuid_to_z85(dv_uuid),
        size_in_bytes=len(data),
        cardinality=len(rows),
        offset=1,
    )
    if not is_local_path(root):
        # An object under a fresh UUID name, whole once its PUT returns (no directories on S3).
        location = f"{root}/{prefix}/{dv_file_name(dv_uuid)}" if prefix else f"{root}/{dv_file_name(dv_uuid)}"
        Access.here(location).put_new(location, payload)
        return descriptor
    directory = os.path.join(root, prefix) if prefix else root
    if not os.path.isdir(directory):
        os.makedirs(directory, exist_ok=True)
        # The new directory's own entry must survive a crash too.
        fsync_dir(os.path.dirname(directory))
    path = os.path.join(directory, dv_file_name(dv_uuid))
    # O_EXCL: a fresh UUID never collides, and if it did we must not clobber a live DV.
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        view = memoryview(payload)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    except BaseException:
        os.close(fd)
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
        raise
    os.close(fd)
    fsync_dir(directory)
    return descriptor
