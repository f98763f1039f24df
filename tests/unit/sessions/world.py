"""The session service on the embedded backends, with real sandboxes and the Antigravity
stand-in as the agent (it runs ``run:`` lines of its prompt as shell commands and remembers its
conversation in HOME), so whole lifecycles run in seconds without a model. The ``world``
fixture is in this folder's conftest."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from hangar.blobs.local import LocalBlobs
from hangar.config import Settings
from hangar.db.sqlite import SqliteDb
from hangar.keys.local import LocalKeys
from hangar.models import TickDue, TurnOutcome
from hangar.sandboxes.local import LocalSandboxes
from hangar.sessions.service import SessionService

STANDIN = Path(__file__).parents[2] / "harness" / "agy_standin.py"
TURN_ONE = """turn one: start the work
run: echo one > committed.txt && git add committed.txt && git commit -qm 'first change'
run: echo 'uncommitted line' >> README.md && echo note > notes.txt"""


@dataclass
class FakeTicks:
    """Our own ticks port, recording due-times; tests deliver ticks by hand."""

    due: dict[str, TickDue] = field(default_factory=dict)

    def schedule(self, key: str, kind: str, due_at: datetime,
                 payload: dict[str, Any] | None = None) -> None:  # fmt: skip
        self.due[key] = TickDue(key=key, kind=kind, due_at=due_at, payload=payload or {})

    def cancel(self, key: str) -> None:
        self.due.pop(key, None)

    def start(self, handler: Any) -> None:
        pass

    def stop(self) -> None:
        pass


@dataclass
class World:
    service: SessionService
    ticks: FakeTicks
    sandboxes: LocalSandboxes
    db: SqliteDb
    blobs: LocalBlobs

    def sh(self, ref: str, script: str) -> str:
        session = self.service.resolve(ref)
        assert session.sandbox_id
        result = self.sandboxes.exec(session.sandbox_id, ["bash", "-c", script],
                                     cwd="/workspace/app")  # fmt: skip
        assert result.ok, result.stderr
        return result.stdout.decode()

    def tick(self, key: str) -> None:
        self.service.handle_tick(self.ticks.due[key])


def make_world(
    tmp_path: Path, db: SqliteDb, blobs: LocalBlobs, keys: LocalKeys, remote: Path
) -> Iterator[World]:
    """A service whose environment ``app`` clones ``remote``; its sandboxes go at the end."""
    harnesses = tmp_path / "agy-harness"
    (harnesses / "bin").mkdir(parents=True)
    shutil.copy(STANDIN, harnesses / "bin" / "agy")
    (harnesses / "bin" / "agy").chmod(0o755)
    settings = Settings.build(data_dir=tmp_path / "data", harness_dir=harnesses,
                              activity_grace_seconds=0)  # fmt: skip
    sandboxes = LocalSandboxes(tmp_path / "sandboxes", harnesses)
    ticks = FakeTicks()
    service = SessionService(settings, db, blobs, keys, sandboxes, ticks)
    service.environments.add(
        "app", str(remote),
        vars={"GIT_AUTHOR_NAME": "A", "GIT_AUTHOR_EMAIL": "a@x", "GIT_COMMITTER_NAME": "A",
              "GIT_COMMITTER_EMAIL": "a@x"},
        secrets={"API_TOKEN": "tok-123456789"},
    )  # fmt: skip
    yield World(service, ticks, sandboxes, db, blobs)
    for info in sandboxes.list():
        sandboxes.destroy(info.id, hooks=False)


def start(world: World, name: str = "demo", message: str = TURN_ONE, **kw: Any) -> str:
    world.service.new(name, message, "app", harness="antigravity", **kw)
    turn = world.service.wait(name, timeout=60, poll=0.05)
    assert turn.outcome is TurnOutcome.EXITED, turn
    return name


