"""A table's history as JSON-ready rows, read from the Delta log only (no Spark).

``serialake history`` prints these rows and ``serialake demo`` keeps them in its report;
both import them from here, so neither imports the other.
"""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from serialake.core import DeltaLog

__all__ = ["history_rows", "iso_time"]


def history_rows(log: DeltaLog, limit: int | None = None) -> list[dict[str, Any]]:
    """Commits newest first, with DESCRIBE HISTORY's main fields."""
    rows = []
    for version, entry in log.history(limit):
        info = entry.commit_info.values if entry.commit_info is not None else {}
        rows.append(
            {
                "version": version,
                "timestamp": iso_time(entry.timestamp),
                "operation": info.get("operation"),
                "operationParameters": info.get("operationParameters") or {},
                "readVersion": info.get("readVersion"),
                "isolationLevel": info.get("isolationLevel"),
                "isBlindAppend": info.get("isBlindAppend"),
                "operationMetrics": info.get("operationMetrics") or {},
                "engineInfo": info.get("engineInfo"),
            }
        )
    return rows


def iso_time(ms: int | None) -> str | None:
    """A log timestamp (ms since the epoch) as ISO 8601 in UTC, to the millisecond; None stays None."""
    if ms is None:
        return None
    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).isoformat(timespec="milliseconds")
