"""hangar's in-sandbox scripts are installed once per sandbox and run by name: no exec's command
line carries a script's source, and a sandbox that lacks this hangar's scripts (made by an older
hangar) runs them after one install, its standard input sent again."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from hangar import agent
from hangar.blobs.local import LocalBlobs
from hangar.db.sqlite import SqliteDb
from hangar.keys.local import LocalKeys
from hangar.models import CheckpointReason, TurnOutcome
from hangar.sandboxes import ExecResult, SandboxUser
from hangar.sandboxes.local import LocalSandboxes
from hangar.sessions.sandbox import checkpoint_target
from tests.unit.sessions import world as world_module
from tests.unit.sessions.world import World, make_world, start

pytestmark = pytest.mark.sandbox

ARGV_BOUND = 4096
"""At most this many bytes on any exec's command line (the scripts are about 50 KB)."""


class Recording:
    """Our sandboxes port, noting every exec's argv; ``before`` runs ahead of each exec."""

    def __init__(self, inner: LocalSandboxes) -> None:
        self.inner = inner
        self.argvs: list[list[str]] = []
        self.before: Callable[[str, list[str]], None] | None = None

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def exec(self, sandbox_id: str, argv: Sequence[str], **options: Any) -> ExecResult:
        self.argvs.append(list(argv))
        if self.before is not None:
            self.before(sandbox_id, list(argv))
        return self.inner.exec(sandbox_id, argv, **options)

    def scripts(self) -> list[str]:
        """The scripts run (or tried), in order."""
        return [argv[1] for argv in self.argvs if argv[0] == agent.launcher()]

    def installs(self) -> int:
        return sum(argv == agent.installer() for argv in self.argvs)


@pytest.fixture
def recorded(
    tmp_path: Path, db: SqliteDb, blobs: LocalBlobs, keys: LocalKeys, remote: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[tuple[World, Recording]]:  # fmt: skip
    made: list[Recording] = []

    def wrapped(*args: Any, **kwargs: Any) -> Recording:
        rec = Recording(LocalSandboxes(*args, **kwargs))
        made.append(rec)
        return rec

    # make_world builds its own backend: the service gets it wrapped.
    monkeypatch.setattr(world_module, "LocalSandboxes", wrapped)
    for world in make_world(tmp_path, db, blobs, keys, remote):
        yield world, made[0]


def remove_scripts(rec: Recording, sandbox_id: str) -> None:
    """What a sandbox made by an older hangar has: another digest, and its ``hangar-agent``."""
    folder = f"{agent.LIB}/{agent.digest()}"
    script = (f'rm -rf -- "{folder}" && ! test -e "{folder}" && '
              f'echo "an older hangar-agent" > {agent.BIN}/hangar-agent')  # fmt: skip
    gone = rec.inner.exec(sandbox_id, ["sh", "-c", script], user=SandboxUser.HANGAR)
    assert gone.ok, gone.stderr


def test_no_exec_carries_a_scripts_source_through_a_turn_a_checkpoint_and_a_restore(
    recorded: tuple[World, Recording],
) -> None:
    world, rec = recorded
    assert len(agent.archive()) > 10 * ARGV_BOUND  # the bound is far below the sources
    start(world)
    world.service.suspend("demo")
    world.open("demo")
    world.service.send("demo", "run: echo two >> notes.txt")
    assert world.service.wait("demo", timeout=60, poll=0.05).outcome is TurnOutcome.EXITED
    assert world.sh("demo", "cat committed.txt notes.txt") == "one\nnote\ntwo\n"

    longest = max(rec.argvs, key=lambda argv: sum(len(a.encode()) for a in argv))
    assert sum(len(a.encode()) for a in longest) <= ARGV_BOUND, longest[:3]
    assert {"run", "checkpoint", "restore", "exchange"} <= set(rec.scripts())
    assert rec.installs() == 2  # once per sandbox, as it was made; never again


def test_a_sandbox_without_this_hangars_scripts_runs_them_after_one_install(
    recorded: tuple[World, Recording],
) -> None:
    world, rec = recorded
    start(world)
    sandbox_id = world.service.resolve("demo").sandbox_id
    assert sandbox_id
    remove_scripts(rec, sandbox_id)
    rec.argvs.clear()

    target = checkpoint_target(world.service.resolve("demo"))
    assert world.service.checkpointer.take(target, CheckpointReason.MANUAL) is not None
    assert rec.installs() == 1
    assert rec.scripts() == ["checkpoint", "checkpoint"]  # tried, then run once installed
    assert world.service.checkpointer.take(target, CheckpointReason.MANUAL) is not None
    assert rec.installs() == 1 and rec.scripts().count("checkpoint") == 3
    # The install brought this hangar's hangar-agent too, which the agent runs.
    helper = world.sandboxes.exec(sandbox_id, ["hangar-agent", "--help"])
    assert helper.ok and b"HANGAR_IO" in helper.stdout, helper
    # The agent runs the installed scripts but can change none of them.
    script = f"touch {agent.launcher()} || touch {agent.LIB}/{agent.digest()}/x"
    denied = world.sandboxes.exec(sandbox_id, ["sh", "-c", script])
    assert not denied.ok


def test_a_restore_whose_sandbox_lost_the_scripts_sends_its_stream_again_after_the_install(
    recorded: tuple[World, Recording],
) -> None:
    world, rec = recorded
    start(world)
    world.service.suspend("demo")
    removed: list[str] = []

    def upgrade_before_the_restore(sandbox_id: str, argv: list[str]) -> None:
        if argv[:2] == [agent.launcher(), "restore"] and not removed:
            removed.append(sandbox_id)
            remove_scripts(rec, sandbox_id)

    rec.before = upgrade_before_the_restore
    rec.argvs.clear()
    world.open("demo")
    assert removed
    assert rec.scripts().count("restore") == 2
    assert rec.installs() == 2  # as the sandbox was made, and after the restore found none
    assert world.sh("demo", "cat committed.txt notes.txt; tail -1 README.md") == (
        "one\nnote\nuncommitted line\n"
    )
