"""A structured result's repair run is held to its timeout: one that outlasts
HANGAR_EXCHANGE_REPAIR_TIMEOUT_MINUTES is stopped and the turn records why (the stand-in
hangs on the repair prompt)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from hangar.blobs.local import LocalBlobs
from hangar.db.sqlite import SqliteDb
from hangar.keys.local import LocalKeys
from hangar.models import SessionState, TurnOutcome
from hangar.sessions.environments import EnvironmentChange
from tests.unit.sessions.world import World, make_world

pytestmark = pytest.mark.sandbox

COUNT = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}


@pytest.fixture
def world(tmp_path: Path, db: SqliteDb, blobs: LocalBlobs, keys: LocalKeys,
          remote: Path) -> Iterator[World]:  # fmt: skip
    yield from make_world(tmp_path, db, blobs, keys, remote,
                          exchange_repair_timeout_minutes=1 / 60)  # fmt: skip


def test_a_repair_run_that_outlasts_its_timeout_is_stopped_and_the_turn_says_why(
    world: World,
) -> None:
    service = world.service
    service.environments.update("app", EnvironmentChange(vars={"AGY_STANDIN_HANG_ON":
                                                               "not usable"}))  # fmt: skip
    service.new("r", "run: hangar-agent result '{\"n\": \"x\"}'", "app", harness="antigravity",
                output_schema=COUNT)  # fmt: skip
    turn = service.wait("r", timeout=60, poll=0.05)
    assert turn.finished_at is not None and turn.outcome is TurnOutcome.EXITED, turn
    assert turn.repair is not None and turn.repair.exit_code == 130
    assert turn.result is None and turn.result_error is not None
    assert "does not match the schema" in turn.result_error
    assert "the repair turn was stopped" in turn.result_error
    assert service.resolve("r").state is SessionState.IDLE
