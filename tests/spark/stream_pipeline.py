"""A streaming pipeline in its own process, for the sink's crash and concurrency tests.

    python -m tests.spark.stream_pipeline SOURCE TARGET CHECKPOINT [--source json|delta]

Reads SOURCE as a stream (``json``: Spark's file source over a directory of JSON files;
``delta``: a serialake table through ``spark.readStream.format("delta")``), one file per
micro-batch, and writes it with ``writeStream.format("delta")`` to the serialake table at
TARGET, with trigger ``availableNow`` (the query ends when the source is drained). Prints
``STARTED <query id>`` once the query runs, ``BATCH <id>`` when a batch starts and ``DONE``
at the end; a batch that fails prints ``FAILED <class> <message>`` and exits with 3.

Test hooks (environment, read once):

- ``STREAM_KILL_AFTER_COMMIT=N``: SIGKILL this process right after batch N's commit, before
  Spark records the batch as done in the checkpoint (the batch is replayed on restart);
- ``STREAM_KILL_BEFORE_COMMIT=N``: SIGKILL it after batch N wrote its data files, just
  before the commit;
- ``STREAM_DELAY_COMMIT=N:SECONDS`` or ``N:PATH``: before batch N's commit (after its
  transaction read the table) sleep, or wait until PATH exists, so that another run of
  the same query can commit the batch first;
- ``STREAM_BATCH_SLEEP=SECONDS``: sleep at the start of every batch (slower batches).
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from typing import Any


def _env_int(name: str) -> int | None:
    value = os.environ.get(name)
    return int(value) if value else None


def _install_hooks() -> None:
    import importlib

    from serialake.spark.streaming import sink

    write_module = importlib.import_module("serialake.spark.write")  # (serialake.spark.write is also a function)

    kill_after = _env_int("STREAM_KILL_AFTER_COMMIT")
    kill_before = _env_int("STREAM_KILL_BEFORE_COMMIT")
    delay = os.environ.get("STREAM_DELAY_COMMIT")
    delay_batch, delay_until = (int(delay.split(":", 1)[0]), delay.split(":", 1)[1]) if delay else (None, "")
    batch_sleep = float(os.environ.get("STREAM_BATCH_SLEEP") or 0)
    current: list[int] = [-1]

    original_batch = sink.commit_batch

    def commit_batch(s: Any, batch_df: Any, batch_id: int) -> int | None:
        current[0] = batch_id
        print(f"BATCH {batch_id}", flush=True)
        if batch_sleep:
            time.sleep(batch_sleep)
        version = original_batch(s, batch_df, batch_id)
        if kill_after == batch_id:
            os.kill(os.getpid(), signal.SIGKILL)
        return version

    original_commit = write_module.commit_or_clean_up

    def commit_or_clean_up(*args: Any, **kwargs: Any) -> int:
        if kill_before == current[0]:
            os.kill(os.getpid(), signal.SIGKILL)
        if delay_batch == current[0]:
            print(f"DELAYING {current[0]}", flush=True)
            _wait(delay_until)
        return original_commit(*args, **kwargs)

    sink.commit_batch = commit_batch  # type: ignore[assignment]
    write_module.commit_or_clean_up = commit_or_clean_up  # type: ignore[assignment]


def _wait(until: str) -> None:
    """Sleep ``until`` seconds, or until the file ``until`` exists (at most 10 minutes)."""
    try:
        time.sleep(float(until))
        return
    except ValueError:
        pass
    deadline = time.monotonic() + 600
    while not os.path.exists(until) and time.monotonic() < deadline:
        time.sleep(0.05)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("source")
    parser.add_argument("target")
    parser.add_argument("checkpoint")
    parser.add_argument("--source-format", choices=["json", "delta"], default="json")
    args = parser.parse_args(argv)

    from serialake.exceptions import DeltaError
    from serialake.spark.session import spark_session

    # A short-lived JVM: the client compiler only and the serial collector start it in about half the time.
    fast_start = {"spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"}
    spark = spark_session("stream-pipeline", master="local[1]", **fast_start)
    _install_hooks()
    if args.source_format == "json":
        reader = spark.readStream.schema("id long, grp long, s string")
        stream = reader.option("maxFilesPerTrigger", 1).json(args.source)
    else:
        stream = spark.readStream.format("delta").option("maxFilesPerTrigger", 1).load(args.source)
    query = (
        stream.writeStream.format("delta")
        .option("checkpointLocation", args.checkpoint)
        .trigger(availableNow=True)
        .start(args.target)
    )
    print(f"STARTED {query.id}", flush=True)
    try:
        query.awaitTermination()
    except DeltaError as e:
        print(f"FAILED {type(e).__name__} {e}", flush=True)
        return 3
    print("DONE", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
