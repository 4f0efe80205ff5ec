"""Several independent writers on one S3 table: two Spark applications (separate processes,
each with its own SparkSession, as jobs on two clusters) and two delta-rs writers append at
once, and each Spark application also DELETEs one of its batches meanwhile.

The S3 server is moto on 127.0.0.1 behind a wrapper that serialises conditional PUTs (plain
moto lets two racing creators both win; real S3 does not), started and stopped by its pid;
every writer process is stopped by its pid too.

What must hold: no blind append of serialake fails; every acknowledged batch is in the table
exactly once (a deleted batch nowhere); a failed delta-rs batch is absent; the log's
versions are contiguous and each holds one writer's commit.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from tests.s3server import S3Server

pytestmark = [pytest.mark.spark, pytest.mark.s3, pytest.mark.concurrency, pytest.mark.slow]

WRITER = Path(__file__).with_name("s3_writers.py")
BATCHES = 4
ROWS = 50


@pytest.fixture
def server() -> Iterator[S3Server]:
    from tests.s3server import s3_environment

    with s3_environment() as srv:  # this process reads the log too
        yield srv


def _run_writers(server: S3Server, uri: str, tmp: Path) -> dict[str, dict[str, Any]]:
    env = {**os.environ, **server.environment(), "PYTHONPATH": str(Path(__file__).parents[2])}
    procs: dict[str, tuple[subprocess.Popen[bytes], Path]] = {}
    try:
        for kind, name in (("spark", "spark-a"), ("deltars", "rs-a"), ("spark", "spark-b"), ("deltars", "rs-b")):
            out = tmp / f"{name}.json"
            log = open(tmp / f"{name}.log", "wb")  # noqa: SIM115 - closed with the process
            procs[name] = (
                subprocess.Popen(
                    [sys.executable, str(WRITER), kind, uri, name, str(BATCHES), str(ROWS), str(out)],
                    env=env, stdout=log, stderr=subprocess.STDOUT,
                ),  # fmt: skip
                out,
            )
            log.close()
        for proc, _ in procs.values():
            proc.wait(timeout=400)
    finally:
        for proc, _ in procs.values():
            if proc.poll() is None:
                os.kill(proc.pid, 9)
                proc.wait()
    results = {}
    for name, (proc, out) in procs.items():
        log = (tmp / f"{name}.log").read_text(errors="replace")[-3000:]
        assert out.exists(), f"{name} exited {proc.returncode} without results:\n{log}"
        result = json.loads(out.read_text())
        assert "crash" not in result, f"{name}: {result['crash']}"
        results[name] = result
    return results


def test_spark_applications_and_delta_rs_write_one_s3_table(server: S3Server, tmp_path: Path) -> None:
    import deltalake
    import pyarrow as pa

    from serialake.storage.datafiles import Access

    uri = f"s3://{server.new_bucket()}/shared/t"
    options = {**server.environment(), "conditional_put": "etag"}
    schema = pa.schema([("writer", pa.string()), ("batch", pa.int32()), ("seq", pa.int64())])
    deltalake.write_deltalake(uri, schema.empty_table(), storage_options=options)  # version 0

    results = _run_writers(server, uri, tmp_path)

    acked: set[tuple[str, int]] = set()
    failed: set[tuple[str, int]] = set()
    deleted: set[tuple[str, int]] = set()
    for name, result in results.items():
        for entry in result["results"]:
            if "delete" in entry:
                assert "error" not in entry, f"{name}'s DELETE failed: {entry['error']}"
                deleted.add((name, 0))
            elif "error" in entry:
                assert not name.startswith("spark"), f"{name}'s blind append failed: {entry['error']}"
                failed.add((name, entry["batch"]))
            else:
                acked.add((name, entry["batch"]))
    assert deleted == {("spark-a", 0), ("spark-b", 0)}

    table = deltalake.DeltaTable(uri, storage_options=dict(server.environment())).to_pyarrow_table()
    counts = Counter(zip(table["writer"].to_pylist(), table["batch"].to_pylist(), table["seq"].to_pylist()))
    assert all(n == 1 for n in counts.values()), "a row is in the table twice"
    batches = Counter((w, b) for w, b, _ in counts)
    for key in acked - deleted:
        assert batches[key] == ROWS, f"acknowledged batch {key} has {batches[key]} of {ROWS} rows"
    for key in failed | deleted:
        assert batches[key] == 0, f"batch {key} (failed or deleted) has rows"
    assert set(batches) <= acked, "rows of a batch nobody acknowledged"

    log = Access.here(uri)
    versions = sorted(
        int(f.path.split("/")[-1].split(".")[0])
        for f in log.walk(f"{uri}/_delta_log")
        if f.path.endswith(".json") and "/" not in f.path
    )
    commits = 1 + len(acked) + len(deleted)  # the create, each append, each DELETE
    assert versions == list(range(commits)), f"log versions {versions}, expected 0..{commits - 1}"
