"""The ``serialake`` command line: log-only commands without Spark, and one Spark command."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from serialake.cli import main
from serialake.core import DeltaLog
from serialake.core.model.actions import AddFile, Metadata

REPO = Path(__file__).resolve().parents[1]
SCHEMA = json.dumps(
    {
        "type": "struct",
        "fields": [
            {"name": "id", "type": "long", "nullable": True, "metadata": {"comment": "the key"}},
            {"name": "p", "type": "integer", "nullable": True, "metadata": {}},
        ],
    }
)


def add(p: int) -> AddFile:
    return AddFile(
        path=f"p={p}/part-{uuid.uuid4().hex}.parquet",
        partition_values={"p": str(p)},
        size=100,
        modification_time=0,
        stats=json.dumps({"numRecords": 10}),
    )


@pytest.fixture
def table(tmp_path: Path) -> str:
    """A table built through the core API: create (v0), two appends (v1, v2), a rewrite (v3)."""
    log = DeltaLog(str(tmp_path / "t"))
    txn = log.start_transaction()
    txn.update_metadata(
        Metadata(schema_string=SCHEMA, partition_columns=("p",), configuration={"delta.isolationLevel": "Serializable"})
    )
    first = add(1)
    txn.commit([first], operation="CREATE TABLE")
    log.start_transaction().commit([add(1)], operation="WRITE", operation_parameters={"mode": "Append"})
    log.start_transaction().commit([add(2)], operation="WRITE", operation_parameters={"mode": "Append"})
    txn = log.start_transaction()
    txn.read_whole_table()
    txn.commit([first.remove(), add(1)], operation="DELETE", operation_metrics={"numDeletedRows": 3})
    return log.table_path


@pytest.fixture(autouse=True)
def tmp_catalog(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SERIALAKE_CATALOG", str(tmp_path / "catalog.json"))


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_history(table: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "history", table)
    assert code == 0
    for word in ("CREATE TABLE", "WRITE", "DELETE", "Serializable", "numDeletedRows=3"):
        assert word in out
    code, out, _ = run(capsys, "history", table, "--limit", "2", "--json")
    rows = json.loads(out)
    assert [r["version"] for r in rows] == [3, 2]
    assert rows[0]["operation"] == "DELETE" and rows[0]["readVersion"] == 2 and rows[1]["isBlindAppend"] is True


def test_detail_and_describe(table: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "detail", table, "--json")
    detail = json.loads(out)
    assert code == 0 and detail["numFiles"] == 3 and detail["partitionColumns"] == ["p"]
    assert detail["location"] == table and detail["version"] == 3
    code, out, _ = run(capsys, "describe", table, "--json")
    info = json.loads(out)
    assert info["isolationLevel"] == "Serializable" and info["isolationLevelSource"] == "table property"
    assert info["columns"][0] == {"name": "id", "type": "bigint", "nullable": True, "comment": "the key",
                                  "partition": False}  # fmt: skip
    assert info["columns"][1]["partition"] is True and info["rowLevelConcurrency"] is False
    code, out, _ = run(capsys, "describe", table)
    assert code == 0
    for word in ("Serializable (table property)", "partitioned by", "the key", "writer features"):
        assert word in out


def test_log_of_one_version(table: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "log", table, "3", "--json")
    actions = json.loads(out)["actions"]
    assert [next(iter(a)) for a in actions] == ["commitInfo", "remove", "add"]
    code, out, _ = run(capsys, "log", table, "0")
    assert code == 0 and "metaData" in out and "protocol" in out and "p=1" in out
    code, _, err = run(capsys, "log", table, "9")
    assert code == 1 and "no commit file for version 9" in err and "latest version: 3" in err


def test_errors_and_registered_names(table: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "history", str(tmp_path / "nothing"))
    assert code == 1 and "is not a Delta table" in err
    code, out, _ = run(capsys, "detail", str(tmp_path / "nothing"), "--json")
    assert code == 1 and json.loads(out)["error"]["type"] == "DeltaTableNotFoundError"
    from serialake.sql import register

    register("mytable", table)
    code, out, _ = run(capsys, "history", "mytable", "--json")
    assert code == 0 and len(json.loads(out)) == 4
    assert main([]) == 2


def test_log_only_commands_do_not_start_spark(table: str) -> None:
    script = (
        "import sys\nfrom serialake.cli import main\n"
        f"for argv in (['history', {table!r}], ['detail', {table!r}],\n"
        f"             ['describe', {table!r}], ['log', {table!r}, '1']):\n"
        "    assert main(argv + ['--json']) == 0\n"
        "assert 'pyspark' not in sys.modules, 'pyspark was imported'\n"
    )
    done = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr


def test_verify_is_delegated(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["verify", "--help"])
    assert info.value.code == 0
    assert "--processes" in capsys.readouterr().out


@pytest.mark.spark
def test_sql_optimize_vacuum_commands(spark: object, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    location = tmp_path / "events"
    script = tmp_path / "script.sql"
    script.write_text(
        f"CREATE TABLE events (id BIGINT, p INT) USING DELTA PARTITIONED BY (p) LOCATION '{location}';\n"
        "INSERT INTO events VALUES (1, 1), (2, 2);\n"
        "-- a second file in p=1\nINSERT INTO events VALUES (3, 1);\n"
        "SELECT p, count(*) AS n FROM events GROUP BY p ORDER BY p;\n"
    )
    code, out, _ = run(capsys, "sql", "--file", str(script), "--json")
    results = json.loads(out)
    assert code == 0 and len(results) == 4
    assert results[3]["rows"] == [{"p": 1, "n": 2}, {"p": 2, "n": 1}]
    code, out, _ = run(capsys, "sql", "SELECT count(*) AS n FROM events")
    assert code == 0 and "n" in out and "3" in out
    code, out, _ = run(capsys, "optimize", "events", "--where", "p = 1", "--json")
    assert code == 0 and json.loads(out)["location"] == str(location)
    assert DeltaLog.for_table(str(location)).update().num_files == 2
    code, out, _ = run(capsys, "vacuum", str(location), "--json")
    assert code == 0 and json.loads(out)["files"] == []
    code, _, err = run(capsys, "sql", "SELEC 1")
    assert code == 1 and "SqlError: Syntax error at line 1, column" in err


def _cli(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "serialake.cli", *argv], cwd=REPO, capture_output=True, text=True, timeout=120
    )


@pytest.mark.parametrize(
    "breakage",
    ["garbage-commit", "action-not-an-object", "table-is-a-file"],
)
def test_unreadable_tables_give_one_line_errors(table: str, tmp_path: Path, breakage: str) -> None:
    log_dir = Path(table) / "_delta_log"
    target = table
    if breakage == "garbage-commit":
        (log_dir / f"{4:020d}.json").write_text("{not json\n")
    elif breakage == "action-not-an-object":
        (log_dir / f"{4:020d}.json").write_text('{"add": 5}\n')
    else:
        target = str(tmp_path / "plain-file")
        Path(target).write_text("x")
    for command in ("history", "detail", "describe"):
        done = _cli(command, target)
        assert done.returncode == 1, (command, done.stdout, done.stderr)
        assert "Traceback" not in done.stderr, done.stderr
        assert 1 <= len(done.stderr.strip().splitlines()) <= 3, done.stderr
        assert target in done.stderr or "Delta table" in done.stderr, done.stderr
    debug = _cli("detail", target, "--debug")
    assert debug.returncode == 1 and "Traceback" in debug.stderr
