"""A real HTTP receiver of notify events on the loopback, for the tests of being told."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from hangar.sessions.notify import verify

SECRET = "s3cret-notify-key-0123456789"
WAIT = 60.0


class Receiver:
    """A real HTTP receiver on the loopback: it answers each POST with the next of
    ``statuses`` (then 200), and keeps what came, with whether its signature checked out."""

    def __init__(self, statuses: list[int] | None = None) -> None:
        self.statuses = list(statuses or [])
        self.got: list[dict[str, Any]] = []
        self._cond = threading.Condition()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                body = self.rfile.read(int(self.headers["Content-Length"]))
                stamp = self.headers.get("X-Hangar-Timestamp", "")
                signature = self.headers.get("X-Hangar-Signature", "")
                with receiver._cond:
                    status = receiver.statuses.pop(0) if receiver.statuses else 200
                    receiver.got.append({"body": json.loads(body), "status": status,
                                         "signed": verify(SECRET, stamp, signature, body),
                                         "stamp": stamp, "signature": signature,
                                         "raw": body})  # fmt: skip
                    receiver._cond.notify_all()
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}/hook"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def wait_for(self, count: int, timeout: float = WAIT) -> list[dict[str, Any]]:
        """The first ``count`` requests, once they came (a bounded wait)."""
        with self._cond:
            assert self._cond.wait_for(lambda: len(self.got) >= count, timeout), self.got
            return list(self.got)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
