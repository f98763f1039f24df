"""The HTTP server: routes, the request log, and :class:`ModelStub`, the handle tests hold.

Routes (a leading ``/v1`` is optional, query strings are ignored):

- ``POST /v1/messages`` (Anthropic), ``POST /v1/messages/count_tokens``,
  ``POST /v1/responses`` (OpenAI Responses), ``POST /v1/chat/completions`` (Chat
  Completions): stream SSE when the body says ``"stream": true``, else answer JSON.
- ``GET /v1/models``: the scenario's model names, in a shape both Anthropic and OpenAI
  clients read. ``HEAD`` on any path answers 200 (Claude Code's connectivity probe).
- ``GET /_stub/requests`` (the log), ``DELETE /_stub/requests`` (clear it),
  ``GET /_stub/scenario``, ``PUT /_stub/scenario`` (replace it; 400 names a bad field).

Every model-API POST is logged when it arrives, before any delay, as
``{"n", "ts", "api", "path", "body"}``; headers (so credentials) are never logged. ``n`` counts
from 1 for the stub's lifetime and keeps counting after a clear.
"""

from __future__ import annotations

import json
import logging
import socket
import threading
import time
import zlib
from collections.abc import Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import TracebackType
from typing import Any, cast
from urllib.parse import urlsplit

from . import anthropic, openai
from .scenario import (
    JSON,
    Entry,
    Scenario,
    ScenarioError,
    choose,
    cwd_of,
    named_call,
    render_transcript,
    shell_call,
)
from .wire import Reply, Wire

logger = logging.getLogger(__name__)

_WIRES: dict[str, Wire] = {
    "/messages": anthropic.WIRE,
    "/responses": openai.RESPONSES,
    "/chat/completions": openai.CHAT,
}


def _route(raw_path: str) -> str:
    path = urlsplit(raw_path).path.rstrip("/") or "/"
    return path[3:] if path.startswith("/v1/") else path


class _HttpError(Exception):
    def __init__(self, status: int, message: str, kind: str = "invalid_request_error") -> None:
        super().__init__(message)
        self.status = status
        self.kind = kind


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], stub: ModelStub) -> None:
        self.stub = stub
        self.open_sockets: set[socket.socket] = set()
        self.sockets_lock = threading.Lock()
        super().__init__(address, _Handler)

    def close_open_connections(self) -> None:
        """Shut down keep-alive connections so their handler threads end."""
        with self.sockets_lock:
            for sock in list(self.open_sockets):
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "hangar-model-stub/1"
    _raw: bytes = b""  # this request's body, read by _dispatch before routing

    @property
    def stub(self) -> ModelStub:
        return cast(_Server, self.server).stub

    def setup(self) -> None:
        super().setup()
        server = cast(_Server, self.server)
        with server.sockets_lock:
            server.open_sockets.add(self.connection)

    def finish(self) -> None:
        server = cast(_Server, self.server)
        with server.sockets_lock:
            server.open_sockets.discard(self.connection)
        try:
            super().finish()
        except OSError:
            pass

    def log_message(self, format: str, *args: Any) -> None:
        if self.stub.verbose:
            super().log_message(format, *args)

    # -- plumbing ------------------------------------------------------------------------------

    def _read_body(self) -> bytes:
        """The whole request body, de-chunked and decompressed. Always read before routing,
        so a keep-alive connection never desyncs on a body nobody wanted."""
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            parts = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    break
                parts.append(self.rfile.read(size))
                self.rfile.readline()
            raw = b"".join(parts)
        else:
            raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        encoding = self.headers.get("Content-Encoding", "identity").lower()
        if encoding in ("gzip", "deflate"):
            try:
                return zlib.decompress(raw, zlib.MAX_WBITS | 32)
            except zlib.error as exc:
                raise _HttpError(400, f"bad {encoding} body: {exc}") from exc
        if encoding not in ("identity", ""):
            raise _HttpError(415, f"unsupported Content-Encoding {encoding!r}")
        return raw

    def _json_body(self) -> Any:
        try:
            return json.loads(self._raw or b"null")
        except json.JSONDecodeError as exc:
            raise _HttpError(400, f"body is not JSON: {exc}") from exc

    def _send_json(self, status: int, value: Any) -> None:
        payload = json.dumps(value).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.send_header("request-id", f"req_stub_{time.monotonic_ns()}")
        self.end_headers()
        self.wfile.write(payload)

    def _send_error_json(self, error: _HttpError) -> None:
        self._send_json(
            error.status, {"type": "error", "error": {"type": error.kind, "message": str(error)}}
        )

    def _dispatch(self, method: str) -> None:
        try:
            self._raw = b""
            try:
                self._raw = self._read_body()
            except ValueError as exc:  # a malformed Content-Length or chunk size
                self.close_connection = True
                raise _HttpError(400, f"bad request framing: {exc}") from exc
            self._handle(method, _route(self.path))
        except _HttpError as error:
            self._send_error_json(error)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        except Exception:  # top-level handler: answer 500 rather than drop the connection
            logger.exception("model stub failed on %s %s", method, self.path)
            self.close_connection = True
            try:
                self._send_error_json(_HttpError(500, "stub error", "api_error"))
            except OSError:
                pass

    def do_HEAD(self) -> None:
        # Claude Code probes ``HEAD /`` before its first request; any answer will do.
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_POST(self) -> None:
        self._dispatch("POST")

    def do_PUT(self) -> None:
        self._dispatch("PUT")

    def do_DELETE(self) -> None:
        self._dispatch("DELETE")

    # -- routes --------------------------------------------------------------------------------

    def _handle(self, method: str, route: str) -> None:
        stub = self.stub
        if route == "/_stub/requests" and method == "GET":
            self._send_json(200, stub.requests())
        elif route == "/_stub/requests" and method == "DELETE":
            stub.clear_requests()
            self._send_json(200, {"cleared": True})
        elif route == "/_stub/scenario" and method == "GET":
            self._send_json(200, stub.scenario.source)
        elif route == "/_stub/scenario" and method in ("PUT", "POST"):
            try:
                stub.set_scenario(self._json_body())
            except ScenarioError as exc:
                raise _HttpError(400, str(exc)) from exc
            self._send_json(200, stub.scenario.source)
        elif route == "/models" and method == "GET":
            self._send_json(200, _models(stub.scenario.models))
        elif route == "/messages/count_tokens" and method == "POST":
            body = self._model_body()
            stub.record("anthropic", self.path, body)
            self._send_json(200, anthropic.count_tokens(body))
        elif route in _WIRES and method == "POST":
            self._model_call(_WIRES[route])
        else:
            raise _HttpError(404, f"no route for {method} {self.path}", "not_found_error")

    def _model_body(self) -> JSON:
        body = self._json_body()
        if not isinstance(body, dict):
            raise _HttpError(400, "the request body must be a JSON object")
        return body

    def _model_call(self, wire: Wire) -> None:
        body = self._model_body()
        stub = self.stub
        stub.record(wire.name, self.path, body)
        entries = wire.entries(body)
        tools = wire.tools(body)
        step = choose(stub.scenario, entries, offers_tools=bool(tools))
        reply: Reply
        if step.shell is not None:
            call = shell_call(tools, step.shell, cwd_of(entries))
            reply = call if call is not None else f"no shell tool offered (tools: {sorted(tools)})"
        elif step.tool is not None:
            call = named_call(tools, step.tool, step.arguments)
            missing = f"no tool {step.tool} offered (tools: {sorted(tools)})"
            reply = call if call is not None else missing
        else:
            reply = step.text or ""
        if step.delay and stub.wait_stopping(step.delay):
            self.close_connection = True
            return
        if body.get("stream") is True:
            self.close_connection = True
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Cache-Control", "no-cache")
            self.send_header("Connection", "close")
            self.end_headers()
            for event in wire.stream(body, reply):
                self.wfile.write(event.encode())
                self.wfile.flush()
        else:
            self._send_json(200, wire.complete(body, reply))


def _models(names: tuple[str, ...]) -> JSON:
    """One list both clients read: OpenAI's ``object``/``owned_by``, Anthropic's ``type``."""
    data = [
        {
            "id": name,
            "object": "model",
            "type": "model",
            "display_name": name,
            "created": 0,
            "created_at": "1970-01-01T00:00:00Z",
            "owned_by": "hangar-stub",
        }
        for name in names
    ]
    return {
        "object": "list",
        "data": data,
        "has_more": False,
        "first_id": names[0],
        "last_id": names[-1],
    }


class ModelStub:
    """A scripted model API on ``host:port`` (port 0 picks a free one).

    Thread-safe: the scenario and the log are guarded by one lock, and handlers run on their
    own threads. ``start`` returns once the socket is listening; ``stop`` closes the socket and
    open connections and wakes any delayed response (which then ends without a reply).
    """

    def __init__(
        self,
        scenario: Mapping[str, Any] | Scenario | None = None,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        log_file: str | Path | None = None,
        verbose: bool = False,
    ) -> None:
        self._scenario = scenario if isinstance(scenario, Scenario) else Scenario.parse(scenario)
        self._host = host
        self._port = port
        self._log_file = Path(log_file) if log_file is not None else None
        self.verbose = verbose
        self._lock = threading.Condition()
        self._log: list[JSON] = []
        self._count = 0
        self._stopping = threading.Event()
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle -----------------------------------------------------------------------------

    def start(self) -> ModelStub:
        """Bind and serve on a background thread; returns ``self``. Raises ``OSError`` when
        the port is taken."""
        self.bind()
        assert self._server is not None
        self._thread = threading.Thread(
            target=self._server.serve_forever, args=(0.05,), name="model-stub", daemon=True
        )
        self._thread.start()
        return self

    def bind(self) -> ModelStub:
        """Open the listening socket (so :attr:`url` is known) without serving yet; returns
        ``self``. Raises ``OSError`` when the port is taken."""
        if self._server is not None:
            raise RuntimeError("the model stub is already started")
        self._stopping.clear()
        self._server = _Server((self._host, self._port), self)
        return self

    def serve_forever(self) -> None:
        """Serve on the calling thread (binding first if needed) until :meth:`stop` is called
        from another thread, or KeyboardInterrupt."""
        if self._server is None:
            self.bind()
        assert self._server is not None
        self._server.serve_forever(poll_interval=0.05)

    def stop(self) -> None:
        """Stop serving; idempotent."""
        server, self._server = self._server, None
        if server is None:
            return
        self._stopping.set()
        server.shutdown()
        server.server_close()
        server.close_open_connections()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def __enter__(self) -> ModelStub:
        return self.start() if self._server is None else self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    @property
    def port(self) -> int:
        """The bound port (only meaningful once started)."""
        if self._server is None:
            raise RuntimeError("the model stub is not started")
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        """``http://HOST:PORT``, without ``/v1``."""
        return f"http://{self._host}:{self.port}"

    def wait_stopping(self, seconds: float) -> bool:
        """Sleep up to ``seconds``; True when the stub is stopping (cut short)."""
        return self._stopping.wait(seconds)

    # -- scenario ------------------------------------------------------------------------------

    @property
    def scenario(self) -> Scenario:
        """The scenario in force."""
        with self._lock:
            return self._scenario

    def set_scenario(self, scenario: Mapping[str, Any] | Scenario | None) -> None:
        """Replace the scenario for every later request; raises :class:`ScenarioError` (and
        keeps the old one) when the document is malformed."""
        parsed = scenario if isinstance(scenario, Scenario) else Scenario.parse(scenario)
        with self._lock:
            self._scenario = parsed

    # -- request log ---------------------------------------------------------------------------

    def record(self, api: str, path: str, body: JSON) -> None:
        """Append one request to the log (and to the log file, as one JSON line)."""
        with self._lock:
            self._count += 1
            entry = {
                "n": self._count,
                "ts": time.time(),
                "api": api,
                "path": urlsplit(path).path,
                "body": body,
            }
            self._log.append(entry)
            if self._log_file is not None:
                with self._log_file.open("a", encoding="utf-8") as handle:
                    handle.write(json.dumps(entry) + "\n")
            self._lock.notify_all()

    def requests(self, api: str | None = None) -> list[JSON]:
        """Logged requests in arrival order, optionally only one API's
        (``anthropic``, ``responses`` or ``chat``)."""
        with self._lock:
            return [dict(e) for e in self._log if api is None or e["api"] == api]

    def clear_requests(self) -> None:
        """Forget logged requests (the counter ``n`` keeps going; the log file is kept)."""
        with self._lock:
            self._log.clear()

    def wait_for_requests(
        self, count: int, api: str | None = None, timeout: float = 10.0
    ) -> list[JSON]:
        """Block until at least ``count`` requests (of ``api``) are logged; return them.
        Raises ``TimeoutError`` after ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        with self._lock:
            while True:
                found = [e for e in self._log if api is None or e["api"] == api]
                if len(found) >= count:
                    return [dict(e) for e in found]
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise TimeoutError(f"{len(found)} of {count} requests after {timeout}s")
                self._lock.wait(remaining)

    # -- helpers for assertions ----------------------------------------------------------------

    @staticmethod
    def api_of(body: Mapping[str, Any]) -> str:
        """Which API a logged body belongs to: ``responses`` (has ``input``), ``anthropic``
        (Anthropic-only fields or blocks), else ``chat``."""
        if "input" in body:
            return "responses"
        if "system" in body or "anthropic_version" in body or "thinking" in body:
            return "anthropic"
        messages = body.get("messages")
        for message in messages if isinstance(messages, list) else []:
            if not isinstance(message, dict):
                continue
            if message.get("role") in ("tool", "system", "developer") or "tool_calls" in message:
                return "chat"
            content = message.get("content")
            for block in content if isinstance(content, list) else []:
                if isinstance(block, dict) and block.get("type") in ("tool_use", "tool_result"):
                    return "anthropic"
        tools = body.get("tools")
        if isinstance(tools, list) and tools and isinstance(tools[0], dict):
            return "anthropic" if "input_schema" in tools[0] else "chat"
        return "chat"

    @staticmethod
    def entries(body: Mapping[str, Any], api: str | None = None) -> list[Entry]:
        """The normalised conversation of a request body (see :class:`scenario.Entry`)."""
        wire = {w.name: w for w in _WIRES.values()}[api or ModelStub.api_of(body)]
        return list(wire.entries(dict(body)))

    @staticmethod
    def transcript(body: Mapping[str, Any], api: str | None = None) -> str:
        """A request's conversation as plain text: every user, assistant and tool-result
        text and every tool call, in order, one ``kind: text`` paragraph each (kinds:
        ``prompt``, ``context``, ``assistant``, ``tool_call``, ``tool_result``). System and
        developer prompts are left out. ``api`` is guessed from the body when omitted."""
        return render_transcript(ModelStub.entries(body, api))
