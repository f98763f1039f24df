"""A session's page says honestly what happened, in headless Chromium against a real hangar
serve whose agent is the Antigravity stand-in: a failed turn shows as failed with its reason
(never hangar's own prompt text), the agent's question offers its answers as buttons that send
them, usage is in words, "restored from" is a property of its checkpoint, an unknown session
is a not-found page without controls, and the page fits a 360 px screen."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import parse_qs, urlparse

import pytest
from playwright.sync_api import Page, Route, expect

from tests.dashboard.conftest import WAIT_MS, api, sign_in
from tests.e2e.conftest import Server
from tests.e2e.test_acceptance import IDENTITY, until

pytestmark = [pytest.mark.sandbox, pytest.mark.e2e]


@pytest.fixture(scope="module")
def server(module_server: Server, module_remote: Path) -> Server:
    """The module's server, with an environment whose agent fails every turn too (the stand-in
    exits 3 with a message on standard error)."""
    module_server.ok("env", "add", "failing", "--repo", str(module_remote), *IDENTITY, "--var",
                     "AGY_STANDIN_EXIT=3")  # fmt: skip
    return module_server


def new(server: Server, name: str, message: str, env: str = "app") -> None:
    server.cli("session", "new", name, message, "--env", env, "--harness", "antigravity", "-w")



def test_a_failed_turn_shows_as_failed_with_its_reason_and_never_hangars_prompt_text(
    server: Server, page: Page
) -> None:
    new(server, "broken", "fix the build", env="failing")
    sign_in(page, server)
    page.goto(server.url + "/sessions/broken")
    badge = page.locator("#state-badge")
    expect(badge).to_have_text("turn 1 failed")
    expect(page.locator("#turn-failed")).to_contain_text(
        "Turn 1 failed: antigravity exited with status 3: agy: the model service refused the request")
    expect(page.locator("[data-turn='1']")).to_contain_text("failed")
    assert "hangar-exchange" not in page.content()
    assert "hangar-agent" not in page.locator("main").inner_text()


def test_the_agents_question_offers_its_answers_as_buttons_that_send_the_answer(
    server: Server, page: Page
) -> None:
    new(server, "asks", "run: hangar-agent question --option 'ship it' --option 'hold' 'Ship it?'")
    sign_in(page, server)
    page.clock.install()  # the page's own timers, run on when the test says
    page.goto(server.url + "/sessions/asks")
    question = page.locator("#question")
    expect(question).to_contain_text("The agent asks: Ship it?")
    expect(question.get_by_role("button")).to_have_count(2)
    # A keyboard user's focus on an answer survives the page's re-read (every 10 s when idle).
    question.get_by_role("button", name="hold").focus()
    with page.expect_response(lambda r: r.url.endswith("/api/sessions/asks")):
        page.clock.fast_forward(10_500)
    expect(question.get_by_role("button", name="hold")).to_be_focused()
    question.get_by_role("button", name="ship it").click()
    turn = page.locator("[data-turn='2']")
    expect(turn).to_contain_text("ship it")
    expect(turn).to_contain_text("exited", timeout=WAIT_MS)  # the turn runs meanwhile
    expect(page.locator("#question")).to_have_count(0)
    # Usage in words, from the stand-in's 10 tokens in and 5 out.
    expect(turn).to_contain_text("10 tokens in, 5 out")

    # The conversation: the latest turn open; an earlier one read only once it is opened.
    latest = page.locator("#transcript [data-transcript='2']")
    expect(latest).to_have_attribute("open", "")
    expect(latest.locator(".msg.user .text")).to_have_text("ship it")
    asked: list[str] = []
    page.on("request", lambda r: asked.append(r.url) if "format=events" in r.url else None)
    page.reload()
    earlier = page.locator("#transcript [data-transcript='1']")
    expect(latest.locator(".outcome")).to_contain_text("exited")
    expect(earlier).not_to_have_attribute("open", "")
    assert not [url for url in asked if "turn=1&" in url]
    earlier.locator("summary").click()
    expect(earlier.locator(".msg.user")).to_contain_text("hangar-agent question")
    expect(earlier.locator(".outcome")).to_contain_text("needs input: the agent asks: Ship it?")
    assert [url for url in asked if "turn=1&" in url]


def test_a_long_conversation_is_read_page_after_page(server: Server, page: Page) -> None:
    """The page reads on while the answer says ``more`` (the server's pages stood in for, so
    that a few events make several pages)."""
    new(server, "long", "write a note")
    pages = {
        "": ([{"kind": "message", "role": "user", "text": "write a note", "context": ["spec.md"]}], "p1", True),
        "p1": ([{"kind": "tool_call", "id": "t1", "name": "Bash", "input": {"command": "ls"}}], "p2", True),
        "p2": ([{"kind": "tool_result", "id": "t1", "output": "README.md", "error": False, "cut": True},
                {"kind": "message", "role": "assistant", "text": "Written.", "context": []}], "p3", False),
    }  # fmt: skip
    cursors: list[str] = []

    def answer(route: Route) -> None:
        cursor = parse_qs(urlparse(route.request.url).query).get("cursor", [""])[0]
        cursors.append(cursor)
        events, after, more = pages[cursor]
        route.fulfill(json={"turn": 1, "harness": "antigravity", "finished": True,
                            "events": events, "next_cursor": after, "more": more})  # fmt: skip

    page.route("**/api/sessions/long/log?*", answer)
    sign_in(page, server)
    page.goto(server.url + "/sessions/long")
    turn = page.locator("#transcript [data-transcript='1']")
    expect(turn.locator(".msg.assistant")).to_contain_text("Written.")
    expect(turn.locator(".msg.user .context")).to_have_text("With: spec.md")
    result = turn.locator(".tool[data-tool='Bash'] details.tool-result")
    expect(result.locator("summary")).to_have_text("Result (cut)")
    assert cursors == ["", "p1", "p2"]


def test_an_unknown_session_is_a_not_found_page_without_controls(
    server: Server, page: Page
) -> None:
    sign_in(page, server)
    expect(page.locator("#sessions")).to_be_visible()
    page.goto(server.url + "/sessions/no-such-session")
    expect(page.get_by_role("heading", name="Session not found")).to_be_visible()
    expect(page.locator("#not-found")).to_contain_text("session_not_found")
    expect(page.locator("main button, main input, main textarea")).to_have_count(0)
    page.get_by_role("link", name="Back to the sessions").click()
    expect(page.locator("#sessions")).to_be_visible()


def overflow(page: Page) -> int:
    """How far the page runs off the right of the screen, in pixels."""
    return int(page.evaluate("document.documentElement.scrollWidth - window.innerWidth"))


def test_at_360_px_the_page_fits_the_screen_restored_from_is_on_its_checkpoint_and_the_terminal_is_full_width(
    server: Server, page: Page
) -> None:
    new(server, "narrow", "run: echo kept > kept.txt && git add kept.txt && git commit -qm "
        "'a commit message long enough to need wrapping on a narrow phone screen'")
    server.ok("session", "suspend", "narrow")
    server.ok("session", "open", "narrow")
    until(lambda: api(server, "GET", "/api/sessions/narrow")["state"] == "idle")
    restored = api(server, "GET", "/api/sessions/narrow")
    used = restored["restored_from"]
    assert used
    page.set_viewport_size({"width": 360, "height": 780})
    sign_in(page, server)
    page.goto(server.url + "/sessions/narrow")
    checkpoint = page.locator(f"[data-checkpoint='{used}']")
    expect(checkpoint.locator("[data-label='Restore']")).to_have_text(
        "its sandbox was restored from this one")
    expect(checkpoint.locator("[data-label='Warnings']")).not_to_contain_text("restored")
    expect(page.locator("[data-turn='1']")).to_contain_text("exited")
    assert overflow(page) <= 0

    page.get_by_role("button", name="Shell").click()
    expect(page.locator("#terminal .xterm-rows")).to_contain_text("$", timeout=60_000)
    box = page.locator("#terminal").bounding_box()
    assert box is not None and box["width"] >= 350, box
    assert overflow(page) <= 0
