"""``GET .../log?format=events``: a turn's transcript a page at a time, live while the turn runs
and whole once it is over, with the Antigravity stand-in as the agent."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from starlette.testclient import TestClient

from tests.api.conftest import add_env, new_session, settle, wait_turn

MESSAGE = "wait-for: /tmp/go\nrun: echo working"


def events(api: TestClient, name: str, **query: Any) -> dict[str, Any]:
    response = api.get(f"/api/sessions/{name}/log", params={"format": "events", **query})
    assert response.status_code == 200, response.text
    return dict(response.json())


def refused(api: TestClient, name: str, field: str, **query: Any) -> None:
    response = api.get(f"/api/sessions/{name}/log", params={"format": "events", **query})
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert (error["code"], error["field"]) == ("invalid_input", field), error


def test_a_turns_events_come_live_then_whole_page_by_page_and_bad_input_is_refused(
    api: TestClient, remote: Path
) -> None:
    add_env(api, remote)
    new_session(api, "talk", MESSAGE)
    assert settle(api, "talk")["state"] == "active"
    running = events(api, "talk")
    assert (running["turn"], running["harness"], running["finished"]) == (1, "antigravity", False)
    assert running["events"] == [{"kind": "message", "role": "user", "text": MESSAGE,
                                  "context": []}]  # fmt: skip
    assert running["more"] is False
    again = events(api, "talk", cursor=running["next_cursor"])  # nothing new yet: same place
    assert (again["events"], again["next_cursor"]) == ([], running["next_cursor"])
    assert events(api, "talk", cursor="e.0")["events"] == []  # no outcome before the end

    ran = api.post("/api/sessions/talk/exec", json={"argv": ["touch", "/tmp/go"]})
    assert ran.status_code == 200, ran.text
    wait_turn(api, "talk", 1)
    whole = events(api, "talk", turn=1)
    kinds = [e["kind"] for e in whole["events"]]
    assert kinds == ["message", "notice", "message", "usage", "outcome"], whole
    assert whole["finished"] and whole["events"][1]["text"] == "working"  # the command's words
    said, usage, outcome = whole["events"][2:]
    assert said["role"] == "assistant" and said["text"].startswith("Seen 0 earlier messages")
    assert (usage["input_tokens"], usage["output_tokens"], usage["cached_tokens"]) == (10, 5, 0)
    assert (outcome["outcome"], outcome["reason"]) == ("exited", None)
    assert outcome["duration_seconds"] > 0
    rest = events(api, "talk", cursor=running["next_cursor"])  # the live cursor reads on
    assert rest["events"] == whole["events"][1:]

    pages, cursor = [], None
    for _ in range(len(kinds)):
        page = events(api, "talk", limit=1, **({"cursor": cursor} if cursor else {}))
        pages += page["events"]
        cursor = page["next_cursor"]
        assert isinstance(cursor, str) and page["more"] is (len(pages) < len(kinds))
    assert pages == whole["events"]
    assert events(api, "talk", cursor=cursor) == {**whole, "events": [], "more": False,
                                                   "next_cursor": cursor}  # fmt: skip

    for bad in ("nope", "l5", "l-1.0", "l3.0", "x.0"):
        refused(api, "talk", "cursor", cursor=bad)
    for limit in ("0", "1001", "ten"):
        refused(api, "talk", "limit", limit=limit)
    refused(api, "talk", "turn", turn="2")
    missing = api.get("/api/sessions/nope/log", params={"format": "events"})
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "session_not_found"
    assert api.get("/api/sessions/talk/log", params={"format": "lines"}).text.startswith("working\nSeen 0")

    spec = api.get("/api/openapi.json").json()
    log = spec["paths"]["/api/sessions/{ref}/log"]["get"]
    content = log["responses"]["200"]["content"]
    assert content["application/json"]["schema"]["$ref"].endswith("/TranscriptPage")
    assert content["text/plain; charset=utf-8"]["schema"] == {"type": "string"}
    assert {"turn", "format", "cursor", "limit"} <= {p["name"] for p in log["parameters"]}
    kinds = spec["components"]["schemas"]["TranscriptPage"]["properties"]["events"]["items"]
    assert set(kinds["discriminator"]["mapping"]) == {"message", "tool_call", "tool_result",
                                                      "usage", "notice", "outcome"}  # fmt: skip
