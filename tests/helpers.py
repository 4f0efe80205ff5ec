"""Helpers shared by test modules (import from here, never from another test module)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import pytest

from serialake.core.txn.transaction import OptimisticTransaction


@contextmanager
def before_first_commit(monkeypatch: pytest.MonkeyPatch, action: Callable[[], Any]) -> Iterator[None]:
    """Run ``action`` (another operation, committing normally) just before the next commit.

    The operation under test has planned (snapshot pinned, reads recorded, files written);
    ``action`` then runs to completion and commits first: a deterministic interleaving of two
    real operations planned from the same version.
    """
    original = OptimisticTransaction.commit
    fired: list[bool] = []

    def commit(self: OptimisticTransaction, *args: Any, **kwargs: Any) -> int:
        if not fired:
            fired.append(True)
            action()
        return original(self, *args, **kwargs)

    monkeypatch.setattr(OptimisticTransaction, "commit", commit)
    try:
        yield
    finally:
        monkeypatch.setattr(OptimisticTransaction, "commit", original)


@contextmanager
def serialake_commits(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[int, list[tuple[str, int | None]]]]:
    """Record every serialake commit under the thread that made it: ``(txnId, version)``, the
    version None when nothing was written (the work was already done by a winner).

    The txnId is the one in the commit's ``commitInfo``: a commit file names the transaction
    that wrote it, so a test can tell which of its operations made each version.
    """
    original = OptimisticTransaction.commit
    made: dict[int, list[tuple[str, int | None]]] = {}

    def commit(self: OptimisticTransaction, *args: Any, **kwargs: Any) -> int:
        version = original(self, *args, **kwargs)
        done = self.committed is not None and self.committed.work_already_done
        made.setdefault(threading.get_ident(), []).append((self.txn_id, None if done else version))
        return version

    monkeypatch.setattr(OptimisticTransaction, "commit", commit)
    try:
        yield made
    finally:
        monkeypatch.setattr(OptimisticTransaction, "commit", original)


def unreferenced_files(path: str) -> set[str]:
    """Parquet and deletion-vector files in the table directory at ``path`` that no commit ever added.

    A rebase that drops an output or a vector it wrote must delete the file: none may be left behind.
    """
    import json
    import os

    from serialake.core.dv.deletion_vectors import dv_absolute_path
    from serialake.core.model.actions import DeletionVectorDescriptor

    used: set[str] = set()
    log_dir = os.path.join(path, "_delta_log")
    for name in os.listdir(log_dir):
        if not name.endswith(".json"):
            continue
        with open(os.path.join(log_dir, name)) as fh:
            for line in fh:
                add = json.loads(line).get("add")
                if add:
                    used.add(add["path"])
                    dv = add.get("deletionVector")
                    desc = DeletionVectorDescriptor.from_obj(dv) if dv and dv["storageType"] == "u" else None
                    if desc is not None:
                        used.add(os.path.basename(dv_absolute_path(path, desc) or ""))
    found: set[str] = set()
    for root, _, names in os.walk(path):
        if root.startswith(log_dir):
            continue
        for n in names:
            rel = os.path.relpath(os.path.join(root, n), path)
            if (n.endswith(".parquet") and rel not in used) or (n.endswith(".bin") and n not in used):
                found.add(rel)
    return found


def delta_rs_rows(path: str, columns: Sequence[str]) -> list[dict[str, Any]]:
    """The live rows of the table at ``path`` as delta-rs reads them (``columns`` only).

    delta-rs's pyarrow path refuses the deletionVectors reader feature; its DataFusion scan applies them.
    """
    import pyarrow as pa
    from deltalake import DeltaTable

    table = DeltaTable(path)
    if "deletionVectors" in (table.protocol().reader_features or []):
        arrow = pa.RecordBatchReader.from_stream(table.scan()).read_all()
    else:
        arrow = table.to_pyarrow_table()
    return arrow.select(list(columns)).to_pylist()
