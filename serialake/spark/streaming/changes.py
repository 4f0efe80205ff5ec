"""The change data feed as a stream (``readChangeFeed``): its micro-batches' read tasks and rows.

Each commit's changes as ``core.log.cdf`` plans them (change files, else adds as inserts, removes
as deletes, re-marked rows through deletion vectors) are grouped into read tasks
(``change_bins``) and read on the executors by ``spark.arrow_reader`` (``read_changes``):
the table's columns, ``_change_type``, ``_commit_version`` and ``_commit_timestamp``.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from serialake.core.log import cdf as core_cdf
from serialake.spark.arrow_reader import ReadTask, balanced_bins

__all__ = ["CHANGE_TYPE", "change_bins", "read_changes"]

#: The change data feed's change type column.
CHANGE_TYPE = core_cdf.CHANGE_TYPE


def change_bins(reads: Sequence[core_cdf.FileRead], table: str, parallelism: int) -> list[list[dict[str, Any]]]:
    """``arrow_reader.read_bins`` for change reads: each entry also says its change type (None: a change
    file's own), the rows to read (re-marked rows) and its commit's version and time."""
    from serialake.core.model.paths import absolute_path

    def entry(r: core_cdf.FileRead) -> dict[str, Any]:
        return {
            "uri": absolute_path(table, r.path),
            "path": r.path,
            "pv": dict(r.partition_values),
            "dv": r.deletion_vector._to_obj() if r.deletion_vector is not None else None,
            "type": r.change_type,
            "rows": None if r.rows is None else [int(x) for x in r.rows.to_numpy()],
            "version": r.version,
            "ts": r.timestamp,
        }

    return balanced_bins(reads, lambda r: r.size, entry, parallelism)


def read_changes(tasks: Mapping[tuple[bool, bool], ReadTask], schema: Any, entry: dict[str, Any]) -> Iterator[Any]:
    """One file's changes: its rows (those ``rows`` names, else all but its deletion vector's)
    with ``_change_type`` (the change file's own, else the entry's) and the commit's version and time.

    ``tasks``: the read tasks by (a change file, rows named), ``schema``: the stream's Arrow schema."""
    import numpy as np
    import pyarrow as pa

    cdc = entry["type"] is None
    rows = entry.get("rows")
    task = tasks[(cdc, rows is not None)]
    if not cdc:
        entry = {**entry, "pv": {**entry["pv"], CHANGE_TYPE: entry["type"]}}
    width = len(task.order)
    version = pa.scalar(int(entry["version"]), schema.field(width).type)
    stamp = pa.scalar(int(entry["ts"]) * 1000, pa.int64()).cast(schema.field(width + 1).type)
    keep = None if rows is None else np.asarray(rows, dtype=np.int64)
    for batch in task.read_file(entry):
        if keep is not None:
            batch = batch.filter(pa.array(np.isin(batch.column(width + 1).to_numpy(), keep)))
            if not batch.num_rows:
                continue
        n = batch.num_rows
        columns = [*batch.columns[:width], pa.repeat(version, n), pa.repeat(stamp, n)]
        yield pa.RecordBatch.from_arrays(columns, schema=schema)
