"""pods/exec over a websocket, served the way the Kubernetes API serves it, for the stand-in.

Contract (what the official client and kubectl rely on, checked by
``tests/emulators/test_kube_exec.py`` with the official Python client):

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
  closes. stdin frames are fed to the command as they come, with backpressure (a bounded
  queue: a slow reader slows the client's writes, nothing piles up unbounded).
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
(``exec_endpoint(…, user=SandboxUser.AGENT)`` gives a stand-in where a bare exec is the agent.)
The environment and cwd are those of a hangar exec on the local backend (``HOME=/hangar``,
cwd ``/hangar``), not the image's: the backend should set both (``env -C DIR VAR=…``) rather than
rely on the image's defaults.
"""

from __future__ import annotations

import asyncio
import json
import queue
import threading
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import anyio.to_thread
from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.routing import WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect

from hangar.errors import HangarError, NotFound
from hangar.sandboxes import ExecResult, Sandboxes, SandboxUser

EXEC_PATH = "/api/v1/namespaces/{namespace}/pods/{name}/exec"
V5 = "v5.channel.k8s.io"
V4 = "v4.channel.k8s.io"
STDIN, STDOUT, STDERR, ERROR, RESIZE, CLOSE = 0, 1, 2, 3, 4, 255
STDIN_FRAMES = 64
"""stdin messages held between the websocket and the command before the client is slowed."""

Resolve = Callable[[str, str], tuple[Sandboxes, str]]
"""(namespace, pod name) -> the pod's sandbox backend and sandbox id; raises
:class:`~hangar.errors.NotFound` (or a subclass) for a pod that is not there."""
Endpoint = Callable[[WebSocket], Awaitable[None]]


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


def exec_route(resolve: Resolve, user: SandboxUser = SandboxUser.HANGAR) -> WebSocketRoute:
    """pods/exec at :data:`EXEC_PATH`, for the stand-in's list of routes."""
    return WebSocketRoute(EXEC_PATH, exec_endpoint(resolve, user))


def add_exec_route(
    app: Starlette, resolve: Resolve, user: SandboxUser = SandboxUser.HANGAR
) -> None:
    """Serve pods/exec on an app already made (:func:`exec_route` appended to its routes)."""
    app.router.routes.append(exec_route(resolve, user))


def exec_endpoint(resolve: Resolve, user: SandboxUser = SandboxUser.HANGAR) -> Endpoint:
    """The websocket handler of pods/exec (the module's contract), running each command through
    the sandbox that ``resolve`` finds for the pod, as ``user``."""

    async def endpoint(websocket: WebSocket) -> None:
        refusal = _refusal(websocket)
        if refusal is None:
            namespace, name = websocket.path_params["namespace"], websocket.path_params["name"]
            try:
                sandboxes, sandbox_id = await anyio.to_thread.run_sync(resolve, namespace, name)
            except NotFound:
                refusal = failure(404, "NotFound", f'pods "{name}" not found')
        if refusal is not None:
            await _deny(websocket, refusal)
            return
        protocol = _protocol(websocket)
        await websocket.accept(subprotocol=protocol)
        await _Exec(websocket, protocol, sandboxes, sandbox_id, user).run()

    return endpoint


def _flag(websocket: WebSocket, name: str) -> bool:
    return websocket.query_params.get(name, "").lower() in ("true", "1")


def _protocol(websocket: WebSocket) -> str | None:
    offered = [p.strip() for p in websocket.headers.get("sec-websocket-protocol", "").split(",")]
    return next((p for p in (V5, V4) if p in offered), None)


def _refusal(websocket: WebSocket) -> dict[str, Any] | None:
    """The 400 ``Status`` for a request the stand-in does not serve, else None."""
    if _protocol(websocket) is None:
        return failure(400, "BadRequest", f"the exec websocket needs subprotocol {V5} or {V4}")
    if not websocket.query_params.getlist("command"):
        return failure(400, "BadRequest", "you must specify at least one command for the container")
    if not any(_flag(websocket, s) for s in ("stdin", "stdout", "stderr")):
        return failure(400, "BadRequest", "you must specify at least 1 of stdin, stdout, stderr")
    if _flag(websocket, "tty"):
        return failure(400, "BadRequest", "the stand-in's exec has no terminal (tty=true)")
    return None


async def _deny(websocket: WebSocket, body: dict[str, Any]) -> None:
    """Answer the handshake with plain HTTP (``body['code']`` and the Status) where the server
    can, else refuse the upgrade (uvicorn's 403)."""
    if "websocket.http.response" in websocket.scope.get("extensions", {}):
        await websocket.send_denial_response(JSONResponse(body, status_code=body["code"]))
    else:
        await websocket.close(code=1008)


class _Exec:
    """One exec: the websocket on the event loop, the sandbox's blocking ``exec`` in a thread,
    stdin through a bounded queue, output back through the loop."""

    def __init__(
        self, websocket: WebSocket, protocol: str | None, sandboxes: Sandboxes, sandbox_id: str,
        user: SandboxUser,
    ) -> None:  # fmt: skip
        self.websocket, self.protocol, self.user = websocket, protocol, user
        self.sandboxes, self.sandbox_id = sandboxes, sandbox_id
        self.argv = websocket.query_params.getlist("command")
        self.wants = {ch: _flag(websocket, n) for ch, n in ((STDOUT, "stdout"), (STDERR, "stderr"))}
        self.stdin: queue.Queue[bytes | None] | None = (
            queue.Queue(STDIN_FRAMES) if _flag(websocket, "stdin") else None
        )
        self.stdin_open = self.stdin is not None
        self.cancel = threading.Event()  # the client went away: kill the command
        self.finished = threading.Event()  # the command ended: stop feeding it
        self.connected = True
        self.lock = asyncio.Lock()
        self.loop = asyncio.get_running_loop()

    async def run(self) -> None:
        receiver = asyncio.create_task(self._receive())
        try:
            try:
                result = await anyio.to_thread.run_sync(self._exec)
                end = status(result.exit_code)
            except HangarError as exc:
                message = f"error executing command in container: {exc}"
                end = failure(500, "InternalError", message)
                end["details"] = {"causes": [{"message": message}]}
            finally:
                self.finished.set()
            await self._send(ERROR, json.dumps(end).encode())
            if self.connected:
                self.connected = False
                await self.websocket.close(code=1000)
        finally:
            receiver.cancel()

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

    async def _receive(self) -> None:
        try:
            while True:
                message = await self.websocket.receive()
                if message["type"] == "websocket.disconnect":
                    break
                data = message.get("bytes") or (message.get("text") or "").encode()
                if data[:1] == bytes([STDIN]) and len(data) > 1:
                    await self._feed(data[1:])
                elif data == bytes([CLOSE, STDIN]) and self.protocol == V5:
                    await self._feed(None)
                # resize (4) and anything else: a stand-in exec has no terminal
        except WebSocketDisconnect:
            pass
        finally:
            if self.connected:  # the client left before the command ended
                self.connected = False
                self.cancel.set()
            self._end_stdin()

    async def _feed(self, chunk: bytes | None) -> None:
        """Hand ``chunk`` (None: end of file) to the command; wait while the queue is full."""
        if self.stdin is None or not self.stdin_open:
            return
        self.stdin_open = chunk is not None
        try:
            self.stdin.put_nowait(chunk)
        except queue.Full:
            await anyio.to_thread.run_sync(self._put_blocking, chunk)

    def _put_blocking(self, chunk: bytes | None) -> None:
        assert self.stdin is not None
        while not self.finished.is_set():
            try:
                self.stdin.put(chunk, timeout=0.1)
                return
            except queue.Full:
                continue

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

    async def _send(self, channel: int, data: bytes) -> None:
        async with self.lock:
            if not self.connected:
                return
            try:
                await self.websocket.send_bytes(bytes([channel]) + data)
            except (WebSocketDisconnect, RuntimeError, OSError):
                self.connected = False
                self.cancel.set()

    def write(self, channel: int, data: bytes) -> int:
        """From the exec's thread: send one frame, waiting until it is sent (backpressure)."""
        if data and self.wants[channel] and self.connected:
            asyncio.run_coroutine_threadsafe(self._send(channel, bytes(data)), self.loop).result()
        return len(data)


class _Frames:
    """The binary file ``exec`` writes one stream to: each write a frame on ``channel``."""

    def __init__(self, owner: _Exec, channel: int) -> None:
        self.owner, self.channel = owner, channel

    def write(self, data: bytes) -> int:
        return self.owner.write(self.channel, data)

    def flush(self) -> None:
        pass
