"""Steps after a commit (``core.txn.post_commit``): a failing step warns, the result is returned (issue 42)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import pytest

from serialake.core import DeltaLog, iceberg
from serialake.core.txn import transaction
from serialake.core.txn import written as written_module
from serialake.core.txn.post_commit import AfterCommitWarning, after_commit
from serialake.core.txn.transaction import OptimisticTransaction
from serialake.core.txn.written import commit_or_clean_up
from tests.core.conftest import add_file


def _boom(*_: Any) -> None:
    raise RuntimeError("disk on fire")


def _warned(record: pytest.WarningsRecorder, table: str, version: int, step: str) -> AfterCommitWarning:
    found = [w.message for w in record if isinstance(w.message, AfterCommitWarning)]
    assert len(found) == 1, [str(w.message) for w in record]
    w = found[0]
    assert (w.table, w.version) == (table, version) and step in w.step
    text = str(w)
    assert table in text and f"version {version}" in text and step in text and "disk on fire" in text
    return w


# -- the helper ---------------------------------------------------------------------------------
def test_a_step_that_succeeds_returns_its_value_and_warns_nothing(recwarn: pytest.WarningsRecorder) -> None:
    assert after_commit("add", "/t", 3, lambda a, b: a + b, 1, 2, operation="WRITE") == 3
    assert not [w for w in recwarn if isinstance(w.message, AfterCommitWarning)]


def test_a_failing_step_warns_logs_and_returns_the_fallback(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="serialake.core.txn.post_commit"):
        with pytest.warns(AfterCommitWarning) as record:
            got = after_commit("build the metrics", "/tables/t", 7, _boom, operation="OPTIMIZE", fallback={"n": 1},
                               instead="(with the metrics known before the commit)")  # fmt: skip
    assert got == {"n": 1}
    w = _warned(record, "/tables/t", 7, "build the metrics")
    assert w.operation == "OPTIMIZE" and isinstance(w.cause, RuntimeError)
    assert "OPTIMIZE committed version 7 of table /tables/t" in str(w) and "known before the commit" in str(w)
    logged = [r for r in caplog.records if r.name == "serialake.core.txn.post_commit"]
    assert len(logged) == 1 and logged[0].levelno == logging.WARNING and "disk on fire" in logged[0].getMessage()
    assert logged[0].exc_info is not None  # the cause's traceback is logged


@pytest.mark.parametrize("error", [KeyboardInterrupt, SystemExit])
def test_base_exceptions_that_are_not_exceptions_propagate(error: type[BaseException]) -> None:
    def stop() -> None:
        raise error()

    with pytest.raises(error):
        after_commit("step", "/t", 1, stop, operation="WRITE")


def test_without_a_committed_version_the_step_is_not_guarded() -> None:
    with pytest.raises(RuntimeError, match="disk on fire"):
        after_commit("step", "/t", None, _boom, operation="WRITE")


# -- the transaction's own steps ----------------------------------------------------------------
_STEPS: dict[str, tuple[Any, str]] = {
    "schedule a checkpoint": (DeltaLog, "maybe_checkpoint_async"),
    "cache the commit": (DeltaLog, "remember_commit"),
    "rebasing wrote": (transaction, "discard_rebase_dvs"),
}


@pytest.mark.parametrize("step", list(_STEPS))
def test_a_commit_whose_later_step_fails_returns_its_version(
    make_table: Callable[..., DeltaLog], monkeypatch: pytest.MonkeyPatch, step: str
) -> None:
    log = make_table()
    target, name = _STEPS[step]
    monkeypatch.setattr(target, name, _boom)
    txn = log.start_transaction()
    add = add_file(1)
    with pytest.warns(AfterCommitWarning) as record:
        version = txn.commit([add], operation="WRITE")
    assert version == 1 and txn.committed is not None and txn.committed.version == 1
    w = _warned(record, log.table_path, 1, step)
    assert w.operation == "WRITE"
    monkeypatch.undo()
    snap = DeltaLog(log.table_path).update()  # a fresh log: read from the files
    assert snap.version == 1 and add.path in {f.path for f in snap.all_files}


def test_a_failing_iceberg_scheduling_warns_and_the_commit_stands(
    make_table: Callable[..., DeltaLog], monkeypatch: pytest.MonkeyPatch
) -> None:
    log = make_table()
    monkeypatch.setattr("serialake.core.txn.transaction._iceberg_enabled", lambda meta: True)
    monkeypatch.setattr(iceberg, "after_commit", _boom)
    with pytest.warns(AfterCommitWarning) as record:
        version = log.start_transaction().commit([add_file(2)], operation="WRITE")
    assert version == 1
    _warned(record, log.table_path, 1, "Iceberg conversion")


def test_commit_or_clean_up_warns_when_deleting_unreferenced_files_fails(
    make_table: Callable[..., DeltaLog], monkeypatch: pytest.MonkeyPatch
) -> None:
    log = make_table()
    monkeypatch.setattr(written_module, "_discard_unused", _boom)
    add = add_file(1)
    with pytest.warns(AfterCommitWarning) as record:
        version = commit_or_clean_up(log.start_transaction(), [add], "DELETE", {}, {}, new_files=[add])
    assert version == 1
    w = _warned(record, log.table_path, 1, "does not reference")
    assert w.operation == "DELETE"


def test_a_failure_before_or_during_the_commit_still_raises_and_commits_nothing(
    make_table: Callable[..., DeltaLog], monkeypatch: pytest.MonkeyPatch
) -> None:
    log = make_table()

    def refuse() -> None:
        raise RuntimeError("refused before the commit")

    with pytest.raises(RuntimeError, match="refused before the commit"):
        commit_or_clean_up(log.start_transaction(), [add_file(1)], "WRITE", {}, {}, before_commit=refuse)
    monkeypatch.setattr(OptimisticTransaction, "_prepare", lambda *a, **k: _boom())
    with pytest.raises(RuntimeError, match="disk on fire"):
        log.start_transaction().commit([add_file(1)], operation="WRITE")
    monkeypatch.undo()
    assert DeltaLog(log.table_path).update().version == 0
