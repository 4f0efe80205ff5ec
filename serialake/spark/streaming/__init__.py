"""Structured Streaming on serialake tables: the exactly-once sink (``sink``), the incremental
source (``source``), and the change data feed as a stream.

``serialake.streaming.idempotent(fn)`` wraps a ``foreachBatch`` function so that the writes it
makes commit once per micro-batch (``sink.idempotent``).
"""

from __future__ import annotations

from typing import Any

__all__ = ["BatchResetError", "idempotent"]


def __getattr__(name: str) -> Any:
    # Lazily: write.py and the DML kernel import batch_txn from this package, and sink imports them.
    if name == "idempotent":
        from serialake.spark.streaming.sink import idempotent

        return idempotent
    if name == "BatchResetError":
        from serialake.spark.streaming.batch_txn import BatchResetError

        return BatchResetError
    raise AttributeError(f"module 'serialake.spark.streaming' has no attribute {name!r}")
