"""Benchmarks of two revisions side by side: did a change leave them where they were?

Usage: ``python -m bench.compare --base REV [--only commits,scale,dml] [--rounds 3] [--quick]``.

The base revision is checked out into a temporary git worktree (removed afterwards); this
checkout is the other side. Each round runs every benchmark once per side, in a fresh
process whose ``PYTHONPATH`` is that side's tree, each side's own ``bench`` code measuring
its own serialake; the order of the sides alternates between rounds, so drift in the
machine's load falls on both. Reported per figure: the median of each side and
after / before. Figures are serialake's own times (seconds, lower is better) except commit
throughput, reported as the fraction of the disk's put-if-absent limit measured in the same
run (higher is better), which cancels much of a shared machine's noise.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from collections import defaultdict
from collections.abc import Callable
from typing import Any

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# name -> (code run in the side's tree, printing the benchmark's rows; figures taken from them)
_CODE = {
    "commits": "from bench import commit_throughput as m; r = m.main(['--writers', '1,4', '--duration', "
    "'{duration}', '--impls', 'limit,serialake'])",
    "scale": "from bench import scale as m; r = m.main(['--sizes', '{files}', '--reps', '3', '--commits', '100'])",
    "dml": "from bench import dml as m; r = m.bench_rows({quick})",
}


def _commit_figures(rows: list[dict[str, Any]]) -> dict[str, float]:
    limit = {r["writers"]: r["commits_per_s"] for r in rows if r["impl"] == "limit"}
    return {f"commits/s / limit, {r['writers']} writer(s)": r["commits_per_s"] / max(limit[r["writers"]], 1e-9)
            for r in rows if r["impl"] == "serialake" and r["writers"] in limit}


def _scale_figures(rows: list[dict[str, Any]]) -> dict[str, float]:
    return {f"{r['measurement']} ({r['files']} files, built by {r['built by']})": r["serialake"]
            for r in rows if isinstance(r.get("serialake"), (int, float))}


def _dml_figures(rows: list[dict[str, Any]]) -> dict[str, float]:
    return {f"{r['operation']} s": r["serialake s"] for r in rows}


_FIGURES: dict[str, Callable[[list[dict[str, Any]]], dict[str, float]]] = {
    "commits": _commit_figures,
    "scale": _scale_figures,
    "dml": _dml_figures,
}


def _run(tree: str, name: str, quick: bool) -> list[dict[str, Any]]:
    code = _CODE[name].format(duration=3 if quick else 5, files=20_000 if quick else 100_000, quick=quick)
    code += "; import json; print('@@' + json.dumps(r, default=str))"
    env = dict(os.environ, PYTHONPATH=tree)
    done = subprocess.run([sys.executable, "-c", code], cwd=tree, env=env, capture_output=True, text=True)
    lines = [line for line in done.stdout.splitlines() if line.startswith("@@")]
    if done.returncode != 0 or not lines:
        raise RuntimeError(f"bench {name} in {tree} failed (exit {done.returncode}):\n{done.stderr[-3000:]}")
    rows: list[dict[str, Any]] = json.loads(lines[-1][2:])
    return rows


def compare(base: str, names: list[str], rounds: int, quick: bool) -> list[dict[str, Any]]:
    """Rows ``{benchmark, figure, before, after, after / before}`` (medians over ``rounds``)."""
    unknown = [n for n in names if n not in _CODE]
    if unknown:
        raise SystemExit(f"unknown benchmark(s) {', '.join(unknown)}; known: {', '.join(_CODE)}")
    with tempfile.TemporaryDirectory(prefix="bench-base-") as tmp:
        tree = os.path.join(tmp, "base")
        subprocess.run(["git", "-C", HERE, "worktree", "add", "--detach", "-q", tree, base], check=True)
        try:
            sides = {"before": tree, "after": HERE}
            seen: dict[tuple[str, str, str], list[float]] = defaultdict(list)
            for i in range(rounds):
                for name in names:
                    for side in ("before", "after") if i % 2 == 0 else ("after", "before"):
                        for figure, value in _FIGURES[name](_run(sides[side], name, quick)).items():
                            seen[(name, figure, side)].append(value)
                        print(f"round {i + 1}/{rounds}: {name} {side} done", file=sys.stderr, flush=True)
        finally:
            subprocess.run(["git", "-C", HERE, "worktree", "remove", "--force", tree], check=False)
    out = []
    for name, figure in dict.fromkeys((n, f) for n, f, _ in seen):
        before, after = seen[(name, figure, "before")], seen[(name, figure, "after")]
        if before and after:
            b, a = statistics.median(before), statistics.median(after)
            out.append({"benchmark": name, "figure": figure, "before": b, "after": a,
                        "after / before": a / b if b else None, "runs": len(after)})
    return out


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base", required=True, help="the revision to compare this checkout with")
    ap.add_argument("--only", default="commits,scale,dml")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="smaller tables and shorter runs")
    args = ap.parse_args(argv)
    rows = compare(args.base, [n for n in args.only.split(",") if n], args.rounds, args.quick)
    for r in rows:
        ratio = r["after / before"]
        print(f"{r['benchmark']:8} {r['figure'][:70]:70} before {r['before']:10.4f}  after {r['after']:10.4f}  "
              f"after/before {ratio:.2f}" if ratio is not None else "")
    return rows


if __name__ == "__main__":
    main()
