"""What the two Cloud Run functions run, so that ``functions/*/main.py`` only wire.

Both are ASGI (functions-framework ``--asgi``): the framework hands each request to an async
entry point as a Starlette ``Request``, and the entry point returns what answers it.

- :class:`ApiFunction`: the REST API, the same Starlette app ``hangar serve`` serves, over a
  :class:`~hangar.runtime.Runtime` built once per instance from the environment. No ticker
  runs in it: due ticks arrive at the ticks function. The framework runs no lifespan, so the
  app's lifespan is entered by hand on the first request (where the MCP endpoint's session
  manager will start) and left when the instance shuts down.
- :class:`TicksFunction`: the receiver of Cloud Tasks' HTTP tasks. It hands the body to the
  ticks backend's ``receive``, which re-reads the due-time from the db and runs the session
  service's handler only for a tick that is really due (BRIEF invariant 8: a forged tick costs
  a state check). Who may call it is Cloud Run IAM's business (Terraform).

Import cost matters here (a cold start pays it): this module imports only the standard library
at import time; each function imports what it uses when its first request arrives. ``make
package`` ships hangar's bytecode for the functions' pinned Python; a function run by another
version compiles hangar's source on every cold start, and says so in a warning
(:func:`compiled_for_another_python`).
"""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import os
from collections.abc import Awaitable, Callable, Mapping, MutableMapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from starlette.requests import Request
    from starlette.responses import Response
    from starlette.types import ASGIApp

    from hangar.runtime import Runtime

logger = logging.getLogger(__name__)

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]


def compiled_for_another_python() -> bool:
    """Whether hangar's modules lack bytecode for this interpreter, so that importing them
    compiles their source; logs a warning naming the fix when they do. Asked before
    ``hangar.config`` is imported, whose bytecode stands for the package's: on a fresh instance
    it is there only if the archive shipped it."""
    config = os.path.join(os.path.dirname(__file__), "config.py")
    if os.path.exists(importlib.util.cache_from_source(config)):
        return False
    logger.warning("hangar has no bytecode for this Python (%s): every cold start compiles its "
                   "source; build the archive for this runtime (make package, which compiles "
                   "for Terraform's runtime)", importlib.util.cache_from_source(config))
    return True


class _Forward:
    """An ASGI callable the framework treats as the response: it hands the request, unread,
    to ``app`` (path, headers, body and streaming responses included)."""

    def __init__(self, app: ASGIApp) -> None:
        self._app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self._app(scope, receive, send)


class ApiFunction:
    """The api function: ``await function(request)`` answers one request."""

    def __init__(self, runtime: Runtime) -> None:
        from hangar.server.app import create_app

        self.runtime = runtime
        self.app = create_app(runtime)
        self._lifespan: contextlib.AsyncExitStack | None = None

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> ApiFunction:
        """Build the settings from ``env`` and open the backends they name (lazily: nothing is
        contacted before the first call that needs it)."""
        compiled_for_another_python()
        from hangar.config import Settings
        from hangar.runtime import Runtime

        return cls(Runtime(Settings.from_env(env), sandboxes_on_first_use=True))

    async def __call__(self, request: Request) -> _Forward:
        if self._lifespan is None:
            stack = contextlib.AsyncExitStack()
            await stack.enter_async_context(self.app.router.lifespan_context(self.app))
            self._lifespan = stack
        return _Forward(self.app)

    async def aclose(self) -> None:
        """Leave the app's lifespan and close the runtime (instance shutdown, tests)."""
        if self._lifespan is not None:
            await self._lifespan.aclose()
            self._lifespan = None
        self.runtime.close()


class TicksFunction:
    """The ticks function: ``await function(request)`` delivers one tick."""

    def __init__(self, runtime: Runtime) -> None:
        receiver = runtime.ticks.receiver
        if receiver is None:
            from hangar.errors import InvalidSettings

            raise InvalidSettings(
                "the ticks function needs Cloud Tasks ticks: set HANGAR_TICKS to "
                "cloudtasks://projects/P/locations/L/queues/Q",
                setting="HANGAR_TICKS",
            )
        self.runtime = runtime
        self.receiver = receiver

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> TicksFunction:
        compiled_for_another_python()
        from hangar.config import Settings
        from hangar.runtime import Runtime

        return cls(Runtime(Settings.from_env(env), sandboxes_on_first_use=True))

    async def __call__(self, request: Request) -> Response:
        from starlette.concurrency import run_in_threadpool
        from starlette.responses import Response

        if request.method != "POST":
            return Response("ticks are POSTed by Cloud Tasks\n", status_code=405,
                            headers={"Allow": "POST"})  # fmt: skip
        body = await request.body()
        receipt = await run_in_threadpool(
            self.receiver.receive, body, self.runtime.sessions.handle_tick
        )
        return Response(f"{receipt.outcome}\n", status_code=receipt.status,
                        media_type="text/plain")  # fmt: skip

    async def aclose(self) -> None:
        self.runtime.close()
