"""A fault proxy on 127.0.0.1 in front of an S3 server: it breaks commit PUTs on purpose.

Every request is forwarded to the server, except that a PUT of a commit file
(``_delta_log/<version>.json``) may meet a fault, chosen per request by ``FaultProxy.plan``:

- ``"lose"``: forward the PUT (it is applied), then drop the connection without a response
  (a lost response: the client cannot know it landed);
- ``"500"`` / ``"503"``: answer that status without forwarding (nothing applied);
- ``"409"``: answer S3's ``ConditionalRequestConflict`` without forwarding;
- ``"delay"``: wait ``delay_s`` seconds, then forward.

Runs in threads of the process that starts it; ``stop()`` shuts it down. The tests use it
with a fixed plan, ``serialake verify --s3`` with :func:`random_plan` in front of the local
moto server (not in front of a server given by ``--s3-uri``: the proxy rewrites ``Host``,
which breaks request signatures that a real S3 checks; moto does not check them).
"""

from __future__ import annotations

import http.client
import random
import re
import socket
import threading
import time
from collections import Counter
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlparse

__all__ = ["FAULT_KINDS", "FaultProxy", "random_plan"]

FAULT_KINDS = ("lose", "500", "503", "409", "delay")
_COMMIT = re.compile(r"/_delta_log/\d{20}\.json$")

_CONFLICT = (
    b'<?xml version="1.0" encoding="UTF-8"?><Error><Code>ConditionalRequestConflict</Code>'
    b"<Message>A conflicting conditional operation is currently in progress against this resource."
    b"</Message></Error>"
)


def random_plan(
    rate: float, seed: int | None = None, kinds: tuple[str, ...] = FAULT_KINDS
) -> Callable[[str, int], str | None]:
    """A plan that breaks each commit PUT with probability ``rate``, by a kind drawn from ``kinds``."""
    rng = random.Random(seed)
    lock = threading.Lock()

    def plan(key: str, n: int) -> str | None:
        with lock:
            return rng.choice(kinds) if rng.random() < rate else None

    return plan


class FaultProxy:
    """The proxy; ``faults`` lists (key, fault) as injected, :meth:`fault_counts` counts them by kind."""

    def __init__(self, upstream: str, plan: Callable[[str, int], str | None], delay_s: float = 0.5) -> None:
        """``plan(key, n)`` names the fault for the ``n``-th PUT (from 1) of commit ``key``, or None."""
        self.upstream = urlparse(upstream)
        self.upstream_host = self.upstream.hostname or "127.0.0.1"
        self.plan = plan
        self.delay_s = delay_s
        self.counts: dict[str, int] = {}
        self.faults: list[tuple[str, str]] = []
        self._lock = threading.Lock()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: object) -> None:  # noqa: A002
                pass

            def _forward(self, body: bytes | None) -> None:
                conn = http.client.HTTPConnection(proxy.upstream_host, proxy.upstream.port, timeout=30)
                headers = {k: v for k, v in self.headers.items() if k.lower() != "host"}
                headers["Host"] = f"{proxy.upstream_host}:{proxy.upstream.port}"
                conn.request(self.command, self.path, body=body, headers=headers)
                resp = conn.getresponse()
                data = resp.read()
                self.send_response(resp.status)
                for k, v in resp.getheaders():
                    if k.lower() not in ("transfer-encoding", "connection", "content-length"):
                        self.send_header(k, v)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)
                conn.close()

            def _handle(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else None
                fault = None
                if self.command == "PUT" and _COMMIT.search(urlparse(self.path).path):
                    key = urlparse(self.path).path
                    with proxy._lock:
                        n = proxy.counts[key] = proxy.counts.get(key, 0) + 1
                    fault = proxy.plan(key, n)
                    if fault is not None:
                        with proxy._lock:
                            proxy.faults.append((key, fault))
                if fault == "lose":
                    self._forward_silently(body)
                    self.close_connection = True
                    self.connection.shutdown(socket.SHUT_RDWR)
                    return
                if fault in ("500", "503", "409"):
                    payload = _CONFLICT if fault == "409" else b"<Error><Code>InternalError</Code></Error>"
                    self.send_response(int(fault))
                    self.send_header("Content-Type", "application/xml")
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                    return
                if fault == "delay":
                    time.sleep(proxy.delay_s)
                self._forward(body)

            def _forward_silently(self, body: bytes | None) -> None:
                conn = http.client.HTTPConnection(proxy.upstream_host, proxy.upstream.port, timeout=30)
                headers = {k: v for k, v in self.headers.items() if k.lower() != "host"}
                headers["Host"] = f"{proxy.upstream_host}:{proxy.upstream.port}"
                conn.request(self.command, self.path, body=body, headers=headers)
                conn.getresponse().read()
                conn.close()

            do_GET = do_PUT = do_HEAD = do_DELETE = do_POST = _handle  # noqa: N815

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.endpoint = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def fault_counts(self) -> dict[str, int]:
        """Faults injected so far, by kind."""
        with self._lock:
            return dict(Counter(f for _, f in self.faults))

    def start(self) -> FaultProxy:
        self._thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
