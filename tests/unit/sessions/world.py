"""The session service on the embedded backends, with real sandboxes and the Antigravity
stand-in as the agent (it runs ``run:`` lines of its prompt as shell commands and remembers its
conversation in HOME), so whole lifecycles run in seconds without a model. The ``world``
fixture is in this folder's conftest."""

from __future__ import annotations

import shutil
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from hangar.blobs.local import LocalBlobs
from hangar.config import Settings
from hangar.db.sqlite import SqliteDb
from hangar.keys.local import LocalKeys
from hangar.models import Session, SessionState, TickDue, TurnOutcome, utcnow
from hangar.sandboxes.local import LocalSandboxes
from hangar.sessions.service import SessionService

STANDIN = Path(__file__).parents[2] / "harness" / "agy_standin.py"
TURN_ONE = """turn one: start the work
run: echo one > committed.txt && git add committed.txt && git commit -qm 'first change'
run: echo 'uncommitted line' >> README.md && echo note > notes.txt"""


AUTO_KINDS = frozenset({"start", "claim", "watch"})
"""The ticks the fake delivers by itself, once started: what carries starts and turns on. The
idle check, the interval checkpoint and the reaper wait for a test to deliver them."""


class FakeTicks:
    """Our own ticks port: due-times kept in memory (``due``), tests deliver by hand what they
    want to; once started, a thread delivers the :data:`AUTO_KINDS` when due, one at a time,
    as a ticker would (a tick is dropped after its handler returns unless it was moved)."""

    receiver = None  # it delivers its ticks itself

    def __init__(self, auto: frozenset[str] = AUTO_KINDS) -> None:
        self.due: dict[str, TickDue] = {}
        self.auto = auto
        self._lock = threading.Condition()
        self._handler: Callable[[TickDue], None] | None = None
        self._thread: threading.Thread | None = None
        self._stopping = False
        self.errors: list[BaseException] = []

    def schedule(self, key: str, kind: str, due_at: datetime,
                 payload: dict[str, Any] | None = None) -> None:  # fmt: skip
        with self._lock:
            previous = self.due.get(key)
            version = previous.version + 1 if previous else 1
            self.due[key] = TickDue(key=key, kind=kind, due_at=due_at, payload=payload or {},
                                    version=version)  # fmt: skip
            self._lock.notify_all()

    def cancel(self, key: str) -> None:
        with self._lock:
            self.due.pop(key, None)

    def start(self, handler: Callable[[TickDue], None]) -> None:
        self._handler = handler
        self._stopping = False
        self._thread = threading.Thread(target=self._loop, name="fake-ticks", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        with self._lock:
            self._stopping = True
            self._lock.notify_all()
        if self._thread is not None:
            self._thread.join(30)
            self._thread = None

    def _loop(self) -> None:
        while True:
            with self._lock:
                if self._stopping:
                    return
                now = utcnow()
                ready = sorted((d for d in self.due.values() if d.kind in self.auto and
                                d.due_at <= now), key=lambda d: d.due_at)  # fmt: skip
                if not ready:
                    ahead = [d.due_at for d in self.due.values() if d.kind in self.auto]
                    wait = min(((a - now).total_seconds() for a in ahead), default=0.5)
                    self._lock.wait(max(0.005, min(wait, 0.5)))
                    continue
                tick = ready[0]
            try:
                assert self._handler is not None
                self._handler(tick)
            except BaseException as exc:  # a test reads these; the loop goes on
                self.errors.append(exc)
            with self._lock:
                current = self.due.get(tick.key)
                if current is not None and current.version == tick.version:
                    del self.due[tick.key]


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

    def settle(self, ref: str, timeout: float = 60) -> Session:
        """The session once its start is over (it is no longer STARTING); a bounded wait."""
        deadline = time.monotonic() + timeout
        while (session := self.service.resolve(ref)).state is SessionState.STARTING:
            assert time.monotonic() < deadline, f"{ref} still starting: {session.phase}"
            assert not self.ticks.errors, self.ticks.errors
            time.sleep(0.02)
        return session

    def open(self, ref: str) -> Session:
        """Open the session and wait until it is ready (AssertionError if the start failed)."""
        self.service.open(ref)
        session = self.settle(ref)
        assert session.state is not SessionState.FAILED, session.start_error
        return session

    def fork(self, ref: str, n: int) -> list[Session]:
        return [self.open(f.name) for f in self.service.fork(ref, n)]


def make_world(
    tmp_path: Path, db: SqliteDb, blobs: LocalBlobs, keys: LocalKeys, remote: Path,
    wrap: Callable[[LocalSandboxes], Any] | None = None, **settings: Any,
) -> Iterator[World]:
    """A service whose environment ``app`` clones ``remote``; its sandboxes go at the end.
    ``settings`` override the defaults; ``wrap`` puts a backend of the test's own around the
    local one, for the service only."""
    harnesses = tmp_path / "agy-harness"
    (harnesses / "bin").mkdir(parents=True)
    shutil.copy(STANDIN, harnesses / "bin" / "agy")
    (harnesses / "bin" / "agy").chmod(0o755)
    built = Settings.build(data_dir=tmp_path / "data", harness_dir=harnesses,
                           activity_grace_seconds=0, **settings)  # fmt: skip
    sandboxes = LocalSandboxes(tmp_path / "sandboxes", harnesses)
    ticks = FakeTicks()
    service = SessionService(built, db, blobs, keys, wrap(sandboxes) if wrap else sandboxes,
                             ticks)  # fmt: skip
    service.environments.add(
        "app", str(remote),
        vars={"GIT_AUTHOR_NAME": "A", "GIT_AUTHOR_EMAIL": "a@x", "GIT_COMMITTER_NAME": "A",
              "GIT_COMMITTER_EMAIL": "a@x"},
        secrets={"API_TOKEN": "tok-123456789"},
    )  # fmt: skip
    ticks.start(service.handle_tick)
    yield World(service, ticks, sandboxes, db, blobs)
    ticks.stop()
    for info in sandboxes.list():
        sandboxes.destroy(info.id)


def start(world: World, name: str = "demo", message: str = TURN_ONE, **kw: Any) -> str:
    world.service.new(name, message, "app", harness="antigravity", **kw)
    turn = world.service.wait(name, timeout=60, poll=0.05)
    assert turn.outcome is TurnOutcome.EXITED, turn
    return name


