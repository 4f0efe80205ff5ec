"""Derived tables (``core.tables.derived``): reads wait for them, agree with them, through several levels."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest

from serialake.core import DeltaLog
from serialake.core.tables import derived
from serialake.exceptions import DerivedTableLagError
from tests.core.conftest import add_file


def _append(log: DeltaLog, reads: dict[str, int] | None = None) -> int:
    txn = log.start_transaction()
    for table, version in (reads or {}).items():
        txn.record_table_read(table, version)
    return txn.commit([add_file(None)], operation="WRITE")


def _maintain(derived_log: DeltaLog, source: DeltaLog) -> int:
    """One maintenance commit: the derived table now reflects the source's latest version."""
    return _append(derived_log, {source.table_path: source.update().version})


@pytest.fixture
def chain(make_table: Callable[..., DeltaLog]) -> tuple[DeltaLog, DeltaLog, DeltaLog]:
    """A -> D1 -> D2: D1 maintained from A, D2 from D1, both caught up."""
    a = make_table(partitioned=False, files=[None])
    d1 = make_table(partitioned=False, files=[None], props={derived.MAINTAINED_FROM: a.table_path})
    d2 = make_table(partitioned=False, files=[None], props={derived.MAINTAINED_FROM: d1.table_path})
    _maintain(d1, a)
    _maintain(d2, d1)
    return a, d1, d2


def _cut(*logs: DeltaLog, strict: bool = True, wait_s: float = 0.2) -> dict[str, int]:
    snaps = derived.read_cut({log.table_path: None for log in logs}, strict=strict, timeout_s=5, wait_s=wait_s)
    return {p: s.version for p, s in snaps.items()}


def test_a_caught_up_chain_reads_at_once(chain: tuple[DeltaLog, DeltaLog, DeltaLog]) -> None:
    a, d1, d2 = chain
    assert _cut(d2, a) == {d2.table_path: d2.update().version, a.table_path: a.update().version}


def test_strict_waits_through_two_levels_then_reads_sources_as_reflected(
    chain: tuple[DeltaLog, DeltaLog, DeltaLog],
) -> None:
    a, d1, d2 = chain
    needed = _append(a)  # acknowledged before the read: D2 must reflect it through D1

    def maintainer() -> None:
        time.sleep(0.2)
        _maintain(d1, a)
        time.sleep(0.2)
        _maintain(d2, d1)

    thread = threading.Thread(target=maintainer)
    thread.start()
    try:
        got = _cut(d2, a, wait_s=10)
    finally:
        thread.join()
    assert got[a.table_path] == needed
    assert got[d2.table_path] == d2.update().version
    assert derived.reflected_version(d2.update(), d1.table_path) == d1.update().version


def test_strict_fails_naming_the_lagging_level(chain: tuple[DeltaLog, DeltaLog, DeltaLog]) -> None:
    a, d1, d2 = chain
    _append(a)
    _maintain(d1, a)  # D1 caught up, D2 did not
    with pytest.raises(DerivedTableLagError) as err:
        _cut(d2, wait_s=0.1)
    message = str(err.value)
    assert d2.table_path in message and d1.table_path in message
    assert "waited 0.1 s" in message


def test_serializable_never_waits_and_reads_sources_as_the_chain_reflects(
    chain: tuple[DeltaLog, DeltaLog, DeltaLog],
) -> None:
    a, d1, d2 = chain
    reflected_a = a.update().version
    reflected_d1 = d1.update().version
    _append(a)
    _maintain(d1, a)  # D2 still reflects the older D1, which reflects the older A
    started = time.monotonic()
    got = _cut(d2, d1, a, strict=False, wait_s=30)
    assert time.monotonic() - started < 5
    assert got == {d2.table_path: d2.update().version, d1.table_path: reflected_d1, a.table_path: reflected_a}


def test_reflected_version_remembers_what_it_scanned(make_table: Callable[..., DeltaLog]) -> None:
    a = make_table(partitioned=False, files=[None])
    d = make_table(partitioned=False, files=[None])
    first = _append(d, {a.table_path: 0})
    for _ in range(30):
        _append(d)  # commits that read nothing (compactions, say)
    snap = d.update()
    assert derived.reflected_version(snap, a.table_path) == 0
    calls = 0
    real = DeltaLog.read_commit

    def counting(self: DeltaLog, version: int):  # type: ignore[no-untyped-def]
        nonlocal calls
        calls += 1
        return real(self, version)

    _append(d)
    newest = d.update()
    d.wait_for_checkpoints()  # a background checkpoint still building reads commits too: not ours to count
    DeltaLog.read_commit = counting  # type: ignore[method-assign]
    try:
        assert derived.reflected_version(newest, a.table_path) == 0
    finally:
        DeltaLog.read_commit = real  # type: ignore[method-assign]
    assert calls == 1, f"scanned {calls} commits again; only the new one ({first} was already known)"
