"""The caps of what a client may hold, through the REST API (and MCP) over a real runtime:
sandboxes (``HANGAR_MAX_SANDBOXES``: a start past it is 503 ``capacity_exhausted`` with
``Retry-After``, nothing made) and uploads (``HANGAR_EXCHANGE_MAX_OPEN_UPLOADS`` per token: 429
``too_many_uploads``; a part past the upload's ``max_bytes`` is 413 and stores nothing)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from starlette.testclient import TestClient

from hangar.operations.auth import secret_hash
from hangar.config import Settings
from hangar.mcp.server import HangarMcp
from hangar.models import Token
from hangar.runtime import Runtime
from tests.api.conftest import add_env, new_session, settle, standin_harnesses, wait_turn

pytestmark = pytest.mark.sandbox


@pytest.fixture
def runtime(tmp_path: Path) -> Iterator[Runtime]:
    """The API's runtime (the ``api`` fixture serves it) with one sandbox place, two uploads a
    token, and uploads in parts of 1 MiB with patches of at most 1.5 MiB."""
    if shutil.which("bwrap") is None:
        pytest.fail("bubblewrap (bwrap) is not installed: run `make install`", pytrace=False)
    settings = Settings.build(
        data_dir=tmp_path / "data", harness_dir=standin_harnesses(tmp_path / "harnesses"),
        max_sandboxes=1, exchange_max_open_uploads=2, exchange_upload_part_mb=1,
        exchange_max_patch_mb=1.5,
    )  # fmt: skip
    runtime = Runtime(settings)
    runtime.start()
    yield runtime
    runtime.close()
    for info in runtime.sandboxes.list():
        runtime.sandboxes.destroy(info.id, hooks=False)


def refused(response: Any, status: int, code: str) -> dict[str, Any]:
    assert (response.status_code, response.json()["error"]["code"]) == (status, code), (
        response.text)  # fmt: skip
    error: dict[str, Any] = response.json()["error"]
    assert response.headers["retry-after"] == str(error["retry_after"])
    return error


def test_a_start_past_the_sandbox_cap_is_refused_at_once_with_nothing_made_until_one_suspends(
    api: TestClient, runtime: Runtime, remote: Path
) -> None:
    add_env(api, remote)
    new_session(api, "first", "run: echo one > one.txt")
    assert wait_turn(api, "first", 1)["outcome"] == "exited"

    body = {"name": "second", "message": "hi", "env": "app", "harness": "antigravity",
            "context": [{"kind": "text", "content": "notes"}]}  # fmt: skip
    error = refused(api.post("/api/sessions", json=body), 503, "capacity_exhausted")
    assert (error["limit"], error["taken"], error["retry_after"]) == (1, 1, 60)
    assert "HANGAR_MAX_SANDBOXES" in error["message"]
    assert api.get("/api/sessions/second").json()["error"]["code"] == "session_not_found"
    assert [s["name"] for s in api.get("/api/sessions").json()["sessions"]] == ["first"]
    assert not [k for k in runtime.blobs.list("sessions/") if "/context/" in k]  # none sealed
    refused(api.post("/api/sessions/first/fork", json={"n": 1}), 503, "capacity_exhausted")
    assert len(runtime.sandboxes.list()) == 1

    called = anyio.run(HangarMcp(runtime).call_tool, "new_session",
                       {k: v for k, v in body.items() if k != "context"})  # fmt: skip
    assert called.is_error and called.structured_content is None
    assert called.content[0].text.endswith("(capacity_exhausted)")  # type: ignore[union-attr]

    assert api.post("/api/sessions/first/suspend").json()["state"] == "suspended"
    new_session(api, "second", "run: echo two > two.txt")
    assert wait_turn(api, "second", 1)["outcome"] == "exited"

    # the suspended one needs a sandbox to go on: refused, and left as it was
    sent = api.post("/api/sessions/first/send", json={"message": "more"})
    refused(sent, 503, "capacity_exhausted")
    refused(api.post("/api/sessions/first/open"), 503, "capacity_exhausted")
    first = api.get("/api/sessions/first").json()
    assert (first["state"], len(first["turns"])) == ("suspended", 1)
    assert api.post("/api/sessions/second/suspend").json()["state"] == "suspended"
    assert api.post("/api/sessions/first/open").status_code in (200, 202)
    assert settle(api, "first")["state"] == "idle"


def test_a_token_holds_at_most_its_cap_of_uploads_and_no_part_passes_max_bytes(
    api: TestClient, runtime: Runtime
) -> None:
    made = [api.post("/api/uploads", json={"kind": "patch"}) for _ in range(2)]
    assert [m.status_code for m in made] == [201, 201]
    error = refused(api.post("/api/uploads", json={"kind": "bundle"}), 429, "too_many_uploads")
    assert error["limit"] == 2 and 3500 < error["retry_after"] <= 3600
    assert len([k for k in runtime.blobs.list("uploads/") if k.endswith("meta.json")]) == 2

    runtime.db.create_token(Token(secret_hash=secret_hash("another-one"), scopes=["admin"]))
    other = api.post("/api/uploads", json={"kind": "patch"},
                     headers={"Authorization": "Bearer another-one"})  # fmt: skip
    assert other.status_code == 201, other.text  # each token has its own places

    upload = made[0].json()
    assert (upload["part_mb"], upload["max_bytes"]) == (1, 3 * 2**19)
    part = f"/api/uploads/{upload['upload_id']}/parts"
    too_far = api.put(f"{part}/2", content=b"x" * (2**19 + 1))  # part 2 may carry 0.5 MiB
    assert (too_far.status_code, too_far.json()["error"]["code"]) == (413, "payload_too_large")
    assert too_far.json()["error"]["limit"] == 2**19
    assert runtime.blobs.list(f"uploads/{upload['upload_id']}/parts/") == []
    assert api.put(f"{part}/2", content=b"x" * 2**19).json()["size"] == 2**19
