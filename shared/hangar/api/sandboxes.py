"""``/api/sandboxes``: the live sandboxes, and destroying one by hand. A destroy goes through
the pre-destroy hook like every other: the session using the sandbox is checkpointed (reason
``destroy``) and becomes SUSPENDED, and resumes like any other. When that checkpoint fails the
sandbox is kept (409 ``destroy_vetoed``) unless ``?force=true``: the caller's choice to lose the
work since the last good checkpoint."""

from __future__ import annotations

from typing import TYPE_CHECKING

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response

from hangar.operations import wire as s
from hangar.api.routes import Endpoint, flag, param, reply
from hangar.sessions.sandbox import SESSION_LABEL

if TYPE_CHECKING:
    from hangar.runtime import Runtime


async def list_all(runtime: Runtime, request: Request) -> Response:
    def views() -> list[s.SandboxView]:
        boxes = runtime.sandboxes.list()
        owners = {info.labels.get(SESSION_LABEL) for info in boxes} - {None}
        names = runtime.sessions.names_of(sorted(o for o in owners if o))
        return [s.SandboxView.of(info, names) for info in boxes]

    return reply(await run_in_threadpool(views))


async def destroy(runtime: Runtime, request: Request) -> Response:
    sandbox_id = param(request, "id")
    force = flag(request, "force")

    def run() -> None:
        runtime.sandboxes.get(sandbox_id)  # SandboxNotFound (404) for an unknown id
        runtime.sessions.destroy_sandbox(sandbox_id, force=force)

    await run_in_threadpool(run)
    return Response(status_code=204)


ENDPOINTS = [
    Endpoint("GET", "/api/sandboxes", "List live sandboxes, oldest first", list_all,
             response=s.SandboxView, many=True),
    Endpoint("DELETE", "/api/sandboxes/{id}", "Destroy a sandbox; its session is checkpointed "
             "first and suspended. A failed checkpoint keeps the sandbox (409 destroy_vetoed) "
             "unless ?force=true", destroy, status=204),
]  # fmt: skip
