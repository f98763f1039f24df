"""``/api/envs``: environments. Secret values go in and never come out: views list secrets
(and variables) by name only."""

from __future__ import annotations

from typing import TYPE_CHECKING

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response

from hangar.api import schemas as s
from hangar.api.routes import Endpoint, param, parse, reply

if TYPE_CHECKING:
    from hangar.runtime import Runtime


async def list_all(runtime: Runtime, request: Request) -> Response:
    envs = await run_in_threadpool(runtime.sessions.environments.list)
    return reply([s.EnvironmentView.of(e) for e in envs])


async def create(runtime: Runtime, request: Request) -> Response:
    body = await parse(request, s.NewEnvironment)
    env = await run_in_threadpool(
        lambda: runtime.sessions.environments.add(
            body.name, body.repo, branch=body.branch, setup=body.setup, vars=body.vars,
            secrets=body.secrets, host_ports=body.host_ports,
        )  # fmt: skip
    )
    return reply(s.EnvironmentView.of(env), 201)


async def delete(runtime: Runtime, request: Request) -> Response:
    await run_in_threadpool(runtime.sessions.environments.delete, param(request, "name"))
    return Response(status_code=204)


ENDPOINTS = [
    Endpoint("GET", "/api/envs", "List environments (names of vars and secrets, no values)",
             list_all, response=s.EnvironmentView, many=True),
    Endpoint("POST", "/api/envs", "Add an environment; its repo must answer git ls-remote, or "
             "nothing is created", create, s.NewEnvironment, s.EnvironmentView, status=201),
    Endpoint("DELETE", "/api/envs/{name}", "Delete an environment", delete, status=204),
]  # fmt: skip
