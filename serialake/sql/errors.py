"""Errors of the SQL front end: syntax errors with their position, and unsupported statements."""

from __future__ import annotations

from serialake.exceptions import DeltaError

__all__ = ["SqlError", "UnsupportedStatementError", "position_of"]


class SqlError(DeltaError, ValueError):
    """A statement that cannot be parsed or analysed; names line, column and the offending text.

    Attributes:
        statement: the statement text as given.
        line, column: 1-based position of the problem (None when not tied to a position).
        text: the offending text at that position.
    """

    def __init__(
        self,
        message: str,
        *,
        statement: str | None = None,
        line: int | None = None,
        column: int | None = None,
        text: str | None = None,
    ) -> None:
        self.reason = message
        self.statement = statement
        self.line = line
        self.column = column
        self.text = text
        super().__init__(self._render())

    def _render(self) -> str:
        if self.line is None or self.column is None:
            return self.reason
        near = f" near '{self.text}'" if self.text else ""
        head = f"Syntax error at line {self.line}, column {self.column}{near}: {self.reason}"
        if not self.statement:
            return head
        lines = self.statement.splitlines() or [""]
        src = lines[self.line - 1] if 0 < self.line <= len(lines) else ""
        width = len(self.text) if self.text and "\n" not in self.text else 1
        caret = " " * (self.column - 1) + "^" * max(1, width)
        return f"{head}\n  {src}\n  {caret}"


class UnsupportedStatementError(SqlError, NotImplementedError):
    """A statement (or clause) that is valid SQL but that serialake does not run; named in the message."""

    def __init__(self, what: str, *, statement: str | None = None, hint: str | None = None) -> None:
        self.what = what
        message = f"Unsupported statement: {what} is not supported by serialake."
        if hint:
            message += f" {hint}"
        super().__init__(message, statement=statement)


def position_of(text: str, offset: int) -> tuple[int, int]:
    """1-based (line, column) of character ``offset`` in ``text``."""
    offset = max(0, min(offset, len(text)))
    line = text.count("\n", 0, offset) + 1
    column = offset - (text.rfind("\n", 0, offset) + 1) + 1
    return line, column
