"""Tokens, scopes and errors: every failure is JSON with a stable code, and bad input changes
nothing."""

from __future__ import annotations

import re

from pathlib import Path

import pytest
from starlette.testclient import TestClient

from hangar import dashboard
from hangar.api.app import ENDPOINTS
from hangar.operations.auth import secret_hash
from hangar.models import Token
from hangar.runtime import Runtime
from tests.api.conftest import add_env, new_session, wait_turn


def test_calls_without_a_known_admin_token_are_refused(api: TestClient, runtime: Runtime) -> None:
    bare = TestClient(api.app)
    missing = bare.get("/api/sessions")
    assert (missing.status_code, missing.json()["error"]["code"]) == (401, "unauthorized")
    assert missing.headers["www-authenticate"] == 'Bearer realm="hangar"'
    assert "Authorization: Bearer TOKEN" in missing.json()["error"]["message"]
    wrong = bare.get("/api/envs", headers={"Authorization": "Bearer not-a-token"})
    assert (wrong.status_code, wrong.json()["error"]["code"]) == (401, "unauthorized")
    assert wrong.headers["www-authenticate"] == ('Bearer realm="hangar", error="invalid_token", '
                                                 'error_description="the token is unknown or '
                                                 'expired"')  # fmt: skip
    basic = bare.get("/api/envs", headers={"Authorization": "Basic YWRtaW46YWRtaW4="})
    assert basic.status_code == 401
    runtime.db.create_token(Token(secret_hash=secret_hash("reader-secret"), scopes=["read"]))
    for method, path in [("GET", "/api/sessions"), ("GET", "/api/envs"),
                         ("GET", "/api/sandboxes"), ("DELETE", "/api/sessions/x")]:  # fmt: skip
        refused = bare.request(method, path, headers={"Authorization": "Bearer reader-secret"})
        assert (refused.status_code, refused.json()["error"]["code"]) == (403, "forbidden")
        assert "www-authenticate" not in refused.headers
    assert bare.get("/api/openapi.json").status_code == 200


def documented(path: str) -> str:
    """A route's path as OpenAPI writes it (``{path:path}`` is ``{path}``)."""
    return re.sub(r"\{(\w+):\w+\}", r"{\1}", path)


def test_the_openapi_document_lists_every_route(api: TestClient) -> None:
    spec = api.get("/api/openapi.json").json()
    assert spec["openapi"] == "3.1.0"
    routes = {(documented(e.path), e.method.lower()) for e in ENDPOINTS}
    pages = {*dashboard.PAGES, "/favicon.ico", "/static"}  # the dashboard's, not the API
    served = {route.path for route in api.app.routes}  # type: ignore[attr-defined]
    assert pages <= served
    for route in api.app.routes:  # type: ignore[attr-defined]
        if route.path in pages:
            assert route.path not in spec["paths"]
            continue
        methods = getattr(route, "methods", None)
        if methods is None:  # an ASGI app (the terminal's websocket, MCP): documented somehow
            assert spec["paths"].get(route.path), route.path
        for method in methods or ():
            if method != "HEAD":
                routes.add((documented(route.path), method.lower()))
    assert len(routes) >= 23
    for path, method in routes:
        assert method in spec["paths"].get(path, {}), (path, method)
    assert "{path}" in str(spec["paths"]) and "path:path" not in str(spec["paths"])
    assert spec["paths"]["/mcp"]["post"]["summary"].startswith("MCP")
    schemas = spec["components"]["schemas"]
    for model in ("NewSession", "SessionView", "SessionSummary", "TurnView", "Exec",
                  "EnvironmentView", "SandboxView", "ErrorView"):  # fmt: skip
        assert model in schemas, model
    view = schemas["SessionView"]["properties"]
    assert {"turns", "checkpoints", "sandbox_id", "resume_hint"} <= set(view)
    assert "turns" not in schemas["SessionSummary"]["properties"]


def test_unknown_routes_and_methods_answer_json(api: TestClient) -> None:
    missing = api.get("/api/nothing-here")
    assert (missing.status_code, missing.json()["error"]["code"]) == (404, "not_found")
    wrong = api.put("/api/sessions")
    assert (wrong.status_code, wrong.json()["error"]["code"]) == (405, "method_not_allowed")


def test_an_unexpected_failure_is_a_500_that_leaks_nothing(
    api: TestClient, runtime: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    def explode(*args: object) -> None:
        raise RuntimeError("db password is hunter2")

    monkeypatch.setattr(runtime.sessions, "page", explode)
    response = api.get("/api/sessions")
    assert response.status_code == 500
    error = response.json()["error"]
    assert error == {"code": "internal", "message": "internal error; see the log"}
    assert "hunter2" not in response.text and "Traceback" not in response.text


def test_malformed_bodies_are_invalid_input(api: TestClient) -> None:
    for body in ({"name": "x", "env": "app"}, {"name": "x", "message": "m", "env": "app",
                                               "colour": "red"}):  # fmt: skip
        response = api.post("/api/sessions", json=body)
        assert (response.status_code, response.json()["error"]["code"]) == (400, "invalid_input")
    not_json = api.post("/api/envs", content=b"{nope", headers={"content-type": "application/json"})
    assert not_json.json()["error"]["code"] == "invalid_input"
    assert api.post("/api/sessions/x/keep", json={"idle_minutes": -1}).status_code == 400
    assert api.post("/api/sessions/x/fork", json={"n": 0}).status_code == 400
    bad_turn = api.get("/api/sessions/x/log", params={"turn": "last"})
    assert bad_turn.json()["error"]["code"] == "invalid_input"


@pytest.mark.sandbox
def test_bad_input_gets_one_clear_error_and_changes_nothing(
    api: TestClient, remote: Path, tmp_path: Path
) -> None:
    add_env(api, remote)
    cases = [
        ({"env": "nope"}, 404, "environment_not_found"),
        ({"harness": "cursor"}, 400, "unknown_harness"),
        ({"name": "Bad Name"}, 400, "invalid_name"),
        ({"message": "   "}, 400, "invalid_input"),
    ]
    for change, status, code in cases:
        body = {"name": "x", "message": "hi", "env": "app", "harness": "antigravity", **change}
        response = api.post("/api/sessions", json=body)
        assert (response.status_code, response.json()["error"]["code"]) == (status, code), body
        assert response.json()["error"]["message"]
    assert api.get("/api/sessions").json()["sessions"] == []
    assert api.get("/api/sandboxes").json() == []

    unreachable = api.post("/api/envs", json={"name": "ghost", "repo": str(tmp_path / "no.git")})
    assert (unreachable.status_code, unreachable.json()["error"]["code"]) == (400, "invalid_input")
    no_branch = api.post("/api/envs", json={"name": "ghost", "repo": str(remote),
                                            "branch": "nope"})  # fmt: skip
    assert no_branch.json()["error"]["code"] == "invalid_input"
    assert [e["name"] for e in api.get("/api/envs").json()] == ["app"]

    new_session(api, "taken", "hi")
    again = api.post("/api/sessions", json={"name": "taken", "message": "hi", "env": "app",
                                            "harness": "antigravity"})  # fmt: skip
    assert (again.status_code, again.json()["error"]["code"]) == (409, "name_taken")
    wait_turn(api, "taken", 1)
    assert [s["name"] for s in api.get("/api/sessions").json()["sessions"]] == ["taken"]
    assert len(api.get("/api/sandboxes").json()) == 1

    for method, path in [("GET", "/api/sessions/nope"), ("DELETE", "/api/sessions/nope"),
                         ("POST", "/api/sessions/nope/suspend"),
                         ("GET", "/api/sessions/nope/patch"), ("GET", "/api/sessions/nope/log"),
                         ("POST", "/api/sessions/ses-00000000/open")]:  # fmt: skip
        response = api.request(method, path)
        assert (response.status_code, response.json()["error"]["code"]) == (
            404, "session_not_found"), (method, path)  # fmt: skip
    exec_missing = api.post("/api/sessions/nope/exec", json={"argv": ["true"]})
    assert exec_missing.json()["error"]["code"] == "session_not_found"
