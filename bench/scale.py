"""Planning at scale: big checkpointed tables, serialake vs delta-rs in the same run.

Synthetic tables of N live files (100,000 and 500,000; quick: 20,000 and 100,000),
partitioned by a string column ``part`` (``p0``..``p99``, file i in ``p{i % 100}``), with
stats on a long column ``id`` (file i holds ids ``10*i .. 10*i+9``, 10 records, no nulls),
so ``id > X`` selects the last 1% of the files. Each size is built twice: once with
serialake's core (``DeltaLog`` commits of 50,000 adds, then ``checkpoint()``) and once with
delta-rs (``DeltaTable.create``, ``create_write_transaction`` of 50,000 ``AddAction`` per
commit, then ``create_checkpoint()``); both libraries are measured on both tables. Data files
do not exist except the (tiny, real) Parquet files of partition ``p42``.

Every measurement runs in a fresh child process, which first warms up on a tiny table of
the same builder (imports and one-time engine set-up are not timed), then:

- probe: load the table (serialake ``DeltaLog.for_table(path).update()``, delta-rs
  ``DeltaTable(path)``), run the first filter (partition ``part = 'p42'`` in one child,
  stats ``id > X`` in another), the same filter again, then the other filter once; the
  child's peak RSS (``ru_maxrss``) is taken after both filters. serialake filters with
  ``log.start_transaction().filter_files([...])``, delta-rs with
  ``dt.file_uris(file_pruning_predicate=...)`` (partition values and per-file min/max
  stats, no data read). The selected files are compared (count and sorted relative paths).
- delete: after loading, serialake plans a one-partition DELETE (a transaction,
  ``filter_files(["part = 'p42'"])`` and ``f.remove()`` per file, not committed); delta-rs
  runs its whole ``dt.delete("part = 'p42'")`` (commit included) on a fresh copy.
- commits: on a copy of the largest table built by the same library, one writer makes
  blind appends (serialake ``DeltaLog.for_table(path).start_transaction().commit``;
  delta-rs ``update_incremental()`` then ``create_write_transaction``), once with
  ``delta.checkpointInterval = 10`` (set on the copy by a metadata commit, untimed) and
  once without checkpoints (the tables are built with an interval of 10^9).
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCHEMA = {"type": "struct", "fields": [
    {"name": "id", "type": "long", "nullable": True, "metadata": {}},
    {"name": "part", "type": "string", "nullable": True, "metadata": {}},
]}
PARTS = 100
ROWS_PER_FILE = 10
PER_COMMIT = 50_000
NO_CHECKPOINTS = "1000000000"
PART_PRED = "part = 'p42'"
LIBS = ("serialake", "delta-rs")


def _stats_pred(n: int) -> str:
    """``id > X`` selecting the last 1% of ``n`` files (file i holds ids 10*i .. 10*i+9)."""
    return f"id > {ROWS_PER_FILE * (n - n // 100) - 1}"


def _file(i: int) -> tuple[str, str, str]:
    part = f"p{i % PARTS}"
    lo = ROWS_PER_FILE * i
    hi = lo + ROWS_PER_FILE - 1
    stats = (f'{{"numRecords":{ROWS_PER_FILE},"minValues":{{"id":{lo}}},"maxValues":{{"id":{hi}}},'
             '"nullCount":{"id":0}}')
    return f"part={part}/f-{i:07d}.parquet", part, stats


# -- building -------------------------------------------------------------------------------
def _write_p42_files(data_dir: str, n: int) -> dict[str, int]:
    """The real Parquet files of partition p42 (ids as their stats say); returns path -> size."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    os.makedirs(os.path.join(data_dir, "part=p42"), exist_ok=True)
    sizes = {}
    for i in range(42, n, PARTS):
        rel, _, _ = _file(i)
        full = os.path.join(data_dir, rel)
        lo = ROWS_PER_FILE * i
        pq.write_table(pa.table({"id": pa.array(range(lo, lo + ROWS_PER_FILE), pa.int64())}), full)
        sizes[rel] = os.path.getsize(full)
    return sizes


def _link_data(data_dir: str, table: str) -> None:
    dst = os.path.join(table, "part=p42")
    os.makedirs(dst, exist_ok=True)
    src = os.path.join(data_dir, "part=p42")
    for name in os.listdir(src):
        os.link(os.path.join(src, name), os.path.join(dst, name))


def build_serialake(path: str, n: int, sizes: dict[str, int]) -> None:
    from serialake.core import DeltaLog
    from serialake.core.model.actions import AddFile, Metadata

    log = DeltaLog(path)
    txn = log.start_transaction()
    txn.update_metadata(Metadata(schema_string=json.dumps(SCHEMA), partition_columns=("part",),
                                 configuration={"delta.checkpointInterval": NO_CHECKPOINTS}))
    txn.commit([], operation="CREATE TABLE")
    for start in range(0, n, PER_COMMIT):
        adds = []
        for i in range(start, min(n, start + PER_COMMIT)):
            rel, part, stats = _file(i)
            adds.append(AddFile(path=rel, partition_values={"part": part}, size=sizes.get(rel, 1000),
                                modification_time=1_700_000_000_000, data_change=True, stats=stats))
        log.start_transaction().commit(adds, operation="WRITE")
    log.checkpoint()


def build_deltars(path: str, n: int, sizes: dict[str, int]) -> None:
    import pyarrow as pa
    from deltalake import DeltaTable
    from deltalake.transaction import AddAction

    dt = DeltaTable.create(path, schema=pa.schema([("id", pa.int64()), ("part", pa.string())]),
                           partition_by=["part"], configuration={"delta.checkpointInterval": NO_CHECKPOINTS})
    schema = dt.schema()
    for start in range(0, n, PER_COMMIT):
        adds = []
        for i in range(start, min(n, start + PER_COMMIT)):
            rel, part, stats = _file(i)
            adds.append(AddAction(path=rel, size=sizes.get(rel, 1000), partition_values={"part": part},
                                  modification_time=1_700_000_000_000, data_change=True, stats=stats))
        dt.update_incremental()
        dt.create_write_transaction(adds, mode="append", schema=schema, partition_by=["part"])
    DeltaTable(path).create_checkpoint()


BUILDERS = {"serialake": build_serialake, "delta-rs": build_deltars}


def _copy(src: str, dst: str) -> str:
    """A copy of a table sharing its immutable files (hard links); ``_last_checkpoint`` is copied."""
    def link(s: str, d: str) -> None:
        if os.path.basename(s) == "_last_checkpoint":
            shutil.copy2(s, d)
        else:
            os.link(s, d)

    shutil.copytree(src, dst, copy_function=link)
    return dst


# -- child processes ------------------------------------------------------------------------
def _rss_mb() -> float:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _hwm_mb() -> float | None:
    """Peak RSS of this process image from /proc (a cross-check of ru_maxrss), None elsewhere."""
    try:
        with open("/proc/self/status") as f:
            return next(int(line.split()[1]) / 1024 for line in f if line.startswith("VmHWM:"))
    except (OSError, StopIteration):
        return None


def _digest(paths: list[str]) -> str:
    import hashlib

    return hashlib.sha1("\n".join(sorted(paths)).encode()).hexdigest()[:12]


class _Serialake:
    def __init__(self) -> None:
        from serialake.core import DeltaLog

        self.DeltaLog = DeltaLog
        self.log: Any = None

    def load(self, path: str) -> None:
        self.log = self.DeltaLog.for_table(path)
        self.log.update()

    def select(self, pred: str) -> list[str]:
        return [f.path for f in self.log.start_transaction().filter_files([pred])]

    def delete(self, path: str) -> int:
        txn = self.log.start_transaction()
        removes = [f.remove() for f in txn.filter_files([PART_PRED])]
        return len(removes)


class _DeltaRs:
    def __init__(self) -> None:
        from deltalake import DeltaTable

        self.DeltaTable = DeltaTable
        self.dt: Any = None
        self.root = ""

    def load(self, path: str) -> None:
        self.dt = self.DeltaTable(path)
        self.root = os.path.abspath(path)

    def select(self, pred: str) -> list[str]:
        return [os.path.relpath(u, self.root) for u in self.dt.file_uris(file_pruning_predicate=pred)]

    def delete(self, path: str) -> int:
        return int(self.dt.delete(PART_PRED)["num_removed_files"])


def _impl(lib: str) -> Any:
    return _Serialake() if lib == "serialake" else _DeltaRs()


def _warm_up(impl: Any, warm: str, n_warm: int, delete: bool) -> None:
    """Imports and one-time set-up on a tiny table, so the timed calls on the big one are first-time
    calls on that table in a warm process."""
    impl.load(warm)
    impl.select(PART_PRED)
    impl.select(_stats_pred(n_warm))
    if delete:
        copy = _copy(warm, warm.rstrip("/") + f"-warm-{os.getpid()}")
        try:
            impl.load(copy)
            impl.delete(copy)
        finally:
            shutil.rmtree(copy, ignore_errors=True)


def _child_probe(a: dict[str, Any]) -> dict[str, Any]:
    impl = _impl(a["lib"])
    _warm_up(impl, a["warm"], a["n_warm"], delete=False)
    base = _rss_mb()
    preds = {"part": PART_PRED, "stats": _stats_pred(a["n"])}
    first, other = a["first"], "stats" if a["first"] == "part" else "part"
    t0 = time.perf_counter()
    impl.load(a["path"])
    load = time.perf_counter() - t0
    t0 = time.perf_counter()
    sel = impl.select(preds[first])
    t_first = time.perf_counter() - t0
    t0 = time.perf_counter()
    again = impl.select(preds[first])
    t_again = time.perf_counter() - t0
    sel_other = impl.select(preds[other])
    assert sorted(again) == sorted(sel)
    return {"load_s": load, "first_s": t_first, "again_s": t_again,
            "rss_mb": _rss_mb(), "hwm_mb": _hwm_mb(), "rss_warm_mb": base,
            f"{first}_count": len(sel), f"{first}_digest": _digest(sel),
            f"{other}_count": len(sel_other), f"{other}_digest": _digest(sel_other)}


def _child_delete(a: dict[str, Any]) -> dict[str, Any]:
    impl = _impl(a["lib"])
    _warm_up(impl, a["warm"], a["n_warm"], delete=True)
    impl.load(a["path"])
    t0 = time.perf_counter()
    n = impl.delete(a["path"])
    return {"delete_s": time.perf_counter() - t0, "files": n}


def _checkpoints(path: str) -> int:
    return sum(name.endswith(".checkpoint.parquet") for name in os.listdir(os.path.join(path, "_delta_log")))


def _child_commits(a: dict[str, Any]) -> dict[str, Any]:
    path, n, interval = a["path"], a["commits"], a["interval"]
    lat: list[float] = []
    if a["lib"] == "serialake":
        import dataclasses

        from serialake.core import DeltaLog
        from serialake.core.model.actions import AddFile

        log = DeltaLog.for_table(path)
        md = log.update().metadata
        if interval is not None:
            txn = log.start_transaction()
            txn.update_metadata(dataclasses.replace(
                md, configuration={**md.configuration, "delta.checkpointInterval": str(interval)}))
            txn.commit([], operation="SET TBLPROPERTIES")
        before = _checkpoints(path)
        for i in range(n):
            add = AddFile(path=f"part=p1/c-{i}.parquet", partition_values={"part": "p1"}, size=100,
                          modification_time=0, data_change=True, stats='{"numRecords":1}')
            t0 = time.perf_counter()
            DeltaLog.for_table(path).start_transaction().commit([add], operation="WRITE")
            lat.append(time.perf_counter() - t0)
        log.wait_for_checkpoints()
    else:
        from deltalake import DeltaTable
        from deltalake.transaction import AddAction

        dt = DeltaTable(path)
        if interval is not None:
            dt.alter.set_table_properties({"delta.checkpointInterval": str(interval)})
        schema = dt.schema()
        before = _checkpoints(path)
        for i in range(n):
            add = AddAction(path=f"part=p1/c-{i}.parquet", size=100, partition_values={"part": "p1"},
                            modification_time=0, data_change=True, stats='{"numRecords":1}')
            t0 = time.perf_counter()
            dt.update_incremental()
            dt.create_write_transaction([add], mode="append", schema=schema, partition_by=["part"])
            lat.append(time.perf_counter() - t0)
    lat.sort()
    return {"p50_ms": 1000 * lat[len(lat) // 2], "p99_ms": 1000 * lat[int(len(lat) * 0.99)],
            "max_ms": 1000 * lat[-1], "checkpoints": _checkpoints(path) - before}


def child(arg: str) -> None:
    a = json.loads(arg)
    out = {"probe": _child_probe, "delete": _child_delete, "commits": _child_commits}[a["task"]](a)
    print("RESULT " + json.dumps(out), flush=True)


# On Linux a process's ru_maxrss survives exec: a child forked from this driver (hundreds of MB
# once tables are built) would report the driver's size. A bare interpreter in between makes the
# measuring child start from a ~10 MB process instead.
_LAUNCH = "import subprocess, sys; sys.exit(subprocess.run(sys.argv[1:]).returncode)"
_CHILD = "import sys; from bench.scale import child; child(sys.argv[1])"


def _run_child(**a: Any) -> dict[str, Any]:
    done = subprocess.run([sys.executable, "-S", "-c", _LAUNCH, sys.executable, "-c", _CHILD, json.dumps(a)],
                          cwd=ROOT, capture_output=True, text=True, timeout=1800, check=False)
    for line in done.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT "):])
    raise RuntimeError(f"child {a} failed ({done.returncode}): {done.stderr[-3000:]}")


# -- the benchmark --------------------------------------------------------------------------
def _med(xs: list[float]) -> float:
    return statistics.median(xs)


def _row(n: int, builder: str, what: str, ours: float, theirs: float, ratio: bool = True,
         **extra: Any) -> dict[str, Any]:
    row = {"files": f"{n:,}", "built by": builder, "measurement": what, "serialake": ours, "delta-rs": theirs,
           "ratio (serialake/delta-rs)": ours / theirs if ratio and theirs else None, **extra}
    print(json.dumps(row), file=sys.stderr)
    return row


def _selected(res: dict[str, list[dict[str, Any]]], kind: str) -> dict[str, Any]:
    counts = {lib: {r[f"{kind}_count"] for r in res[lib]} for lib in LIBS}
    digests = {r[f"{kind}_digest"] for lib in LIBS for r in res[lib]}
    return {"files selected (serialake / delta-rs)": " / ".join(",".join(map(str, sorted(counts[lib])))
                                                                for lib in LIBS),
            "same files": "yes" if len(digests) == 1 else "no"}


def measure_table(n: int, builder: str, path: str, warm: str, n_warm: int, reps: int) -> list[dict[str, Any]]:
    res: dict[str, dict[str, list[dict[str, Any]]]] = {"part": {}, "stats": {}}
    for first in ("part", "stats"):
        for lib in LIBS:
            res[first][lib] = [_run_child(task="probe", lib=lib, path=path, warm=warm, n_warm=n_warm, n=n,
                                          first=first) for _ in range(reps)]
    both = {lib: res["part"][lib] + res["stats"][lib] for lib in LIBS}
    rows = [_row(n, builder, "load s", *(_med([r["load_s"] for r in both[lib]]) for lib in LIBS))]
    for kind, label in (("part", "partition filter part = 'p42'"), ("stats", "stats filter id > X (1%)")):
        sel = _selected(both, kind)
        rows.append(_row(n, builder, f"first {label} s",
                         *(_med([r["first_s"] for r in res[kind][lib]]) for lib in LIBS), **sel))
        rows.append(_row(n, builder, f"{label} again s",
                         *(_med([r["again_s"] for r in res[kind][lib]]) for lib in LIBS), **sel))
        rows.append(_row(n, builder, f"load + first {label} s",
                         *(_med([r["load_s"] + r["first_s"] for r in res[kind][lib]]) for lib in LIBS), **sel))
    rows.append(_row(n, builder, "peak RSS after both filters MB",
                     *(_med([r["rss_mb"] for r in both[lib]]) for lib in LIBS)))
    warm_rss = {lib: _med([r["rss_warm_mb"] for r in both[lib]]) for lib in LIBS}
    print(json.dumps({"files": n, "built by": builder, "RSS after warm-up MB": warm_rss}), file=sys.stderr)

    dels: dict[str, list[dict[str, Any]]] = {lib: [] for lib in LIBS}
    for lib in LIBS:
        for r in range(reps):
            target = path if lib == "serialake" else _copy(path, f"{path}-del-{r}")
            try:
                dels[lib].append(_run_child(task="delete", lib=lib, path=target, warm=warm, n_warm=n_warm))
            finally:
                if target != path:
                    shutil.rmtree(target, ignore_errors=True)
    rows.append(_row(n, builder, "DELETE part = 'p42': serialake planning vs delta-rs whole delete s",
                     *(_med([r["delete_s"] for r in dels[lib]]) for lib in LIBS),
                     **{"files selected (serialake / delta-rs)":
                        " / ".join(",".join(str(c) for c in sorted({r["files"] for r in dels[lib]})) for lib in LIBS)}))
    return rows


def measure_commits(n: int, paths: dict[str, str], commits: int) -> list[dict[str, Any]]:
    res: dict[tuple[str, int | None], dict[str, Any]] = {}
    for lib in LIBS:
        for interval in (10, None):
            copy = _copy(paths[lib], f"{paths[lib]}-commits-{interval}")
            try:
                res[lib, interval] = _run_child(task="commits", lib=lib, path=copy, commits=commits,
                                                interval=interval)
            finally:
                shutil.rmtree(copy, ignore_errors=True)
            print(json.dumps({"lib": lib, "interval": interval, **res[lib, interval]}), file=sys.stderr)
    rows = []
    label = f"own (writer's library), {commits} commits"
    for interval, name in ((10, "checkpointInterval=10"), (None, "no checkpoints")):
        for stat in ("p50", "p99", "max"):
            rows.append(_row(n, label, f"commit {stat} ms, {name}",
                             *(res[lib, interval][f"{stat}_ms"] for lib in LIBS)))
        rows.append(_row(n, label, f"checkpoints written, {name}",
                         *(res[lib, interval]["checkpoints"] for lib in LIBS), ratio=False))
    rows.append(_row(n, label, "commit p99 with checkpointInterval=10 / p99 without",
                     *(res[lib, 10]["p99_ms"] / res[lib, None]["p99_ms"] for lib in LIBS), ratio=False))
    return rows


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    import argparse

    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--sizes", default="100000,500000")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--commits", type=int, default=200)
    args = ap.parse_args(argv)
    sizes = [int(x) for x in args.sizes.split(",")]
    root = tempfile.mkdtemp(prefix="bench-scale-")
    rows: list[dict[str, Any]] = []
    try:
        n_warm = 200
        warm_sizes = _write_p42_files(os.path.join(root, "warm-data"), n_warm)
        warm = {}
        for builder, build in BUILDERS.items():
            warm[builder] = os.path.join(root, f"warm-{builder}")
            _link_data(os.path.join(root, "warm-data"), warm[builder])
            build(warm[builder], n_warm, warm_sizes)
        for n in sizes:
            data = os.path.join(root, f"data-{n}")
            sizes_42 = _write_p42_files(data, n)
            paths = {}
            for builder, build in BUILDERS.items():
                paths[builder] = os.path.join(root, f"t{n}-{builder}")
                _link_data(data, paths[builder])
                t0 = time.perf_counter()
                build(paths[builder], n, sizes_42)
                print(json.dumps({"built": n, "by": builder, "s": time.perf_counter() - t0}), file=sys.stderr)
            for builder in BUILDERS:
                rows += measure_table(n, builder, paths[builder], warm[builder], n_warm, args.reps)
            if n == max(sizes):
                rows += measure_commits(n, paths, args.commits)
            for builder in BUILDERS:
                shutil.rmtree(paths[builder], ignore_errors=True)
            shutil.rmtree(data, ignore_errors=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return rows


def bench_rows(quick: bool = False) -> list[dict[str, Any]]:
    if quick:
        return main(["--sizes", "20000,100000", "--commits", "50"])
    return main([])


if __name__ == "__main__":
    main()
