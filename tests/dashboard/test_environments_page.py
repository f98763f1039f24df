"""The Environments page (/environments) in headless Chromium against a real hangar serve: adding
and changing an environment with the API's checks and messages (the CLI's), each by its field,
and secrets that go in and are never shown back."""

from __future__ import annotations

from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

from tests.dashboard.conftest import api, screenshot, sign_in
from tests.e2e.conftest import Server

pytestmark = [pytest.mark.sandbox, pytest.mark.e2e]

SECRET = "tok-never-shown-7d41"



def test_an_environment_is_added_and_changed_with_the_apis_checks_and_its_secret_never_shown(
    module_server: Server, module_remote: Path, page: Page
) -> None:
    server = module_server
    sign_in(page, server)
    page.get_by_role("link", name="Environments").click()
    expect(page.get_by_role("heading", name="Environments")).to_be_visible()
    expect(page.locator("[data-environment=app]")).to_contain_text("default branch")

    page.get_by_role("button", name="Add environment").click()
    form = page.locator("#environment-form")
    form.get_by_label("Name").fill("Web App")
    form.get_by_label("Repo").fill(str(module_remote))
    save = form.get_by_role("button", name="Add environment")
    save.click()
    expect(page.locator("#env-name-error")).to_contain_text("must be lowercase letters, digits and dashes")
    expect(page.locator("#env-name-error")).to_contain_text("(invalid_name)")

    form.get_by_label("Name").fill("web")
    form.get_by_label("Repo").fill("/nowhere/app.git")
    save.click()
    expect(page.locator("#env-repo-error")).to_contain_text("cannot be reached")
    expect(page.locator("#env-name-error")).to_be_hidden()

    form.get_by_label("Repo").fill(str(module_remote))
    form.get_by_label("Variables").fill("MODE=fast")
    form.get_by_label("Secrets").fill(f"API_TOKEN={SECRET}")
    form.get_by_label("Host ports").fill("5432 http")
    save.click()
    expect(page.locator("#env-ports-error")).to_contain_text("host ports must be whole numbers")
    form.get_by_label("Host ports").fill("70000")
    save.click()  # the API's check, with the CLI's message
    expect(page.locator("#env-ports-error")).to_contain_text("from 1 to 65535, not [70000]")
    form.get_by_label("Host ports").fill("5432")
    save.click()

    expect(page.get_by_role("status")).to_contain_text("Added web.")
    row = page.locator("[data-environment=web]")
    expect(row).to_contain_text("API_TOKEN · set")
    expect(row).to_contain_text("MODE")
    expect(row).to_contain_text("5432")
    assert SECRET not in page.content()
    added = api(server, "GET", "/api/envs/web")
    assert (added["vars"], added["secrets"], added["host_ports"]) == (["MODE"], ["API_TOKEN"], [5432])

    # Changing it: the form holds what can be shown, never a secret's value.
    row.get_by_role("button", name="Edit web").click()
    form = page.locator("#environment-form")
    expect(form.get_by_label("Secrets")).to_have_value("")
    expect(form).to_contain_text("API_TOKEN (values are never shown)")
    expect(form.get_by_label("Host ports")).to_have_value("5432")
    # Its repo cannot change: shown by its last two folders, the whole path in the tooltip.
    expect(form.get_by_label("Repo")).to_have_text(f"{module_remote.parent.name}/app")
    expect(form.get_by_label("Repo")).to_have_attribute("title", str(module_remote))
    assert SECRET not in page.content()
    save = form.get_by_role("button", name="Save changes")
    save.click()
    expect(form.locator(".form-error")).to_contain_text("nothing to change")

    form.get_by_label("Branch").fill("no-such-branch")
    save.click()
    expect(page.locator("#env-branch-error")).to_contain_text("has no branch 'no-such-branch'")

    form.get_by_label("Branch").fill("main")
    form.get_by_label("remove MODE").check()
    form.get_by_label("Secrets").fill("OTHER_KEY=second")
    screenshot(page, "environments.png")
    save.click()
    expect(page.get_by_role("status")).to_contain_text("Saved web.")
    changed = api(server, "GET", "/api/envs/web")
    assert (changed["branch"], changed["vars"], changed["secrets"], changed["host_ports"]) == (
        "main", [], ["API_TOKEN", "OTHER_KEY"], [5432])
    expect(page.locator("[data-environment=web]")).to_contain_text("OTHER_KEY · set")
    assert "second" not in page.locator("#environments").inner_text()
