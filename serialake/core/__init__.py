"""The Delta transaction log in pure Python (never imports pyspark)."""

from __future__ import annotations

from serialake.core.log.deltalog import DeltaLog
from serialake.core.log.snapshot import Snapshot
from serialake.core.txn.transaction import CommitOptions, OptimisticTransaction

__all__ = ["CommitOptions", "DeltaLog", "OptimisticTransaction", "Snapshot"]
