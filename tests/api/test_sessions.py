"""A session's whole life through the REST API, with real sandboxes and the Antigravity
stand-in as the agent: create, wait, suspend, resume with the same conversation, patch, log,
exec, the terminal, fork and delete."""

from __future__ import annotations

import base64
import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient, WebSocketDenialResponse
from starlette.websockets import WebSocketDisconnect

from hangar.runtime import Runtime
from tests.api.conftest import add_env, new_session, settle, ticket, wait_turn

pytestmark = pytest.mark.sandbox

FIRST = ("run: echo one > one.txt && git add one.txt && git commit -qm one\n"
         "run: echo note > note.txt\n"
         "the deploy key is PASSWORD=hunter2hunter2")  # fmt: skip
VIEW_FIELDS = {"id", "name", "title", "state", "harness", "model", "harness_session",
               "sandbox_id", "repo", "branch", "idle_minutes", "needs_input", "last_active_at",
               "created_at", "error", "resume_hint", "turns", "checkpoints"}  # fmt: skip


def frames(api: TestClient, name: str, body: dict[str, Any]) -> list[dict[str, Any]]:
    response = api.post(f"/api/sessions/{name}/exec", json=body)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("application/x-ndjson")
    return [json.loads(line) for line in response.iter_lines() if line]


def output(got: list[dict[str, Any]], stream: str) -> bytes:
    return b"".join(base64.b64decode(f[stream]) for f in got if stream in f)


def test_a_session_lives_suspends_resumes_forks_and_dies_through_the_api(
    api: TestClient, remote: Path
) -> None:
    add_env(api, remote)
    created = new_session(api, "demo", FIRST)
    assert created["turns"][0]["n"] == 1 and created["turns"][0]["started_at"] is None
    assert created["phase"]["step"] == "creating_sandbox"
    assert wait_turn(api, "demo", 1)["outcome"] == "exited"

    view = api.get("/api/sessions/demo").json()
    assert VIEW_FIELDS <= set(view)
    assert (view["state"], view["harness"], view["repo"]) == ("idle", "antigravity", str(remote))
    turn = view["turns"][0]
    assert (turn["n"], turn["exit_code"], turn["outcome"]) == (1, 0, "exited")
    assert turn["summary"].startswith("Seen 0 earlier messages; the task began with: run:")
    assert turn["started_at"] and turn["finished_at"] and turn["message"] == FIRST
    assert view["checkpoints"][-1]["reason"] == "turn" and view["checkpoints"][-1]["head"]
    conversation = view["harness_session"]
    assert conversation and view["resume_hint"] == f"agy --conversation {conversation}"
    assert api.get(f"/api/sessions/{view['id']}").json()["name"] == "demo"  # by id too

    page = api.get("/api/sessions").json()
    listed = page["sessions"]
    assert page["next_cursor"] is None and listed[0]["turn_count"] == 1
    assert [s["name"] for s in listed] == ["demo"] and VIEW_FIELDS - set(listed[0]) == {
        "turns", "checkpoints"}  # fmt: skip
    assert "hunter2hunter2" not in json.dumps(listed) and "[redacted]" in listed[0]["summary"]

    suspended = api.post("/api/sessions/demo/suspend")
    assert suspended.status_code == 200
    assert (suspended.json()["state"], suspended.json()["sandbox_id"]) == ("suspended", None)
    assert api.get("/api/sandboxes").json() == []
    assert b"+note" in api.get("/api/sessions/demo/patch").content  # from the checkpoint

    sent = api.post("/api/sessions/demo/send", json={"message": "what now?"})
    assert sent.status_code == 202 and sent.json()["turn"] == 2
    second = wait_turn(api, "demo", 2)
    assert second["summary"].startswith("Seen 2 earlier messages")  # the conversation came back
    resumed = api.get("/api/sessions/demo").json()
    assert resumed["harness_session"] == conversation and resumed["sandbox_id"]

    patch = api.get("/api/sessions/demo/patch")
    assert patch.headers["content-type"].startswith("text/x-diff")
    assert b"+one" in patch.content and b"+note" in patch.content  # commit, untracked file
    first_log = api.get("/api/sessions/demo/log", params={"turn": 1})
    assert first_log.headers["content-type"].startswith("text/plain")
    assert b'"type": "init"' in first_log.content and b"Seen 0 earlier" in first_log.content
    assert b"Seen 2 earlier" in api.get("/api/sessions/demo/log").content  # the latest turn

    got = frames(api, "demo", {"argv": ["sh", "-c", "cat note.txt; git log -1 --format=%s; "
                                        "cat >&2; exit 3"],
                               "stdin": base64.b64encode(b"from stdin").decode()})  # fmt: skip
    assert output(got, "stdout") == b"note\none\n" and output(got, "stderr") == b"from stdin"
    assert got[-1] == {"exit": 3}

    forks = api.post("/api/sessions/demo/fork", json={"n": 2})
    assert forks.status_code == 202
    assert [f["name"] for f in forks.json()] == ["demo-fork-1", "demo-fork-2"]
    for asked in forks.json():
        assert asked["state"] == "starting"
        fork = settle(api, asked["name"])
        assert fork["state"] == "idle" and fork["sandbox_id"]
        got = frames(api, fork["name"], {"argv": ["cat", "note.txt"]})
        assert output(got, "stdout") == b"note\n" and got[-1] == {"exit": 0}

    assert api.delete("/api/sessions/demo").status_code == 204
    assert api.get("/api/sessions/demo").json()["error"]["code"] == "session_not_found"
    listed = api.get("/api/sessions").json()["sessions"]
    assert {s["name"] for s in listed} == {"demo-fork-1", "demo-fork-2"}


def test_exec_reports_failures_in_the_stream_and_bad_stdin_up_front(
    api: TestClient, remote: Path
) -> None:
    add_env(api, remote)
    new_session(api, "demo", "hi")
    wait_turn(api, "demo", 1)
    timed_out = frames(api, "demo", {"argv": ["sleep", "30"], "timeout": 0.5})
    assert timed_out[-1]["error"]["code"] == "exec_timeout"
    bad = api.post("/api/sessions/demo/exec", json={"argv": ["cat"], "stdin": "%%%"})
    assert (bad.status_code, bad.json()["error"]["code"]) == (400, "invalid_input")
    empty = api.post("/api/sessions/demo/exec", json={"argv": []})
    assert empty.status_code == 400


def test_a_second_send_during_a_turn_is_refused_and_the_log_can_be_followed(
    api: TestClient, runtime: Runtime, remote: Path
) -> None:
    add_env(api, remote)
    new_session(api, "demo", "run: echo working | tee notes.txt\nwait-for: /tmp/go")
    busy = api.post("/api/sessions/demo/send", json={"message": "and this"})  # while it starts
    assert (busy.status_code, busy.json()["error"]["code"]) == (409, "session_busy")
    session = settle(api, "demo")
    deadline = time.monotonic() + 60  # the turn's watch keeps its latest line on the record
    while (listed := api.get("/api/sessions").json()["sessions"][0])["progress"] != "working":
        assert time.monotonic() < deadline, listed
        time.sleep(0.1)
    busy = api.post("/api/sessions/demo/send", json={"message": "and this"})  # while it runs
    assert (busy.status_code, busy.json()["error"]["code"]) == (409, "session_busy")
    assert api.post("/api/sessions/demo/wait", json={"timeout": 0}).json()["finished_at"] is None

    release = threading.Timer(1.0, runtime.sandboxes.exec, (session["sandbox_id"],
                                                            ["touch", "/tmp/go"]))  # fmt: skip
    release.start()
    try:
        followed = api.get("/api/sessions/demo/log", params={"follow": "true"})
    finally:
        release.join()
    assert followed.status_code == 200
    assert b'"type": "init"' in followed.content and b"working\n" in followed.content
    assert followed.content == api.get("/api/sessions/demo/log", params={"turn": 1}).content
    assert wait_turn(api, "demo", 1)["outcome"] == "exited"
    ended = api.get("/api/sessions", params={"order": "activity"}).json()["sessions"][0]
    assert (ended["progress"], ended["change"]) == (None, {"files": 1, "added": 1, "removed": 0})
    assert api.post("/api/sessions/demo/send", json={"message": "and this"}).status_code == 202


def test_the_terminal_is_a_shell_in_the_repo_that_reports_its_exit(
    api: TestClient, remote: Path
) -> None:
    add_env(api, remote)
    new_session(api, "demo", "hi")
    wait_turn(api, "demo", 1)
    bare = TestClient(api.app)  # no bearer token: the ticket alone opens it
    path = f"/api/sessions/demo/terminal?ticket={ticket(api, 'demo')}&rows=40&cols=123"
    with bare.websocket_connect(path) as ws:
        ws.send_bytes(b"echo marker-$((6*7)); pwd; stty size; echo $TERM; "
                      b"echo secret-${API_TOKEN:-none}; exit 5\n")  # fmt: skip
        seen = b""
        with pytest.raises(WebSocketDisconnect) as closed:
            while True:
                seen += ws.receive_bytes()
    assert (closed.value.code, closed.value.reason) == (1000, "exit 5")
    assert b"marker-42" in seen and b"/workspace/app" in seen
    assert b"40 123" in seen and b"xterm-256color" in seen
    assert b"secret-none" in seen  # a shell gets the environment's variables, not its secrets
    with pytest.raises(WebSocketDenialResponse) as reused:
        with bare.websocket_connect(path):
            pass
    assert reused.value.status_code == 401
    assert "used already" in reused.value.json()["error"]["message"]


def test_the_terminal_refuses_bad_tickets_and_the_ticket_endpoint_unknown_sessions_with_json(
    api: TestClient,
) -> None:
    bare = TestClient(api.app)
    with pytest.raises(WebSocketDenialResponse) as refused:
        with bare.websocket_connect("/api/sessions/demo/terminal?ticket=nope"):
            pass
    assert refused.value.status_code == 401
    assert refused.value.json()["error"]["code"] == "unauthorized"
    missing = api.post("/api/sessions/nope/terminal-ticket")
    assert (missing.status_code, missing.json()["error"]["code"]) == (404, "session_not_found")


def test_a_running_turns_progress_reads_from_a_cursor_and_its_log_renders_as_lines(
    api: TestClient, runtime: Runtime, remote: Path
) -> None:
    add_env(api, remote)
    new_session(api, "demo", "run: hangar-agent progress --pct 25 'reading the code' && "
                "hangar-agent progress 'writing tests'\nwait-for: /tmp/go")
    session = settle(api, "demo")
    deadline = time.monotonic() + 60
    while (said := api.get("/api/sessions/demo/progress").json())["lines"] == []:
        assert time.monotonic() < deadline, "no progress lines"
    assert said["lines"][0] == {"message": "reading the code", "pct": 25}
    if len(said["lines"]) == 1:  # the second line came after the first read
        while not (more := api.get("/api/sessions/demo/progress",
                                   params={"cursor": said["cursor"]}).json())["lines"]:
            assert time.monotonic() < deadline, "no second progress line"
        said = {"lines": said["lines"] + more["lines"], "cursor": more["cursor"]}
    assert said["lines"][1] == {"message": "writing tests", "pct": None}
    again = api.get("/api/sessions/demo/progress", params={"cursor": said["cursor"]}).json()
    assert again == {"lines": [], "cursor": said["cursor"]}  # nothing new after the cursor
    refused = api.get("/api/sessions/demo/progress", params={"cursor": "-1"})
    assert (refused.status_code, refused.json()["error"]["field"]) == (400, "cursor")

    runtime.sandboxes.exec(session["sandbox_id"], ["touch", "/tmp/go"])
    wait_turn(api, "demo", 1)
    raw = api.get("/api/sessions/demo/log").content
    lines = api.get("/api/sessions/demo/log", params={"format": "lines"}).text
    assert raw.count(b"\n") > lines.count("\n") > 0 and "{" not in lines  # one line per event
    assert lines.splitlines()[-1].startswith("Seen 0 earlier messages")
    followed = api.get("/api/sessions/demo/log", params={"format": "lines", "follow": "1"})
    assert followed.text == lines
    bad = api.get("/api/sessions/demo/log", params={"format": "html"})
    assert (bad.status_code, bad.json()["error"]["field"]) == (400, "format")
