"""The ASGI app ``hangar serve`` and the api function serve: the REST API's routes
(:mod:`hangar.api`), MCP at ``/mcp`` (:mod:`hangar.mcp`), behind the same token check, the
dashboard's page at ``/`` (:mod:`hangar.dashboard`), which signs in with a token, and, when asked
for, ``POST /ticks`` (see :mod:`hangar.api.ticks`).

Bodies over ``HANGAR_MAX_BODY_MB`` are refused before they are read (413); a path or method no
route takes is a JSON error like every other (404 ``not_found``, 405 ``method_not_allowed``).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from hangar import dashboard
from hangar.api import app as rest
from hangar.api.ticks import tick_route
from hangar.mcp.endpoint import PATH as MCP_PATH, McpEndpoint
from hangar.operations.limits import BodyLimit
from hangar.runtime import Runtime

_HTTP_CODES = {404: "not_found", 405: "method_not_allowed"}


def create_app(runtime: Runtime, *, receive_ticks: bool = False) -> Starlette:
    """The ASGI app over ``runtime``. The caller owns the runtime: it starts the ticker and
    closes it; the app only uses it. ``receive_ticks`` adds ``POST /ticks`` where the ticks
    backend delivers over HTTP (``hangar serve`` posting Cloud Tasks ticks to itself)."""

    async def http_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        code = _HTTP_CODES.get(exc.status_code, "http_error")
        message = f"{request.method} {request.url.path}: {exc.detail}"
        return JSONResponse({"error": {"code": code, "message": message}},
                            status_code=exc.status_code, headers=exc.headers)  # fmt: skip

    routes: list[BaseRoute] = rest.routes(runtime)
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
