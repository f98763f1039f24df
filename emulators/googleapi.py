"""What our stand-ins of Google REST APIs share: errors in Google's JSON shape
(``{"error": {"code", "message", "status"}}``) and a request handler that answers JSON."""

from __future__ import annotations

import json
from http.server import BaseHTTPRequestHandler
from typing import Any


class ApiError(Exception):
    """An error the stand-in answers with: HTTP ``code``, Google ``status`` and a message."""

    def __init__(self, code: int, status: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.status = status
        self.message = message


class JsonHandler(BaseHTTPRequestHandler):
    """Logs requests only when the server's ``verbose`` is set; answers JSON documents.

    Its socket sends at once (no Nagle): an answer's headers and body go out as two writes, and
    the client's delayed acknowledgement of the first would hold the second back 40 ms."""

    disable_nagle_algorithm = True

    def log_message(self, format: str, *args: Any) -> None:
        if getattr(self.server, "verbose", False):
            super().log_message(format, *args)

    def send_json(self, status: int, doc: dict[str, Any]) -> None:
        data = json.dumps(doc).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json; charset=UTF-8")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def send_api_error(self, exc: ApiError) -> None:
        error = {"code": exc.code, "message": exc.message, "status": exc.status}
        self.send_json(exc.code, {"error": error})
