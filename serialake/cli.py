"""The ``serialake`` command line: inspect tables, run maintenance and SQL, verify, and the demo.

``history``, ``detail``, ``describe`` and ``log`` read only the Delta log (``serialake.core``)
and never start Spark; ``vacuum``, ``optimize`` and ``sql`` start a local SparkSession.
Every command prints readable tables (rich) or, with ``--json``, one JSON document.
A table is given by path or by a name registered in the catalog (``serialake.register``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import traceback
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from serialake.exceptions import DeltaError
from serialake.tableinfo import history_rows, iso_time

if TYPE_CHECKING:
    from rich.console import Console

    from serialake.core import DeltaLog

__all__ = ["build_parser", "describe_info", "detail_info", "history_rows", "log_info", "main"]

DEFAULT_MAX_ROWS = 100


# ---------------------------------------------------------------------------------------------
# Entry point
# ---------------------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code (0 ok, 1 failed, 2 usage error)."""
    args_list = list(sys.argv[1:] if argv is None else argv)
    if args_list and args_list[0] == "verify":
        from serialake.verify.runner import main as verify_main

        return verify_main(args_list[1:])
    if args_list and args_list[0] == "demo":
        from serialake.demo import main as demo_main

        return demo_main(args_list[1:])
    parser = build_parser()
    args = parser.parse_args(args_list)
    if args.command is None:
        parser.print_help()
        return 2
    console = _console()
    try:
        result = _COMMANDS[args.command](args, console)
    except KeyboardInterrupt:
        _stderr_console().print("interrupted")
        return 130
    # On purpose: every failure is reported in a line or two; --debug shows the traceback.
    except Exception as e:  # noqa: BLE001
        if getattr(args, "debug", False):
            traceback.print_exc()
        return _fail(console, args, e)
    return result


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every subcommand."""
    parser = argparse.ArgumentParser(
        prog="serialake",
        description="ACID Delta Lake tables for PySpark with Delta's concurrency control.",
    )
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--json", action="store_true", help="print one JSON document (for scripts)")
    common.add_argument("--debug", action="store_true", help="on failure, also print the Python traceback")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    p = sub.add_parser("history", parents=[common], help="commits, newest first (log only, no Spark)")
    p.add_argument("table", metavar="PATH", help="table path or registered name")
    p.add_argument("--limit", type=int, default=None, metavar="N", help="show the newest N commits")

    p = sub.add_parser("detail", parents=[common], help="DESCRIBE DETAIL: location, size, protocol (log only)")
    p.add_argument("table", metavar="PATH", help="table path or registered name")

    p = sub.add_parser(
        "describe", parents=[common], help="schema, partitioning, properties, isolation level, features (log only)"
    )
    p.add_argument("table", metavar="PATH", help="table path or registered name")

    p = sub.add_parser("log", parents=[common], help="the actions of one commit (log only)")
    p.add_argument("table", metavar="PATH", help="table path or registered name")
    p.add_argument("version", type=int, metavar="VERSION", help="commit version")

    p = sub.add_parser("vacuum", parents=[common], help="delete files the table no longer references (Spark)")
    p.add_argument("table", metavar="PATH", help="table path or registered name")
    p.add_argument("--retain-hours", type=float, default=None, metavar="H",
                   help="keep files removed less than H hours ago (default: the table's retention, 7 days)")
    p.add_argument("--dry-run", action="store_true", help="list the files that would be deleted")

    p = sub.add_parser("optimize", parents=[common], help="compact small files, optionally Z-ordered (Spark)")
    p.add_argument("table", metavar="PATH", help="table path or registered name")
    p.add_argument("--where", default=None, metavar="PREDICATE",
                   help="partition predicate, e.g. \"date = '2024-01-01'\"")  # fmt: skip
    p.add_argument("--zorder-by", default=None, metavar="COLS", help="comma-separated columns to Z-order by")

    p = sub.add_parser("sql", parents=[common], help="run SQL statements (Spark)")
    p.add_argument("statement", nargs="?", metavar="STATEMENT", help="one SQL statement")
    p.add_argument("--file", "-f", default=None, metavar="F", help="a script of statements separated by ';'")
    p.add_argument("--max-rows", type=int, default=DEFAULT_MAX_ROWS, metavar="N",
                   help=f"rows shown per result (default {DEFAULT_MAX_ROWS})")  # fmt: skip

    sub.add_parser("verify", help="run the isolation checker (serialake verify --help)", add_help=False)
    sub.add_parser("demo", help="concurrent writers at both isolation levels (serialake demo --help)", add_help=False)
    return parser


# ---------------------------------------------------------------------------------------------
# Log-only commands (no Spark)
# ---------------------------------------------------------------------------------------------


def detail_info(log: DeltaLog) -> dict[str, Any]:
    """DESCRIBE DETAIL's fields, from the latest snapshot."""
    from serialake.core.model import features

    snap = log.update()
    meta = snap.metadata
    protocol = snap.protocol
    return {
        "format": "delta",
        "id": meta.id,
        "name": meta.name,
        "description": meta.description,
        "location": snap.table_path,
        "version": snap.version,
        "createdAt": iso_time(meta.created_time),
        "lastModified": iso_time(snap.timestamp),
        "partitionColumns": list(meta.partition_columns),
        "numFiles": snap.num_files,
        "sizeInBytes": snap.size_in_bytes(),
        "properties": dict(meta.configuration),
        "minReaderVersion": protocol.min_reader_version,
        "minWriterVersion": protocol.min_writer_version,
        "tableFeatures": sorted(features.table_features(protocol)),
    }


def describe_info(log: DeltaLog) -> dict[str, Any]:
    """Schema, partitioning, properties, isolation level and features of the latest snapshot."""
    from serialake.core.model import features
    from serialake.core.model import properties as props
    from serialake.core.txn import row_level

    snap = log.update()
    meta = snap.metadata
    protocol = snap.protocol
    parts = {c.lower() for c in meta.partition_columns}
    explicit = any(k.lower() == props.ISOLATION_LEVEL.lower() for k in meta.configuration)
    dv_enabled = bool(props.get(meta.configuration, props.ENABLE_DELETION_VECTORS))
    return {
        "location": snap.table_path,
        "version": snap.version,
        "name": meta.name,
        "description": meta.description,
        "columns": [
            {
                "name": f.name,
                "type": f.data_type.simple_string(),
                "nullable": f.nullable,
                "comment": f.metadata.get("comment"),
                "partition": f.name.lower() in parts,
            }
            for f in snap.schema.fields
        ],
        "partitionColumns": list(meta.partition_columns),
        "properties": dict(meta.configuration),
        "isolationLevel": snap.isolation_level,
        "isolationLevelSource": "table property" if explicit else "default",
        "deletionVectors": dv_enabled,
        "rowLevelConcurrency": bool(row_level.enabled(meta)),
        "protocol": {"minReaderVersion": protocol.min_reader_version, "minWriterVersion": protocol.min_writer_version},
        "readerFeatures": sorted(features.reader_features(protocol)),
        "writerFeatures": sorted(features.writer_features(protocol)),
        "numFiles": snap.num_files,
        "sizeInBytes": snap.size_in_bytes(),
    }


def log_info(log: DeltaLog, version: int) -> dict[str, Any]:
    """The actions of commit ``version`` as JSON objects, with the commit's timestamp."""
    try:
        entry = log.read_commit(version)
    except FileNotFoundError:
        latest = log.update().version
        raise FileNotFoundError(
            f"Table {log.table_path} has no commit file for version {version} (latest version: {latest}; "
            "older commits may have been cleaned up after a checkpoint)."
        ) from None
    return {
        "location": log.table_path,
        "version": version,
        "timestamp": iso_time(entry.timestamp),
        "actions": [a.to_dict() for a in entry.actions],
    }


def _cmd_history(args: argparse.Namespace, console: Console) -> int:
    rows = history_rows(_log(args.table), args.limit)
    if args.json:
        return _print_json(rows)
    columns = ["version", "timestamp", "operation", "parameters", "read", "isolation", "blind", "metrics"]
    table = _table(f"History of {_log(args.table).table_path}", columns)
    for r in rows:
        table.add_row(
            str(r["version"]),
            r["timestamp"] or "",
            r["operation"] or "",
            _kv(r["operationParameters"]),
            "" if r["readVersion"] is None else str(r["readVersion"]),
            r["isolationLevel"] or "",
            "" if r["isBlindAppend"] is None else ("yes" if r["isBlindAppend"] else "no"),
            _kv(r["operationMetrics"]),
        )
    console.print(table)
    return 0


def _cmd_detail(args: argparse.Namespace, console: Console) -> int:
    info = detail_info(_log(args.table))
    if args.json:
        return _print_json(info)
    table = _table(f"Detail of {info['location']}", ["field", "value"])
    for key, value in info.items():
        table.add_row(key, _show(value))
    console.print(table)
    return 0


def _cmd_describe(args: argparse.Namespace, console: Console) -> int:
    info = describe_info(_log(args.table))
    if args.json:
        return _print_json(info)
    title = f"{info['location']} (version {info['version']})"
    cols = _table(title, ["column", "type", "nullable", "partition", "comment"])
    for c in info["columns"]:
        cols.add_row(c["name"], c["type"], "yes" if c["nullable"] else "NOT NULL", "yes" if c["partition"] else "",
                     c["comment"] or "")  # fmt: skip
    console.print(cols)
    facts = _table(None, ["", ""], header=False)
    facts.add_row("partitioned by", ", ".join(info["partitionColumns"]) or "(not partitioned)")
    facts.add_row("isolation level", f"{info['isolationLevel']} ({info['isolationLevelSource']})")
    facts.add_row("deletion vectors", "enabled" if info["deletionVectors"] else "disabled")
    facts.add_row("row-level concurrency", "yes" if info["rowLevelConcurrency"] else "no (file-level conflicts)")
    p = info["protocol"]
    facts.add_row("protocol", f"reader {p['minReaderVersion']}, writer {p['minWriterVersion']}")
    facts.add_row("reader features", ", ".join(info["readerFeatures"]) or "-")
    facts.add_row("writer features", ", ".join(info["writerFeatures"]) or "-")
    facts.add_row("properties", _kv(info["properties"]) or "-")
    facts.add_row("files", f"{info['numFiles']} ({info['sizeInBytes']} bytes)")
    console.print(facts)
    return 0


def _cmd_log(args: argparse.Namespace, console: Console) -> int:
    info = log_info(_log(args.table), args.version)
    if args.json:
        return _print_json(info)
    table = _table(f"Version {info['version']} of {info['location']} ({info['timestamp']})", ["action", "summary"])
    for action in info["actions"]:
        (key, body), = action.items()
        table.add_row(key, _action_summary(key, body))
    console.print(table)
    return 0


# ---------------------------------------------------------------------------------------------
# Spark commands
# ---------------------------------------------------------------------------------------------


def _cmd_vacuum(args: argparse.Namespace, console: Console) -> int:
    from serialake.sql.execute import execute
    from serialake.sql.statements import TableRef, Vacuum

    spark = _spark(console, args)
    path = _locate(args.table)
    statement = Vacuum(table=TableRef(text=path, path=path), retain_hours=args.retain_hours, dry_run=args.dry_run)
    result = execute(spark, statement)  # None: it ran, but its result could not be built (a warning said why)
    files = [r[0] for r in result.collect()] if result is not None else []
    if args.json:
        return _print_json({"location": path, "dryRun": args.dry_run, "files": files})
    verb = "would delete" if args.dry_run else "deleted"
    console.print(f"VACUUM {path}: {verb} {len(files)} file(s)")
    for f in files:
        console.print(f"  {f}")
    return 0


def _cmd_optimize(args: argparse.Namespace, console: Console) -> int:
    from serialake.sql.execute import execute
    from serialake.sql.statements import Optimize, TableRef

    spark = _spark(console, args)
    path = _locate(args.table)
    zorder = tuple(c.strip() for c in (args.zorder_by or "").split(",") if c.strip())
    statement = Optimize(table=TableRef(text=path, path=path), where=args.where, zorder_by=zorder)
    result = execute(spark, statement)  # None: it committed, but its result could not be built (a warning said why)
    rows = [r.asDict(recursive=True) for r in result.collect()] if result is not None else []
    if args.json:
        return _print_json({"location": path, "result": rows})
    for row in rows:
        metrics = row.get("metrics", row)
        table = _table(f"OPTIMIZE {path}", ["metric", "value"])
        for k, v in (metrics or {}).items():
            table.add_row(str(k), _show(v))
        console.print(table)
    return 0


def _cmd_sql(args: argparse.Namespace, console: Console) -> int:
    from serialake.sql import split_statements, sql

    if (args.statement is None) == (args.file is None):
        console.print("[red]serialake sql: give one STATEMENT or --file F[/red]")
        return 2
    if args.file is not None:
        with open(args.file) as f:
            text = f.read()
        statements = [body for _, body in split_statements(text)]
    else:
        statements = [args.statement]
    spark = _spark(console, args)
    results = []
    for statement in statements:
        df = sql(spark, statement)  # None: it committed, but its result could not be built (a warning said why)
        columns = df.columns if df is not None else []
        rows = df.limit(args.max_rows + 1).collect() if df is not None and columns else []
        shown = [r.asDict(recursive=True) for r in rows[: args.max_rows]]
        result = {"statement": statement.strip(), "columns": columns, "rows": shown,
                  "truncated": len(rows) > args.max_rows}  # fmt: skip
        results.append(result)
        if not args.json:
            _print_result(console, result)
    if args.json:
        return _print_json(results if args.file is not None else results[0])
    return 0


def _print_result(console: Console, result: dict[str, Any]) -> None:
    first = result["statement"].splitlines()[0] if result["statement"] else ""
    if not result["columns"]:
        console.print(f"[green]OK[/green] {first}")
        return
    table = _table(first, result["columns"])
    for row in result["rows"]:
        table.add_row(*[_show(row.get(c)) for c in result["columns"]])
    console.print(table)
    if result["truncated"]:
        console.print(f"(showing the first {len(result['rows'])} rows)")


_COMMANDS: dict[str, Callable[[argparse.Namespace, Any], int]] = {
    "history": _cmd_history,
    "detail": _cmd_detail,
    "describe": _cmd_describe,
    "log": _cmd_log,
    "vacuum": _cmd_vacuum,
    "optimize": _cmd_optimize,
    "sql": _cmd_sql,
}


# ---------------------------------------------------------------------------------------------
# Helpers
# ---------------------------------------------------------------------------------------------


def _console() -> Console:
    from rich.console import Console

    return Console(highlight=False, soft_wrap=False, width=None if sys.stdout.isatty() else 160)


def _locate(table: str) -> str:
    """A table argument as a path: an existing directory or path-like text, else a registered name."""
    from serialake.storage import normalize_table_path

    if os.path.isdir(table) or os.sep in table or table.startswith((".", "~", "file:")):
        return normalize_table_path(table)
    from serialake.core.tables.catalog import lookup

    found = lookup(table)
    return found if found is not None else normalize_table_path(table)


def _log(table: str) -> DeltaLog:
    from serialake.core import DeltaLog
    from serialake.exceptions import DeltaTableNotFoundError

    log = DeltaLog.for_table(_locate(table))
    if not log.table_exists():
        raise DeltaTableNotFoundError(
            f"{log.table_path} is not a Delta table (no _delta_log commits found); give a table path "
            "or a name registered with serialake.register / CREATE TABLE ... LOCATION."
        )
    return log


def _spark(console: Console, args: argparse.Namespace) -> Any:
    from serialake.spark.session import spark_session

    if args.json:
        return spark_session("serialake-cli")
    with console.status("Starting Spark...", spinner="dots"):
        return spark_session("serialake-cli")


def _fail(console: Console, args: argparse.Namespace, error: BaseException) -> int:
    message = _error_message(error)
    if getattr(args, "json", False):
        _print_json({"error": {"type": type(error).__name__, "message": message}})
    else:
        err = _stderr_console()
        err.print(f"[bold red]{type(error).__name__}[/bold red]: ", end="", soft_wrap=True)
        err.print(message, markup=False, soft_wrap=True)
        if not isinstance(error, (DeltaError, OSError)) and not getattr(args, "debug", False):
            err.print("(an unexpected error: run again with --debug for the traceback)", markup=False)
    return 1


#: Longest error message the CLI prints (a JVM error can carry a whole stack trace).
_MAX_MESSAGE = 600


def _error_message(error: BaseException) -> str:
    """The error's message, cut to its first lines (Spark's carry the JVM stack trace)."""
    if isinstance(error, OSError) and error.strerror and not isinstance(error, DeltaError):
        where = f": {error.filename}" if error.filename else ""
        return f"{error.strerror}{where}"
    text = str(error).strip() or repr(error)
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if not isinstance(error, DeltaError):
        lines = [ln for ln in lines if not ln.lstrip().startswith(("at ", "JVM stacktrace"))][:2]
    text = "\n".join(lines)
    return text if len(text) <= _MAX_MESSAGE else text[: _MAX_MESSAGE - 3] + "..."


def _stderr_console() -> Console:
    from rich.console import Console

    return Console(stderr=True, highlight=False)


def _table(title: str | None, columns: Sequence[str], header: bool = True) -> Any:
    from rich.table import Table

    table = Table(title=title, show_header=header, title_justify="left", header_style="bold")
    for c in columns:
        table.add_column(c, overflow="fold")
    return table


def _print_json(value: Any) -> int:
    print(json.dumps(value, indent=2, default=str))
    return 0


def _kv(mapping: dict[str, Any]) -> str:
    return ", ".join(f"{k}={_show(v)}" for k, v in mapping.items())


def _show(value: Any) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, (dict, list)):
        return json.dumps(value, default=str)
    return str(value)


def _action_summary(key: str, body: dict[str, Any]) -> str:
    """One line per action: what a reader of the log needs to see first."""
    if key in ("add", "remove", "cdc"):
        parts = [body.get("path", "")]
        if body.get("partitionValues"):
            parts.append(_kv(body["partitionValues"]))
        if body.get("size") is not None:
            parts.append(f"{body['size']} bytes")
        stats = body.get("stats")
        if isinstance(stats, str):
            try:
                n = json.loads(stats).get("numRecords")
            except ValueError:
                n = None
            if n is not None:
                parts.append(f"{n} rows")
        parts.append(f"dataChange={str(body.get('dataChange')).lower()}")
        dv = body.get("deletionVector")
        if dv:
            parts.append(f"DV: {dv.get('cardinality')} deleted rows")
        return "  ".join(str(p) for p in parts)
    if key == "commitInfo":
        keys = ("operation", "readVersion", "isolationLevel", "isBlindAppend", "operationParameters")
        return _kv({k: body[k] for k in keys if k in body})
    if key == "metaData":
        schema = body.get("schemaString") or ""
        try:
            fields = json.loads(schema).get("fields", [])
            schema = ", ".join(f"{f['name']} {f['type'] if isinstance(f['type'], str) else 'struct'}" for f in fields)
        except (ValueError, AttributeError, KeyError, TypeError):
            pass
        return (
            f"schema: {schema}  partitionColumns={body.get('partitionColumns')}  "
            f"configuration={_show(body.get('configuration') or {})}"
        )
    if key == "protocol":
        out = f"reader {body.get('minReaderVersion')}, writer {body.get('minWriterVersion')}"
        if body.get("readerFeatures") is not None:
            out += f"  readerFeatures={body['readerFeatures']}"
        if body.get("writerFeatures") is not None:
            out += f"  writerFeatures={body['writerFeatures']}"
        return out
    return _show(body)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
