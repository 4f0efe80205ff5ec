"""Conformance: read every golden table with Spark as delta-rs does (rows), or fail clearly.

MANIFEST.json records, per table, delta-rs's row count or its error. Every table delta-rs
reads we must read with the same number of rows, and the same rows where delta-rs can give
them; every other table either reads correctly or fails with a DeltaError naming it.
"""

from __future__ import annotations

import json
import os

import pytest

from serialake.exceptions import DeltaError

pytestmark = [pytest.mark.spark, pytest.mark.interop]

GOLDEN = os.path.abspath(os.environ.get(
    "SERIALAKE_GOLDEN", os.path.join(os.path.dirname(__file__), "..", "..", "..", "shared", "golden")))
MANIFEST_PATH = os.path.join(GOLDEN, "MANIFEST.json")
MANIFEST = json.load(open(MANIFEST_PATH)) if os.path.exists(MANIFEST_PATH) else {}
# Tables delta-rs reads whose row content we compare, not only the count (small, plain types).
COMPARE_ROWS = {"delta-rs/simple_table", "delta-rs/table-with-dv-small", "delta-rs/delta-0.8.0-partitioned",
                "delta-spark/dv-partitioned-with-checkpoint", "delta-spark/basic-with-inserts-updates",
                "delta-rs/delta-0.8.0-null-partition", "delta-spark/multi-part-checkpoint"}


@pytest.mark.skipif(not MANIFEST, reason="golden tables not found beside the repo")
@pytest.mark.parametrize("name", sorted(MANIFEST))
def test_golden_table_rows(spark, name: str) -> None:
    import serialake

    expected = MANIFEST[name]
    path = os.path.join(GOLDEN, name)
    try:
        df = serialake.read(spark, path)
        count = df.count()
    except DeltaError as e:
        assert "rows" not in expected, f"delta-rs reads {name} ({expected.get('rows')} rows) but we fail: {e}"
        assert os.path.basename(path) in str(e) or "/" in str(e), str(e)
        return
    except Exception as e:  # noqa: BLE001 - Spark errors on broken data files (missing parquet, 1-byte files)
        assert "rows" not in expected, f"delta-rs reads {name} but Spark fails: {type(e).__name__}: {e}"
        return
    if "rows" in expected:
        assert count == expected["rows"], f"{name}: {count} rows, delta-rs reads {expected['rows']}"
        assert [f.name for f in df.schema.fields] == expected["columns"]
    if name in COMPARE_ROWS:
        from deltalake import DeltaTable

        dt = DeltaTable(path)
        try:
            theirs = dt.to_pyarrow_table().to_pylist()
        except Exception:  # noqa: BLE001 - pyarrow path refuses DV tables; use the DataFusion scan
            import pyarrow as pa

            theirs = pa.table(dt.scan() if hasattr(dt, "scan") else dt.to_pyarrow_dataset()).to_pylist()
        ours = [r.asDict(recursive=True) for r in df.collect()]
        key = lambda r: json.dumps(r, sort_keys=True, default=str)  # noqa: E731
        assert sorted(map(key, ours)) == sorted(map(key, theirs))
