"""The Cloud Run functions' wiring (hangar.functions), without the framework: the api function
hands requests to the REST app and runs the app's lifespan once; the ticks function refuses
settings whose ticks do not arrive over HTTP. (tests/functions runs both for real.)"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import cast

import anyio
import httpx
import pytest
from starlette.applications import Starlette

from hangar.config import Settings
from hangar.errors import InvalidSettings
from hangar.functions import ApiFunction, TicksFunction
from hangar.runtime import Runtime
from hangar.sandboxes import OnFirstUse, Sandboxes, SandboxInfo, SandboxSpec
from hangar.sandboxes.policy import SandboxPolicy


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


_COLD_BUILD = """
import json, os, sys
import anyio, httpx
import hangar.api.openapi as openapi
from hangar.functions import ApiFunction

built = []
document = openapi.document
openapi.document = lambda endpoints: built.append(1) or document(endpoints)
os.environ.update(json.loads(sys.argv[1]))
function = ApiFunction.from_env(os.environ)
seen = {"at_build": len(built), "modules": sorted(m for m in sys.modules if m.startswith("hangar"))}

async def twice():
    transport = httpx.ASGITransport(app=function.app)
    async with httpx.AsyncClient(transport=transport, base_url="http://fn") as client:
        for _ in range(2):
            assert (await client.get("/api/openapi.json")).json()["paths"]

anyio.run(twice)
seen["after_two_gets"] = len(built)
print(json.dumps(seen))
"""


def test_a_cold_api_function_builds_no_openapi_document_and_loads_no_local_sandbox_module(
    tmp_path: Path,
) -> None:
    cloud = {"HANGAR_DB": "firestore://bench/(default)", "HANGAR_SESSION_STORE": "gs://b/s",
             "HANGAR_KEYS": "gcpkms://projects/p/locations/global/keyRings/r/cryptoKeys/k",
             "HANGAR_TICKS": "cloudtasks://projects/p/locations/l/queues/q",
             "HANGAR_TICKS_URL": "http://127.0.0.1:9/", "HANGAR_DATA_DIR": str(tmp_path)}
    done = subprocess.run([sys.executable, "-c", _COLD_BUILD, json.dumps(cloud)],
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    seen = json.loads(done.stdout.splitlines()[-1])
    assert seen["at_build"] == 0 and seen["after_two_gets"] == 1  # on first request, once
    local = [m for m in seen["modules"] if m.startswith("hangar.sandboxes.")]
    # Neither the local backend nor its launcher, uid, network, disk parts: only the policy,
    # which is every backend's.
    assert local == ["hangar.sandboxes.policy"]
    assert "hangar.runtime" in seen["modules"] and "hangar.sandboxes" in seen["modules"]


class Recorded:
    """Sandboxes as records only: enough of the port to see what reaches the backend."""

    def __init__(self) -> None:
        self.boxes: dict[str, SandboxInfo] = {}

    def create(self, spec: SandboxSpec) -> SandboxInfo:
        info = SandboxInfo(id=f"sbx-{len(self.boxes)}", labels={}, created_at=datetime.now(UTC))
        self.boxes[info.id] = info
        return info

    def list(self, labels: object = None) -> list[SandboxInfo]:
        return list(self.boxes.values())

    def get(self, sandbox_id: str) -> SandboxInfo:
        return self.boxes[sandbox_id]

    def destroy(self, sandbox_id: str) -> None:
        del self.boxes[sandbox_id]


def test_a_sandbox_backend_opened_on_first_use_opens_once_under_a_policy_added_before() -> None:
    opened: list[Recorded] = []

    def opener() -> Sandboxes:
        opened.append(Recorded())
        return cast(Sandboxes, opened[-1])

    deferred = SandboxPolicy(OnFirstUse(opener))
    hook_calls: list[str] = []
    deferred.add_pre_destroy_hook(lambda info: hook_calls.append(info.id))
    assert opened == []
    info = deferred.create(SandboxSpec())
    assert [s.id for s in deferred.list()] == [info.id] and len(opened) == 1
    deferred.destroy(info.id)
    assert hook_calls == [info.id] and len(opened) == 1
