"""An S3 server on 127.0.0.1 for ``serialake verify --s3`` and the tests: moto's app, with conditional PUTs serialised.

Run as a process (``python -m serialake.verify.s3server PORT``) by :class:`S3Server`, stopped
by its process id. Plain moto is not atomic under racing conditional PUTs (measured: 2
winners in 7 of 3,440 rounds of 16 racing writers under load); real S3 is. This wrapper
holds one lock around every PUT that carries ``If-None-Match`` or ``If-Match``, so exactly
one of racing creators wins, as on S3: whatever counts winners (the verify workload, tests)
relies on it. moto's DynamoDB, served on the same port, is serialised the same way (every
request under the lock): its conditional PutItem is then atomic, as DynamoDB's is.

Needs ``moto[server]`` (the ``verify`` extra).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from typing import Any

__all__ = ["S3Server", "serve"]

_lock = threading.Lock()


def _serialising(app: Callable[..., Iterable[bytes]]) -> Callable[..., Iterable[bytes]]:
    """``app`` with every conditional PUT and every DynamoDB request run under one lock, its whole
    response read inside it."""

    def wrapped(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        conditional = environ.get("REQUEST_METHOD") == "PUT" and (
            "HTTP_IF_NONE_MATCH" in environ or "HTTP_IF_MATCH" in environ
        )
        dynamodb = str(environ.get("HTTP_X_AMZ_TARGET", "")).startswith("DynamoDB_")
        if not (conditional or dynamodb):
            return app(environ, start_response)
        with _lock:
            return list(app(environ, start_response))

    return wrapped


def serve(port: int) -> None:
    """Serve moto's S3 on 127.0.0.1:``port`` (conditional PUTs serialised) until killed."""
    from moto.server import DomainDispatcherApplication, create_backend_app
    from werkzeug.serving import run_simple

    app = DomainDispatcherApplication(create_backend_app)
    run_simple("127.0.0.1", port, _serialising(app), threaded=True, use_reloader=False)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class S3Server:
    """The server process: ``start()`` waits until it answers; ``stop()`` kills it by pid."""

    def __init__(self) -> None:
        self.port = _free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def start(self) -> S3Server:
        # The package's parent directory first, so the module is found when serialake is not installed.
        root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        path = os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH", "")) if p)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "serialake.verify.s3server", str(self.port)], env={**os.environ, "PYTHONPATH": path},
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
        )  # fmt: skip
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    return self
            except OSError:
                if self.proc.poll() is not None:
                    self.proc = None
                    raise RuntimeError("the S3 server (moto) exited at start: is moto[server] installed?") from None
                time.sleep(0.1)
        self.stop()
        raise RuntimeError("the S3 server (moto) did not start within 30 s")

    def stop(self) -> None:
        """Kill the server (its own process group, led by its pid) and wait for it."""
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)
        self.proc = None

    def __enter__(self) -> S3Server:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def client(self, service: str = "s3") -> Any:
        """A boto3 client of ``service`` (``s3``, ``dynamodb``) on this server."""
        import boto3

        return boto3.client(
            service, endpoint_url=self.endpoint, aws_access_key_id="testing", aws_secret_access_key="testing",
            region_name="us-east-1",
        )  # fmt: skip

    def new_bucket(self) -> str:
        name = f"t-{uuid.uuid4().hex[:12]}"
        self.client().create_bucket(Bucket=name)
        return name

    def environment(self) -> dict[str, str]:
        """The AWS variables that point a client (serialake, delta-rs) at this server."""
        return {
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_REGION": "us-east-1",
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_ALLOW_HTTP": "true",
        }


if __name__ == "__main__":
    serve(int(sys.argv[1]))
