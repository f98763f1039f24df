"""The terminal's tickets and its agent mode: a ticket opens one terminal of one session, once,
within its minute, and is never a bearer token; ``mode=agent`` resumes the session's
conversation with the harness's own interactive command."""

from __future__ import annotations

import json
import re
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient, WebSocketDenialResponse
from starlette.websockets import WebSocketDisconnect

from hangar.api import terminal, tickets
from hangar.operations.auth import secret_hash
from hangar.models import Session, Token, utcnow
from hangar.runtime import Runtime
from hangar.testing.db import make_session
from tests.api.conftest import add_env, new_session, ticket, wait_turn


def stored_session(runtime: Runtime, name: str) -> Session:
    """A session record with no sandbox (tickets need no more)."""
    return runtime.db.create_session(make_session(name, environment="app", harness="antigravity"))


def wait_state(api: TestClient, name: str, state: str, limit: float = 60) -> dict[str, Any]:
    """The session once it is in ``state`` (a bounded wait)."""
    deadline = time.monotonic() + limit
    while (view := api.get(f"/api/sessions/{name}").json())["state"] != state:
        assert time.monotonic() < deadline, f"{name} is {view['state']}, not {state}"
        time.sleep(0.05)
    return dict(view)


def refused(client: TestClient, path: str) -> tuple[int, str, str]:
    """The status, code and message of a refused websocket upgrade."""
    with pytest.raises(WebSocketDenialResponse) as denied:
        with client.websocket_connect(path):
            pass
    error = denied.value.json()["error"]
    return denied.value.status_code, error["code"], error["message"]


@pytest.fixture
def demo(api: TestClient, remote: Path) -> str:
    """A session "demo" whose first turn has ended, its sandbox up; its id."""
    add_env(api, remote)
    new_session(api, "demo", "hi")
    wait_turn(api, "demo", 1)
    return str(api.get("/api/sessions/demo").json()["id"])


def opened(api: TestClient, query: str = "") -> Any:
    """A new terminal (a shell unless ``query`` says otherwise) on session "demo"."""
    return TestClient(api.app).websocket_connect(
        f"/api/sessions/demo/terminal?{query}&ticket={ticket(api, 'demo')}")


def closing(ws: Any) -> tuple[int, str, bytes]:
    """The close code and reason of a terminal, and what it showed until it closed."""
    seen = b""
    with pytest.raises(WebSocketDisconnect) as closed:
        while True:
            seen += ws.receive_bytes()
    return closed.value.code, closed.value.reason, seen


def test_a_ticket_is_made_for_one_session_only_its_hash_is_stored_and_it_expires_in_a_minute(
    api: TestClient, runtime: Runtime
) -> None:
    session = stored_session(runtime, "demo")
    before = utcnow()
    response = api.post("/api/sessions/demo/terminal-ticket")
    assert response.status_code == 201
    answer = response.json()
    assert set(answer) == {"ticket", "expires_at"} and len(answer["ticket"]) >= 40
    (stored,) = [t for t in runtime.db.list_tokens() if t.scopes != ["admin"]]
    assert stored.secret_hash == secret_hash(answer["ticket"])
    assert answer["ticket"] not in stored.model_dump_json()
    assert stored.scopes == [f"terminal:{session.id}"]
    assert stored.expires_at is not None
    assert timedelta(seconds=59) <= stored.expires_at - before <= timedelta(seconds=61)
    assert api.get("/api/openapi.json").json()["paths"]["/api/sessions/{ref}/terminal-ticket"][
        "post"]["responses"]["201"]  # fmt: skip


def test_a_ticket_is_not_a_bearer_token(api: TestClient, runtime: Runtime) -> None:
    stored_session(runtime, "demo")
    secret = ticket(api, "demo")
    bare = TestClient(api.app)
    for method, path in [("GET", "/api/sessions"), ("GET", "/api/sessions/demo"),
                         ("POST", "/api/sessions/demo/terminal-ticket")]:  # fmt: skip
        answer = bare.request(method, path, headers={"Authorization": f"Bearer {secret}"})
        assert (answer.status_code, answer.json()["error"]["code"]) == (403, "forbidden")


def test_the_terminal_takes_neither_the_bearer_token_nor_the_old_token_query(
    api: TestClient, runtime: Runtime
) -> None:
    stored_session(runtime, "demo")
    admin = api.headers["Authorization"].removeprefix("Bearer ")
    status, code, message = refused(api, "/api/sessions/demo/terminal")  # the header only
    assert (status, code) == (401, "unauthorized") and "ticket" in message
    status, code, message = refused(TestClient(api.app), f"/api/sessions/demo/terminal?token={admin}")
    assert (status, code) == (401, "unauthorized") and "?token= is not accepted" in message
    # The admin token given as a ticket is no ticket, and it is left alone.
    status, code, message = refused(api, f"/api/sessions/demo/terminal?ticket={admin}")
    assert (status, code) == (401, "unauthorized") and "not a terminal ticket" in message
    assert api.get("/api/sessions").status_code == 200


def test_a_ticket_for_another_session_is_refused_and_used_up(
    api: TestClient, runtime: Runtime
) -> None:
    stored_session(runtime, "demo")
    stored_session(runtime, "other")
    secret = ticket(api, "other")
    status, code, message = refused(api, f"/api/sessions/demo/terminal?ticket={secret}")
    assert (status, code) == (401, "unauthorized") and "another session" in message
    status, _, message = refused(api, f"/api/sessions/other/terminal?ticket={secret}")
    assert status == 401 and "used already" in message


def test_a_ticket_is_used_up_by_an_upgrade_refused_for_any_other_reason(
    api: TestClient, runtime: Runtime
) -> None:
    stored_session(runtime, "demo")  # no sandbox
    secret = ticket(api, "demo")
    assert refused(api, f"/api/sessions/demo/terminal?ticket={secret}&mode=vim")[:2] == (
        400, "invalid_input")  # fmt: skip
    assert refused(api, f"/api/sessions/demo/terminal?ticket={secret}")[:2] == (
        401, "unauthorized")  # fmt: skip
    secret = ticket(api, "demo")
    assert refused(api, f"/api/sessions/demo/terminal?ticket={secret}&mode=agent")[:2] == (
        409, "session_not_running")  # fmt: skip
    assert refused(api, f"/api/sessions/demo/terminal?ticket={secret}")[1] == "unauthorized"


def test_an_expired_ticket_is_refused_and_making_a_ticket_sweeps_the_expired_ones(
    api: TestClient, runtime: Runtime
) -> None:
    session = stored_session(runtime, "demo")
    long_ago = utcnow() - timedelta(seconds=tickets.TICKET_SECONDS + 1)
    expired = tickets.issue(runtime.db, session, now=long_ago)
    stale = tickets.issue(runtime.db, session, now=long_ago)
    status, code, message = refused(api, f"/api/sessions/demo/terminal?ticket={expired.secret}")
    assert (status, code) == (401, "unauthorized") and "expired" in message
    forever = runtime.db.create_token(Token(secret_hash=secret_hash("no-expiry"), scopes=["read"]))
    live = ticket(api, "demo")  # sweeps the stale one on its way
    hashes = {t.secret_hash for t in runtime.db.list_tokens()}
    assert secret_hash(stale.secret) not in hashes
    assert {secret_hash(live), forever.secret_hash} <= hashes and len(hashes) == 3  # + admin
    assert refused(api, f"/api/sessions/demo/terminal?ticket={live}")[:2] == (
        409, "session_not_running")  # fmt: skip


@pytest.mark.sandbox
def test_the_agent_mode_resumes_the_sessions_conversation_with_a_turns_environment(
    api: TestClient, runtime: Runtime, demo: str
) -> None:
    view = api.get("/api/sessions/demo").json()
    conversation = view["harness_session"]
    with opened(api, "mode=agent&rows=30&cols=90") as ws:
        seen = b""
        while b"secret=" not in seen or not seen.endswith(b"\n"):
            seen += ws.receive_bytes()
        assert runtime.db.get_session(view["id"]).shells  # it holds a shell lease meanwhile
        ws.send_bytes(b"hello there\n")
        while b"agy heard: hello there" not in seen:
            seen += ws.receive_bytes()
        # Meanwhile no turn starts: it would write the conversation being talked in.
        busy = api.post("/api/sessions/demo/send", json={"message": "and now"})
        assert (busy.status_code, busy.json()["error"]["code"]) == (409, "session_busy")
        assert "talking to" in busy.json()["error"]["message"]
        ws.send_bytes(b"/exit\n")
        code, reason, rest = closing(ws)
        seen += rest
    assert (code, reason) == (1000, "exit 0")
    argv = re.search(rb"agy interactive argv=(\[.*?\])", seen)
    assert argv and json.loads(argv.group(1)) == ["--conversation", conversation]
    assert b"seen=2 io=/root/.hangar/sessions/demo secret=yes" in seen  # the turn's environment
    assert not runtime.db.get_session(view["id"]).shells

    # While a turn runs, its harness has the conversation: the agent mode waits, a shell not.
    api.post("/api/sessions/demo/send", json={"message": "wait-for: /tmp/go"})
    running = wait_state(api, "demo", "active")
    status, code, message = refused(
        api, f"/api/sessions/demo/terminal?ticket={ticket(api, 'demo')}&mode=agent")
    assert (status, code) == (409, "session_busy") and "running a turn" in message
    asked = api.post("/api/sessions/demo/terminal-ticket", json={"mode": "agent"})
    assert (asked.status_code, asked.json()["error"]["code"]) == (409, "session_busy")
    assert api.post("/api/sessions/demo/terminal-ticket", json={"mode": "shell"}).status_code == 201
    with opened(api) as shell:
        shell.send_bytes(b"touch /tmp/go; exit\n")
        assert closing(shell)[:2] == (1000, "exit 0")
    assert running["state"] == "active"
    wait_turn(api, "demo", 2)

    # Before a conversation there is nothing to resume.
    session = runtime.db.get_session(view["id"])
    runtime.db.update_session(session.model_copy(update={"harness_session": None}))
    path = f"/api/sessions/demo/terminal?ticket={ticket(api, 'demo')}&mode=agent"
    status, code, message = refused(api, path)
    assert (status, code) == (409, "no_conversation") and "send it a message" in message


def read_until(ws: Any, pattern: bytes) -> re.Match[bytes]:
    """Read the terminal's output until ``pattern`` matches it."""
    seen = b""
    while not (found := re.search(pattern, seen)):
        seen += ws.receive_bytes()
    return found


@pytest.mark.sandbox
@pytest.mark.usefixtures("demo")
def test_a_resize_message_gives_the_terminal_its_new_size_and_any_other_text_frame_closes_it(
    api: TestClient,
) -> None:
    with opened(api, "rows=30&cols=90") as ws:
        ws.send_bytes(b"echo size=$(stty size)\n")
        read_until(ws, rb"\rsize=30 90")
        ws.send_text(json.dumps({"type": "resize", "rows": 41, "cols": 123}))
        ws.send_bytes(b"echo size=$(stty size)\n")
        read_until(ws, rb"\rsize=41 123")
        ws.send_text(json.dumps({"type": "resize", "rows": 0, "cols": 80}))
        code, reason, _ = closing(ws)
    assert code == 1003
    assert reason == ("invalid_input: not a control message (rows: Input should "
                                   "be greater than or equal to 1)")  # fmt: skip
    # A resize at once, before the terminal has started, waits for it (and is not undone).
    with opened(api, "rows=30&cols=90") as ws:
        ws.send_text(json.dumps({"type": "resize", "rows": 2000, "cols": 77}))
        ws.send_bytes(b"echo size=$(stty size)\n")
        read_until(ws, rb"\rsize=1000 77")  # sizes above 1,000 are taken as 1,000
        ws.send_text("keys as text")
        code, reason, _ = closing(ws)
    assert (code, reason) == (
        1003, "invalid_input: not a control message (frame: Invalid JSON: expected value at "
        "line 1 column 1)")  # fmt: skip
    for query, size in (("rows=0&cols=0", None), ("rows=1001&cols=99999999999999999999", "1000 1000")):
        with opened(api, query) as ws:
            ws.send_bytes(b"echo size=$(stty size); exit\n")
            shown = read_until(ws, rb"\rsize=(\d+ \d+)").group(1).decode()
            assert size is None or shown == size, (query, shown)
    for rows in ("x", "-1", "%C2%B2", "5%0A"):
        status, code, message = refused(api, f"/api/sessions/demo/terminal?rows={rows}&cols=80"
                                        f"&ticket={ticket(api, 'demo')}")  # fmt: skip
        assert (status, code) == (400, "invalid_input") and "rows must be a number" in message


@pytest.mark.sandbox
@pytest.mark.usefixtures("demo")
def test_an_empty_frame_ends_the_input_and_the_output_still_comes_until_the_program_ends(
    api: TestClient,
) -> None:
    with opened(api) as ws:
        ws.send_bytes(b"echo typed-$((6*7)); (exit 3)\n")
        ws.send_bytes(b"")  # at once: it may come before the shell has even started
        code, reason, seen = closing(ws)
    assert (code, reason) == (1000, "exit 3")
    assert b"\rtyped-42" in seen
    # The end of input when the shell waits at its prompt (its line editor reads keys raw).
    with opened(api) as ws:
        ws.send_bytes(b"echo typed-$((6*8)); (exit 4)\n")
        read_until(ws, rb"\rtyped-48\r\n.*\$ $")
        ws.send_bytes(b"")
        assert closing(ws)[:2] == (1000, "exit 4")
    # And while a command runs that does not read (it would swallow an end-of-file).
    with opened(api) as ws:
        ws.send_bytes(b"echo waiting; read -t 3 x < /dev/null; sleep 1.5; (exit 5)\n")
        read_until(ws, rb"\rwaiting")
        ws.send_bytes(b"")
        assert closing(ws)[:2] == (1000, "exit 5")


@pytest.mark.sandbox
def test_a_program_left_running_when_its_client_goes_is_killed_and_lets_the_session_go(
    api: TestClient, runtime: Runtime, demo: str
) -> None:
    session_id = demo
    # sleep neither reads its input nor writes: the end of input alone would never end it
    with opened(api) as ws:
        ws.send_bytes(b"echo sleeping; sleep 6061\n")
        read_until(ws, rb"\rsleeping")  # the output, after the echo of the typed line
        assert runtime.db.get_session(session_id).shells
    gone_by = time.monotonic() + terminal.HANGUP_SECONDS + 30
    while runtime.db.get_session(session_id).shells:
        assert time.monotonic() < gone_by, "the terminal's lease outlived its client"
        time.sleep(0.05)
    assert runtime.sessions.exec("demo", ["pgrep", "-f", "sleep 606[1]"]) == 1  # none left


def test_a_ticket_asked_for_a_mode_is_refused_now_when_that_terminal_could_not_open(
    api: TestClient, runtime: Runtime
) -> None:
    stored_session(runtime, "demo")  # no sandbox
    for mode in ("shell", "agent"):
        asked = api.post("/api/sessions/demo/terminal-ticket", json={"mode": mode})
        assert (asked.status_code, asked.json()["error"]["code"]) == (409, "session_not_running")
    bad = api.post("/api/sessions/demo/terminal-ticket", json={"mode": "root"})
    assert (bad.status_code, bad.json()["error"]["field"]) == (400, "mode")
    assert [t.scopes for t in runtime.db.list_tokens()] == [["admin"]]  # no ticket was made
    assert api.post("/api/sessions/demo/terminal-ticket").status_code == 201  # no mode: no check
