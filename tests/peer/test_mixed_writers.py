"""delta-spark and serialake writing one table at once.

(a) Deterministic pairs: cells of the conflict matrix (peer/parity.py) with one operation
from each engine on one table, both planned from the same version. When serialake commits
second (delta-spark's commit lands in its ``before_first_commit``), it raises what the
matrix says; when delta-spark commits second (it waits at the commit gate while serialake
commits), it raises what it raised against itself in the parity run (docs/parity.md). The
rows, read by both engines, are those of a serial order.

(b) Free-running: threads of both engines run operations on one table at once. Every commit
is traced to its operation (delta-spark's by ``commitInfo.userMetadata``, serialake's by its
``txnId``); replaying the committed operations in log order on a Python model gives exactly
the rows both engines read; every failed operation failed with a conflict and left nothing.
The table is at Serializable, where the log's order is a serial order.
"""

from __future__ import annotations

import json
import random
import re
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from peer.client import ROOT, DeltaSparkPeer, PeerError
from peer.ops import (
    OPTIMIZE,
    Layout,
    Op,
    Row,
    append,
    base_row,
    delete,
    delta_spark_rows,
    merge_rows,
    serialake_exec,
    serialake_rows,
    small_tables,
    small_tables_session,
    sql,
    update,
)
from peer.parity import (
    CELLS,
    COMMITS,
    CONFLICTS,
    MATRIX_ORDER,
    SERIALIZABLE,
    SWAPPED_ORDER,
    Cell,
    Outcome,
    matches,
    read_document,
    serial_outcomes,
)
from peer.plain import plain_rows
from serialake.exceptions import DeltaConcurrentModificationException
from tests.helpers import before_first_commit, serialake_commits

pytestmark = [pytest.mark.spark, pytest.mark.peer]

LEVEL = SERIALIZABLE  # delta-spark's only level
# delta-spark's conflict exceptions: the matrix's six and its generic one
DELTA_SPARK_CONFLICTS = CONFLICTS | {"ConcurrentWriteException"}

# -- (a) deterministic pairs -------------------------------------------------------------------

PAIRS = [
    ("DELETE × INSERT", MATRIX_ORDER),  # DELETE and an append, unpartitioned, no deletion vectors
    ("UPDATE × DELETE, same file", MATRIX_ORDER),
    ("MERGE × DELETE, other partitions", MATRIX_ORDER),  # partitioned
    ("OPTIMIZE × MERGE, same files", SWAPPED_ORDER),  # MERGE after OPTIMIZE
    ("15b", MATRIX_ORDER),  # INSERT ... SELECT after OPTIMIZE, partitioned
    ("R1", MATRIX_ORDER),  # deletion vectors, unpartitioned: two DELETEs of one file
    ("R4", MATRIX_ORDER),  # OPTIMIZE after a DELETE of one of its inputs' rows
    ("R6", MATRIX_ORDER),  # UPDATE after a MERGE in one file
    # deletion vectors, partitioned: DELETE after delta-spark's OPTIMIZE, whose outputs carry no row
    # mapping: the DELETE's marks are carried onto them by row content (core.txn.row_matching)
    ("R4 (partitioned)", SWAPPED_ORDER),
]
BY_NAME = {c.name: c for c in CELLS}


def _pairs(xfail: dict[tuple[str, str], pytest.MarkDecorator]) -> list[Any]:
    return [pytest.param(n, o, id=f"{n}-{o}", marks=xfail.get((n, o), ())) for n, o in PAIRS]


@pytest.fixture(scope="module", autouse=True)
def _small_tables(spark: SparkSession) -> Iterator[None]:
    with small_tables_session(spark):
        yield


@pytest.fixture(scope="module")
def delta_spark_outcomes() -> dict[tuple[str, str, str], tuple[str, str]]:
    return read_document((ROOT / "docs" / "parity.md").read_text())


def _rows_of_a_serial_order(spark: SparkSession, delta_spark: DeltaSparkPeer, cell: Cell, order: str, path: str,
                            committed: bool) -> None:  # fmt: skip
    serial = serial_outcomes(cell, order, committed)
    ours, theirs = serialake_rows(spark, path), delta_spark_rows(delta_spark, path)
    assert ours in serial, f"serialake reads rows of no serial order: {ours}, expected one of {serial}"
    assert theirs == ours, f"delta-spark reads {theirs}, serialake {ours}"


@pytest.mark.parametrize(("name", "order"), _pairs({}))
def test_serialake_commits_second(
    spark: SparkSession,
    delta_spark: DeltaSparkPeer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    name: str,
    order: str,
) -> None:
    """delta-spark builds the table and commits first; serialake raises what the matrix says."""
    cell = BY_NAME[name]
    first, second = cell.first_second(order)
    path = str(tmp_path / "t")
    delta_spark.run(small_tables(cell.layout.build_code(path, LEVEL)))
    ran: list[bool] = []

    def delta_spark_commits() -> None:
        delta_spark.run(small_tables(first.code(path)), level=LEVEL)
        ran.append(True)

    try:
        with before_first_commit(monkeypatch, delta_spark_commits):
            serialake_exec(spark, second.code(path), level=LEVEL)
        got = COMMITS
    except DeltaConcurrentModificationException as e:
        got = type(e).__name__
    assert ran, "serialake's operation made no commit"
    _rows_of_a_serial_order(spark, delta_spark, cell, order, path, got == COMMITS)
    expected = cell.expected(LEVEL, order)
    assert matches(expected, Outcome(got, True)), f"serialake: {got}, the matrix: {expected.text()}"


@pytest.mark.parametrize(("name", "order"), _pairs({}))
def test_delta_spark_commits_second(
    spark: SparkSession,
    delta_spark: DeltaSparkPeer,
    delta_spark_outcomes: dict[tuple[str, str, str], tuple[str, str]],
    tmp_path: Path,
    name: str,
    order: str,
) -> None:
    """serialake builds the table and commits first; delta-spark raises what it raised against
    itself in the parity run."""
    cell = BY_NAME[name]
    first, second = cell.first_second(order)
    path = str(tmp_path / "t")
    serialake_exec(spark, cell.layout.build_code(path, LEVEL))
    gate = tmp_path / "gate"
    pending = delta_spark.submit_commit_gated(small_tables(second.code(path), own_session=False), path, gate,
                                              level=LEVEL)  # fmt: skip
    try:
        serialake_exec(spark, first.code(path), level=LEVEL)
    finally:
        delta_spark.release(gate)
    try:
        pending.result(timeout=180)
        got = COMMITS
    except PeerError as e:
        got = e.type
    _rows_of_a_serial_order(spark, delta_spark, cell, order, path, got == COMMITS)
    expected = delta_spark_outcomes[(cell.name, LEVEL, order)][0]
    assert got == expected, f"delta-spark after serialake: {got}; against itself (docs/parity.md): {expected}"


# -- (b) free-running --------------------------------------------------------------------------

COMMIT_FILE = re.compile(r"\d{20}\.json")
BASE_ROWS = 24  # ids 0-23, in two appends
OPS_PER_THREAD = 5
THREADS = ("serialake", "serialake", "delta-spark", "delta-spark")


@dataclass
class Job:
    """One operation of a free-running thread and what became of it."""

    tag: str
    engine: str
    op: Op
    start: int = -1  # the table's latest version before the operation started, and after it ended
    end: int = -1
    error: str | None = None  # the exception's class name when it failed
    txn_ids: list[str] = field(default_factory=list)  # serialake: the transactions it committed


def _plan(rng: random.Random, n: int, partitioned: bool) -> Op:
    """Operation ``n``: its rows and values carry ``n``, so no two operations write the same thing."""
    kind = rng.choice(["append", "append", "delete", "update", "update", "merge", "merge", "optimize"])
    k = rng.randrange(BASE_ROWS)
    if kind == "append":
        return append(Row(1000 * n, 1 + n % 3, "a", n), Row(1000 * n + 1, 1 + n % 3, "b", n))
    if kind == "delete":
        return delete(f"id = {k}", lambda r: r.id == k)
    if kind == "update":
        if partitioned and rng.random() < 0.5:
            q = 1 + k % 3
            return update(f"x = x * 2 + {n}", lambda r: r._replace(x=r.x * 2 + n), f"p = {q}", lambda r: r.p == q)
        return update(f"x = x * 2 + {n}", lambda r: r._replace(x=r.x * 2 + n), f"id = {k}", lambda r: r.id == k)
    if kind == "merge":
        source = [Row(k, 1 + k % 3, "ab"[k % 2], n), Row(1000 * n, 1 + n % 3, "a", n)]
        return merge_rows(source, "t.id = s.id", lambda t, s: t.id == s.id, insert=True)
    if partitioned:
        q = 1 + k % 3
        return sql(f"OPTIMIZE {{t}} WHERE p = {q}", list)
    return OPTIMIZE


def _tagged(code: str, tag: str) -> str:
    """delta-spark's request, in a session of its own whose commits carry ``tag`` as userMetadata."""
    return small_tables(f"spark.conf.set('spark.databricks.delta.commitInfo.userMetadata', {tag!r})\n{code}")


def _commit_files(path: str) -> list[Path]:
    return sorted(f for f in (Path(path) / "_delta_log").glob("*.json") if COMMIT_FILE.fullmatch(f.name))


def _log(path: str) -> list[dict[str, Any]]:
    """Each commit's commitInfo, in version order, from the commit files themselves."""
    infos = []
    for file in _commit_files(path):
        for line in file.read_text().splitlines():
            action = json.loads(line)
            if "commitInfo" in action:
                infos.append({"version": int(file.stem), **action["commitInfo"]})
    return infos


def _latest(path: str) -> int:
    return int(_commit_files(path)[-1].stem)


VARIANTS = [(False, False), (True, False), (False, True), (True, True)]


@pytest.mark.parametrize(
    ("partitioned", "deletion_vectors"),
    VARIANTS,
    ids=[f"{'partitioned' if p else 'unpartitioned'}-{'dv' if d else 'no-dv'}" for p, d in VARIANTS],
)
def test_free_running_writers_leave_a_serial_history(
    spark: SparkSession,
    delta_spark: DeltaSparkPeer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    partitioned: bool,
    deletion_vectors: bool,
) -> None:
    path = str(tmp_path / "t")
    base = tuple(base_row(i) for i in range(BASE_ROWS))
    layout = Layout("mixed", "free-running", (base[:12], base[12:]), ("p",) if partitioned else (), deletion_vectors)
    builder = "serialake" if partitioned == deletion_vectors else "delta-spark"  # each engine builds some
    if builder == "serialake":
        serialake_exec(spark, layout.build_code(path, LEVEL))
    else:
        delta_spark.run(small_tables(layout.build_code(path, LEVEL)))
    setup = _latest(path)

    rng = random.Random(f"{partitioned}-{deletion_vectors}")
    counter = iter(range(1, 1000))
    plans = [[Job(f"op{n}", engine, _plan(rng, n, partitioned)) for n in [next(counter)
             for _ in range(OPS_PER_THREAD)]] for engine in THREADS]  # fmt: skip

    with serialake_commits(monkeypatch) as commits:

        def run(jobs: list[Job]) -> None:
            for job in jobs:
                job.start = _latest(path)
                try:
                    if job.engine == "delta-spark":
                        delta_spark.run(_tagged(job.op.code(path), job.tag), timeout=240)
                    else:
                        before = len(commits.get(threading.get_ident(), []))
                        try:
                            serialake_exec(spark, job.op.code(path))
                        finally:
                            made = commits.get(threading.get_ident(), [])[before:]
                            job.txn_ids = [txn for txn, version in made if version is not None]
                except PeerError as e:
                    job.error = e.type
                except DeltaConcurrentModificationException as e:
                    job.error = type(e).__name__
                except Exception as e:  # noqa: BLE001 - any other failure is reported below
                    job.error = f"{type(e).__name__}: {e}"
                job.end = _latest(path)

        threads = [threading.Thread(target=run, args=(jobs,), name=f"{jobs[0].engine}-{i}")
                   for i, jobs in enumerate(plans)]  # fmt: skip
        for t in threads:
            t.start()
        for t in threads:
            t.join(600)
        assert not any(t.is_alive() for t in threads), "a writer thread did not finish"

    jobs = [j for jobs in plans for j in jobs]
    by_tag = {j.tag: j for j in jobs if j.engine == "delta-spark"}
    by_txn = {txn: j for j in jobs for txn in j.txn_ids}

    # Every failure is a conflict; nothing else may fail.
    for job in jobs:
        if job.error is not None:
            conflicts = DELTA_SPARK_CONFLICTS if job.engine == "delta-spark" else CONFLICTS
            assert job.error in conflicts, f"{job.tag} ({job.engine}: {job.op.label}) failed with {job.error}"

    # Every version after the set-up is exactly one operation's commit, and a failed one made none.
    made: dict[int, Job] = {}
    for info in _log(path):
        if info["version"] <= setup:
            continue
        maker = by_tag.get(info.get("userMetadata", "")) or by_txn.get(info.get("txnId", ""))
        assert maker is not None, f"version {info['version']} is no operation's commit: {info}"
        assert maker.error is None, f"{maker.tag} failed ({maker.error}) but left version {info['version']}"
        assert maker.tag not in {j.tag for j in made.values()}, f"{maker.tag} made two versions"
        made[info["version"]] = maker
    committed = {j.tag for j in made.values()}
    assert sorted(made) == list(range(setup + 1, _latest(path) + 1))

    # Replaying the commits in log order gives the rows both engines read.
    states = {setup: list(layout.rows)}
    rows = list(layout.rows)
    for version in sorted(made):
        rows = made[version].op.model(rows)
        states[version] = rows
    expected = plain_rows(rows)
    assert serialake_rows(spark, path) == expected, "serialake reads other rows than the serial replay"
    assert delta_spark_rows(delta_spark, path) == expected, "delta-spark reads other rows"

    # An operation that succeeded without a commit changed nothing: it was a no-op on a version it could read.
    for job in jobs:
        if job.error is None and job.tag not in committed:
            seen = [states[v] for v in sorted(states) if job.start <= v <= job.end]
            assert any(plain_rows(job.op.model(s)) == plain_rows(s) for s in seen), (
                f"{job.tag} ({job.engine}: {job.op.label}) succeeded without a commit but was no no-op"
            )

    summary = {
        engine: {
            "committed": sum(j.engine == engine and j.tag in committed for j in jobs),
            "failed": sorted(j.error or "" for j in jobs if j.engine == engine and j.error),
            "no commit": sum(j.engine == engine and not j.error and j.tag not in committed for j in jobs),
        }
        for engine in ("serialake", "delta-spark")
    }
    print(f"versions {setup + 1}-{_latest(path)}: {summary}")
    assert all(s["committed"] for s in summary.values()), f"both engines must have committed: {summary}"
