"""A start over a backend whose sandboxes are not ready at once (as on a cluster): each start
tick waits for the sandbox (``await_status``, bounded), shows the backend's reason as its phase
while it is still pending, and execs into the sandbox only once it is ready; a failed sandbox,
or one the backend cannot give, fails the start with the reason."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from hangar.blobs.local import LocalBlobs
from hangar.db.sqlite import SqliteDb
from hangar.keys.local import LocalKeys
from hangar.models import SessionState, StartStep
from hangar.sandboxes import ExecResult, SandboxCapabilities, SandboxInfo, SandboxSpec
from hangar.sandboxes import SandboxState, SandboxStatus
from hangar.sandboxes.local import LocalSandboxes
from hangar.sessions.sandbox import SESSION_LABEL
from hangar.sessions.startup import SANDBOX_WAIT_SECONDS, sandbox_wait
from tests.unit.sessions.world import TURN_ONE, World, make_world


class SlowToStart:
    """The local backend, but each new sandbox says pending ``pending`` times before it says
    ready (or failed, with ``fail``); it notes the session's phase at each look, and every
    exec into a sandbox it has not yet called ready. ``await_status`` answers at once (one
    look), or with ``waits`` looks until the sandbox is no longer pending, as a backend that
    waits on a change does; each call's timeout is noted."""

    def __init__(self, backend: LocalSandboxes, db: SqliteDb, *, pending: int = 2, fail: str = "",
                 capabilities: SandboxCapabilities | None = None,
                 waits: bool = False) -> None:  # fmt: skip
        self.backend = backend
        self.db = db
        self.pending = pending
        self.fail = fail
        self.waits = waits
        self.timeouts: list[float] = []
        self.capabilities = capabilities or backend.capabilities
        self.left: dict[str, int] = {}
        self.ready: set[str] = set()
        self.phases: list[tuple[str, str]] = []
        self.too_soon: list[Sequence[str]] = []
        self.owner: dict[str, str] = {}

    def create(self, spec: SandboxSpec) -> SandboxInfo:
        info = self.backend.create(spec)
        self.left[info.id] = self.pending
        self.owner[info.id] = spec.labels[SESSION_LABEL]
        return info

    def status(self, sandbox_id: str) -> SandboxStatus:
        self.backend.status(sandbox_id)  # SandboxNotFound as the backend says
        phase = self.db.get_session(self.owner[sandbox_id]).phase
        self.phases.append((phase.step.value, phase.detail) if phase else ("", ""))
        left = self.left.get(sandbox_id, 0)
        if left:
            self.left[sandbox_id] = left - 1
            return SandboxStatus(SandboxState.PENDING, f"waiting for a node ({left} to go)")
        if self.fail:
            return SandboxStatus(SandboxState.FAILED, self.fail)
        self.ready.add(sandbox_id)
        return SandboxStatus(SandboxState.READY)

    def await_status(self, sandbox_id: str, timeout: float) -> SandboxStatus:
        self.timeouts.append(timeout)
        status = self.status(sandbox_id)
        while self.waits and status.state is SandboxState.PENDING:
            status = self.status(sandbox_id)
        return status

    def exec(self, sandbox_id: str, argv: Sequence[str], **options: Any) -> ExecResult:
        if sandbox_id not in self.ready:
            self.too_soon.append(argv)
        return self.backend.exec(sandbox_id, argv, **options)

    def put_file(self, sandbox_id: str, path: str, data: Any, **options: Any) -> None:
        if sandbox_id not in self.ready:
            self.too_soon.append(["put_file", path])
        self.backend.put_file(sandbox_id, path, data, **options)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.backend, name)


def world_over(tmp_path: Path, db: SqliteDb, blobs: LocalBlobs, keys: LocalKeys, remote: Path,
               **options: Any) -> Iterator[tuple[World, SlowToStart]]:  # fmt: skip
    made: list[SlowToStart] = []

    def wrap(backend: LocalSandboxes) -> SlowToStart:
        made.append(SlowToStart(backend, db, **options))
        return made[0]

    for world in make_world(tmp_path, db, blobs, keys, remote, wrap=wrap):
        yield world, made[0]


def test_a_start_shows_a_pending_sandboxs_reason_and_clones_only_once_it_is_ready(
    tmp_path: Path, db: SqliteDb, blobs: LocalBlobs, keys: LocalKeys, remote: Path
) -> None:
    for world, backend in world_over(tmp_path, db, blobs, keys, remote):
        world.service.new("demo", TURN_ONE, "app", harness="antigravity")
        turn = world.service.wait("demo", timeout=60, poll=0.05)
        assert turn.outcome is not None and turn.outcome.value == "exited", turn
        creating = StartStep.CREATING_SANDBOX.value
        # The first look is made right after the sandbox was requested; each later one finds
        # the reason the one before saw as the start's phase.
        assert backend.phases == [
            (creating, ""),
            (creating, "waiting for a node (2 to go)"),
            (creating, "waiting for a node (1 to go)"),
        ]
        assert backend.too_soon == []
        session = world.service.resolve("demo")
        assert session.state is SessionState.IDLE and session.sandbox_id in backend.ready
        assert world.sh("demo", "cat committed.txt") == "one\n"


def test_a_sandbox_ready_within_the_wait_is_awaited_in_the_first_step_with_no_pending_phase(
    tmp_path: Path, db: SqliteDb, blobs: LocalBlobs, keys: LocalKeys, remote: Path
) -> None:
    for world, backend in world_over(tmp_path, db, blobs, keys, remote, waits=True):
        world.service.new("demo", TURN_ONE, "app", harness="antigravity")
        turn = world.service.wait("demo", timeout=60, poll=0.05)
        assert turn.outcome is not None and turn.outcome.value == "exited", turn
        # Every look was made by the one wait right after the sandbox was requested: the
        # phase never showed a pending reason, and no tick came back for it.
        creating = StartStep.CREATING_SANDBOX.value
        assert backend.phases == [(creating, "")] * 3
        assert len(backend.timeouts) == 1
        assert 0 < backend.timeouts[0] <= SANDBOX_WAIT_SECONDS
        assert backend.timeouts[0] <= world.service.settings.claim_lease_seconds / 3
        assert backend.too_soon == []
        assert world.sh("demo", "cat committed.txt") == "one\n"


def test_the_wait_for_a_sandbox_is_the_shorter_of_its_bound_and_a_third_of_the_lease() -> None:
    assert sandbox_wait(300) == SANDBOX_WAIT_SECONDS
    assert sandbox_wait(30) == 10
    assert sandbox_wait(0) == 0


def test_a_sandbox_that_fails_to_start_fails_the_start_with_its_reason(
    tmp_path: Path, db: SqliteDb, blobs: LocalBlobs, keys: LocalKeys, remote: Path
) -> None:
    for world, backend in world_over(tmp_path, db, blobs, keys, remote, pending=1,
                                     fail="the image could not be pulled"):  # fmt: skip
        world.service.new("demo", TURN_ONE, "app", harness="antigravity")
        session = world.settle("demo")
        assert session.state is SessionState.FAILED and session.start_error is not None
        assert session.start_error.step is StartStep.CREATING_SANDBOX
        assert "the image could not be pulled" in session.start_error.message
        assert session.start_error.code == "sandbox_error"
        assert backend.too_soon == [] and world.sandboxes.list() == []


def test_an_environment_needing_what_the_backend_lacks_fails_its_start_naming_it(
    tmp_path: Path, db: SqliteDb, blobs: LocalBlobs, keys: LocalKeys, remote: Path
) -> None:
    for world, _backend in world_over(tmp_path, db, blobs, keys, remote,
                                      capabilities=SandboxCapabilities()):  # fmt: skip
        world.service.new("demo", TURN_ONE, "app", harness="antigravity")
        session = world.settle("demo")
        assert session.state is SessionState.FAILED and session.start_error is not None
        assert session.start_error.code == "sandbox_capability_missing"
        assert "environment app's repo is a path on this machine" in session.start_error.message
        assert world.sandboxes.list() == []
