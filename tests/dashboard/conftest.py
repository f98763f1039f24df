"""Dashboard fixtures: Debian's Chromium, headless, driven by Playwright for Python through
``executable_path`` (Playwright's own browser download is not used), against a real ``hangar
serve``. A missing browser fails with what to install, never skips.

Every page records what the browser logged; a test ends by checking that no request failed a
Content-Security-Policy check and no script threw. ``HANGAR_SCREENSHOTS=DIR`` makes the tests
that picture a page save it there (how docs/img is made).

Modules whose tests each make their own sessions and environments by name share one server
(``module_server``, with environment ``app`` on ``module_remote``): starting ``hangar serve``
once a module, not once a test, keeps the suite fast."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.sync_api import Browser, Page, sync_playwright

from tests.conftest import git
from tests.e2e.conftest import STANDIN_SETTINGS, Server, _server, standin_harnesses

CHROMIUM_NAMES = ("chromium", "chromium-browser")
# Flags for a machine with no display and a closed network: no sandbox (we run as root), no
# calls home at start.
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--disable-dev-shm-usage"]  # fmt: skip
WAIT_MS = 60_000


def chromium_path() -> str:
    for name in CHROMIUM_NAMES:
        found = shutil.which(name)
        if found:
            return found
    pytest.fail("Chromium is not installed: the dashboard's tests need Debian's chromium "
                "(make test installs it; by hand: apt-get install chromium)", pytrace=False)


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    """One browser a module. Not for the whole run: Playwright's sync API keeps an asyncio loop
    on the main thread while it runs, which later tests' own event loops would collide with."""
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=chromium_path(), headless=True,
                                              args=CHROMIUM_ARGS)  # fmt: skip
        yield launched
        launched.close()


@dataclass
class Console:
    """What a page's scripts logged and threw."""

    messages: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def problems(self) -> list[str]:
        csp = [m for m in self.messages if "Content Security Policy" in m]
        return csp + self.errors


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    context = browser.new_context(viewport={"width": 1280, "height": 900}, accept_downloads=True)
    context.set_default_timeout(WAIT_MS)
    opened = context.new_page()
    console = Console()
    opened.on("console", lambda m: console.messages.append(f"{m.type}: {m.text}"))
    opened.on("pageerror", lambda e: console.errors.append(f"page error: {e}"))
    opened.console = console  # type: ignore[attr-defined]
    yield opened
    context.close()
    assert not console.problems(), console.problems()


@pytest.fixture
def standin_server(tmp_path: Path) -> Iterator[Server]:
    """hangar serve (embedded backends) whose only agent is the Antigravity stand-in."""
    yield from _server(tmp_path / "data", standin_harnesses(tmp_path), **STANDIN_SETTINGS)


@pytest.fixture(scope="module")
def module_remote(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A bare repo with one commit on ``main``, for a module's tests."""
    root = tmp_path_factory.mktemp("remote")
    bare, seed = root / "app.git", root / "seed"
    git(root, "init", "-q", "--bare", "-b", "main", str(bare))
    git(root, "init", "-q", "-b", "main", str(seed))
    (seed / "README.md").write_text("# app\n")
    git(seed, "add", "-A")
    git(seed, "commit", "-q", "-m", "seed")
    git(seed, "push", "-q", str(bare), "main")
    return bare


@pytest.fixture(scope="module")
def module_server(tmp_path_factory: pytest.TempPathFactory, module_remote: Path) -> Iterator[Server]:
    """One hangar serve (embedded backends, the Antigravity stand-in) for a whole module, with
    the environment ``app`` on ``module_remote``. Tests use names of their own."""
    from tests.e2e.test_acceptance import IDENTITY

    root = tmp_path_factory.mktemp("serve")
    for server in _server(root / "data", standin_harnesses(root), **STANDIN_SETTINGS):
        server.ok("env", "add", "app", "--repo", str(module_remote), *IDENTITY)
        yield server


def admin_token(server: Server) -> str:
    return (server.data_dir / "admin-token").read_text().strip()


def api(server: Server, method: str, path: str, *, timeout: float = 60, **kwargs: Any) -> Any:
    """A REST call as the admin; its JSON answer (a failed one fails the test)."""
    headers = {"Authorization": f"Bearer {admin_token(server)}"}
    answer = httpx.request(method, server.url + path, headers=headers, timeout=timeout, **kwargs)
    assert answer.status_code < 300, answer.text
    return answer.json()


def sign_in(page: Page, server: Server, token: str | None = None) -> None:
    page.goto(server.url + "/")
    page.get_by_label("Token").fill(token or admin_token(server))
    page.get_by_role("button", name="Sign in").click()


def screenshot(page: Page, name: str) -> None:
    folder = os.environ.get("HANGAR_SCREENSHOTS")
    if folder:
        Path(folder).mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(Path(folder) / name), full_page=True)


@pytest.fixture
def harness_server(tmp_path: Path) -> Iterator[Server]:
    """hangar serve (embedded backends) with the real harness CLIs."""
    from tests.harness.conftest import harness_dir

    yield from _server(tmp_path / "data", harness_dir())
