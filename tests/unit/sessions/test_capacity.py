"""HANGAR_MAX_SANDBOXES in the session service: a start that raced past the request's check
meets the cap when it makes its sandbox and fails cleanly (nothing stuck, the sandbox gone, a
later send starts it); and the settings' default follows the machine's memory."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import pytest

from hangar.blobs.local import LocalBlobs
from hangar.config import Settings
from hangar.db.sqlite import SqliteDb
from hangar.errors import CapacityExhausted
from hangar.keys.local import LocalKeys
from hangar.models import SessionState, StartStep, TurnOutcome
from hangar.sandboxes import SandboxSpec
from hangar.sessions.capacity import Capacity, admit
from tests.unit.sessions.world import AUTO_KINDS, World, make_world


@pytest.fixture
def world(
    tmp_path: Path, db: SqliteDb, blobs: LocalBlobs, keys: LocalKeys, remote: Path
) -> Iterator[World]:
    yield from make_world(tmp_path, db, blobs, keys, remote, max_sandboxes=1)


def test_a_start_that_meets_the_cap_when_making_its_sandbox_fails_cleanly_and_starts_later(
    world: World,
) -> None:
    world.ticks.auto = frozenset({"claim", "watch"})  # the start's steps wait for the test
    world.service.new("late", "run: echo hi > hi.txt", "app", harness="antigravity")
    rival = world.sandboxes.create(SandboxSpec(labels={"who": "a racer"}))  # took the place
    world.tick(f"start:{world.service.resolve('late').id}")

    failed = world.service.get("late")
    assert failed.state is SessionState.FAILED and failed.claim is None
    error, turn = failed.start_error, failed.turns[0]
    assert error is not None and "HANGAR_MAX_SANDBOXES" in error.message
    assert (error.code, error.step) == ("capacity_exhausted", StartStep.CREATING_SANDBOX)
    assert (turn.outcome, turn.error_code) == (TurnOutcome.FAILED, "capacity_exhausted")
    assert [i.id for i in world.sandboxes.list()] == [rival.id]  # its own sandbox is gone
    with pytest.raises(CapacityExhausted):  # the place is still taken: refused at once
        world.service.send("late", "again")
    assert len(world.service.get("late").turns) == 1

    world.sandboxes.destroy(rival.id)
    world.ticks.auto = AUTO_KINDS
    world.service.send("late", "run: echo hi > hi.txt")
    turn = world.service.wait("late", timeout=60, poll=0.05)
    assert turn.outcome is TurnOutcome.EXITED, turn
    assert world.sh("late", "cat hi.txt") == "hi\n"


def test_the_default_cap_is_the_machines_memory_over_the_agents_limit_and_at_least_one(
    tmp_path: Path,
) -> None:
    memory = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    built = Settings.from_env({"HOME": str(tmp_path), "HANGAR_SANDBOX_MEMORY_MB": "1024"})
    assert built.max_sandboxes == max(1, memory // 2**30)
    huge = Settings.from_env({"HOME": str(tmp_path), "HANGAR_SANDBOX_MEMORY_MB": str(2**40)})
    assert huge.max_sandboxes == 1
    fixed = Settings.from_env({"HOME": str(tmp_path), "HANGAR_MAX_SANDBOXES": "7"})
    assert fixed.max_sandboxes == 7


def test_on_a_cluster_there_is_no_cap_by_default_and_no_start_counts_sandboxes(
    tmp_path: Path,
) -> None:
    gke = "gke://ctx/ns?image=app:1"
    built = Settings.from_env({"HOME": str(tmp_path), "HANGAR_SANDBOXES": gke})
    assert built.max_sandboxes == 0
    capped = Settings.from_env({"HOME": str(tmp_path), "HANGAR_SANDBOXES": gke,
                                "HANGAR_MAX_SANDBOXES": "3"})  # fmt: skip
    assert capped.max_sandboxes == 3

    class Uncountable:
        def list(self, labels: object = None) -> list[object]:
            raise AssertionError("a start with no cap listed the sandboxes")

    capacity = Capacity(built, cast(Any, None), cast(Any, Uncountable()))
    capacity.check(need=1000)
    admit(built, cast(Any, Uncountable()), cast(Any, None))
