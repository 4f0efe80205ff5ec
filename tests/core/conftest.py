"""Helpers to build small tables through the core API (no Spark)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from typing import Any

import pytest

from serialake.core import DeltaLog
from serialake.core.model.actions import AddFile, Metadata

SCHEMA = json.dumps(
    {
        "type": "struct",
        "fields": [
            {"name": "id", "type": "long", "nullable": True, "metadata": {}},
            {"name": "x", "type": "integer", "nullable": True, "metadata": {}},
            {"name": "p", "type": "integer", "nullable": True, "metadata": {}},
        ],
    }
)


def add_file(p: int | None = None, *, name: str | None = None, data_change: bool = True, **stats: Any) -> AddFile:
    """An AddFile in partition p (or unpartitioned when p is None)."""
    name = name or f"part-{uuid.uuid4().hex}.parquet"
    path = f"p={p}/{name}" if p is not None else name
    st = json.dumps({"numRecords": stats.get("n", 10), **({"minValues": stats["min"]} if "min" in stats else {}),
                     **({"maxValues": stats["max"]} if "max" in stats else {})})
    return AddFile(
        path=path,
        partition_values={"p": str(p)} if p is not None else {},
        size=100,
        modification_time=0,
        data_change=data_change,
        stats=st,
    )


@pytest.fixture
def make_table(tmp_path: Any) -> Callable[..., DeltaLog]:
    """``make_table(partitioned=True, level=None, files=[0, 1, 2])`` -> DeltaLog of a fresh table."""
    counter = iter(range(1_000_000))

    def make(partitioned: bool = True, level: str | None = None, files: list[int | None] | None = None,
             props: dict[str, str] | None = None) -> DeltaLog:
        path = tmp_path / f"t{next(counter)}"
        log = DeltaLog(str(path))
        conf = dict(props or {})
        if level:
            conf["delta.isolationLevel"] = level
        txn = log.start_transaction()
        txn.update_metadata(
            Metadata(schema_string=SCHEMA, partition_columns=("p",) if partitioned else (), configuration=conf)
        )
        initial = [add_file(p if partitioned else None) for p in (files if files is not None else [1, 2, 3])]
        txn.commit(initial, operation="CREATE TABLE")
        return log

    return make
