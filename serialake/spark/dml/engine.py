"""Where the data work of a DML runs: on the driver with pyarrow, or on Spark. The one door.

Spark reads, filters, joins and writes the rows of every operation on big data. Small
operations are dominated by Spark's fixed costs (job scheduling, planning, a shuffle join),
so each step that has a driver implementation (``driver_*`` modules) runs it there when

1. the files it reads are small enough: at most ``DML_MAX_BYTES_CONF`` bytes of candidate
   files for DELETE / UPDATE / MERGE, ``COMPACTION_MAX_BYTES_CONF`` per OPTIMIZE bin
   (0 turns a driver path off), and
2. the driver computes exactly Spark's result. Driver code that meets anything it does not
   reproduce exactly (a type, an expression, a NULL for a NOT NULL column, a value that
   would move rows to another partition, an integral overflow) raises ``NotExact``, after
   removing whatever it wrote; this module catches it and the same step runs on Spark,
   which then reports errors in its own words.

Nothing else decides: operations call ``Engine.run(files, driver=..., spark=...)``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TypeVar

from pyspark.sql import SparkSession

from serialake.core.model.actions import AddFile
from serialake.core.predicates.values import NotExact
from serialake.exceptions import DeltaIllegalArgumentException

__all__ = [
    "COMPACTION_MAX_BYTES_CONF",
    "COMPACTION_MAX_BYTES_DEFAULT",
    "DML_MAX_BYTES_CONF",
    "DML_MAX_BYTES_DEFAULT",
    "Engine",
    "NotExact",
    "for_compaction",
    "for_dml",
    "parse_size",
]

DML_MAX_BYTES_CONF = "spark.serialake.dml.local.maxBytes"
DML_MAX_BYTES_DEFAULT = 1 << 30
COMPACTION_MAX_BYTES_CONF = "spark.serialake.optimize.local.maxBytes"
COMPACTION_MAX_BYTES_DEFAULT = 64 << 20

_log = logging.getLogger(__name__)
_T = TypeVar("_T")
_UNITS = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


@dataclass(frozen=True)
class Engine:
    """The driver's budget for one operation: the most bytes of input files it may read (0: none)."""

    max_bytes: int

    def fits(self, files: Iterable[AddFile]) -> bool:
        """Whether the driver may read ``files``."""
        return self.max_bytes > 0 and sum(f.size or 0 for f in files) <= self.max_bytes

    def run(
        self,
        files: Iterable[AddFile] | None,
        *,
        driver: Callable[[], _T] | None,
        spark: Callable[[], _T],
    ) -> _T:
        """``driver()`` when allowed (``files`` fit; None: the caller already checked) and exact, else ``spark()``."""
        if driver is not None and self.max_bytes > 0 and (files is None or self.fits(files)):
            try:
                return driver()
            except NotExact as e:
                _log.debug("driver path not exact (%s): running on Spark", e)
        return spark()


def for_dml(spark: SparkSession) -> Engine:
    """The budget of DELETE / UPDATE / MERGE (``DML_MAX_BYTES_CONF``)."""
    return Engine(_setting(spark, DML_MAX_BYTES_CONF, DML_MAX_BYTES_DEFAULT))


def for_compaction(spark: SparkSession) -> Engine:
    """The budget of one OPTIMIZE / REORG bin (``COMPACTION_MAX_BYTES_CONF``)."""
    return Engine(_setting(spark, COMPACTION_MAX_BYTES_CONF, COMPACTION_MAX_BYTES_DEFAULT))


def _setting(spark: SparkSession, key: str, default: int) -> int:
    text = spark.conf.get(key, None)
    if text is None or not str(text).strip():
        return default
    try:
        return parse_size(str(text))
    except ValueError:
        raise DeltaIllegalArgumentException(
            f"{key} must be a size in bytes (e.g. 67108864 or 64m; 0 turns the driver path off), got {text!r}"
        ) from None


def parse_size(text: str) -> int:
    """``"1073741824"``, ``"128m"``, ``"1g"``, ``"512kb"``: a size in bytes (Spark's byte-string forms).

    ValueError when ``text`` is none of these.
    """
    value = text.strip().lower().rstrip("b")
    if value and value[-1] in _UNITS:
        return int(float(value[:-1]) * _UNITS[value[-1]])
    return int(value)
