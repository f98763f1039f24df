"""The agent's side of the exchange with the real Claude Code and the model stub, through MCP
against ``hangar serve``: the stub's turns call ``hangar-agent`` from Claude Code's own shell
tool, as an agent told about ``$HANGAR_IO`` would."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from emulators.model import ModelStub
from tests.e2e.conftest import Server, _server
from tests.e2e.test_acceptance import MODELS, add_env
from tests.harness.conftest import harness_dir
from tests.mcp.client import Mcp

pytestmark = [pytest.mark.sandbox, pytest.mark.e2e, pytest.mark.harness]

SECRET = "sk-ant-api03-abcdefghijklmnopqrstuvwx"
SCHEMA = {"type": "object", "properties": {"tests_added": {"type": "integer"}},
          "required": ["tests_added"], "additionalProperties": False}  # fmt: skip
COUNT = {"type": "object", "properties": {"count": {"type": "integer"}}, "required": ["count"]}
SCENARIO = {
    "rules": [  # repair prompts first: they quote why the result was not usable
        {"when": "does not match the schema", "steps": [
            {"shell": "hangar-agent result '{\"count\": 2}'"}, {"text": "Fixed the result."}]},
        {"when": "no out/result.json was handed back", "steps": [{"text": "Still no result."}]},
        {"when": "CSV-FIX", "steps": [
            {"shell": "hangar-agent progress --pct 20 'reading the code'"},
            {"shell": "hangar-agent progress --pct 70 'writing the tests'", "delay": 2},
            {"shell": f"echo 'token {SECRET} in the log' > run.log && hangar-agent artifact "
                      "run.log && head -c 1500000 /dev/urandom > \"$HANGAR_IO/out/artifacts/"
                      "big.bin\" && hangar-agent result '{\"tests_added\": 3}' && "
                      "hangar-agent done 'Added three tests.'"},
            {"text": "All done."}]},
        {"when": "COLUMNS", "steps": [
            {"shell": "hangar-agent question --option 'Keep them' --option 'Rename them' "
                      "'Keep the old column names?'"},
            {"text": "I need a decision."}]},
        {"when": "Keep them", "steps": [
            {"shell": "hangar-agent result '{\"tests_added\": 0}'"}, {"text": "Kept them."}]},
        {"when": "BAD-RESULT", "steps": [
            {"shell": "hangar-agent result '{\"count\": \"many\"}'"}, {"text": "Counted."}]},
        {"when": "NO-RESULT", "steps": [{"text": "Nothing to report."}]},
    ],
    "models": [MODELS["claude"]],
}  # fmt: skip


@pytest.fixture
def stub() -> Iterator[ModelStub]:
    with ModelStub(SCENARIO) as running:
        yield running


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    yield from _server(tmp_path / "data", harness_dir(), HANGAR_EXCHANGE_MAX_ARTIFACT_MB="1")


def test_a_turn_hands_back_progress_a_checked_result_artifacts_and_a_question(
    server: Server, remote: Path, stub: ModelStub
) -> None:
    add_env(server, remote, stub)
    mcp = Mcp(server.url, (server.data_dir / "admin-token").read_text().strip())
    mcp.ok("new_session", name="csv", message="CSV-FIX: finish this and add tests", env="app",
           harness="claude", model=MODELS["claude"], output_schema=SCHEMA)  # fmt: skip
    waited = mcp.call("wait_for_turn", ref="csv", timeout_seconds=300)
    out = waited.body
    assert (out["done"], out["outcome"]) == (True, "exited"), out
    messages = [m for _, m in waited.progress]
    assert "[20%] reading the code" in messages and "[70%] writing the tests" in messages
    assert (out["summary"], out["result"], out["result_error"]) == (
        "Added three tests.", {"tests_added": 3}, None)  # fmt: skip
    assert [a["path"] for a in out["artifacts"]] == ["run.log"]
    log = mcp.ok("get_artifact", ref="csv", turn=1, path="run.log")["content"]
    assert SECRET not in log and "[redacted]" in log
    assert SECRET.encode() not in mcp.read("hangar://sessions/csv/artifacts/1/run.log")
    turn = mcp.ok("get_session", ref="csv")["turns"][0]
    assert any("big.bin" in w and "cap" in w for w in turn["warnings"]), turn["warnings"]
    assert turn["artifacts"] == [{"path": "run.log", "size": len(log), "redacted": True}]
    conversation = mcp.ok("get_session", ref="csv")["harness_session"]

    mcp.ok("send_to_session", ref="csv", message="COLUMNS: rename the columns")
    asked = mcp.ok("wait_for_turn", ref="csv", timeout_seconds=300)
    assert (asked["outcome"], asked["question"]) == ("needs_input", "Keep the old column names?")
    assert asked["question_options"] == ["Keep them", "Rename them"]
    assert asked["result_error"] is None  # a question gets no repair turn
    mcp.ok("suspend_session", ref="csv")  # the question survives a suspend
    assert mcp.ok("get_session", ref="csv")["needs_input"] == "Keep the old column names?"
    mcp.ok("send_to_session", ref="csv", message="Keep them")
    answered = mcp.ok("wait_for_turn", ref="csv", timeout_seconds=300)
    assert (answered["outcome"], answered["result"]) == ("exited", {"tests_added": 0})
    after = mcp.ok("get_session", ref="csv")
    assert (after["needs_input"], after["harness_session"]) == (None, conversation)
    assert "Keep the old column names?" in stub.requests("anthropic")[-1]["body"].__repr__()

    mcp.ok("send_to_session", ref="csv", message="BAD-RESULT: count them", output_schema=COUNT)
    repaired = mcp.ok("wait_for_turn", ref="csv", timeout_seconds=300)
    assert (repaired["result"], repaired["result_error"]) == ({"count": 2}, None), repaired
    turn = mcp.ok("get_session", ref="csv")["turns"][3]
    assert "does not match the schema" in turn["repair"]["reason"] and turn["repair_usage"]

    mcp.ok("send_to_session", ref="csv", message="NO-RESULT: count again")  # inherits COUNT
    failed = mcp.ok("wait_for_turn", ref="csv", timeout_seconds=300)
    assert failed["outcome"] == "exited" and failed["result"] is None
    assert "no out/result.json" in failed["result_error"] and "repair" in failed["result_error"]
