"""Write checkpoints in a process of their own, at idle priority.

``DeltaLog`` hands the background checkpoints of tables of ``DeltaLog.WORKER_CHECKPOINT_FILES``
files or more to this worker (one per process, kept alive: ``children.quiet_worker``).
Building and encoding a checkpoint in the committing process takes CPU its commits need
(~20 ms at 10,000 files, every ``checkpointInterval`` commits: a quarter of the commit
rate of four writers on two cores) and holds the interpreter lock in slices, each
delaying the process's commits by up to the lock's switch interval. The worker has its
own interpreter and runs only on CPU time nothing else wants (``yield_cpu``); it builds
each checkpoint from the newest checkpoint before it and the commits since, with the same
code (``DeltaLog.checkpoint_if_due``), keeping each table's recent commits in memory
between requests.

    python -m serialake.core.log.checkpoint_worker --serve

reads requests ``{"table": path, "version": v, "fsync": bool}``, one JSON object per line
of stdin, and answers each on stdout: ``{"ok": true, "last": _last_checkpoint or null,
"cpu": seconds}`` (null: a checkpoint at or past ``v`` was there already, or another process
was writing one; ``cpu``: what answering took, the worker's threads included) or
``{"ok": false, "error": "..."}``.
It exits when stdin closes.
"""

from __future__ import annotations

import json
import sys
from collections import OrderedDict
from typing import IO, Any

__all__ = ["main", "serve", "yield_cpu"]

#: Tables whose log (recent commits, snapshot) the worker keeps between requests.
_KEPT_TABLES = 8


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args != ["--serve"]:
        print("usage: python -m serialake.core.log.checkpoint_worker --serve", file=sys.stderr)
        return 2
    yield_cpu()
    serve(sys.stdin.buffer, sys.stdout)
    return 0


def serve(requests: IO[bytes], answers: IO[str]) -> None:
    """Answer each request line of ``requests`` on ``answers`` until ``requests`` ends."""
    import time

    import pyarrow as pa

    from serialake.core.log.deltalog import DeltaLog
    from serialake.storage import LocalLogStore

    # What every first checkpoint would pay once (pyarrow's first conversion of Python values imports
    # pandas, ~0.2 s): paid before the first request, so that ``cpu`` measures checkpoints alone.
    pa.array([0])
    logs: OrderedDict[tuple[str, bool], DeltaLog] = OrderedDict()
    for line in requests:
        if not line.strip():
            continue
        answer: dict[str, Any]
        started = time.process_time()
        try:
            request = json.loads(line)
            key = (str(request["table"]), bool(request.get("fsync", True)))
            log = logs.pop(key, None) or DeltaLog(key[0], store=LocalLogStore(fsync=key[1]))
            logs[key] = log
            while len(logs) > _KEPT_TABLES:
                logs.popitem(last=False)
            last = log.checkpoint_if_due(int(request["version"]), unless_busy=True)
            answer = {"ok": True, "last": last, "cpu": time.process_time() - started}
        except Exception as e:  # noqa: BLE001 - reported to the parent, which raises it there
            answer = {"ok": False, "error": f"{type(e).__name__}: {e}"}
        answers.write(json.dumps(answer) + "\n")
        answers.flush()


def yield_cpu() -> None:
    """Run only on CPU time nothing else wants (Linux ``SCHED_IDLE``; elsewhere the lowest nice).

    On a busy machine even a low-priority process delays a committer's wake-up from its
    fsync by a scheduler slice (~5 ms measured on two cores); an idle-class process is
    preempted at once. Threads started afterwards (Arrow's pool) inherit the policy.
    (``children.quiet_child`` of this process: the parent already asked for it.)
    """
    from serialake.core.log.children import quiet_child

    quiet_child(0)


if __name__ == "__main__":
    sys.exit(main())
