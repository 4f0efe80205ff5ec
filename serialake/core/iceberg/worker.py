"""Convert one Delta version to Iceberg in a process of its own (big tables).

``IcebergConverter`` runs this for local tables holding ``CHILD_CONVERSION_FILES`` files or
more (``SERIALAKE_ICEBERG_PROCESS``: ``auto``, ``always``, ``never``): encoding manifests of
hundreds of thousands of files in pure Python would hold the committing process's
interpreter lock for seconds. The child loads the table at the version with the same code,
writes the metadata and exits; it runs at idle priority, as the checkpoint child does
(``core/log/checkpoint_worker.py``).

    python -m serialake.core.iceberg.worker TABLE VERSION

Prints the metadata file's path; exits 1 with the error on stderr.
"""

from __future__ import annotations

import argparse
import sys

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m serialake.core.iceberg.worker", description=__doc__)
    ap.add_argument("table")
    ap.add_argument("version", type=int)
    args = ap.parse_args(argv)
    from serialake.core.iceberg.conversion import convert
    from serialake.core.log.checkpoint_worker import yield_cpu
    from serialake.core.log.deltalog import DeltaLog

    yield_cpu()
    try:
        log = DeltaLog(args.table)
        path = convert(log, log.snapshot(args.version))
    except Exception as e:  # noqa: BLE001 - reported to the parent, which keeps and logs it
        print(f"{type(e).__name__}: {e}".replace("\n", " "), file=sys.stderr)  # one line: the parent keeps the last
        return 1
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
