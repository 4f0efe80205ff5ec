"""The live data files and tombstones of a table: checkpoint rows stay in Arrow, the rest are objects.

A checkpoint of a big table holds hundreds of thousands of add rows. Turning each into a
Python object (and a dict entry keyed by it) is most of the cost, in time and memory, of
loading such a table, and most operations never look at most files. So a ``FileState`` is:

- ``blocks``: the add rows of the checkpoint the state was loaded from, as Arrow arrays
  (``checkpoint.LazyAdds``), never changed;
- ``hidden``: keys ``(path, dv_id)`` of block rows removed (or added again) since then;
- ``extra``: the adds of the commits after the checkpoint (or of every commit, for a table
  read without one), in commit order: ``AddFile`` objects, or the checked JSON objects of
  adds read from the log, each built into an ``AddFile`` when first asked for;
- ``tombstones``: removes, as ``RemoveFile`` objects.

A block row is live when its key is not hidden (one vectorized ``is_in`` per block when
something was hidden). ``select`` filters the live files with vectorized predicates
(``arrow_skipping``); an ``AddFile`` is built only for the rows a caller selects, or for
all of them when a caller asks for ``files()``.

A state is mutable while a log is replayed into it and must not change once a snapshot
publishes it; ``copy()`` shares the blocks and copies only what commits changed.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from serialake.core.model.actions import AddFile, RemoveFile, dv_unique_id

if TYPE_CHECKING:
    from serialake.core.log.checkpoint import LazyAdds

__all__ = ["FileKey", "FileState", "Segment", "key_text"]

FileKey = tuple[str, str | None]
#: Live files of one part of a state: their rows as an Arrow table (the checkpoint's add
#: fields) and how to build the ``AddFile`` of given row positions of that table.
Segment = tuple[pa.Table, Callable[[Sequence[int]], list[AddFile]]]


def key_text(key: FileKey) -> str:
    """A file key as the string ``LazyAdds.key_array`` holds: the path, then NUL and the DV id if any."""
    path, dv = key
    return path if dv is None else f"{path}\x00{dv}"


class FileState:
    """Live files and tombstones (see the module docstring)."""

    __slots__ = ("_arrow_extra", "_count", "_files", "_lock", "_masks", "blocks", "extra", "hidden", "tombstones")

    def __init__(
        self,
        blocks: list[LazyAdds] | None = None,
        hidden: set[FileKey] | None = None,
        extra: dict[FileKey, AddFile | dict[str, Any]] | None = None,
        tombstones: dict[FileKey, RemoveFile] | None = None,
    ) -> None:
        self.blocks: list[LazyAdds] = blocks if blocks is not None else []
        self.hidden: set[FileKey] = hidden if hidden is not None else set()
        self.extra: dict[FileKey, AddFile | dict[str, Any]] = extra if extra is not None else {}
        self.tombstones: dict[FileKey, RemoveFile] = tombstones if tombstones is not None else {}
        self._lock = threading.Lock()
        self._reset()

    def _reset(self) -> None:
        self._masks: list[pa.BooleanArray | None] | None = None
        self._files: list[AddFile] | None = None
        self._count: int | None = None
        self._arrow_extra: pa.Table | None = None

    # -- building (while a log is replayed) ---------------------------------------------
    def copy(self) -> FileState:
        """A new state with the same files: blocks shared (immutable), the rest copied."""
        return FileState(list(self.blocks), set(self.hidden), dict(self.extra), dict(self.tombstones))

    def add_block(self, block: LazyAdds) -> None:
        self.blocks.append(block)
        self._reset()

    def add(self, a: AddFile) -> None:
        self._put((a.path, a.dv_id), a)

    def add_json(self, obj: dict[str, Any]) -> None:
        """An add as its checked JSON object (``validate``): kept so until someone asks for it."""
        dv = obj.get("deletionVector")
        self._put((obj["path"], None if dv is None else dv_unique_id(dv)), obj)

    def _put(self, key: FileKey, a: AddFile | dict[str, Any]) -> None:
        self.extra[key] = a
        self.tombstones.pop(key, None)
        if self.blocks:
            self.hidden.add(key)  # a block row with this key is replaced
        self._reset()

    def remove(self, r: RemoveFile) -> None:
        key = (r.path, r.dv_id)
        self.extra.pop(key, None)
        self.tombstones[key] = r
        if self.blocks:
            self.hidden.add(key)
        self._reset()

    def apply(self, actions: Iterable[Any]) -> None:
        """Apply add and remove actions in order (other actions are ignored).

        An add may be its checked JSON object (a dict, as ``log.CommitEntry.items`` holds it).
        """
        for a in actions:
            t = type(a)
            if t is AddFile:
                self.add(a)
            elif t is dict:
                self.add_json(a)
            elif t is RemoveFile:
                self.remove(a)

    # -- reading (once published) -------------------------------------------------------
    def extra_files(self) -> list[AddFile]:
        """The adds of later commits as ``AddFile`` objects, in commit order (built once each).

        A JSON object is replaced by its object in place: the same file under the same key,
        so readers on other threads see the state unchanged.
        """
        extra = self.extra
        out: list[AddFile] = []
        built: list[tuple[FileKey, AddFile]] = []
        for key, a in extra.items():
            if type(a) is dict:
                a = AddFile._from_obj(a)
                built.append((key, a))
            out.append(a)  # type: ignore[arg-type]
        for key, a in built:
            extra[key] = a
        return out

    def _block_masks(self) -> list[pa.BooleanArray | None]:
        """Per block, which rows are live (None: all of them)."""
        masks = self._masks
        if masks is not None:
            return masks
        with self._lock:
            if self._masks is None:
                if not self.hidden or not self.blocks:
                    self._masks = [None] * len(self.blocks)
                else:
                    hidden = pa.array([key_text(k) for k in self.hidden], pa.string())
                    self._masks = [pc.invert(pc.is_in(b.key_array, value_set=hidden)) for b in self.blocks]
            return self._masks

    def rows_held(self) -> int:
        """Checkpoint rows plus later adds: at least ``count()``, and known without any work."""
        return sum(block.n for block in self.blocks) + len(self.extra)

    def count(self) -> int:
        """How many files are live (no object is built)."""
        if self._count is None:
            n = len(self.extra)
            for block, mask in zip(self.blocks, self._block_masks(), strict=True):
                n += block.n if mask is None else pc.sum(mask).as_py() or 0
            self._count = n
        return self._count

    def files(self) -> list[AddFile]:
        """Every live file as an ``AddFile`` (built once, then shared)."""
        files = self._files
        if files is not None:
            return files
        masks = self._block_masks()
        with self._lock:
            if self._files is None:
                enabled = gc.isenabled()
                gc.disable()  # many objects, no cycles: collections would only traverse them
                try:
                    out: list[AddFile] = []
                    for block, mask in zip(self.blocks, masks, strict=True):
                        out.extend(block.build_many(range(block.n) if mask is None else _positions(mask)))
                    out.extend(self.extra_files())
                finally:
                    if enabled:
                        gc.enable()
                self._files = out
            return self._files

    def keyed(self) -> dict[FileKey, AddFile]:
        """The live files by key ``(path, dv_id)``."""
        return {(f.path, f.dv_id): f for f in self.files()}

    def block_segments(self) -> list[Segment]:
        """The checkpoint's live rows as Arrow tables, each with a builder of ``AddFile`` by row position."""
        out: list[Segment] = []
        for block, mask in zip(self.blocks, self._block_masks(), strict=True):
            if mask is None:
                out.append((block.table, block.build_many))
            else:
                out.append((block.table.filter(mask), _Picker(block, _positions(mask))))
        return out

    def extra_segment(self) -> Segment | None:
        """The adds of later commits as one Arrow table (``files_arrow.files_table``, made once), or None."""
        if not self.extra:
            return None
        from serialake.core.log.files_arrow import files_table

        extra = self.extra_files()
        if self._arrow_extra is None:
            self._arrow_extra = files_table(extra)
        return (self._arrow_extra, lambda rows: [extra[i] for i in rows])

    def select(
        self, matcher: Callable[..., Any], per_file: Callable[[AddFile], bool] | None = None
    ) -> list[AddFile]:
        """The live files ``matcher`` keeps, in ``files()`` order.

        ``matcher(table, cache)`` gives a boolean mask over an Arrow table of files
        (``arrow_skipping.ArrowMatcher``). Checkpoint rows are matched in Arrow, a block at
        a time with the block's ``SkipCache`` (shared by every state holding the block, so a
        repeated filter reuses the parsed stats), and only the selected ones are built. The
        adds of later commits are objects already: with ``per_file`` (the same predicate, one
        file at a time) a few of them are matched directly rather than converted to Arrow first.
        """
        built = self._files
        out: list[AddFile] = []
        offset = 0
        for block, mask in zip(self.blocks, self._block_masks(), strict=True):
            hit = _np_bool(matcher(block.table, self._skip_cache(block)))
            if mask is None:
                rows = np.flatnonzero(hit)
                live = rows
                offset_next = offset + block.n
            else:
                keep = _np_bool(mask)
                rows = np.flatnonzero(hit & keep)
                live = np.cumsum(keep)[rows] - 1  # positions among the block's live rows
                offset_next = offset + int(keep.sum())
            if built is not None:
                out.extend([built[offset + i] for i in live.tolist()])
            else:
                out.extend(block.build_many(rows.tolist()))
            offset = offset_next
        if per_file is not None and len(self.extra) <= _PER_FILE_LIMIT:
            out.extend(f for f in self.extra_files() if per_file(f))
        elif (segment := self.extra_segment()) is not None:
            table, build = segment
            out.extend(build(_true_rows(matcher(table))))
        return out

    def _skip_cache(self, block: LazyAdds) -> Any:
        cache = block.skip_cache
        if cache is None:
            from serialake.core.predicates.arrow_skipping import SkipCache

            with self._lock:
                if block.skip_cache is None:
                    block.skip_cache = SkipCache()
                cache = block.skip_cache
        return cache

    def total_size(self) -> int:
        """Sum of the live files' sizes in bytes."""
        total = sum(a.size or 0 for a in self.extra_files())
        for block, mask in zip(self.blocks, self._block_masks(), strict=True):
            sizes = block.table.column("size")
            if mask is not None:
                sizes = sizes.filter(mask)
            total += pc.sum(sizes).as_py() or 0
        return total


class _Picker:
    """Builds the ``AddFile`` of rows of a filtered block, by their position after filtering."""

    def __init__(self, block: LazyAdds, positions: list[int]) -> None:
        self.block, self.positions = block, positions

    def __call__(self, rows: Sequence[int]) -> list[AddFile]:
        return self.block.build_many([self.positions[i] for i in rows])


#: Up to this many adds of later commits are matched one by one instead of converted to Arrow.
_PER_FILE_LIMIT = 2000


def _true_rows(mask: Any) -> list[int]:
    """Positions where a boolean mask (Arrow or NumPy) is true."""
    return np.flatnonzero(_np_bool(mask)).tolist()


def _np_bool(mask: Any) -> np.ndarray:
    """A boolean mask (Arrow, nulls as false, or NumPy) as a NumPy array."""
    if isinstance(mask, (pa.Array, pa.ChunkedArray)):
        if mask.null_count:
            mask = mask.fill_null(False)
        return np.asarray(mask.to_numpy(zero_copy_only=False), dtype=bool)
    return np.asarray(mask, dtype=bool)


def _positions(mask: pa.BooleanArray) -> list[int]:
    """Row positions where ``mask`` is true."""
    return pc.indices_nonzero(mask).to_pylist()
