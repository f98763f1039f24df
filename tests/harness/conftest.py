"""Harness tests need the real CLIs, installed by `make harnesses` into HANGAR_HARNESS_DIR.
A missing CLI fails the run with a clear message; these tests never skip."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from emulators.model import ModelStub
from hangar.blobs.local import LocalBlobs
from hangar.config import Settings
from hangar.db.sqlite import SqliteDb
from hangar.harnesses import Harness, TurnResult, TurnSpec, get_harness
from hangar.processes.runs import wait_run
from hangar.harnesses.turns import start_turn, turn_result
from hangar.keys.local import LocalKeys
from hangar.sandboxes.local import LocalSandboxes
from tests.conftest import GIT_IDENTITY
from tests.rig import Engine, make_engine

CLIS = ("claude", "codex", "pi")
MODELS = {"claude": "claude-sonnet-4-5", "codex": "gpt-5-codex", "pi": "stub-model"}
"""The model each CLI asks the stub for (a scenario lists them all)."""
API = {"claude": "anthropic", "codex": "responses", "pi": "chat"}
"""The stub's API each CLI speaks."""
TURN_TIMEOUT = 180


def harness_dir() -> Path:
    """The harness folder, checked to hold every CLI the tests run."""
    root = Path(
        os.environ.get("HANGAR_HARNESS_DIR")
        or Path.home() / ".local" / "share" / "hangar" / "harnesses"
    )
    missing = [c for c in CLIS if not (root / "node_modules" / ".bin" / c).exists()]
    if missing:
        pytest.fail(
            f"harness CLIs {missing} are not installed in {root}: run `make harnesses` "
            "(or `make test`, which installs them)",
            pytrace=False,
        )
    return root


@dataclass
class Agent:
    """One harness driven through the engine in real sandboxes."""

    engine: Engine
    harness: Harness
    stub: ModelStub

    def env(self) -> dict[str, str]:
        if self.harness.name == "claude":
            keys = {"ANTHROPIC_BASE_URL": self.stub.url, "ANTHROPIC_API_KEY": "sk-stub"}
        else:
            keys = {"OPENAI_BASE_URL": f"{self.stub.url}/v1", "OPENAI_API_KEY": "sk-stub"}
        return {**GIT_IDENTITY, **keys}

    def spec(self, prompt: str, **kw: str | None) -> TurnSpec:
        return TurnSpec(
            prompt=prompt, cwd="/workspace/app", model=MODELS[self.harness.name], env=self.env(), **kw  # type: ignore[arg-type]
        )

    def turn(self, sandbox: str, spec: TurnSpec) -> TurnResult:
        run_id = f"run-{uuid.uuid4().hex[:8]}"
        start_turn(self.engine.sandboxes, sandbox, self.harness, spec, run_id)
        log, code = wait_run(self.engine.sandboxes, sandbox, run_id, timeout=TURN_TIMEOUT)
        result = turn_result(self.engine.sandboxes, sandbox, self.harness, spec, run_id, log, code)
        assert result.ok, f"{result.error!r}\n{log.decode(errors='replace')[-3000:]}"
        return result

    def last_request(self) -> str:
        requests = [r for r in self.stub.requests(API[self.harness.name]) if r["body"].get("tools")]
        return ModelStub.transcript(requests[-1]["body"])


@pytest.fixture(params=list(CLIS))
def agent(
    request: pytest.FixtureRequest,
    settings: Settings,
    db: SqliteDb,
    blobs: LocalBlobs,
    keys: LocalKeys,
    tmp_path: Path,
    remote: Path,
    stub: ModelStub,
) -> Iterator[Agent]:
    harness = get_harness(request.param)
    sandboxes = LocalSandboxes(tmp_path / "sandboxes", harness_dir())
    engine = make_engine(settings, db, blobs, keys, sandboxes, remote, harness=harness.name,
                         conversation_dirs=harness.conversation_dirs,
                         host_ports=[stub.port])  # fmt: skip
    yield Agent(engine=engine, harness=harness, stub=stub)
    for info in sandboxes.list():
        sandboxes.destroy(info.id)
