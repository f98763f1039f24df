"""``/api/envs``: environments. Secret values go in and never come out: views list secrets
(and variables) by name only."""

from __future__ import annotations

from typing import TYPE_CHECKING

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response

from hangar.operations import environments as ops, wire as s
from hangar.api.routes import Endpoint, Query, flag, param, parse, reply

if TYPE_CHECKING:
    from hangar.runtime import Runtime


async def list_all(runtime: Runtime, request: Request) -> Response:
    return reply(await run_in_threadpool(ops.list_all, runtime))


async def create(runtime: Runtime, request: Request) -> Response:
    body = await parse(request, s.NewEnvironment)
    return reply(await run_in_threadpool(ops.add, runtime, body), 201)


async def get(runtime: Runtime, request: Request) -> Response:
    return reply(await run_in_threadpool(ops.get, runtime, param(request, "name")))


async def update(runtime: Runtime, request: Request) -> Response:
    name = param(request, "name")
    body = await parse(request, s.EnvironmentPatch)
    return reply(await run_in_threadpool(ops.update, runtime, name, body))


async def delete(runtime: Runtime, request: Request) -> Response:
    name, force = param(request, "name"), flag(request, "force")
    await run_in_threadpool(lambda: ops.delete(runtime, name, force=force))
    return Response(status_code=204)


ENDPOINTS = [
    Endpoint("GET", "/api/envs", "List environments (names of vars and secrets, no values)",
             list_all, response=s.EnvironmentView, many=True),
    Endpoint("POST", "/api/envs", "Add an environment; its repo must answer git ls-remote, or "
             "nothing is created", create, s.NewEnvironment, s.EnvironmentView, status=201),
    Endpoint("GET", "/api/envs/{name}", "An environment (names of vars and secrets, no "
             "values)", get, response=s.EnvironmentView),
    Endpoint("PATCH", "/api/envs/{name}", "Change the fields given (vars and secrets given "
             "are added or replaced, unset removes them by name); the next turn sees new vars "
             "and secrets, the next sandbox a new branch, setup or host ports", update,
             s.EnvironmentPatch, s.EnvironmentView),
    Endpoint("DELETE", "/api/envs/{name}", "Delete an environment; 409 environment_in_use "
             "while sessions use it, unless force", delete, status=204,
             query=[Query("force", "boolean", "delete it even though sessions use it")]),
]  # fmt: skip
