"""Writes on a Spark standalone cluster: executors that cannot see the table fail loudly, shared ones work.

One master and two workers run on 127.0.0.1 for the whole module (``tests/cluster.py``); the
driver runs ``cluster_scenarios.py`` in a subprocess (this process keeps its one local
session). The workers run in mount namespaces of their own where the ``private`` directory
is a private copy: executors read the seeded table there but write where the driver
cannot see. The ``shared`` directory is the same for everybody. An S3 server (moto on
127.0.0.1) holds a third table: only the driver is configured for it, and the executors,
without AWS variables in their environment, write and read its objects with the settings
each job carries.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from contextlib import ExitStack
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

import serialake
from tests.cluster import live_group_members, private_mounts_unavailable, standalone_cluster

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = [pytest.mark.spark, pytest.mark.slow]

SCENARIOS = Path(__file__).with_name("cluster_scenarios.py")
PRIVATE_OPS = ("create", "append", "overwrite", "delete", "update", "merge", "optimize")
SHARED_OPS = {
    "create": "WRITE",
    "append": "WRITE",
    "overwrite": "WRITE",
    "delete": "DELETE",
    "update": "UPDATE",
    "merge": "MERGE",
    "optimize": "OPTIMIZE",
}


@pytest.fixture(scope="module")
def cluster_run(tmp_path_factory: pytest.TempPathFactory, spark: SparkSession) -> dict[str, Any]:
    """Start the cluster, run the scenarios against it, stop it; the scenarios' results."""
    root = tmp_path_factory.mktemp("cluster")
    private_reason = private_mounts_unavailable()
    private_root = root / "private"
    shared_root = root / "shared"
    private_root.mkdir()
    shared_root.mkdir()
    seed = private_root / "seed"
    if private_reason is None:  # written before the workers start: their private copy holds it
        df = spark.range(0, 20, 1, 4).selectExpr("id", "id * 10 AS v", "CAST(id % 2 AS INT) AS p")
        serialake.write(df, str(seed))
    config = {
        "shared_root": str(shared_root),
        "private_seed": None if private_reason else str(seed),
        "out": str(root / "results.json"),
    }
    from tests.s3server import S3Server

    server = S3Server().start()
    env = server.environment()
    config["s3"] = {
        "table": f"s3://{server.new_bucket()}/t",
        "options": {"fs.s3a.endpoint": server.endpoint, "fs.s3a.access.key": env["AWS_ACCESS_KEY_ID"],
                    "fs.s3a.secret.key": env["AWS_SECRET_ACCESS_KEY"], "fs.s3a.path.style.access": "true",
                    "fs.s3a.connection.ssl.enabled": "false"},
    }  # fmt: skip
    started = time.monotonic()
    with ExitStack() as stack:
        stack.callback(server.stop)
        cluster = stack.enter_context(
            standalone_cluster(root / "spark", private_dir=None if private_reason else private_root)
        )
        config["master"] = cluster.master_url
        (root / "config.json").write_text(json.dumps(config))
        with open(root / "driver.log", "wb") as log:
            proc = subprocess.run(
                [sys.executable, str(SCENARIOS), str(root / "config.json")],
                stdout=log, stderr=subprocess.STDOUT, timeout=400, check=False,
            )  # fmt: skip
        pids = [p.pid for p in cluster.processes]
        logs = cluster.logs()
        if "s3" in (results := _results(config)):
            results["s3_deltars_rows"] = _deltars_rows(config["s3"]["table"], env)
    results.update(
        returncode=proc.returncode,
        driver_log=(root / "driver.log").read_text(errors="replace")[-5000:],
        cluster_logs=logs,
        leftover_processes=[pid for group in pids for pid in live_group_members(group)],
        private_reason=private_reason,
        shared_table=str(shared_root / "t"),
        seconds=time.monotonic() - started,
    )
    return results


def _results(config: dict[str, Any]) -> dict[str, Any]:
    out = Path(config["out"])
    return json.loads(out.read_text()) if out.exists() else {}


def _deltars_rows(uri: str, env: dict[str, str]) -> list[list[int]] | str:
    """The S3 table's rows as delta-rs reads them (while its server still runs)."""
    try:
        import deltalake

        rows = deltalake.DeltaTable(uri, storage_options=dict(env)).to_pyarrow_table().to_pylist()
        return sorted([r["id"], r["v"], r["p"]] for r in rows)
    except Exception as e:  # noqa: BLE001 - the test shows it
        return repr(e)


def _ran(run: dict[str, Any], part: str) -> dict[str, Any]:
    assert "crash" not in run, run["crash"]
    assert part in run, f"scenario '{part}' produced no results (exit {run['returncode']}):\n{run['driver_log']}"
    result = run[part]
    assert isinstance(result, dict)
    return result


def test_cluster_runs_two_executors_and_stops_cleanly(cluster_run: dict[str, Any]) -> None:
    assert cluster_run["returncode"] == 0, cluster_run["driver_log"] + cluster_run["cluster_logs"]
    assert cluster_run["executors"] == 2
    assert cluster_run["leftover_processes"] == []


def test_private_executors_fail_every_write_loudly_and_commit_nothing(cluster_run: dict[str, Any]) -> None:
    if cluster_run["private_reason"]:
        pytest.skip(cluster_run["private_reason"])
    private = _ran(cluster_run, "private")
    for name in PRIVATE_OPS:
        op = private[name]
        error = op["error"]
        assert error is not None, f"{name} on executors without the driver's disk did not fail"
        assert error["type"] == "StagingMismatchError", f"{name}: {error}"
        message = error["message"]
        assert op["path"] in message and "_staging" in message, message
        assert "do not share the driver's file system" in message and message.rstrip().splitlines()[-1].startswith(
            "Help:"
        )
        attrs = error["attributes"]
        assert attrs["table"] == op["path"] and attrs["job_rows"] > 0 and attrs["found_rows"] == 0, attrs
        assert op["after"]["version"] == op["before"]["version"], f"{name} committed: {op}"
        assert op["after"]["files"] == op["before"]["files"], f"{name} left files behind: {op}"
    assert private["create"]["after"]["version"] is None  # no table was created
    assert private["rows_after"] == private["seed_rows"]


def _expected_shared() -> dict[str, list[list[int]]]:
    """The rows after each shared operation, computed here without Spark."""
    table: dict[int, int] = {}
    out = {}
    table.update({i: i * 10 for i in range(30)})
    out["create"] = dict(table)
    table.update({i: i * 10 for i in range(30, 40)})
    out["append"] = dict(table)
    table = {i: i * 100 for i in range(40)}
    out["overwrite"] = dict(table)
    table = {i: v for i, v in table.items() if i % 5 != 0}
    out["delete"] = dict(table)
    table = {i: v + 1 if i < 10 else v for i, v in table.items()}
    out["update"] = dict(table)
    table.update({i: -i for i in range(35, 45)})
    out["merge"] = dict(table)
    out["optimize"] = dict(table)
    return {name: sorted([i, v, i % 3] for i, v in rows.items()) for name, rows in out.items()}


@pytest.mark.parametrize("part", ["shared", "direct", pytest.param("s3", marks=pytest.mark.s3)])
def test_shared_storage_every_operation_works_on_the_spark_path(cluster_run: dict[str, Any], part: str) -> None:
    """On the shared directory (staged, and with Spark's direct writer) and on S3 (where executors
    have no disk in common with the driver and no S3 settings of their own) every operation's
    files are written by executors, and nothing but the committed files is left."""
    shared = _ran(cluster_run, part)
    expected = _expected_shared()
    for version, (name, operation) in enumerate(SHARED_OPS.items()):
        op = shared[name]
        assert op["version"] == version and op["operation"] == operation, op
        assert op["adds"] > 0, f"{name} committed no files"
        assert op["rows"] == expected[name], name
    assert not [f for f in shared["files"] if f.startswith("_staging") or "_spark_metadata" in f or f.endswith(".crc")]


def test_direct_writes_by_private_executors_fail_loudly_and_commit_nothing(cluster_run: dict[str, Any]) -> None:
    """Spark's direct writer takes its file list from the job: a file the driver cannot see is an error."""
    if cluster_run["private_reason"]:
        pytest.skip(cluster_run["private_reason"])
    op = _ran(cluster_run, "direct_private")
    error = op["error"]
    assert error is not None and error["type"] == "WrittenFileMissingError", op
    assert error["table"] == op["path"] and "cannot find" in error["message"], error
    assert op["after"] == op["before"], op


@pytest.mark.interop
def test_shared_table_reads_the_same_in_delta_rs(cluster_run: dict[str, Any]) -> None:
    deltalake = pytest.importorskip("deltalake")
    _ran(cluster_run, "shared")
    rows = deltalake.DeltaTable(cluster_run["shared_table"]).to_pyarrow_table().to_pylist()
    assert sorted([r["id"], r["v"], r["p"]] for r in rows) == _expected_shared()["optimize"]
    _ran(cluster_run, "s3")
    assert cluster_run["s3_deltars_rows"] == _expected_shared()["optimize"]
