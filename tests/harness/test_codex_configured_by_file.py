"""The real Codex CLI configured the way Codex's docs configure a provider: the environment's
setup writes ``~/.codex/config.toml`` with a ``[model_providers.stub]`` block (the model stub)
and ``model_provider = "stub"``, and no OPENAI_BASE_URL. What hangar writes there (the repo
folder trusted) is merged in, never written over it: turns, a resume in a new sandbox (whose
setup writes the file again) and the terminal's agent mode all reach the stub."""

from __future__ import annotations

import base64
import json
import threading
import time
import tomllib
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from emulators.model import ModelStub
from hangar.server.app import create_app
from hangar.operations.auth import ensure_admin_token
from hangar.config import Settings
from hangar.runtime import Runtime
from tests.api.conftest import ticket, wait_turn
from tests.conftest import GIT_IDENTITY
from tests.harness.conftest import harness_dir

with warnings.catch_warnings():
    warnings.filterwarnings("ignore", message=".*httpx2")
    from starlette.testclient import TestClient

pytestmark = [pytest.mark.harness, pytest.mark.sandbox]

SCENARIO = {
    "rules": [
        {"when": "turn one", "steps": [{"text": "Turn one done."}]},
        {"when": "turn two", "steps": [{"text": "Turn two done."}]},
        # one word: a terminal UI draws only what changes, so a space may be a cursor move
        {"when": "turn three", "steps": [{"text": "Third-turn-done."}]},
        {"when": "from the terminal", "steps": [{"text": "Heard you in the terminal."}]},
    ],
    "models": ["stub-codex"],
}
TURN_LIMIT = 240  # seconds: a real CLI in a sandbox, on a machine running other suites


def setup_script(stub: ModelStub) -> str:
    """The environment's setup: Codex configured by file, as its docs show."""
    return (
        "mkdir -p ~/.codex && cat > ~/.codex/config.toml <<'EOF'\n"
        "# the environment's own Codex configuration\n"
        'model = "stub-codex"\n'
        'model_provider = "stub"\n'
        "\n"
        "[model_providers.stub]\n"
        'name = "the model stub"\n'
        f'base_url = "http://127.0.0.1:{stub.port}/v1"\n'
        'env_key = "STUB_API_KEY"\n'
        'wire_api = "responses"\n'
        "EOF\n"
    )


@pytest.fixture
def stub() -> Iterator[ModelStub]:
    with ModelStub(SCENARIO) as running:
        yield running


@pytest.fixture
def api(tmp_path: Path, stub: ModelStub) -> Iterator[TestClient]:
    runtime = Runtime(Settings.build(data_dir=tmp_path / "data", harness_dir=harness_dir()))
    runtime.start()
    token_file = runtime.settings.data_dir / "admin-token"
    ensure_admin_token(runtime.db, token_file)
    try:
        with TestClient(create_app(runtime), raise_server_exceptions=False) as client:
            client.headers["Authorization"] = f"Bearer {token_file.read_text().strip()}"
            yield client
    finally:
        runtime.close()
        for info in runtime.sandboxes.list():
            runtime.sandboxes.destroy(info.id, hooks=False)


def config_in_sandbox(api: TestClient, name: str) -> dict[str, Any]:
    """The session's ``~/.codex/config.toml``, parsed."""
    done = api.post(f"/api/sessions/{name}/exec",
                    json={"argv": ["cat", "/root/.codex/config.toml"]})  # fmt: skip
    assert done.status_code == 200, done.text
    frames = [json.loads(line) for line in done.text.splitlines() if line.strip()]
    text = b"".join(base64.b64decode(f["stdout"]) for f in frames if "stdout" in f).decode()
    assert frames[-1] == {"exit": 0}, frames
    assert text.startswith("# the environment's own Codex configuration\n"), text
    return tomllib.loads(text)


def ended(api: TestClient, name: str, n: int) -> dict[str, Any]:
    turn = wait_turn(api, name, n, limit=TURN_LIMIT)
    assert turn["outcome"] == "exited", turn
    assert not turn["warnings"], turn["warnings"]
    return turn


def test_codex_configured_by_the_setups_config_file_keeps_its_provider_through_turns_a_resume_and_the_terminal(
    api: TestClient, stub: ModelStub, remote: Path
) -> None:
    env = {"name": "app", "repo": str(remote), "setup": setup_script(stub),
           "vars": {**GIT_IDENTITY}, "secrets": {"STUB_API_KEY": "sk-stub"},
           "host_ports": [stub.port]}  # fmt: skip
    assert api.post("/api/envs", json=env).status_code == 201
    asked = api.post("/api/sessions", json={"name": "byfile", "env": "app", "harness": "codex",
                                            "message": "turn one: say hello"})  # fmt: skip
    assert asked.status_code == 202, asked.text

    first = ended(api, "byfile", 1)
    assert first["summary"] == "Turn one done."
    config = config_in_sandbox(api, "byfile")
    assert config["model_provider"] == "stub"
    assert config["model_providers"]["stub"]["base_url"] == f"http://127.0.0.1:{stub.port}/v1"
    assert config["projects"] == {"/workspace/app": {"trust_level": "trusted"}}

    assert api.post("/api/sessions/byfile/send",
                    json={"message": "turn two: carry on"}).status_code == 202  # fmt: skip
    assert ended(api, "byfile", 2)["summary"] == "Turn two done."

    # A resume in a new sandbox: its setup writes the file again, hangar merges into it again.
    assert api.post("/api/sessions/byfile/suspend").json()["state"] == "suspended"
    assert api.post("/api/sessions/byfile/send",
                    json={"message": "turn three: once more"}).status_code == 202  # fmt: skip
    third = ended(api, "byfile", 3)
    assert third["summary"] == "Third-turn-done."
    assert third["harness_session"] == first["harness_session"]
    sent = ModelStub.transcript(stub.requests("responses")[-1]["body"])
    assert "turn one" in sent and "turn two" in sent and "turn three" in sent
    assert config_in_sandbox(api, "byfile")["model_provider"] == "stub"

    # The terminal's agent mode writes hangar's settings too (merged): Codex's own interactive
    # resume reaches the stub with a message typed there.
    stub.clear_requests()
    path = f"/api/sessions/byfile/terminal?ticket={ticket(api, 'byfile')}&mode=agent&rows=40&cols=120"
    with TestClient(api.app).websocket_connect(path) as ws:
        seen: list[bytes] = []
        reader = threading.Thread(target=drain, args=(ws, seen), daemon=True)
        reader.start()
        deadline = time.monotonic() + TURN_LIMIT
        while b"Third-turn-done." not in b"".join(seen):  # its own history, drawn
            assert time.monotonic() < deadline, b"".join(seen)[-3000:]
            time.sleep(0.1)
        for key in "from the terminal":  # typed at a person's pace: a burst reads as a paste
            ws.send_bytes(key.encode())
            time.sleep(0.04)
        ws.send_bytes(b"\r")
        heard = stub.wait_for_requests(1, "responses", timeout=TURN_LIMIT)
        assert "from the terminal" in ModelStub.transcript(heard[-1]["body"])
        assert "turn one" in ModelStub.transcript(heard[-1]["body"])
        ws.send_bytes(b"")  # the input ends: hangar hangs the program up
    config = config_in_sandbox(api, "byfile")
    assert config["model_provider"] == "stub" and config["projects"]


def drain(ws: Any, seen: list[bytes]) -> None:
    """Collect what the terminal shows until it closes."""
    try:
        while True:
            seen.append(ws.receive_bytes())
    except Exception:  # the terminal closed: nothing more to read
        return
