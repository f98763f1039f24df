"""Every MCP tool, driven by the SDK's own client over streamable HTTP against a real
``hangar serve`` (embedded and cloud backends), whose agent is the Antigravity stand-in: its
prompt lines ``run: CMD`` run in the sandbox, so a turn can call ``hangar-agent`` as an agent
would."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from tests.e2e.conftest import Server
from tests.e2e.test_acceptance import IDENTITY
from tests.mcp.client import Mcp

pytestmark = [pytest.mark.sandbox, pytest.mark.e2e]

TOOLS = {"new_session", "list_sessions", "get_session", "open_session", "send_to_session",
         "keep_session", "suspend_session", "fork_session", "wait_for_turn", "get_artifact",
         "get_session_patch", "list_environments", "interrupt_session", "archive_session",
         "delete_session", "steer_session", "approve", "deny", "get_tree",
         "get_transcript"}  # fmt: skip
SCHEMA = {"type": "object", "properties": {"tests_added": {"type": "integer"}},
          "required": ["tests_added"]}  # fmt: skip
FIRST = "\n".join([
    "finish the csv fix",
    "run: hangar-agent progress --pct 40 'reading the code'",
    "run: echo '# Report' > report.md && hangar-agent artifact report.md",
    "run: mkdir -p data && printf '\\x00\\x01\\x02' > data/blob.bin && hangar-agent artifact data",
    "run: hangar-agent result '{\"tests_added\": 3}'",
    "run: hangar-agent done 'Added three tests.'",
])  # fmt: skip
ASK = "\n".join([
    "rename the columns",
    "run: hangar-agent question --option 'Keep them' --option 'Rename them' 'Keep the old names?'",
])  # fmt: skip
ANSWER = "Keep them\nrun: hangar-agent result '{\"tests_added\": 0}'\nrun: hangar-agent done 'Kept.'"
REFUSED = [{"$ref": "http://127.0.0.1:9/x.json"}, {"$ref": "file:///etc/hostname"},
           {"$ref": "other.json"}, {"$ref": "#/$defs/nope"}]  # fmt: skip
"""Schemas that refer outside themselves or to nothing in themselves: invalid_schema."""


def mcp_of(server: Server) -> Mcp:
    return Mcp(server.url, (server.data_dir / "admin-token").read_text().strip())


def test_mcp_checks_the_token_and_takes_only_posts(standin_server: Server) -> None:
    url = standin_server.url + "/mcp"
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    missing = httpx.post(url, json=body)
    assert missing.status_code == 401  # RFC 6750: the realm, and no error without a token
    assert missing.headers["www-authenticate"] == 'Bearer realm="hangar"'
    assert "Authorization: Bearer TOKEN" in missing.json()["error"]["message"]
    wrong = httpx.post(url, json=body, headers={"Authorization": "Bearer nope"})
    assert wrong.status_code == 401 and wrong.json()["error"]["code"] == "unauthorized"
    assert wrong.headers["www-authenticate"].startswith(
        'Bearer realm="hangar", error="invalid_token", error_description="')  # fmt: skip
    assert "Authorization: Bearer TOKEN" in wrong.json()["error"]["message"]
    token = {"Authorization": f"Bearer {mcp_of(standin_server).token}"}
    assert httpx.get(url, headers=token).status_code == 405
    with pytest.raises(Exception):
        Mcp(standin_server.url, "nope").tools()


def test_an_agent_over_mcp_lists_environments_interrupts_archives_and_deletes(
    standin_server: Server, remote: Path
) -> None:
    mcp = mcp_of(standin_server)
    standin_server.ok("env", "add", "app", "--repo", str(remote), *IDENTITY,
                      "--secret", "API_TOKEN=very-secret-value",
                      "--warm-pool-hours", "Mon-Fri 08:00-20:00 UTC")  # fmt: skip
    envs = mcp.ok("list_environments")["environments"]
    assert [(e["name"], e["repo"], e["secrets"], e["image"]) for e in envs] == [
        ("app", str(remote), ["API_TOKEN"], None)]  # fmt: skip
    assert [(e["warm_pool"], e["warm_pool_hours"]) for e in envs] == [
        (0, "Mon-Fri 08:00-20:00 UTC")]  # fmt: skip
    assert "very-secret-value" not in json.dumps(envs)

    mcp.ok("new_session", name="ex", message="wait-for: /tmp/never\nstuck", env="app",
           harness="antigravity")  # fmt: skip
    busy = mcp.call("delete_session", ref="ex")
    assert busy.is_error and busy.body["error"]["code"] == "session_busy", busy.body
    assert "interrupt it first" in busy.text
    deadline = time.monotonic() + 60
    while mcp.ok("get_session", ref="ex")["state"] != "active":  # its turn runs
        assert time.monotonic() < deadline, "the turn never started"
    for tool, more in (("steer_session", {}), ("send_to_session", {"if_idle": True})):
        busy = mcp.call(tool, ref="ex", message="more", **more)  # a one-shot turn runs
        assert busy.is_error and busy.body["error"]["code"] == "session_busy", busy.body
    ended = mcp.call("steer_session", ref="ex", message="more", expected_turn=2)
    assert ended.is_error and ended.body["error"]["code"] == "invalid_input", ended.body
    assert mcp.ok("interrupt_session", ref="ex")["turn"] == 1
    stopped = mcp.ok("wait_for_turn", ref="ex", timeout_seconds=120)
    assert (stopped["done"], stopped["outcome"]) == (True, "interrupted")
    idle = mcp.call("interrupt_session", ref="ex")
    assert idle.is_error and idle.body["error"]["code"] == "invalid_state"

    archived = mcp.ok("archive_session", ref="ex")
    assert archived["state"] == "archived" and archived["sandbox_id"] is None
    assert mcp.ok("delete_session", ref="ex") == {"deleted": "ex"}
    gone = mcp.call("get_session", ref="ex")
    assert gone.is_error and gone.body["error"]["code"] == "session_not_found"

    mcp.ok("new_session", name="ex2", message="wait-for: /tmp/never\nstuck", env="app",
           harness="antigravity")  # fmt: skip
    assert mcp.ok("delete_session", ref="ex2", force=True) == {"deleted": "ex2"}
    assert mcp.ok("list_sessions")["sessions"] == []
    # A start the delete overtook may still be making its sandbox: it removes it once made.
    deadline = time.monotonic() + 60
    while standin_server.sandboxes().list():
        assert time.monotonic() < deadline, "the overtaken start left its sandbox behind"
        time.sleep(0.1)


def test_every_tool_over_http_through_a_session_that_hands_work_back(
    standin_server: Server, remote: Path
) -> None:
    every_tool(mcp_of(standin_server), standin_server.ok, remote)


def every_tool(mcp: Mcp, ok: Callable[..., str], remote: Path) -> None:
    """Every tool through one session whose turns hand work back (the stand-in runs the
    turn's ``run:`` lines); ``ok`` runs the hangar CLI against the same deployment."""
    tools = mcp.tools()
    assert set(tools) == TOOLS
    assert all(t.input_schema["type"] == "object" and t.output_schema for t in tools.values())
    ok("env", "add", "app", "--repo", str(remote), *IDENTITY)

    bad = mcp.call("new_session", name="ex", message="x", env="app", harness="antigravity",
                   output_schema={"type": "nope"})  # fmt: skip
    assert bad.is_error and bad.body["error"]["code"] == "invalid_schema"
    assert bad.text.endswith("(invalid_schema)") and bad.body["error"]["message"] in bad.text
    for schema in REFUSED:
        bad = mcp.call("new_session", name="ex", message="x", env="app", harness="antigravity",
                       output_schema=schema)  # fmt: skip
        assert bad.is_error and bad.body["error"]["code"] == "invalid_schema", bad.body
    assert mcp.ok("list_sessions") == {"sessions": [], "next_cursor": None}  # nothing started
    unknown = mcp.call("get_session", ref="nope")
    assert unknown.is_error and unknown.body["error"]["code"] == "session_not_found"
    extra = mcp.call("get_session", ref="ex", surprise=1)
    assert extra.is_error and extra.body["error"]["code"] == "invalid_input"

    started = mcp.ok("new_session", name="ex", message=FIRST, env="app", harness="antigravity",
                     output_schema=SCHEMA)  # fmt: skip
    assert started["turn"] == 1 and started["session"]["output_schema"] == SCHEMA
    waited = mcp.call("wait_for_turn", ref="ex", timeout_seconds=120)
    assert not waited.is_error, waited.body
    assert len(waited.progress) >= 2, waited.progress
    assert [p for p, _ in waited.progress] == sorted(p for p, _ in waited.progress)
    assert any(m == "[40%] reading the code" for _, m in waited.progress), waited.progress
    out = waited.body
    assert (out["done"], out["outcome"], out["summary"]) == (True, "exited", "Added three tests.")
    assert (out["result"], out["result_error"]) == ({"tests_added": 3}, None)
    assert sorted((a["path"], a["uri"]) for a in out["artifacts"]) == [
        ("data/blob.bin", "hangar://sessions/ex/artifacts/1/data/blob.bin"),
        ("report.md", "hangar://sessions/ex/artifacts/1/report.md")]  # fmt: skip

    text = mcp.ok("get_artifact", ref="ex", turn=1, path="report.md")
    assert text == {"path": "report.md", "turn": 1, "size": 9, "encoding": "utf-8",
                    "content": "# Report\n"}  # fmt: skip
    binary = mcp.ok("get_artifact", ref="ex", turn=1, path="data/blob.bin")
    assert (binary["encoding"], binary["content"]) == ("base64", "AAEC")
    missing = mcp.call("get_artifact", ref="ex", turn=1, path="nope.txt")
    assert missing.is_error and missing.body["error"]["code"] == "artifact_not_found"
    assert set(mcp.resources()) >= {a["uri"] for a in out["artifacts"]}
    assert mcp.read("hangar://sessions/ex/artifacts/1/report.md") == b"# Report\n"
    assert mcp.read("hangar://sessions/ex/artifacts/1/data/blob.bin") == b"\x00\x01\x02"
    with pytest.raises(Exception):
        mcp.read("hangar://sessions/ex/artifacts/1/../../etc/passwd")

    page = mcp.ok("list_sessions", limit=1)
    assert [s["name"] for s in page["sessions"]] == ["ex"] and page["next_cursor"] is None
    [recent] = mcp.ok("list_sessions", order="activity")["sessions"]  # its change counted
    assert (recent["name"], recent["change"]) == ("ex", {"files": 2, "added": 1, "removed": 0})
    assert [s["name"] for s in mcp.ok("list_sessions", state="idle", prefix="e")["sessions"]] == ["ex"]
    assert mcp.ok("list_sessions", prefix="x")["sessions"] == []
    assert mcp.call("list_sessions", state="sleeping").is_error
    detail = mcp.ok("get_session", ref="ex")
    assert detail["turns"][0]["result"] == {"tests_added": 3}
    assert "+# Report" in mcp.ok("get_session_patch", ref="ex")["patch"]
    assert mcp.ok("keep_session", ref="ex", idle_minutes=0)["idle_minutes"] == 0

    conversation = detail["harness_session"]
    for schema in REFUSED:
        bad = mcp.call("send_to_session", ref="ex", message=ASK, output_schema=schema)
        assert bad.is_error and bad.body["error"]["code"] == "invalid_schema", bad.body
    assert mcp.ok("send_to_session", ref="ex", message=ASK)["turn"] == 2  # nothing started
    asked = mcp.ok("wait_for_turn", ref="ex", timeout_seconds=120)
    assert (asked["outcome"], asked["question"]) == ("needs_input", "Keep the old names?")
    assert asked["question_options"] == ["Keep them", "Rename them"]
    assert (asked["result"], asked["result_error"]) == (None, None)  # no repair for a question
    transcript = mcp.ok("get_transcript", ref="ex", turn=2)  # the same page as REST's
    assert transcript["events"][0] == {"kind": "message", "role": "user", "text": ASK,
                                       "context": []}  # fmt: skip
    assert transcript["events"][-1]["reason"] == "the agent asks: Keep the old names?"
    assert transcript["finished"] and not transcript["more"]
    printed = ok("session", "log", "ex", "--turn", "2", "--format", "events").splitlines()
    assert [json.loads(line) for line in printed] == transcript["events"]
    bad = mcp.call("get_transcript", ref="ex", cursor="nope")
    assert bad.is_error and bad.body["error"]["field"] == "cursor"
    waiting = mcp.ok("get_session", ref="ex")
    assert (waiting["state"], waiting["needs_input"]) == ("idle", "Keep the old names?")
    assert waiting["question_options"] == ["Keep them", "Rename them"]
    listed = json.loads(ok("session", "list", "--json"))["sessions"][0]
    assert listed["needs_input"] == "Keep the old names?"

    mcp.ok("send_to_session", ref="ex", message=ANSWER)
    answered = mcp.ok("wait_for_turn", ref="ex", timeout_seconds=120)
    assert (answered["outcome"], answered["result"]) == ("exited", {"tests_added": 0})
    after = mcp.ok("get_session", ref="ex")
    assert (after["needs_input"], after["question_options"]) == (None, [])
    assert after["harness_session"] == conversation  # the same conversation answered

    assert mcp.ok("suspend_session", ref="ex")["state"] == "suspended"
    forks = mcp.ok("fork_session", ref="ex", n=1)["sessions"]
    assert [f["state"] for f in forks] == ["starting"]
    reopened = mcp.ok("open_session", ref="ex")
    assert reopened["state"] in ("starting", "idle")
    assert mcp.read("hangar://sessions/ex/artifacts/1/report.md") == b"# Report\n"  # outlives
