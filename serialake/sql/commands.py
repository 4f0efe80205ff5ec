"""Delta's own commands, which sqlglot does not parse, read from sqlglot's tokens.

OPTIMIZE, REORG TABLE, VACUUM, RESTORE, DESCRIBE HISTORY / DETAIL / TABLE, ALTER TABLE
... UNSET TBLPROPERTIES / DROP FEATURE, and Materialize's SET / SHOW TRANSACTION_ISOLATION
are recognised by their leading keywords; the rest of the text is read token by token,
so quoting, comments and error positions behave as for every other statement.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from sqlglot.errors import TokenError
from sqlglot.tokens import Token, TokenType

from serialake.core.tables.cut import ISOLATION_LEVELS
from serialake.sql.errors import SqlError, UnsupportedStatementError, position_of
from serialake.sql.statements import (
    AddConstraint,
    BeginTransaction,
    ChangeColumn,
    Clone,
    ClusterBy,
    CommitTransaction,
    ConvertToDelta,
    DescribeDetail,
    DescribeHistory,
    DescribeTable,
    DropColumns,
    DropConstraint,
    DropFeature,
    Generate,
    Optimize,
    RenameColumn,
    RenameTable,
    Reorg,
    Restore,
    RollbackTransaction,
    SetIsolation,
    SetLocation,
    ShowIsolation,
    ShowProperties,
    Statement,
    SyncMetadata,
    TableRef,
    UnsetProperties,
    UpgradeUniform,
    Vacuum,
)
from serialake.sql.syntax import SPARK, WORD, parse_condition, ref_from_parts, token_error

__all__ = ["COMMANDS", "ISOLATION_LEVELS", "Cursor"]



class Cursor:
    """A cursor over the tokens of ``body[start:]``; positions are offsets into ``statement``."""

    def __init__(self, statement: str, body: str, start: int) -> None:
        self.statement = statement
        self.body = body
        self.start = start
        try:
            toks = SPARK.tokenize(body[start:])
        except TokenError as e:
            raise token_error(statement, e) from None
        self.tokens: list[tuple[Token, int, int]] = [(t, t.start + start, t.end + start + 1) for t in toks]
        self.i = 0

    # -- looking ----------------------------------------------------------------
    def at_end(self) -> bool:
        return self.i >= len(self.tokens)

    def word(self, k: int = 0) -> str:
        """The upper-cased text of the token ``k`` ahead ('' at the end; quoted text never matches)."""
        j = self.i + k
        if j >= len(self.tokens):
            return ""
        tok, s, e = self.tokens[j]
        if tok.token_type in (TokenType.STRING, TokenType.IDENTIFIER):
            return ""
        return self.statement[s:e].upper()

    def matches(self, *words: str) -> int:
        """How many tokens spell ``words`` from here (0: no match); sqlglot joins e.g. CLUSTER BY."""
        j = k = 0
        while k < len(words):
            parts = self.word(j).split()
            if not parts or tuple(parts) != words[k : k + len(parts)]:
                return 0
            k += len(parts)
            j += 1
        return j

    def accept(self, *words: str) -> bool:
        n = self.matches(*words)
        self.i += n
        return n > 0

    def expect(self, *words: str) -> None:
        if not self.accept(*words):
            raise self.error(f"Expected {' '.join(words)}.")

    # -- errors -----------------------------------------------------------------
    def offset(self) -> int:
        if self.at_end():
            return len(self.body.rstrip())
        return self.tokens[self.i][1]

    def error(self, message: str) -> SqlError:
        off = self.offset()
        line, col = position_of(self.statement, off)
        near = None if self.at_end() else self.statement[self.tokens[self.i][1] : self.tokens[self.i][2]]
        if near is None:
            message = f"{message} The statement ended."
        return SqlError(message, statement=self.statement, line=line, column=col, text=near)

    # -- pieces -----------------------------------------------------------------
    def table(self) -> TableRef:
        """A table reference: ``'path'``, ``delta.`path```, or a dotted name."""
        if self.at_end():
            raise self.error("Expected a table name or delta.`/path`.")
        tok, s, e = self.tokens[self.i]
        if tok.token_type == TokenType.STRING:
            self.i += 1
            return TableRef(text=self.statement[s:e], path=tok.text)
        parts: list[tuple[str, bool]] = []
        first = s
        last = e
        while True:
            if self.at_end():
                raise self.error("Expected a table name.")
            tok, s, e = self.tokens[self.i]
            if tok.token_type == TokenType.IDENTIFIER:
                parts.append((tok.text, True))
            elif WORD.match(tok.text):
                parts.append((tok.text, False))
            else:
                raise self.error("Expected a table name or delta.`/path`.")
            last = e
            self.i += 1
            if self.at_end() or self.tokens[self.i][0].token_type != TokenType.DOT:
                break
            self.i += 1
        return ref_from_parts(parts, self.statement[first:last])

    def raw_until(self, *stops: tuple[str, ...]) -> tuple[int, int]:
        """Offsets of the text from here to the first stop phrase at bracket depth 0 (or the end)."""
        begin = self.offset()
        depth = 0
        while not self.at_end():
            tt = self.tokens[self.i][0].token_type
            if depth == 0 and any(self.matches(*stop) for stop in stops):
                break
            if tt in (TokenType.L_PAREN, TokenType.L_BRACKET):
                depth += 1
            elif tt in (TokenType.R_PAREN, TokenType.R_BRACKET):
                depth -= 1
            self.i += 1
        end = self.tokens[self.i - 1][2] if self.i > 0 else begin
        return begin, max(begin, end)

    def integer(self, what: str) -> int:
        tok = None if self.at_end() else self.tokens[self.i][0]
        if tok is None or tok.token_type != TokenType.NUMBER or not tok.text.isdigit():
            raise self.error(f"Expected {what} (a whole number).")
        self.i += 1
        return int(tok.text)

    def number(self, what: str) -> float:
        tok = None if self.at_end() else self.tokens[self.i][0]
        if tok is None or tok.token_type != TokenType.NUMBER:
            raise self.error(f"Expected {what} (a number).")
        self.i += 1
        return float(tok.text)

    def string(self, what: str) -> str:
        tok = None if self.at_end() else self.tokens[self.i][0]
        if tok is None or tok.token_type != TokenType.STRING:
            raise self.error(f"Expected {what} (a quoted string).")
        self.i += 1
        return tok.text

    def property_key(self) -> str:
        """A table property key: ``'quoted'`` or a dotted name (``delta.appendOnly``), up to ``=``, ``,`` or ``)``."""
        if self.at_end():
            raise self.error("Expected a property key.")
        tok = self.tokens[self.i][0]
        if tok.token_type == TokenType.STRING:
            self.i += 1
            return tok.text
        s = self.offset()
        while not self.at_end() and self.word() not in (",", ")", "="):
            self.i += 1
        return self.statement[s : self.tokens[self.i - 1][2]].replace(" ", "")

    def name(self, what: str) -> str:
        """One identifier (backquoted or plain)."""
        tok = None if self.at_end() else self.tokens[self.i][0]
        if tok is None or (tok.token_type != TokenType.IDENTIFIER and not WORD.match(tok.text)):
            raise self.error(f"Expected {what}.")
        self.i += 1
        return tok.text

    def name_list(self, what: str) -> list[str]:
        """``(a, b.c, `d`)`` or ``a, b`` (column names)."""
        paren = self.accept("(")
        names: list[str] = []
        while True:
            if self.at_end():
                raise self.error(f"Expected {what}.")
            begin = self.offset()
            tok = self.tokens[self.i][0]
            if tok.token_type not in (TokenType.IDENTIFIER,) and not WORD.match(tok.text):
                raise self.error(f"Expected {what}.")
            self.i += 1
            while not self.at_end() and self.tokens[self.i][0].token_type == TokenType.DOT:
                self.i += 2
            names.append(self.statement[begin : self.tokens[self.i - 1][2]])
            if not self.accept(","):
                break
        if paren:
            self.expect(")")
        return names

    def path(self, what: str) -> tuple[str, ...]:
        """A dotted column path ``a.`b c`.d`` as its names."""
        names = [self.name(what)]
        while self.accept("."):
            names.append(self.name(what))
        return tuple(names)

    def finish(self) -> None:
        if not self.at_end():
            raise self.error("Unexpected text.")


def _optimize(p: Cursor) -> Statement:
    table = p.table()
    where = None
    if p.accept("WHERE"):
        s, e = p.raw_until(("ZORDER", "BY"))
        where = parse_condition(p.statement, s, e)
    zorder: list[str] = []
    if p.accept("ZORDER", "BY"):
        zorder = p.name_list("a ZORDER BY column")
    full = p.accept("FULL")
    p.finish()
    return Optimize(table=table, where=where, zorder_by=tuple(zorder), full=full, text=p.statement)


def _reorg(p: Cursor) -> Statement:
    table = p.table()
    where = None
    if p.accept("WHERE"):
        s, e = p.raw_until(("APPLY",))
        where = parse_condition(p.statement, s, e)
    p.expect("APPLY")
    p.expect("(")
    if p.accept("PURGE"):
        p.expect(")")
        p.finish()
        return Reorg(table=table, where=where, text=p.statement)
    if p.accept("UPGRADE", "UNIFORM"):
        if where is not None:
            raise p.error("REORG TABLE ... WHERE cannot UPGRADE UNIFORM: the whole table is upgraded.")
        p.expect("(")
        if p.word() != "ICEBERG_COMPAT_VERSION":
            raise p.error("Expected ICEBERG_COMPAT_VERSION = <version> in UPGRADE UNIFORM(...).")
        p.i += 1
        p.expect("=")
        tok = None if p.at_end() else p.tokens[p.i][0]
        if tok is None or not tok.text.isdigit():
            raise p.error("Expected the Iceberg compatibility version (2).")
        p.i += 1
        p.expect(")")
        p.expect(")")
        p.finish()
        return UpgradeUniform(table=table, compat_version=int(tok.text), text=p.statement)
    raise p.error("Expected PURGE or UPGRADE UNIFORM(...) in REORG TABLE ... APPLY (...).")


def _vacuum(p: Cursor) -> Statement:
    table = p.table()
    if p.word() in ("LITE", "FULL"):
        raise UnsupportedStatementError(f"VACUUM ... {p.word()}", statement=p.statement)
    if p.accept("USING", "INVENTORY"):
        raise UnsupportedStatementError("VACUUM ... USING INVENTORY", statement=p.statement)
    hours = None
    if p.accept("RETAIN"):
        hours = p.number("the retention in hours")
        p.expect("HOURS")
    dry_run = p.accept("DRY", "RUN")
    p.finish()
    return Vacuum(table=table, retain_hours=hours, dry_run=dry_run, text=p.statement)


def _restore(p: Cursor) -> Statement:
    p.accept("TABLE")
    table = p.table()
    p.accept("TO")
    if p.accept("VERSION", "AS", "OF"):
        version = p.integer("a table version")
        p.finish()
        return Restore(table=table, version=version, text=p.statement)
    if p.accept("TIMESTAMP", "AS", "OF"):
        s, e = p.raw_until()
        ts = parse_condition(p.statement, s, e)
        return Restore(table=table, timestamp=ts, text=p.statement)
    raise p.error("Expected VERSION AS OF <version> or TIMESTAMP AS OF <timestamp>.")


def _describe_history(p: Cursor) -> Statement:
    table = p.table()
    limit = None
    if p.accept("LIMIT"):
        limit = p.integer("a LIMIT")
    p.finish()
    return DescribeHistory(table=table, limit=limit, text=p.statement)


def _describe_detail(p: Cursor) -> Statement:
    table = p.table()
    p.finish()
    return DescribeDetail(table=table, text=p.statement)


def _describe_table(p: Cursor) -> Statement | None:
    if p.word() in ("FUNCTION", "DATABASE", "SCHEMA", "CATALOG", "QUERY", "VOLUME", "EXTERNAL"):
        return None
    p.accept("TABLE")
    extended = p.accept("EXTENDED") or p.accept("FORMATTED")
    try:
        table = p.table()
    except SqlError:
        return None
    if not p.at_end():
        return None  # DESCRIBE t column / PARTITION (...): Spark's business
    return DescribeTable(table=table, extended=extended, text=p.statement)


def _set_isolation(p: Cursor) -> Statement:
    if not p.accept("TO"):
        p.accept("=")
    if not p.at_end() and p.tokens[p.i][0].token_type == TokenType.STRING:
        requested = p.string("an isolation level")
    else:
        s, e = p.raw_until()
        requested = p.statement[s:e]
    p.finish()
    return _isolation(requested, p)


def _set_isolation_level(p: Cursor) -> Statement:
    s, e = p.raw_until()
    return _isolation(p.statement[s:e], p)


def _isolation(requested: str, p: Cursor) -> Statement:
    key = re.sub(r"[\s_]+", " ", requested.strip().strip("'\"")).upper()
    if key not in ISOLATION_LEVELS:
        line, col = position_of(p.statement, p.statement.upper().rfind(requested.upper()))
        raise SqlError(
            f"Unknown transaction isolation level {requested.strip()!r}; use one of "
            + ", ".join(f"'{k}'" for k in ISOLATION_LEVELS)
            + ".",
            statement=p.statement,
            line=line,
            column=col,
            text=requested.strip(),
        )
    return SetIsolation(level=ISOLATION_LEVELS[key], requested=key, text=p.statement)


def _show_isolation(p: Cursor) -> Statement:
    p.accept("LEVEL")
    p.finish()
    return ShowIsolation(text=p.statement)


def _alter_table(p: Cursor) -> Statement | None:
    """UNSET TBLPROPERTIES and DROP FEATURE; everything else goes to sqlglot."""
    try:
        table = p.table()
    except SqlError:
        return None
    if p.accept("UNSET", "TBLPROPERTIES"):
        if_exists = p.accept("IF", "EXISTS")
        p.expect("(")
        keys = [p.property_key()]
        while p.accept(","):
            keys.append(p.property_key())
        p.expect(")")
        p.finish()
        return UnsetProperties(table=table, keys=tuple(keys), if_exists=if_exists, text=p.statement)
    if p.accept("DROP", "FEATURE"):
        if p.at_end():
            raise p.error("Expected a feature name.")
        tok = p.tokens[p.i][0]
        feature = tok.text
        p.i += 1
        truncate = p.accept("TRUNCATE", "HISTORY")
        p.finish()
        return DropFeature(table=table, feature=feature, truncate_history=truncate, text=p.statement)
    if p.accept("CLUSTER", "BY"):
        columns: list[str] = [] if p.accept("NONE") else p.name_list("a clustering column")
        p.finish()
        return ClusterBy(table=table, columns=tuple(columns), text=p.statement)
    if p.word() in ("ALTER", "CHANGE"):
        return _change_column(p, table)
    if p.accept("RENAME", "COLUMN"):
        column = p.path("the column to rename")
        p.expect("TO")
        new_name = p.name("the column's new name")
        p.finish()
        return RenameColumn(table=table, column=column, new_name=new_name, text=p.statement)
    dropping = p.matches("DROP", "COLUMNS") or p.matches("DROP", "COLUMN")
    if dropping:
        p.i += dropping
        if_exists = p.accept("IF", "EXISTS")
        paren = p.accept("(")
        paths = [p.path("a column to drop")]
        while p.accept(","):
            paths.append(p.path("a column to drop"))
        if paren:
            p.expect(")")
        p.finish()
        return DropColumns(table=table, columns=tuple(paths), if_exists=if_exists, text=p.statement)
    if p.accept("RENAME", "TO"):
        new_name = ".".join(p.path("the new table name"))
        p.finish()
        return RenameTable(table=table, new_name=new_name, text=p.statement)
    if p.accept("SET", "LOCATION"):
        location = p.string("the new location")
        p.finish()
        return SetLocation(table=table, location=location, text=p.statement)
    if p.accept("ADD", "CONSTRAINT"):
        name = p.name("a constraint name")
        if not p.accept("CHECK"):
            raise p.error("Expected CHECK (<condition>): serialake supports CHECK constraints.")
        p.expect("(")
        start, end = p.raw_until((")",))
        p.expect(")")
        p.finish()
        expression = p.statement[start:end].strip()
        if not expression:
            raise p.error("Expected a condition inside CHECK ( ).")
        return AddConstraint(table=table, name=name, expression=expression, text=p.statement)
    if p.accept("DROP", "CONSTRAINT"):
        if_exists = p.accept("IF", "EXISTS")
        name = p.name("a constraint name")
        p.finish()
        return DropConstraint(table=table, name=name, if_exists=if_exists, text=p.statement)
    return None


_COLUMN_ACTIONS = ("TYPE", "COMMENT", "FIRST", "AFTER", "SET", "DROP")


def _change_column(p: Cursor, table: TableRef) -> Statement:
    """Spark's ALTER COLUMN actions, and Hive's CHANGE COLUMN old new type [COMMENT] [position]."""
    p.i += 1  # ALTER / CHANGE
    p.accept("COLUMN")
    column = p.path("a column name")
    spec: dict[str, object] = {}
    if not p.at_end() and p.word() not in _COLUMN_ACTIONS:
        spec["new_name"] = p.name("the column's new name")
        s, e = p.raw_until(("NOT", "NULL"), ("COMMENT",), ("FIRST",), ("AFTER",))
        if s == e:
            raise p.error("Expected the column's type.")
        spec["data_type"] = p.statement[s:e].strip()
        if p.accept("NOT", "NULL"):
            spec["nullable"] = False
    while not p.at_end():
        if p.accept("TYPE"):
            s, e = p.raw_until(*[(w,) for w in _COLUMN_ACTIONS])
            spec["data_type"] = p.statement[s:e].strip()
        elif p.accept("COMMENT"):
            spec["comment"] = p.string("a comment")
        elif p.accept("FIRST"):
            spec["first"] = True
        elif p.accept("AFTER"):
            spec["after"] = p.name("the column to put it after")
        elif p.accept("SET", "NOT", "NULL"):
            spec["nullable"] = False
        elif p.accept("DROP", "NOT", "NULL"):
            spec["nullable"] = True
        elif p.word() in ("SET", "DROP") and p.matches(p.word(), "DEFAULT"):
            raise UnsupportedStatementError("ALTER COLUMN ... SET/DROP DEFAULT (column defaults)",
                                            statement=p.statement)
        else:
            raise p.error("Expected TYPE, COMMENT, FIRST, AFTER, SET NOT NULL or DROP NOT NULL.")
    if not spec:
        raise p.error("Expected what to change: TYPE, COMMENT, FIRST, AFTER, SET NOT NULL or DROP NOT NULL.")
    return ChangeColumn(table=table, column=column, text=p.statement, **spec)  # type: ignore[arg-type]


def _clone(mode: str) -> Callable[[Cursor], Statement | None]:
    """CREATE / REPLACE TABLE ... CLONE; None (sqlglot's) for any other CREATE TABLE."""

    def handler(p: Cursor) -> Statement | None:
        if_not_exists = p.accept("IF", "NOT", "EXISTS")
        try:
            table = p.table()
        except SqlError:
            return None
        shallow = p.accept("SHALLOW")
        deep = not shallow and p.accept("DEEP")
        if not p.accept("CLONE"):
            if shallow or deep:
                raise p.error("Expected CLONE.")
            return None
        source = p.table()
        version = timestamp = None
        if p.accept("VERSION", "AS", "OF"):
            version = p.integer("a table version")
        elif p.accept("TIMESTAMP", "AS", "OF"):
            s, e = p.raw_until(("TBLPROPERTIES",), ("LOCATION",))
            timestamp = parse_condition(p.statement, s, e)
        properties: dict[str, str] = {}
        location = None
        while not p.at_end():
            if p.accept("TBLPROPERTIES"):
                p.expect("(")
                while True:
                    key = p.property_key()
                    p.accept("=")
                    properties[key] = _property_value(p)
                    if not p.accept(","):
                        break
                p.expect(")")
            elif p.accept("LOCATION"):
                location = p.string("the clone's location")
            else:
                raise p.error("Expected TBLPROPERTIES (...) or LOCATION '...'.")
        return Clone(table=table, source=source, shallow=shallow, mode=mode, if_not_exists=if_not_exists,  # type: ignore[arg-type]
                     version=version, timestamp=timestamp, properties=properties, location=location,
                     text=p.statement)  # fmt: skip

    return handler


def _property_value(p: Cursor) -> str:
    """A TBLPROPERTIES value: a quoted string, a number or a word (true / false)."""
    if p.at_end():
        raise p.error("Expected a property value.")
    tok = p.tokens[p.i][0]
    p.i += 1
    return tok.text


def _convert(p: Cursor) -> Statement:
    s, e = p.raw_until(("NO", "STATISTICS"), ("PARTITIONED", "BY"))
    identifier = p.statement[s:e].strip()
    if not identifier:
        raise p.error("Expected parquet.`/path/to/dir`.")
    p.accept("NO", "STATISTICS")  # statistics are read from the Parquet footers: no extra pass to skip
    schema = None
    if p.accept("PARTITIONED", "BY"):
        p.expect("(")
        s, e = p.raw_until((")",))
        schema = p.statement[s:e].strip()
        p.expect(")")
    p.finish()
    return ConvertToDelta(identifier=identifier, partition_schema=schema, text=p.statement)


def _generate(p: Cursor) -> Statement:
    if p.at_end():
        raise p.error("Expected symlink_format_manifest.")
    mode = p.tokens[p.i][0].text
    p.i += 1
    p.expect("FOR", "TABLE")
    table = p.table()
    p.finish()
    return Generate(table=table, mode=mode, text=p.statement)


def _sync_metadata(p: Cursor) -> Statement:
    """MSCK REPAIR TABLE t SYNC METADATA: a UniForm table's Iceberg metadata written now."""
    table = p.table()
    if not p.accept("SYNC", "METADATA"):
        raise UnsupportedStatementError(
            "MSCK REPAIR TABLE (partition discovery)", statement=p.statement,
            hint="Delta tables list their files in the log; serialake runs MSCK REPAIR TABLE ... SYNC METADATA only.",
        )  # fmt: skip
    p.finish()
    return SyncMetadata(table=table, text=p.statement)


def _show_properties(p: Cursor) -> Statement | None:
    try:
        table = p.table()
    except SqlError:
        return None
    key = None
    if p.accept("("):
        key = p.property_key()
        p.expect(")")
    p.finish()
    return ShowProperties(table=table, key=key, text=p.statement)


def _transaction_word(make: Callable[..., Statement]) -> Callable[[Cursor], Statement]:
    """BEGIN / COMMIT / ROLLBACK, with an optional TRANSACTION or WORK."""

    def handler(p: Cursor) -> Statement:
        p.accept("TRANSACTION") or p.accept("WORK")
        p.finish()
        return make(text=p.statement)

    return handler


def _unsupported(what: str, hint: str | None = None) -> Callable[[Cursor], Statement]:
    def handler(p: Cursor) -> Statement:
        raise UnsupportedStatementError(what, statement=p.statement, hint=hint)

    return handler


def _head(words: str) -> re.Pattern[str]:
    return re.compile(r"\s+".join(words.split()) + r"\b\s*", re.I)


COMMANDS: list[tuple[re.Pattern[str], Callable[[Cursor], Statement | None]]] = [
    (_head("OPTIMIZE"), _optimize),
    (_head("REORG TABLE"), _reorg),
    (_head("VACUUM"), _vacuum),
    (_head("RESTORE"), _restore),
    (re.compile(r"DESC(?:RIBE)?\s+HISTORY\b\s*", re.I), _describe_history),
    (re.compile(r"DESC(?:RIBE)?\s+DETAIL\b\s*", re.I), _describe_detail),
    (re.compile(r"DESC(?:RIBE)?\b\s*", re.I), _describe_table),
    (_head("SET TRANSACTION_ISOLATION"), _set_isolation),
    (_head("SET TRANSACTION ISOLATION LEVEL"), _set_isolation_level),
    (_head("SHOW TRANSACTION_ISOLATION"), _show_isolation),
    (_head("SHOW TRANSACTION ISOLATION"), _show_isolation),
    (_head("START TRANSACTION"), _transaction_word(BeginTransaction)),
    (_head("BEGIN"), _transaction_word(BeginTransaction)),
    (_head("COMMIT"), _transaction_word(CommitTransaction)),
    (_head("ROLLBACK"), _transaction_word(RollbackTransaction)),
    (_head("ALTER TABLE"), _alter_table),
    (_head("CREATE OR REPLACE TABLE"), _clone("createOrReplace")),
    (_head("CREATE TABLE"), _clone("create")),
    (_head("REPLACE TABLE"), _clone("replace")),
    (_head("SHOW TBLPROPERTIES"), _show_properties),
    (_head("CONVERT TO DELTA"), _convert),
    (_head("FSCK REPAIR TABLE"), _unsupported("FSCK REPAIR TABLE")),
    (_head("MSCK REPAIR TABLE"), _sync_metadata),
    (_head("GENERATE"), _generate),
    (_head("COPY INTO"), _unsupported("COPY INTO", "Read the files with Spark and INSERT them.")),
]
