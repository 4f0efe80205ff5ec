"""Re-basing a transaction's generated identity values over a concurrent allocation.

Two writers that generate identity values from the same high-water mark hand out the same
values; each also raises the mark in its commit (a metadata action). Delta fails the second
with ``MetadataChangedException``. Here the second re-bases instead, when that is safe: its
new files are its own and unpublished, so every value it *generated* moves by one constant,
the smallest multiple of the step that puts them all past the winner's mark
(``identity.rebase_shift``): still unique, still ``start + k * step``, and its mark becomes
its last generated value. ``rebase`` decides (a ``decisions.Rebase`` whose ``identity``
names the shifts); ``rewrite_files`` carries it out, called by ``rebasing.check_winner``:
files are rewritten on the driver with pyarrow (read, shift the column, write a new file
with fresh min/max stats, replace the add); the files replaced are deleted by the writer's
clean-up once the commit no longer references them (``core.txn.written``), and files written
here that end up unused by ``rebasing.discard_rebase_files``.

Only values past the mark the transaction read can meet a winner's generated ones, and the
writer declares what it stored there (``identity.Allocation``, through
``OptimisticTransaction.record_identity_allocation``): values past that mark in its new
files are exactly the generated ones, which are the ones shifted. What still conflicts
(``None`` with a reason, then ``MetadataChangedException``):

- a winner whose metadata differs from the read one in anything but identity marks, or
  that moved a mark backwards (not an allocation);
- a transaction changing more metadata than its marks;
- a column both raised where this transaction stored values it did not generate past the
  mark read (explicit values given to a BY DEFAULT column, a MERGE insert's assignment):
  those may equal values the winner generated and are never moved; or raised the mark
  without declaring what it stored;
- an identity column that is a partition column, a new file with a deletion vector, a
  file that cannot be read or written, or a shift leaving the BIGINT range.

The rest of the transaction (its reads, removes) is checked against the winner as usual.
"""

from __future__ import annotations

import json
import posixpath
import uuid
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from serialake.core.model import identity
from serialake.core.model.actions import Action, AddCDCFile, AddFile, Metadata, now_ms
from serialake.core.model.schema import physical_name
from serialake.core.txn.decisions import IdentityShift, Rebase
from serialake.exceptions import DeltaAnalysisException

if TYPE_CHECKING:
    from serialake.core.txn.summaries import TransactionInfo, WinnerSummary

__all__ = ["changes_only_marks", "rebase", "rewrite_files"]


def changes_only_marks(before: Metadata | None, after: Metadata | None) -> bool:
    """Whether a transaction writing ``after`` over ``before`` only raises identity marks (or writes none)."""
    if after is None:
        return True
    return before is not None and identity.same_but_marks(before, after)


def rebase(info: TransactionInfo, w: WinnerSummary) -> tuple[Rebase | None, str | None]:
    """``info`` re-based over winner ``w``'s identity allocation, or ``(None, why it conflicts)``.

    The rebase's ``identity`` names the values to shift in our new files (None: nothing
    generated to move); ``rewrite_files`` rewrites them. ``why`` is None when the winner's
    metadata change is not an identity allocation at all (the caller reports the change as usual).
    """
    read, theirs, ours = info.read_metadata, w.metadata, info.metadata
    if read is None or theirs is None or not identity.same_but_marks(read, theirs):
        return None, None
    if ours is not None and not identity.same_but_marks(read, ours):
        return None, "This transaction changes the metadata too."
    columns = identity.identity_columns(read.schema)
    w_marks = {c.name.lower(): c.high_water_mark for c in identity.identity_columns(theirs.schema)}
    o_marks = (
        {c.name.lower(): c.high_water_mark for c in identity.identity_columns(ours.schema)} if ours is not None else {}
    )
    parts = {p.lower() for p in read.partition_columns}
    allocations = dict(info.identity_allocations)
    new_marks: dict[str, int] = {}
    shifts: list[tuple[identity.IdentityColumn, int, int]] = []  # (column, first generated, shift)
    for c in columns:
        key = c.name.lower()
        r, wm = c.high_water_mark, w_marks.get(key, c.high_water_mark)
        om = o_marks.get(key, r) if ours is not None else r
        if wm == r:
            if om is not None and om != r:
                new_marks[c.name] = om
            continue
        if wm is None or (r is not None and not c.is_past(wm, r)):
            return None, f"The concurrent commit moved the high-water mark of identity column '{c.name}' back."
        if om == r:  # only the winner allocated: take its mark
            new_marks[c.name] = wm
            continue
        alloc = allocations.get(key)
        if alloc is None:
            return None, (
                f"Both raised the high-water mark of identity column '{c.name}' and this write did not say "
                "which of its values it generated."
            )
        if alloc.explicit_past:
            return None, (
                f"Both stored values past the high-water mark of identity column '{c.name}', and this write's "
                "include values it did not generate (given explicitly): they may equal values the concurrent "
                "commit generated, and a given value is never changed."
            )
        if alloc.first is None or alloc.last is None or om is None:  # (nothing generated to move)
            new_marks[c.name] = om if om is not None and c.is_past(om, wm) else wm
            continue
        if key in parts:
            return None, f"Identity column '{c.name}' is a partition column: its values cannot be re-based."
        try:
            shift = identity.rebase_shift(c, alloc.first, alloc.last, wm, table=info.table)
        except DeltaAnalysisException as e:
            return None, str(e)
        if shift:
            shifts.append((c, alloc.first, shift))
            allocations[key] = alloc.shifted(shift)
        new_marks[c.name] = alloc.last + shift
    actions = list(info.actions)
    new_meta: Metadata | None = None
    if ours is not None:
        schema = identity.with_high_water_marks(theirs.schema, new_marks)
        new_meta = replace(theirs, schema_string=schema.to_json())
        actions = [new_meta if a is ours else a for a in actions]
    rebased = replace(info, read_metadata=theirs, metadata=new_meta, actions=actions, identity_allocations=allocations)
    return Rebase(rebased, identity=IdentityShift(read, tuple(shifts)) if shifts else None), None


def rewrite_files(info: TransactionInfo, shift: IdentityShift) -> list[Action]:
    """``info.actions`` with each new file holding generated values replaced by a shifted copy.

    The files written are recorded in ``info.rebase_files``. Raises ``OSError``, ``ValueError``
    or ``ImportError`` when a file cannot be read or written (or a value leaves the range).
    """
    fields = {f.name.lower(): f for f in shift.read.schema.fields}
    cols = [(physical_name(fields[c.name.lower()]), c, first, n) for c, first, n in shift.shifts]
    out: list[Action] = []
    for a in info.actions:
        if isinstance(a, AddFile) and a.data_change and a.path not in info.removes:
            if a.deletion_vector is not None:
                raise ValueError(f"new file {a.path} has a deletion vector")
            out.append(_rewrite_one(info, a, cols))
        elif isinstance(a, AddCDCFile):
            out.append(_rewrite_one(info, a, cols))
        else:
            out.append(a)
    return out


def _may_hold(stats: dict[str, Any] | None, name: str, c: identity.IdentityColumn, first: int) -> bool:
    """Whether a file whose stats are ``stats`` may hold values at or past ``first`` (generated)."""
    if not stats:
        return True
    bound = (stats.get("maxValues") if c.step > 0 else stats.get("minValues")) or {}
    value = bound.get(name)
    if value is None:
        nulls = (stats.get("nullCount") or {}).get(name)
        return not (nulls is not None and nulls == stats.get("numRecords"))
    return (int(value) - first) * (1 if c.step > 0 else -1) >= 0


def _rewrite_one(info: TransactionInfo, a: AddFile | AddCDCFile, cols: list[Any]) -> AddFile | AddCDCFile:
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    from serialake.core.model.paths import absolute_path
    from serialake.storage.datafiles import Access

    stats = a.parsed_stats() if isinstance(a, AddFile) else None
    todo = [x for x in cols if _may_hold(stats, x[0], x[1], x[2])]
    if not todo:
        return a
    src = absolute_path(info.table, a.path)
    access = Access.here(src)
    with pq.ParquetFile(access.open_parquet(src)) as pf:
        int96 = any(pf.schema.column(i).physical_type == "INT96" for i in range(len(pf.schema)))
        meta = pf.metadata
        compression = meta.row_group(0).column(0).compression.lower() if meta.num_row_groups else "snappy"
        table = pf.read()  # (the file's own schema: physical names, field ids, Spark's footer metadata)
    changed = False
    bounds: dict[str, tuple[Any, Any]] = {}
    for name, c, first, shift in todo:
        at = table.schema.get_field_index(name)
        if at < 0:
            raise ValueError(f"column {name} not in {a.path}")
        column = table.column(at)
        past = pc.greater_equal(column, first) if c.step > 0 else pc.less_equal(column, first)
        if not pc.any(past).as_py():
            continue
        shifted = pc.if_else(past, pc.add_checked(column, pa.scalar(shift, pa.int64())), column)
        table = table.set_column(at, table.schema.field(at), shifted)
        mm = pc.min_max(shifted)
        bounds[name] = (mm["min"].as_py(), mm["max"].as_py())
        changed = True
    if not changed:
        return a
    name = f"part-00000-{uuid.uuid4()}-c000.{compression if compression != 'uncompressed' else 'none'}.parquet"
    folder = posixpath.dirname(a.path)
    new_path = f"{folder}/{name}" if folder else name
    dst = absolute_path(info.table, new_path)
    with access.create(dst) as sink:
        pq.write_table(
            table, sink, compression=compression if compression != "uncompressed" else "none",
            use_deprecated_int96_timestamps=int96,
        )  # fmt: skip
    info.rebase_files.append(new_path)
    size, _ = access.status(dst)
    if isinstance(a, AddCDCFile):
        return replace(a, path=new_path, size=size)
    new_stats = a.stats
    if stats is not None:
        for key, (lo, hi) in bounds.items():
            for part, value in (("minValues", lo), ("maxValues", hi)):
                if isinstance(stats.get(part), dict) and key in stats[part] and value is not None:
                    stats[part][key] = value
        new_stats = json.dumps(stats, separators=(",", ":"))
    return replace(a, path=new_path, size=size, stats=new_stats, modification_time=now_ms())
