"""The demo's read round: a torn read prevented, and a derived table waited for.

Other applications are played by other processes (``python -c``), committing through the
core API, so what the session sees of them is exactly what any reader would.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from serialake.exceptions import ConsistentReadError

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = ["append_from_another_process", "copy_rows_from_another_process", "show_consistent_reads"]

# Appends one row per (table, k) argument, each its own commit, in order.
_APPEND = r"""
import json, os, sys, uuid
import pyarrow as pa, pyarrow.parquet as pq
from serialake.core import DeltaLog
from serialake.core.model.actions import AddFile, now_ms
for arg in sys.argv[1:]:
    table, k = arg.rsplit("=", 1)
    name = f"part-{uuid.uuid4().hex}.parquet"
    pq.write_table(pa.table({"k": pa.array([int(k)], pa.int64())}), os.path.join(table, name))
    stats = json.dumps({"numRecords": 1, "minValues": {"k": int(k)}, "maxValues": {"k": int(k)}, "nullCount": {"k": 0}})
    size = os.path.getsize(os.path.join(table, name))
    add = AddFile(path=name, partition_values={}, size=size, modification_time=now_ms(), stats=stats)
    DeltaLog.for_table(table).start_transaction().commit([add], "WRITE")
"""

# After a delay, rewrites the derived table as sum(k) of the source, recording the version read.
_MAINTAIN = r"""
import json, os, sys, time, uuid
import pyarrow as pa, pyarrow.compute as pc, pyarrow.parquet as pq
from serialake.core import DeltaLog
from serialake.core.model.actions import AddFile, now_ms
source, derived, delay = sys.argv[1], sys.argv[2], float(sys.argv[3])
time.sleep(delay)
snap = DeltaLog.for_table(source).update()
total = sum(pc.sum(pq.read_table(os.path.join(source, f.path))["k"]).as_py() or 0 for f in snap.all_files)
txn = DeltaLog.for_table(derived).start_transaction()
name = f"part-{uuid.uuid4().hex}.parquet"
pq.write_table(pa.table({"total": pa.array([total], pa.int64())}), os.path.join(derived, name))
add = AddFile(path=name, partition_values={}, size=os.path.getsize(os.path.join(derived, name)),
              modification_time=now_ms(), stats=json.dumps({"numRecords": 1}))
txn.record_table_read(snap.table_path, snap.version)
txn.commit([f.remove() for f in txn.snapshot.all_files] + [add], "WRITE")
"""


# Commits a copy of one data file of the table (its rows again); prints the rows and the version.
_COPY_ONE_FILE = r"""
import json, shutil, sys, uuid
from dataclasses import replace
from serialake.core import DeltaLog
log = DeltaLog.for_table(sys.argv[1])
source = log.update().all_files[0]
folder = source.path.rpartition("/")[0]
name = (folder + "/" if folder else "") + f"part-{uuid.uuid4().hex}.parquet"
shutil.copy(f"{sys.argv[1]}/{source.path}", f"{sys.argv[1]}/{name}")
version = log.start_transaction().commit([replace(source, path=name)], "WRITE")
print(json.loads(source.stats)["numRecords"], version)
"""


def copy_rows_from_another_process(table: str) -> tuple[int, int]:
    """Commit a copy of one data file of ``table`` from another process: (rows added, version)."""
    done = subprocess.run([sys.executable, "-c", _COPY_ONE_FILE, table], capture_output=True, text=True, check=True)
    rows, version = done.stdout.split()
    return int(rows), int(version)


def append_from_another_process(*rows: tuple[str, int]) -> None:
    """Commit one row ``k`` to each table, in order, from another process (another application)."""
    subprocess.run([sys.executable, "-c", _APPEND, *(f"{t}={k}" for t, k in rows)], check=True)


def _maintain_later(source: str, derived: str, delay_s: float) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", _MAINTAIN, source, derived, str(delay_s)])


def _max(df: DataFrame) -> int:
    row = df.agg({"k": "max"}).first()
    return int(row[0]) if row is not None and row[0] is not None else 0


def show_consistent_reads(spark: SparkSession, directory: str, say: Callable[..., None]) -> list[dict[str, Any]]:
    """Run the round, printing through ``say``; what was read, as records for the report."""
    import serialake
    from serialake.core.tables import catalog
    from serialake.spark import isolation
    from serialake.sql import sql

    def run_sql(session: SparkSession, query: str) -> DataFrame:
        df = sql(session, query)
        assert df is not None  # (None only for a statement that committed and could not build its result)
        return df

    orders, shipments, totals = (os.path.join(directory, "reads", n) for n in ("orders", "shipments", "order_totals"))
    names = {"orders": orders, "shipments": shipments, "order_totals": totals}
    out: list[dict[str, Any]] = []
    for name, path in names.items():
        catalog.register(name, path, persist=False)
    try:
        for path in (orders, shipments):
            serialake.write(spark.createDataFrame([(0,)], "k long"), path)
        say()
        say("[bold]Reads over several tables[/bold] (another application records order k, then ships it)")
        left = serialake.read(spark, orders)
        append_from_another_process((orders, 1), (shipments, 1))  # order 1, then its shipment
        right = serialake.read(spark, shipments)
        torn = (_max(left), _max(right))
        out.append({"read": "two separate reads, one after the other", "orders": torn[0], "shipments": torn[1]})
        say(f"  two separate reads:           orders max k = {torn[0]}, shipments max k = {torn[1]}"
            "  <- shipment 1 without order 1: a state that never existed")  # fmt: skip
        try:
            combined = left.crossJoin(right.withColumnRenamed("k", "shipped"))
            serialake.write(combined, os.path.join(directory, "reads", "combined"))
            refused = "written (unexpected)"
        except ConsistentReadError as e:
            refused = f"refused: {str(e).split(';')[0]}"
        out.append({"read": "a write combining them", "result": refused})
        say(f"  a write combining them:       {refused}")
        a, b = serialake.read(spark, [orders, shipments])
        together = (_max(a), _max(b))
        out.append({"read": "serialake.read(spark, [orders, shipments])", "orders": together[0],
                    "shipments": together[1]})  # fmt: skip
        say(f"  read together (one cut):      orders max k = {together[0]}, shipments max k = {together[1]}")
        query = "SELECT (SELECT max(k) FROM orders) AS o, (SELECT max(k) FROM shipments) AS s"
        row = run_sql(spark, query).first()
        assert row is not None
        out.append({"read": "one serialake.sql query", "orders": row["o"], "shipments": row["s"]})
        say(f"  one SQL query (one cut):      orders max k = {row['o']}, shipments max k = {row['s']}")

        say()
        say("[bold]A derived table[/bold] order_totals = sum(k) of orders, declared with "
            "serialake.maintainedFrom = 'orders' and kept by another job (here 1.5 s behind)")  # fmt: skip
        # Created from orders (the write records the version of orders it read), then declared.
        serialake.write(serialake.read(spark, orders).selectExpr("sum(k) AS total"), totals)
        serialake.DeltaTable.forPath(spark, totals).setTableProperties({"serialake.maintainedFrom": "orders"})
        append_from_another_process((orders, 2))  # acknowledged before the next query starts
        maintainer = _maintain_later(orders, totals, 1.5)
        try:
            started = time.monotonic()
            total = run_sql(spark, "SELECT total FROM order_totals").first()
            waited = time.monotonic() - started
        finally:
            maintainer.wait(120)
        assert total is not None
        out.append({"read": "STRICT SERIALIZABLE: SELECT total FROM order_totals", "total": total["total"],
                    "waitedS": round(waited, 2)})  # fmt: skip
        say(f"  STRICT SERIALIZABLE: total = {total['total']} (includes order 2, committed before the query), "
            f"after waiting {waited:.1f} s for the job to catch up")  # fmt: skip
        append_from_another_process((orders, 3))
        maintainer = _maintain_later(orders, totals, 1.5)
        try:
            isolation.set_session_isolation(spark, "SERIALIZABLE")
            started = time.monotonic()
            both = run_sql(spark, "SELECT (SELECT sum(k) FROM orders) AS orders_sum, "
                                        "(SELECT total FROM order_totals) AS total").first()  # fmt: skip
            waited = time.monotonic() - started
        finally:
            isolation.set_session_isolation(spark, "STRICT SERIALIZABLE")
            maintainer.wait(120)
        assert both is not None
        out.append({"read": "SERIALIZABLE: orders and order_totals together", "ordersSum": both["orders_sum"],
                    "total": both["total"], "waitedS": round(waited, 2)})  # fmt: skip
        say(f"  SERIALIZABLE: sum(k) of orders = {both['orders_sum']}, total = {both['total']} in {waited:.1f} s: "
            "no wait; orders read at the version the table reflects (order 3 not yet in either), so they agree")
    finally:
        for name in names:
            catalog.unregister(name, persist=False)
    return out
