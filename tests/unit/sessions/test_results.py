"""A structured result's repair run is held to its timeout: one that outlasts
HANGAR_EXCHANGE_REPAIR_TIMEOUT_MINUTES is stopped and the turn records why (the stand-in
hangs on the repair prompt); a schema that cannot be applied is the turn's result_error."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from hangar.blobs.local import LocalBlobs
from hangar.db.sqlite import SqliteDb
from hangar.keys.local import LocalKeys
from hangar.models import SessionState, TurnOutcome
from hangar.sessions.environments import EnvironmentChange
from tests.unit.exchange.test_schemas import Listener
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


def test_a_stored_schema_that_refers_outside_itself_is_the_result_error_and_fetches_nothing(
    world: World,
) -> None:
    """A schema an older hangar stored unchecked (a $ref to a listening URL): the turn ends with
    the schema's result_error, no repair run, nothing fetched, the session IDLE."""
    service = world.service
    listener = Listener()
    try:
        service.new("r", "run: echo one > one.txt", "app", harness="antigravity")
        assert service.wait("r", timeout=60, poll=0.05).outcome is TurnOutcome.EXITED
        session = service.resolve("r")
        world.db.update_session(session.model_copy(update={
            "output_schema": {"$ref": f"{listener.url}/count.json"}}))  # fmt: skip
        service.send("r", "run: hangar-agent result '{\"n\": 1}'")
        turn = service.wait("r", timeout=60, poll=0.05)
        assert turn.outcome is TurnOutcome.EXITED and turn.repair is None, turn
        assert turn.result is None and turn.result_error is not None
        assert turn.result_error.startswith("the output schema cannot be applied")
        assert service.resolve("r").state is SessionState.IDLE
        assert listener.requests == []
    finally:
        listener.close()
