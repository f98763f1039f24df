"""The REST API (BRIEF §4, wave 1): a Starlette app over the runtime's session service.

MCP is served at ``/mcp`` (:mod:`hangar.mcp`), behind the same token check, and the
dashboard's page at ``/`` (:mod:`hangar.dashboard`), which signs in with a token. Every route needs
a bearer token with the admin scope, except the OpenAPI document at
``/api/openapi.json``, the dashboard's static page and assets and, when asked for, ``POST /ticks`` (see :mod:`hangar.api.ticks`). Errors are ``{"error": {"code", "message", ...}}`` with the error's HTTP
status; bodies over ``HANGAR_MAX_BODY_MB`` are refused before they are read (413); anything unexpected is a 500 ``internal`` whose details go to the log, never to the
client. Service calls block, so they run in the thread pool (or, when they stream, in a thread
of their own); the event loop never waits on them.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.middleware import Middleware
from starlette.routing import BaseRoute, Route

from hangar import dashboard
from hangar.api import envs, openapi, sandboxes, sessions, uploads
from hangar.api.auth import authenticate, challenge
from hangar.api.limits import BodyLimit
from hangar.api.routes import Endpoint, Handler
from hangar.api.terminal import ENDPOINTS as TERMINAL_ENDPOINTS, terminal_route
from hangar.api.ticks import tick_route
from hangar.errors import HangarError
from hangar.mcp.endpoint import PATH as MCP_PATH, McpEndpoint
from hangar.runtime import Runtime

logger = logging.getLogger(__name__)

ENDPOINTS: list[Endpoint] = [*sessions.ENDPOINTS, *TERMINAL_ENDPOINTS, *uploads.ENDPOINTS,
                             *envs.ENDPOINTS, *sandboxes.ENDPOINTS]  # fmt: skip
"""Every HTTP route but the OpenAPI document's, in the order the document lists them."""

_HTTP_CODES = {404: "not_found", 405: "method_not_allowed"}


def error_response(exc: HangarError) -> JSONResponse:
    """The error's body and status; ``Retry-After`` too when it says when to try again."""
    wait = exc.retry_after
    headers = challenge(exc) if wait is None else {"Retry-After": str(wait)}
    return JSONResponse(exc.to_dict(), status_code=exc.status, headers=headers or None)


def create_app(runtime: Runtime, *, receive_ticks: bool = False) -> Starlette:
    """The ASGI app over ``runtime``. The caller owns the runtime: it starts the ticker and
    closes it; the app only uses it. ``receive_ticks`` adds ``POST /ticks`` where the ticks
    backend delivers over HTTP (``hangar serve`` posting Cloud Tasks ticks to itself)."""

    def guarded(handler: Handler) -> Callable[[Request], Awaitable[Response]]:
        async def endpoint(request: Request) -> Response:
            try:
                header = request.headers.get("authorization")
                token = await run_in_threadpool(authenticate, runtime.db, header)
                request.state.token = token  # who asks, for what is counted per token
                return await handler(runtime, request)
            except HangarError as exc:
                return error_response(exc)
            except Exception:  # the top-level handler: log it, tell the client nothing more
                logger.exception("unexpected error in %s %s", request.method, request.url.path)
                body = {"error": {"code": "internal", "message": "internal error; see the log"}}
                return JSONResponse(body, status_code=500)

        return endpoint

    spec = openapi.document(ENDPOINTS)

    async def openapi_json(request: Request) -> Response:
        return JSONResponse(spec)

    async def http_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        code = _HTTP_CODES.get(exc.status_code, "http_error")
        message = f"{request.method} {request.url.path}: {exc.detail}"
        return JSONResponse({"error": {"code": code, "message": message}},
                            status_code=exc.status_code, headers=exc.headers)  # fmt: skip

    routes: list[BaseRoute] = [Route("/api/openapi.json", openapi_json, methods=["GET"])]
    routes += [Route(e.path, guarded(e.handler), methods=[e.method]) for e in ENDPOINTS]
    routes.append(terminal_route(runtime))
    mcp = McpEndpoint(runtime)
    routes.append(Route(MCP_PATH, mcp))
    routes += dashboard.routes()
    ticks = tick_route(runtime) if receive_ticks else None
    if ticks is not None:
        routes.append(ticks)
    limit = int(runtime.settings.max_body_mb * 2**20)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        yield
        await mcp.aclose()

    return Starlette(routes=routes, exception_handlers={HTTPException: http_error},
                     middleware=[Middleware(BodyLimit, max_bytes=limit)],
                     lifespan=lifespan)  # fmt: skip
