"""The Delta transaction log in pure Python (never imports pyspark)."""

from __future__ import annotations

from serialake.core.log import DeltaLog
from serialake.core.snapshot import Snapshot
from serialake.core.transaction import CommitOptions, OptimisticTransaction

__all__ = ["CommitOptions", "DeltaLog", "OptimisticTransaction", "Snapshot"]
