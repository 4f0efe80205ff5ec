"""Run every benchmark side by side with delta-rs and write the results into bench/README.md.

Usage: ``python -m bench.run [--only NAME,...] [--quick]``. Each benchmark measures
serialake and delta-rs in the same run on the same data; figures are reported with their
ratio, never asserted.
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib
import json
import os
import platform
import re
from collections.abc import Callable
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
README = os.path.join(HERE, "README.md")
MARK = "<!-- results:{name} -->"


def _fmt(v: Any) -> str:
    if v is None:
        return "–"
    if isinstance(v, float):
        return f"{v:.3f}" if abs(v) < 100 else f"{v:.0f}"
    return str(v)


def _table(rows: list[dict[str, Any]]) -> str:
    if not rows:
        return "(no rows)"
    cols = list(dict.fromkeys(c for r in rows for c in r))  # rows of one benchmark may differ in columns
    out = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    out += ["| " + " | ".join(_fmt(r.get(c)) for c in cols) + " |" for r in rows]
    return "\n".join(out)


def _commit_rows(quick: bool, *extra: str) -> list[dict[str, Any]]:
    """``bench.commit_throughput`` at 1/4/8 writers (``extra``: e.g. ``--s3``), one row per writer count."""
    from bench import commit_throughput as m

    rows = m.main(["--writers", "1,4,8", "--duration", "3" if quick else "6", *extra])
    out = []
    for w in sorted({r["writers"] for r in rows}):
        ours = next(r for r in rows if r["writers"] == w and r["impl"] == "serialake")
        rs = next(r for r in rows if r["writers"] == w and r["impl"] == "delta-rs")
        limit = next((r for r in rows if r["writers"] == w and r["impl"] == "limit"), None)
        row: dict[str, Any] = {"writers": w}
        if limit is not None:  # local runs: the fsynced put-if-absent limit measured in the same run
            row["limit ops/s"] = limit["commits_per_s"]
        for label, r in (("serialake", ours), ("delta-rs", rs)):
            row[f"{label} commits/s"] = r["commits_per_s"]
            if limit is not None:
                row[f"{label} / limit"] = r["commits_per_s"] / max(limit["commits_per_s"], 1e-9)
            row[f"{label} failed %"] = r["failed_pct"]
            row[f"{label} p50 ms"] = r["p50_ms"]
            if extra:
                row[f"{label} p99 ms"] = r["p99_ms"]
        row["ratio (serialake/delta-rs)"] = ours["commits_per_s"] / max(rs["commits_per_s"], 1e-9)
        out.append(row)
    return out


def _commits(quick: bool) -> list[dict[str, Any]]:
    return _commit_rows(quick)


def _commits_s3(quick: bool) -> list[dict[str, Any]]:
    return _commit_rows(quick, "--s3")


def _validation(quick: bool) -> list[dict[str, Any]]:
    from bench import validation as m

    rows = m.main(["--commits", "300" if quick else "1000", "--files", "100"])
    ours = next(r for r in rows if r["impl"] == "serialake")
    rs = next(r for r in rows if r["impl"] == "delta-rs")
    return [{"winners": ours["winners"], "files per winner": ours["files_per_winner"],
             "serialake s": ours["validate_s"], "delta-rs s": rs["validate_s"],
             "ratio (serialake/delta-rs)": ours["validate_s"] / rs["validate_s"]}]


def _load(quick: bool) -> list[dict[str, Any]]:
    from bench import snapshot_load as m

    rows = m.main(["--scale", "0.2" if quick else "1"])
    return [{"table": r["table"], "serialake s": r["serialake_s"], "serialake + all AddFile objects s":
             r["serialake_all_files_s"], "delta-rs s": r["delta_rs_s"], "ratio (serialake/delta-rs)": r["ratio"]}
            for r in rows]


BENCHES: dict[str, tuple[str, Callable[[bool], list[dict[str, Any]]]]] = {
    "commits": ("Blind-append commit throughput (log path only)", _commits),
    "commits_s3": ("Blind-append commit throughput on an S3 server (moto on 127.0.0.1; log path only)", _commits_s3),
    "validation": ("Validating one transaction against many winning commits", _validation),
    "load": ("Snapshot load", _load),
}


def _optional(name: str, title: str, module: str) -> None:
    try:
        mod = importlib.import_module(module)
    except ImportError:
        return
    BENCHES[name] = (title, lambda quick, _m=mod: _m.bench_rows(quick))


_optional("dml", "Copy-on-write DML and OPTIMIZE (Spark start-up excluded)", "bench.dml")
_optional("dv", "Deletion-vector DELETE and false-conflict rate", "bench.dv")
_optional("row_level_partitioned", "Row-level concurrency on a partitioned table: false conflicts and the check's cost",
          "bench.row_level_partitioned")
_optional("cut", "Consistent multi-table reads under concurrent commits", "bench.consistent_reads")
_optional("queries", "Queries over several tables at STRICT SERIALIZABLE and SERIALIZABLE", "bench.multi_table_queries")
_optional("groups", "Transactions across tables: commit latency and abort rate against separate single-table commits",
          "bench.multi_table_commits")
_optional("scale", "Planning at scale: big checkpointed tables", "bench.scale")
_optional("write", 'Write throughput: format("delta") and serialake.write vs plain Parquet', "bench.write_throughput")
_optional("s3_write", "Write throughput to an S3 server: serialake.write vs delta-rs write_deltalake", "bench.s3_write")
_optional("streaming", 'Streaming writes: writeStream.format("delta") vs the Parquet sink', "bench.streaming")
_optional("cdf", "Change data feed reads: 1M changed rows vs delta-rs load_cdf", "bench.cdf")
_optional("delta_spark", "serialake vs delta-spark on the same Spark: write, read, DML, OPTIMIZE, one-row operations",
          "bench.delta_spark")
_optional("deltaspark", "delta-spark's Python tests against serialake (set DELTA_REPO)", "bench.delta_spark_tests")


def update_readme(name: str, title: str, rows: list[dict[str, Any]]) -> None:
    text = open(README).read() if os.path.exists(README) else "# Benchmarks\n"
    block = (f"{MARK.format(name=name)}\n### {title}\n\n{_table(rows)}\n\n"
             f"_Measured {dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC on {platform.machine()}, "
             f"{os.cpu_count()} cores, Python {platform.python_version()}._\n<!-- end:{name} -->")
    pattern = re.compile(re.escape(MARK.format(name=name)) + r".*?<!-- end:" + re.escape(name) + r" -->", re.S)
    text = pattern.sub(lambda _: block, text) if pattern.search(text) else text.rstrip() + "\n\n" + block + "\n"
    with open(README, "w") as f:
        f.write(text)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--only", default="")
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args(argv)
    names = [n for n in args.only.split(",") if n] or list(BENCHES)
    for name in names:
        title, fn = BENCHES[name]
        rows = fn(args.quick)
        print(f"\n## {title}\n{_table(rows)}")
        update_readme(name, title, rows)
    print(json.dumps({"updated": README}))


if __name__ == "__main__":
    main()
