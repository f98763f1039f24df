"""The REST API over a real runtime (SQLite, blobs, key file, real sandboxes), driven with
Starlette's test client; the agent is the Antigravity stand-in, so no model is needed."""

from __future__ import annotations

import base64
import json
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from hangar.api.app import create_app
from hangar.api.auth import ensure_admin_token, secret_hash
from hangar.config import Settings
from hangar.models import Token
from hangar.runtime import Runtime

pytestmark = pytest.mark.sandbox

STANDIN = Path(__file__).parents[1] / "harness" / "agy_standin.py"
TURN = "run: echo one > one.txt && git add one.txt && git commit -qm one\nrun: echo note > n.txt"


@pytest.fixture
def runtime(tmp_path: Path) -> Iterator[Runtime]:
    harnesses = tmp_path / "harnesses"
    (harnesses / "bin").mkdir(parents=True)
    shutil.copy(STANDIN, harnesses / "bin" / "agy")
    (harnesses / "bin" / "agy").chmod(0o755)
    runtime = Runtime(Settings.build(data_dir=tmp_path / "data", harness_dir=harnesses))
    yield runtime
    runtime.close()
    for info in runtime.sandboxes.list():
        runtime.sandboxes.destroy(info.id, hooks=False)


@pytest.fixture
def api(runtime: Runtime, remote: Path) -> Iterator[TestClient]:
    token_file = runtime.settings.data_dir / "admin-token"
    ensure_admin_token(runtime.db, token_file)
    client = TestClient(create_app(runtime), raise_server_exceptions=False)
    client.headers["Authorization"] = f"Bearer {token_file.read_text().strip()}"
    yield client


def new_env(api: TestClient, remote: Path, **extra: Any) -> dict[str, Any]:
    body = {"name": "app", "repo": str(remote),
            "vars": {"GIT_AUTHOR_NAME": "A", "GIT_AUTHOR_EMAIL": "a@x",
                     "GIT_COMMITTER_NAME": "A", "GIT_COMMITTER_EMAIL": "a@x"},
            "secrets": {"API_TOKEN": "very-secret-value"}, **extra}  # fmt: skip
    response = api.post("/api/envs", json=body)
    assert response.status_code == 201, response.text
    return dict(response.json())


def wait_turn(api: TestClient, name: str, n: int) -> dict[str, Any]:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        turn = api.post(f"/api/sessions/{name}/wait", json={"turn": n, "timeout": 5}).json()
        if turn["finished_at"]:
            return dict(turn)
    raise AssertionError("the turn did not finish")


def test_calls_without_a_valid_admin_token_are_refused(api: TestClient, runtime: Runtime) -> None:
    bare = TestClient(api.app)
    assert bare.get("/api/sessions").json()["error"]["code"] == "unauthorized"
    assert bare.get("/api/sessions", headers={"Authorization": "Bearer nope"}).status_code == 401
    runtime.db.create_token(Token(secret_hash=secret_hash("reader"), scopes=["read"]))
    refused = bare.get("/api/sessions", headers={"Authorization": "Bearer reader"})
    assert (refused.status_code, refused.json()["error"]["code"]) == (403, "forbidden")
    assert bare.get("/api/openapi.json").status_code == 200


def test_the_openapi_document_lists_every_route_with_its_schemas(api: TestClient) -> None:
    spec = api.get("/api/openapi.json").json()
    assert spec["openapi"].startswith("3.1")
    paths = spec["paths"]
    for path, method in [
        ("/api/sessions", "post"), ("/api/sessions", "get"), ("/api/sessions/{ref}", "get"),
        ("/api/sessions/{ref}", "delete"), ("/api/sessions/{ref}/send", "post"),
        ("/api/sessions/{ref}/fork", "post"), ("/api/sessions/{ref}/exec", "post"),
        ("/api/sessions/{ref}/patch", "get"), ("/api/sessions/{ref}/log", "get"),
        ("/api/envs", "post"), ("/api/sandboxes", "get"), ("/api/sandboxes/{id}", "delete"),
    ]:  # fmt: skip
        assert method in paths[path], (path, method)
    assert "NewSession" in spec["components"]["schemas"]
    assert "SessionView" in spec["components"]["schemas"]


def test_bad_input_gets_one_clear_error_with_a_stable_code_and_changes_nothing(
    api: TestClient, remote: Path, tmp_path: Path
) -> None:
    new_env(api, remote)
    cases = [
        ({"name": "x", "message": "hi", "env": "nope", "harness": "antigravity"}, 404,
         "environment_not_found"),
        ({"name": "x", "message": "hi", "env": "app", "harness": "cursor"}, 400,
         "unknown_harness"),
        ({"name": "Bad Name", "message": "hi", "env": "app"}, 400, "invalid_name"),
        ({"name": "x", "env": "app"}, 400, "invalid_input"),
    ]  # fmt: skip
    for body, status, code in cases:
        response = api.post("/api/sessions", json=body)
        assert (response.status_code, response.json()["error"]["code"]) == (status, code), body
    assert api.get("/api/sessions").json() == []
    assert api.get("/api/sessions/nope").json()["error"]["code"] == "session_not_found"
    unreachable = api.post("/api/envs", json={"name": "ghost", "repo": str(tmp_path / "no.git")})
    assert (unreachable.status_code, unreachable.json()["error"]["code"]) == (400, "invalid_input")
    assert [e["name"] for e in api.get("/api/envs").json()] == ["app"]


def test_environments_never_show_secret_values(api: TestClient, remote: Path) -> None:
    created = new_env(api, remote)
    listed = api.get("/api/envs")
    assert created["secrets"] == ["API_TOKEN"] and "GIT_AUTHOR_NAME" in created["vars"]
    assert "very-secret-value" not in listed.text and "very-secret-value" not in json.dumps(created)


def test_a_whole_session_through_the_api(api: TestClient, remote: Path) -> None:
    new_env(api, remote)
    created = api.post("/api/sessions", json={"name": "demo", "message": TURN, "env": "app",
                                               "harness": "antigravity"})  # fmt: skip
    assert created.status_code == 201, created.text
    assert wait_turn(api, "demo", 1)["outcome"] == "exited"
    view = api.get("/api/sessions/demo").json()
    for field in ("id", "name", "title", "state", "harness", "model", "harness_session",
                  "sandbox_id", "repo", "branch", "idle_minutes", "needs_input",
                  "last_active_at", "turns", "checkpoints"):  # fmt: skip
        assert field in view, field
    assert view["state"] == "idle" and view["turns"][0]["outcome"] == "exited"
    assert view["checkpoints"][0]["reason"] == "turn"
    conversation = view["harness_session"]

    suspended = api.post("/api/sessions/demo/suspend").json()
    assert suspended["state"] == "suspended" and suspended["sandbox_id"] is None
    assert api.get("/api/sandboxes").json() == []

    sent = api.post("/api/sessions/demo/send", json={"message": "what now?"})
    assert sent.status_code == 202 and sent.json()["n"] == 2
    assert wait_turn(api, "demo", 2)["summary"].startswith("Seen 2 earlier messages")
    resumed = api.get("/api/sessions/demo").json()
    assert resumed["harness_session"] == conversation and resumed["sandbox_id"]

    listed = api.get("/api/sessions").json()
    assert listed[0]["name"] == "demo" and "turns" not in listed[0] or listed[0]["turns"] is None

    frames = [json.loads(line) for line in api.post(
        "/api/sessions/demo/exec",
        json={"argv": ["sh", "-c", "cat n.txt; cat >&2; exit 3"],
              "stdin": base64.b64encode(b"from stdin").decode()},
    ).iter_lines() if line]  # fmt: skip
    assert base64.b64decode(frames[0]["stdout"]) == b"note\n"
    assert b"from stdin" in b"".join(base64.b64decode(f["stderr"]) for f in frames if "stderr" in f)
    assert frames[-1] == {"exit": 3}

    patch = api.get("/api/sessions/demo/patch")
    assert patch.status_code == 200 and b"+note" in patch.content and b"one.txt" in patch.content
    assert b'"type": "init"' in api.get("/api/sessions/demo/log", params={"turn": 1}).content

    forks = api.post("/api/sessions/demo/fork", json={"n": 2})
    assert forks.status_code == 201 and [f["name"] for f in forks.json()] == [
        "demo-fork-1", "demo-fork-2"]  # fmt: skip

    sandbox = resumed["sandbox_id"]
    assert api.delete(f"/api/sandboxes/{sandbox}").status_code == 204
    taken = api.get("/api/sessions/demo").json()
    assert taken["state"] == "suspended" and taken["checkpoints"][-1]["reason"] == "destroy"

    assert api.delete("/api/sessions/demo").status_code == 204
    assert api.get("/api/sessions/demo").status_code == 404


def test_the_terminal_websocket_runs_a_shell_in_the_repo(api: TestClient, remote: Path) -> None:
    new_env(api, remote)
    api.post("/api/sessions", json={"name": "demo", "message": "hi", "env": "app",
                                     "harness": "antigravity"})  # fmt: skip
    wait_turn(api, "demo", 1)
    with api.websocket_connect("/api/sessions/demo/terminal") as ws:
        ws.send_bytes(b"echo marker-$((6*7)) && pwd; exit 5\n")
        seen = b""
        while b"marker-42" not in seen or b"/workspace/app" not in seen:
            seen += ws.receive_bytes()


def test_the_terminal_refuses_a_bad_token(api: TestClient) -> None:
    bare = TestClient(api.app)
    with pytest.raises(Exception):
        with bare.websocket_connect("/api/sessions/demo/terminal?token=nope") as ws:
            ws.receive_bytes()
