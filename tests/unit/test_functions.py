"""The Cloud Run functions' wiring (hangar.functions), without the framework: the api function
hands requests to the REST app and runs the app's lifespan once; the ticks function refuses
settings whose ticks do not arrive over HTTP. (tests/functions runs both for real.)"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import httpx
import pytest
from starlette.applications import Starlette

from hangar.config import Settings
from hangar.errors import InvalidSettings
from hangar.functions import ApiFunction, TicksFunction
from hangar.runtime import Runtime


def _framework(function: ApiFunction) -> Starlette:
    """What functions-framework does with an ASGI target: every path to one async endpoint."""
    from starlette.routing import Route

    async def endpoint(request):  # type: ignore[no-untyped-def]
        return await function(request)

    methods = ["GET", "POST", "DELETE"]
    return Starlette(routes=[Route("/", endpoint, methods=methods),
                             Route("/{path:path}", endpoint, methods=methods)])  # fmt: skip


def test_the_api_function_serves_the_rest_app_and_enters_its_lifespan_once(
    tmp_path: Path,
) -> None:
    function = ApiFunction(Runtime(Settings.build(data_dir=tmp_path)))
    events: list[str] = []

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        events.append("enter")
        yield
        events.append("exit")

    function.app.router.lifespan_context = lifespan

    async def scenario() -> None:
        transport = httpx.ASGITransport(app=_framework(function))
        async with httpx.AsyncClient(transport=transport, base_url="http://fn") as client:
            spec = await client.get("/api/openapi.json")
            assert spec.status_code == 200 and "/api/sessions" in spec.json()["paths"]
            denied = await client.get("/api/sessions")
            assert denied.status_code == 401
            assert denied.json()["error"]["code"] == "unauthorized"
            missing = await client.post("/ticks", content=b"{}")
            assert missing.status_code == 404  # the api function takes no ticks
        assert events == ["enter"]
        await function.aclose()
        assert events == ["enter", "exit"]

    anyio.run(scenario)


def test_the_ticks_function_needs_cloud_tasks_ticks(tmp_path: Path) -> None:
    runtime = Runtime(Settings.build(data_dir=tmp_path))
    try:
        with pytest.raises(InvalidSettings, match="HANGAR_TICKS") as info:
            TicksFunction(runtime)
        assert info.value.data["setting"] == "HANGAR_TICKS"
    finally:
        runtime.close()
