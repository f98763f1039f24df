"""A session's page with the real Claude Code against the model stub, in headless Chromium
against a real hangar serve: the conversation of a real turn with a tool call (also once its
sandbox is gone), and Approve, Deny, Steer and Stop acting on a live turn."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

from emulators.model import ModelStub
from tests.dashboard.conftest import api, screenshot, sign_in
from tests.e2e.conftest import Server, _server
from tests.e2e.test_acceptance import MODELS, add_env, until
from tests.harness.test_live_turns import GO, HOLD, STARTED, STEER

pytestmark = [pytest.mark.sandbox, pytest.mark.e2e, pytest.mark.harness]

SCENARIO = {
    "rules": [
        {"when": "start the notes", "steps": [
            {"shell": "echo one > notes.txt && git add notes.txt && git commit -qm 'start notes' "
                      "&& echo NOTES-COMMITTED"},
            {"text": "Notes started."}]},
        {"when": "steer-words", "steps": [{"text": "Steered and done."}]},
        {"when": "held turn", "steps": [{"shell": HOLD}, {"text": "Held turn done."}]},
    ],
    "models": [MODELS["claude"]],
}  # fmt: skip


@pytest.fixture(scope="module")
def stub() -> Iterator[ModelStub]:
    with ModelStub(SCENARIO) as running:
        yield running


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, module_remote: Path,
           stub: ModelStub) -> Iterator[Server]:  # fmt: skip
    """One hangar serve with the real harness CLIs for the module, the environment ``app``
    pointing them at the model stub."""
    from tests.harness.conftest import harness_dir

    root = tmp_path_factory.mktemp("live")
    for running in _server(root / "data", harness_dir()):
        add_env(running, module_remote, stub)
        yield running



def test_the_conversation_of_a_real_claude_code_turn_shows_its_tool_call_and_outlives_the_sandbox(
    server: Server, page: Page
) -> None:
    server.ok("session", "new", "notes", "start the notes", "--env", "app", "--harness",
              "claude", "--model", MODELS["claude"], "-w")  # fmt: skip
    sign_in(page, server)
    page.goto(server.url + "/sessions/notes")
    turn = page.locator("#transcript [data-transcript='1']")
    expect(turn).to_have_attribute("open", "")  # the latest turn is open by itself
    expect(turn.locator(".msg.user")).to_contain_text("start the notes")
    tool = turn.locator(".tool[data-tool='Bash']")
    expect(tool.locator(".tool-input")).to_contain_text("echo one > notes.txt")
    result = tool.locator("details.tool-result")
    expect(result).not_to_have_attribute("open", "")  # collapsed until asked
    expect(result.locator("summary")).to_have_text("Result")
    result.locator("summary").click()
    expect(result.locator(".tool-output")).to_contain_text("NOTES-COMMITTED")
    expect(turn.locator(".msg.assistant").last).to_contain_text("Notes started.")
    expect(turn.locator(".outcome")).to_contain_text("exited")
    expect(turn.locator(".outcome")).to_contain_text("took")
    expect(turn.locator(".usage")).to_contain_text("tokens in")
    expect(page.locator("[data-turn='1']")).to_contain_text("tokens in")
    assert "hangar-exchange" not in page.content()
    screenshot(page, "session.png")

    # Readable after its sandbox is gone: from the stored log.
    server.ok("session", "suspend", "notes")
    page.reload()
    expect(page.locator("#state-badge")).to_have_text("suspended")
    expect(turn.locator(".tool[data-tool='Bash'] .tool-input")).to_contain_text("echo one")
    expect(turn.locator(".msg.assistant").last).to_contain_text("Notes started.")


def sandbox_has(server: Server, path: str) -> bool:
    box = server.sandboxes()
    return any(box.exec(s.id, ["test", "-e", path]).ok for s in box.list())


def test_approve_deny_steer_and_stop_act_on_a_live_claude_code_turn(
    server: Server, page: Page
) -> None:
    server.ok("session", "new", "live", "held turn: run the long job", "--env", "app",
              "--harness", "claude", "--model", MODELS["claude"], "--permission-mode", "ask")  # fmt: skip
    sign_in(page, server)
    page.goto(server.url + "/sessions/live")

    # The command waits for a person: its summary, Approve and Deny.
    approval = page.locator("[data-approval]")
    expect(approval).to_contain_text("Turn 1 asks to use Bash", timeout=240_000)
    expect(approval).to_contain_text(STARTED)
    expect(approval.get_by_role("button", name="Deny")).to_be_enabled()
    expect(page.locator("#status")).to_contain_text("needs approval")
    page.goto(server.url + "/")  # the list says so too, with the approval's summary
    badge = page.locator("[data-session=live] .needs-approval")
    expect(badge).to_have_text("needs approval")
    expect(badge).to_have_attribute("title", re.compile("Bash"))
    page.goto(server.url + "/sessions/live")
    approval.get_by_role("button", name="Approve").click()
    until(lambda: sandbox_has(server, STARTED), 120)
    expect(approval).to_have_count(0)

    # The conversation follows the running turn: its tool call shows while it runs.
    running = page.locator("#transcript [data-transcript='1']")
    expect(running.locator(".tool[data-tool='Bash'] .tool-input")).to_contain_text(STARTED)
    expect(running.locator(".transcript-status")).to_have_text("the turn is running…")

    # While the turn runs: Steer tells the agent in the same turn.
    live = page.locator("#live-turn")
    expect(live).to_contain_text("Turn 1 is running")
    page.get_by_label("Steer").fill(STEER)
    live.get_by_role("button", name="Steer").click()
    expect(page.get_by_role("alert")).to_be_hidden()
    [sandbox] = server.sandboxes().list()
    server.sandboxes().exec(sandbox.id, ["touch", GO])
    expect(page.locator("[data-turn='1']")).to_contain_text("Steered and done.", timeout=120_000)
    expect(live).to_be_hidden()
    # The conversation shows the steer as the person's message, labelled, in its place.
    steered = running.locator(".msg.user.steer")
    expect(steered.locator(".text")).to_have_text([STEER])
    expect(steered.locator(".steer-label")).to_have_text("steer")
    expect(running.locator(".events-list > .msg .text").last).to_have_text("Steered and done.")
    assert running.locator(".events-list > .msg .text").all_text_contents()[-2:] == [
        STEER, "Steered and done."]
    expect(running.locator(".outcome")).to_contain_text("exited")
    expect(running.locator(".transcript-status")).to_have_text("")

    # Deny: the command never runs, the agent is told and ends its turn.
    server.sandboxes().exec(sandbox.id, ["rm", "-f", STARTED, GO])
    page.get_by_label("Message").fill("held turn: again")
    page.get_by_role("button", name="Send").click()
    expect(approval).to_contain_text("Turn 2 asks to use Bash", timeout=120_000)
    # A reason typed beside Deny keeps its focus and text through the page's re-read (every
    # 2 s while the turn runs), and goes with the denial as its message.
    reason = approval.get_by_role("textbox", name=re.compile("Reason to deny"))
    reason.fill("use the make target instead")
    with page.expect_response(lambda r: r.url.endswith("/api/sessions/live")):
        pass
    expect(reason).to_be_focused()
    expect(reason).to_have_value("use the make target instead")
    with page.expect_request(lambda r: "/approvals/" in r.url) as decided:
        approval.get_by_role("button", name="Deny").click()
    assert decided.value.post_data_json == {"decision": "deny", "message": "use the make target instead"}
    expect(page.locator("[data-turn='2']")).to_contain_text("Held turn done.", timeout=120_000)
    assert not sandbox_has(server, STARTED)

    # Stop: a running turn ends interrupted, and the badge says so.
    api(server, "POST", "/api/sessions/live/send",
        json={"message": "held turn: once more", "permission_mode": "auto"})
    until(lambda: sandbox_has(server, STARTED), 120)
    page.reload()  # an idle page reads the session every 10 s: sooner
    expect(live).to_contain_text("Turn 3 is running")
    live.get_by_role("button", name="Stop").click()
    expect(page.locator("[data-turn='3']")).to_contain_text("interrupted", timeout=120_000)
    expect(page.locator("#state-badge")).to_have_text("turn 3 interrupted")
