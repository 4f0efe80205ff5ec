"""The S3 test server (moto on 127.0.0.1, conditional PUTs serialised as on S3).

It lives in the package now (``serialake.verify.s3server``: ``serialake verify --s3`` starts
it too); this module re-exports it so tests and benchmarks keep importing
``tests.s3server.S3Server``. Plain moto is not atomic under racing conditional PUTs; the
server's wrapper is, so tests that count winners rely on it.
"""

from __future__ import annotations

import sys

from serialake.verify.s3server import S3Server, _free_port, _serialising, serve

__all__ = ["S3Server", "_free_port", "_serialising", "serve"]

if __name__ == "__main__":
    serve(int(sys.argv[1]))
