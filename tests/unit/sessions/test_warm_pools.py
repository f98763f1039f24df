"""Warm pools on a schedule (:mod:`hangar.sessions.pools`): an environment's pool kept at its
size within its hours and at none outside them, by the ``pool`` ticks and the reaper's pass,
over a recording backend with pools. Time is injected (the keeper's clock), never waited for;
ticks are delivered by hand (the fake ticks port of :mod:`.world`, not started)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from hangar.blobs.local import LocalBlobs
from hangar.config import Settings
from hangar.db.sqlite import SqliteDb
from hangar.errors import InvalidInput
from hangar.keys.local import LocalKeys
from hangar.models import Environment, TickDue
from hangar.sandboxes import PoolState, SandboxCapabilities, SandboxInfo
from hangar.sessions.environments import EnvironmentChange
from hangar.sessions.service import SessionService

from tests.unit.sessions.world import FakeTicks

HOURS = "Mon-Fri 08:00-20:00 UTC"
MONDAY = datetime(2026, 12, 7, tzinfo=UTC)  # a Monday


class PoolsOnly:
    """A backend with warm pools and no sandboxes: it remembers each pool's replicas and
    counts the calls of ``keep_pool``."""

    capabilities = SandboxCapabilities(images=True, pools=True)

    def __init__(self) -> None:
        self.replicas: dict[str, int] = {}
        self.images: dict[str, str | None] = {}
        self.calls = 0

    def keep_pool(self, pool: str, *, image: str | None, replicas: int) -> PoolState:
        self.calls += 1
        self.replicas[pool] = replicas
        self.images[pool] = image
        return PoolState(pool=pool, replicas=replicas, ready=replicas)

    def list(self, labels: Any = None) -> list[SandboxInfo]:
        return []


class Clock:
    def __init__(self, now: datetime) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now


@pytest.fixture
def backend() -> PoolsOnly:
    return PoolsOnly()


@pytest.fixture
def ticks() -> FakeTicks:
    return FakeTicks()


@pytest.fixture
def clock() -> Clock:
    return Clock(MONDAY.replace(hour=7))


@pytest.fixture
def service(settings: Settings, db: SqliteDb, blobs: LocalBlobs, keys: LocalKeys,
            backend: PoolsOnly, ticks: FakeTicks, clock: Clock) -> Iterator[SessionService]:  # fmt: skip
    made = SessionService(settings, db, blobs, keys, backend, ticks)  # type: ignore[arg-type]
    made.pools.clock = clock
    yield made


def _add(service: SessionService, remote: Path, **fields: Any) -> Environment:
    env = service.environments.add("app", str(remote), image="team/agent:1", **fields)
    service.pools.changed(None, env)
    return env


def _deliver(service: SessionService, ticks: FakeTicks, key: str) -> None:
    due = ticks.due.pop(key)
    service.handle_tick(due)


def test_a_pool_is_scaled_up_at_the_start_of_its_hours_and_to_zero_at_their_end(
    service: SessionService, backend: PoolsOnly, ticks: FakeTicks, clock: Clock, remote: Path
) -> None:
    _add(service, remote, warm_pool=2, warm_pool_hours=HOURS)
    assert backend.replicas == {"app": 0} and backend.images == {"app": "team/agent:1"}
    assert ticks.due["pool:app"].due_at == MONDAY.replace(hour=8)
    assert ticks.due["pool:app"].payload == {"environment": "app"}

    clock.now = MONDAY.replace(hour=8)
    _deliver(service, ticks, "pool:app")
    assert backend.replicas == {"app": 2}
    assert ticks.due["pool:app"].due_at == MONDAY.replace(hour=20)

    clock.now = MONDAY.replace(hour=20, second=3)  # a tick is never early, sometimes late
    _deliver(service, ticks, "pool:app")
    assert backend.replicas == {"app": 0}
    assert ticks.due["pool:app"].due_at == MONDAY.replace(day=8, hour=8)


def test_a_lost_boundary_tick_and_a_wrong_count_are_repaired_by_the_reapers_pass(
    service: SessionService, backend: PoolsOnly, ticks: FakeTicks, clock: Clock, remote: Path
) -> None:
    _add(service, remote, warm_pool=3, warm_pool_hours=HOURS)
    del ticks.due["pool:app"]  # the 08:00 tick is lost
    clock.now = MONDAY.replace(hour=9, minute=30)
    backend.replicas["app"] = 0
    service.handle_tick(TickDue(key="reap", kind="reap", due_at=clock.now, payload={}))
    assert backend.replicas == {"app": 3}
    assert ticks.due["pool:app"].due_at == MONDAY.replace(hour=20)
    assert "reap" in ticks.due  # the reaper goes on


def test_a_pool_without_hours_is_kept_always_and_has_no_tick(
    service: SessionService, backend: PoolsOnly, ticks: FakeTicks, remote: Path
) -> None:
    _add(service, remote, warm_pool=1)
    assert backend.replicas == {"app": 1} and "pool:app" not in ticks.due


def test_an_environment_with_no_warm_pool_of_its_own_leaves_its_pool_alone(
    service: SessionService, backend: PoolsOnly, ticks: FakeTicks, remote: Path
) -> None:
    _add(service, remote, warm_pool_hours=HOURS)
    service.handle_tick(TickDue(key="reap", kind="reap", due_at=MONDAY, payload={}))
    assert backend.calls == 0 and "pool:app" not in ticks.due


def test_a_warm_pool_set_to_zero_or_deleted_scales_the_pool_to_zero_and_cancels_its_tick(
    service: SessionService, backend: PoolsOnly, ticks: FakeTicks, clock: Clock, remote: Path
) -> None:
    before = _add(service, remote, warm_pool=2, warm_pool_hours=HOURS)
    clock.now = MONDAY.replace(hour=10)
    service.pools.changed(before, before)
    assert backend.replicas == {"app": 2}
    after = service.environments.update("app", EnvironmentChange(warm_pool=0))
    service.pools.changed(before, after)
    assert backend.replicas == {"app": 0} and "pool:app" not in ticks.due
    again = service.environments.update("app", EnvironmentChange(warm_pool=1))
    service.pools.changed(after, again)
    assert backend.replicas == {"app": 1} and "pool:app" in ticks.due
    service.pools.release(again)
    assert backend.replicas == {"app": 0} and "pool:app" not in ticks.due


def test_a_tick_for_a_deleted_environment_does_nothing(
    service: SessionService, backend: PoolsOnly, ticks: FakeTicks, remote: Path
) -> None:
    _add(service, remote, warm_pool=2, warm_pool_hours=HOURS)
    calls = backend.calls
    due = ticks.due["pool:app"]
    service.environments.delete("app")
    service.handle_tick(due)
    assert backend.calls == calls and "pool:app" not in ticks.due


def test_prebuilt_environments_get_their_pools_at_start_and_an_unknown_name_is_a_warning(
    settings: Settings, db: SqliteDb, blobs: LocalBlobs, keys: LocalKeys, backend: PoolsOnly,
    ticks: FakeTicks, remote: Path, caplog: pytest.LogCaptureFixture,
) -> None:  # fmt: skip
    built = settings.replace(prebuild_environments="app, nosuch")
    service = SessionService(built, db, blobs, keys, backend, ticks)  # type: ignore[arg-type]
    service.environments.add("app", str(remote), image="team/agent:1")
    service.environments.add("other", str(remote), image="team/agent:1")
    assert service.prebuild() == ["app"]
    assert backend.replicas == {"app": 0} and backend.images == {"app": "team/agent:1"}
    assert "HANGAR_PREBUILD_ENVIRONMENTS names no environment nosuch" in caplog.text
    assert service.pools.unknown_prebuilds() == ["nosuch"]


def test_bad_warm_pool_hours_or_sizes_are_invalid_input_naming_the_field_and_change_nothing(
    service: SessionService, remote: Path
) -> None:
    with pytest.raises(InvalidInput) as bad:
        service.environments.add("app", str(remote), warm_pool=1, warm_pool_hours="Mox 08:00-09:00 UTC")
    assert bad.value.data["field"] == "warm_pool_hours"
    with pytest.raises(InvalidInput) as negative:
        service.environments.add("app", str(remote), warm_pool=-1)
    assert negative.value.data["field"] == "warm_pool"
    assert service.environments.list() == []
    env = service.environments.add("app", str(remote), warm_pool_hours="mon-fri 08:00-20:00 utc")
    assert env.warm_pool_hours == HOURS  # kept in its canonical spelling
