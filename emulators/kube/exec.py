"""pods/exec over a websocket, served the way the Kubernetes API serves it, for the stand-in.

Two fronts over one core (:class:`ExecSession`): :func:`exec_handler` for the stand-in's
``http.server`` front (its ``KubeServer.exec_handler`` hook: the handshake answered and the
frames carried on the request's own socket, framed by the ``websockets`` library's sans-I/O
protocol), and :func:`exec_endpoint` /
:func:`exec_route` for a Starlette app. Both keep one contract (what the official client
and kubectl rely on; ``tests/emulators/test_kube_exec.py`` checks it on both fronts with the
official Python client):

- ``GET /api/v1/namespaces/{namespace}/pods/{name}/exec`` upgraded to a websocket. The client's
  ``connect_post_…`` variant is the same handshake (a websocket upgrade is always a GET), so one
  route serves both. Query: ``command`` (repeated, the argv), ``container`` (accepted and
  ignored: a stand-in pod has one container), ``stdin``, ``stdout``, ``stderr``, ``tty``.
- Subprotocol: ``v5.channel.k8s.io`` when offered, else ``v4.channel.k8s.io``; anything else is
  refused before the upgrade (HTTP 400 with a ``Status`` body), as are an empty command, no
  stream asked for, and ``tty=true`` (a stand-in exec has no terminal). A pod that ``resolve``
  does not find is HTTP 404 with a ``Status`` body, as the API server answers.
- Every binary (or text) message starts with a channel byte: 0 stdin (client to server), 1
  stdout, 2 stderr, 3 error (server to client), 4 resize (ignored). With v5, the message
  ``[255, 0]`` closes stdin: the command sees end of file. stdin also ends when the websocket
  closes (a client that asks for stdin should close it: a command that exits with stdin still
  open waits for the local backend's one-second join of its stdin feeder). stdin frames are fed to the command as they come, with backpressure (a bounded
  queue: a slow reader slows the client's writes, nothing piles up unbounded). A message may
  hold up to :data:`MAX_MESSAGE` bytes (uvicorn's default limit; the client sends each
  ``write_stdin`` as one message).
- stdout and stderr go out as frames as the command writes them (when asked for; otherwise
  they are dropped). When it exits, one channel-3 message carries a ``Status`` as the kubelet
  writes it: ``{"status": "Success"}`` for exit 0, else ``status: Failure``, ``reason:
  NonZeroExitCode``, ``details.causes: [{"reason": "ExitCode", "message": "N"}]``; an error of
  the sandbox itself is ``reason: InternalError``, code 500, as the kubelet reports one. Then the
  server closes the websocket (code 1000).
- The client closing the websocket (or the connection dropping) mid-command kills the command
  and every process it started (the sandbox's ``cancel``), within the second ``exec`` promises.

Who the command runs as: the pod's root. A real pod of the GKE backend runs as root with only
the capabilities the uid split needs (SETUID, SETGID, KILL, DAC_*), and the backend makes the
split itself, wrapping what the agent runs in ``setpriv --reuid=1000 --regid=1000
--clear-groups …``. A local sandbox's :attr:`~hangar.sandboxes.SandboxUser.HANGAR` is exactly that
(uid 0 inside, those capabilities and no others), and the agent's uid inside is 1000, so the
stand-in runs every exec as ``HANGAR`` and the backend's own ``setpriv`` really drops to the
agent's uid inside the stand-in's pod: no convention the real cluster would not see, no header.
(``user=SandboxUser.AGENT`` on either front gives a stand-in where a bare exec is the agent.)
The environment and cwd are those of a hangar exec on the local backend (``HOME=/hangar``,
cwd ``/hangar``), not the image's: the backend should set both (``env -C DIR VAR=…``) rather than
rely on the image's defaults.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import queue
import socket
import threading
from collections.abc import Awaitable, Callable, Iterator, Sequence
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import anyio.to_thread
from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.routing import WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect
from websockets.exceptions import WebSocketException
from websockets.frames import Frame, Opcode
from websockets.protocol import State
from websockets.server import ServerProtocol
from websockets.utils import accept_key

from hangar.errors import HangarError, NotFound
from hangar.sandboxes import ExecResult, Sandboxes, SandboxUser

EXEC_PATH = "/api/v1/namespaces/{namespace}/pods/{name}/exec"
V5 = "v5.channel.k8s.io"
V4 = "v4.channel.k8s.io"
STDIN, STDOUT, STDERR, ERROR, RESIZE, CLOSE = 0, 1, 2, 3, 4, 255
STDIN_FRAMES = 64
"""stdin messages held between the websocket and the command before the client is slowed."""
MAX_MESSAGE = 16 << 20
"""The largest message a client may send (uvicorn's default limit, kept on both fronts)."""
CLOSE_WAIT = 5.0
"""Seconds the ``http.server`` front waits for the client to answer its close before it cuts
the connection."""

Resolve = Callable[[str, str], tuple[Sandboxes, str]]
"""(namespace, pod name) -> the pod's sandbox backend and sandbox id; raises
:class:`~hangar.errors.NotFound` (or a subclass) for a pod that is not there."""
Endpoint = Callable[[WebSocket], Awaitable[None]]
Handler = Callable[[BaseHTTPRequestHandler, str, str], None]
Query = Sequence[tuple[str, str]]


def status(exit_code: int) -> dict[str, Any]:
    """The channel-3 ``Status`` the kubelet writes for a command that exited ``exit_code``."""
    if exit_code == 0:
        return {"metadata": {}, "status": "Success"}
    return {"metadata": {}, "status": "Failure", "reason": "NonZeroExitCode",
            "message": f"command terminated with non-zero exit code: exit status {exit_code}",
            "details": {"causes": [{"reason": "ExitCode", "message": str(exit_code)}]}}  # fmt: skip


def failure(code: int, reason: str, message: str) -> dict[str, Any]:
    """A ``Status`` of ``Failure`` with an HTTP code (refusals, internal errors)."""
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": message, "reason": reason, "code": code}  # fmt: skip


def _flag(query: Query, name: str) -> bool:
    return any(k == name and v.lower() in ("true", "1") for k, v in query)


def negotiate(offered: str) -> str | None:
    """The subprotocol to answer a ``Sec-WebSocket-Protocol`` offer with: v5, else v4."""
    protocols = [p.strip() for p in offered.split(",")]
    return next((p for p in (V5, V4) if p in protocols), None)


def refusal(query: Query, offered: str) -> dict[str, Any] | None:
    """The 400 ``Status`` for a request the stand-in does not serve, else None."""
    if negotiate(offered) is None:
        return failure(400, "BadRequest", f"the exec websocket needs subprotocol {V5} or {V4}")
    if not [v for k, v in query if k == "command"]:
        return failure(400, "BadRequest", "you must specify at least one command")
    if not any(_flag(query, s) for s in ("stdin", "stdout", "stderr")):
        return failure(400, "BadRequest", "you must specify at least 1 of stdin, stdout, stderr")
    if _flag(query, "tty"):
        return failure(400, "BadRequest", "the stand-in's exec has no terminal (tty=true)")
    return None


class ExecSession:
    """One exec, whatever carries its frames: ``send`` puts one message on the websocket
    (blocking until it is sent; raising once it cannot be), the front calls :meth:`offer` with
    each message from the client and :meth:`client_gone` when the client is gone, and
    :meth:`run` (in a thread of its own) runs the command and returns the channel-3 Status."""

    def __init__(self, query: Query, protocol: str, sandboxes: Sandboxes, sandbox_id: str,
                 user: SandboxUser, send: Callable[[bytes], None]) -> None:  # fmt: skip
        self.protocol, self.sandboxes, self.sandbox_id, self.user = (
            protocol, sandboxes, sandbox_id, user)  # fmt: skip
        self.argv = [v for k, v in query if k == "command"]
        self.wants = {STDOUT: _flag(query, "stdout"), STDERR: _flag(query, "stderr")}
        self.stdin: queue.Queue[bytes | None] | None = (
            queue.Queue(STDIN_FRAMES) if _flag(query, "stdin") else None
        )
        self.stdin_open = self.stdin is not None
        self.send_lock = threading.Lock()
        self._send = send
        self.connected = True
        self.cancel = threading.Event()  # the client went away: kill the command
        self.finished = threading.Event()  # the command ended: stop feeding it

    def run(self) -> dict[str, Any]:
        """Run the command to its end; the Status for channel 3."""
        try:
            result = self._exec()
            return status(result.exit_code)
        except HangarError as exc:
            message = f"error executing command in container: {exc}"
            end = failure(500, "InternalError", message)
            end["details"] = {"causes": [{"message": message}]}
            return end
        finally:
            self.finished.set()
            self._end_stdin()

    def _exec(self) -> ExecResult:
        return self.sandboxes.exec(
            self.sandbox_id, self.argv, user=self.user, cancel=self.cancel,
            stdin=None if self.stdin is None else self._chunks(),
            stdout=_Frames(self, STDOUT), stderr=_Frames(self, STDERR),  # type: ignore[arg-type]
        )  # fmt: skip

    def _chunks(self) -> Iterator[bytes]:
        assert self.stdin is not None
        while (chunk := self.stdin.get()) is not None:
            yield chunk

    def offer(self, message: bytes, block: bool = True) -> bool:
        """Take one message from the client: stdin data, v5's close of stdin, or something
        ignored (resize). False, with nothing taken, when ``block`` is false and the command
        has not caught up with its stdin (offer it again, blocking, from a thread)."""
        if message[:1] == bytes([STDIN]) and len(message) > 1:
            return self._feed(message[1:], block)
        if message == bytes([CLOSE, STDIN]) and self.protocol == V5:
            return self._feed(None, block)
        return True

    def _feed(self, chunk: bytes | None, block: bool) -> bool:
        if self.stdin is None or not self.stdin_open:
            return True
        while not self.finished.is_set():
            try:
                self.stdin.put(chunk, block=block, timeout=0.1 if block else None)
                break
            except queue.Full:
                if not block:
                    return False
        self.stdin_open = chunk is not None
        return True

    def client_gone(self) -> None:
        """The client closed the websocket or the connection dropped: end the command."""
        self.connected = False
        self.cancel.set()
        self._end_stdin()

    def _end_stdin(self) -> None:
        """End of file for the command, whatever the queue holds (it may have stopped
        reading)."""
        if self.stdin is None or not self.stdin_open:
            return
        self.stdin_open = False
        while True:
            try:
                self.stdin.put_nowait(None)
                return
            except queue.Full:
                try:
                    self.stdin.get_nowait()  # the command is gone or leaving: drop its input
                except queue.Empty:
                    pass

    def send(self, channel: int, data: bytes) -> None:
        """One frame on ``channel``; a client gone makes it (and every later one) a no-op."""
        with self.send_lock:
            if not self.connected:
                return
            try:
                self._send(bytes([channel]) + data)
            except (OSError, RuntimeError, WebSocketDisconnect, WebSocketException):
                self.client_gone()  # the socket is gone or closing: so is the client

    def write(self, channel: int, data: bytes) -> int:
        """From the exec's thread: one frame of output, if the client asked for it."""
        if data and self.wants[channel]:
            self.send(channel, bytes(data))
        return len(data)


class _Frames:
    """The binary file ``exec`` writes one stream to: each write a frame on ``channel``."""

    def __init__(self, owner: ExecSession, channel: int) -> None:
        self.owner, self.channel = owner, channel

    def write(self, data: bytes) -> int:
        return self.owner.write(self.channel, data)

    def flush(self) -> None:
        pass


# -- the http.server front ----------------------------------------------------------------


def exec_handler(resolve: Resolve, user: SandboxUser = SandboxUser.HANGAR) -> Handler:
    """The stand-in server's pods/exec hook (``KubeServer.exec_handler``): called on the
    request's thread with the request parsed, it answers the handshake on the request's socket
    and serves the exec to its end (the module's contract), running the command through the
    sandbox ``resolve`` finds for the pod, as ``user``."""

    def handle(request: BaseHTTPRequestHandler, namespace: str, name: str) -> None:
        request.close_connection = True
        query = parse_qsl(urlsplit(request.path).query, keep_blank_values=True)
        offered = request.headers.get("Sec-WebSocket-Protocol", "")
        refused = refusal(query, offered)
        if refused is None:
            try:
                sandboxes, sandbox_id = resolve(namespace, name)
            except NotFound:
                refused = failure(404, "NotFound", f'pods "{name}" not found')
        if refused is not None:
            _answer(request, refused)
            return
        protocol = negotiate(offered)
        assert protocol is not None
        key = request.headers.get("Sec-WebSocket-Key", "")
        if "websocket" not in request.headers.get("Upgrade", "").lower() or not key:
            _answer(request, failure(400, "BadRequest", "pods/exec is served over a websocket"))
            return
        request.send_response(101)
        request.send_header("Upgrade", "websocket")
        request.send_header("Connection", "Upgrade")
        request.send_header("Sec-WebSocket-Accept", accept_key(key))
        request.send_header("Sec-WebSocket-Protocol", protocol)
        request.end_headers()
        ws = ServerProtocol(state=State.OPEN, max_size=MAX_MESSAGE)  # framing only, from here
        lock = threading.Lock()

        def flush() -> None:
            for data in ws.data_to_send():
                request.wfile.write(data)
            request.wfile.flush()

        def send(message: bytes) -> None:
            with lock:
                ws.send_binary(message)
                flush()

        with lock:
            flush()
        session = ExecSession(query, protocol, sandboxes, sandbox_id, user, send)
        reader = threading.Thread(target=_read, args=(request, ws, lock, flush, session),
                                  daemon=True)  # fmt: skip
        reader.start()
        try:
            session.send(ERROR, json.dumps(session.run()).encode())
            if session.connected:
                with lock:
                    ws.send_close(1000)
                    flush()
            reader.join(CLOSE_WAIT)  # the client answers the close; a silent one is cut off
        finally:
            # The server closes the request's files once this returns: the reader must be done
            # with them first, or its next read or answer fails on a closed file.
            if reader.is_alive():
                with contextlib.suppress(OSError):
                    request.connection.shutdown(socket.SHUT_RDWR)  # its read ends at once
                reader.join()

    return handle


def _answer(request: BaseHTTPRequestHandler, body: dict[str, Any]) -> None:
    data = json.dumps(body).encode()
    request.send_response(body["code"])
    request.send_header("Content-Type", "application/json")
    request.send_header("Content-Length", str(len(data)))
    request.end_headers()
    request.wfile.write(data)


def _read(request: BaseHTTPRequestHandler, ws: ServerProtocol, lock: threading.Lock,
          flush: Callable[[], None], session: ExecSession) -> None:  # fmt: skip
    """The client's side of the socket, until it closes: messages to ``session``."""
    parts: list[bytes] = []
    try:
        while data := request.rfile.read1(1 << 16):
            with lock:
                ws.receive_data(data)
                events = ws.events_received()
                flush()  # pongs, the close's answer
            for event in events:
                assert isinstance(event, Frame)
                if event.opcode in (Opcode.TEXT, Opcode.BINARY, Opcode.CONT):
                    parts.append(bytes(event.data))
                    if event.fin:
                        session.offer(b"".join(parts))
                        parts.clear()
                elif event.opcode is Opcode.CLOSE:
                    return
    except OSError:
        pass
    finally:
        if not session.finished.is_set():
            session.client_gone()


# -- the Starlette front ------------------------------------------------------------------


def exec_route(resolve: Resolve, user: SandboxUser = SandboxUser.HANGAR) -> WebSocketRoute:
    """pods/exec at :data:`EXEC_PATH`, for a Starlette app's list of routes."""
    return WebSocketRoute(EXEC_PATH, exec_endpoint(resolve, user))


def add_exec_route(
    app: Starlette, resolve: Resolve, user: SandboxUser = SandboxUser.HANGAR
) -> None:
    """Serve pods/exec on an app already made (:func:`exec_route` appended to its routes)."""
    app.router.routes.append(exec_route(resolve, user))


def exec_endpoint(resolve: Resolve, user: SandboxUser = SandboxUser.HANGAR) -> Endpoint:
    """The Starlette websocket handler of pods/exec (the module's contract), running each
    command through the sandbox ``resolve`` finds for the pod, as ``user``."""

    async def endpoint(websocket: WebSocket) -> None:
        query = websocket.query_params.multi_items()
        offered = websocket.headers.get("sec-websocket-protocol", "")
        refused = refusal(query, offered)
        if refused is None:
            namespace, name = websocket.path_params["namespace"], websocket.path_params["name"]
            try:
                sandboxes, sandbox_id = await anyio.to_thread.run_sync(resolve, namespace, name)
            except NotFound:
                refused = failure(404, "NotFound", f'pods "{name}" not found')
        if refused is not None:
            if "websocket.http.response" in websocket.scope.get("extensions", {}):
                response = JSONResponse(refused, status_code=refused["code"])
                await websocket.send_denial_response(response)
            else:
                await websocket.close(code=1008)
            return
        protocol = negotiate(offered)
        assert protocol is not None
        await websocket.accept(subprotocol=protocol)
        loop = asyncio.get_running_loop()

        def send(message: bytes) -> None:
            asyncio.run_coroutine_threadsafe(websocket.send_bytes(message), loop).result()

        session = ExecSession(query, protocol, sandboxes, sandbox_id, user, send)
        receiver = asyncio.create_task(_receive(websocket, session))
        try:
            end = await anyio.to_thread.run_sync(session.run)
            await anyio.to_thread.run_sync(session.send, ERROR, json.dumps(end).encode())
            if session.connected:
                session.connected = False
                await websocket.close(code=1000)
        finally:
            receiver.cancel()

    return endpoint


async def _receive(websocket: WebSocket, session: ExecSession) -> None:
    """The client's messages to ``session``, until it leaves."""
    try:
        while True:
            message = await websocket.receive()
            if message["type"] == "websocket.disconnect":
                break
            data = message.get("bytes") or (message.get("text") or "").encode()
            if not session.offer(data, block=False):
                await anyio.to_thread.run_sync(session.offer, data)
    except WebSocketDisconnect:
        pass
    finally:
        if session.connected and not session.finished.is_set():
            session.client_gone()
