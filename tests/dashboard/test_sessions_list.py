"""The Sessions list and the app around it, in headless Chromium against a real hangar serve:
the most recently active first, with each row's harness, a running turn's live dot and progress
line, what needs the person and the change's size; usable at 360 px; a favicon."""

from __future__ import annotations


import httpx
import pytest
from playwright.sync_api import Browser, Page, expect

from hangar.dashboard import POLICY
from tests.dashboard.conftest import WAIT_MS, api, screenshot, sign_in
from tests.e2e.conftest import Server
from tests.e2e.test_acceptance import until

pytestmark = [pytest.mark.sandbox, pytest.mark.e2e]

HOLD = "hold-the-turn-here"



def new(server: Server, name: str, message: str) -> None:
    server.ok("session", "new", name, message, "--env", "app", "--harness", "antigravity", "-w")


@pytest.fixture(scope="module")
def sessions(module_server: Server) -> Server:
    """Three sessions: early-job (made first, with a commit, then running a turn that waits),
    asking-job (asked a question) and late-job (made last)."""
    server = module_server
    new(server, "early-job", "run: echo one > one.txt && git add one.txt && git commit -qm one")
    new(server, "asking-job", "plan the storage\nrun: hangar-agent ask 'SQLite or Postgres?'")
    new(server, "late-job", "write a note")
    # Its next turn says how it goes, then holds (the stand-in waits on a prompt with HOLD).
    server.ok("env", "update", "app", "--var", f"AGY_STANDIN_HANG_ON={HOLD}")
    server.ok("session", "send", "early-job",
              f"run: hangar-agent progress 'Reading the storage code'\n{HOLD}")  # fmt: skip
    until(lambda: api(server, "GET", "/api/sessions/early-job")["progress"] is not None, 60)
    return server


def test_the_list_puts_the_most_recently_active_first_and_says_what_runs_and_needs_you(
    sessions: Server, page: Page
) -> None:
    server = sessions
    sign_in(page, server)
    rows = page.locator("#sessions tbody tr")
    expect(rows).to_have_count(3)
    # early-job was made first, but it has the newest activity: a running turn.
    assert [rows.nth(i).locator("td").first.inner_text() for i in range(3)] == [
        "early-job", "late-job", "asking-job"]
    expect(page.locator("p[aria-live]").first).to_contain_text("3 sessions shown, most recently active first")

    early = page.locator("[data-session=early-job]")
    expect(early.locator("td.harness")).to_have_text("antigravity")
    expect(early.locator(".state.active")).to_be_visible()
    expect(early.get_by_role("img", name="a turn is running")).to_be_visible()
    progress = api(server, "GET", "/api/sessions/early-job")["progress"]
    expect(early.locator(".progress-line")).to_have_text(progress)
    change = api(server, "GET", "/api/sessions/early-job")["change"]
    assert change == {"files": 1, "added": 1, "removed": 0}
    expect(early.locator("td.change")).to_have_text("1 file +1 -0")

    asking = page.locator("[data-session=asking-job]")
    expect(asking.locator(".needs-input")).to_have_text("needs input")
    expect(asking.locator(".live")).to_have_count(0)
    # "needs approval" with a real live turn: tests/dashboard/test_session_page_live.py
    expect(page.locator(".needs-approval")).to_have_count(0)
    expect(page.locator(".progress-line")).to_have_count(1)
    screenshot(page, "sessions.png")


def narrow(browser: Browser, server: Server) -> Page:
    """A phone-sized page, signed in (its sign-in form checked to fit), showing the list."""
    context = browser.new_context(viewport={"width": 360, "height": 740})
    context.set_default_timeout(WAIT_MS)
    page = context.new_page()
    page.goto(server.url + "/")
    expect(page.get_by_label("Token")).to_be_visible()
    assert fits(page), "the sign-in form runs off the screen"
    sign_in(page, server)
    expect(page.locator("#sessions tbody tr")).to_have_count(3)
    return page


def fits(page: Page) -> bool:
    return bool(page.evaluate("document.documentElement.scrollWidth <= window.innerWidth"))


def test_at_360_px_the_list_is_cards_and_no_page_runs_off_the_screen(
    sessions: Server, browser: Browser
) -> None:
    page = narrow(browser, sessions)
    expect(page.locator("#sessions thead th").first).not_to_be_in_viewport()
    card = page.locator("[data-session=early-job]")
    box = card.bounding_box()
    assert box is not None and box["width"] <= 360
    expect(card.locator("td.repo")).to_have_css("display", "block")
    assert fits(page), page.evaluate("document.documentElement.scrollWidth")
    screenshot(page, "sessions-narrow.png")

    page.get_by_role("link", name="New session").click()
    expect(page.get_by_label("Message")).to_be_visible()
    assert fits(page)
    page.get_by_role("link", name="Sessions").click()
    page.get_by_role("link", name="Environments").click()
    page.get_by_role("button", name="Edit app").click()
    expect(page.locator("#environment-form")).to_be_visible()
    assert fits(page)
    page.context.close()


def test_the_new_pages_and_the_favicon_are_served_under_the_policy_and_the_icon_is_linked(
    module_server: Server,
) -> None:
    for path in ("/new", "/environments", "/favicon.ico", "/static/newsession.js"):
        answer = httpx.get(module_server.url + path)
        assert answer.status_code == 200, path
        assert answer.headers["content-security-policy"] == POLICY, path
    icon = httpx.get(module_server.url + "/favicon.ico")
    assert icon.headers["content-type"] == "image/x-icon"
    assert icon.content[:4] == b"\x00\x00\x01\x00"  # an ICO header
    html = httpx.get(module_server.url + "/").text
    assert '<link rel="icon" href="/favicon.ico"' in html
    svg = httpx.get(module_server.url + "/static/favicon.svg")
    assert svg.status_code == 200 and svg.headers["content-type"].startswith("image/svg+xml")
