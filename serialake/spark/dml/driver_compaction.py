"""Compacting a small bin of files on the driver (pyarrow), for OPTIMIZE and REORG PURGE.

Compaction changes no value: it concatenates the live rows of its inputs. For a bin of a
few small files, a Spark job costs far more than the work (one task opening hundreds of
files one after the other, plus planning). When a bin fits the driver's budget
(``engine.for_compaction``, 64 MiB by default) and holds plain columns, the driver reads the
inputs with pyarrow (several at a time), drops the rows their deletion vectors mark,
casts each column to the table type and writes one Parquet file, published like any
other data file (staged, renamed into the inputs' directory, fsynced, stats from the
footer; on S3 written once to its final name).

Row order is the one OPTIMIZE promises for its row mapping: inputs in path order, rows in
physical order. Anything this path does not reproduce exactly as Spark reads it (nested
or interval types, a column whose stored type needs a lossy cast, a file outside the
table directory) raises ``NotExact``, and the bin is compacted by Spark.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

from serialake.core.log.snapshot import Snapshot
from serialake.core.model.actions import AddFile
from serialake.core.predicates.values import NotExact
from serialake.spark.dml.driver_files import DriverTable, io_threads

__all__ = ["driver_compact"]


def driver_compact(snap: Snapshot, inputs: Sequence[AddFile]) -> AddFile | None:
    """The live rows of ``inputs`` (sorted by path) as one new data file; None when they hold none.

    The returned AddFile has ``dataChange=false`` and stats; nothing is committed.
    ``NotExact`` when Spark must do it.
    """
    import pyarrow as pa

    if not inputs:
        return None
    local = DriverTable.open(snap)
    dirs = {local.rel_dir(f) for f in inputs}
    if len(dirs) != 1:
        raise NotExact("inputs in several directories")
    rel_dir = dirs.pop()
    ordered = sorted(inputs, key=lambda f: f.path)
    parts = _read_all(local, ordered)
    combined = pa.concat_tables(parts)
    if combined.num_rows == 0:
        return None
    with local.staging() as staging:
        add = local.write(staging, combined, rel_dir, ordered[0].partition_values or {}, data_change=False)
        local.finish([add] if add else [])
        return add


def _read_all(local: DriverTable, ordered: Sequence[AddFile]) -> list[object]:
    """The live rows of each input, in input order, read by ``io_threads()`` threads.

    Each task reads a run of consecutive files (a few runs per thread): one task per small
    file adds a hand-off between threads for every file.
    """
    threads = min(io_threads(), len(ordered))
    if threads <= 1:
        return [local.read(f)[0] for f in ordered]
    step = max(1, math.ceil(len(ordered) / (threads * 4)))
    runs = [ordered[i : i + step] for i in range(0, len(ordered), step)]
    with ThreadPoolExecutor(threads, thread_name_prefix="serialake-compact") as pool:
        return [t for run in pool.map(lambda r: [local.read(f)[0] for f in r], runs) for t in run]
