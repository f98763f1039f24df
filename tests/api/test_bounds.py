"""Bounded inputs: pages of sessions, every number in its range, no NUL bytes, and request
bodies capped before they are read; whatever is refused gets invalid_input (or 413) and changes
nothing."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from hangar.operations.limits import BodyLimit
from hangar.config import Settings
from hangar.models import SessionState
from hangar.runtime import Runtime
from hangar.testing.db import at, make_session
from tests.api.conftest import add_env, new_session, signed_in, standin_harnesses, wait_turn


def refused(response: Any, code: str = "invalid_input", status: int = 400) -> dict[str, Any]:
    assert (response.status_code, response.json()["error"]["code"]) == (status, code), (
        response.text)  # fmt: skip
    error: dict[str, Any] = response.json()["error"]
    assert error["message"]
    return error


def test_120_sessions_come_in_pages_of_50_with_no_duplicates_or_gaps(
    api: TestClient, runtime: Runtime
) -> None:
    made = [runtime.db.create_session(make_session(f"s{i:03d}", minute=i // 4))
            for i in range(120)]  # fmt: skip (four share each created_at: ties by id)
    expected = [s.name for s in sorted(made, key=lambda s: (s.created_at, s.id), reverse=True)]
    seen: list[str] = []
    sizes: list[int] = []
    cursor = ""
    while True:
        page = api.get("/api/sessions", params={"limit": 50, "cursor": cursor}).json()
        sizes.append(len(page["sessions"]))
        seen += [s["name"] for s in page["sessions"]]
        if page["next_cursor"] is None:
            break
        cursor = page["next_cursor"]
    assert sizes == [50, 50, 20] and seen == expected
    assert len(api.get("/api/sessions").json()["sessions"]) == 50  # the default page


def test_sessions_filtered_by_state_and_prefix_come_in_pages_with_no_duplicates_or_gaps(
    api: TestClient, runtime: Runtime
) -> None:
    def state(i: int) -> SessionState:
        return [SessionState.IDLE, SessionState.SUSPENDED, SessionState.FAILED][i % 5 % 3]

    made = [runtime.db.create_session(make_session(f"{'web' if i % 3 else 'api'}-{i:03d}",
                                                   minute=i // 4, state=state(i)))
            for i in range(120)]  # fmt: skip (four share each created_at: ties by id)
    newest = sorted(made, key=lambda s: (s.created_at, s.id), reverse=True)
    for params, count in (({"state": "idle"}, 48), ({"prefix": "web-"}, 80),
                          ({"state": "idle", "prefix": "web"}, 32),
                          ({"state": "suspended", "prefix": "api-00"}, 2), ({"prefix": "Web"}, 0)):
        expected = [s.name for s in newest if s.name.startswith(params.get("prefix", ""))
                    and s.state.value == params.get("state", s.state.value)]  # fmt: skip
        assert len(expected) == count, params
        seen: list[str] = []
        cursor = ""
        while True:
            page = api.get("/api/sessions", params={**params, "limit": 20, "cursor": cursor})
            assert page.status_code == 200, page.text
            seen += [s["name"] for s in page.json()["sessions"]]
            if (cursor := page.json()["next_cursor"]) is None:
                break
        assert seen == expected, params
    default = api.get("/api/sessions", params={"prefix": "web-", "state": ""}).json()
    assert len(default["sessions"]) == 50  # an empty state is no filter; the default page
    spec = api.get("/api/openapi.json").json()
    listed = {p["name"]: p for p in spec["paths"]["/api/sessions"]["get"]["parameters"]}
    assert {"limit", "cursor", "state", "prefix", "order"} <= set(listed)
    assert "suspended" in listed["state"]["description"]


def test_an_unknown_state_or_a_prefix_no_name_can_start_with_is_invalid_input(
    api: TestClient, runtime: Runtime
) -> None:
    runtime.db.create_session(make_session("alpha", state=SessionState.IDLE))
    before = api.get("/api/sessions").json()
    for bad in ("sleeping", "IDLE", "idle ", "%00"):
        error = refused(api.get("/api/sessions", params={"state": bad}))
        assert error["field"] == "state" and error["allowed"] == [s.value for s in SessionState]
        assert "starting, active, idle, suspending, suspended, archived, failed" in error["message"]
    for bad in ("al\x00", "a" * 65):
        error = refused(api.get("/api/sessions", params={"prefix": bad, "state": "idle"}))
        assert error["field"] == "prefix"
    assert api.get("/api/sessions", params={"prefix": "a" * 64}).json()["sessions"] == []
    assert api.get("/api/sessions").json() == before


def test_a_bad_page_size_or_cursor_is_invalid_input(api: TestClient) -> None:
    for limit in ("0", "501", "-1", "ten", "99999999999999999999"):
        assert refused(api.get("/api/sessions", params={"limit": limit}))["field"] == "limit"
    for cursor in ("not-a-cursor", "eyJ4IjoxfQ", "%00"):
        assert refused(api.get("/api/sessions", params={"cursor": cursor}))["field"] == "cursor"


def test_a_cursor_asked_with_other_filters_than_it_was_made_with_is_invalid_input(
    api: TestClient, runtime: Runtime
) -> None:
    for i in range(6):
        runtime.db.create_session(make_session(f"web-{i}", minute=i, state=SessionState.IDLE))
    first = api.get("/api/sessions", params={"prefix": "web-", "limit": 2}).json()
    cursor = first["next_cursor"]
    for other in ({}, {"prefix": "web-1"}, {"state": "idle", "prefix": "web-"}, {"state": "idle"}):
        error = refused(api.get("/api/sessions", params={**other, "cursor": cursor, "limit": 2}))
        assert error["field"] == "cursor" and error["made_for"] == {"state": None, "prefix": "web-"}
        assert "prefix='web-'" in error["message"], error
    same = api.get("/api/sessions", params={"prefix": "web-", "limit": 2, "cursor": cursor})
    assert [s["name"] for s in same.json()["sessions"]] == ["web-3", "web-2"]
    unfiltered = api.get("/api/sessions", params={"limit": 2}).json()["next_cursor"]
    error = refused(api.get("/api/sessions", params={"state": "idle", "cursor": unfiltered}))
    assert error["made_for"] == {"state": None, "prefix": None}


def test_sessions_by_last_activity_come_most_recent_first_and_a_cursor_keeps_its_order(
    api: TestClient, runtime: Runtime
) -> None:
    for i in range(5):  # made oldest first, last active newest first
        runtime.db.create_session(make_session(f"act-{i}", minute=i, last_active_at=at(9 - i)))
    first = api.get("/api/sessions", params={"order": "activity", "limit": 2}).json()
    assert [s["name"] for s in first["sessions"]] == ["act-0", "act-1"]
    assert first["sessions"][0]["change"] is None and first["sessions"][0]["progress"] is None
    rest = api.get("/api/sessions", params={"order": "activity", "limit": 5,
                                            "cursor": first["next_cursor"]}).json()  # fmt: skip
    assert [s["name"] for s in rest["sessions"]] == ["act-2", "act-3", "act-4"]
    created = api.get("/api/sessions", params={"limit": 2}).json()
    assert [s["name"] for s in created["sessions"]] == ["act-4", "act-3"]  # the default
    for order, cursor in (("created", first["next_cursor"]), ("activity", created["next_cursor"])):
        error = refused(api.get("/api/sessions", params={"order": order, "cursor": cursor}))
        assert error["field"] == "cursor" and order in error["message"], error
    error = refused(api.get("/api/sessions", params={"order": "recent"}))
    assert error["field"] == "order" and error["allowed"] == ["created", "activity"]


@pytest.mark.sandbox
def test_out_of_range_numbers_are_refused_and_change_nothing(
    api: TestClient, remote: Path
) -> None:
    add_env(api, remote)
    new_session(api, "demo", "hello")
    wait_turn(api, "demo", 1)
    before = api.get("/api/sessions/demo").json()
    s = "/api/sessions/demo"
    for idle in (1e308, -1, 10_081, "1e999"):
        raw = f'{{"idle_minutes": {idle}}}'.encode()
        refused(api.post(f"{s}/keep", content=raw, headers={"content-type": "application/json"}))
    refused(api.post("/api/sessions", json={"name": "other", "message": "hi", "env": "app",
                                            "harness": "antigravity", "idle_minutes": 1e308}))
    for turn in ("99999999999999999999", "2", "0"):
        assert refused(api.get(f"{s}/log", params={"turn": turn}))["field"] == "turn"
    for turn in (99_999_999_999_999_999_999, 2, 0):
        refused(api.post(f"{s}/wait", json={"turn": turn, "timeout": 0}))
    for n in (0, 11, 10**30):
        refused(api.post(f"{s}/fork", json={"n": n}))
    for timeout in (0, -5, 86_401, 1e308):
        refused(api.post(f"{s}/exec", json={"argv": ["true"], "timeout": timeout}))
    refused(api.post(f"{s}/wait", json={"turn": 1, "timeout": 601}))

    after = api.get("/api/sessions/demo").json()
    assert after == before and after["idle_minutes"] == 30
    assert [x["name"] for x in api.get("/api/sessions").json()["sessions"]] == ["demo"]
    ran = api.post(f"{s}/exec", json={"argv": ["echo", "still fine"]})
    assert ran.status_code == 200 and '{"exit": 0}' in ran.text


@pytest.mark.sandbox
def test_nul_bytes_in_names_arguments_variables_and_messages_are_refused(
    api: TestClient, remote: Path
) -> None:
    add_env(api, remote)
    new_session(api, "demo", "hello")
    wait_turn(api, "demo", 1)
    before = api.get("/api/sessions/demo").json()
    envs_before = api.get("/api/envs").json()
    base = {"name": "x", "message": "hi", "env": "app", "harness": "antigravity"}
    cases: list[tuple[str, str, dict[str, Any], str]] = [
        ("POST", "/api/sessions", {**base, "name": "a\x00b"}, "name"),
        ("POST", "/api/sessions", {**base, "message": "hi\x00there"}, "message"),
        ("POST", "/api/sessions", {**base, "title": "\x00"}, "title"),
        ("POST", "/api/sessions/demo/send", {"message": "more\x00"}, "message"),
        ("POST", "/api/sessions/demo/exec", {"argv": ["echo", "a\x00b"]}, "argv.1"),
        ("POST", "/api/envs", {"name": "e", "repo": str(remote), "vars": {"K": "v\x00"}},
         "vars.K"),
        ("POST", "/api/envs", {"name": "e", "repo": str(remote), "vars": {"K\x00": "v"}},
         "vars.K\\0"),
        ("POST", "/api/envs", {"name": "e", "repo": str(remote), "secrets": {"S": "\x00"}},
         "secrets.S"),
        ("POST", "/api/envs", {"name": "e", "repo": str(remote), "setup": "make\x00"}, "setup"),
        ("POST", "/api/envs", {"name": "e", "repo": str(remote) + "\x00"}, "repo"),
    ]  # fmt: skip
    for method, path, body, field in cases:
        error = refused(api.request(method, path, json=body))
        assert error["field"] == field and "NUL" in error["message"], (body, error)
    assert refused(api.get("/api/sessions/de%00mo"))["field"] == "ref"
    assert api.get("/api/sessions/demo").json() == before
    assert api.get("/api/envs").json() == envs_before
    assert [x["name"] for x in api.get("/api/sessions").json()["sessions"]] == ["demo"]


@pytest.fixture
def small_api(tmp_path: Path) -> Iterator[tuple[TestClient, Runtime]]:
    """An API whose bodies are capped at 1 MiB."""
    runtime = Runtime(Settings.build(data_dir=tmp_path / "data", max_body_mb=1))
    with signed_in(runtime) as client:
        yield client, runtime
    runtime.close()


def test_a_body_over_the_cap_gets_413_and_changes_nothing(
    small_api: tuple[TestClient, Runtime], remote: Path
) -> None:
    api, runtime = small_api
    big = {"name": "e", "repo": str(remote), "setup": "x" * (2 * 2**20)}
    error = refused(api.post("/api/envs", json=big), "payload_too_large", 413)
    assert "HANGAR_MAX_BODY_MB" in error["message"] and error["limit"] == 2**20

    def chunks() -> Iterator[bytes]:  # no Content-Length: counted as it is read
        yield json.dumps({"name": "e", "repo": str(remote), "setup": ""})[:-2].encode()
        for _ in range(40):
            yield b"y" * 65536
        yield b'"}'

    refused(api.post("/api/envs", content=chunks(), headers={"content-type": "application/json"}),
            "payload_too_large", 413)  # fmt: skip
    assert api.get("/api/envs").json() == [] and runtime.db.list_environments() == []
    fits = api.post("/api/envs", json={"name": "e", "repo": str(remote), "setup": "x" * 1000})
    assert fits.status_code == 201, fits.text


def test_a_declared_oversize_body_is_refused_without_reading_a_byte() -> None:
    called: list[str] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        called.append("app")

    async def receive() -> Any:
        raise AssertionError("the body was read")

    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {"type": "http", "method": "POST", "path": "/api/envs",
             "headers": [(b"content-length", str(300 * 2**20).encode())]}  # fmt: skip
    asyncio.run(BodyLimit(app, 32 * 2**20)(scope, receive, send))
    assert called == [] and sent[0]["status"] == 413
    body = json.loads(sent[1]["body"])
    assert body["error"]["code"] == "payload_too_large" and "314572800 bytes" in (
        body["error"]["message"])  # fmt: skip


@pytest.fixture
def message_api(tmp_path: Path) -> Iterator[tuple[TestClient, Runtime]]:
    """A running API (the Antigravity stand-in as its agent) whose messages are capped at 2 KiB."""
    runtime = Runtime(Settings.build(data_dir=tmp_path / "data", max_message_kb=2,
                                     harness_dir=standin_harnesses(tmp_path / "harnesses")))
    runtime.start()
    with signed_in(runtime) as client:
        yield client, runtime
    runtime.close()
    for info in runtime.sandboxes.list():
        runtime.sandboxes.destroy(info.id, hooks=False)


@pytest.mark.sandbox
def test_a_message_one_byte_over_the_limit_gets_413_and_starts_nothing(
    message_api: tuple[TestClient, Runtime], remote: Path
) -> None:
    api, runtime = message_api
    add_env(api, remote)
    over = "é" * 1024 + "x"  # 2,049 bytes of UTF-8 in 1,025 characters: bytes are counted
    body = {"name": "demo", "message": over, "env": "app", "harness": "antigravity"}
    error = refused(api.post("/api/sessions", json=body), "message_too_large", 413)
    assert "HANGAR_MAX_MESSAGE_KB" in error["message"] and error["limit"] == 2048
    assert error["size"] == 2049
    assert runtime.db.list_sessions() == [] and runtime.sandboxes.list() == []
    new_session(api, "demo", "- a message at the limit " + "x" * (2048 - 25))
    wait_turn(api, "demo", 1)
    before = api.get("/api/sessions/demo").json()
    refused(api.post("/api/sessions/demo/send", json={"message": over}), "message_too_large", 413)
    assert api.get("/api/sessions/demo").json() == before
