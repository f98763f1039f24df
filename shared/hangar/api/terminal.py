"""The interactive terminal: a websocket to a shell in the session's repo folder.

The shell runs under ``script`` (util-linux) inside the sandbox, which gives it a pseudo
terminal. Binary frames carry raw bytes both ways; the socket closes when the shell ends, with
its exit status in the close reason. The token comes in the Authorization header or as
``?token=``. An open terminal holds a shell lease: the session is in use while it lasts.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Iterator

import anyio
from anyio.from_thread import BlockingPortal
from starlette.routing import WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect

from hangar.api.auth import authenticate
from hangar.errors import HangarError
from hangar.runtime import Runtime

logger = logging.getLogger(__name__)

SHELL = ["script", "-qfc", "bash -i", "/dev/null"]


def terminal_route(runtime: Runtime) -> WebSocketRoute:
    service = runtime.sessions

    async def terminal(ws: WebSocket) -> None:
        token = ws.headers.get("authorization") or (
            f"Bearer {ws.query_params['token']}" if "token" in ws.query_params else None
        )
        ref = str(ws.path_params["ref"])
        try:
            await anyio.to_thread.run_sync(authenticate, runtime.db, token)
            await anyio.to_thread.run_sync(service.resolve, ref)
        except HangarError as exc:
            await ws.close(code=4000 + exc.status, reason=f"{exc.code}: {exc.message}"[:120])
            return
        await ws.accept()
        keys: queue.Queue[bytes | None] = queue.Queue()

        def stdin() -> Iterator[bytes]:
            while (chunk := keys.get()) is not None:
                yield chunk

        async with BlockingPortal() as portal:

            class Screen:
                def write(self, data: bytes) -> int:
                    portal.call(ws.send_bytes, data)
                    return len(data)

            result: dict[str, object] = {}

            def run() -> None:
                try:
                    result["exit"] = service.exec(ref, SHELL, stdin=stdin(), stdout=Screen(),  # type: ignore[arg-type]
                                                  stderr=Screen())  # type: ignore[arg-type]  # fmt: skip
                except HangarError as exc:
                    result["error"] = f"{exc.code}: {exc.message}"
                except Exception:  # the shell's thread: report and end the socket
                    logger.exception("terminal for %s failed", ref)
                    result["error"] = "internal: the terminal failed"
                finally:
                    portal.start_task_soon(ws.close, 1000, _reason(result))

            shell = threading.Thread(target=run, daemon=True)
            shell.start()
            try:
                while True:
                    message = await ws.receive()
                    if message["type"] == "websocket.disconnect":
                        break
                    data = message.get("bytes") or (message.get("text") or "").encode()
                    keys.put(data)
            except WebSocketDisconnect:
                pass
            finally:
                keys.put(None)
                await anyio.to_thread.run_sync(shell.join)

    return WebSocketRoute("/api/sessions/{ref}/terminal", terminal)


def _reason(result: dict[str, object]) -> str:
    if "error" in result:
        return str(result["error"])[:120]
    return f"exit {result.get('exit', 1)}"
