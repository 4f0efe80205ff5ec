"""The error of a failed Iceberg conversion (Delta UniForm): what, where, and what to do."""

from __future__ import annotations

from typing import Any

from serialake.exceptions import DeltaError

__all__ = ["IcebergConversionError"]


class IcebergConversionError(DeltaError, ValueError):
    """Iceberg metadata cannot be written for a Delta version; the Delta table itself is intact.

    Raised for what the table holds (a column without a column-mapping id, a file without
    ``numRecords`` or with a deletion vector, a type Iceberg cannot hold); storage failures
    surface as the store's ``OSError``.

    Attributes:
        reason: what is wrong.
        table: table path.
        version: the Delta version being converted (None if unknown).
        column: the column involved (dotted logical path), when one is.
        file: the data file (or metadata file) involved, when one is.
        help: what to do next.
    """

    default_help = "Fix the table as the message says, then convert again (serialake.core.iceberg.convert_now)."

    def __init__(
        self,
        reason: str,
        *,
        table: str,
        version: int | None = None,
        column: str | None = None,
        file: str | None = None,
        help: str | None = None,  # noqa: A002 - public keyword (as the .help attribute); pickling passes it
    ) -> None:
        self.reason = reason
        self.table = table
        self.version = version
        self.column = column
        self.file = file
        self.help = help or self.default_help
        where = f" at version {version}" if version is not None else ""
        lines = [f"Iceberg conversion of table {table}{where} failed: {reason}"]
        if column is not None:
            lines.append(f"  Column: {column}")
        if file is not None:
            lines.append(f"  File: {file}")
        lines.append(f"Help: {self.help}")
        super().__init__("\n".join(lines))

    def __reduce__(self) -> Any:  # picklable across processes
        kwargs = dict(table=self.table, version=self.version, column=self.column, file=self.file, help=self.help)
        return (_rebuild, (self.reason, kwargs))


def _rebuild(reason: str, kwargs: dict[str, Any]) -> IcebergConversionError:
    return IcebergConversionError(reason, **kwargs)
