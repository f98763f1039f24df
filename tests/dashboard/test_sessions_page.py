"""The dashboard as a person uses it, in headless Chromium against a real hangar serve: signing
in, the Sessions list, a session's page, its actions and its terminal."""

from __future__ import annotations

import json
import re
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import Page, expect

from emulators.model import ModelStub
from hangar.dashboard import POLICY
from tests.dashboard.conftest import api, sign_in
from tests.e2e.conftest import STANDIN_SETTINGS, Server, _server, standin_harnesses
from tests.e2e.test_acceptance import IDENTITY, add_env, until

pytestmark = [pytest.mark.sandbox, pytest.mark.e2e]


def new(server: Server, name: str, message: str, *extra: str) -> None:
    server.ok("session", "new", name, message, "--env", "app", "--harness", "antigravity", "-w",
              *extra)  # fmt: skip



def test_signing_in_lists_the_sessions_made_through_the_api_newest_first_with_their_states(
    standin_server: Server, remote: Path, page: Page
) -> None:
    server = standin_server
    add_env(server, remote)
    new(server, "first-job", "write the first note")
    new(server, "second-job", "plan the storage\nrun: hangar-agent ask 'SQLite or Postgres?'")
    new(server, "third-job", "write the third note")
    server.ok("session", "suspend", "first-job")

    sign_in(page, server)
    rows = page.locator("#sessions tbody tr")
    expect(rows).to_have_count(3)
    names = [rows.nth(i).locator("td").first.inner_text() for i in range(3)]
    assert names == ["third-job", "second-job", "first-job"]
    expect(page.get_by_role("row", name=re.compile("first-job"))).to_contain_text("suspended")
    expect(page.get_by_role("row", name=re.compile("third-job"))).to_contain_text("idle")
    expect(page.get_by_role("row", name=re.compile("third-job"))).to_contain_text("write the third note")
    expect(page.get_by_role("row", name=re.compile("third-job"))).to_contain_text("s ago")
    asking = page.get_by_role("row", name=re.compile("second-job"))
    expect(asking.locator(".needs-input")).to_have_text("needs input")
    expect(page.locator(".needs-input")).to_have_count(1)

    # The filters narrow the list (the API's state and prefix), and say so in the address.
    page.get_by_label("State").select_option("suspended")
    expect(rows).to_have_count(1)
    expect(rows.first).to_contain_text("first-job")
    assert "state=suspended" in page.url
    page.get_by_label("State").select_option("")
    page.get_by_label("Name prefix").fill("sec")
    expect(rows).to_have_count(1)
    expect(rows.first).to_contain_text("second-job")

    page.get_by_label("Name prefix").fill("zzz")  # none: words, not an empty table
    expect(page.get_by_text("No session matches.")).to_be_visible()
    expect(page.locator("#sessions")).to_be_hidden()

    # A row's name opens its page.
    page.get_by_label("Name prefix").fill("")
    expect(rows).to_have_count(3)
    page.get_by_role("link", name="second-job").click()
    expect(page.get_by_role("heading", name="second-job")).to_be_visible()
    assert page.url.endswith("/sessions/second-job")


def test_a_wrong_token_shows_the_error_and_no_data(
    standin_server: Server, remote: Path, page: Page
) -> None:
    server = standin_server
    add_env(server, remote)
    new(server, "secret-work", "write a note")
    sign_in(page, server, token="not-a-token")
    alert = page.get_by_role("alert")
    expect(alert).to_contain_text("That token was refused: the bearer token is not valid")
    expect(alert).to_contain_text("unauthorized")
    expect(page.get_by_label("Token")).to_be_visible()
    assert "secret-work" not in page.content()
    assert page.evaluate("sessionStorage.length") == 0
    # The token is never in an address: not the page's, not a request's.
    assert "not-a-token" not in page.url


def test_the_page_and_its_assets_are_served_with_a_strict_content_security_policy(
    standin_server: Server,
) -> None:
    for path in ("/", "/sessions/anything", "/static/app.js", "/static/vendor/xterm.js"):
        answer = httpx.get(standin_server.url + path)
        assert answer.status_code == 200, path
        assert answer.headers["content-security-policy"] == POLICY
        assert answer.headers["x-content-type-options"] == "nosniff"
    assert "script-src 'self'" in POLICY and "unsafe-eval" not in POLICY
    assert re.search(r"style-src 'self' 'unsafe-inline'", POLICY)
    assert httpx.get(standin_server.url + "/static/nope.js").status_code == 404
    # The page loads nothing from anywhere else.
    html = httpx.get(standin_server.url + "/").text
    assert "http://" not in html and "https://" not in html
    assert json.loads(httpx.get(standin_server.url + "/api/sessions").text)["error"]["code"] == "unauthorized"


def test_suspend_then_resume_restores_the_session_and_the_idle_control_sets_its_idle_time(
    standin_server: Server, remote: Path, page: Page
) -> None:
    server = standin_server
    add_env(server, remote)
    new(server, "notes", "run: echo kept > kept.txt && git add kept.txt && git commit -qm 'add kept'")
    sign_in(page, server)
    page.get_by_role("link", name="notes").click()
    status = page.locator("#status")
    expect(status).to_contain_text("idle")
    expect(page.locator("#turns tbody tr")).to_have_count(1)

    page.get_by_role("button", name="Suspend").click()
    expect(status).to_contain_text("suspended")
    assert api(server, "GET", "/api/sessions/notes")["sandbox_id"] is None
    page.get_by_role("button", name="Resume").click()
    expect(status).to_contain_text("idle", timeout=120_000)
    restored = api(server, "GET", "/api/sessions/notes")
    assert restored["restored_from"] == restored["checkpoints"][-1]["id"]
    expect(page.locator(f"[data-checkpoint='{restored['restored_from']}']")).to_contain_text(
        "restored from this one")

    page.get_by_label("Idle minutes").fill("45")
    page.get_by_role("button", name="Save").click()
    expect(page.locator(".facts")).to_contain_text("45")
    assert api(server, "GET", "/api/sessions/notes")["idle_minutes"] == 45
    page.get_by_label("Idle minutes").fill("0")
    page.get_by_role("button", name="Save").click()
    expect(page.locator(".facts")).to_contain_text("0 (kept up)")
    assert api(server, "GET", "/api/sessions/notes")["idle_minutes"] == 0

    # A refused value shows the API's message and code, and changes nothing.
    page.get_by_label("Idle minutes").fill("999999")
    page.get_by_role("button", name="Save").click()
    expect(page.get_by_role("alert")).to_contain_text("invalid_input")
    assert api(server, "GET", "/api/sessions/notes")["idle_minutes"] == 0


def test_a_message_sent_while_a_turn_runs_shows_the_busy_answer_and_the_page_follows_the_turn(
    standin_server: Server, remote: Path, page: Page
) -> None:
    server = standin_server
    add_env(server, remote)
    new(server, "busy", "write a note")
    sign_in(page, server)
    page.goto(server.url + "/sessions/busy")
    expect(page.locator("#turns tbody tr")).to_have_count(1)

    page.get_by_label("Message").fill("run: hangar-agent progress --pct 40 'halfway there'\n"
                                      "wait-for: /tmp/release")
    page.get_by_role("button", name="Send").click()
    turn = page.locator("[data-turn='2']")
    expect(turn).to_contain_text("running")
    expect(page.locator("#status")).to_contain_text("active")
    # The agent's progress line, under the state while the turn runs.
    expect(page.locator("#progress")).to_contain_text("Progress of turn 2: 40% halfway there")
    page.get_by_label("Message").fill("and another thing")
    page.get_by_role("button", name="Send").click()
    expect(page.get_by_role("alert")).to_contain_text("session_busy")
    assert api(server, "GET", "/api/sessions/busy")["turn_count"] == 2
    # The agent is busy with its turn: talking to it here waits, and the page says why.
    page.get_by_role("button", name="Talk to the agent here").click()
    expect(page.get_by_role("alert")).to_contain_text("is running a turn")

    api(server, "POST", "/api/sessions/busy/exec", json={"argv": ["touch", "/tmp/release"]})
    # Without a reload: the turn's end, its summary and the state come in by themselves.
    expect(turn).to_contain_text("exited")
    expect(turn).to_contain_text("Seen 2 earlier messages")
    expect(page.locator("#status")).to_contain_text("idle")
    expect(page.locator("#progress")).to_contain_text("Turn 2's last progress: 40% halfway there")


CLAUDE_SCENARIO = {
    "rules": [
        {"when": "start the notes", "steps": [
            {"shell": "echo one > notes.txt && git add notes.txt && git commit -qm 'start notes'"},
            {"text": "Notes started."}]},
        {"when": "add a line", "steps": [
            {"shell": "echo two >> notes.txt && echo DASHBOARD-TOOL-OUTPUT"},
            {"text": "Added a second line to notes.txt."}]},
        {"when": "what comes next", "steps": [{"text": "Next: the tests."}]},
    ],
    "models": ["claude-sonnet-4-5", "gpt-5-codex", "stub-model"],
}  # fmt: skip


@pytest.mark.harness
def test_a_session_page_sends_a_message_and_shows_the_new_turns_summary_when_it_ends(
    harness_server: Server, remote: Path, page: Page
) -> None:
    server = harness_server
    with ModelStub(CLAUDE_SCENARIO) as stub:
        add_env(server, remote, stub)
        server.ok("session", "new", "notes", "start the notes", "--env", "app", "--harness",
                  "claude", "--model", "claude-sonnet-4-5", "-w")  # fmt: skip
        sign_in(page, server)
        page.get_by_role("link", name="notes").click()
        expect(page.locator("[data-turn='1']")).to_contain_text("Notes started.")

        page.get_by_label("Message").fill("add a line to the notes")
        page.get_by_role("button", name="Send").click()
        turn = page.locator("[data-turn='2']")
        expect(turn).to_contain_text("add a line to the notes")
        expect(turn).to_contain_text("Added a second line to notes.txt.", timeout=180_000)
        expect(turn).to_contain_text("exited")
        # The conversation shows the turn's tool call.
        expect(page.locator("#transcript [data-transcript='2'] .tool[data-tool='Bash']")).to_be_visible()
        expect(page.locator("#status")).to_contain_text("idle")

        page.get_by_role("button", name="View patch").click()
        expect(page.locator("#patch-view")).to_contain_text("+two")
        with page.expect_download() as download:
            page.get_by_role("button", name="Download patch").click()
        assert "+two" in Path(download.value.path()).read_text()

        # "Talk to the agent here": Claude Code's own interactive resume of this conversation.
        page.get_by_role("button", name="Talk to the agent here").click()
        rows = page.locator("#terminal .xterm-rows")
        expect(rows).to_contain_text("Added a second line to notes.txt.", timeout=60_000)
        page.locator("#terminal").click()
        # Typed as a person types: to some of these TUIs keys that come in a burst read as a
        # paste, and an Enter right after one is a new line, not a send.
        page.keyboard.type("what comes next", delay=40)
        expect(rows).to_contain_text("what comes next")
        page.keyboard.press("Enter")
        expect(rows).to_contain_text("Next: the tests.", timeout=60_000)


def test_a_question_stands_out_and_artifacts_download(
    standin_server: Server, remote: Path, page: Page
) -> None:
    server = standin_server
    add_env(server, remote)
    new(server, "asks", "run: echo 'the findings' > report.txt && hangar-agent artifact "
        "report.txt && hangar-agent question --option 'ship it' --option 'hold' 'Ship it?'")
    assert api(server, "GET", "/api/sessions/asks")["needs_input"] == "Ship it?"
    sign_in(page, server)
    row = page.get_by_role("row", name=re.compile("asks"))
    expect(row.locator(".needs-input")).to_have_text("needs input")

    row.get_by_role("link", name="asks").click()
    expect(page.locator("#status")).to_contain_text("The agent asks: Ship it?")
    link = page.locator("#artifacts").get_by_role("button", name="report.txt")
    with page.expect_download() as download:
        link.click()
    assert download.value.suggested_filename == "report.txt"
    assert Path(download.value.path()).read_text() == "the findings\n"


def test_fork_asks_how_many_and_links_the_forks_and_archive_asks_first(
    standin_server: Server, remote: Path, page: Page
) -> None:
    server = standin_server
    add_env(server, remote)
    new(server, "base", "write a note")
    sign_in(page, server)
    page.goto(server.url + "/sessions/base")
    expect(page.locator("#turns tbody tr")).to_have_count(1)

    page.once("dialog", lambda dialog: dialog.accept("2"))
    page.get_by_role("button", name="Fork").click()
    forks = page.locator("#forks a")
    expect(forks).to_have_count(2)
    names = [forks.nth(i).inner_text() for i in range(2)]
    listed = {s["name"] for s in api(server, "GET", "/api/sessions")["sessions"]}
    assert set(names) <= listed and len(listed) == 3

    page.once("dialog", lambda dialog: dialog.dismiss())
    page.get_by_role("button", name="Archive").click()
    assert api(server, "GET", "/api/sessions/base")["state"] != "archived"
    page.once("dialog", lambda dialog: dialog.accept())
    page.get_by_role("button", name="Archive").click()
    expect(page.locator("#status")).to_contain_text("archived")
    assert api(server, "GET", "/api/sessions/base")["state"] == "archived"
    # Its checkpoints went with it: the page says so rather than showing an empty table.
    expect(page.locator("#checkpoints")).to_be_hidden()
    expect(page.get_by_text("None: archiving the session dropped them.")).to_be_visible()

    forks.first.click()
    expect(page.get_by_role("heading", name=names[0])).to_be_visible()


def terminal_size(page: Page, n: int) -> tuple[int, int]:
    """The rows and columns the shell in the page's terminal has (asked as the ``n``-th)."""
    page.keyboard.type(f"echo size{n}=$(stty size),said\n")  # ",said": the whole answer shows
    rows = page.locator("#terminal .xterm-rows")
    expect(rows).to_contain_text(re.compile(rf"size{n}=\d+ \d+,said"))
    found = re.search(rf"size{n}=(\d+) (\d+),said", rows.inner_text())
    assert found, rows.inner_text()
    return int(found.group(1)), int(found.group(2))


def test_the_shell_terminal_runs_git_log_in_the_restored_sandbox(
    standin_server: Server, remote: Path, page: Page
) -> None:
    server = standin_server
    add_env(server, remote)
    new(server, "shelled", "run: echo kept > kept.txt && git add kept.txt && "
        "git commit -qm 'the agent was here'")
    server.ok("session", "suspend", "shelled")
    sign_in(page, server)
    page.goto(server.url + "/sessions/shelled")
    expect(page.locator("#status")).to_contain_text("suspended")

    # The terminal resumes the session first, then opens a shell in its repo.
    page.get_by_role("button", name="Shell").click()
    expect(page.locator("#terminal .xterm-rows")).to_contain_text("$", timeout=120_000)
    restored = api(server, "GET", "/api/sessions/shelled")
    assert restored["state"] == "idle" and restored["restored_from"]
    page.locator("#terminal").click()
    page.keyboard.type("git log --oneline | cat\n")
    expect(page.locator("#terminal .xterm-rows")).to_contain_text("the agent was here")
    expect(page.locator("#terminal .xterm-rows")).to_contain_text("seed 1")

    # A narrower window fits the terminal again, and the shell is told its new width.
    wide = terminal_size(page, 1)
    page.set_viewport_size({"width": 760, "height": 900})
    asked = iter(range(2, 40))
    until(lambda: terminal_size(page, next(asked))[1] < wide[1])

    # An open terminal counts as activity; "exit" ends it and says how.
    assert api(server, "GET", "/api/sessions/shelled")["open_terminals"] == 1
    page.keyboard.type("exit\n")
    expect(page.locator("#terminal-status")).to_contain_text("exit 0")
    until(lambda: api(server, "GET", "/api/sessions/shelled")["open_terminals"] == 0)

    # Closing the tab releases a terminal too.
    page.get_by_role("button", name="Shell").click()
    expect(page.locator("#terminal .xterm-rows")).to_contain_text("$")
    until(lambda: api(server, "GET", "/api/sessions/shelled")["open_terminals"] == 1)
    page.close()
    until(lambda: api(server, "GET", "/api/sessions/shelled")["open_terminals"] == 0)


def test_the_terminal_refuses_a_reused_ticket(
    standin_server: Server, remote: Path, page: Page
) -> None:
    server = standin_server
    add_env(server, remote)
    new(server, "ticketed", "write a note")
    sign_in(page, server)
    expect(page.locator("#sessions tbody tr")).to_have_count(1)
    # In the page, as its script does: one ticket, two connections.
    outcome = page.evaluate("""async () => {
        const auth = {Authorization: `Bearer ${sessionStorage.getItem("hangar.token")}`};
        const made = await fetch("/api/sessions/ticketed/terminal-ticket", {method: "POST", headers: auth});
        const {ticket} = await made.json();
        const connect = () => new Promise((done) => {
            const ws = new WebSocket(`ws://${location.host}/api/sessions/ticketed/terminal?ticket=${ticket}`);
            ws.onopen = () => done({opened: true, ws});
            ws.onclose = (e) => done({opened: false, code: e.code});
        });
        const first = await connect();
        const second = await connect();
        first.ws.close();
        return {first: first.opened, second: second.opened, code: second.code};
    }""")
    assert outcome["first"] is True
    assert outcome["second"] is False


def test_a_session_that_failed_to_start_says_why_and_offers_resume_again(
    standin_server: Server, remote: Path, page: Page
) -> None:
    server = standin_server
    server.ok("env", "add", "broken", "--repo", str(remote), "--setup", "echo no-db >&2; exit 3")
    server.cli("session", "new", "stuck", "hello", "--env", "broken", "--harness", "antigravity",
               "-w")  # fmt: skip
    failed = api(server, "GET", "/api/sessions/stuck")
    assert failed["start_error"], failed
    sign_in(page, server)
    page.goto(server.url + "/sessions/stuck")
    expect(page.locator("#start-error")).to_contain_text("It failed to start")
    expect(page.locator("#start-error")).to_contain_text(failed["start_error"]["code"])
    resume = page.get_by_role("button", name="Resume")
    expect(resume).to_be_enabled()

    # Once the setup is fixed, Resume starts it again from the page.
    server.ok("env", "update", "broken", "--setup", "sleep 2")
    resume.click()
    expect(page.locator("#phase")).to_contain_text("Starting: running setup")
    expect(page.locator("#status")).to_contain_text("idle", timeout=120_000)
    expect(page.locator("#start-error")).to_have_count(0)


@pytest.mark.harness
@pytest.mark.parametrize(("harness", "model"), [("pi", "stub-model")])
def test_talking_to_the_agent_here_resumes_the_harness_own_conversation(
    harness_server: Server, remote: Path, page: Page, harness: str, model: str
) -> None:
    server = harness_server
    with ModelStub(CLAUDE_SCENARIO) as stub:
        add_env(server, remote, stub)
        server.ok("session", "new", "talk", "start the notes", "--env", "app", "--harness",
                  harness, "--model", model, "-w")  # fmt: skip
        sign_in(page, server)
        page.goto(server.url + "/sessions/talk")
        page.get_by_role("button", name="Talk to the agent here").click()
        rows = page.locator("#terminal .xterm-rows")
        expect(rows).to_contain_text("Notes started.", timeout=60_000)  # its own history
        page.locator("#terminal").click()
        # Typed as a person types: to some of these TUIs keys that come in a burst read as a
        # paste, and an Enter right after one is a new line, not a send.
        page.keyboard.type("what comes next", delay=40)
        expect(rows).to_contain_text("what comes next")
        page.keyboard.press("Enter")
        expect(rows).to_contain_text("Next: the tests.", timeout=60_000)
        assert api(server, "GET", "/api/sessions/talk")["open_terminals"] == 1


def test_a_turn_stopped_past_its_idle_limit_says_why_on_the_session_page(
    tmp_path: Path, remote: Path, page: Page
) -> None:
    hang = "and now hang"
    for server in _server(tmp_path / "data", standin_harnesses(tmp_path), **STANDIN_SETTINGS,
                          HANGAR_TURN_IDLE_MINUTES="0.05"):  # fmt: skip
        server.ok("env", "add", "app", "--repo", str(remote), *IDENTITY, "--var",
                  f"AGY_STANDIN_HANG_ON={hang}")  # fmt: skip
        new(server, "hung", "run: echo one > one.txt")
        assert server.cli("session", "send", "hung", hang, "-w").returncode == 1
        sign_in(page, server)
        page.goto(server.url + "/sessions/hung")
        expect(page.locator("#timed-out")).to_contain_text(
            "Turn 2 was stopped: the turn had no output for 3 seconds")
        turn = page.locator("[data-turn='2']")
        expect(turn).to_contain_text("timed out")
        expect(turn).to_contain_text("the turn had no output for 3 seconds")
        expect(page.locator("#status")).to_contain_text("idle")
