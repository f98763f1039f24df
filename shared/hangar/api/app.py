"""The REST API's routes (BRIEF §4): the route table over the runtime's session service, each
route behind the bearer-token check, and the OpenAPI document built from the same table.

Every route needs a bearer token with the admin scope, except the OpenAPI document at
``/api/openapi.json`` and the terminal's websocket (its ticket is the credential). Errors are
``{"error": {"code", "message", ...}}`` with the error's HTTP status; anything unexpected is a
500 ``internal`` whose details go to the log, never to the client. Service calls block, so they
run in the thread pool (or, when they stream, in a thread of their own); the event loop never
waits on them. The server (:mod:`hangar.server.app`) serves these routes beside MCP's.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from hangar.api import envs, openapi, sandboxes, sessions, uploads
from hangar.api.routes import Endpoint, Handler
from hangar.api.terminal import ENDPOINTS as TERMINAL_ENDPOINTS, terminal_route
from hangar.errors import HangarError
from hangar.operations.auth import authenticate, challenge
from hangar.runtime import Runtime

logger = logging.getLogger(__name__)

ENDPOINTS: list[Endpoint] = [*sessions.ENDPOINTS, *TERMINAL_ENDPOINTS, *uploads.ENDPOINTS,
                             *envs.ENDPOINTS, *sandboxes.ENDPOINTS]  # fmt: skip
"""Every HTTP route but the OpenAPI document's, in the order the document lists them."""


def error_response(exc: HangarError) -> JSONResponse:
    """The error's body and status; ``Retry-After`` too when it says when to try again."""
    wait = exc.retry_after
    headers = challenge(exc) if wait is None else {"Retry-After": str(wait)}
    return JSONResponse(exc.to_dict(), status_code=exc.status, headers=headers or None)


def routes(runtime: Runtime) -> list[BaseRoute]:
    """The REST API's routes over ``runtime``: the OpenAPI document, every endpoint of
    :data:`ENDPOINTS` behind the token check, and the terminal's websocket."""

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

    spec: dict[str, Any] = {}

    async def openapi_json(request: Request) -> Response:
        # Built on the first request for it, not with the app: every model's JSON Schema is
        # a sixth of a cold function's build, and a function's first request rarely wants it.
        if not spec:
            spec.update(openapi.document(ENDPOINTS))
        return JSONResponse(spec)

    routes: list[BaseRoute] = [Route("/api/openapi.json", openapi_json, methods=["GET"])]
    routes += [Route(e.path, guarded(e.handler), methods=[e.method]) for e in ENDPOINTS]
    routes.append(terminal_route(runtime))
    return routes
