"""The New session page (/new) in headless Chromium against a real hangar serve: used with the
keyboard alone it starts a session with a file and an output schema and opens its page; an error
shows next to the field it names, and starts nothing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

from tests.dashboard.conftest import api, screenshot, sign_in
from tests.e2e.conftest import Server

pytestmark = [pytest.mark.sandbox, pytest.mark.e2e]

SCHEMA = {"type": "object", "required": ["ok"]}



def focused(page: Page) -> str:
    return str(page.evaluate("document.activeElement.id || document.activeElement.textContent"))


def test_the_form_used_with_the_keyboard_alone_starts_a_session_with_a_file_and_opens_its_page(
    module_server: Server, page: Page, tmp_path: Path
) -> None:
    server = module_server
    notes = tmp_path / "notes.json"
    notes.write_text('{"ok": true, "from": "the attached file"}')
    sign_in(page, server)
    page.get_by_role("link", name="New session").focus()
    page.keyboard.press("Enter")
    expect(page.get_by_role("heading", name="New session")).to_be_visible()
    assert page.url.endswith("/new")
    expect(page.get_by_label("Environment")).to_have_value("app")

    # The message has the focus; the name follows what it says until the person types one.
    assert focused(page) == "new-message"
    page.keyboard.type("run: hangar-agent result @$HANGAR_IO/in/1/notes.json")
    expect(page.get_by_label("Name")).to_have_value("run-hangar-agent-result-hangar")

    # Every control has its label, and Tab visits them in the order they are shown.
    order = []
    for _ in range(8):
        page.keyboard.press("Tab")
        order.append(focused(page))
    assert order == ["new-name", "new-env", "new-harness", "new-model", "new-idle", "new-files",
                     "new-schema", "Start session"]  # fmt: skip
    for _ in range(7):
        page.keyboard.press("Shift+Tab")
    assert focused(page) == "new-name"
    page.keyboard.press("Control+A")
    page.keyboard.type("keyboard-job")
    page.keyboard.press("Tab")  # the environment: app, the only one
    page.keyboard.press("Tab")
    page.keyboard.type("anti")  # a closed select picks the option its typed letters start
    expect(page.get_by_label("Harness")).to_have_value("antigravity")
    page.keyboard.press("Tab")
    page.keyboard.press("Tab")
    page.keyboard.type("30")
    page.keyboard.press("Tab")
    # The file dialog is the system's own, not the page's: the file is given to the input.
    page.get_by_label("Files").set_input_files(notes)
    expect(page.locator("ul.files")).to_contain_text("notes.json")
    page.keyboard.press("Tab")
    page.keyboard.type(json.dumps(SCHEMA))
    page.keyboard.press("Shift+Tab")
    page.keyboard.press("Shift+Tab")
    assert focused(page) == "new-idle"
    screenshot(page, "new-session.png")
    page.keyboard.press("Enter")  # Enter in a one-line field submits

    expect(page.get_by_role("heading", name="keyboard-job")).to_be_visible()
    assert page.url.endswith("/sessions/keyboard-job")
    turn = api(server, "POST", "/api/sessions/keyboard-job/wait", json={"turn": 1, "timeout": 120},
               timeout=150)
    assert turn["finished_at"], turn
    session = api(server, "GET", "/api/sessions/keyboard-job")
    assert (session["harness"], session["idle_minutes"], session["output_schema"]) == (
        "antigravity", 30, SCHEMA)
    assert [(c["kind"], c["name"]) for c in turn["context"]] == [("file", "notes.json")]
    # The agent read the file where the exchange puts it, and handed it back as its result.
    assert turn["result"] == {"ok": True, "from": "the attached file"}


def test_each_error_shows_next_to_the_field_it_names_and_nothing_starts(
    module_server: Server, page: Page
) -> None:
    server = module_server
    sign_in(page, server)
    page.goto(server.url + "/new")
    page.get_by_label("Message").fill("write a note")
    expect(page.get_by_label("Name")).to_have_value("write-a-note")
    start = page.get_by_role("button", name="Start session")
    schema = page.get_by_label("Output schema (optional)")

    # Checked in the page before sending: the schema must be JSON, and an object.
    schema.fill("{not json")
    start.click()
    expect(page.locator("#new-schema-error")).to_contain_text("the output schema is not JSON")
    expect(page.locator("#new-schema-error")).to_contain_text("(invalid_json)")
    expect(schema).to_be_focused()
    expect(schema).to_have_attribute("aria-invalid", "true")

    # Checked by the API: its message and code, by the field it names.
    schema.fill('{"type": "nope"}')
    start.click()
    expect(page.locator("#new-schema-error")).to_contain_text("is not a valid JSON Schema")
    expect(page.locator("#new-schema-error")).to_contain_text("(invalid_schema)")

    schema.fill("")
    page.get_by_label("Name").fill("Bad Name")
    start.click()
    expect(page.locator("#new-name-error")).to_contain_text("must be lowercase letters, digits and dashes")
    expect(page.locator("#new-name-error")).to_contain_text("(invalid_name)")
    expect(page.locator("#new-schema-error")).to_be_hidden()

    page.get_by_label("Name").fill("fine-name")
    page.get_by_label("Idle minutes").fill("-1")
    start.click()
    expect(page.locator("#new-idle-error")).to_contain_text("idle_minutes")
    expect(page.locator("#new-idle-error")).to_contain_text("(invalid_input)")
    expect(page.get_by_label("Idle minutes")).to_be_focused()

    assert page.url.endswith("/new")
    names = [s["name"] for s in api(server, "GET", "/api/sessions?limit=500")["sessions"]]
    assert "fine-name" not in names and "write-a-note" not in names
