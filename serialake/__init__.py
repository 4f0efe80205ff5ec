"""serialake: ACID Delta Lake tables for PySpark with Delta's concurrency control, in Python.

The core (``serialake.core``) is pure Python; the Spark entry points below are imported
lazily so that ``import serialake`` never starts or needs Spark.
"""

from __future__ import annotations

from typing import Any

from serialake.exceptions import (
    ConcurrentAppendException,
    ConcurrentDeleteDeleteException,
    ConcurrentDeleteReadException,
    ConcurrentTransactionException,
    ConflictReason,
    DeltaConcurrentModificationException,
    MetadataChangedException,
    ProtocolChangedException,
)

__version__ = "0.1.0"

_LAZY: dict[str, tuple[str, str | None]] = {
    "spark_session": ("serialake.spark.session", "spark_session"),
    "configure": ("serialake.dropin", "configure"),
    "write": ("serialake.spark.write", "write"),
    "read": ("serialake.spark.read", "read"),
    "DeltaTable": ("serialake.spark.table", "DeltaTable"),
    "IdentityGenerator": ("serialake.spark.table", "IdentityGenerator"),
    "sql": ("serialake.sql", None),  # the callable module: serialake.sql(...) and serialake.sql.register
    "register": ("serialake.sql", "register"),
    "snapshot": ("serialake.sql.snapshot", "snapshot"),
    "transaction": ("serialake.spark.transaction", "transaction"),
    "streaming": ("serialake.spark.streaming", None),  # serialake.streaming.idempotent
}

__all__ = [
    "ConcurrentAppendException",
    "ConcurrentDeleteDeleteException",
    "ConcurrentDeleteReadException",
    "ConcurrentTransactionException",
    "ConflictReason",
    "DeltaConcurrentModificationException",
    "MetadataChangedException",
    "ProtocolChangedException",
    *_LAZY,
]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        module, attr = _LAZY[name]
        loaded = importlib.import_module(module)
        return loaded if attr is None else getattr(loaded, attr)
    raise AttributeError(f"module 'serialake' has no attribute {name!r}")
