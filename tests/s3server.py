"""The S3 test server (moto on 127.0.0.1, conditional PUTs serialised as on S3).

It lives in the package now (``serialake.verify.s3server``: ``serialake verify --s3`` starts
it too); this module re-exports it so tests and benchmarks keep importing
``tests.s3server.S3Server``. Plain moto is not atomic under racing conditional PUTs; the
server's wrapper is, so tests that count winners rely on it.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from serialake.verify.s3server import S3Server, _free_port, _serialising, serve

__all__ = ["S3Server", "_free_port", "_serialising", "s3_environment", "serve"]


@contextmanager
def s3_environment(spark: Any = None) -> Iterator[S3Server]:
    """A started S3 server, this process's AWS variables pointing at it and its S3 stores made
    anew; afterwards the server is stopped by its pid, the variables restored, and (given
    ``spark``) the session no longer probes this server's tables as recent reads."""
    import pytest

    from serialake.storage import s3 as s3store

    server = S3Server().start()
    try:
        with pytest.MonkeyPatch.context() as mp:
            for key, value in server.environment().items():
                mp.setenv(key, value)
            s3store._stores.clear()
            yield server
    finally:
        server.stop()
        s3store._stores.clear()
        if spark is not None:
            from serialake.spark import isolation

            isolation._recent.pop(spark, None)
            isolation._cache.pop(spark, None)

if __name__ == "__main__":
    serve(int(sys.argv[1]))
