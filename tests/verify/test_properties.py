"""Property tests: checkpoint replay equals replay from version 0; partition predicates agree with Spark.

(The action JSON round trip lives in tests/core/model/test_actions.py.)
"""

from __future__ import annotations

import datetime as dt
import json
import tempfile
import time
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from serialake.core.log.deltalog import DeltaLog
from serialake.core.log.snapshot import Snapshot, TableState
from serialake.core.model.actions import (
    AddFile,
    CommitInfo,
    DeletionVectorDescriptor,
    DomainMetadata,
    Metadata,
    Protocol,
    RemoveFile,
    SetTransaction,
    actions_to_jsonl,
)
from serialake.core.model.properties import DELETED_FILE_RETENTION, get
from serialake.core.model.schema import StructType
from serialake.core.predicates import expressions as P
from serialake.core.predicates import skipping
from serialake.storage.local import LocalLogStore

# -- replay from a checkpoint == replay from version 0 ---------------------------------------

_SCHEMA = json.dumps(
    {
        "type": "struct",
        "fields": [
            {"name": "p", "type": "string", "nullable": True, "metadata": {}},
            {"name": "x", "type": "long", "nullable": True, "metadata": {}},
        ],
    }
)
_PROTOCOL = Protocol(3, 7, ("deletionVectors",), ("deletionVectors", "domainMetadata"))
_NOW = int(time.time() * 1000)
_EXPIRED = 1_000  # a deletion timestamp long past any retention
_PATHS = [f"p={p}/f{i}.parquet" for p in ("a", "b") for i in range(3)] + ["p=__HIVE_DEFAULT_PARTITION__/n.parquet"]
_DVS = [
    DeletionVectorDescriptor(storage_type="u", path_or_inline_dv="ab^-aqEH.-t@S}K{vb[*k^", size_in_bytes=34,
                             cardinality=2, offset=1),
    DeletionVectorDescriptor(storage_type="i", path_or_inline_dv="wi5b=000010000siXQKl0rr91000f55c8Xg0@@D72lkbi5=-{L",
                             size_in_bytes=40, cardinality=6),
]  # fmt: skip


def _partition(path: str) -> dict[str, str | None]:
    value = path.split("/")[0].split("=", 1)[1]
    return {"p": None if value == "__HIVE_DEFAULT_PARTITION__" else value}


_file_op = st.tuples(
    st.sampled_from(["add", "add", "remove"]),
    st.sampled_from(_PATHS),
    st.sampled_from([None, None, *_DVS]),
    st.sampled_from([_NOW, _NOW - 1, _EXPIRED, None]),  # remove timestamps: fresh, expired, absent
    st.one_of(st.none(), st.dictionaries(st.sampled_from(["k", "z"]), st.text("ab", max_size=3), max_size=2)),
    st.integers(0, 50),  # numRecords
)
_other_op = st.one_of(
    st.tuples(st.just("txn"), st.sampled_from(["app1", "app2"]), st.integers(0, 99)),
    st.tuples(st.just("domain"), st.sampled_from(["d1", "d2"]), st.text("xy", max_size=3), st.booleans()),
    st.tuples(st.just("meta"), st.sampled_from(["1", "2", "3"])),
)
_commit = st.lists(st.one_of(_file_op, _file_op, _other_op), min_size=1, max_size=6)


def _actions(ops: list[tuple[Any, ...]], version: int) -> list[Any]:
    """One commit's actions; a file key appears at most once per commit (as in any real commit)."""
    out: list[Any] = [CommitInfo({"timestamp": _NOW, "operation": "WRITE", "txnId": f"t{version}"})]
    seen_keys: set[tuple[str, str | None]] = set()
    seen_other: set[tuple[str, str]] = set()
    for op in ops:
        kind = op[0]
        if kind in ("add", "remove"):
            _, path, dv, ts, tags, n = op
            key = (path, dv.unique_id if dv else None)
            if key in seen_keys:
                continue
            seen_keys.add(key)
            common: dict[str, Any] = dict(
                path=path, partition_values=_partition(path), size=100 + n, data_change=True,
                tags=tags, deletion_vector=dv,
            )  # fmt: skip
            if kind == "add":
                out.append(AddFile(**common, stats=json.dumps({"numRecords": n}), modification_time=_NOW + n))
            else:
                out.append(RemoveFile(**common, deletion_timestamp=ts, extended_file_metadata=True))
        elif (kind, op[1]) not in seen_other:
            seen_other.add((kind, op[1]))
            if kind == "txn":
                out.append(SetTransaction(app_id=op[1], version=op[2], last_updated=_NOW))
            elif kind == "domain":
                out.append(DomainMetadata(domain=op[1], configuration=op[2], removed=op[3]))
            else:
                out.append(_metadata({"delta.checkpointInterval": "1000", "custom.rev": op[1]}))
    return out


_META_ID = "7c3a5e4e-0000-4000-8000-000000000001"


def _metadata(conf: dict[str, str]) -> Metadata:
    return Metadata(schema_string=_SCHEMA, partition_columns=("p",), configuration=conf, id=_META_ID, created_time=1)


def _state(s: TableState | Snapshot) -> dict[str, Any]:
    """Full comparable state; tombstones as key -> (deletion timestamp, partition values, size)."""
    if isinstance(s, Snapshot):
        files, tombs = {a.key: a for a in s.all_files}, {r.key: r for r in s.tombstones}
        txns, domains, proto, meta = s.set_transactions, s.domain_metadata, s.protocol, s.metadata
    else:
        if hasattr(s, "materialize"):
            s.materialize()
        files, tombs, txns, domains, proto, meta = s.files, s.tombstones, s.txns, s.domains, s.protocol, s.metadata
    return {
        "files": files,
        "tombstones": {
            k: (r.deletion_timestamp, r.partition_values, r.size, r.deletion_vector) for k, r in tombs.items()
        },
        "txns": {k: (t.version, t.last_updated) for k, t in txns.items()},
        "domains": {k: (d.configuration, d.removed) for k, d in domains.items()},
        "protocol": proto,
        "metadata": meta,
    }


def _expected(log: DeltaLog, latest: int, cp: int, cutoff: int) -> TableState:
    """Replay from 0 to the checkpoint, drop expired tombstones (as a checkpoint may), replay the rest."""
    state = TableState()
    for v in range(cp + 1):
        state.apply(log.read_commit(v).actions)
    state.tombstones = {k: r for k, r in state.tombstones.items() if (r.deletion_timestamp or 0) > cutoff}
    for v in range(cp + 1, latest + 1):
        state.apply(log.read_commit(v).actions)
    return state


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(commits=st.lists(_commit, min_size=1, max_size=10), data=st.data())
def test_replay_from_a_checkpoint_equals_replay_from_version_zero(commits: list[Any], data: st.DataObject) -> None:
    cp = data.draw(st.integers(0, len(commits)), label="checkpoint version")
    with tempfile.TemporaryDirectory() as tmp:
        store = LocalLogStore(fsync=False)
        log = DeltaLog(f"{tmp}/t", store=store)
        first = [
            CommitInfo({"timestamp": _NOW, "txnId": "t0"}), _PROTOCOL, _metadata({"delta.checkpointInterval": "1000"})
        ]
        store.put_if_absent(log.commit_path(0), actions_to_jsonl(first))
        for v, ops in enumerate(commits, 1):
            store.put_if_absent(log.commit_path(v), actions_to_jsonl(_actions(ops, v)))
        latest = len(commits)
        cp_meta = log.snapshot(cp).metadata
        cutoff = int(time.time() * 1000) - get(cp_meta.configuration, DELETED_FILE_RETENTION)
        log.checkpoint(cp)
        DeltaLog.clear_cache()
        fresh = DeltaLog(f"{tmp}/t", store=store)
        snap = fresh.update()
        assert snap.version == latest
        assert snap.segment is not None and snap.segment.checkpoint is not None
        assert snap.segment.checkpoint.version == cp
        plain = TableState()
        for v in range(latest + 1):
            plain.apply(log.read_commit(v).actions)
        want = _state(_expected(log, latest, cp, cutoff))
        got = _state(snap)
        for part in ("files", "txns", "domains", "protocol", "metadata"):
            assert got[part] == _state(plain)[part], part  # exactly the replay from version 0
        assert got["tombstones"] == want["tombstones"]  # the same, minus tombstones expired at checkpoint time
        at_cp = _state(fresh.snapshot(cp))
        assert at_cp["files"] == _state(_expected(log, cp, cp, cutoff))["files"]


# -- partition predicates: core evaluation == Spark -------------------------------------------

_COLUMNS = {"s": "string", "i": "integer", "d": "date", "b": "boolean"}
_PART_SCHEMA = StructType.from_json(
    json.dumps(
        {
            "type": "struct",
            "fields": [{"name": n, "type": t, "nullable": True, "metadata": {}} for n, t in _COLUMNS.items()],
        }
    )
)
_STRINGS = ["", "a", "b", "ab", "ba", "A", "a b", "abc", "é", "10", "9"]
_INTS = [-2147483648, -5, -1, 0, 1, 2, 3, 10, 2147483647]
_DATES = [dt.date(1970, 1, 1), dt.date(2024, 2, 29), dt.date(2024, 3, 1), dt.date(1999, 12, 31)]


def _lit(col: str, v: Any) -> str:
    if v is None:
        return "NULL"
    if col == "s":
        return f"'{v}'"
    if col == "d":
        return f"DATE'{v.isoformat()}'"
    if col == "b":
        return "true" if v else "false"
    return str(v)


def _values(col: str) -> st.SearchStrategy[Any]:
    return {
        "s": st.sampled_from(_STRINGS),
        "i": st.sampled_from(_INTS) | st.integers(-20, 20),
        "d": st.sampled_from(_DATES),
        "b": st.booleans(),
    }[col]


@st.composite
def _atom(draw: st.DrawFn) -> str:
    col = draw(st.sampled_from(list(_COLUMNS)))
    value = _values(col)
    maybe_null = st.one_of(value, st.none()) if draw(st.integers(0, 5)) == 0 else value
    kind = draw(st.sampled_from(["cmp", "cmp", "in", "null", "between", "like", "bool"]))
    if kind == "null":
        return f"{col} IS {'NOT ' if draw(st.booleans()) else ''}NULL"
    if kind == "in":
        opts = draw(st.lists(maybe_null, min_size=1, max_size=4))
        return f"{col} {'NOT ' if draw(st.booleans()) else ''}IN ({', '.join(_lit(col, o) for o in opts)})"
    if kind == "between" and col in ("i", "d", "s"):
        return f"{col} BETWEEN {_lit(col, draw(value))} AND {_lit(col, draw(value))}"
    if kind == "like" and col == "s":
        pattern = draw(st.text(alphabet="ab%_", max_size=4))
        return f"s {'NOT ' if draw(st.booleans()) else ''}LIKE '{pattern}'"
    if kind == "bool" and col == "b":
        return draw(st.sampled_from(["b", "NOT b"]))
    op = draw(st.sampled_from(["=", "!=", "<", "<=", ">", ">=", "<=>"]))
    lhs, rhs = col, _lit(col, draw(maybe_null))
    return f"{rhs} {op} {lhs}" if draw(st.booleans()) else f"{lhs} {op} {rhs}"


_predicate = st.recursive(
    _atom(),
    lambda inner: st.one_of(
        st.tuples(inner, inner).map(lambda t: f"({t[0]} AND {t[1]})"),
        st.tuples(inner, inner).map(lambda t: f"({t[0]} OR {t[1]})"),
        inner.map(lambda t: f"NOT ({t})"),
    ),
    max_leaves=4,
)
_row = st.tuples(*(st.one_of(st.none(), _values(c)) for c in _COLUMNS))


def _as_partition_values(row: tuple[Any, ...]) -> dict[str, str | None]:
    """How the Delta log stores the row's partition values (strings; NULL as null)."""
    out: dict[str, str | None] = {}
    for (col, _), v in zip(_COLUMNS.items(), row):
        if v is None:
            out[col] = None
        elif col == "b":
            out[col] = "true" if v else "false"
        elif col == "d":
            out[col] = v.isoformat()
        else:
            out[col] = str(v)
    return out


@pytest.fixture(scope="module")
def spark_df_factory(spark: Any) -> Any:
    from pyspark.sql.types import BooleanType, DateType, IntegerType, LongType, StringType, StructField
    from pyspark.sql.types import StructType as ST

    schema = ST(
        [StructField("id", LongType(), False), StructField("s", StringType()), StructField("i", IntegerType()),
         StructField("d", DateType()), StructField("b", BooleanType())]
    )  # fmt: skip

    def make(rows: list[tuple[Any, ...]]) -> Any:
        return spark.createDataFrame([(n, *r) for n, r in enumerate(rows)], schema)

    return make


@pytest.mark.spark
@settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(preds=st.lists(_predicate, min_size=1, max_size=10), rows=st.lists(_row, min_size=1, max_size=30))
def test_partition_predicates_agree_with_spark(
    spark_df_factory: Any, preds: list[str], rows: list[tuple[Any, ...]]
) -> None:
    """Per row: the core's partition match == whether Spark's ``filter(pred)`` keeps the row.

    All predicates of an example run in ONE Spark query: ``filter(p)`` keeps exactly the rows
    where ``coalesce((p), false)`` is true, so each predicate becomes one projected column.
    About 30 examples x up to 10 predicates x up to 30 rows (NULLs in every column).
    """
    from pyspark.sql import functions as F

    cols = [F.expr(f"coalesce(({p}), false)").alias(f"c{k}") for k, p in enumerate(preds)]
    result = spark_df_factory(rows).select("id", *cols).collect()
    for k, pred in enumerate(preds):
        matcher = skipping.compile_predicate(P.parse_predicate(pred), _PART_SCHEMA, list(_COLUMNS))
        core = {n for n, r in enumerate(rows) if matcher(_as_partition_values(r), None)}
        spark_ids = {r["id"] for r in result if r[f"c{k}"]}
        assert core == spark_ids, (
            f"{pred}: core-only rows {[rows[n] for n in sorted(core - spark_ids)]}, "
            f"spark-only rows {[rows[n] for n in sorted(spark_ids - core)]}"
        )


# -- row predicates: the driver's exact evaluation == Spark ------------------------------------


@st.composite
def _row_predicate(draw: st.DrawFn) -> str:
    """A predicate over the rows: the partition grammar plus column-vs-column and ISO-string dates."""
    kind = draw(st.integers(0, 5))
    if kind == 0:
        return f"i {draw(st.sampled_from(['=', '<', '>=', '<=>', '!=']))} id"
    if kind == 1:
        day = draw(st.sampled_from(_DATES))
        return f"d {draw(st.sampled_from(['=', '<', '>']))} '{day.isoformat()}'"
    return draw(_predicate)


@pytest.mark.spark
@settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    preds=st.lists(st.recursive(_row_predicate(), lambda inner: st.tuples(inner, inner).map(
        lambda t: f"({t[0]} AND {t[1]})") | inner.map(lambda t: f"NOT ({t})"), max_leaves=3), min_size=1, max_size=10),
    rows=st.lists(_row, min_size=1, max_size=30),
)
def test_exact_row_evaluation_agrees_with_spark(
    spark_df_factory: Any, tmp_path_factory: Any, preds: list[str], rows: list[tuple[Any, ...]]
) -> None:
    """For every predicate the core claims to evaluate exactly (``inexact_reason`` is None), the
    rows its pyarrow evaluation matches in a Parquet file are exactly the rows Spark's filter keeps.

    This is what lets DELETE / UPDATE find their rows on the driver instead of in a Spark job.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq
    from pyspark.sql import functions as F

    from serialake.core.predicates import row_eval

    schema = StructType.from_json(json.dumps({"type": "struct", "fields": [
        {"name": "id", "type": "long", "nullable": False, "metadata": {}},
        *({"name": n, "type": t, "nullable": True, "metadata": {}} for n, t in _COLUMNS.items())]}))
    folder = tmp_path_factory.mktemp("rows")
    cols = list(zip(*rows))
    pq.write_table(pa.table({"id": pa.array(range(len(rows)), pa.int64()), "s": pa.array(cols[0], pa.string()),
                             "i": pa.array(cols[1], pa.int32()), "d": pa.array(cols[2], pa.date32()),
                             "b": pa.array(cols[3], pa.bool_())}), folder / "f.parquet")
    add = AddFile(path="f.parquet", partition_values={}, size=1, modification_time=0, data_change=True,
                  stats=json.dumps({"numRecords": len(rows)}))
    snap = type("Snap", (), {"schema": schema, "partition_columns": ()})()
    reader = row_eval.RowReader(str(folder), snap)
    result = spark_df_factory(rows).select(
        "id", *(F.expr(f"coalesce(({p}), false)").alias(f"c{k}") for k, p in enumerate(preds))).collect()
    for k, pred in enumerate(preds):
        expr = P.parse_predicate(pred)
        if row_eval.inexact_reason(expr, schema) is not None:
            continue
        core = set(reader.matching_rows(add, expr).to_numpy().tolist())
        spark_ids = {r["id"] for r in result if r[f"c{k}"]}
        assert core == spark_ids, f"{pred}: core-only {sorted(core - spark_ids)}, spark-only {sorted(spark_ids - core)}"


def test_inexact_predicates_are_left_to_spark() -> None:
    """The subset is strict: casts, floats, LIKE, functions and qualified columns are not exact."""
    from serialake.core.predicates import row_eval

    schema = StructType.from_json(json.dumps({"type": "struct", "fields": [
        {"name": n, "type": t, "nullable": True, "metadata": {}}
        for n, t in {"i": "integer", "s": "string", "x": "double", "ts": "timestamp", "d": "date"}.items()]}))
    exact = ["i < 5", "s = 'a' AND i IS NOT NULL", "i IN (1, NULL)", "NOT (s <=> NULL)", "d = '2024-01-01'",
             "d >= DATE'2024-01-01' OR i = 3"]
    inexact = ["i < '5'", "s = 5", "x > 1.0", "ts < '2024-01-01'", "s LIKE 'a%'", "upper(s) = 'A'", "i + 1 = 2",
               "t.i = 1", "d = '2024-1-1'", "i < 1.5", "missing = 1", "i = true"]
    for text in exact:
        assert row_eval.inexact_reason(P.parse_predicate(text), schema) is None, text
    for text in inexact:
        assert row_eval.inexact_reason(P.parse_predicate(text), schema) is not None, text


# -- SET values: the driver's exact computation == Spark ----------------------------------------

_NUM_COLUMNS = {"b": "byte", "sh": "short", "i": "integer", "l": "long", "x": "double", "dc": "decimal(10,2)"}
_EDGE_INTS = [0, 1, -1, 7, 100, 127, -128, 32767, 2**31 - 1, -(2**31), 2**40, 2**62, 2**63 - 1, -(2**63)]


def _int_in(kind: str) -> st.SearchStrategy[int | None]:
    bound = {"byte": 2**7, "short": 2**15, "integer": 2**31, "long": 2**63}[kind]
    edges = [v for v in _EDGE_INTS if -bound <= v < bound]
    return st.none() | st.sampled_from(edges) | st.integers(max(-bound, -1000), min(bound - 1, 1000))


_num_row = st.tuples(
    _int_in("byte"), _int_in("short"), _int_in("integer"), _int_in("long"),
    st.none() | st.floats(allow_nan=True, allow_infinity=True, width=64) | st.sampled_from([0.5, -0.0, 1e300, 2.0**53]),
    st.none() | st.decimals(min_value=-(10**8) + 1, max_value=10**8 - 1, places=2,
                            allow_nan=False, allow_infinity=False),
)  # fmt: skip

_value_leaf = st.sampled_from(list(_NUM_COLUMNS)) | st.sampled_from(
    ["1", "-1", "2", "0", "127", "2147483647", "2147483648", "-2147483648", "9223372036854775807", "1.5", "0.1",
     "2e0", "1e300", "-3.25e2"])  # fmt: skip


def _value_node(inner: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    return st.tuples(inner, st.sampled_from(["+", "-", "*"]), inner).map(lambda t: f"({t[0]} {t[1]} {t[2]})") | (
        inner.map(lambda t: f"-({t})"))


@pytest.mark.spark
@settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    exprs=st.lists(st.tuples(st.recursive(_value_leaf, _value_node, max_leaves=4),
                             st.sampled_from(["long", "integer", "double", "short", "decimal(10,2)"])),
                    min_size=1, max_size=10),
    rows=st.lists(_num_row, min_size=1, max_size=20),
)
def test_exact_values_agree_with_spark(spark: Any, exprs: list[tuple[str, str]], rows: list[tuple[Any, ...]]) -> None:
    """Every SET value the core computes (``core.predicates.values``; refused ones and overflows are left
    to Spark) equals what Spark stores: ``expr(value).cast(column type)``, as UPDATE does.

    Spark runs with ANSI mode on (its default): had an integral overflow happened anywhere,
    the core would have refused and Spark raised, so each accepted value must also succeed there.
    """
    import math

    import pyarrow as pa
    from pyspark.sql import functions as F
    from pyspark.sql.types import ByteType, DecimalType, DoubleType, IntegerType, LongType, ShortType, StructField
    from pyspark.sql.types import StructType as ST

    from serialake.core.predicates import values as V

    spark_types = {"byte": ByteType(), "short": ShortType(), "integer": IntegerType(), "long": LongType(),
                   "double": DoubleType(), "decimal(10,2)": DecimalType(10, 2)}
    arrow = {"byte": pa.int8(), "short": pa.int16(), "integer": pa.int32(), "long": pa.int64(), "double": pa.float64(),
             "decimal(10,2)": pa.decimal128(10, 2)}
    columns = {n: pa.array([r[k] for r in rows], arrow[t]) for k, (n, t) in enumerate(_NUM_COLUMNS.items())}
    ours: list[tuple[str, str, list[Any]]] = []
    for text, target in exprs:
        try:
            compiled = V.compile_value(V.parse_value(text), lambda ref: _NUM_COLUMNS.get(ref.name) if not ref.qualifier
                                       else None, target)
            ours.append((text, target, compiled.evaluate(lambda ref: columns[ref.name], len(rows)).to_pylist()))
        except V.NotExact:
            continue
    if not ours:
        return
    df = spark.createDataFrame(rows, ST([StructField(n, spark_types[t]) for n, t in _NUM_COLUMNS.items()]))
    result = df.select(*(F.expr(text).cast(spark_types[target]).alias(f"v{k}")
                         for k, (text, target, _) in enumerate(ours))).collect()

    def same(a: Any, b: Any) -> bool:
        if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
            return True
        return a == b and type(a) is type(b)

    for k, (text, target, values) in enumerate(ours):
        theirs = [r[f"v{k}"] for r in result]
        bad = [(rows[n], a, b) for n, (a, b) in enumerate(zip(values, theirs)) if not same(a, b)]
        assert not bad, f"{text} as {target}: (row, core, spark) {bad[:3]}"


def test_values_outside_the_subset_are_left_to_spark() -> None:
    """Division, casts, functions, decimals in integral arithmetic, narrowing stores and unknown
    columns are refused; the accepted subset is typed as Spark types it."""
    from serialake.core.predicates import values as V

    types = {"i": "integer", "l": "long", "x": "double", "s": "string", "f": "float", "d": "date"}

    def compile_(text: str, target: str) -> V.Compiled:
        return V.compile_value(V.parse_value(text), lambda r: types.get(r.name) if r.qualifier in (None, "t") else None,
                               target)

    accepted = {("i + 1", "integer"): "integer", ("i + 1", "long"): "integer", ("l * i", "long"): "long",
                ("x + 1.5", "double"): "double", ("t.i - 2147483648", "long"): "long", ("-5", "integer"): "integer",
                ("NULL", "string"): "string", ("'a'", "string"): "string", ("s", "string"): "string",
                ("i", "double"): "integer", ("d", "date"): "date"}
    for (text, target), kind in accepted.items():
        assert compile_(text, target).kind == kind, text
    refused = [("x / 2", "double"), ("i / 2", "integer"), ("CAST(x AS INT)", "integer"), ("abs(i)", "integer"),
               ("i + 1.5", "double"), ("l + 1", "integer"), ("x", "long"), ("f + 1", "float"), ("s || 'a'", "string"),
               ("1", "string"), ("q.i", "integer"), ("missing + 1", "long"), ("i + NULL", "integer"),
               ("CASE WHEN i > 1 THEN 1 ELSE 2 END", "integer"), ("1L", "long"), ("d + 1", "date")]
    for text, target in refused:
        with pytest.raises(V.NotExact):
            compile_(text, target)
