"""Write one checkpoint in a process of its own.

``DeltaLog`` runs this for big tables (``DeltaLog.CHILD_CHECKPOINT_FILES``): building and
encoding the checkpoint of hundreds of thousands of files in the committing process would
hold the interpreter lock in slices, each delaying that process's commits by up to the
lock's switch interval. A child has its own interpreter and runs at idle priority; it
loads the table at the version (from the newest checkpoint before it) and writes the
checkpoint with the same code.

    python -m serialake.core.checkpoint_worker TABLE VERSION [--no-fsync]

Prints ``_last_checkpoint`` as JSON; exits 1 with the error on stderr.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

__all__ = ["main", "yield_cpu"]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m serialake.core.checkpoint_worker", description=__doc__)
    ap.add_argument("table")
    ap.add_argument("version", type=int)
    ap.add_argument("--no-fsync", action="store_true")
    args = ap.parse_args(argv)
    yield_cpu()
    from serialake.core.log import DeltaLog
    from serialake.storage import LocalLogStore

    try:
        last = DeltaLog(args.table, store=LocalLogStore(fsync=not args.no_fsync)).checkpoint(args.version)
    except Exception as e:  # noqa: BLE001 - reported to the parent, which logs it
        print(f"{type(e).__name__}: {e}", file=sys.stderr)
        return 1
    print(json.dumps(last))
    return 0


def yield_cpu() -> None:
    """Run only on CPU time nothing else wants (Linux ``SCHED_IDLE``; elsewhere the lowest nice).

    On a busy machine even a low-priority process delays a committer's wake-up from its
    fsync by a scheduler slice (~5 ms measured on two cores); an idle-class process is
    preempted at once. Threads started afterwards (Arrow's pool) inherit the policy.
    """
    try:
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
        return
    except (AttributeError, OSError):
        pass
    try:
        os.nice(19)
    except (AttributeError, OSError):
        pass


if __name__ == "__main__":
    sys.exit(main())
