"""The backend's lease on a session's sandbox (``extend``): renewed when a turn starts and by
the reaper's pass once the session's expiry has moved on, never for a sandbox it destroys."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from hangar.models import SessionState, utcnow

from tests.unit.sessions.world import World, start

pytestmark = pytest.mark.sandbox


def _recorded(world: World, monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, datetime]]:
    calls: list[tuple[str, datetime]] = []
    monkeypatch.setattr(world.sandboxes, "extend",
                        lambda sandbox_id, until: calls.append((sandbox_id, until)))  # fmt: skip
    return calls


def test_the_reaper_renews_the_lease_of_a_sandbox_whose_expiry_has_moved_on(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    start(world)
    session = world.service.resolve("demo")
    calls = _recorded(world, monkeypatch)
    later = utcnow() + timedelta(hours=5)
    world.db.update_session(session.model_copy(update={"sandbox_expires_at": later}))
    assert world.service.reap() == []
    assert calls == [(session.sandbox_id, later)]
    assert world.service.get("demo").state is SessionState.IDLE


def test_the_reaper_renews_nothing_it_destroys(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    start(world)
    session = world.service.resolve("demo")
    calls = _recorded(world, monkeypatch)
    world.db.update_session(session.model_copy(update={"sandbox_expires_at": utcnow()}))
    assert world.service.reap() == [session.sandbox_id]
    assert calls == []


def test_a_turn_that_starts_renews_the_lease_to_its_new_expiry(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    start(world)
    before = world.service.resolve("demo").sandbox_expires_at
    calls = _recorded(world, monkeypatch)
    world.service.send("demo", "turn two")
    world.service.wait("demo", timeout=60, poll=0.05)
    session = world.service.resolve("demo")
    assert [sandbox_id for sandbox_id, _ in calls] == [session.sandbox_id]
    assert before is not None and session.sandbox_expires_at is not None
    assert before < calls[0][1] <= session.sandbox_expires_at  # the expiry activation wrote
