"""``/mcp`` in hangar's Starlette app: the bearer-token check, then the SDK's streamable HTTP
transport, built and started on the first request.

:class:`McpEndpoint` is an ASGI callable (a route that takes every method). It answers 401 or
403 exactly as REST does before anything of the SDK runs, and 405 to GET (a stateless server
keeps no stream open to listen on). A ``tools/list`` the SDK has answered alike twice is answered
from its bytes (:mod:`.replay`). The first authorised request imports the SDK, builds the
server and starts its session manager in a task of its own (:class:`_Runner`): the manager's
task group must outlive the request that started it, and neither the api function's framework
nor a test app runs a lifespan for it. :meth:`McpEndpoint.aclose` stops it (the app's
lifespan calls it at shutdown). This module imports nothing of the SDK.
"""

from __future__ import annotations

import asyncio
import contextvars
from typing import TYPE_CHECKING, Any

from starlette.concurrency import run_in_threadpool
from starlette.responses import JSONResponse, Response
from starlette.types import Receive, Scope, Send

from hangar.operations.auth import authenticate, challenge
from hangar.errors import HangarError
from hangar.mcp.replay import Replay

if TYPE_CHECKING:
    from hangar.runtime import Runtime

PATH = "/mcp"


class _Runner:
    """Owns the session manager's ``run()`` in a task of its own, from the first request on."""

    def __init__(self, manager: Any) -> None:
        self.manager = manager
        self.task: asyncio.Task[None] | None = None
        self.ready = asyncio.Event()
        self.stopping = asyncio.Event()

    async def _run(self) -> None:
        async with self.manager.run():
            self.ready.set()
            await self.stopping.wait()

    async def start(self) -> None:
        if self.task is None:  # run() may be entered once per manager: never twice
            self.task = asyncio.get_running_loop().create_task(
                self._run(), context=contextvars.Context())  # fmt: skip
        ready = asyncio.ensure_future(self.ready.wait())
        await asyncio.wait({ready, self.task}, return_when=asyncio.FIRST_COMPLETED)
        if not self.ready.is_set():
            ready.cancel()
            self.task.result()  # raises why run() ended

    async def stop(self) -> None:
        if self.task is not None:
            self.stopping.set()
            await self.task


class McpEndpoint:
    """The ASGI app at ``/mcp`` over ``runtime`` (see the module doc)."""

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        self._manager: Any = None
        self._runner: _Runner | None = None
        self._lock = asyncio.Lock()
        self._replay = Replay()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = dict(scope.get("headers") or [])
        header = headers.get(b"authorization", b"").decode(errors="replace")
        try:
            await run_in_threadpool(authenticate, self.runtime.db, header)
        except HangarError as exc:
            await JSONResponse(exc.to_dict(), status_code=exc.status,
                               headers=challenge(exc) or None)(scope, receive, send)  # fmt: skip
            return
        if scope["method"] != "POST":
            await Response("MCP here is stateless streamable HTTP: POST requests only\n",
                           status_code=405, headers={"Allow": "POST"})(scope, receive, send)  # fmt: skip
            return
        manager = await self._started()
        await self._replay(scope, receive, send, manager.handle_request)

    async def _started(self) -> Any:
        async with self._lock:
            if self._runner is None:
                from mcp.server.transport_security import TransportSecuritySettings

                from hangar.mcp.server import HangarMcp

                server = HangarMcp(self.runtime)
                # Every caller shows a bearer token (no ambient credential a rebinding page
                # could borrow), and the host it is reached by is Cloud Run's to choose.
                server.streamable_http_app(
                    stateless_http=True, json_response=False,
                    transport_security=TransportSecuritySettings(
                        enable_dns_rebinding_protection=False),
                )  # fmt: skip
                self._manager = server.session_manager
                self._runner = _Runner(self._manager)
            await self._runner.start()
        return self._manager

    async def aclose(self) -> None:
        """Stop the session manager (calls in flight are cut off)."""
        if self._runner is not None:
            await self._runner.stop()
