"""MERGE on the driver (pyarrow), for small sources and targets, when every step is exact.

A typical upsert (a batch of keyed rows into a table) reads few files and changes few rows;
on Spark it still costs several jobs and a shuffle join. When the source is estimated
small and the candidate target files fit the driver's budget (``engine``), the driver
does the whole MERGE itself:

1. the source is collected once as Arrow (``DataFrame.toArrow``: it is read exactly once);
2. the key and filter columns of the candidate target files are read, and the ON
   condition is evaluated as a hash join on its equality keys (NULL keys never match, as
   in SQL) plus exact target-only and source-only conjuncts (``row_eval.evaluate``);
3. a target row matched by several source rows fails as on Spark;
4. touched files are read whole and rewritten (copy-on-write) or get their changed rows
   marked in deletion vectors (``driver_files.rewrite_files``); updated and inserted
   values come from ``core.predicates.values``.

What qualifies (``plan``): an ON condition that is a conjunction of ``t.k = s.k``
equalities on integral, string, date or boolean columns (at least one) and exact
single-side conjuncts; at most one clause of each kind and no clause condition; SET /
VALUES in the exact subset (``updateAll`` / ``insertAll`` included); for inserts, an
unpartitioned table. Everything else, or any doubt while running, raises ``NotExact``:
the engine then runs the MERGE on Spark (``merge_command``), which gives the same result.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from serialake.core.dv.deletion_vectors import RowIndexSet
from serialake.core.model.actions import AddFile
from serialake.core.model.schema import StructType
from serialake.core.model.types import arrow_type, type_family
from serialake.core.predicates import expressions as P
from serialake.core.predicates import row_eval
from serialake.core.predicates import values as V
from serialake.core.predicates.values import NotExact
from serialake.spark.backend import backend
from serialake.spark.dml.driver_files import DriverTable, check_not_null, io_threads, rewrite_files

__all__ = ["MergePlan", "MergeOutcome", "execute", "plan", "source_table"]

_T, _S = "t", "s"  # which side a column belongs to
_JOIN_FAMILIES = frozenset({"integral", "string", "date", "boolean"})  # key types the hash join compares exactly


def _join_family(kind: str | None) -> str | None:
    family = type_family(kind) if kind else None
    return family if family in _JOIN_FAMILIES else None


@dataclass
class Clause:
    """One clause of a kind: ``update`` with compiled values, or ``delete`` / ``insert``."""

    action: str
    values: dict[str, V.Compiled] = field(default_factory=dict)


@dataclass
class MergePlan:
    local: DriverTable
    source_schema: StructType
    keys: list[tuple[str, str]]  # (target column, source column)
    target_filter: P.Expr | None
    source_filter: P.Expr | None
    matched: Clause | None
    by_source: Clause | None
    insert: Clause | None
    sides: dict[tuple[str | None, str], tuple[str, str]]  # (qualifier, name) -> (side, real name)

    @property
    def single_unconditional_delete(self) -> bool:
        return self.matched is not None and self.matched.action == "delete"


@dataclass
class MergeOutcome:
    touched: dict[str, tuple[AddFile, RowIndexSet]]  # path -> (file, changed physical rows)
    counts: dict[str, int]  # matched_update, matched_delete, by_source_update, by_source_delete, insert
    adds: list[AddFile]
    # path -> the physical rows some source row matched under the ON condition (files with any)
    matched: dict[str, RowIndexSet] = field(default_factory=dict)


def plan(
    snap: Any,
    on: P.Expr | None,
    target_alias: str,
    source_schema: StructType,
    clauses: Sequence[Any],
) -> MergePlan:
    """A driver plan for this MERGE; ``NotExact`` when it must run on Spark (see module docstring).

    ``on`` is the ON condition as the MERGE parsed it (None: not understood).
    """
    local = DriverTable.open(snap)
    if on is None:
        raise NotExact("the ON condition is not understood")
    try:
        return _plan(local, on, target_alias, source_schema, clauses)
    except (P.PredicateError, ValueError, TypeError) as e:
        raise NotExact(f"ON condition: {e}") from None


def _plan(local: DriverTable, on: P.Expr, alias: str, source_schema: StructType, clauses: Sequence[Any]) -> MergePlan:
    snap = local.snap
    sides: dict[tuple[str | None, str], tuple[str, str]] = {}

    def side_of(qualifier: str | None, name: str) -> tuple[str, str]:
        key = (qualifier, name)
        if key not in sides:
            t = snap.schema.field(name)
            s = source_schema.field(name)
            if qualifier is not None and qualifier.lower() == alias.lower():
                found = (_T, t.name) if t is not None else None
            elif qualifier is not None:
                found = (_S, s.name) if s is not None else None
            elif (t is None) != (s is None):
                found = (_T, t.name) if t is not None else (_S, s.name)  # type: ignore[union-attr]
            else:
                found = None  # unknown or ambiguous: Spark reports it
            if found is None:
                raise NotExact(f"column {qualifier + '.' if qualifier else ''}{name}")
            sides[key] = found
        return sides[key]

    def kind(side: str, name: str) -> str:
        schema = snap.schema if side == _T else source_schema
        f = schema.field(name)
        k = V.kind_of_type(f.data_type) if f is not None else None
        if k is None:
            raise NotExact(f"column {name}")
        return k

    keys: list[tuple[str, str]] = []
    target_parts: list[P.Expr] = []
    source_parts: list[P.Expr] = []
    for c in P.split_conjuncts(on):
        refs = P.column_refs(c)
        if not refs:
            raise NotExact("constant ON conjunct")
        sided = {side_of(q, n) for q, n in refs}
        if isinstance(c, P.Comparison) and c.op == "=" and isinstance(c.left, P.Column) and isinstance(
            c.right, P.Column
        ):
            a, b = side_of(c.left.qualifier, c.left.name), side_of(c.right.qualifier, c.right.name)
            if {a[0], b[0]} == {_T, _S}:
                t, s = (a, b) if a[0] == _T else (b, a)
                ft, fs = _join_family(kind(*t)), _join_family(kind(*s))
                if ft is None or ft != fs:
                    raise NotExact(f"join key {t[1]} = {s[1]}")
                keys.append((t[1], s[1]))
                continue
        if {s for s, _ in sided} == {_T}:
            target_parts.append(_unqualified(c))
        elif {s for s, _ in sided} == {_S}:
            source_parts.append(_unqualified(c))
        else:
            raise NotExact(f"ON conjunct {P.to_sql(c)} mixes both sides")
    if not keys:
        raise NotExact("no equality key")
    target_filter = P.conjunction(target_parts) if target_parts else None
    source_filter = P.conjunction(source_parts) if source_parts else None
    if target_filter is not None and row_eval.inexact_reason(target_filter, snap.schema) is not None:
        raise NotExact("target conjuncts")
    if source_filter is not None and row_eval.inexact_reason(source_filter, source_schema) is not None:
        raise NotExact("source conjuncts")

    by_kind: dict[str, Clause] = {}
    for clause in clauses:
        if clause.condition is not None or clause.kind in by_kind:
            raise NotExact("clause conditions")
        allowed = {"matched": {_T, _S}, "notMatched": {_S}, "notMatchedBySource": {_T}}[clause.kind]
        compiled: dict[str, V.Compiled] = {}
        if clause.action != "delete":
            compiled = _compile_values(snap, clause, allowed, side_of, kind)
        by_kind[clause.kind] = Clause(clause.action, compiled)
    if "notMatched" in by_kind and snap.partition_columns:
        raise NotExact("inserts into a partitioned table")
    return MergePlan(local, source_schema, keys, target_filter, source_filter, by_kind.get("matched"),
                     by_kind.get("notMatchedBySource"), by_kind.get("notMatched"), sides)  # fmt: skip


def _compile_values(
    snap: Any,
    clause: Any,
    allowed: set[str],
    side_of: Callable[[str | None, str], tuple[str, str]],
    kind: Callable[[str, str], str],
) -> dict[str, V.Compiled]:
    """The clause's assignments compiled per target column (star: the source column of that name)."""
    out: dict[str, V.Compiled] = {}

    def column_type(ref: V.Ref) -> str | None:
        side, name = side_of(ref.qualifier, ref.name) if ref.qualifier != "\0s" else (_S, ref.name)
        if side not in allowed:
            raise NotExact(f"{clause.kind} clause reads {ref.name}")
        return kind(side, name)

    if clause.star:
        for f in snap.schema.fields:
            target = V.kind_of_type(f.data_type) or ""
            tree = V.Ref("\0s", f.name)  # the source column of that name (side_of resolves case)
            try:
                column_type(tree)
            except NotExact:
                raise NotExact(f"star clause: no source column {f.name}") from None
            out[f.name] = V.compile_value(tree, column_type, target)
        return out
    for key, text in (clause.assignments or {}).items():
        name = key.split(".", 1)[1] if "." in key and snap.schema.field(key) is None else key
        f = snap.schema.field(name.strip("`"))
        if f is None or not isinstance(text, str):
            raise NotExact(f"assignment to {key}")
        out[f.name] = V.compile_value(V.parse_value(text), column_type, V.kind_of_type(f.data_type) or "")
    return out


def _unqualified(expr: P.Expr) -> P.Expr:
    qualifiers = {q for q, _ in P.column_refs(expr) if q is not None}
    if len(qualifiers) > 1:
        raise NotExact("several qualifiers")
    for q in qualifiers:
        stripped = P.strip_qualifier(expr, q)
        if stripped is None:
            raise NotExact("qualifier")
        return stripped
    return expr


def source_table(df: Any, schema: StructType, max_bytes: int) -> Any:
    """The source DataFrame as an Arrow table in Delta types; ``NotExact`` when too big or not exact.

    Spark's size estimate rules out sources known to be big; others (an RDD of Python rows
    has no estimate) are collected with a row limit that ``max_bytes`` allows, so a big
    source is never pulled whole onto the driver.
    """
    import pyarrow as pa

    wanted = []
    for f in schema.fields:
        t = arrow_type(f.data_type)
        if t is None:
            raise NotExact(f"source column {f.name} of type {f.data_type}")
        wanted.append(pa.field(f.name, t))
    try:
        estimate = backend(df.sparkSession).estimated_bytes(df)
    except Exception:  # noqa: BLE001 - Spark Connect, or a plan without statistics
        estimate = None
    if estimate is not None and estimate > max_bytes and estimate < (1 << 62):
        raise NotExact(f"source estimated at {estimate} bytes")
    width = sum(32 if pa.types.is_string(w.type) or pa.types.is_binary(w.type) else 8 for w in wanted) or 1
    cap = max(1, max_bytes // width)
    table = df.limit(cap + 1).toArrow() if estimate is None or estimate > max_bytes else df.toArrow()
    if table.num_rows > cap or table.nbytes > max_bytes:
        raise NotExact("source larger than the driver's budget")
    try:
        columns = [table.column(i).cast(w.type, safe=True) for i, w in enumerate(wanted)]
    except (pa.ArrowException, ValueError) as e:
        raise NotExact(f"source columns: {e}") from None
    return pa.Table.from_arrays(columns, schema=pa.schema(wanted))


# -- execution ---------------------------------------------------------------------------------


def execute(
    mp: MergePlan,
    files: Sequence[AddFile],
    source: Any,
    multiple_match: Callable[[str, int], Exception],
    *,
    dvs: bool,
) -> MergeOutcome:
    """Run the MERGE on ``files`` (the candidate target files): write new files, commit nothing.

    ``dvs``: changed rows get marked in deletion vectors (only new row versions are written).
    """
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    local = mp.local
    snap = local.snap
    # 1. Keys (and filter columns) of the candidate files; the join on the equality keys.
    t_cols = {t for t, _ in mp.keys}
    if mp.target_filter is not None:
        t_cols |= {n for _, n in P.column_refs(mp.target_filter)}
    join_types = [pa.int64() if _join_family(V.kind_of_type(snap.schema.field(t).data_type)) == "integral"
                  else None for t, _ in mp.keys]  # fmt: skip

    def keys_of(i: int) -> tuple[Any, int]:
        add = files[i]
        table, positions = _read_columns(local, add, sorted(t_cols))
        n = table.num_rows
        ok = np.ones(n, dtype=bool)
        if mp.target_filter is not None:
            ok &= _mask(row_eval.evaluate(mp.target_filter, table, n, {}, snap.schema, ()), n)
        arrays = {}
        for k, ((t, _), jt) in enumerate(zip(mp.keys, join_types)):
            col = table.column(t)
            ok &= ~_mask(pc.is_null(col), n)
            arrays[f"__k{k}"] = col.cast(jt) if jt is not None else col
        arrays["__f"] = pa.array(np.full(n, i, dtype=np.int32))
        arrays["__p"] = pa.array(positions)
        return pa.table(arrays).filter(pa.array(ok)), n

    with ThreadPoolExecutor(min(io_threads(), max(1, len(files)))) as pool:
        parts = list(pool.map(keys_of, range(len(files))))
    live = [n for _, n in parts]
    s_n = source.num_rows
    s_ok = np.ones(s_n, dtype=bool)
    if mp.source_filter is not None:
        s_ok &= _mask(row_eval.evaluate(mp.source_filter, source, s_n, {}, mp.source_schema, ()), s_n)
    s_keys = {}
    for k, ((_, s), jt) in enumerate(zip(mp.keys, join_types)):
        col = source.column(s)
        s_ok &= ~_mask(pc.is_null(col), s_n)
        s_keys[f"__k{k}"] = col.cast(jt) if jt is not None else col
    s_keys["__sid"] = pa.array(np.arange(s_n, dtype=np.int64))
    s_side = pa.table(s_keys).filter(pa.array(s_ok))
    t_side = pa.concat_tables([p for p, _ in parts]) if parts else None
    key_names = [f"__k{k}" for k in range(len(mp.keys))]
    if t_side is not None and t_side.num_rows and s_side.num_rows:
        try:
            pairs = t_side.join(s_side, keys=key_names, join_type="inner", use_threads=True)
        except (pa.ArrowNotImplementedError, pa.ArrowInvalid) as e:
            raise NotExact(f"join: {e}") from None
        pf = pairs.column("__f").to_numpy()
        pp = pairs.column("__p").to_numpy()
        ps = pairs.column("__sid").to_numpy()
    else:
        pf = np.zeros(0, dtype=np.int32)
        pp = ps = np.zeros(0, dtype=np.int64)
    order = np.lexsort((pp, pf))
    pf, pp, ps = pf[order], pp[order], ps[order]
    row_id = (pf.astype(np.int64) << 40) | pp
    if len(row_id) > 1:
        dup = row_id[1:] == row_id[:-1]
        if dup.any() and mp.matched is not None and not mp.single_unconditional_delete:
            first = int(np.argmax(dup))
            raise multiple_match(files[int(pf[first])].path, int(dup.sum()))
        if dup.any():
            keep = np.concatenate([[True], ~dup])
            pf, pp, ps = pf[keep], pp[keep], ps[keep]
    # 2. Per file: the matched rows (positions, and each one's source row).
    bounds = np.searchsorted(pf, np.arange(len(files) + 1))
    counts = {"matched_update": 0, "matched_delete": 0, "by_source_update": 0, "by_source_delete": 0, "insert": 0}
    jobs: list[tuple[AddFile, tuple[Any, Any]]] = []
    matched: dict[str, RowIndexSet] = {}
    for i, add in enumerate(files):
        lo, hi = bounds[i], bounds[i + 1]
        if hi > lo:
            matched[add.path] = RowIndexSet.from_iter(np.unique(pp[lo:hi]).astype(np.uint64))
        changes = (hi - lo if mp.matched else 0) + (live[i] - (hi - lo) if mp.by_source else 0)
        if changes:
            jobs.append((add, (pp[lo:hi], ps[lo:hi])))
    touched: dict[str, tuple[AddFile, RowIndexSet]] = {}
    tally: list[dict[str, int]] = []

    def rewrite(table: Any, positions: Any, add: AddFile, job: tuple[Any, Any]) -> Any:
        positions_m, sids = job
        n = table.num_rows
        mask_m = np.isin(positions, positions_m, assume_unique=True) if mp.matched else np.zeros(n, bool)
        mask_b = ~np.isin(positions, positions_m, assume_unique=True) if mp.by_source else np.zeros(n, bool)
        columns = {f.name: table.column(f.name) for f in local.schema}
        keep = np.ones(n, dtype=bool)
        changed_rows = np.zeros(n, dtype=bool)
        c = {k: 0 for k in counts}
        for clause, mask, name in ((mp.matched, mask_m, "matched"), (mp.by_source, mask_b, "by_source")):
            if clause is None or not mask.any():
                continue
            changed_rows |= mask
            if clause.action == "delete":
                keep &= ~mask
                c[f"{name}_delete"] += int(mask.sum())
                continue
            c[f"{name}_update"] += int(mask.sum())
            arrow_mask = pa.array(mask)
            hit = table.filter(arrow_mask)
            src = None
            if name == "matched":
                order_in_m = np.searchsorted(positions_m, positions[mask])
                src = source.take(pa.array(sids[order_in_m]))

            def value_of(ref: V.Ref, hit: Any = hit, src: Any = src) -> Any:
                return _value_of(mp, add, hit, src, ref)

            for col_name, compiled in clause.values.items():
                new = compiled.evaluate(value_of, hit.num_rows)
                _check_new(local, add, col_name, new)
                if col_name in columns:  # (partition columns were checked to keep their value)
                    columns[col_name] = pc.replace_with_mask(_flat(columns[col_name]), arrow_mask, new)
        out_cols = pa.Table.from_arrays([_flat(columns[f.name]) for f in local.schema], schema=local.schema)
        touched[add.path] = (add, RowIndexSet.from_iter(np.sort(positions[changed_rows]).astype(np.uint64)))
        tally.append(c)
        return out_cols.filter(pa.array((changed_rows & keep) if dvs else keep))

    def inserts(write: Callable[[Any, str, dict[str, str | None]], AddFile | None]) -> None:
        if mp.insert is None:
            return
        matched_sids = np.unique(ps)
        new_rows = np.ones(s_n, dtype=bool)
        new_rows[matched_sids] = False
        ins = source.filter(pa.array(new_rows))
        if not ins.num_rows:
            return
        counts["insert"] = ins.num_rows
        cols = []
        for f in local.schema:
            compiled = mp.insert.values.get(f.name)
            if compiled is None:
                new = pa.nulls(ins.num_rows, f.type)
            else:
                new = compiled.evaluate(lambda ref: _value_of(mp, None, None, ins, ref), ins.num_rows)
            _check_new(local, None, f.name, new)
            cols.append(new)
        write(pa.Table.from_arrays(cols, schema=local.schema), "", {})

    written = rewrite_files(local, jobs, rewrite, extra=inserts)
    for c in tally:
        for name, v in c.items():
            counts[name] += v
    return MergeOutcome(touched, counts, written, matched)


def _flat(col: Any) -> Any:
    import pyarrow as pa

    return col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col


def _mask(value: Any, n: int) -> Any:
    """A numpy bool array from an Arrow boolean result (NULL counts as false) or a constant."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    if value is None or value is False:
        return np.zeros(n, dtype=bool)
    if value is True:
        return np.ones(n, dtype=bool)
    if isinstance(value, pa.Scalar):
        return np.full(n, bool(value.as_py()), dtype=bool)
    return pc.fill_null(_flat(value), False).to_numpy(zero_copy_only=False).astype(bool)


def _value_of(mp: MergePlan, add: AddFile | None, target_rows: Any, source_rows: Any, ref: V.Ref) -> Any:
    """A referenced column: target rows (or the file's partition value), or source rows."""
    if ref.qualifier == "\0s":
        side, name = _S, mp.source_schema.field(ref.name).name  # type: ignore[union-attr]
    else:
        side, name = mp.sides[(ref.qualifier, ref.name)]  # every reference was resolved while planning
    if side == _S:
        return source_rows.column(name)
    value = mp.local.partition_scalar(add, name) if add is not None else None
    return target_rows.column(name) if value is None else value


def _check_new(local: DriverTable, add: AddFile | None, column: str, new: Any) -> None:
    """New values Spark would refuse (NULL in NOT NULL), or that would move rows to another partition."""
    import pyarrow.compute as pc

    snap = local.snap
    check_not_null(local, column, new)
    if not any(p.lower() == column.lower() for p in snap.partition_columns):
        return
    if add is None:
        raise NotExact(f"insert into partition column {column}")
    value = local.partition_scalar(add, column)
    if value.as_py() is None:
        same = new.null_count == len(new)
    else:
        same = new.null_count == 0 and pc.all(pc.equal(new, value.cast(new.type))).as_py() is not False
    if not same:
        raise NotExact(f"the new value of partition column {column} moves rows to another partition")


def _read_columns(local: DriverTable, add: AddFile, names: Sequence[str]) -> tuple[Any, Any]:
    """Some columns of ``add`` (partition columns as constants) for its live rows, and their positions."""
    import pyarrow as pa

    parts = {p.lower() for p in local.snap.partition_columns}
    stored = [local.snap.schema.field(n).name for n in names if n.lower() not in parts]
    table, positions = local.read(add, positions=True, columns=stored)
    for name in names:
        value = local.partition_scalar(add, name)
        if value is not None:
            table = table.append_column(pa.field(name, value.type), pa.repeat(value, len(positions)))
    return table, positions

