"""A real runtime (SQLite, blobs, key file, ticker, bubblewrap sandboxes) in a temp data dir,
served to Starlette's test client with an admin token. The agent is the Antigravity stand-in,
so no model is needed."""

from __future__ import annotations

import contextlib
import shutil
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

with warnings.catch_warnings():
    # Starlette 1.x prefers the httpx2 package for its test client; httpx works the same.
    warnings.filterwarnings("ignore", message=".*httpx2")
    from starlette.testclient import TestClient

from hangar.server.app import create_app
from hangar.operations.auth import ensure_admin_token
from hangar.config import Settings
from hangar.runtime import Runtime
from tests.conftest import GIT_IDENTITY

STANDIN = Path(__file__).parents[1] / "harness" / "agy_standin.py"


def standin_harnesses(root: Path) -> Path:
    """A harness folder whose only CLI is the Antigravity stand-in, as ``bin/agy``."""
    (root / "bin").mkdir(parents=True)
    shutil.copy(STANDIN, root / "bin" / "agy")
    (root / "bin" / "agy").chmod(0o755)
    return root


@pytest.fixture
def runtime(tmp_path: Path) -> Iterator[Runtime]:
    if shutil.which("bwrap") is None:
        pytest.fail("bubblewrap (bwrap) is not installed: run `make install`", pytrace=False)
    settings = Settings.build(
        data_dir=tmp_path / "data", harness_dir=standin_harnesses(tmp_path / "harnesses")
    )
    runtime = Runtime(settings)
    runtime.start()
    yield runtime
    runtime.close()
    for info in runtime.sandboxes.list():
        runtime.sandboxes.destroy(info.id, hooks=False)


@contextlib.contextmanager
def signed_in(runtime: Runtime) -> Iterator[TestClient]:
    """A test client of the app over ``runtime`` that sends the admin token."""
    token_file = runtime.settings.data_dir / "admin-token"
    ensure_admin_token(runtime.db, token_file)
    with TestClient(create_app(runtime), raise_server_exceptions=False) as client:
        client.headers["Authorization"] = f"Bearer {token_file.read_text().strip()}"
        yield client


@pytest.fixture
def api(runtime: Runtime) -> Iterator[TestClient]:
    with signed_in(runtime) as client:
        yield client


def add_env(api: TestClient, remote: Path, name: str = "app", **extra: Any) -> dict[str, Any]:
    body = {"name": name, "repo": str(remote), "vars": dict(GIT_IDENTITY),
            "secrets": {"API_TOKEN": "very-secret-value"}, **extra}  # fmt: skip
    response = api.post("/api/envs", json=body)
    assert response.status_code == 201, response.text
    return dict(response.json())


def new_session(api: TestClient, name: str, message: str, env: str = "app") -> dict[str, Any]:
    """Ask for a session; returns it (STARTING) as the answer has it, with ``turn``."""
    body = {"name": name, "message": message, "env": env, "harness": "antigravity"}
    response = api.post("/api/sessions", json=body)
    assert response.status_code == 202, response.text
    answer = response.json()
    assert answer["turn"] == 1 and answer["session"]["state"] == "starting", answer
    return dict(answer["session"])


def settle(api: TestClient, name: str, limit: float = 60) -> dict[str, Any]:
    """The session once it is no longer starting (a bounded wait)."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        view = api.get(f"/api/sessions/{name}").json()
        if view["state"] != "starting":
            return dict(view)
        time.sleep(0.05)
    raise AssertionError(f"session {name} still starting after {limit} s")


def open_session(api: TestClient, name: str) -> dict[str, Any]:
    response = api.post(f"/api/sessions/{name}/open")
    assert response.status_code in (200, 202), response.text
    return settle(api, name)


def ticket(api: TestClient, name: str) -> str:
    """A new terminal ticket for session ``name``."""
    response = api.post(f"/api/sessions/{name}/terminal-ticket")
    assert response.status_code == 201, response.text
    return str(response.json()["ticket"])


def wait_turn(api: TestClient, name: str, n: int, limit: float = 60) -> dict[str, Any]:
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        response = api.post(f"/api/sessions/{name}/wait", json={"turn": n, "timeout": 5})
        assert response.status_code == 200, response.text
        if response.json()["finished_at"]:
            return dict(response.json())
    raise AssertionError(f"turn {n} of {name} did not finish in {limit} s")
