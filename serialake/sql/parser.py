"""SQL text to typed statements (``serialake.sql.statements``), without Spark.

sqlglot's Spark dialect parses the standard statements (CREATE, INSERT, UPDATE, DELETE,
MERGE, ALTER TABLE ... SET TBLPROPERTIES / ADD COLUMNS, queries); Delta's own commands
are read by ``serialake.sql.commands``. Conditions on the target of DELETE / UPDATE lose
the target's alias (the table API resolves them against the table alone).
"""

from __future__ import annotations

import re

from sqlglot import exp
from sqlglot.errors import TokenError
from sqlglot.tokens import TokenType

from serialake.core.predicates.expressions import (
    Expr,
    ParsedCondition,
    PredicateError,
    Unknown,
    conjunction,
    from_sqlglot,
)
from serialake.sql.commands import COMMANDS, ISOLATION_LEVELS, Cursor
from serialake.sql.errors import SqlError, UnsupportedStatementError, position_of
from serialake.sql.statements import (
    AddColumns,
    Atomic,
    ColumnSpec,
    CreateTable,
    CreateTempView,
    Delete,
    DropTable,
    Insert,
    Merge,
    MergeClause,
    Passthrough,
    Query,
    SetProperties,
    Statement,
    TableRef,
    Update,
)
from serialake.sql.syntax import (
    DIALECT,
    LEADING_NOISE,
    SPARK,
    first_word,
    noise_len,
    parse_condition,
    parse_sql,
    table_ref_of,
    token_error,
)

__all__ = [
    "DIALECT",
    "ISOLATION_LEVELS",
    "parse_condition",
    "parse_statement",
    "split_statements",
    "table_ref_of",
]


def split_statements(text: str) -> list[tuple[int, str]]:
    """The statements of a script as ``(offset, text)``, split at ``;`` outside quotes and comments.

    Empty pieces (only whitespace or comments) are dropped; a statement's text keeps its
    leading comments, so positions inside it are offsets into ``text`` minus ``offset``.
    """
    try:
        tokens = SPARK.tokenize(text)
    except TokenError as e:
        raise token_error(text, e) from None
    pieces: list[tuple[int, str]] = []
    start = 0
    for tok in tokens:
        if tok.token_type == TokenType.SEMICOLON:
            pieces.append((start, text[start : tok.start]))
            start = tok.end + 1
    pieces.append((start, text[start:]))
    return [(off, body) for off, body in pieces if LEADING_NOISE.fullmatch(body) is None]


def parse_statement(text: str) -> Statement:
    """Parse one statement (a trailing ``;`` is allowed); ``SqlError`` shows where it fails.

    ``BEGIN ATOMIC <statement>; ... END`` is one statement (``Atomic``) holding several.
    """
    atomic = _ATOMIC.match(text, noise_len(text))
    if atomic:
        inner = atomic.group(1)
        parts = tuple(parse_statement(body) for _, body in split_statements(inner))
        if not parts:
            raise SqlError("BEGIN ATOMIC ... END holds no statement.", statement=text)
        return Atomic(parts, text=text)
    pieces = split_statements(text)
    if not pieces:
        raise SqlError("Empty statement: there is nothing to run.", statement=text)
    if len(pieces) > 1:
        off = pieces[1][0] + noise_len(pieces[1][1])
        line, col = position_of(text, off)
        raise SqlError(
            f"Expected one statement, found {len(pieces)}. Run them one at a time "
            "(or use `serialake sql --file`, which runs a script statement by statement).",
            statement=text,
            line=line,
            column=col,
            text=first_word(text[off:]),
        )
    end = pieces[0][0] + len(pieces[0][1])
    body = text[:end]  # keeps offsets identical to the caller's text
    head = noise_len(body)
    for pattern, handler in COMMANDS:
        m = pattern.match(body, head)
        if m:
            result = handler(Cursor(text, body, m.end()))
            if result is not None:
                return result
    return _from_sqlglot(text, body, head)


_ATOMIC = re.compile(r"BEGIN\s+ATOMIC\b(.*)\bEND\s*;?\s*\Z", re.I | re.S)


# ---------------------------------------------------------------------------------------------
# Statements sqlglot parses
# ---------------------------------------------------------------------------------------------


def _from_sqlglot(statement: str, body: str, head: int) -> Statement:
    mode = "create"
    text = body
    replace_head = re.compile(r"REPLACE(\s+TABLE\b)", re.I).match(body, head)
    if replace_head:
        # sqlglot has no bare REPLACE TABLE: parse it as CREATE (same length keeps positions).
        text = body[:head] + "CREATE " + body[head + len("REPLACE") :]
        mode = "replace"
    replace_on_using = _INSERT_REPLACE_ON_USING.match(body, head)
    if replace_on_using:
        # Spark 4's INSERT INTO t REPLACE ON cond / REPLACE USING (cols): delta-spark 4.4 refuses it
        # when it runs (sqlglot parses USING only, as if it were a plain INSERT).
        target = exp.to_table(replace_on_using.group("table"), dialect=DIALECT)
        return Insert(table=table_ref_of(target, statement), query=exp.select("1"), replace_on_using=True,
                      text=statement)  # fmt: skip
    evolution = _MERGE_WITH_EVOLUTION.match(body, head)
    if evolution:
        # sqlglot has no MERGE WITH SCHEMA EVOLUTION: blank the clause out (positions kept).
        text = body[: evolution.start(1)] + " " * len(evolution.group(1)) + body[evolution.end(1) :]
    tree = parse_sql(statement, text)
    if tree is None:
        raise SqlError("Empty statement: there is nothing to run.", statement=statement)
    if isinstance(tree, exp.Create):
        return _create(statement, tree, mode)
    if isinstance(tree, exp.Insert):
        return _insert(statement, tree)
    if isinstance(tree, exp.Delete):
        return _delete(statement, tree)
    if isinstance(tree, exp.TruncateTable):
        tables = tree.expressions
        if len(tables) != 1 or not isinstance(tables[0], exp.Table) or tree.args.get("is_database"):
            return Passthrough(expression=tree, kind="TRUNCATE", text=statement)
        return Delete(table=table_ref_of(tables[0], statement), operation="TRUNCATE", text=statement)
    if isinstance(tree, exp.Update):
        return _update(statement, tree)
    if isinstance(tree, exp.Merge):
        return _merge(statement, tree, schema_evolution=evolution is not None)
    if isinstance(tree, exp.Alter):
        return _alter(statement, tree)
    if isinstance(tree, exp.Drop) and str(tree.args.get("kind") or "").upper() == "TABLE":
        tables = tree.args.get("tables") or [tree.this]
        if len(tables) == 1 and isinstance(tables[0], exp.Table):
            return DropTable(table=table_ref_of(tables[0], statement), if_exists=bool(tree.args.get("exists")),
                             text=statement)  # fmt: skip
    if isinstance(tree, exp.Query):
        return Query(expression=tree, text=statement)
    if isinstance(tree, exp.Command):
        return Passthrough(expression=None, kind=str(tree.this).upper(), text=statement)
    return Passthrough(expression=tree, kind=first_word(body[head:]).upper(), text=statement)


def _create(statement: str, tree: exp.Create, mode: str) -> Statement:
    kind = str(tree.args.get("kind") or "").upper()
    props = tree.args.get("properties")
    prop_list = list(props.expressions) if props is not None else []
    if kind == "VIEW":
        temporary = any(isinstance(p, exp.TemporaryProperty) for p in prop_list)
        target = tree.this
        if temporary and isinstance(target, exp.Table) and isinstance(tree.expression, exp.Query):
            return CreateTempView(name=target.name, query=tree.expression, replace=bool(tree.args.get("replace")),
                                  text=statement)  # fmt: skip
        return Passthrough(expression=tree, kind="CREATE VIEW", text=statement)
    if kind != "TABLE":
        return Passthrough(expression=tree, kind=f"CREATE {kind}", text=statement)
    if tree.args.get("clone") is not None:
        raise UnsupportedStatementError("CREATE TABLE ... CLONE", statement=statement)
    schema = tree.this
    table = schema.this if isinstance(schema, exp.Schema) else schema
    if not isinstance(table, exp.Table):
        raise SqlError(f"Unsupported table in CREATE TABLE: {table.sql(DIALECT)!r}.", statement=statement)
    ref = table_ref_of(table, statement)
    columns = [_column(statement, c) for c in (schema.expressions if isinstance(schema, exp.Schema) else [])]
    partition_by: list[str] = []
    cluster_by: list[str] = []
    properties: dict[str, str] = {}
    location = comment = None
    fmt = "delta"
    for prop in prop_list:
        if isinstance(prop, exp.FileFormatProperty):
            fmt = _text(prop.this).lower()
        elif isinstance(prop, exp.PartitionedByProperty):
            for item in getattr(prop.this, "expressions", [prop.this]):
                if isinstance(item, exp.ColumnDef):
                    columns.append(_column(statement, item))
                    partition_by.append(item.name)
                else:
                    partition_by.append(item.name if isinstance(item, (exp.Identifier, exp.Column)) else _text(item))
        elif isinstance(prop, exp.LocationProperty):
            location = _text(prop.this)
        elif isinstance(prop, exp.SchemaCommentProperty):
            comment = _text(prop.this)
        elif isinstance(prop, exp.ClusterProperty):
            cluster_by.extend(e.sql(DIALECT) for e in prop.expressions)
        elif isinstance(prop, exp.ClusteredByProperty):
            raise UnsupportedStatementError("CREATE TABLE ... CLUSTERED BY ... INTO n BUCKETS (bucketing)",
                                            statement=statement, hint="Use CLUSTER BY (liquid clustering).")
        elif isinstance(prop, exp.TemporaryProperty):
            raise UnsupportedStatementError("CREATE TEMPORARY TABLE", statement=statement)
        elif type(prop) is exp.Property:  # TBLPROPERTIES entries (subclasses are other clauses)
            key, value = _property(prop)
            properties[key] = value
        else:
            raise UnsupportedStatementError(f"CREATE TABLE ... {prop.sql(DIALECT)}", statement=statement)
    if fmt != "delta":
        return Passthrough(expression=tree, kind="CREATE TABLE", text=statement)
    if tree.args.get("replace"):
        mode = "createOrReplace"
    query = tree.expression if isinstance(tree.expression, exp.Query) else None
    if query is None and not columns:
        if location is None and ref.path is None:
            raise SqlError(
                f"CREATE TABLE {ref.text} needs a column list, AS SELECT, or the LOCATION of an existing table.",
                statement=statement,
            )
    return CreateTable(
        table=ref,
        columns=tuple(columns),
        partition_by=tuple(partition_by),
        properties=properties,
        location=location,
        comment=comment,
        if_not_exists=bool(tree.args.get("exists")),
        mode=mode,  # type: ignore[arg-type]
        query=query,
        cluster_by=tuple(cluster_by),
        text=statement,
    )


def _column(statement: str, col: exp.Expr) -> ColumnSpec:
    if not isinstance(col, exp.ColumnDef) or col.args.get("kind") is None:
        raise SqlError(f"Expected a column definition (name and type), got {col.sql(DIALECT)!r}.",
                       statement=statement)  # fmt: skip
    nullable = True
    comment = generated = None
    identity: tuple[int, int, bool] | None = None
    for constraint in col.args.get("constraints") or []:
        kind = constraint.args.get("kind")
        if isinstance(kind, exp.NotNullColumnConstraint):
            nullable = bool(kind.args.get("allow_null"))
        elif isinstance(kind, exp.CommentColumnConstraint):
            comment = _text(kind.this)
        elif isinstance(kind, exp.ComputedColumnConstraint) and kind.this is not None:
            generated = kind.this.sql(DIALECT)
        elif isinstance(kind, exp.GeneratedAsIdentityColumnConstraint) and kind.expression is None:
            start, step = (_integer(statement, kind.args.get(k), col.name, default=1) for k in ("start", "increment"))
            identity = (start, step, bool(kind.this))
        else:
            raise UnsupportedStatementError(
                f"column constraint {constraint.sql(DIALECT)!r} (column '{col.name}')", statement=statement
            )
    return ColumnSpec(name=col.name, type=col.args["kind"].sql(DIALECT), nullable=nullable, comment=comment,
                      generated=generated, identity=identity)  # fmt: skip


def _integer(statement: str, node: exp.Expr | None, column: str, *, default: int) -> int:
    """An identity column's START WITH / INCREMENT BY value (a signed whole number)."""
    if node is None:
        return default
    text = node.sql(DIALECT)
    try:
        return int(text)
    except ValueError:
        raise SqlError(f"Identity column '{column}': expected a whole number, got {text!r}.",
                       statement=statement) from None  # fmt: skip


def _property(prop: exp.Property) -> tuple[str, str]:
    key = prop.this
    key_text = key.this if isinstance(key, exp.Literal) else key.sql(DIALECT)
    return str(key_text), _text(prop.args.get("value"))


def _text(node: exp.Expr | str | None) -> str:
    """A literal's value as text (TRUE -> 'true'); other expressions as SQL."""
    if node is None:
        return ""
    if isinstance(node, str):
        return node
    if isinstance(node, exp.Boolean):
        return "true" if node.this else "false"
    if isinstance(node, (exp.Literal, exp.Var, exp.Identifier)):
        return str(node.this)
    return node.sql(DIALECT)


def _insert(statement: str, tree: exp.Insert) -> Statement:
    target = tree.this
    columns = None
    if isinstance(target, exp.Schema):
        columns = tuple(c.name for c in target.expressions)
        target = target.this
    if not isinstance(target, exp.Table):
        kind = "INSERT OVERWRITE DIRECTORY" if isinstance(target, exp.Directory) else "INSERT into this target"
        raise UnsupportedStatementError(kind, statement=statement)
    static: dict[str, exp.Expr] = {}
    partition = target.args.get("partition")
    if partition is not None:
        for item in partition.expressions:
            if isinstance(item, exp.EQ):
                static[item.this.name] = item.expression
            else:
                raise UnsupportedStatementError(
                    f"INSERT with a dynamic partition spec ({item.sql(DIALECT)})",
                    statement=statement,
                    hint="Give the partition value (PARTITION (col = value)) or leave PARTITION out.",
                )
        target = target.copy()
        target.set("partition", None)
    query = tree.expression
    source = tree.args.get("source")
    if query is None and isinstance(source, exp.Table):
        query = exp.select("*").from_(source)
    if query is None:
        raise SqlError("INSERT needs VALUES, a query, or TABLE <name>.", statement=statement)
    where = tree.args.get("where")
    return Insert(
        table=table_ref_of(target, statement),
        query=query,
        columns=columns,
        overwrite=bool(tree.args.get("overwrite")),
        replace_where=where.sql(DIALECT) if where is not None else None,
        static_partition=static,
        by_name=bool(tree.args.get("by_name")),
        text=statement,
    )


def _delete(statement: str, tree: exp.Delete) -> Statement:
    target = tree.this or (tree.args.get("tables") or [None])[0]
    if not isinstance(target, exp.Table):
        raise SqlError("DELETE needs a table: DELETE FROM <table> [WHERE <condition>].", statement=statement)
    if tree.args.get("using"):
        hint = "Use MERGE ... WHEN MATCHED THEN DELETE."
        raise UnsupportedStatementError("DELETE ... USING", statement=statement, hint=hint)
    ref = table_ref_of(target, statement)
    where = tree.args.get("where")
    cond = _target_condition(statement, where.this if where is not None else None, ref, target.alias, "DELETE")
    return Delete(table=ref, condition=cond.text if cond else None, where=cond, text=statement,
                  alias=target.alias or None)  # fmt: skip


def _update(statement: str, tree: exp.Update) -> Statement:
    target = tree.this
    if not isinstance(target, exp.Table):
        raise SqlError("UPDATE needs a table: UPDATE <table> SET ... [WHERE ...].", statement=statement)
    if tree.args.get("from_") or tree.args.get("from"):
        hint = "Use MERGE ... WHEN MATCHED THEN UPDATE."
        raise UnsupportedStatementError("UPDATE ... FROM", statement=statement, hint=hint)
    ref = table_ref_of(target, statement)
    qualifiers = _qualifiers(ref, target.alias)
    sets: list[tuple[str, str]] = []
    for item in tree.expressions:
        if not isinstance(item, exp.EQ) or not isinstance(item.this, exp.Column):
            raise SqlError(f"Expected `column = expression` in SET, got {item.sql(DIALECT)!r}.", statement=statement)
        value = _unqualify(item.expression, qualifiers)
        _no_subquery(statement, value)
        sets.append((_column_name(item.this, qualifiers), value.sql(DIALECT)))
    if not sets:
        raise SqlError("UPDATE needs at least one assignment: UPDATE <table> SET col = expr [WHERE ...].",
                       statement=statement)  # fmt: skip
    where = tree.args.get("where")
    cond = _target_condition(statement, where.this if where is not None else None, ref, target.alias, "UPDATE")
    return Update(table=ref, assignments=tuple(sets), condition=cond.text if cond else None, where=cond,
                  text=statement, alias=target.alias or None)  # fmt: skip


_MERGE_WITH_EVOLUTION = re.compile(r"MERGE\s+(WITH\s+SCHEMA\s+EVOLUTION)\s+INTO\b", re.I)
_INSERT_REPLACE_ON_USING = re.compile(
    r"INSERT\s+INTO\s+(?:TABLE\s+)?(?P<table>(?:`[^`]*`|[\w$]+)(?:\s*\.\s*(?:`[^`]*`|[\w$]+))*)"
    r"(?:\s+(?:AS\s+)?(?!REPLACE\b)\w+)?\s+REPLACE\s+(?:ON|USING)\b",
    re.I,
)


def _merge(statement: str, tree: exp.Merge, *, schema_evolution: bool = False) -> Statement:
    target = tree.this
    if not isinstance(target, exp.Table):
        raise SqlError("MERGE INTO needs a target table.", statement=statement)
    ref = table_ref_of(target, statement)
    target_alias = target.alias or ref.short_name
    source = tree.args.get("using")
    if isinstance(source, exp.Table):
        source_alias = source.alias or source.name
        source = source.copy()
        source.set("alias", None)
    elif isinstance(source, exp.Subquery):
        source_alias = source.alias
        if not source_alias:
            raise SqlError("A MERGE source subquery needs an alias: USING (SELECT ...) AS s.", statement=statement)
        source = source.this
    else:
        raise SqlError(f"Unsupported MERGE source {source.sql(DIALECT) if source else ''!r}.", statement=statement)
    on = tree.args.get("on")
    if on is None:
        raise SqlError("MERGE needs an ON condition.", statement=statement)
    whens = tree.args.get("whens")
    qualifiers = {target_alias.lower()}
    clauses = [_merge_clause(statement, w, qualifiers) for w in (whens.expressions if whens is not None else [])]
    if not clauses:
        raise SqlError("MERGE needs at least one WHEN [NOT] MATCHED clause.", statement=statement)
    return Merge(
        target=ref,
        target_alias=target_alias,
        source=source,
        source_alias=source_alias,
        condition=on.sql(DIALECT),
        clauses=tuple(clauses),
        schema_evolution=schema_evolution,
        text=statement,
    )


def _merge_clause(statement: str, when: exp.Expr, target: set[str]) -> MergeClause:
    matched = bool(when.args.get("matched"))
    by_source = bool(when.args.get("source"))
    match = "matched" if matched else ("not_matched_by_source" if by_source else "not_matched")
    cond_node = when.args.get("condition")
    cond = cond_node.sql(DIALECT) if cond_node is not None else None
    then = when.args.get("then")
    if isinstance(then, exp.Var) and str(then.this).upper() == "DELETE":
        if match == "not_matched":
            raise SqlError("WHEN NOT MATCHED can only INSERT.", statement=statement)
        return MergeClause(match, "delete", cond)  # type: ignore[arg-type]
    if isinstance(then, exp.Update):
        if match == "not_matched":
            raise SqlError("WHEN NOT MATCHED can only INSERT.", statement=statement)
        items = then.expressions
        if len(items) == 1 and isinstance(items[0], exp.Star):
            if match == "not_matched_by_source":
                raise SqlError("WHEN NOT MATCHED BY SOURCE cannot UPDATE SET * (there is no source row).",
                               statement=statement)  # fmt: skip
            return MergeClause(match, "update_all", cond)  # type: ignore[arg-type]
        sets = []
        for item in items:
            if not isinstance(item, exp.EQ) or not isinstance(item.this, exp.Column):
                raise SqlError(f"Expected `column = expression` in UPDATE SET, got {item.sql(DIALECT)!r}.",
                               statement=statement)  # fmt: skip
            sets.append((_column_name(item.this, target), item.expression.sql(DIALECT)))
        return MergeClause(match, "update", cond, tuple(sets))  # type: ignore[arg-type]
    if isinstance(then, exp.Insert):
        if match != "not_matched":
            raise SqlError("Only WHEN NOT MATCHED [BY TARGET] can INSERT.", statement=statement)
        if isinstance(then.this, exp.Star):
            return MergeClause(match, "insert_all", cond)  # type: ignore[arg-type]
        cols = then.this.expressions if isinstance(then.this, exp.Tuple) else [then.this]
        vals = then.expression.expressions if isinstance(then.expression, exp.Tuple) else [then.expression]
        if len(cols) != len(vals):
            raise SqlError(f"MERGE INSERT lists {len(cols)} column(s) but {len(vals)} value(s).", statement=statement)
        pairs = tuple((_column_name(c, target), v.sql(DIALECT)) for c, v in zip(cols, vals))
        return MergeClause(match, "insert", cond, pairs)  # type: ignore[arg-type]
    raise SqlError(f"Unsupported MERGE action {then.sql(DIALECT) if then is not None else ''!r}.", statement=statement)


def _alter(statement: str, tree: exp.Alter) -> Statement:
    target = tree.this
    if str(tree.args.get("kind") or "").upper() != "TABLE" or not isinstance(target, exp.Table):
        return Passthrough(expression=tree, kind="ALTER", text=statement)
    ref = table_ref_of(target, statement)
    actions = tree.args.get("actions") or []
    if len(actions) == 1 and isinstance(actions[0], exp.AlterSet):
        props = [p for node in actions[0].expressions for p in getattr(node, "expressions", [node])]
        if props and all(isinstance(p, exp.Property) for p in props):
            return SetProperties(table=ref, properties=dict(_property(p) for p in props), text=statement)
    if actions and all(isinstance(a, (exp.Schema, exp.ColumnDef)) for a in actions):
        cols = [c for a in actions for c in (a.expressions if isinstance(a, exp.Schema) else [a])]
        specs = tuple(_column(statement, c) for c in cols)
        for spec in specs:
            if spec.generated is not None or spec.identity is not None:
                raise SqlError(
                    f"ALTER TABLE {ref.text} ADD COLUMNS: column '{spec.name}' cannot be a generated column: "
                    "existing rows have no value for it. Generated columns are declared when the table is created.",
                    statement=statement,
                )
        return AddColumns(table=ref, columns=specs, text=statement)
    what = _alter_action_name(statement, ref)
    raise UnsupportedStatementError(f"ALTER TABLE ... {what}", statement=statement)


def _alter_action_name(statement: str, ref: TableRef) -> str:
    at = statement.find(ref.text)
    rest = statement[at + len(ref.text) :] if at >= 0 else ""
    words = re.findall(r"[A-Za-z_]+", rest)[:2]
    return " ".join(w.upper() for w in words) or "this change"


# -- conditions on the target table -----------------------------------------------------------


def _qualifiers(ref: TableRef, alias: str | None) -> set[str]:
    names = {ref.short_name.lower()}
    if alias:
        names.add(alias.lower())
    return names


def _unqualify(node: exp.Expr, qualifiers: set[str]) -> exp.Expr:
    """``node`` with the target's alias / name dropped from column references."""

    def strip(n: exp.Expr) -> exp.Expr:
        if isinstance(n, exp.Column) and n.table and n.table.lower() in qualifiers and not n.args.get("db"):
            return exp.column(n.this.copy())
        return n

    return node.copy().transform(strip)


def _column_name(col: exp.Column, qualifiers: set[str]) -> str:
    unq = _unqualify(col, qualifiers)
    return unq.sql(DIALECT)


def _has_subquery(node: exp.Expr) -> bool:
    return node.find(exp.Subquery, exp.Select, exp.Exists) is not None


def _subquery_condition(node: exp.Expr, qualifiers: set[str]) -> ParsedCondition:
    """A WHERE with subqueries: Spark evaluates it as written (the target keeps its alias, so
    correlated references resolve); the core skips files by the conjuncts without subqueries."""
    parts: list[Expr] = []
    for conjunct in node.flatten() if isinstance(node, exp.And) else [node]:
        if _has_subquery(conjunct):
            parts.append(Unknown(conjunct.sql(DIALECT), ()))
            continue
        unqualified = _unqualify(conjunct, qualifiers)
        try:
            parts.append(from_sqlglot(unqualified))
        except (PredicateError, ValueError, TypeError):
            parts.append(Unknown(unqualified.sql(DIALECT), ()))
    expr = conjunction(parts)
    text = node.sql(DIALECT)
    return ParsedCondition(text, expr, subquery=True, shown=text)


def _no_subquery(statement: str, node: exp.Expr) -> None:
    """Refuse a subquery in an UPDATE SET value (Delta allows them only in the WHERE)."""
    if _has_subquery(node):
        raise UnsupportedStatementError(
            "a subquery in an UPDATE SET value", statement=statement,
            hint="Use MERGE INTO ... USING (subquery) ... WHEN MATCHED THEN UPDATE SET ...",
        )  # fmt: skip


def _target_condition(
    statement: str, node: exp.Expr | None, ref: TableRef, alias: str | None, kind: str
) -> ParsedCondition | None:
    """The WHERE of a DELETE / UPDATE on its target, unqualified: its text and its tree, parsed once."""
    if node is None:
        return None
    if _has_subquery(node):
        return _subquery_condition(node, _qualifiers(ref, alias))
    unqualified = _unqualify(node, _qualifiers(ref, alias))
    text = unqualified.sql(DIALECT)
    try:
        return ParsedCondition(text, from_sqlglot(unqualified))
    except (PredicateError, ValueError, TypeError):
        return ParsedCondition(text, Unknown(text, ()))  # not understood: the operation reads everything

