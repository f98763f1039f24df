"""The conformance suite of the ticks port: every backend runs it.

Subclass :class:`TicksConformance` in a test module and give it two fixtures: ``db``, a fresh
db, and ``ticks_factory``, a callable that returns a new, unstarted ticker on that db each
time it is called (a second call stands for a restart, or another process). Give the tickers
short times, so the suite runs in seconds::

    class TestLocalTicks(TicksConformance):
        @pytest.fixture
        def db(self, tmp_path: Path) -> Iterator[Db]:
            opened = SqliteDb(tmp_path / "hangar.db")
            yield opened
            opened.close()

        @pytest.fixture
        def ticks_factory(self, db: Db) -> Callable[[], Ticks]:
            return lambda: LocalTicks(db, poll_seconds=0.05, retry_seconds=0.1)

Tickers made through the suite are stopped after each test. Waits are bounded (at most
:data:`WAIT` seconds each); the only timing the suite asserts is "not before ``due_at``". Due
times are a fraction of a second ahead, so a test takes about that long.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
import pytest

from hangar.db import Db
from hangar.models import TickDue
from hangar.ticks import Ticks

WAIT = 5.0
"""The longest any test waits for something that should happen."""

_STEP = 0.01
FAR = datetime(9999, 1, 1, tzinfo=UTC)
"""Later than any due-time: ``db.list_due(FAR)`` lists them all."""


def soon(seconds: float) -> datetime:
    """Now plus ``seconds`` (negative for the past), in UTC."""
    return datetime.now(UTC) + timedelta(seconds=seconds)


def eventually(predicate: Callable[[], bool], timeout: float = WAIT) -> bool:
    """Whether ``predicate`` became true within ``timeout`` seconds (checked every 10 ms)."""
    pause = threading.Event()
    deadline = datetime.now(UTC) + timedelta(seconds=timeout)
    while not predicate():
        if datetime.now(UTC) >= deadline:
            return False
        pause.wait(_STEP)
    return True


@dataclass(frozen=True)
class Delivery:
    tick: TickDue
    arrived: datetime


class Recorder:
    """A tick handler that records each delivery and when it arrived, then calls ``react``
    (if given) with the tick and how many deliveries there have been; ``react`` may raise."""

    def __init__(self, react: Callable[[TickDue, int], None] | None = None) -> None:
        self._react = react
        self._changed = threading.Condition()
        self._deliveries: list[Delivery] = []

    def __call__(self, tick: TickDue) -> None:
        arrived = datetime.now(UTC)
        with self._changed:
            self._deliveries.append(Delivery(tick, arrived))
            count = len(self._deliveries)
            self._changed.notify_all()
        if self._react is not None:
            self._react(tick, count)

    @property
    def deliveries(self) -> list[Delivery]:
        with self._changed:
            return list(self._deliveries)

    @property
    def keys(self) -> list[str]:
        return [d.tick.key for d in self.deliveries]

    def wait_for(self, predicate: Callable[[list[Delivery]], bool], timeout: float = WAIT) -> bool:
        """Whether the deliveries satisfied ``predicate`` within ``timeout`` seconds."""
        with self._changed:
            return self._changed.wait_for(lambda: predicate(self._deliveries), timeout)

    def wait_count(self, n: int, timeout: float = WAIT) -> bool:
        return self.wait_for(lambda ds: len(ds) >= n, timeout)


class TicksConformance:
    """Behaviour every :class:`~hangar.ticks.Ticks` backend must show. Needs the fixtures
    ``db`` and ``ticks_factory`` (see the module docstring)."""

    @pytest.fixture
    def tickers(self, ticks_factory: Callable[[], Ticks]) -> Iterator[Callable[[], Ticks]]:
        """``ticks_factory``, with every ticker it made stopped after the test."""
        made: list[Ticks] = []

        def make() -> Ticks:
            ticker = ticks_factory()
            made.append(ticker)
            return ticker

        yield make
        for ticker in made:
            ticker.stop()

    @staticmethod
    def _settled(db: Db) -> bool:
        return db.list_due(FAR) == []

    # ------------------------------------------------------------------------ delivery

    def test_a_scheduled_tick_is_delivered_once_at_or_after_its_due_time(
        self, db: Db, tickers: Callable[[], Ticks]
    ) -> None:
        ticker, seen = tickers(), Recorder()
        ticker.start(seen)
        due = soon(0.2)
        ticker.schedule("idle:ses-1", "idle", due, {"session_id": "ses-1", "n": 2})
        assert seen.wait_count(1)
        assert eventually(lambda: self._settled(db))
        ticker.stop()
        [delivery] = seen.deliveries
        assert delivery.arrived >= due
        tick = delivery.tick
        assert (tick.key, tick.kind, tick.due_at) == ("idle:ses-1", "idle", due)
        assert tick.payload == {"session_id": "ses-1", "n": 2}

    def test_a_tick_without_a_payload_is_delivered_with_an_empty_one(
        self, tickers: Callable[[], Ticks]
    ) -> None:
        ticker, seen = tickers(), Recorder()
        ticker.start(seen)
        ticker.schedule("reap", "reap", soon(0))
        assert seen.wait_count(1)
        assert seen.deliveries[0].tick.payload == {}

    def test_a_tick_already_past_due_is_delivered_at_once_when_started(
        self, tickers: Callable[[], Ticks]
    ) -> None:
        ticker, seen = tickers(), Recorder()
        due = soon(-60)
        ticker.schedule("watch:ses-1", "turn_watch", due)
        ticker.start(seen)
        assert seen.wait_count(1)
        assert seen.deliveries[0].tick.due_at == due

    def test_a_naive_due_at_counts_as_utc(self, tickers: Callable[[], Ticks]) -> None:
        ticker, seen = tickers(), Recorder()
        ticker.start(seen)
        due = soon(0.1)
        ticker.schedule("idle:ses-1", "idle", due.replace(tzinfo=None))
        assert seen.wait_count(1)
        assert seen.deliveries[0].arrived >= due

    def test_a_tick_scheduled_through_another_instance_on_the_same_db_is_delivered(
        self, tickers: Callable[[], Ticks]
    ) -> None:
        running, other, seen = tickers(), tickers(), Recorder()
        running.start(seen)
        due = soon(0.1)
        other.schedule("idle:ses-1", "idle", due)
        assert seen.wait_count(1)
        assert seen.deliveries[0].arrived >= due

    def test_many_keys_are_all_delivered_each_at_or_after_its_due_time(
        self, db: Db, tickers: Callable[[], Ticks]
    ) -> None:
        ticker, seen = tickers(), Recorder()
        ticker.start(seen)
        due = {f"idle:ses-{n}": soon(-0.5 + n * 0.02) for n in range(40)}
        for key, at in due.items():
            ticker.schedule(key, "idle", at, {"n": key})
        assert seen.wait_for(lambda ds: {d.tick.key for d in ds} == set(due))
        assert eventually(lambda: self._settled(db))
        ticker.stop()
        for delivery in seen.deliveries:
            assert delivery.arrived >= due[delivery.tick.key]
            assert delivery.tick.payload == {"n": delivery.tick.key}

    # ------------------------------------------------------------------------ moving and cancelling

    def test_moving_a_key_later_delivers_it_only_at_the_new_time(
        self, db: Db, tickers: Callable[[], Ticks]
    ) -> None:
        ticker, seen = tickers(), Recorder()
        ticker.schedule("idle:ses-1", "idle", soon(0.05), {"n": 1})
        moved = soon(0.3)
        ticker.schedule("idle:ses-1", "idle", moved, {"n": 2})
        ticker.start(seen)
        assert seen.wait_count(1)
        assert eventually(lambda: self._settled(db))
        ticker.stop()
        [delivery] = seen.deliveries
        assert delivery.arrived >= moved
        assert (delivery.tick.due_at, delivery.tick.payload) == (moved, {"n": 2})

    def test_moving_a_key_earlier_delivers_it_at_the_new_time(
        self, db: Db, tickers: Callable[[], Ticks]
    ) -> None:
        ticker, seen = tickers(), Recorder()
        ticker.start(seen)
        ticker.schedule("idle:ses-1", "idle", soon(3600))
        moved = soon(0.1)
        ticker.schedule("idle:ses-1", "checkpoint", moved)
        assert seen.wait_count(1)
        assert eventually(lambda: self._settled(db))
        ticker.stop()
        [delivery] = seen.deliveries
        assert delivery.arrived >= moved
        assert (delivery.tick.kind, delivery.tick.due_at) == ("checkpoint", moved)

    def test_a_cancelled_tick_is_not_delivered(
        self, db: Db, tickers: Callable[[], Ticks]
    ) -> None:
        ticker, seen = tickers(), Recorder()
        ticker.start(seen)
        ticker.schedule("idle:ses-1", "idle", soon(0.3))
        ticker.schedule("marker", "idle", soon(0.4))
        ticker.cancel("idle:ses-1")
        # A later tick arriving shows the cancelled one's time has passed.
        assert seen.wait_for(lambda ds: any(d.tick.key == "marker" for d in ds))
        ticker.stop()
        assert seen.keys == ["marker"]
        assert self._settled(db)

    def test_cancel_is_idempotent_and_ignores_an_unknown_key(
        self, db: Db, tickers: Callable[[], Ticks]
    ) -> None:
        ticker = tickers()
        ticker.schedule("idle:ses-1", "idle", soon(3600))
        ticker.cancel("idle:ses-1")
        ticker.cancel("idle:ses-1")
        ticker.cancel("never-scheduled")
        assert self._settled(db)

    # ------------------------------------------------------------------------ restarts

    def test_a_tick_that_came_due_while_no_ticker_ran_is_delivered_after_a_restart(
        self, db: Db, tickers: Callable[[], Ticks]
    ) -> None:
        first, before = tickers(), Recorder()
        first.start(before)
        first.stop()
        first.schedule("idle:ses-1", "idle", soon(-1))
        due = soon(0.1)
        first.schedule("idle:ses-2", "idle", due)
        second, after = tickers(), Recorder()
        second.start(after)
        assert after.wait_for(lambda ds: {d.tick.key for d in ds} == {"idle:ses-1", "idle:ses-2"})
        assert eventually(lambda: self._settled(db))
        second.stop()
        assert before.deliveries == []
        [late] = [d for d in after.deliveries if d.tick.key == "idle:ses-2"]
        assert late.arrived >= due

    def test_stop_ends_delivery_and_is_idempotent(self, tickers: Callable[[], Ticks]) -> None:
        stopped, before = tickers(), Recorder()
        stopped.start(before)
        stopped.stop()
        stopped.stop()
        stopped.schedule("idle:ses-1", "idle", soon(0))
        # Another ticker delivering it shows it was due and left for the taking.
        other, after = tickers(), Recorder()
        other.start(after)
        assert after.wait_count(1)
        other.stop()
        assert before.deliveries == []
        assert after.keys == ["idle:ses-1"]

    def test_stop_on_a_ticker_never_started_does_nothing(
        self, tickers: Callable[[], Ticks]
    ) -> None:
        tickers().stop()

    # ------------------------------------------------------------------------ handlers

    def test_a_handler_that_raises_gets_the_tick_again_later(
        self, db: Db, tickers: Callable[[], Ticks]
    ) -> None:
        def fail_first(tick: TickDue, count: int) -> None:
            if count == 1:
                raise RuntimeError("the first delivery fails")

        ticker, seen = tickers(), Recorder(fail_first)
        ticker.start(seen)
        due = soon(0.05)
        ticker.schedule("idle:ses-1", "idle", due, {"n": 1})
        assert seen.wait_count(2)
        assert eventually(lambda: self._settled(db))
        ticker.stop()
        first, second = seen.deliveries
        assert first.tick == second.tick
        assert second.arrived >= first.arrived >= due

    def test_a_handler_that_reschedules_its_own_key_keeps_the_new_due_time(
        self, db: Db, tickers: Callable[[], Ticks]
    ) -> None:
        ticker = tickers()
        later = soon(3600)

        def reschedule(tick: TickDue, count: int) -> None:
            ticker.schedule(tick.key, tick.kind, later, {"n": 2})

        seen = Recorder(reschedule)
        ticker.start(seen)
        ticker.schedule("idle:ses-1", "idle", soon(0), {"n": 1})
        assert seen.wait_count(1)
        ticker.stop()  # the handler has returned and its tick is settled
        [kept] = db.list_due(FAR)
        assert (kept.key, kept.due_at, kept.payload) == ("idle:ses-1", later, {"n": 2})
        assert len(seen.deliveries) == 1

    def test_a_key_cancelled_and_scheduled_again_while_its_handler_ran_keeps_the_new_time(
        self, db: Db, tickers: Callable[[], Ticks]
    ) -> None:
        ticker = tickers()
        later = soon(3600)

        def cancel_and_schedule_again(tick: TickDue, count: int) -> None:
            # The new due-time may start over at the version the handled one had.
            ticker.cancel(tick.key)
            ticker.schedule(tick.key, tick.kind, later, {"n": 2})

        seen = Recorder(cancel_and_schedule_again)
        ticker.start(seen)
        ticker.schedule("idle:ses-1", "idle", soon(0), {"n": 1})
        assert seen.wait_count(1)
        ticker.stop()
        [kept] = db.list_due(FAR)
        assert (kept.key, kept.due_at, kept.payload) == ("idle:ses-1", later, {"n": 2})

    def test_a_handler_that_reschedules_its_own_key_soon_gets_it_again_at_the_new_time(
        self, db: Db, tickers: Callable[[], Ticks]
    ) -> None:
        ticker = tickers()
        again: list[datetime] = []

        def reschedule_once(tick: TickDue, count: int) -> None:
            if count == 1:
                again.append(soon(0.1))
                ticker.schedule(tick.key, tick.kind, again[0], {"n": 2})

        seen = Recorder(reschedule_once)
        ticker.start(seen)
        ticker.schedule("checkpoint:ses-1", "checkpoint", soon(0), {"n": 1})
        assert seen.wait_count(2)
        assert eventually(lambda: self._settled(db))
        ticker.stop()
        first, second = seen.deliveries
        assert first.tick.payload == {"n": 1}
        assert second.tick.payload == {"n": 2}
        assert second.arrived >= again[0]

    def test_ticks_are_handed_over_as_the_records_the_db_keeps(
        self, db: Db, tickers: Callable[[], Ticks]
    ) -> None:
        ticker = tickers()
        ticker.schedule("idle:ses-1", "idle", soon(-1), {"nested": {"a": [1, 2]}})
        [stored] = db.list_due(FAR)
        seen = Recorder()
        ticker.start(seen)
        assert seen.wait_count(1)
        assert seen.deliveries[0].tick == stored
