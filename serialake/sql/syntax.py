"""Shared pieces of the SQL front end: the dialect, positions, table references, syntax errors."""

from __future__ import annotations

import logging
import re

import sqlglot
from sqlglot import exp
from sqlglot.dialects.spark import Spark
from sqlglot.errors import ParseError, TokenError

from serialake.sql.errors import SqlError, position_of
from serialake.sql.statements import TableRef

__all__ = [
    "DIALECT",
    "SPARK",
    "first_word",
    "noise_len",
    "parse_condition",
    "parse_error",
    "parse_sql",
    "ref_from_parts",
    "table_ref_of",
    "token_error",
]

DIALECT = "spark"
SPARK = Spark()
WORD = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
LEADING_NOISE = re.compile(r"(?:\s+|--[^\n]*(?:\n|$)|/\*.*?\*/)*", re.S)


class _NoCommandFallbackWarnings(logging.Filter):
    """Drop sqlglot's "falling back to parsing as a Command" warnings: we handle those statements."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "Falling back to parsing as a 'Command'" not in record.getMessage()


logging.getLogger("sqlglot").addFilter(_NoCommandFallbackWarnings())


def parse_sql(statement: str, text: str | None = None) -> exp.Expr | None:
    """sqlglot's Spark parse of ``text`` (default ``statement``); errors positioned in ``statement``."""
    try:
        return sqlglot.parse_one(statement if text is None else text, read=DIALECT)
    except ParseError as e:
        raise parse_error(statement, e) from None
    except TokenError as e:
        raise token_error(statement, e) from None


def parse_condition(statement: str, start: int, end: int) -> str:
    """Check that ``statement[start:end]`` is one SQL expression; returns it stripped."""
    cond = statement[start:end]
    if not cond.strip():
        line, col = position_of(statement, start)
        raise SqlError("Expected a condition.", statement=statement, line=line, column=col)
    try:
        sqlglot.parse_one(cond, read=DIALECT)
    except ParseError as e:
        raise parse_error(statement, e, base=start) from None
    except TokenError as e:
        raise token_error(statement, e) from None
    return cond.strip()


def table_ref_of(table: exp.Table, statement: str = "") -> TableRef:
    """A ``TableRef`` for a parsed table: ``delta.`/path``` is a path, anything else a name."""
    parts = [p for p in (table.args.get("catalog"), table.args.get("db"), table.this) if p is not None]
    if not all(isinstance(p, exp.Identifier) for p in parts):
        raise SqlError(f"Unsupported table reference {table.sql(DIALECT)!r}.", statement=statement)
    names = [(p.this, bool(p.quoted)) for p in parts]
    return ref_from_parts(names, table.sql(DIALECT).split(" ")[0])


def ref_from_parts(parts: list[tuple[str, bool]], text: str) -> TableRef:
    if len(parts) == 2 and parts[0][0].lower() == "delta" and looks_like_path(parts[1][0]):
        return TableRef(text=text, path=parts[1][0])
    name = ".".join(f"`{p}`" if quoted and not WORD.match(p) else p for p, quoted in parts)
    return TableRef(text=text, name=name)


def looks_like_path(text: str) -> bool:
    return text.startswith(("/", "./", "../", "~")) or ":" in text or "/" in text


def noise_len(text: str) -> int:
    m = LEADING_NOISE.match(text)
    return m.end() if m else 0


def first_word(text: str) -> str:
    m = re.match(r"\s*(\S+)", text)
    return m.group(1) if m else ""


def parse_error(statement: str, e: ParseError, base: int = 0) -> SqlError:
    """A ``SqlError`` at the first error sqlglot found, positioned in ``statement``."""
    info = e.errors[0] if e.errors else {}
    desc = re.sub(r"<class 'sqlglot\.expressions\.(?:\w+\.)*(\w+)'>", r"\1", str(info.get("description") or e))
    desc = desc.replace("Required keyword: 'this' missing for", "missing operand of").replace(
        "Required keyword: 'expression' missing for", "missing operand of"
    )
    highlight = str(info.get("highlight") or "")
    line, col = info.get("line"), info.get("col")
    if line is None or col is None:
        return SqlError(f"Syntax error: {desc}", statement=statement)
    # sqlglot reports the column of the highlight's last character; point at its first.
    sub = statement[base:]
    lines = sub.split("\n")
    rel = sum(len(x) + 1 for x in lines[: max(0, line - 1)]) + max(0, col - len(highlight))
    line, column = position_of(statement, base + rel)
    return SqlError(desc.rstrip(".") + ".", statement=statement, line=line, column=column, text=highlight or None)


def token_error(statement: str, e: TokenError) -> SqlError:
    at = _unclosed_quote(statement)
    if at is not None:
        line, col = position_of(statement, at)
        return SqlError(f"Unterminated {'quoted identifier' if statement[at] == '`' else 'string'}.",
                        statement=statement, line=line, column=col,
                        text=statement[at : at + 20].split("\n")[0])  # fmt: skip
    return SqlError(f"Cannot read the statement: {e}", statement=statement)


def _unclosed_quote(text: str) -> int | None:
    """Offset of a quote (', ", `) that is never closed, skipping comments; None if all close."""
    i, n = 0, len(text)
    while i < n:
        ch = text[i]
        if text.startswith("--", i):
            nl = text.find("\n", i)
            i = n if nl < 0 else nl + 1
        elif text.startswith("/*", i):
            close = text.find("*/", i + 2)
            i = n if close < 0 else close + 2
        elif ch in "'\"`":
            j = i + 1
            while j < n:
                if text[j] == "\\" and ch != "`":
                    j += 2
                    continue
                if text[j] == ch:
                    if j + 1 < n and text[j + 1] == ch:  # doubled quote
                        j += 2
                        continue
                    break
                j += 1
            if j >= n:
                return i
            i = j + 1
        else:
            i += 1
    return None
