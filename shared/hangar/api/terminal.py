"""The interactive terminal: a websocket to a shell in the session's repo folder.

``GET /api/sessions/{ref}/terminal`` upgrades to a websocket (the session is resumed first if
it has no sandbox). The shell is ``bash -i`` under ``script`` (util-linux), which gives it a
pseudo terminal inside the sandbox, sized by the ``rows`` and ``cols`` query parameters, with
``TERM`` from ``term``. Frames:

- client to server: binary (or text) frames are keystrokes, passed through unchanged;
- server to client: binary frames are the terminal's output;
- when the shell ends the server closes with code 1000 and the reason ``exit N``; when it could
  not run, with 1011 and the reason ``CODE: MESSAGE``. Closing the socket ends the shell.

The token comes in the ``Authorization`` header or, for clients that cannot set headers, as
``?token=``. A refused upgrade is an HTTP error with the usual JSON body (401, 403, 404). An
open terminal holds a shell lease, so the session counts as in use while it lasts.
"""

from __future__ import annotations

import logging
import queue
import re
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING, BinaryIO, cast

import anyio
import anyio.from_thread
import anyio.lowlevel
from starlette.concurrency import run_in_threadpool
from starlette.responses import JSONResponse
from starlette.routing import WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect, WebSocketState

from hangar.api.auth import authenticate
from hangar.api.routes import Query
from hangar.api.streams import ClientGone
from hangar.errors import HangarError, InvalidInput

if TYPE_CHECKING:
    from hangar.runtime import Runtime

logger = logging.getLogger(__name__)

PATH = "/api/sessions/{ref}/terminal"
SUMMARY = (
    "WebSocket: an interactive shell in the session's repo folder; binary frames both ways, "
    'closed with the reason "exit N" when the shell ends'
)
QUERY = [
    Query("token", "string", "the bearer token, for clients that cannot send headers"),
    Query("rows", "integer", "the terminal's height"),
    Query("cols", "integer", "the terminal's width"),
    Query("term", "string", "TERM for the shell (default xterm-256color)"),
]
_TERM = re.compile(r"^[A-Za-z0-9._+-]{1,64}$")


def shell_argv(rows: str | None, cols: str | None, term: str | None) -> list[str]:
    """The shell's command line; InvalidInput for a size or TERM that is not plain."""
    term = term or "xterm-256color"
    if not _TERM.match(term):
        raise InvalidInput(f"term {term!r} is not a terminal type", field="term")
    inner = f"export TERM={term}; "
    if rows or cols:
        if not (rows or "").isdigit() or not (cols or "").isdigit():
            raise InvalidInput("rows and cols must both be numbers", field="rows")
        inner += f"stty rows {int(rows or 0)} cols {int(cols or 0)} 2>/dev/null; "
    # -e: script exits with the shell's status; -f: output is flushed as it comes.
    return ["script", "-qefc", inner + "exec bash -i", "/dev/null"]


def _reason(text: str) -> str:
    """A close reason: at most 123 bytes of UTF-8."""
    return text.encode()[:120].decode(errors="ignore")


class _Screen:
    """A binary file for the sandbox to write the terminal's output to: websocket frames."""

    def __init__(self, ws: WebSocket, token: anyio.lowlevel.EventLoopToken) -> None:
        self.ws, self.token = ws, token

    def write(self, data: bytes) -> int:
        try:
            anyio.from_thread.run(self.ws.send_bytes, data, token=self.token)
        except (WebSocketDisconnect, RuntimeError, OSError):
            raise ClientGone() from None
        return len(data)

    def flush(self) -> None:
        pass


async def _deny(ws: WebSocket, exc: HangarError) -> None:
    if "websocket.http.response" in ws.scope.get("extensions", {}):
        await ws.send_denial_response(JSONResponse(exc.to_dict(), status_code=exc.status))
    else:  # no denial responses here: close before accepting, the code says the status
        await ws.close(code=4000 + exc.status, reason=_reason(f"{exc.code}: {exc.message}"))


def terminal_route(runtime: Runtime) -> WebSocketRoute:
    service = runtime.sessions

    async def terminal(ws: WebSocket) -> None:
        ref = str(ws.path_params["ref"])
        header = ws.headers.get("authorization")
        if header is None and "token" in ws.query_params:
            header = f"Bearer {ws.query_params['token']}"
        try:
            await run_in_threadpool(authenticate, runtime.db, header)
            q = ws.query_params
            argv = shell_argv(q.get("rows"), q.get("cols"), q.get("term"))
            await run_in_threadpool(service.require_running, ref)  # session_not_running: 409
        except HangarError as exc:
            await _deny(ws, exc)
            return
        await ws.accept()
        keys: queue.Queue[bytes | None] = queue.Queue()
        ended = anyio.Event()
        token = anyio.lowlevel.current_token()
        screen = cast(BinaryIO, _Screen(ws, token))
        close: list[tuple[int, str]] = []

        def stdin() -> Iterator[bytes]:
            while (chunk := keys.get()) is not None:
                yield chunk

        def run() -> None:
            try:
                code = service.exec(ref, argv, stdin=stdin(), stdout=screen, stderr=screen)
                close.append((1000, f"exit {code}"))
            except ClientGone:
                close.append((1000, "client gone"))
            except HangarError as exc:
                close.append((1011, f"{exc.code}: {exc.message}"))
            except Exception:  # the shell thread's top level
                logger.exception("terminal in session %s failed", ref)
                close.append((1011, "internal: the terminal failed; see the server's log"))
            finally:
                try:
                    anyio.from_thread.run_sync(ended.set, token=token)
                except RuntimeError:
                    pass  # the server is stopping

        async def forward_keys() -> None:
            try:
                while True:
                    message = await ws.receive()
                    if message["type"] == "websocket.disconnect":
                        return
                    data = message.get("bytes") or (message.get("text") or "").encode()
                    if data:
                        keys.put(data)
            finally:
                keys.put(None)  # end of input: the shell ends

        threading.Thread(target=run, name="hangar-terminal", daemon=True).start()
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(forward_keys)
            await ended.wait()
            tasks.cancel_scope.cancel()
        if ws.client_state is WebSocketState.CONNECTED:
            code, reason = close[0] if close else (1011, "internal: no exit status")
            try:
                await ws.close(code=code, reason=_reason(reason))
            except (WebSocketDisconnect, RuntimeError, OSError):
                pass  # the client left meanwhile

    return WebSocketRoute(PATH, terminal)
